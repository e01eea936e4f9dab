//! Serializers: round trips through every text format, transpose, and the seeded `mixed` assignment.

use proptest::prelude::*;
use tableseek::corpus::{
    mixed_format, parse_text, serialize, transpose, Corpus, Serialization, SourceFormat, Table,
    TableMeta, TextFormat,
};

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

fn reparse(text: &str, format: TextFormat) -> (Vec<String>, Vec<Vec<String>>) {
    let mut tables = parse_text(text, format).unwrap();
    assert_eq!(tables.len(), 1, "{text}");
    let t = tables.remove(0);
    (t.header, t.rows)
}

#[test]
fn csv_to_markdown_to_parse_keeps_cells() {
    let csv = "team,score,note\nA|B,\"1,000\",\"x \\ y\"\n<c> & d,,ragged\nshort\n";
    let from_csv = &parse_text(csv, TextFormat::Csv).unwrap()[0];
    let markdown = serialize(from_csv, TextFormat::Markdown);
    assert!(markdown.contains("A\\|B"), "{markdown}");
    let (header, rows) = reparse(&markdown, TextFormat::Markdown);
    assert_eq!(header, from_csv.header);
    assert_eq!(rows, from_csv.rows);
    assert_eq!(rows[2], ["short"]);
}

#[test]
fn every_format_round_trips_a_plain_table() {
    let t = table(
        "t",
        &["city", "population (2010)", "notes"],
        &[
            &["Canberra", "1,000", "a \"capital\""],
            &["<Sydney>", "5 & 6", ""],
        ],
    );
    for format in [TextFormat::Csv, TextFormat::Markdown, TextFormat::Html] {
        let text = serialize(&t, format);
        let (header, rows) = reparse(&text, format);
        assert_eq!(header, t.header, "{format:?}: {text}");
        assert_eq!(rows, t.rows, "{format:?}: {text}");
    }
}

#[test]
fn serializations_have_one_row_per_line() {
    let t = table("t", &["a", "b"], &[&["1", "2"], &["3", "4"]]);
    assert_eq!(serialize(&t, TextFormat::Csv), "a,b\n1,2\n3,4\n");
    assert_eq!(
        serialize(&t, TextFormat::Markdown),
        "| a | b |\n| --- | --- |\n| 1 | 2 |\n| 3 | 4 |\n"
    );
    assert_eq!(
        serialize(&t, TextFormat::Html),
        "<table>\n<thead>\n<tr><th>a</th><th>b</th></tr>\n</thead>\n<tbody>\n\
         <tr><td>1</td><td>2</td></tr>\n<tr><td>3</td><td>4</td></tr>\n</tbody>\n</table>\n"
    );
}

fn cell() -> impl Strategy<Value = String> {
    // Markdown and HTML trim cells and HTML collapses whitespace runs (as a browser does), so
    // round-trip cells have single inner spaces only.
    "[a-zA-Z0-9 ,|\"<>&#\\\\.-]{0,12}"
        .prop_map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn random_tables_round_trip(
        header in prop::collection::vec(cell(), 1..5),
        rows in prop::collection::vec(prop::collection::vec(cell(), 1..5), 1..6),
    ) {
        // A first column of empty cells reads as a blank line in CSV; keep the first cell non-empty.
        let mut header = header;
        header[0] = format!("h{}", header[0]);
        let rows: Vec<Vec<String>> = rows.into_iter().map(|mut r| { r[0] = format!("r{}", r[0]); r }).collect();
        let t = Table { id: "p".into(), source_format: SourceFormat::Csv, header, rows, meta: TableMeta::default() };
        for format in [TextFormat::Csv, TextFormat::Markdown, TextFormat::Html] {
            let text = serialize(&t, format);
            let (header, rows) = reparse(&text, format);
            prop_assert_eq!(&header, &t.header, "{:?}: {}", format, text);
            prop_assert_eq!(&rows, &t.rows, "{:?}: {}", format, text);
        }
    }
}

#[test]
fn transpose_makes_the_first_column_the_header() {
    let t = table(
        "t",
        &["name", "2019", "2020"],
        &[&["gdp", "1", "2"], &["pop", "3"]],
    );
    let tt = transpose(&t);
    assert_eq!(tt.header, ["name", "gdp", "pop"]);
    assert_eq!(tt.rows, [["2019", "1", "3"], ["2020", "2", ""]]);
    assert_eq!(tt.id, "t");
    // Transposing twice gives the original grid back (padded where it was ragged).
    let back = transpose(&tt);
    assert_eq!(back.header, t.header);
    assert_eq!(back.rows[0], t.rows[0]);
    assert_eq!(back.rows[1], ["pop", "3", ""]);
}

#[test]
fn mixed_is_seeded_and_uses_all_three_formats() {
    let ids: Vec<String> = (0..300).map(|i| format!("dir/table-{i}.csv")).collect();
    let assign = |seed| {
        ids.iter()
            .map(|id| mixed_format(id, seed))
            .collect::<Vec<_>>()
    };
    let seed7 = assign(7);
    assert_eq!(seed7, assign(7));
    assert_ne!(seed7, assign(8));
    for format in [TextFormat::Csv, TextFormat::Markdown, TextFormat::Html] {
        let n = seed7.iter().filter(|&&f| f == format).count();
        assert!((60..140).contains(&n), "{format:?}: {n} of 300");
    }
    // Pinned values: the assignment must not drift between versions or machines.
    let pinned: Vec<TextFormat> = (0..6).map(|i| mixed_format(&ids[i], 0)).collect();
    assert_eq!(pinned, PINNED_SEED0);
}

/// Computed independently (a Python transcription of FNV-1a + splitmix64 over the same ids).
const PINNED_SEED0: [TextFormat; 6] = [
    TextFormat::Markdown,
    TextFormat::Html,
    TextFormat::Html,
    TextFormat::Markdown,
    TextFormat::Csv,
    TextFormat::Csv,
];

#[test]
fn corpus_texts_follow_the_serialization() {
    let mut md = table("m.md", &["a"], &[&["1"]]);
    md.source_format = SourceFormat::Markdown;
    let tables = vec![table("c.csv", &["a"], &[&["1"]]), md];
    let own = Corpus::from_tables(tables.clone());
    assert_eq!(own.text(0), "a\n1\n");
    assert_eq!(own.text_format(1), TextFormat::Markdown);
    assert!(own.text(1).starts_with("| a |"));
    let html = Corpus::from_tables_as(tables.clone(), Serialization::Fixed(TextFormat::Html));
    assert!(html.text(0).starts_with("<table>"));
    let mixed = Corpus::from_tables_as(tables, Serialization::Mixed { seed: 3 });
    for i in 0..2 {
        assert_eq!(mixed.text_format(i), mixed_format(&mixed.table(i).id, 3));
    }
    assert_eq!(own.index_of("m.md"), Some(1));
    assert_eq!(own.index_of("nope"), None);
}
