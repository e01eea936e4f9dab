//! Evaluation datasets: one JSONL query format, plus an adapter for TARGET-TabFact's claim files.
//!
//! The native format, one JSON object per line:
//! `{"qid", "query", "task": "tableqa"|"fact_verification", "answers"?: [..], "label"?: 0|1,
//! "gold_tables": [..], "group_tables"?: [..]}`. Table ids are corpus ids (paths relative to the
//! corpus directory).
//!
//! TabFact lines (`{"qid", "claim", "label", "gold_table"}`, as in `data/tabfact/test.jsonl`) are
//! recognised by their `claim` field and read as fact-verification queries; their `gold_table`
//! file names are already the corpus ids of `data/tabfact/tables`.
//!
//! Spider single-table lines (`{"qid", "db_id", "question", "table", "answer": [[..]], ..}`, as in
//! `data/spider/spider_single_table.jsonl`) are recognised by `db_id` and read as table-QA queries
//! over `data/spider/tables/<db_id>__<table>.csv`; the executed answer's cells, joined by ", ", are
//! the one gold answer. Questions whose SQL returned nothing (23 in Spider dev) cannot be scored by
//! F1 and are skipped with a warning.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::agent::TaskType;

/// Why a dataset could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}: {message}")]
    Invalid {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("{path}: duplicate qid {qid:?} (lines {first} and {second})")]
    DuplicateQid {
        path: PathBuf,
        qid: String,
        first: usize,
        second: usize,
    },
    #[error("{0}: no queries")]
    Empty(PathBuf),
}

/// One evaluation query with its gold data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalQuery {
    pub qid: String,
    pub query: String,
    pub task: TaskType,
    /// Acceptable answers (table QA).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answers: Vec<String>,
    /// 1 supported, 0 refuted (fact verification).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<i64>,
    /// The first one is the table the recall metrics test for.
    pub gold_tables: Vec<String>,
    /// Sibling tables for the group-recall metrics; `None` for datasets without groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_tables: Option<Vec<String>>,
}

impl EvalQuery {
    /// The table R@k and R@all test for.
    pub fn gold_table(&self) -> &str {
        self.gold_tables.first().map_or("", String::as_str)
    }

    fn check(&self) -> Result<(), String> {
        if self.qid.trim().is_empty() {
            return Err("empty qid".into());
        }
        if self.query.trim().is_empty() {
            return Err("empty query".into());
        }
        if self.gold_tables.is_empty() {
            return Err("gold_tables is empty".into());
        }
        match self.task {
            TaskType::Tableqa if self.answers.is_empty() => {
                Err("a tableqa query needs at least one answer".into())
            }
            TaskType::FactVerification if !matches!(self.label, Some(0 | 1)) => {
                Err("a fact_verification query needs label 0 or 1".into())
            }
            _ => Ok(()),
        }
    }
}

#[derive(Deserialize)]
struct TabFactLine {
    qid: String,
    claim: String,
    label: i64,
    gold_table: String,
}

impl From<TabFactLine> for EvalQuery {
    fn from(line: TabFactLine) -> Self {
        Self {
            qid: line.qid,
            query: line.claim,
            task: TaskType::FactVerification,
            answers: Vec::new(),
            label: Some(line.label),
            gold_tables: vec![line.gold_table],
            group_tables: None,
        }
    }
}

#[derive(Deserialize)]
struct SpiderLine {
    qid: String,
    db_id: String,
    question: String,
    table: String,
    answer: Vec<Vec<serde_json::Value>>,
}

impl SpiderLine {
    /// `None` when the SQL returned no rows or only NULLs: nothing to score an answer against.
    fn into_query(self) -> Option<EvalQuery> {
        let cells: Vec<String> = self
            .answer
            .iter()
            .flatten()
            .filter_map(|cell| match cell {
                serde_json::Value::Null => None,
                serde_json::Value::String(s) => Some(s.clone()),
                other => Some(other.to_string()),
            })
            .collect();
        if cells.is_empty() {
            return None;
        }
        Some(EvalQuery {
            qid: self.qid,
            query: self.question,
            task: TaskType::Tableqa,
            answers: vec![cells.join(", ")],
            label: None,
            gold_tables: vec![format!("{}__{}.csv", self.db_id, self.table)],
            group_tables: None,
        })
    }
}

/// `Ok(None)`: a valid line with nothing to score (see the module notes on Spider).
fn parse_line(text: &str) -> Result<Option<EvalQuery>, String> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let query = if value.get("claim").is_some() && value.get("query").is_none() {
        serde_json::from_value::<TabFactLine>(value).map(EvalQuery::from)
    } else if value.get("db_id").is_some() && value.get("query").is_none() {
        return Ok(serde_json::from_value::<SpiderLine>(value)
            .map_err(|e| e.to_string())?
            .into_query());
    } else {
        serde_json::from_value::<EvalQuery>(value)
    }
    .map_err(|e| e.to_string())?;
    query.check()?;
    Ok(Some(query))
}

