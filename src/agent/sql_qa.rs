//! QA by SQL: the model writes one SQLite query over a table loaded as a relation
//! ([`crate::sql::Relation`]), the query runs under guards, and the answer is read off the result
//! rows. A query that fails gets one retry with SQLite's message.
//!
//! Why: a small model reading a serialized table rarely counts, ranks or aggregates correctly;
//! a coder model writing SQL over the same table does (llama.cpp with Qwen2.5-Coder-0.5B: 25 of 30
//! Spider questions from the CREATE statement and three rows). The prompt is that plain one.

use serde::{Deserialize, Serialize};

use super::parse::Verdict;
use super::{AgentError, CallKind, ChatMessage, Llm, LlmRequest, LlmResponse};
use crate::corpus::Table;
use crate::sql::{QueryLimits, Relation};

/// The relation's name in every prompt: the model never sees the table's real id.
const TABLE_NAME: &str = "t";
/// Rows of the table shown beside the schema.
const EXAMPLE_ROWS: usize = 3;
/// Result rows kept in the trajectory and read into the answer.
const ANSWER_ROWS: usize = 50;

/// One query the model wrote, and what running it gave.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SqlAttempt {
    pub sql: String,
    /// At most [`ANSWER_ROWS`] result rows, values as text (`null` for NULL).
    pub rows: Vec<Vec<Option<String>>>,
    /// More rows existed than the trajectory keeps.
    pub truncated: bool,
    /// SQLite's or the guard's message, when the query did not run.
    pub error: Option<String>,
    pub ms: f64,
}

/// The outcome of SQL QA on one table.
#[derive(Debug, Clone, PartialEq)]
pub struct SqlQaOutcome {
    /// The result values, row by row (`, ` within a row, `; ` between rows); empty when no query ran.
    pub answer: String,
    /// Whether some query ran without error.
    pub parsed: bool,
    pub attempts: Vec<SqlAttempt>,
    /// Each LLM call, for the trajectory's accounting.
    pub responses: Vec<LlmResponse>,
}

/// The user message: the relation's CREATE statement, a few rows, the question.
pub fn sql_prompt(relation: &Relation, query: &str) -> Result<String, crate::sql::SqlError> {
    let sample = relation.query(
        &format!("SELECT * FROM {TABLE_NAME} LIMIT {EXAMPLE_ROWS}"),
        &QueryLimits::default(),
    )?;
    let rows: Vec<String> = sample
        .rows
        .iter()
        .map(|row| {
            let cells: Vec<String> = row
                .iter()
                .map(|v| match v {
                    None => "NULL".to_string(),
                    Some(v) if v.parse::<f64>().is_ok() => v.clone(),
                    Some(v) => format!("'{}'", v.replace('\'', "''")),
                })
                .collect();
            format!("({})", cells.join(", "))
        })
        .collect();
    Ok(format!(
        "SQLite table:\n{}\nExample rows: [{}]\n\nWrite one SQLite query that answers: {query}\nReturn only the SQL.",
        relation.schema_text(),
        rows.join(", ")
    ))
}

/// The SQL in a reply: the inside of a fenced block if there is one, from the first `SELECT` or
/// `WITH` to the first `;` (or the end).
pub fn extract_sql(reply: &str) -> Option<String> {
    let body = match reply.split_once("```") {
        Some((_, rest)) => {
            let rest = rest
                .strip_prefix("sqlite")
                .or_else(|| rest.strip_prefix("sql"))
                .unwrap_or(rest);
            rest.split("```").next().unwrap_or(rest)
        }
        None => reply,
    };
    let upper = body.to_ascii_uppercase();
    let start = [upper.find("SELECT"), upper.find("WITH")]
        .into_iter()
        .flatten()
        .min()?;
    let sql = body[start..].split(';').next().unwrap_or("").trim();
    (!sql.is_empty()).then(|| sql.to_string())
}

