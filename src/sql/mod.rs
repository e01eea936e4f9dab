//! A loaded [`Table`] as one SQLite relation, for question answering by SQL: the model writes a
//! query over the table's columns and the answer is computed, not guessed.
//!
//! - [`Relation::from_table`]: sanitized, unique column names (the model sees these; each keeps
//!   its original header), column types inferred from the cells, numbers parsed out of formatted
//!   text (`1,234`, `$5`, `12%`, `3.0e2`), empty cells as NULL, ragged rows padded or cut. Where a
//!   number parse loses text (`$5` → 5) the original text stays queryable in a `<name>_text`
//!   column.
//! - [`Relation::query`]: one read-only `SELECT` (or `WITH … SELECT`), under a time limit (SQLite's
//!   progress handler) and a row cap; everything else — writes, `PRAGMA`, `ATTACH`, several
//!   statements — is refused with a message the model can act on.
//! - [`Relation::schema_text`]: what a QA prompt shows beside a preview of the rows.
//!
//! Why an in-memory database per table: it isolates every query from every other table and
//! file, and SQLite's own parser, planner and type rules decide what a query means.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rusqlite::types::Value;
use rusqlite::{Connection, OpenFlags};

use crate::corpus::Table;

/// Errors of the SQL layer; each message is meant to be shown to the model on a retry.
#[derive(Debug, thiserror::Error)]
pub enum SqlError {
    #[error("the table has no columns")]
    NoColumns,
    #[error("only one SELECT statement is allowed (got {0})")]
    NotASelect(String),
    #[error("the query ran longer than {0:?} and was stopped")]
    TimedOut(Duration),
    #[error("SQL error: {0}")]
    Sqlite(#[from] rusqlite::Error),
}

/// How a column's cells are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ColumnType {
    /// Every non-empty cell is a whole number.
    Integer,
    /// Every non-empty cell is a number.
    Real,
    /// No cell is a number (or the column is empty).
    Text,
    /// Numbers and text mixed: numbers stored as numbers, the rest as text (no declared type, so
    /// SQLite keeps each value's own type and numeric comparisons work on the numeric cells).
    Mixed,
}

impl ColumnType {
    fn declared(self) -> &'static str {
        match self {
            Self::Integer => "INTEGER",
            Self::Real => "REAL",
            Self::Text => "TEXT",
            Self::Mixed => "",
        }
    }
}

/// One column of the relation.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SqlColumn {
    /// The name in SQL (unique, `[A-Za-z_][A-Za-z0-9_]*`).
    pub name: String,
    /// The table's own header text.
    pub original: String,
    pub kind: ColumnType,
    /// Where some number was parsed out of formatted text (`$5`, `1,234`): the column holding
    /// every cell as written (`<name>_text`).
    pub text_column: Option<String>,
}

/// Limits of one query.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QueryLimits {
    pub timeout: Duration,
    /// Rows kept; the result says whether more existed.
    pub max_rows: usize,
}

impl Default for QueryLimits {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(2),
            max_rows: 1000,
        }
    }
}

/// What a query returned.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryResult {
    pub columns: Vec<String>,
    /// Each value as text (NULL as `None`), integers without a decimal point, reals in Rust's
    /// shortest round-trip form.
    pub rows: Vec<Vec<Option<String>>>,
    /// More rows existed beyond [`QueryLimits::max_rows`].
    pub truncated: bool,
}

/// One relation of a [`Database`]: what a prompt shows of it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RelationSchema {
    pub name: String,
    pub columns: Vec<SqlColumn>,
    pub rows: usize,
    /// Rows that had more or fewer cells than the header (padded with NULL or cut).
    pub ragged_rows: usize,
}

/// Tables loaded into one in-memory SQLite database, read-only once loaded, so a query may join
/// them (TableRAG's SQL over the tables its retrieval found).
pub struct Database {
    conn: Connection,
    /// When the running query must stop (`None` between queries).
    deadline: Arc<Mutex<Option<Instant>>>,
    relations: Vec<RelationSchema>,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("relations", &self.relations)
            .finish()
    }
}

