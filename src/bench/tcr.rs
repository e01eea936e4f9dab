//! The TCR-style builder: sibling groups, the evidence-sufficiency check, question types, output.
//!
//! For every source table that a question touches, a group of `k` variants (k drawn from
//! `--siblings`) is made once and shared by all of that table's questions, so that every table of
//! the corpus derived from the same source is a sibling that the sufficiency check compares against.
//! A variant is a row subset (disjoint chunks of `--rows` rows when the table is large enough,
//! overlapping random subsets of 40–75 % of its rows when not), sometimes a column subset, with its
//! own renamed schema and value formats ([`super::variants`]). Tables no question touches go in as
//! one variant each.
//!
//! A question's SQL runs on an in-memory SQLite copy of every variant that keeps the ORIGINAL table
//! and column names and values (a variant that lacks a column the SQL needs simply fails to answer).
//! Variants whose answer no sibling shares (a sibling may give another answer or none) are the
//! candidates; the gold variant is drawn from them, and the question is dropped when there is none.
//! The renamed and reformatted view is only what the corpus file shows. The question's SQL is also
//! rewritten into the gold variant's renamed schema and run on a renamed copy as a self-check.
//!
//! Every random choice comes from a ChaCha8 stream seeded by the seed and a name (`db/table`, the
//! qid), so the output does not depend on processing order and the same seed gives byte-identical
//! files. (ChaCha8 and `rand`'s sampling are value-stable within `rand` 0.9 / `rand_chacha` 0.9.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rand::seq::SliceRandom;
use rusqlite::types::Value;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::group::{make_group, original_view, render, rng_for, Group};
use super::sql::{self, Answer, Column};
use super::variants::{ColumnFormat, Dictionaries, NamingStyle, BUILTIN_DICTIONARIES};
use super::BenchError;
use crate::agent::TaskType;
use crate::corpus::{Serialization, TextFormat};

/// What to build.
#[derive(Debug, Clone)]
pub struct TcrOptions {
    pub seed: u64,
    /// Variants per group, inclusive range.
    pub siblings: (usize, usize),
    /// Most rows per variant.
    pub rows: usize,
    /// Corpus file format; `Mixed` picks one per table from the table's id and the seed.
    pub serialization: Serialization,
    /// Draw a progress bar on stderr.
    pub progress: bool,
}

impl Default for TcrOptions {
    fn default() -> Self {
        TcrOptions {
            seed: 0,
            siblings: (3, 5),
            rows: 80,
            serialization: Serialization::Mixed { seed: 0 },
            progress: false,
        }
    }
}

/// TCR-Bench's question types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum QuestionType {
    /// Exact-match lookup: one row of non-aggregated values.
    #[serde(rename = "EM")]
    Em,
    /// Filter returning several rows.
    #[serde(rename = "SF")]
    Sf,
    /// Aggregate (COUNT/SUM/AVG/MIN/MAX in the SELECT list).
    #[serde(rename = "SA")]
    Sa,
}

impl QuestionType {
    pub fn name(self) -> &'static str {
        match self {
            QuestionType::Em => "EM",
            QuestionType::Sf => "SF",
            QuestionType::Sa => "SA",
        }
    }
}

/// An input line (Spider's `spider_single_table.jsonl`); other fields are ignored.
#[derive(Debug, Clone, Deserialize)]
struct Question {
    qid: String,
    db_id: String,
    question: String,
    sql: String,
    table: String,
}

/// A query line of `queries.jsonl`: the eval format plus the TCR fields.
#[derive(Debug, Clone, Serialize)]
pub struct TcrQuery {
    pub qid: String,
    pub query: String,
    pub task: TaskType,
    /// One acceptable answer: every cell of the SQL result, row by row, joined with ", ".
    pub answers: Vec<String>,
    pub gold_tables: Vec<String>,
    /// Every variant of the gold table's group, gold included, in variant order.
    pub group_tables: Vec<String>,
    /// The gold table again, for `tableseek retrieve`'s recall.
    pub gold_table: String,
    pub question_type: QuestionType,
    /// Rows (0-based, in the gold variant's order) whose removal changes the answer.
    pub answer_index: Vec<usize>,
    /// The SQL result, cell by cell, as the answer text writes it.
    pub answer_rows: Vec<Vec<String>>,
    pub db_id: String,
    pub source_table: String,
    /// The question's SQL under the original names.
    pub sql: String,
    /// The same SQL under the gold variant's renamed table and columns.
    pub gold_sql: String,
}

