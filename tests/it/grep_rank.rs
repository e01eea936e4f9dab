//! The grep scorer, ranking, previews, and the `grep`/`corpus` commands end to end.

use std::process::Command;

use tableseek::corpus::{Corpus, Serialization, SourceFormat, Table, TableMeta, TextFormat};
use tableseek::grep::{preview, rank, Evidence, PatternSet, PreviewOptions};

fn table(id: &str, header: &[&str], rows: &[&[&str]]) -> Table {
    Table {
        id: id.into(),
        source_format: SourceFormat::Csv,
        header: header.iter().map(|c| c.to_string()).collect(),
        rows: rows
            .iter()
            .map(|r| r.iter().map(|c| c.to_string()).collect())
            .collect(),
        meta: TableMeta::default(),
    }
}

fn patterns(ps: &[&str]) -> PatternSet {
    PatternSet::compile(&ps.iter().map(|p| p.to_string()).collect::<Vec<_>>())
}

fn small_corpus() -> Corpus {
    Corpus::from_tables(vec![
        table("t0", &["city", "country"], &[&["Canberra", "Australia"]]),
        table("t1", &["year", "capital"], &[&["1913", "canberra"]]),
        table("t2", &["year", "team"], &[&["2001", "x"]]),
        table("t3", &["name"], &[&["nothing here"]]),
    ])
}

#[test]
fn score_is_the_share_of_patterns_found() {
    let corpus = small_corpus();
    let set = patterns(&["CANBERRA", "19[0-9]{2}", "australia", "year"]);
    let hits = rank(&corpus, &set);
    let got: Vec<(usize, f32, Vec<usize>)> = hits
        .iter()
        .map(|h| (h.table, h.score, h.matched.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            (1, 0.75, vec![0, 1, 3]),
            (0, 0.5, vec![0, 2]),
            (2, 0.25, vec![3]),
            (3, 0.0, vec![]),
        ]
    );
}

#[test]
fn ties_keep_corpus_order_every_time() {
    let tables: Vec<Table> = (0..200)
        .map(|i| {
            table(
                &format!("t{i:03}"),
                &["k"],
                &[&[if i % 3 == 0 { "hit" } else { "miss" }]],
            )
        })
        .collect();
    let corpus = Corpus::from_tables(tables);
    let set = patterns(&["hit", "k"]);
    let first = rank(&corpus, &set);
    for _ in 0..5 {
        assert_eq!(rank(&corpus, &set), first);
    }
    let full: Vec<usize> = first
        .iter()
        .filter(|h| h.score == 1.0)
        .map(|h| h.table)
        .collect();
    assert_eq!(full, (0..200).step_by(3).collect::<Vec<_>>());
    assert!(first
        .windows(2)
        .all(|w| w[0].score > w[1].score || (w[0].score == w[1].score && w[0].table < w[1].table)));
}

#[test]
fn invalid_regex_matches_literally_and_is_reported() {
    let corpus = Corpus::from_tables(vec![
        table("a", &["expr"], &[&["f(x"]]),
        table("b", &["expr"], &[&["fx"]]),
    ]);
    let set = patterns(&["f(x", "", "[unclosed"]);
    assert_eq!(set.patterns(), ["f(x", "[unclosed"]);
    assert_eq!(set.warnings().len(), 2, "{:?}", set.warnings());
    let hits = rank(&corpus, &set);
    assert_eq!((hits[0].table, hits[0].score), (0, 0.5));
    assert_eq!((hits[1].table, hits[1].score), (1, 0.0));
}

#[test]
fn no_patterns_scores_zero() {
    let corpus = small_corpus();
    let hits = rank(&corpus, &patterns(&["", ""]));
    assert!(hits.iter().all(|h| h.score == 0.0 && h.matched.is_empty()));
    assert_eq!(hits.len(), corpus.len());
}

#[test]
fn matching_is_over_the_tables_own_serialization() {
    let mut md = table("m", &["a"], &[&["1"]]);
    md.source_format = SourceFormat::Markdown;
    let corpus = Corpus::from_tables(vec![table("c", &["a"], &[&["1"]]), md]);
    let hits = rank(&corpus, &patterns(&["\\| --- \\|"]));
    assert_eq!((hits[0].table, hits[0].score), (1, 1.0));
    assert_eq!(hits[1].score, 0.0);
}