/// A table loaded into its own in-memory SQLite database.
#[derive(Debug)]
pub struct Relation {
    db: Database,
}

/// `"name"` with embedded quotes doubled.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A header as an SQL identifier: ASCII letters, digits and `_`, other runs as one `_`, never
/// starting with a digit; `col<N>` (1-based position) when nothing is left.
fn sanitize(header: &str, position: usize) -> String {
    let mut out = String::new();
    for c in header.trim().chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('_') {
            out.push('_');
        }
    }
    let out = out.trim_matches('_').to_string();
    if out.is_empty() {
        format!("col{position}")
    } else if out.starts_with(|c: char| c.is_ascii_digit()) {
        format!("c_{out}")
    } else {
        out
    }
}

/// Names a model would misread as SQL if a column carried them (they get `_col` appended).
const RESERVED: &[&str] = &[
    "select", "from", "where", "group", "order", "by", "limit", "table", "index", "and", "or",
    "not", "null", "as", "on", "in", "is", "like", "case", "when", "then", "else", "end", "join",
    "having", "distinct", "union", "values", "count", "sum", "avg", "min", "max", "rowid",
];

/// `base`, or `base_2`, `base_3`, … whichever is not taken yet; records the name as taken.
fn claim(base: String, taken: &mut Vec<String>) -> String {
    let mut name = base.clone();
    let mut n = 2;
    while taken.contains(&name) {
        name = format!("{base}_{n}");
        n += 1;
    }
    taken.push(name.clone());
    name
}

/// A number read from a cell, and whether reading it dropped text (currency, `%`, separators).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Number {
    Int(i64),
    Real(f64),
}

/// Parses `1234`, `-1,234.5`, `$5`, `€ 3.2`, `12%`, `3.0e2`. Returns the number and whether the
/// text was more than the number's plain form (so the text must be kept beside it).
fn parse_number(cell: &str) -> Option<(Number, bool)> {
    let text = cell.trim();
    if text.is_empty() {
        return None;
    }
    let mut s = text;
    let mut lossy = false;
    let mut negative = false;
    if let Some(rest) = s.strip_prefix('-').or_else(|| s.strip_prefix('−')) {
        negative = true;
        s = rest.trim_start();
    } else if let Some(rest) = s.strip_prefix('+') {
        s = rest;
        lossy = true;
    }
    for symbol in ['$', '€', '£', '¥'] {
        if let Some(rest) = s.strip_prefix(symbol) {
            s = rest.trim_start();
            lossy = true;
        }
    }
    if let Some(rest) = s.strip_suffix('%') {
        s = rest.trim_end();
        lossy = true;
    }
    if s.is_empty() || !s.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        return None;
    }
    let plain: String = if s.contains(',') {
        // Thousands separators only: groups of three digits after the first.
        let (int_part, frac) = match s.split_once('.') {
            Some((i, f)) => (i, Some(f)),
            None => (s, None),
        };
        let groups: Vec<&str> = int_part.split(',').collect();
        let well_grouped = groups[0].len() <= 3
            && !groups[0].is_empty()
            && groups[1..].iter().all(|g| g.len() == 3)
            && groups.iter().all(|g| g.bytes().all(|b| b.is_ascii_digit()));
        if !well_grouped {
            return None;
        }
        lossy = true;
        let mut joined = groups.concat();
        if let Some(f) = frac {
            joined.push('.');
            joined.push_str(f);
        }
        joined
    } else {
        s.to_string()
    };
    if !plain
        .bytes()
        .all(|b| b.is_ascii_digit() || b"eE.+-".contains(&b))
    {
        return None;
    }
    let is_int = plain.bytes().all(|b| b.is_ascii_digit());
    let number = if is_int {
        let v: i64 = plain.parse().ok()?;
        Number::Int(if negative { -v } else { v })
    } else {
        let v: f64 = plain.parse().ok()?;
        if !v.is_finite() {
            return None;
        }
        // `3.0e2` and `2.50` read as numbers but are not what a user would type back.
        if format!("{v}") != plain {
            lossy = true;
        }
        Number::Real(if negative { -v } else { v })
    };
    Some((number, lossy))
}