fn answer_text(rows: &[Vec<Option<String>>]) -> String {
    rows.iter()
        .map(|row| {
            row.iter()
                .map(|v| v.as_deref().unwrap_or("null"))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// One table's SQL QA conversation: the prompt, and after a failed query the model's reply and the
/// error, so each call can be made (and counted against a step budget) by the caller.
pub struct SqlSession {
    relation: Relation,
    messages: Vec<ChatMessage>,
}

impl SqlSession {
    /// Loads `table` and writes the first prompt; `Err` with a message when the table cannot be
    /// a relation (no columns) — nothing to ask the model then.
    pub fn new(table: &Table, query: &str) -> Result<Self, String> {
        let relation = Relation::from_table(table, TABLE_NAME).map_err(|e| e.to_string())?;
        let prompt = sql_prompt(&relation, query).map_err(|e| e.to_string())?;
        Ok(Self {
            relation,
            messages: vec![ChatMessage::user(prompt)],
        })
    }

    /// What a constrained call may write: one SELECT over this relation's quoted names.
    pub fn grammar(&self) -> crate::engine::Grammar {
        crate::engine::Grammar::Lark(crate::sql::grammar::select_grammar(self.relation.schema()))
    }

    /// The conversation so far: what the next call sends.
    pub fn messages(&self) -> &[ChatMessage] {
        &self.messages
    }

    /// Runs the query in `reply`; a failure adds the reply and the error to the conversation,
    /// so the next call is the retry.
    pub fn run_reply(&mut self, reply: &str) -> SqlAttempt {
        let started = std::time::Instant::now();
        let limits = QueryLimits {
            max_rows: ANSWER_ROWS,
            ..QueryLimits::default()
        };
        let (sql, result) = match extract_sql(reply) {
            Some(sql) => {
                let result = self.relation.query(&sql, &limits);
                (sql, result.map_err(|e| e.to_string()))
            }
            None => (String::new(), Err("the reply holds no SELECT query".into())),
        };
        let ms = started.elapsed().as_secs_f64() * 1e3;
        match result {
            Ok(result) => SqlAttempt {
                sql,
                rows: result.rows,
                truncated: result.truncated,
                error: None,
                ms,
            },
            Err(error) => {
                self.messages.push(ChatMessage::assistant(reply));
                self.messages.push(ChatMessage::user(format!(
                    "The query failed: {error}\nWrite a corrected SQLite query. Return only the SQL."
                )));
                SqlAttempt {
                    sql,
                    rows: Vec::new(),
                    truncated: false,
                    error: Some(error),
                    ms,
                }
            }
        }
    }
}

impl SqlAttempt {
    /// The answer the rows give: values joined by `, ` within a row and `; ` between rows.
    pub fn answer(&self) -> String {
        answer_text(&self.rows)
    }

    /// Whether the query ran and returned something other than NULLs: an error or an empty
    /// result means this table did not answer.
    pub fn answered(&self) -> bool {
        self.error.is_none() && self.rows.iter().flatten().any(Option::is_some)
    }
}

/// The question SQL QA asks for a claim: a query whose result is 1 when the claim holds.
///
/// Why SQL for claims: given the gold table, Qwen2.5-Coder-0.5B labels every one of the first 40
/// TabFact test-1k claims SUPPORTED when it reads the table (text QA, constrained or free: 19
/// right), while the query it writes for this question decided 31 of them right.
pub fn claim_question(claim: &str) -> String {
    format!(
        "Is this claim true: \"{claim}\"? The query returns 1 if it is true and 0 if it is false."
    )
}

impl SqlAttempt {
    /// The verdict on a claim from the query that tested it ([`claim_question`]): supported when
    /// the first value is true to SQLite (a non-zero number), refuted otherwise (0, NULL, text,
    /// no rows: the table does not show the claim true); `None` when the query did not run.
    pub fn claim_verdict(&self) -> Option<Verdict> {
        if self.error.is_some() {
            return None;
        }
        let first = self
            .rows
            .first()
            .and_then(|row| row.first())
            .cloned()
            .flatten();
        let truthy = first
            .and_then(|v| v.trim().parse::<f64>().ok())
            .is_some_and(|x| x != 0.0);
        Some(if truthy {
            Verdict::Supported
        } else {
            Verdict::Refuted
        })
    }
}

/// Longest phrased answer, in tokens: a few words, where the rows are long a short list.
pub const PHRASE_TOKENS: usize = 96;

/// The call that phrases an answer from a query's rows (`--sql-answer phrased`).
pub fn phrase_request(query: &str, attempt: &SqlAttempt, kind: CallKind) -> LlmRequest {
    let mut rows = String::new();
    for row in &attempt.rows {
        let values: Vec<&str> = row.iter().map(|v| v.as_deref().unwrap_or("NULL")).collect();
        rows.push_str(&values.join(" | "));
        rows.push('\n');
    }
    if attempt.truncated {
        rows.push_str("(more rows not shown)\n");
    }
    LlmRequest {
        messages: vec![ChatMessage::user(format!(
            "Question: {query}\nSQL: {}\nResult rows:\n{rows}\nAnswer the question from these \
             rows in as few words as possible. Reply with the answer only.",
            attempt.sql
        ))],
        max_new_tokens: PHRASE_TOKENS,
        kind,
        constraint: None,
    }
}

/// The phrased answer: the reply's first non-empty line, an `Answer:` label dropped.
pub fn phrased_answer(reply: &str) -> String {
    let text = super::parse::strip_thinking(reply);
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    line.strip_prefix("Answer:")
        .unwrap_or(line)
        .trim()
        .to_string()
}

/// SQL QA on `table`: one query, and one retry with the error if it fails; with `phrase`, one
/// more call words the answer from the rows of a query that ran.
pub fn sql_qa<L: Llm + ?Sized>(
    llm: &mut L,
    query: &str,
    table: &Table,
    max_new_tokens: usize,
    kind: CallKind,
    phrase: bool,
) -> Result<SqlQaOutcome, AgentError> {
    let mut outcome = SqlQaOutcome {
        answer: String::new(),
        parsed: false,
        attempts: Vec::new(),
        responses: Vec::new(),
    };
    let mut session = match SqlSession::new(table, query) {
        Ok(session) => session,
        Err(error) => {
            outcome.attempts.push(SqlAttempt {
                sql: String::new(),
                rows: Vec::new(),
                truncated: false,
                error: Some(format!("table not loadable: {error}")),
                ms: 0.0,
            });
            return Ok(outcome);
        }
    };
    for _ in 0..2 {
        let response = llm.chat(&LlmRequest {
            messages: session.messages().to_vec(),
            max_new_tokens,
            kind,
            constraint: Some(session.grammar()),
        })?;
        let attempt = session.run_reply(&response.text);
        outcome.responses.push(response);
        let ran = attempt.error.is_none();
        if ran {
            outcome.answer = attempt.answer();
            outcome.parsed = true;
        }
        outcome.attempts.push(attempt);
        if ran {
            break;
        }
    }
    if let Some(ran) = outcome.attempts.last().filter(|a| phrase && a.answered()) {
        let response = llm.chat(&phrase_request(query, ran, kind))?;
        outcome.answer = phrased_answer(&response.text);
        outcome.responses.push(response);
    }
    Ok(outcome)
}

/// The probe's table: six cities, numbers a small model must compute rather than read.
const PROBE_TABLE: &str = "city,country,population,area_km2
Tokyo,Japan,13960000,2194
Delhi,India,16787941,1484
Shanghai,China,24870895,6341
Osaka,Japan,2750000,225
Mumbai,India,12442373,603
Beijing,China,21893095,16411";

/// The probe's questions and the answers their result rows must give (as [`SqlAttempt::answer`]
/// writes them): a count, an arg-max, a filtered sum and an ordered list.
const PROBE_QUESTIONS: [(&str, &str); 4] = [
    ("How many cities are in Japan?", "2"),
    ("Which city has the largest population?", "Shanghai"),
    (
        "What is the total population of the cities in India?",
        "29230314",
    ),
    (
        "List the cities in China in alphabetical order.",
        "Beijing; Shanghai",
    ),
];

/// How many probe questions the model's SQL answered exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeScore {
    pub correct: usize,
    pub total: usize,
}

impl ProbeScore {
    /// Three of four: SmolLM2-135M writes almost no valid SQL (1 of 30 Spider questions), the
    /// Qwen2.5-Coder models write it for most questions.
    pub fn passes(&self) -> bool {
        self.correct * 4 >= self.total * 3
    }
}

/// `--qa auto`'s measurement: SQL QA on four questions over a built-in table, greedy, so the
/// same model always gets the same score.
pub fn probe<L: Llm + ?Sized>(llm: &mut L) -> Result<ProbeScore, AgentError> {
    let tables = crate::corpus::parse_text(PROBE_TABLE, crate::corpus::TextFormat::Csv)
        .map_err(|e| AgentError::InvalidConfig(format!("the SQL probe's table: {e}")))?;
    let table = tables
        .first()
        .ok_or_else(|| AgentError::InvalidConfig("the SQL probe's table is empty".into()))?;
    let mut correct = 0;
    for (question, expected) in PROBE_QUESTIONS {
        let outcome = sql_qa(llm, question, table, 128, CallKind::Qa, false)?;
        if outcome.parsed && outcome.answer == expected {
            correct += 1;
        }
    }
    Ok(ProbeScore {
        correct,
        total: PROBE_QUESTIONS.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::testing::ScriptedLlm;
    use crate::corpus::{SourceFormat, TableMeta};

    #[test]
    fn a_claims_query_supports_it_only_with_a_true_first_value() {
        let attempt = |rows: Vec<Vec<Option<&str>>>, error: Option<&str>| SqlAttempt {
            sql: "SELECT 1".into(),
            rows: rows
                .into_iter()
                .map(|r| r.into_iter().map(|v| v.map(str::to_string)).collect())
                .collect(),
            truncated: false,
            error: error.map(str::to_string),
            ms: 0.0,
        };
        let supported = Some(Verdict::Supported);
        let refuted = Some(Verdict::Refuted);
        assert_eq!(
            attempt(vec![vec![Some("1")]], None).claim_verdict(),
            supported
        );
        assert_eq!(
            attempt(vec![vec![Some(" 2.5")]], None).claim_verdict(),
            supported
        );
        assert_eq!(
            attempt(vec![vec![Some("0")]], None).claim_verdict(),
            refuted
        );
        assert_eq!(
            attempt(vec![vec![Some("0.0")], vec![Some("1")]], None).claim_verdict(),
            refuted
        );
        assert_eq!(attempt(vec![vec![None]], None).claim_verdict(), refuted);
        assert_eq!(
            attempt(vec![vec![Some("yes")]], None).claim_verdict(),
            refuted
        );
        assert_eq!(attempt(vec![], None).claim_verdict(), refuted);
        assert_eq!(
            attempt(vec![], Some("no such column: x")).claim_verdict(),
            None
        );
    }

    fn singers() -> Table {
        Table {
            id: "concert_singer/singer.csv".into(),
            source_format: SourceFormat::Csv,
            header: vec!["Name".into(), "Country".into(), "Age".into()],
            rows: vec![
                vec!["Joe Sharp".into(), "Netherlands".into(), "52".into()],
                vec!["Timbaland".into(), "United States".into(), "32".into()],
                vec!["Justin Brown".into(), "France".into(), "29".into()],
                vec!["Rose White".into(), "France".into(), "41".into()],
            ],
            meta: TableMeta::default(),
        }
    }

    #[test]
    fn the_answer_is_computed_from_the_query_result() {
        let mut llm = ScriptedLlm::new([
            "```sql\nSELECT AVG(age), MIN(age), MAX(age) FROM t WHERE country = 'France';\n```",
        ]);
        let out = sql_qa(
            &mut llm,
            "Average, min, max age in France?",
            &singers(),
            128,
            CallKind::Qa,
            false,
        )
        .unwrap();
        assert!(out.parsed);
        assert_eq!(out.answer, "35, 29, 41");
        assert_eq!(out.attempts.len(), 1);
        assert_eq!(out.responses.len(), 1);
        // The prompt shows the schema and rows, never the table's id.
        let prompt = &llm.requests()[0].messages[0].content;
        assert!(prompt.contains("CREATE TABLE \"t\""), "{prompt}");
        assert!(
            prompt.contains("('Joe Sharp', 'Netherlands', 52)"),
            "{prompt}"
        );
        assert!(!prompt.contains("concert_singer"), "{prompt}");
    }

    #[test]
    fn a_failing_query_is_retried_once_with_the_error() {
        let mut llm = ScriptedLlm::new([
            "SELECT nationality FROM t",
            "SELECT COUNT(*) FROM t WHERE country = 'France'",
        ]);
        let out = sql_qa(
            &mut llm,
            "How many singers from France?",
            &singers(),
            128,
            CallKind::Qa,
            false,
        )
        .unwrap();
        assert_eq!(out.answer, "2");
        assert_eq!(out.attempts.len(), 2);
        let first_error = out.attempts[0].error.as_deref().unwrap();
        assert!(
            first_error.contains("no such column: nationality"),
            "{first_error}"
        );
        let retry = &llm.requests()[1].messages;
        assert_eq!(retry.len(), 3);
        assert!(retry[2].content.contains("no such column: nationality"));
    }

    #[test]
    fn two_failures_leave_no_answer_and_the_errors_recorded() {
        let mut llm = ScriptedLlm::new(["I cannot answer that.", "DELETE FROM t"]);
        let out = sql_qa(&mut llm, "How many?", &singers(), 128, CallKind::Qa, false).unwrap();
        assert!(!out.parsed);
        assert_eq!(out.answer, "");
        assert_eq!(out.attempts.len(), 2);
        assert!(out.attempts[0]
            .error
            .as_deref()
            .unwrap()
            .contains("no SELECT"));
        assert!(out.attempts[1].error.is_some());
    }

    #[test]
    fn a_phrased_answer_is_one_more_call_over_the_rows() {
        let mut llm = ScriptedLlm::new([
            "SELECT name FROM t WHERE age > 40 ORDER BY name",
            "Answer: Joe Sharp and Rose White\nThey are over 40.",
        ]);
        let out = sql_qa(
            &mut llm,
            "Who is over 40?",
            &singers(),
            128,
            CallKind::Qa,
            true,
        )
        .unwrap();
        assert_eq!(out.answer, "Joe Sharp and Rose White");
        assert_eq!(out.responses.len(), 2);
        let prompt = &llm.requests()[1].messages[0].content;
        assert!(prompt.contains("Joe Sharp\nRose White\n"), "{prompt}");
        // No phrasing call after a query that found nothing.
        let mut llm = ScriptedLlm::new(["SELECT name FROM t WHERE age > 90"]);
        let out = sql_qa(
            &mut llm,
            "Who is over 90?",
            &singers(),
            128,
            CallKind::Qa,
            true,
        )
        .unwrap();
        assert_eq!((out.answer.as_str(), out.responses.len()), ("", 1));
    }

    #[test]
    fn the_probe_scores_the_models_queries() {
        let right = [
            "SELECT COUNT(*) FROM t WHERE country = 'Japan'",
            "SELECT city FROM t ORDER BY population DESC LIMIT 1",
            "SELECT SUM(population) FROM t WHERE country = 'India'",
            "SELECT city FROM t WHERE country = 'China' ORDER BY city",
        ];
        let mut llm = ScriptedLlm::new(right);
        let score = probe(&mut llm).unwrap();
        assert_eq!((score.correct, score.total), (4, 4));
        assert!(score.passes());
        // Wrong or failing queries (each retried once) score nothing.
        let mut llm = ScriptedLlm::new([
            "SELECT 1 FROM t",
            "SELECT city FROM t ORDER BY population LIMIT 1",
            "no",
            "still no",
            "SELECT city FROM t WHERE country = 'China' ORDER BY city",
        ]);
        let score = probe(&mut llm).unwrap();
        assert_eq!(score.correct, 1);
        assert!(!score.passes());
        let (mode, _) = QaModeAlias::Auto
            .resolve(&mut ScriptedLlm::new(right))
            .unwrap();
        assert_eq!(mode, QaModeAlias::Sql);
        let (mode, score) = QaModeAlias::Text
            .resolve(&mut ScriptedLlm::new([""; 0]))
            .unwrap();
        assert_eq!((mode, score), (QaModeAlias::Text, None));
    }

    use crate::agent::QaMode as QaModeAlias;

    #[test]
    fn sql_is_found_in_free_replies() {
        assert_eq!(
            extract_sql("Here it is:\n```sqlite\nselect 1 from t;\n```\nDone").as_deref(),
            Some("select 1 from t")
        );
        assert_eq!(
            extract_sql("WITH x AS (SELECT 1) SELECT * FROM x").as_deref(),
            Some("WITH x AS (SELECT 1) SELECT * FROM x")
        );
        assert_eq!(extract_sql("no query here"), None);
    }
}
