//! SQLite for the benchmark builder: read source tables, load a variant's rows into an in-memory
//! database under given names, run a question's SQL there, compare answers, find the rows an answer
//! rests on, and rewrite a query's identifiers into a renamed schema.

use std::path::Path;

use rusqlite::types::Value;
use rusqlite::{Connection, OpenFlags};

use super::BenchError;

/// A column as the source database declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    /// Declared type (`INTEGER`, `TEXT`, … or empty); kept so comparisons in the SQL behave as in
    /// the source database (type affinity).
    pub decl_type: String,
}

/// One table of a source database, rows in the database's own order.
#[derive(Debug, Clone)]
pub struct SourceTable {
    pub name: String,
    pub columns: Vec<Column>,
    pub rows: Vec<Vec<Value>>,
}

fn sqlite_error(path: &Path, source: rusqlite::Error) -> BenchError {
    BenchError::Sqlite {
        path: path.to_path_buf(),
        source,
    }
}

/// `"name"` with embedded quotes doubled.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Every table of a database file (internal `sqlite_*` tables aside), sorted by name.
pub fn read_database(path: &Path) -> Result<Vec<SourceTable>, BenchError> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| sqlite_error(path, e))?;
    let read = || -> rusqlite::Result<Vec<SourceTable>> {
        let mut names: Vec<String> = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'")?
            .query_map([], |row| row.get(0))?
            .collect::<Result<_, _>>()?;
        names.sort();
        let mut tables = Vec::with_capacity(names.len());
        for name in names {
            let columns: Vec<Column> = conn
                .prepare(&format!("PRAGMA table_info({})", quote_ident(&name)))?
                .query_map([], |row| {
                    Ok(Column {
                        name: row.get(1)?,
                        decl_type: row.get::<_, Option<String>>(2)?.unwrap_or_default(),
                    })
                })?
                .collect::<Result<_, _>>()?;
            let rows = all_rows(&conn, &format!("SELECT * FROM {}", quote_ident(&name)))?;
            tables.push(SourceTable {
                name,
                columns,
                rows,
            });
        }
        Ok(tables)
    };
    read().map_err(|e| sqlite_error(path, e))
}

/// An in-memory database holding one table: `rows` (each already cut to `columns`) under
/// `table`/`columns`. Row `i` gets rowid `i + 1`, so [`answer_index`] can delete it by position; no
/// primary key is declared, because one would alias the rowid.
pub fn load_table(
    table: &str,
    columns: &[Column],
    rows: &[Vec<Value>],
) -> rusqlite::Result<Connection> {
    let mut conn = Connection::open_in_memory()?;
    let defs: Vec<String> = columns
        .iter()
        .map(|c| format!("{} {}", quote_ident(&c.name), c.decl_type))
        .collect();
    conn.execute(
        &format!("CREATE TABLE {} ({})", quote_ident(table), defs.join(", ")),
        [],
    )?;
    let names: Vec<String> = columns.iter().map(|c| quote_ident(&c.name)).collect();
    let marks: Vec<String> = (0..=columns.len()).map(|i| format!("?{}", i + 1)).collect();
    let insert = format!(
        "INSERT INTO {} (rowid{}{}) VALUES ({})",
        quote_ident(table),
        if names.is_empty() { "" } else { ", " },
        names.join(", "),
        marks.join(", ")
    );
    let tx = conn.transaction()?;
    {
        let mut statement = tx.prepare(&insert)?;
        for (i, row) in rows.iter().enumerate() {
            let rowid = Value::Integer(i as i64 + 1);
            statement.execute(rusqlite::params_from_iter(
                std::iter::once(&rowid).chain(row.iter()),
            ))?;
        }
    }
    tx.commit()?;
    Ok(conn)
}

/// The result of a query, compared as a bag of rows unless the query orders them.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub rows: Vec<Vec<Value>>,
    /// Rows in canonical order (sorted by key when order does not matter), for comparison.
    key: Vec<Vec<String>>,
}

impl Answer {
    fn new(rows: Vec<Vec<Value>>, ordered: bool) -> Answer {
        let mut key: Vec<Vec<String>> = rows
            .iter()
            .map(|row| row.iter().map(value_key).collect())
            .collect();
        if !ordered {
            key.sort();
        }
        Answer { rows, key }
    }

    /// Same rows (as a bag, or in order when the query orders them).
    pub fn same_as(&self, other: &Answer) -> bool {
        self.key == other.key
    }
}

