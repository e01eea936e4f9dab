use std::time::Duration;

use super::*;
use crate::corpus::{SourceFormat, TableMeta};

fn table(header: &[&str], rows: &[&[&str]]) -> Table {
    Table {
        id: "t.csv".into(),
        source_format: SourceFormat::Csv,
        header: header.iter().map(|s| s.to_string()).collect(),
        rows: rows
            .iter()
            .map(|r| r.iter().map(|s| s.to_string()).collect())
            .collect(),
        meta: TableMeta::default(),
    }
}

fn run(rel: &Relation, sql: &str) -> Vec<Vec<Option<String>>> {
    rel.query(sql, &QueryLimits::default())
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .rows
}

fn one(rel: &Relation, sql: &str) -> String {
    run(rel, sql)[0][0].clone().unwrap_or_default()
}

#[test]
fn formatted_numbers_are_numbers_and_keep_their_text() {
    let t = table(
        &["City", "Population (2021)", "Share", "Budget"],
        &[
            &["Sydney", "5,231,147", "20.5%", "$1,200"],
            &["Hobart", "247,086", "1%", "$35.5"],
            &["Darwin", "139,902", "", "3.0e2"],
        ],
    );
    let rel = Relation::from_table(&t, "cities").unwrap();
    let kinds: Vec<(String, ColumnType)> = rel
        .columns()
        .iter()
        .map(|c| (c.name.clone(), c.kind))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("city".into(), ColumnType::Text),
            ("population_2021".into(), ColumnType::Integer),
            ("share".into(), ColumnType::Real),
            ("budget".into(), ColumnType::Real),
        ]
    );
    assert_eq!(
        one(&rel, "SELECT SUM(population_2021) FROM cities"),
        "5618135"
    );
    assert_eq!(
        one(
            &rel,
            "SELECT city FROM cities ORDER BY population_2021 DESC LIMIT 1"
        ),
        "Sydney"
    );
    // Empty cells are NULL, so aggregates skip them.
    assert_eq!(one(&rel, "SELECT COUNT(share) FROM cities"), "2");
    assert_eq!(one(&rel, "SELECT MAX(budget) FROM cities"), "1200");
    assert_eq!(
        one(&rel, "SELECT budget FROM cities WHERE city = 'Darwin'"),
        "300"
    );
    // Lossy parses keep the text as written, queryable and named in the schema.
    assert_eq!(
        one(&rel, "SELECT budget_text FROM cities WHERE city = 'Hobart'"),
        "$35.5"
    );
    let schema = rel.schema_text();
    assert!(
        schema.contains("\"population_2021\" INTEGER, -- \"Population (2021)\""),
        "{schema}"
    );
    assert!(
        schema.contains("\"budget_text\" TEXT -- budget as written"),
        "{schema}"
    );
    assert!(schema.ends_with("-- 3 rows"), "{schema}");
}

#[test]
fn duplicate_empty_and_reserved_headers_get_unique_names() {
    let t = table(
        &["Name", "name", "", "", "2019", "Order", "x_text", "x"],
        &[&["a", "b", "c", "d", "1", "2", "t", "$3"]],
    );
    let rel = Relation::from_table(&t, "t").unwrap();
    assert_eq!(
        rel.sql_column_names(),
        vec![
            "name",
            "name_2",
            "col3",
            "col4",
            "c_2019",
            "order_col",
            "x_text",
            "x",
            "x_text_2"
        ]
    );
    // Originals are kept for the mapping back.
    assert_eq!(rel.columns()[1].original, "name");
    assert_eq!(rel.columns()[7].text_column.as_deref(), Some("x_text_2"));
    assert_eq!(one(&rel, "SELECT name_2 FROM t"), "b");
    assert_eq!(one(&rel, "SELECT x_text_2 FROM t"), "$3");
}

