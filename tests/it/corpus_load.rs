//! Loaders on good and broken inputs, through `Corpus::load` on real files in a temporary directory.

use std::path::Path;

use tableseek::corpus::{
    parse_text, serialize, Corpus, LoadOptions, LoadReport, SourceFormat, TextFormat,
};

fn write(dir: &Path, name: &str, contents: impl AsRef<[u8]>) {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, contents).unwrap();
}

fn load(dir: &Path) -> (Corpus, LoadReport) {
    Corpus::load(dir, &LoadOptions::default()).unwrap()
}

fn cells(rows: &[&[&str]]) -> Vec<Vec<String>> {
    rows.iter()
        .map(|r| r.iter().map(|c| c.to_string()).collect())
        .collect()
}

#[test]
fn csv_with_quotes_and_line_breaks() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "a.csv",
        "name,note\r\n\"Smith, J\",\"said \"\"hi\"\"\nthen left\"\r\nDoe,\r\n",
    );
    let (corpus, report) = load(dir.path());
    assert!(report.skipped.is_empty(), "{:?}", report.skipped);
    let t = corpus.table(0);
    assert_eq!(t.id, "a.csv");
    assert_eq!(t.source_format, SourceFormat::Csv);
    assert_eq!(t.header, ["name", "note"]);
    assert_eq!(
        t.rows,
        cells(&[&["Smith, J", "said \"hi\"\nthen left"], &["Doe", ""]])
    );
}

#[test]
fn a_broken_csv_line_is_reported_with_its_number_and_the_rest_loads() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "bad.csv", "a,b\n1,2\n3,\"never closed\n4,5\n");
    write(dir.path(), "good.csv", "a,b\n1,2\n");
    let (corpus, report) = load(dir.path());
    assert_eq!(corpus.len(), 2);
    let bad = corpus.index_of("bad.csv").unwrap();
    // Only the line that opened the quote is lost (it used to cost the whole file).
    assert_eq!(corpus.table(bad).rows, cells(&[&["1", "2"], &["4", "5"]]));
    assert_eq!(report.skipped.len(), 1);
    assert!(report.skipped[0].path.ends_with("bad.csv"));
    assert_eq!(
        report.skipped[0].reason,
        "line 3: unterminated quoted field; the line was dropped"
    );
}

#[test]
fn tabfact_layout_is_detected_by_content_not_name() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "1-1.html.csv",
        "year#team#points\n1998#a, b#1,000\n",
    );
    write(dir.path(), "1-2.html.csv", "year,team\n1998,\"a#b\"\n");
    let (corpus, report) = load(dir.path());
    assert!(report.skipped.is_empty());
    let hash = corpus.table(corpus.index_of("1-1.html.csv").unwrap());
    assert_eq!(hash.source_format, SourceFormat::Tabfact);
    assert_eq!(hash.rows, cells(&[&["1998", "a, b", "1,000"]]));
    let comma = corpus.table(corpus.index_of("1-2.html.csv").unwrap());
    assert_eq!(comma.source_format, SourceFormat::Csv);
    assert_eq!(comma.rows, cells(&[&["1998", "a#b"]]));
}

#[test]
fn tsv_keeps_quotes_literal() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "t.tsv", "a\tb\n\"x\t5 \"in\"\n");
    let (corpus, _) = load(dir.path());
    let t = corpus.table(0);
    assert_eq!(t.source_format, SourceFormat::Tsv);
    assert_eq!(t.rows, cells(&[&["\"x", "5 \"in\""]]));
}