/// How one corpus table was made (`tables.jsonl`).
#[derive(Debug, Clone, Serialize)]
pub struct TableRecord {
    pub id: String,
    pub db_id: String,
    pub source_table: String,
    pub variant: usize,
    pub group_size: usize,
    pub format: TextFormat,
    /// The renamed table name (what `gold_sql` queries).
    pub table_name: String,
    pub naming: NamingStyle,
    pub columns: Vec<ColumnRecord>,
    /// Source row positions (0-based, the database's order) this variant holds, in order.
    pub source_rows: Vec<usize>,
    pub bytes: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct ColumnRecord {
    pub source: String,
    pub name: String,
    pub format: ColumnFormat,
}

/// One corpus file: its record, and the text written.
#[derive(Debug, Clone)]
pub struct TcrTable {
    pub record: TableRecord,
    pub text: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct SourceHash {
    pub file: String,
    pub sha256: String,
}

/// `manifest.json`.
#[derive(Debug, Clone, Serialize)]
pub struct Manifest {
    pub generator: String,
    pub seed: u64,
    pub siblings: [usize; 2],
    pub rows: usize,
    pub format: String,
    pub questions_read: usize,
    pub questions_kept: usize,
    pub question_types: BTreeMap<QuestionType, usize>,
    /// Why the other questions were dropped.
    pub dropped: BTreeMap<String, usize>,
    /// Sibling groups (source tables with questions), and how many of them kept a question.
    pub groups: usize,
    pub groups_with_questions: usize,
    pub tables: usize,
    pub tables_by_format: BTreeMap<TextFormat, usize>,
    pub corpus_bytes: usize,
    /// Source tables left out because they hold no rows.
    pub empty_source_tables: Vec<String>,
    pub questions: SourceHash,
    pub databases: BTreeMap<String, SourceHash>,
    pub dictionaries_sha256: String,
    pub licences: Vec<String>,
}

/// A built benchmark, in memory until [`TcrBench::write`].
#[derive(Debug, Clone)]
pub struct TcrBench {
    pub tables: Vec<TcrTable>,
    pub queries: Vec<TcrQuery>,
    pub manifest: Manifest,
    /// Licence files found beside the databases: (file name, contents), copied to the output.
    pub licences: Vec<(String, Vec<u8>)>,
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn read_file(path: &Path) -> Result<Vec<u8>, BenchError> {
    std::fs::read(path).map_err(|source| BenchError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn format_name(serialization: Serialization) -> &'static str {
    match serialization {
        Serialization::Mixed { .. } => "mixed",
        Serialization::Fixed(TextFormat::Markdown) => "markdown",
        Serialization::Fixed(TextFormat::Html) => "html",
        Serialization::Fixed(TextFormat::Csv) | Serialization::Own => "csv",
    }
}

/// `(db_id, path)` of every database file under `dir` (two levels deep, Spider's
/// `database/<db>/<db>.sqlite` included), sorted by db id; the first path wins a duplicate id.
fn find_databases(dir: &Path) -> Result<Vec<(String, PathBuf)>, BenchError> {
    let mut found: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut paths: Vec<PathBuf> = walkdir::WalkDir::new(dir)
        .max_depth(2)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .map(|e| e.into_path())
        .filter(|p| {
            p.extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| matches!(e, "sqlite" | "sqlite3" | "db"))
        })
        .collect();
    paths.sort();
    for path in paths {
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if let Some(first) = found.get(stem) {
            tracing::warn!(
                "{}: database id {stem} already taken by {}",
                path.display(),
                first.display()
            );
            continue;
        }
        found.insert(stem.to_string(), path);
    }
    if found.is_empty() {
        return Err(BenchError::NoDatabases(dir.to_path_buf()));
    }
    Ok(found.into_iter().collect())
}

/// Licence files (`LICENSE*`, `COPYING*`) in `dir` and its parent, sorted by name.
fn find_licences(dir: &Path) -> Result<Vec<(String, Vec<u8>)>, BenchError> {
    let mut licences = BTreeMap::new();
    for folder in [Some(dir), dir.parent()].into_iter().flatten() {
        let Ok(entries) = std::fs::read_dir(folder) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            let name = entry.file_name().to_string_lossy().into_owned();
            let upper = name.to_ascii_uppercase();
            if (upper.starts_with("LICENSE") || upper.starts_with("COPYING"))
                && entry.path().is_file()
                && !licences.contains_key(&name)
            {
                licences.insert(name, read_file(&entry.path())?);
            }
        }
    }
    Ok(licences.into_iter().collect())
}

/// An answer cell as text: integers as they are, reals to at most two decimals (what a reader of
/// the table can state; F1 compares `504.0` and `504` alike), text as is; NULL is no cell.
fn answer_cell(value: &Value) -> Option<String> {
    match value {
        Value::Null => None,
        Value::Integer(i) => Some(i.to_string()),
        Value::Real(r) => {
            let text = format!("{r:.2}");
            let text = text.trim_end_matches('0').trim_end_matches('.');
            Some(text.to_string())
        }
        Value::Text(t) => Some(t.trim().to_string()),
        Value::Blob(b) => Some(hex::encode(b)),
    }
}

/// Why a question was not kept.
type Dropped = &'static str;

fn judge(
    question: &Question,
    group: &Group,
    seed: u64,
) -> Result<Result<TcrQuery, Dropped>, BenchError> {
    let answers: Vec<Option<Answer>> = group
        .copies
        .iter()
        .map(|conn| sql::run_query(conn, &question.sql))
        .collect();
    if answers.iter().all(Option::is_none) {
        return Ok(Err("no variant answers"));
    }
    let mut candidates: Vec<usize> = (0..answers.len())
        .filter(|&i| {
            answers[i].as_ref().is_some_and(|mine| {
                answers
                    .iter()
                    .enumerate()
                    .all(|(j, other)| j == i || other.as_ref().is_none_or(|o| !o.same_as(mine)))
            })
        })
        .collect();
    if candidates.is_empty() {
        return Ok(Err("a sibling gives the same answer"));
    }
    candidates.shuffle(&mut rng_for(seed, &["gold", &question.qid]));
    for gold in candidates {
        let Some(answer) = answers[gold].as_ref() else {
            continue;
        };
        let variant = &group.variants[gold];
        let index = sql::answer_index(
            &group.copies[gold],
            &group.source.name,
            variant.rows.len(),
            &question.sql,
            answer,
        )
        .map_err(|e| BenchError::Variant {
            id: variant.id.clone(),
            source: e,
        })?;
        if index.is_empty() {
            continue;
        }
        // The renamed SQL on a renamed copy must give the same answer: the schema in the corpus
        // file and the SQL recorded for it agree.
        let renames: Vec<(String, String)> = variant
            .columns
            .iter()
            .zip(&variant.column_names)
            .map(|(&c, name)| (group.source.columns[c].name.clone(), name.clone()))
            .collect();
        let gold_sql = sql::rename_sql(
            &question.sql,
            (&group.source.name, &variant.table_name),
            &renames,
        );
        let (columns, rows) = original_view(&group.source, variant);
        let renamed_columns: Vec<Column> = columns
            .into_iter()
            .zip(&variant.column_names)
            .map(|(c, name)| Column {
                name: name.clone(),
                decl_type: c.decl_type,
            })
            .collect();
        let renamed =
            sql::load_table(&variant.table_name, &renamed_columns, &rows).map_err(|e| {
                BenchError::Variant {
                    id: variant.id.clone(),
                    source: e,
                }
            })?;
        if !sql::run_query(&renamed, &gold_sql).is_some_and(|a| a.same_as(answer)) {
            tracing::warn!(qid = %question.qid, %gold_sql, "renamed SQL disagrees");
            return Ok(Err("renamed SQL disagrees"));
        }
        let answer_rows: Vec<Vec<String>> = answer
            .rows
            .iter()
            .map(|row| row.iter().filter_map(answer_cell).collect())
            .collect();
        let text = answer_rows
            .iter()
            .flatten()
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        let question_type = if sql::selects_aggregate(&question.sql) {
            QuestionType::Sa
        } else if answer.rows.len() > 1 {
            QuestionType::Sf
        } else {
            QuestionType::Em
        };
        let group_tables: Vec<String> = group.variants.iter().map(|v| v.id.clone()).collect();
        return Ok(Ok(TcrQuery {
            qid: question.qid.clone(),
            query: question.question.clone(),
            task: TaskType::Tableqa,
            answers: vec![text],
            gold_tables: vec![variant.id.clone()],
            group_tables,
            gold_table: variant.id.clone(),
            question_type,
            answer_index: index,
            answer_rows,
            db_id: group.db_id.clone(),
            source_table: group.source.name.clone(),
            sql: question.sql.clone(),
            gold_sql,
        }));
    }
    Ok(Err("the answer rests on no single row"))
}

/// Reads the questions; lines that do not parse or repeat a qid are counted in `dropped`.
fn read_questions(
    path: &Path,
    text: &str,
    dropped: &mut BTreeMap<String, usize>,
) -> (usize, Vec<Question>) {
    let mut read = 0;
    let mut seen = BTreeSet::new();
    let mut questions = Vec::new();
    for (line_no, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        read += 1;
        match serde_json::from_str::<Question>(line) {
            Ok(q) if seen.insert(q.qid.clone()) => questions.push(q),
            Ok(q) => {
                tracing::warn!(
                    "{}:{}: duplicate qid {}",
                    path.display(),
                    line_no + 1,
                    q.qid
                );
                *dropped.entry("duplicate qid".into()).or_default() += 1;
            }
            Err(e) => {
                tracing::warn!("{}:{}: {e}", path.display(), line_no + 1);
                *dropped.entry("malformed line".into()).or_default() += 1;
            }
        }
    }
    (read, questions)
}

fn progress_bar(show: bool, len: usize) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(len as u64), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("questions {bar:40} {pos}/{len} {elapsed}") {
        bar.set_style(style);
    }
    bar
}

/// Builds the benchmark from every database under `db_dir` and the questions in `questions_path`.
pub fn build_tcr(
    db_dir: &Path,
    questions_path: &Path,
    options: &TcrOptions,
) -> Result<TcrBench, BenchError> {
    let (lo, hi) = options.siblings;
    if lo < 2 || hi < lo {
        return Err(BenchError::Options(format!(
            "siblings {lo}..{hi}: a group needs at least 2 variants and lo <= hi"
        )));
    }
    if options.rows == 0 {
        return Err(BenchError::Options("rows must be at least 1".into()));
    }
    let dict = Dictionaries::builtin();
    let question_bytes = read_file(questions_path)?;
    let mut dropped: BTreeMap<String, usize> = BTreeMap::new();
    let (questions_read, questions) = read_questions(
        questions_path,
        &String::from_utf8_lossy(&question_bytes),
        &mut dropped,
    );

    // Which source tables have questions: (db, lowercase table), as SQLite matches names.
    let asked: BTreeSet<(String, String)> = questions
        .iter()
        .map(|q| (q.db_id.clone(), q.table.to_lowercase()))
        .collect();
    let mut databases = BTreeMap::new();
    let mut groups: BTreeMap<(String, String), Group> = BTreeMap::new();
    let mut singles: Vec<Group> = Vec::new();
    let mut empty_source_tables = Vec::new();
    for (db_id, path) in find_databases(db_dir)? {
        let bytes = read_file(&path)?;
        databases.insert(
            db_id.clone(),
            SourceHash {
                file: path
                    .strip_prefix(db_dir)
                    .unwrap_or(&path)
                    .to_string_lossy()
                    .replace('\\', "/"),
                sha256: sha256_hex(&bytes),
            },
        );
        for source in sql::read_database(&path)? {
            if source.rows.is_empty() || source.columns.is_empty() {
                empty_source_tables.push(format!("{db_id}/{}", source.name));
                continue;
            }
            let key = (db_id.clone(), source.name.to_lowercase());
            if asked.contains(&key) {
                groups.insert(key, make_group(dict, &db_id, source, true, options)?);
            } else {
                singles.push(make_group(dict, &db_id, source, false, options)?);
            }
        }
    }

    let bar = progress_bar(options.progress, questions.len());
    let mut queries = Vec::new();
    let mut kept_groups = BTreeSet::new();
    for question in &questions {
        bar.inc(1);
        let key = (question.db_id.clone(), question.table.to_lowercase());
        let outcome = match groups.get(&key) {
            Some(group) => judge(question, group, options.seed)?,
            None if databases.contains_key(&question.db_id) => Err("unknown or empty table"),
            None => Err("unknown database"),
        };
        match outcome {
            Ok(query) => {
                kept_groups.insert(key);
                queries.push(query);
            }
            Err(reason) => *dropped.entry(reason.into()).or_default() += 1,
        }
    }
    bar.finish_and_clear();

    let tables: Vec<TcrTable> = groups
        .values()
        .chain(&singles)
        .flat_map(|group| group.variants.iter().map(move |v| (group, v)))
        .map(|(group, variant)| render(dict, group, variant))
        .collect();
    let mut tables = tables;
    tables.sort_by(|a, b| a.record.id.cmp(&b.record.id));
    let mut question_types = BTreeMap::new();
    for query in &queries {
        *question_types.entry(query.question_type).or_default() += 1;
    }
    let mut tables_by_format = BTreeMap::new();
    for table in &tables {
        *tables_by_format.entry(table.record.format).or_default() += 1;
    }
    let licences = find_licences(db_dir)?;
    let manifest = Manifest {
        generator: format!("tableseek {} bench build-tcr", env!("CARGO_PKG_VERSION")),
        seed: options.seed,
        siblings: [lo, hi],
        rows: options.rows,
        format: format_name(options.serialization).to_string(),
        questions_read,
        questions_kept: queries.len(),
        question_types,
        dropped,
        groups: groups.len(),
        groups_with_questions: kept_groups.len(),
        tables: tables.len(),
        tables_by_format,
        corpus_bytes: tables.iter().map(|t| t.text.len()).sum(),
        empty_source_tables,
        questions: SourceHash {
            file: questions_path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            sha256: sha256_hex(&question_bytes),
        },
        databases,
        dictionaries_sha256: sha256_hex(BUILTIN_DICTIONARIES.as_bytes()),
        licences: licences.iter().map(|(name, _)| name.clone()).collect(),
    };
    Ok(TcrBench {
        tables,
        queries,
        manifest,
        licences,
    })
}

impl TcrBench {
    /// Writes `corpus/`, `queries.jsonl`, `tables.jsonl`, `manifest.json` and the licence files
    /// into `out`, which must be new or empty (nothing is overwritten).
    pub fn write(&self, out: &Path) -> Result<(), BenchError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| BenchError::Io { path, source }
        };
        if let Ok(mut entries) = std::fs::read_dir(out) {
            if entries.next().is_some() {
                return Err(BenchError::OutputNotEmpty(out.to_path_buf()));
            }
        }
        let corpus = out.join("corpus");
        for table in &self.tables {
            let path = corpus.join(&table.record.id);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(io(parent))?;
            }
            std::fs::write(&path, &table.text).map_err(io(&path))?;
        }
        let mut lines = String::new();
        for query in &self.queries {
            lines.push_str(&serde_json::to_string(query)?);
            lines.push('\n');
        }
        let path = out.join("queries.jsonl");
        std::fs::write(&path, lines).map_err(io(&path))?;
        let mut lines = String::new();
        for table in &self.tables {
            lines.push_str(&serde_json::to_string(&table.record)?);
            lines.push('\n');
        }
        let path = out.join("tables.jsonl");
        std::fs::write(&path, lines).map_err(io(&path))?;
        let path = out.join("manifest.json");
        let mut manifest = serde_json::to_string_pretty(&self.manifest)?;
        manifest.push('\n');
        std::fs::write(&path, manifest).map_err(io(&path))?;
        for (name, bytes) in &self.licences {
            let path = out.join(name);
            std::fs::write(&path, bytes).map_err(io(&path))?;
        }
        Ok(())
    }
}
