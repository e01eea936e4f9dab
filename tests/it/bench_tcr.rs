//! `bench build-tcr` on a small hand-made SQLite database: gold answers equal the SQL result on the
//! gold variant, every sibling fails the sufficiency check, renamed schemas agree between the corpus
//! header and the recorded SQL, the output loads as an eval dataset, and the same seed gives
//! byte-identical files. Plus a build on Spider when ../shared is there.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use rusqlite::types::Value;
use rusqlite::Connection;
use serde_json::Value as Json;
use tableseek::bench::{build_tcr, TcrBench, TcrOptions};
use tableseek::corpus::{Corpus, LoadOptions, Serialization};
use tableseek::eval::load_queries;

const CITIES: [&str; 4] = ["Paris", "Lyon", "Nice", "Lille"];

/// `shop.sqlite`: `employee` (16 rows, questions) and `store` (no questions).
fn make_db(dir: &Path) -> PathBuf {
    let db_dir = dir.join("db");
    std::fs::create_dir_all(db_dir.join("shop")).unwrap();
    let conn = Connection::open(db_dir.join("shop/shop.sqlite")).unwrap();
    conn.execute_batch(
        "CREATE TABLE employee (Employee_ID INTEGER PRIMARY KEY, Name TEXT, Age INT, City TEXT, \
         Start_Date TEXT);
         CREATE TABLE store (Store_ID INTEGER PRIMARY KEY, Store_Name TEXT, Area REAL);
         INSERT INTO store VALUES (1, 'Main', 120.5), (2, 'North', 80.0);",
    )
    .unwrap();
    for i in 1..=16i64 {
        conn.execute(
            "INSERT INTO employee VALUES (?1, ?2, ?3, ?4, ?5)",
            rusqlite::params![
                i,
                format!("Person {i}"),
                20 + (i * 7) % 31,
                CITIES[(i % 4) as usize],
                format!("20{:02}-{:02}-1{}", i, 1 + i % 12, i % 10)
            ],
        )
        .unwrap();
    }
    std::fs::write(db_dir.join("LICENSE.test"), "test data licence\n").unwrap();
    db_dir
}

const QUESTIONS: &[(&str, &str)] = &[
    (
        "Who is employee 3?",
        "SELECT Name FROM employee WHERE Employee_ID = 3",
    ),
    (
        "Where does Person 5 live?",
        "SELECT city FROM employee WHERE name = \"Person 5\"",
    ),
    (
        "Who is older than 40?",
        "SELECT T1.Name FROM employee AS T1 WHERE T1.Age > 40",
    ),
    (
        "How many employees live in Paris?",
        "SELECT count(*) FROM employee WHERE City = 'Paris'",
    ),
    ("What is the average age?", "SELECT avg(Age) FROM Employee"),
    (
        "List names and ages from the oldest.",
        "SELECT Name, Age FROM employee ORDER BY Age DESC",
    ),
    (
        "Who started first?",
        "SELECT Name FROM employee ORDER BY Start_Date LIMIT 1",
    ),
    (
        "When did Person 7 start?",
        "SELECT Start_Date FROM employee WHERE Employee_ID = 7",
    ),
    ("What is nope?", "SELECT nope FROM employee"),
];

fn make_questions(dir: &Path) -> PathBuf {
    let mut text = String::new();
    for (i, (question, sql)) in QUESTIONS.iter().enumerate() {
        let line = serde_json::json!({
            "qid": format!("q{i}"), "db_id": "shop", "question": question, "sql": sql,
            "table": "employee", "answer": [], "order_matters": false
        });
        text.push_str(&line.to_string());
        text.push('\n');
    }
    text.push_str(
        r#"{"qid":"elsewhere","db_id":"nodb","question":"?","sql":"SELECT 1","table":"t"}"#,
    );
    text.push_str("\nnot json\n\n");
    let path = dir.join("questions.jsonl");
    std::fs::write(&path, text).unwrap();
    path
}