#[test]
fn markdown_files_with_several_tables_and_a_broken_one() {
    let dir = tempfile::tempdir().unwrap();
    let text = "# Notes\n\n| a | b |\n|---|---|\n| 1 | x \\| y |\n\nprose\n\n| c | d |\n|---|---|---|\n| 2 | 3 |\n\n| e |\n|:-:|\n| 4 |\n";
    write(dir.path(), "doc.md", text);
    write(dir.path(), "none.md", "just prose, | no table\n");
    let (corpus, report) = load(dir.path());
    let ids: Vec<&str> = corpus.tables().iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["doc.md#0", "doc.md#1"]);
    assert_eq!(corpus.table(0).rows, cells(&[&["1", "x | y"]]));
    assert_eq!(corpus.table(1).header, ["e"]);
    let reasons: Vec<&str> = report.skipped.iter().map(|s| s.reason.as_str()).collect();
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert!(
        reasons[0].starts_with("line 10: delimiter row has 3 cells"),
        "{reasons:?}"
    );
    assert!(reasons[1].contains("no Markdown pipe table"), "{reasons:?}");
}

#[test]
fn html_spans_headers_and_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let html = r#"<html><head><title>Page title</title></head><body>
        <table><caption>Secret caption</caption>
        <thead><tr><th>city</th><th colspan="2">population</th></tr></thead>
        <tbody><tr><td rowspan="2">Canberra</td><td>1</td><td>2</td></tr>
        <tr><td>3</td><td>4<br>5</td></tr></tbody></table>
        </body></html>"#;
    write(dir.path(), "sub/page.html", html);
    write(dir.path(), "empty.html", "<p>no tables here</p>");
    let (corpus, report) = load(dir.path());
    assert_eq!(corpus.len(), 1);
    let t = corpus.table(0);
    assert_eq!(t.id, "sub/page.html");
    assert_eq!(t.header, ["city", "population", "population"]);
    assert_eq!(
        t.rows,
        cells(&[&["Canberra", "1", "2"], &["Canberra", "3", "4 5"]])
    );
    assert_eq!(t.meta.caption.as_deref(), Some("Secret caption"));
    assert_eq!(t.meta.title.as_deref(), Some("Page title"));
    // Metadata is kept for evaluation but is not part of the searchable text.
    assert!(!corpus.text(0).contains("Secret"));
    assert!(!corpus.text(0).contains("Page title"));
    assert_eq!(report.skipped.len(), 1);
    assert!(report.skipped[0].reason.contains("no <table>"));
}

#[test]
fn json_and_jsonl_tables() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "one.json",
        r#"{"header": ["a", "n"], "rows": [["x", 1.5], ["y", null]], "caption": "c"}"#,
    );
    write(
        dir.path(),
        "many.jsonl",
        concat!(
            "{\"id\": \"t1\", \"header\": [\"a\"], \"rows\": [[\"1\"]]}\n",
            "{not json}\n",
            "\n",
            "{\"id\": \"t2\", \"rows\": [[\"2\"]]}\n",
            "{\"id\": \"t3\", \"header\": [\"b\"], \"rows\": [[true]]}\n",
        ),
    );
    write(
        dir.path(),
        "broken.json",
        "{\"header\": [\"a\"], \"rows\": [[\"1\"]\n",
    );
    let (corpus, report) = load(dir.path());
    let ids: Vec<&str> = corpus.tables().iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["many.jsonl#t1", "many.jsonl#t3", "one.json"]);
    let one = corpus.table(2);
    assert_eq!(one.source_format, SourceFormat::Json);
    assert_eq!(one.rows, cells(&[&["x", "1.5"], &["y", ""]]));
    assert_eq!(one.meta.caption.as_deref(), Some("c"));
    assert_eq!(corpus.table(1).rows, cells(&[&["true"]]));
    let mut reasons: Vec<String> = report
        .skipped
        .iter()
        .map(|s| {
            format!(
                "{}: {}",
                s.path.file_name().unwrap().to_string_lossy(),
                s.reason
            )
        })
        .collect();
    reasons.sort();
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert!(
        reasons[0].starts_with("broken.json: line 2: invalid JSON"),
        "{reasons:?}"
    );
    assert!(
        reasons[1].starts_with("many.jsonl: line 2: invalid JSON"),
        "{reasons:?}"
    );
    assert_eq!(reasons[2], "many.jsonl: line 4: missing \"header\"");
}