/// Reads a dataset file (native or TabFact lines, blank lines ignored). Qids must be unique:
/// resuming a run relies on them.
pub fn load_queries(path: &Path) -> Result<Vec<EvalQuery>, DatasetError> {
    let (queries, unscorable) = read_lines(path, parse_line, |q: &EvalQuery| &q.qid)?;
    if unscorable > 0 {
        tracing::warn!(
            path = %path.display(),
            skipped = unscorable,
            "questions with an empty executed answer skipped (nothing to score)"
        );
    }
    Ok(queries)
}

/// The queries `parse` makes of a file's non-blank lines, and how many lines it passed over
/// (`Ok(None)`); an error names the line, a repeated qid both lines, and a file with no query is
/// an error too.
fn read_lines<T>(
    path: &Path,
    parse: impl Fn(&str) -> Result<Option<T>, String>,
    qid: impl Fn(&T) -> &String,
) -> Result<(Vec<T>, usize), DatasetError> {
    let text = std::fs::read_to_string(path).map_err(|source| DatasetError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut queries = Vec::new();
    let mut seen = std::collections::BTreeMap::new();
    let mut passed_over = 0usize;
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let parsed = parse(line).map_err(|message| DatasetError::Invalid {
            path: path.to_path_buf(),
            line: index + 1,
            message,
        })?;
        let Some(query) = parsed else {
            passed_over += 1;
            continue;
        };
        if let Some(first) = seen.insert(qid(&query).clone(), index + 1) {
            return Err(DatasetError::DuplicateQid {
                path: path.to_path_buf(),
                qid: qid(&query).clone(),
                first,
                second: index + 1,
            });
        }
        queries.push(query);
    }
    if queries.is_empty() {
        return Err(DatasetError::Empty(path.to_path_buf()));
    }
    Ok((queries, passed_over))
}

/// A query to rank tables for: what `tableseek retrieve` reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankingQuery {
    pub qid: String,
    pub query: String,
    /// The first one is the table recall tests for; empty when the line names none.
    pub gold_tables: Vec<String>,
}

/// The fields a ranking needs, under every name the formats above give them.
#[derive(Deserialize)]
struct RankingLine {
    qid: serde_json::Value,
    query: Option<String>,
    claim: Option<String>,
    question: Option<String>,
    #[serde(default)]
    gold_tables: Vec<String>,
    gold_table: Option<String>,
}

/// One rule for both readers: a line `load_queries` accepts is read by `load_ranking_queries` as
/// the same qid, query text and gold tables (Spider lines with an empty answer included: a
/// ranking needs no answer). Lines that only name a `qid` (string or integer) and a `query`,
/// `claim` or `question`, with an optional `gold_tables`/`gold_table`, are ranking queries too.
fn parse_ranking_line(text: &str) -> Result<RankingQuery, String> {
    if let Ok(Some(query)) = parse_line(text) {
        return Ok(RankingQuery {
            qid: query.qid,
            query: query.query,
            gold_tables: query.gold_tables,
        });
    }
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    if value.get("db_id").is_some() && value.get("query").is_none() {
        let line: SpiderLine = serde_json::from_value(value).map_err(|e| e.to_string())?;
        return Ok(RankingQuery {
            qid: line.qid,
            query: line.question,
            gold_tables: vec![format!("{}__{}.csv", line.db_id, line.table)],
        });
    }
    let line: RankingLine = serde_json::from_value(value).map_err(|e| e.to_string())?;
    let qid = match line.qid {
        serde_json::Value::String(qid) => qid,
        serde_json::Value::Number(n) => n.to_string(),
        other => return Err(format!("qid must be a string or an integer, not {other}")),
    };
    if qid.trim().is_empty() {
        return Err("empty qid".into());
    }
    let query = line
        .query
        .or(line.claim)
        .or(line.question)
        .filter(|q| !q.trim().is_empty())
        .ok_or("no `query`, `claim` or `question` text")?;
    let mut gold_tables = line.gold_tables;
    gold_tables.extend(line.gold_table);
    Ok(RankingQuery {
        qid,
        query,
        gold_tables,
    })
}

/// Reads the queries of a ranking file (any dataset `load_queries` reads, and ranking-only lines;
/// see [`parse_ranking_line`]'s rule). Qids must be unique, as in `load_queries`.
pub fn load_ranking_queries(path: &Path) -> Result<Vec<RankingQuery>, DatasetError> {
    let parse = |line: &str| parse_ranking_line(line).map(Some);
    Ok(read_lines(path, parse, |q: &RankingQuery| &q.qid)?.0)
}