/// A comparison key that treats `6` and `6.0` alike, as SQLite's own comparison does.
fn value_key(value: &Value) -> String {
    match value {
        Value::Null => "n".into(),
        Value::Integer(i) => format!("#{i}"),
        Value::Real(r) if r.fract() == 0.0 && r.abs() < 9e15 => format!("#{}", *r as i64),
        Value::Real(r) => format!("#{r}"),
        Value::Text(t) => format!("s{t}"),
        Value::Blob(b) => format!("b{}", hex::encode(b)),
    }
}

/// Whether the query's row order is part of its answer.
pub fn is_ordered(sql: &str) -> bool {
    let upper = sql.to_ascii_uppercase();
    upper.contains("ORDER BY")
}

/// Every row `sql` returns, each as its column values.
fn all_rows(conn: &Connection, sql: &str) -> rusqlite::Result<Vec<Vec<Value>>> {
    let mut statement = conn.prepare(sql)?;
    let width = statement.column_count();
    let rows = statement
        .query_map([], |row| {
            (0..width)
                .map(|i| row.get::<_, Value>(i))
                .collect::<Result<Vec<_>, _>>()
        })?
        .collect();
    rows
}

/// Runs `sql`; `None` when it fails (a column this variant lacks) or gives no evidence (no rows, or
/// only NULLs): a variant that cannot answer.
pub fn run_query(conn: &Connection, sql: &str) -> Option<Answer> {
    let rows = all_rows(conn, sql).ok()?;
    if rows
        .iter()
        .all(|row| row.iter().all(|v| matches!(v, Value::Null)))
    {
        return None;
    }
    Some(Answer::new(rows, is_ordered(sql)))
}

/// Rows (0-based, in the loaded order) whose removal changes the answer: the evidence the answer
/// rests on. A lookup gives its matched rows, a filter all of its rows, an aggregate over a whole
/// table every row; rows that tie (two rows holding the same MAX) are each redundant and left out.
pub fn answer_index(
    conn: &Connection,
    table: &str,
    rows: usize,
    sql: &str,
    answer: &Answer,
) -> rusqlite::Result<Vec<usize>> {
    let delete = format!("DELETE FROM {} WHERE rowid = ?1", quote_ident(table));
    let mut index = Vec::new();
    for i in 0..rows {
        conn.execute_batch("SAVEPOINT loo")?;
        conn.execute(&delete, [i as i64 + 1])?;
        let changed = run_query(conn, sql).is_none_or(|other| !other.same_as(answer));
        conn.execute_batch("ROLLBACK TO loo; RELEASE loo")?;
        if changed {
            index.push(i);
        }
    }
    Ok(index)
}

/// `sql` with its table and column identifiers renamed (case-insensitive match, as SQLite resolves
/// them). String literals (Spider writes them in double quotes too) and function names are left
/// alone; a word right after FROM/JOIN or before a `.` is a table name first, anything else a
/// column name first, so a column named like its table (`orchestra.Orchestra`) renames right.
/// Renamed identifiers are written in backticks, which SQLite reads as identifiers only.
pub fn rename_sql(sql: &str, table: (&str, &str), columns: &[(String, String)]) -> String {
    let find_column = |word: &str| {
        columns
            .iter()
            .find(|(from, _)| from.eq_ignore_ascii_case(word))
            .map(|(_, to)| to.as_str())
    };
    let is_table = |word: &str| table.0.eq_ignore_ascii_case(word);
    let chars: Vec<char> = sql.chars().collect();
    let mut out = String::with_capacity(sql.len() + 16);
    let mut previous_word = String::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\'' || c == '"' {
            // A literal up to the matching quote; a doubled quote is an escaped one.
            let start = i;
            i += 1;
            while i < chars.len() {
                if chars[i] == c {
                    if chars.get(i + 1) == Some(&c) {
                        i += 2;
                        continue;
                    }
                    break;
                }
                i += 1;
            }
            i = (i + 1).min(chars.len());
            out.extend(&chars[start..i]);
            continue;
        }
        if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let next = chars[i..].iter().find(|c| !c.is_whitespace()).copied();
            let after_from = previous_word.eq_ignore_ascii_case("FROM")
                || previous_word.eq_ignore_ascii_case("JOIN");
            let renamed = if next == Some('(') {
                None
            } else if (after_from || next == Some('.')) && is_table(&word) {
                Some(table.1)
            } else if let Some(column) = find_column(&word) {
                Some(column)
            } else if is_table(&word) {
                Some(table.1)
            } else {
                None
            };
            match renamed {
                Some(name) => {
                    out.push('`');
                    out.push_str(&name.replace('`', "``"));
                    out.push('`');
                }
                None => out.push_str(&word),
            }
            previous_word = word;
            continue;
        }
        if c.is_ascii_digit() {
            // A number (`1e5`, `3x`) is never an identifier.
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '.') {
                out.push(chars[i]);
                i += 1;
            }
            previous_word.clear();
            continue;
        }
        if !c.is_whitespace() {
            previous_word.clear();
        }
        out.push(c);
        i += 1;
    }
    out
}