#[test]
fn legacy_8bit_and_utf16_files_are_transcoded_and_recorded() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "latin1.csv",
        b"name,city\nJos\xe9,Canberra\nFran\xe7oise,N\xeemes\n",
    );
    let mut utf16 = vec![0xFF, 0xFE];
    utf16.extend(
        "name,city\nAnna,café\n"
            .encode_utf16()
            .flat_map(u16::to_le_bytes),
    );
    write(dir.path(), "utf16.csv", &utf16);
    let (corpus, report) = load(dir.path());
    assert_eq!(corpus.len(), 2, "{:?}", report.skipped);
    let latin1 = corpus.index_of("latin1.csv").unwrap();
    assert_eq!(
        corpus.table(latin1).rows,
        cells(&[&["José", "Canberra"], &["Françoise", "Nîmes"]])
    );
    let utf16_table = corpus.index_of("utf16.csv").unwrap();
    assert_eq!(corpus.table(utf16_table).rows, cells(&[&["Anna", "café"]]));
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    let transcoded: Vec<(String, &str)> = report
        .transcoded
        .iter()
        .map(|(path, encoding)| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, encoding.as_str())
        })
        .collect();
    assert_eq!(
        transcoded,
        [
            ("latin1.csv".to_string(), "windows-1252"),
            ("utf16.csv".to_string(), "UTF-16LE")
        ]
    );
}

#[test]
fn a_binary_file_is_skipped_as_binary_and_the_rest_loads() {
    let dir = tempfile::tempdir().unwrap();
    let mut binary: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
    binary[..4].copy_from_slice(b"PK\x03\x04");
    write(dir.path(), "archive.csv", &binary);
    write(dir.path(), "real.csv", "a,b\n1,2\n");
    let (corpus, report) = load(dir.path());
    assert_eq!(corpus.len(), 1);
    assert_eq!(report.skipped.len(), 1);
    assert!(report.skipped[0].path.ends_with("archive.csv"));
    assert!(
        report.skipped[0].reason.contains("binary"),
        "{}",
        report.skipped[0].reason
    );
}

#[test]
fn empty_tables_are_counted_and_skipped() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "header-only.csv", "a,b\n");
    write(dir.path(), "blank.csv", "");
    write(dir.path(), "blank-cells.csv", "a,b\n , \n");
    write(dir.path(), "real.csv", "a,b\n1,2\n");
    write(dir.path(), "README.txt", "not a table");
    let (corpus, report) = load(dir.path());
    assert_eq!(corpus.len(), 1);
    assert_eq!(report.empty_tables, 3);
    assert!(report.skipped.is_empty());
    assert_eq!(report.ignored.len(), 1);
}

#[test]
fn huge_cell_and_very_wide_row_load() {
    let dir = tempfile::tempdir().unwrap();
    let big_cell = "x".repeat(50 << 20);
    write(dir.path(), "big.csv", format!("a,b\n{big_cell},canberra\n"));
    let width = 100_000;
    let header: Vec<String> = (0..width).map(|i| format!("c{i}")).collect();
    let row: Vec<String> = (0..width).map(|i| i.to_string()).collect();
    write(
        dir.path(),
        "wide.csv",
        format!("{}\n{}\n", header.join(","), row.join(",")),
    );
    let (corpus, report) = load(dir.path());
    assert!(report.skipped.is_empty());
    let big = corpus.table(corpus.index_of("big.csv").unwrap());
    assert_eq!(big.rows[0][0].len(), 50 << 20);
    let wide = corpus.table(corpus.index_of("wide.csv").unwrap());
    assert_eq!(wide.header.len(), width);
    assert_eq!(wide.rows[0][width - 1], (width - 1).to_string());
}