#[test]
fn a_column_mixing_numbers_and_text_compares_its_numbers_numerically() {
    let t = table(
        &["Team", "Points"],
        &[&["A", "12"], &["B", "9"], &["C", "n/a"], &["D", "100"]],
    );
    let rel = Relation::from_table(&t, "t").unwrap();
    assert_eq!(rel.columns()[1].kind, ColumnType::Mixed);
    // As text, '9' > '12' > '100'; stored as numbers the comparison is numeric.
    assert_eq!(
        one(&rel, "SELECT team FROM t WHERE points > 10 AND points < 50"),
        "A"
    );
    assert_eq!(
        run(
            &rel,
            "SELECT team FROM t WHERE typeof(points) = 'integer' ORDER BY points"
        ),
        vec![
            vec![Some("B".into())],
            vec![Some("A".into())],
            vec![Some("D".into())]
        ]
    );
    assert_eq!(one(&rel, "SELECT points FROM t WHERE team = 'C'"), "n/a");
}

#[test]
fn ragged_rows_are_padded_or_cut() {
    let t = table(
        &["a", "b", "c"],
        &[&["1", "2"], &["4", "5", "6", "7"], &["7", "8", "9"]],
    );
    let rel = Relation::from_table(&t, "t").unwrap();
    assert_eq!(rel.ragged_rows(), 2);
    assert_eq!(rel.row_count(), 3);
    assert_eq!(
        run(&rel, "SELECT c FROM t"),
        vec![None, Some("6".into()), Some("9".into())]
            .into_iter()
            .map(|v| vec![v])
            .collect::<Vec<_>>()
    );
}

#[test]
fn a_query_that_loops_is_stopped_at_the_time_limit() {
    let rel = Relation::from_table(&table(&["a"], &[&["1"]]), "t").unwrap();
    let limits = QueryLimits {
        timeout: Duration::from_millis(200),
        max_rows: 10,
    };
    let forever = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) \
                   SELECT COUNT(*) FROM n";
    let started = std::time::Instant::now();
    let err = rel.query(forever, &limits).unwrap_err();
    assert!(matches!(err, SqlError::TimedOut(_)), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
    // The connection is usable afterwards, with the handler gone.
    assert_eq!(one(&rel, "SELECT a FROM t"), "1");
}

#[test]
fn a_million_row_result_is_capped() {
    let rel = Relation::from_table(&table(&["a"], &[&["1"]]), "t").unwrap();
    let limits = QueryLimits {
        timeout: Duration::from_secs(10),
        max_rows: 50,
    };
    let huge = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n LIMIT 1000000) \
                SELECT i FROM n";
    let result = rel.query(huge, &limits).unwrap();
    assert_eq!(result.rows.len(), 50);
    assert!(result.truncated);
    assert_eq!(result.columns, vec!["i"]);
}

#[test]
fn only_one_read_only_select_runs() {
    let rel = Relation::from_table(&table(&["a"], &[&["1"]]), "t").unwrap();
    for bad in [
        "DELETE FROM t",
        "UPDATE t SET a = 2",
        "PRAGMA table_info(t)",
        "ATTACH DATABASE '/tmp/x.db' AS x",
        "DROP TABLE t",
        "SELECT 1; DELETE FROM t",
        "WITH x AS (SELECT 1) DELETE FROM t",
    ] {
        assert!(rel.query(bad, &QueryLimits::default()).is_err(), "{bad}");
    }
    // Nothing changed.
    assert_eq!(one(&rel, "SELECT COUNT(*) FROM t"), "1");
    // Errors say what went wrong, for the model's retry.
    let err = rel
        .query("SELECT nope FROM t", &QueryLimits::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("no such column: nope"), "{err}");
}

#[test]
fn number_parsing() {
    let parse = |s: &str| parse_number(s);
    assert_eq!(parse("1,234"), Some((Number::Int(1234), true)));
    assert_eq!(parse("-17"), Some((Number::Int(-17), false)));
    assert_eq!(parse("2.5"), Some((Number::Real(2.5), false)));
    assert_eq!(parse("12%"), Some((Number::Int(12), true)));
    assert_eq!(parse("3.0e2"), Some((Number::Real(300.0), true)));
    assert_eq!(parse("€ 3.2"), Some((Number::Real(3.2), true)));
    for text in [
        "",
        "abc",
        "1,23",
        "12-3",
        "1.2.3",
        "inf",
        "NaN",
        "1992-05-01",
        "$",
        "1,2345",
    ] {
        assert_eq!(parse(text), None, "{text:?}");
    }
}