/// Whether the SELECT list aggregates (COUNT/SUM/AVG/MIN/MAX): the question is then SA.
pub fn selects_aggregate(sql: &str) -> bool {
    let upper = sql.to_ascii_uppercase();
    let select = upper.find("SELECT").map_or(0, |i| i + 6);
    let end = upper[select..]
        .find(" FROM")
        .map_or(upper.len(), |i| select + i);
    let list: String = upper[select..end]
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    ["COUNT(", "SUM(", "AVG(", "MIN(", "MAX("]
        .iter()
        .any(|f| list.contains(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn columns(names: &[&str]) -> Vec<Column> {
        names
            .iter()
            .map(|n| Column {
                name: n.to_string(),
                decl_type: "INT".into(),
            })
            .collect()
    }

    #[test]
    fn renames_identifiers_but_not_literals_or_functions() {
        let renamed = rename_sql(
            r#"SELECT count(*), T1.Name FROM orchestra AS T1 WHERE T1.Orchestra = "Name" AND age > 'age' ORDER BY orchestra.Orchestra"#,
            ("orchestra", "band"),
            &[
                ("Name".into(), "title".into()),
                ("Orchestra".into(), "bandName".into()),
                ("Age".into(), "years".into()),
                ("count".into(), "cnt".into()),
            ],
        );
        assert_eq!(
            renamed,
            r#"SELECT count(*), T1.`title` FROM `band` AS T1 WHERE T1.`bandName` = "Name" AND `years` > 'age' ORDER BY `band`.`bandName`"#
        );
    }

    #[test]
    fn leave_one_out_finds_the_rows_an_answer_rests_on() {
        let rows: Vec<Vec<Value>> = [(1, 30), (2, 50), (3, 50), (4, 20)]
            .iter()
            .map(|&(id, age)| vec![Value::Integer(id), Value::Integer(age)])
            .collect();
        let conn = load_table("t", &columns(&["id", "age"]), &rows).unwrap();
        let check = |sql: &str| {
            let answer = run_query(&conn, sql).unwrap();
            answer_index(&conn, "t", rows.len(), sql, &answer).unwrap()
        };
        assert_eq!(check("SELECT id FROM t WHERE age > 25"), [0, 1, 2]);
        assert_eq!(check("SELECT id FROM t WHERE age = 20"), [3]);
        assert_eq!(check("SELECT count(*) FROM t"), [0, 1, 2, 3]);
        // Two rows hold the maximum: neither alone changes it.
        assert!(check("SELECT max(age) FROM t").is_empty());
        // The rollback restored every row.
        assert_eq!(
            run_query(&conn, "SELECT count(*) FROM t").unwrap().rows,
            [[Value::Integer(4)]]
        );
        assert!(run_query(&conn, "SELECT nope FROM t").is_none());
        assert!(run_query(&conn, "SELECT id FROM t WHERE age > 99").is_none());
        assert!(run_query(&conn, "SELECT max(age) FROM t WHERE age > 99").is_none());
    }

    #[test]
    fn answers_compare_as_bags_unless_ordered() {
        let rows = vec![vec![Value::Integer(1)], vec![Value::Real(2.0)]];
        let swapped = vec![vec![Value::Integer(2)], vec![Value::Integer(1)]];
        assert!(Answer::new(rows.clone(), false).same_as(&Answer::new(swapped.clone(), false)));
        assert!(!Answer::new(rows, true).same_as(&Answer::new(swapped, true)));
        assert!(selects_aggregate("SELECT avg(age), min(age) FROM singer"));
        assert!(!selects_aggregate(
            "SELECT name FROM t WHERE id IN (SELECT max(id) FROM t)"
        ));
    }
}
