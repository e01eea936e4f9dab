//! The SQL guard (`sql::Database::query`: one read-only SELECT, time limit, row cap) on model-written
//! SQL against a small loaded table. After every query the database must be unchanged and still
//! answer; the row cap must hold.
use std::time::Duration;

use tableseek::corpus::{SourceFormat, Table, TableMeta};
use tableseek::sql::{Database, QueryLimits};

const CHECK: &str =
    "SELECT count(*), group_concat(name || ':' || coalesce(population, 'null'), '|') FROM cities";

fn main() {
    tableseek_fuzz::single_threaded();
    let row = |cells: &[&str]| cells.iter().map(|c| c.to_string()).collect::<Vec<_>>();
    let table = Table {
        id: "cities.csv".into(),
        source_format: SourceFormat::Csv,
        header: row(&["name", "country", "population", "founded"]),
        rows: vec![
            row(&["Canberra", "Australia", "431,380", "1913"]),
            row(&["Lyon", "France", "522 250", "-43"]),
            row(&["São Paulo", "Brazil", "", "1554"]),
            row(&["Oslo", "Norway", "709000"]),
        ],
        meta: TableMeta::default(),
    };
    let other = Table {
        id: "t2.csv".into(),
        rows: vec![row(&["x", "y", "1", "2"])],
        ..table.clone()
    };
    let db = Database::new(&[(&table, "cities"), (&other, "other")]).expect("loading the fixture");
    let limits = QueryLimits {
        timeout: Duration::from_millis(200),
        max_rows: 16,
    };
    let before = db.query(CHECK, &limits).expect("the check query runs");
    // A panic aborts the fuzzed process, so no state is observed after one.
    let db = std::panic::AssertUnwindSafe(db);
    afl::fuzz!(|data: &[u8]| {
        let Ok(sql) = std::str::from_utf8(data) else {
            return;
        };
        if let Ok(result) = db.query(sql, &limits) {
            assert!(result.rows.len() <= limits.max_rows);
            assert!(result.rows.iter().all(|r| r.len() == result.columns.len()));
        }
        let after = db
            .query(CHECK, &limits)
            .expect("the database still answers");
        assert_eq!(before, after, "the query changed the database: {sql:?}");
    });
}