fn options(seed: u64) -> TcrOptions {
    TcrOptions {
        seed,
        siblings: (3, 4),
        rows: 6,
        serialization: Serialization::Mixed { seed },
        progress: false,
    }
}

fn rows_of(conn: &Connection, sql: &str) -> Option<Vec<Vec<Value>>> {
    let mut statement = conn.prepare(sql).ok()?;
    let width = statement.column_count();
    let rows: Vec<Vec<Value>> = statement
        .query_map([], |row| {
            (0..width)
                .map(|i| row.get::<_, Value>(i))
                .collect::<Result<Vec<_>, _>>()
        })
        .ok()?
        .collect::<Result<_, _>>()
        .ok()?;
    Some(rows)
}

/// A comparable form of a result: rows as strings, sorted unless the SQL orders them.
fn canonical(rows: Vec<Vec<Value>>, sql: &str) -> Vec<String> {
    let mut out: Vec<String> = rows.iter().map(|r| format!("{r:?}")).collect();
    if !sql.to_uppercase().contains("ORDER BY") {
        out.sort();
    }
    out
}

/// A variant rebuilt from its `tables.jsonl` record and the source database, under `table` and
/// `names` (original or renamed), with the original values.
fn rebuild(db: &Path, record: &Json, table: &str, renamed: bool) -> Connection {
    let source = Connection::open(db).unwrap();
    let sources: Vec<String> = record["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["source"].as_str().unwrap().to_string())
        .collect();
    let names: Vec<String> = record["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            c[if renamed { "name" } else { "source" }]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let all = rows_of(
        &source,
        &format!(
            "SELECT {} FROM {}",
            sources.join(", "),
            record["source_table"].as_str().unwrap()
        ),
    )
    .unwrap();
    let conn = Connection::open_in_memory().unwrap();
    let types: BTreeMap<&str, &str> = [
        ("Employee_ID", "INTEGER"),
        ("Name", "TEXT"),
        ("Age", "INT"),
        ("City", "TEXT"),
        ("Start_Date", "TEXT"),
    ]
    .into_iter()
    .collect();
    let defs: Vec<String> = names
        .iter()
        .zip(&sources)
        .map(|(n, s)| format!("\"{n}\" {}", types[s.as_str()]))
        .collect();
    conn.execute(
        &format!("CREATE TABLE \"{table}\" ({})", defs.join(", ")),
        [],
    )
    .unwrap();
    let marks = vec!["?"; names.len()].join(", ");
    for r in record["source_rows"].as_array().unwrap() {
        let row = &all[r.as_u64().unwrap() as usize];
        conn.execute(
            &format!("INSERT INTO \"{table}\" VALUES ({marks})"),
            rusqlite::params_from_iter(row.iter()),
        )
        .unwrap();
    }
    conn
}

fn write(bench: &TcrBench, dir: &Path) -> PathBuf {
    bench.write(dir).unwrap();
    dir.to_path_buf()
}

fn read_jsonl(path: &Path) -> Vec<Json> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn gold_answers_siblings_and_renamed_sql_hold_on_a_small_database() {
    let dir = tempfile::tempdir().unwrap();
    let db_dir = make_db(dir.path());
    let db = db_dir.join("shop/shop.sqlite");
    let questions = make_questions(dir.path());
    let mut kept_total = 0;
    let mut types = BTreeMap::new();
    for seed in 0..6 {
        let bench = build_tcr(&db_dir, &questions, &options(seed)).unwrap();
        let out = write(&bench, &dir.path().join(format!("out{seed}")));
        let m = &bench.manifest;
        assert_eq!(m.questions_read, QUESTIONS.len() + 2);
        assert_eq!(m.dropped["unknown database"], 1);
        assert_eq!(m.dropped["malformed line"], 1);
        // The `nope` column exists in no variant; rows absent from every variant drop lookups too.
        assert!(m.dropped["no variant answers"] >= 1);
        assert_eq!(
            m.questions_kept + m.dropped.values().sum::<usize>(),
            m.questions_read
        );
        assert_eq!(m.groups, 1);
        assert!(out.join("LICENSE.test").is_file());

        let records: BTreeMap<String, Json> = read_jsonl(&out.join("tables.jsonl"))
            .into_iter()
            .map(|r| (r["id"].as_str().unwrap().to_string(), r))
            .collect();
        // The group plus `store` as one variant.
        assert_eq!(records.len(), m.tables);
        let store: Vec<&Json> = records
            .values()
            .filter(|r| r["source_table"] == "store")
            .collect();
        assert_eq!(store.len(), 1);
        let originals = ["Employee_ID", "Name", "Age", "City", "Start_Date"];
        for record in records.values().filter(|r| r["source_table"] == "employee") {
            let header: Vec<&str> = record["columns"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["name"].as_str().unwrap())
                .collect();
            let sources: Vec<&str> = record["columns"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["source"].as_str().unwrap())
                .collect();
            assert_ne!(
                header, sources,
                "{}: a variant keeps the original schema",
                record["id"]
            );
            assert!(sources.iter().all(|s| originals.contains(s)));
        }

        // The corpus loads with the ids the queries name, and shows the renamed headers.
        let (corpus, report) = Corpus::load(&out.join("corpus"), &LoadOptions::default()).unwrap();
        assert!(report.skipped.is_empty(), "{:?}", report.skipped);
        assert_eq!(corpus.len(), m.tables);
        for (id, record) in &records {
            let table = corpus.table(corpus.index_of(id).expect("corpus id"));
            let header: Vec<&str> = record["columns"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["name"].as_str().unwrap())
                .collect();
            assert_eq!(table.header, header, "{id}");
            assert_eq!(
                table.rows.len(),
                record["source_rows"].as_array().unwrap().len()
            );
        }
        let loaded = load_queries(&out.join("queries.jsonl")).unwrap();
        assert_eq!(loaded.len(), m.questions_kept);

        for query in read_jsonl(&out.join("queries.jsonl")) {
            let qid = query["qid"].as_str().unwrap();
            assert_ne!(qid, "q8", "no variant has the nope column");
            let sql = query["sql"].as_str().unwrap();
            let gold = query["gold_tables"][0].as_str().unwrap();
            let group: Vec<&str> = query["group_tables"]
                .as_array()
                .unwrap()
                .iter()
                .map(|g| g.as_str().unwrap())
                .collect();
            assert!(group.contains(&gold));
            assert!(group.len() >= 3 && group.len() <= 4);
            // The gold answer is the SQL result on the gold variant.
            let gold_conn = rebuild(&db, &records[gold], "employee", false);
            let expected = rows_of(&gold_conn, sql).unwrap();
            let cells: Vec<String> = expected
                .iter()
                .flatten()
                .map(|v| match v {
                    Value::Integer(i) => i.to_string(),
                    Value::Real(r) => format!("{r:.2}")
                        .trim_end_matches('0')
                        .trim_end_matches('.')
                        .to_string(),
                    Value::Text(t) => t.clone(),
                    other => panic!("{other:?}"),
                })
                .collect();
            assert_eq!(
                query["answers"][0].as_str().unwrap(),
                cells.join(", "),
                "{qid}"
            );
            let index = query["answer_index"].as_array().unwrap();
            assert!(!index.is_empty());
            // Every sibling fails: no answer, or a different one.
            let expected = canonical(expected, sql);
            for sibling in group.iter().filter(|g| **g != gold) {
                let conn = rebuild(&db, &records[*sibling], "employee", false);
                if let Some(rows) = rows_of(&conn, sql) {
                    let all_null = rows.iter().flatten().all(|v| *v == Value::Null);
                    assert!(
                        all_null || canonical(rows, sql) != expected,
                        "{qid}: sibling {sibling} gives the gold answer"
                    );
                }
            }
            // The renamed SQL on the renamed table gives the same rows.
            let record = &records[gold];
            let renamed = rebuild(&db, record, record["table_name"].as_str().unwrap(), true);
            let gold_sql = query["gold_sql"].as_str().unwrap();
            let got = rows_of(&renamed, gold_sql).unwrap_or_else(|| panic!("{gold_sql}"));
            assert_eq!(canonical(got, sql), expected, "{qid}: {gold_sql}");
            let kind = query["question_type"].as_str().unwrap().to_string();
            if sql.contains("count(") || sql.contains("avg(") {
                assert_eq!(kind, "SA");
            }
            *types.entry(kind).or_insert(0) += 1;
            kept_total += 1;
        }
    }
    assert!(
        kept_total >= 12,
        "only {kept_total} questions kept over 6 seeds"
    );
    for kind in ["EM", "SF", "SA"] {
        assert!(
            types.contains_key(kind),
            "no {kind} question kept: {types:?}"
        );
    }
}

fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .map(Result::unwrap)
        .filter(|e| e.file_type().is_file())
        .map(|e| {
            let rel = e
                .path()
                .strip_prefix(dir)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            (rel, std::fs::read(e.path()).unwrap())
        })
        .collect()
}