/// A table long enough that the head cannot show it whole, with matches spread through it.
fn long_table() -> Corpus {
    let rows: Vec<Vec<String>> = (0..400)
        .map(|i| {
            let tag = match i % 50 {
                10 => "alpha",
                20 => "beta",
                30 => "gamma",
                _ => "filler",
            };
            vec![
                format!("row{i}"),
                tag.to_string(),
                "x".repeat(if i == 310 { 2000 } else { 8 }),
            ]
        })
        .collect();
    let mut t = table("secret/path/id.csv", &["name", "tag", "payload"], &[]);
    t.rows = rows;
    t.meta.caption = Some("Secret caption".into());
    Corpus::from_tables(vec![t])
}

fn matched_section(preview: &str) -> Vec<&str> {
    preview
        .split("[rows matching the patterns]\n")
        .nth(1)
        .map(|s| s.lines().collect())
        .unwrap_or_default()
}

#[test]
fn preview_limits_for_every_evidence_size() {
    let corpus = long_table();
    let set = patterns(&["alpha", "beta", "gamma"]);
    for (evidence, per_pattern, total) in [
        (Evidence::Small, 1, 5),
        (Evidence::Medium, 2, 10),
        (Evidence::Big, 3, 15),
    ] {
        let opts = PreviewOptions::for_evidence(evidence);
        assert_eq!(
            (
                opts.preview_chars,
                opts.max_rows_per_pattern,
                opts.max_matched_rows,
                opts.max_line_chars
            ),
            (800, per_pattern, total, 400)
        );
        let text = preview(&corpus, 0, &set, &opts);
        assert!(text.starts_with("name,tag,payload\nrow0,filler,"));
        let head: String = corpus.text(0).chars().take(800).collect();
        assert!(text.starts_with(&head));
        let section = matched_section(&text);
        assert_eq!(
            section[0], "name,tag,payload",
            "header repeated above matched rows"
        );
        let rows = &section[1..];
        assert_eq!(
            rows.len(),
            (3 * per_pattern).min(total),
            "{evidence}: {rows:?}"
        );
        for p in ["alpha", "beta", "gamma"] {
            assert_eq!(rows.iter().filter(|r| r.contains(p)).count(), per_pattern);
        }
        // Rows fully inside the head are not repeated: the first alpha is row 10 (in the head).
        assert!(!rows.iter().any(|r| r.starts_with("row10,")), "{rows:?}");
        assert!(rows.iter().all(|r| r.chars().count() <= 400));
        assert!(!text.contains("secret") && !text.contains("Secret"));
    }
    let total_cap = PreviewOptions {
        max_matched_rows: 2,
        max_rows_per_pattern: 5,
        ..PreviewOptions::default()
    };
    assert_eq!(
        matched_section(&preview(&corpus, 0, &set, &total_cap)).len(),
        1 + 2
    );
}

#[test]
fn long_matched_rows_are_cut() {
    let corpus = long_table();
    let set = patterns(&["row310,"]);
    let text = preview(&corpus, 0, &set, &PreviewOptions::default());
    let rows = matched_section(&text);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1].chars().count(), 400);
    assert!(rows[1].starts_with("row310,alpha,xxx") && rows[1].ends_with('…'));
}

#[test]
fn full_and_small_tables_are_shown_whole() {
    let corpus = long_table();
    let set = patterns(&["alpha"]);
    let full = preview(
        &corpus,
        0,
        &set,
        &PreviewOptions::for_evidence(Evidence::Full),
    );
    assert_eq!(full, corpus.text(0));
    let small = small_corpus();
    assert_eq!(
        preview(&small, 1, &set, &PreviewOptions::default()),
        small.text(1)
    );
}

#[test]
fn match_only_previews_have_no_head() {
    let corpus = long_table();
    let set = patterns(&["alpha", "beta"]);
    let opts = PreviewOptions::default().match_only(true);
    let text = preview(&corpus, 0, &set, &opts);
    let rows = matched_section(&text);
    // The first match of each pattern, even inside what would be the head.
    assert_eq!(rows, ["row10,alpha,xxxxxxxx", "row20,beta,xxxxxxxx"]);
    assert!(!text.contains("name,tag"));
}

#[test]
fn html_and_markdown_previews_keep_rows_readable_against_the_header() {
    let long = long_table();
    let set = patterns(&["gamma"]);
    for (format, header_start, row_start) in [
        (TextFormat::Markdown, "| name | tag | payload |", "| row"),
        (TextFormat::Html, "<table>", "<tr><td>row"),
    ] {
        let corpus = long.reserialized(Serialization::Fixed(format));
        let text = preview(&corpus, 0, &set, &PreviewOptions::default());
        let section = matched_section(&text);
        assert_eq!(section[0], header_start, "{format:?}\n{text}");
        assert!(section
            .iter()
            .any(|l| l.starts_with(row_start) && l.contains("gamma")));
    }
}