#[test]
fn files_over_the_size_limit_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.csv", "a,b\n1,2\n");
    let opts = LoadOptions::default().max_file_bytes(4);
    let (corpus, report) = Corpus::load(dir.path(), &opts).unwrap();
    assert!(corpus.is_empty());
    assert!(report.skipped[0].reason.contains("over the 4-byte limit"));
}

#[test]
fn load_order_and_ids_are_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["b.csv", "a/z.csv", "a/b.csv", "c.csv"] {
        write(dir.path(), name, "h\nv\n");
    }
    let (first, _) = load(dir.path());
    let (second, _) = load(dir.path());
    let ids = |c: &Corpus| c.tables().iter().map(|t| t.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&first), ["a/b.csv", "a/z.csv", "b.csv", "c.csv"]);
    assert_eq!(ids(&first), ids(&second));
}

#[test]
fn missing_directory_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    assert!(Corpus::load(&dir.path().join("nope"), &LoadOptions::default()).is_err());
}

/// `../shared` beside the repository, or `TABLESEEK_SHARED` when the checkout lives elsewhere.
fn shared_dir() -> Option<std::path::PathBuf> {
    let dir = crate::common::shared_dir();
    dir.join("data/tabfact/tables").is_dir().then_some(dir)
}

#[test]
fn tabfact_tables_all_load() {
    let Some(shared) = shared_dir() else {
        eprintln!("skipping: ../shared/data/tabfact/tables not found (set TABLESEEK_SHARED)");
        return;
    };
    let (corpus, report) = load(&shared.join("data/tabfact/tables"));
    assert_eq!(corpus.len(), 1695);
    assert!(report.skipped.is_empty(), "{:?}", report.skipped);
    assert_eq!(report.empty_tables, 0);
    // Tables parsed lazily from the searchable text equal a direct parse of each file, and the text
    // is their CSV serialization.
    for (i, table) in corpus.tables().iter().enumerate() {
        let raw = std::fs::read_to_string(&table.meta.path).unwrap();
        let direct = parse_text(&raw, TextFormat::Csv).unwrap().remove(0);
        assert_eq!(table.header, direct.header, "{}", table.id);
        assert_eq!(table.rows, direct.rows, "{}", table.id);
        assert_eq!(
            corpus.text(i),
            serialize(table, TextFormat::Csv),
            "{}",
            table.id
        );
    }
}

#[test]
fn lazily_parsed_tables_equal_a_direct_parse() {
    let dir = tempfile::tempdir().unwrap();
    let files = [
        (
            "crlf.csv",
            "a,b\r\n\"x,\"\"y\"\"\",2\r\n\r\n\"\"\r\nragged,row,more\r\n",
            SourceFormat::Csv,
        ),
        ("hash.html.csv", "a#b\n1,5#\"q\n", SourceFormat::Tabfact),
        ("tabs.tsv", "a\tb\n\"1\t2,3\n", SourceFormat::Tsv),
    ];
    for (name, text, _) in files {
        write(dir.path(), name, text);
    }
    let (corpus, report) = load(dir.path());
    assert!(report.skipped.is_empty());
    for (name, text, format) in files {
        let i = corpus.index_of(name).unwrap();
        assert_eq!(corpus.id(i), name);
        let t = corpus.table(i);
        assert_eq!(t.source_format, format);
        assert!(t.meta.path.ends_with(name));
        let (header, rows) = match format {
            SourceFormat::Csv => {
                let direct = parse_text(text, TextFormat::Csv).unwrap().remove(0);
                (direct.header, direct.rows)
            }
            SourceFormat::Tabfact => (
                vec!["a".to_string(), "b".to_string()],
                vec![vec!["1,5".to_string(), "\"q".to_string()]],
            ),
            _ => (
                vec!["a".to_string(), "b".to_string()],
                vec![vec!["\"1".to_string(), "2,3".to_string()]],
            ),
        };
        assert_eq!(t.header, header, "{name}");
        assert_eq!(t.rows, rows, "{name}");
        assert_eq!(corpus.text(i), serialize(t, TextFormat::Csv), "{name}");
    }
}