#[test]
fn the_same_seed_gives_byte_identical_output() {
    let dir = tempfile::tempdir().unwrap();
    let db_dir = make_db(dir.path());
    let questions = make_questions(dir.path());
    let a = write(
        &build_tcr(&db_dir, &questions, &options(7)).unwrap(),
        &dir.path().join("a"),
    );
    let b = write(
        &build_tcr(&db_dir, &questions, &options(7)).unwrap(),
        &dir.path().join("b"),
    );
    let c = write(
        &build_tcr(&db_dir, &questions, &options(8)).unwrap(),
        &dir.path().join("c"),
    );
    let (a, b, c) = (files(&a), files(&b), files(&c));
    assert!(a.len() > 5);
    assert_eq!(a, b);
    assert_ne!(a, c, "another seed, another benchmark");
}

#[test]
fn cli_builds_and_refuses_to_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let db_dir = make_db(dir.path());
    let questions = make_questions(dir.path());
    let out = dir.path().join("out");
    let run = || {
        Command::new(env!("CARGO_BIN_EXE_tableseek"))
            .args(["bench", "build-tcr", "--db"])
            .arg(&db_dir)
            .arg("--questions")
            .arg(&questions)
            .arg("--out")
            .arg(&out)
            .args(["--siblings", "3..4", "--rows", "6", "--format", "markdown"])
            .output()
            .unwrap()
    };
    let first = run();
    let stderr = String::from_utf8_lossy(&first.stderr);
    assert!(first.status.success(), "{stderr}");
    assert!(stderr.contains("kept "), "{stderr}");
    assert!(stderr.contains("1 groups"), "{stderr}");
    let manifest: Json =
        serde_json::from_str(&std::fs::read_to_string(out.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["format"], "markdown");
    assert!(files(&out.join("corpus"))
        .keys()
        .all(|k| k.ends_with(".md")));
    let second = run();
    assert!(!second.status.success());
    assert!(String::from_utf8_lossy(&second.stderr).contains("not empty"));
}

#[test]
fn spider_dev_builds() {
    let shared = crate::common::shared_dir();
    let spider = shared.join("data/spider");
    if !spider.join("spider_single_table.jsonl").is_file() {
        eprintln!("skipping: no Spider data at {}", spider.display());
        return;
    }
    let bench = build_tcr(
        &spider.join("database"),
        &spider.join("spider_single_table.jsonl"),
        &TcrOptions::default(),
    )
    .unwrap();
    let m = &bench.manifest;
    assert_eq!(m.questions_read, 523);
    assert_eq!(m.databases.len(), 19);
    assert!(m.questions_kept > 100, "{m:?}");
    assert!(m.question_types.len() == 3, "{m:?}");
    assert!(m.licences.iter().any(|l| l.contains("LICENSE")));
    assert!(!m.dropped.contains_key("renamed SQL disagrees"), "{m:?}");
}