fn infer(cells: &[Option<&str>]) -> (ColumnType, bool) {
    let (mut ints, mut reals, mut texts, mut lossy) = (0usize, 0usize, 0usize, false);
    for cell in cells.iter().flatten().filter(|c| !c.trim().is_empty()) {
        match parse_number(cell) {
            Some((Number::Int(_), l)) => {
                ints += 1;
                lossy |= l;
            }
            Some((Number::Real(_), l)) => {
                reals += 1;
                lossy |= l;
            }
            None => texts += 1,
        }
    }
    let kind = match (ints + reals, texts) {
        (0, _) => ColumnType::Text,
        (_, 0) if reals == 0 => ColumnType::Integer,
        (_, 0) => ColumnType::Real,
        _ => ColumnType::Mixed,
    };
    (kind, lossy && kind != ColumnType::Text)
}

fn cell_value(cell: Option<&str>, kind: ColumnType) -> Value {
    let Some(cell) = cell.filter(|c| !c.trim().is_empty()) else {
        return Value::Null;
    };
    if kind == ColumnType::Text {
        return Value::Text(cell.to_string());
    }
    match parse_number(cell) {
        Some((Number::Int(v), _)) if kind == ColumnType::Real => Value::Real(v as f64),
        Some((Number::Int(v), _)) => Value::Integer(v),
        Some((Number::Real(v), _)) => Value::Real(v),
        None => Value::Text(cell.to_string()),
    }
}

/// `name` itself when it is already a plain identifier (`T0` stays `T0`), else sanitized.
fn relation_name(name: &str) -> String {
    let plain = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if plain {
        name.to_string()
    } else {
        sanitize(name, 0)
    }
}

/// Creates and fills relation `name` from `table` in `conn`.
fn load_relation(conn: &Connection, table: &Table, name: &str) -> Result<RelationSchema, SqlError> {
    if table.header.is_empty() {
        return Err(SqlError::NoColumns);
    }
    let name = relation_name(name);
    let width = table.header.len();
    let ragged_rows = table.rows.iter().filter(|r| r.len() != width).count();
    let mut taken = Vec::new();
    let mut columns = Vec::with_capacity(width);
    for (c, original) in table.header.iter().enumerate() {
        let cells: Vec<Option<&str>> = table
            .rows
            .iter()
            .map(|r| r.get(c).map(String::as_str))
            .collect();
        let (kind, lossy) = infer(&cells);
        let mut base = sanitize(original, c + 1);
        if RESERVED.contains(&base.as_str()) {
            base.push_str("_col");
        }
        columns.push((claim(base, &mut taken), original.clone(), kind, lossy));
    }
    // Companions are named after every real column has its name, so none is displaced.
    let columns: Vec<SqlColumn> = columns
        .into_iter()
        .map(|(name, original, kind, lossy)| SqlColumn {
            text_column: lossy.then(|| claim(format!("{name}_text"), &mut taken)),
            name,
            original,
            kind,
        })
        .collect();
    let mut defs: Vec<String> = Vec::new();
    for col in &columns {
        defs.push(
            format!("{} {}", quote_ident(&col.name), col.kind.declared())
                .trim_end()
                .to_string(),
        );
        if let Some(text) = &col.text_column {
            defs.push(format!("{} TEXT", quote_ident(text)));
        }
    }
    conn.execute_batch(&format!(
        "CREATE TABLE {} ({});",
        quote_ident(&name),
        defs.join(", ")
    ))?;
    {
        let placeholders = vec!["?"; defs.len()].join(", ");
        let tx = conn.unchecked_transaction()?;
        let mut insert = tx.prepare(&format!(
            "INSERT INTO {} VALUES ({placeholders})",
            quote_ident(&name)
        ))?;
        for row in &table.rows {
            let mut values = Vec::with_capacity(defs.len());
            for (c, col) in columns.iter().enumerate() {
                let cell = row.get(c).map(String::as_str);
                values.push(cell_value(cell, col.kind));
                if col.text_column.is_some() {
                    values.push(match cell.filter(|t| !t.trim().is_empty()) {
                        Some(t) => Value::Text(t.to_string()),
                        None => Value::Null,
                    });
                }
            }
            insert.execute(rusqlite::params_from_iter(values))?;
        }
        drop(insert);
        tx.commit()?;
    }
    Ok(RelationSchema {
        name,
        columns,
        rows: table.rows.len(),
        ragged_rows,
    })
}