fn tableseek() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tableseek"))
}

#[test]
fn cli_grep_json_and_stats_json() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.csv"), "city,year\nCanberra,1913\n").unwrap();
    std::fs::write(dir.path().join("b.csv"), "city,year\nSydney,1788\n").unwrap();
    std::fs::write(dir.path().join("c.csv"), "x\n\"broken\n").unwrap();
    let out = tableseek()
        .args(["grep"])
        .arg(dir.path())
        .args(["-p", "canberra", "-p", "19[0-9]{2}", "-p", "(", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        json["patterns"],
        serde_json::json!(["canberra", "19[0-9]{2}", "("])
    );
    let results = json["results"].as_array().unwrap();
    assert_eq!(results.len(), 1, "tables matching nothing are not results");
    assert_eq!(results[0]["rank"], 1);
    assert_eq!(results[0]["table_id"], "a.csv");
    assert!((results[0]["score"].as_f64().unwrap() - 2.0 / 3.0).abs() < 1e-6);
    assert_eq!(
        results[0]["matched_patterns"],
        serde_json::json!(["canberra", "19[0-9]{2}"])
    );
    assert_eq!(results[0]["preview"], "city,year\nCanberra,1913\n");

    let out = tableseek()
        .args(["corpus", "stats"])
        .arg(dir.path())
        .arg("--json")
        .output()
        .unwrap();
    assert!(out.status.success());
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(stats["tables"], 2);
    assert_eq!(stats["by_format"], serde_json::json!({"csv": 2}));
    assert_eq!(stats["rows"], 2);
    assert_eq!(stats["cells"], 8);
    assert_eq!(stats["skipped"].as_array().unwrap().len(), 1);
    assert!(stats["skipped"][0]["reason"]
        .as_str()
        .unwrap()
        .starts_with("line 2: unterminated"));

    let out = tableseek()
        .args(["corpus", "stats"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("tables        2\n  csv         2\n"),
        "{text}"
    );
    assert!(text.contains("\nskipped       1\n"), "{text}");
}

#[test]
fn cli_convert_writes_each_table_in_the_chosen_format() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("t.html.csv"), "name,2019\ngdp,1\n").unwrap();
    let status = tableseek()
        .args(["corpus", "convert"])
        .arg(dir.path())
        .args(["--format", "markdown", "--transpose", "--out"])
        .arg(out_dir.path())
        .status()
        .unwrap();
    assert!(status.success());
    let written = std::fs::read_to_string(out_dir.path().join("t.html.md")).unwrap();
    assert_eq!(written, "| name | gdp |\n| --- | --- |\n| 2019 | 1 |\n");
}

fn shared_tables() -> Option<std::path::PathBuf> {
    let dir = crate::common::shared_dir().join("data/tabfact/tables");
    dir.is_dir().then_some(dir)
}

#[test]
fn cli_grep_canberra_on_tabfact() {
    let Some(tables) = shared_tables() else {
        eprintln!("skipping: ../shared/data/tabfact/tables not found (set TABLESEEK_SHARED)");
        return;
    };
    let out = tableseek()
        .arg("grep")
        .arg(&tables)
        .args(["-p", "canberra", "--top-k", "100", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let results = json["results"].as_array().unwrap();
    // Independent count: files whose bytes contain "canberra" in any case.
    let mut expected: Vec<String> = std::fs::read_dir(&tables)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| {
            let text = std::fs::read_to_string(e.path()).unwrap();
            text.to_lowercase().contains("canberra")
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    expected.sort();
    let got: Vec<String> = results
        .iter()
        .map(|r| {
            assert_eq!(r["score"], 1.0);
            r["table_id"].as_str().unwrap().to_owned()
        })
        .collect();
    assert!(!got.is_empty());
    assert_eq!(got, expected);
}

#[test]
fn cli_output_into_a_closed_pipe_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..50 {
        std::fs::write(
            dir.path().join(format!("t{i}.csv")),
            format!("city,year\nCanberra,{}\n", 1900 + i),
        )
        .unwrap();
    }
    let mut child = tableseek()
        .arg("grep")
        .arg(dir.path())
        .args(["-p", "canberra", "--top-k", "50"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Close the reading end before the command writes anything (as `| head -0` would).
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{stderr}");
    }
}