/// Where a named dataset lives under the shared directory: its query file and default corpus.
/// Anything else is taken as a path to a JSONL file (with no default corpus).
pub fn resolve_dataset(name: &str, shared: &Path) -> (PathBuf, Option<PathBuf>) {
    let tabfact = shared.join("data/tabfact");
    let spider = shared.join("data/spider");
    match name {
        "tabfact-test-1k" => (tabfact.join("test-1k.jsonl"), Some(tabfact.join("tables"))),
        "tabfact-test" => (tabfact.join("test.jsonl"), Some(tabfact.join("tables"))),
        "spider-single-table" => (
            spider.join("spider_single_table.jsonl"),
            Some(spider.join("tables")),
        ),
        path => (PathBuf::from(path), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_native_and_tabfact_lines() {
        let native = parse_line(
            r#"{"qid":"s1","query":"Capital?","task":"tableqa","answers":["Canberra"],"gold_tables":["a.csv"]}"#,
        )
        .unwrap()
        .unwrap();
        assert_eq!(native.task, TaskType::Tableqa);
        assert_eq!(native.gold_table(), "a.csv");
        let claim = parse_line(
            r#"{"qid":"test-1_2","claim":"x be y","label":1,"gold_table":"1-2.html.csv","small_test":false}"#,
        )
        .unwrap()
        .unwrap();
        assert_eq!(claim.task, TaskType::FactVerification);
        assert_eq!(claim.query, "x be y");
        assert_eq!(claim.label, Some(1));
        assert_eq!(claim.gold_tables, ["1-2.html.csv"]);
    }

    #[test]
    fn reads_spider_lines_and_skips_empty_answers() {
        let q = parse_line(
            r#"{"qid":"spider-dev-2","db_id":"concert_singer","question":"Names and ages?","sql":"SELECT name, age FROM singer","table":"singer","answer":[["Joe Sharp",52],["Rose White",41.0]],"order_matters":false,"answer_empty":false}"#,
        )
        .unwrap()
        .unwrap();
        assert_eq!(q.task, TaskType::Tableqa);
        assert_eq!(q.query, "Names and ages?");
        assert_eq!(q.gold_tables, ["concert_singer__singer.csv"]);
        assert_eq!(q.answers, ["Joe Sharp, 52, Rose White, 41.0"]);
        let empty = parse_line(
            r#"{"qid":"s","db_id":"d","question":"q","sql":"s","table":"t","answer":[[null]],"answer_empty":true}"#,
        )
        .unwrap();
        assert!(empty.is_none());
    }

    #[test]
    fn rejects_queries_that_cannot_be_scored() {
        assert!(
            parse_line(r#"{"qid":"a","query":"q","task":"tableqa","gold_tables":["t"]}"#)
                .unwrap_err()
                .contains("answer")
        );
        assert!(parse_line(
            r#"{"qid":"a","query":"q","task":"fact_verification","label":2,"gold_tables":["t"]}"#
        )
        .unwrap_err()
        .contains("label"));
        assert!(parse_line(
            r#"{"qid":"a","query":"q","task":"tableqa","answers":["x"],"gold_tables":[]}"#
        )
        .unwrap_err()
        .contains("gold_tables"));
    }

    #[test]
    fn ranking_reader_reads_what_eval_reads_and_ranking_only_lines() {
        let lines = [
            r#"{"qid":"s1","query":"Capital?","task":"tableqa","answers":["Canberra"],"gold_tables":["a.csv","b.csv"]}"#,
            r#"{"qid":"test-1_2","claim":"x be y","label":1,"gold_table":"1-2.html.csv"}"#,
            r#"{"qid":"s","db_id":"d","question":"q?","sql":"s","table":"t","answer":[[null]],"answer_empty":true}"#,
        ];
        for line in &lines[..2] {
            let eval = parse_line(line).unwrap().unwrap();
            let ranking = parse_ranking_line(line).unwrap();
            assert_eq!(
                (ranking.qid, ranking.query, ranking.gold_tables),
                (eval.qid, eval.query, eval.gold_tables)
            );
        }
        // Unscorable for eval, still a query to rank.
        let spider = parse_ranking_line(lines[2]).unwrap();
        assert_eq!(spider.gold_tables, ["d__t.csv"]);
        // Ranking-only: integer qid, no task, no answer, no gold.
        let bare = parse_ranking_line(r#"{"qid":7,"question":"Who?"}"#).unwrap();
        assert_eq!((bare.qid.as_str(), bare.query.as_str()), ("7", "Who?"));
        assert!(bare.gold_tables.is_empty());
        assert!(parse_ranking_line(r#"{"qid":"a"}"#)
            .unwrap_err()
            .contains("query"));
        assert!(parse_ranking_line(r#"{"qid":["a"],"query":"q"}"#)
            .unwrap_err()
            .contains("qid"));
    }
}