impl RelationSchema {
    /// Every SQL column name, lossy companions included, in table order.
    pub fn sql_column_names(&self) -> Vec<String> {
        let mut names = Vec::new();
        for col in &self.columns {
            names.push(col.name.clone());
            names.extend(col.text_column.clone());
        }
        names
    }

    /// The CREATE statement the model sees, one column a line with its original header where the
    /// name differs, then the row count.
    pub fn schema_text(&self) -> String {
        let mut lines = vec![format!("CREATE TABLE {} (", quote_ident(&self.name))];
        let n = self.columns.len();
        for (i, col) in self.columns.iter().enumerate() {
            let mut line = format!("  {} {}", quote_ident(&col.name), col.kind.declared());
            let line_end = if i + 1 < n || col.text_column.is_some() {
                ","
            } else {
                ""
            };
            line = line.trim_end().to_string() + line_end;
            if col.original.trim() != col.name {
                line.push_str(&format!(" -- {:?}", col.original.trim()));
            }
            lines.push(line);
            if let Some(text) = &col.text_column {
                let end = if i + 1 < n { "," } else { "" };
                lines.push(format!(
                    "  {} TEXT{end} -- {} as written",
                    quote_ident(text),
                    col.name
                ));
            }
        }
        lines.push(format!(");  -- {} rows", self.rows));
        lines.join("\n")
    }
}

impl Database {
    /// Loads each `(table, name)` as a relation of one database (names as in [`relation_name`]).
    pub fn new(tables: &[(&Table, &str)]) -> Result<Self, SqlError> {
        let mut conn = Connection::open_in_memory_with_flags(
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        let relations = tables
            .iter()
            .map(|(table, name)| load_relation(&conn, table, name))
            .collect::<Result<Vec<_>, _>>()?;
        // The handler runs every 10,000 virtual-machine steps and aborts the statement once the
        // running query's deadline has passed; it is installed once because a prepared statement
        // borrows the connection for the whole query.
        let deadline: Arc<Mutex<Option<Instant>>> = Arc::default();
        let watched = Arc::clone(&deadline);
        conn.progress_handler(
            10_000,
            Some(move || {
                watched
                    .lock()
                    .map(|d| d.is_some_and(|d| Instant::now() > d))
                    .unwrap_or(true)
            }),
        )?;
        // From here on nothing may change the database or reach outside it.
        conn.execute_batch("PRAGMA query_only = ON;")?;
        conn.set_limit(rusqlite::limits::Limit::SQLITE_LIMIT_ATTACHED, 0)?;
        // No string or blob (or row) past 64 MiB: `printf('%999999999d', 1)` or `zeroblob(1e9)` is
        // one step that the progress handler cannot interrupt (SQLite's default allows 1 GB).
        conn.set_limit(rusqlite::limits::Limit::SQLITE_LIMIT_LENGTH, 64 << 20)?;
        Ok(Self {
            conn,
            deadline,
            relations,
        })
    }

    pub fn relations(&self) -> &[RelationSchema] {
        &self.relations
    }

    fn set_deadline(&self, deadline: Option<Instant>) {
        if let Ok(mut d) = self.deadline.lock() {
            *d = deadline;
        }
    }

    /// Runs one read-only query under `limits`.
    pub fn query(&self, sql: &str, limits: &QueryLimits) -> Result<QueryResult, SqlError> {
        let trimmed = sql.trim().trim_end_matches(';').trim();
        let first = trimmed
            .split(|c: char| !c.is_ascii_alphabetic())
            .next()
            .unwrap_or("")
            .to_ascii_uppercase();
        if first != "SELECT" && first != "WITH" {
            let shown: String = trimmed.chars().take(40).collect();
            return Err(SqlError::NotASelect(format!("{shown:?}")));
        }
        let mut stmt = self.conn.prepare(trimmed)?;
        if !stmt.readonly() {
            return Err(SqlError::NotASelect("a statement that writes".into()));
        }
        let columns: Vec<String> = stmt.column_names().map(str::to_string).collect();
        self.set_deadline(Some(Instant::now() + limits.timeout));
        let result = (|| -> Result<QueryResult, rusqlite::Error> {
            let mut rows = stmt.query([])?;
            let mut out = Vec::new();
            let mut truncated = false;
            while let Some(row) = rows.next()? {
                if out.len() == limits.max_rows {
                    truncated = true;
                    break;
                }
                let mut values = Vec::with_capacity(columns.len());
                for i in 0..columns.len() {
                    values.push(match row.get_ref(i)? {
                        rusqlite::types::ValueRef::Null => None,
                        rusqlite::types::ValueRef::Integer(v) => Some(v.to_string()),
                        rusqlite::types::ValueRef::Real(v) => Some(format_real(v)),
                        rusqlite::types::ValueRef::Text(t) => {
                            Some(String::from_utf8_lossy(t).into_owned())
                        }
                        rusqlite::types::ValueRef::Blob(b) => Some(format!("<{} bytes>", b.len())),
                    });
                }
                out.push(values);
            }
            Ok(QueryResult {
                columns: columns.clone(),
                rows: out,
                truncated,
            })
        })();
        self.set_deadline(None);
        match result {
            Ok(r) => Ok(r),
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::OperationInterrupted =>
            {
                Err(SqlError::TimedOut(limits.timeout))
            }
            Err(e) => Err(e.into()),
        }
    }
}

impl Relation {
    /// Loads `table` as relation `name` (kept if a plain identifier, else sanitized like a
    /// column name).
    pub fn from_table(table: &Table, name: &str) -> Result<Self, SqlError> {
        Ok(Self {
            db: Database::new(&[(table, name)])?,
        })
    }

    pub fn schema(&self) -> &RelationSchema {
        &self.db.relations[0]
    }

    pub fn name(&self) -> &str {
        &self.schema().name
    }

    pub fn columns(&self) -> &[SqlColumn] {
        &self.schema().columns
    }

    pub fn row_count(&self) -> usize {
        self.schema().rows
    }

    /// Rows whose cell count differed from the header's (padded with NULL or cut).
    pub fn ragged_rows(&self) -> usize {
        self.schema().ragged_rows
    }

    /// Every SQL column name, lossy companions included, in table order.
    pub fn sql_column_names(&self) -> Vec<String> {
        self.schema().sql_column_names()
    }

    /// The CREATE statement the model sees (see [`RelationSchema::schema_text`]).
    pub fn schema_text(&self) -> String {
        self.schema().schema_text()
    }

    /// Runs one read-only query under `limits`.
    pub fn query(&self, sql: &str, limits: &QueryLimits) -> Result<QueryResult, SqlError> {
        self.db.query(sql, limits)
    }
}

/// Whole reals without a fraction print as integers (`3` not `3.0`): answers are compared as text.
fn format_real(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

pub mod grammar;
#[cfg(test)]
mod tests;
