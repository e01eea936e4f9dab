//! Resumable run directories.
//!
//! A run directory holds `config.json` (every option, the model's sha256, the git revision),
//! `queries.jsonl` (one [`QueryRecord`] per finished query, appended and flushed as each
//! finishes), `summary.json`, `report.md` and `plots/*.svg` (all rebuilt from `queries.jsonl` alone).
//!
//! A killed run leaves at worst a half-written last line: it has no newline (each record is
//! written as one `line + "\n"` buffer), so on resume it is cut off and its query redone. Any
//! other unreadable line is an error, never silently dropped. Resuming under different options
//! or a different model is refused: the records would mix two configurations.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;

use serde::{Deserialize, Serialize};

use super::dataset::EvalQuery;
use super::metrics::MetricsError;
use super::report::{render_report, Summary};
use super::run::{EvalError, Evaluator, QueryRecord};
use crate::agent::{EngineLlm, Llm, SearchSpace};
use crate::engine::{BatchOptions, ChatModel};

pub const CONFIG_FILE: &str = "config.json";
pub const QUERIES_FILE: &str = "queries.jsonl";
pub const SUMMARY_FILE: &str = "summary.json";
pub const REPORT_FILE: &str = "report.md";
pub const PLOTS_DIR: &str = "plots";

/// Why a run directory could not be used.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{path}:{line}: unreadable record ({message}); fix or remove the line by hand")]
    CorruptRecord {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("{0} already holds a run; pass --resume to continue it, or choose another --out")]
    Exists(PathBuf),
    #[error("{path} was run with different settings ({differences}); refusing to resume, use another --out")]
    ConfigMismatch { path: PathBuf, differences: String },
    #[error("{path}: cannot draw the plot ({message})")]
    Plot { path: PathBuf, message: String },
    #[error("{0} has no finished queries")]
    NoRecords(PathBuf),
    #[error("the batching engine: {0}")]
    Engine(#[from] crate::engine::EngineError),
    #[error(transparent)]
    Eval(#[from] EvalError),
    #[error(transparent)]
    Metrics(#[from] MetricsError),
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> RunError + '_ {
    move |source| RunError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// How [`RunDir::run_model`] drives a loaded model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelDrive {
    /// Queries in flight at once; 1 runs them one by one on the model itself.
    pub concurrency: usize,
    /// KV-cache memory the concurrent sequences may reserve together.
    pub kv_budget_bytes: usize,
    pub enable_thinking: Option<bool>,
    /// Structured decoding for the calls that carry a grammar.
    pub constrain: bool,
}

/// What `config.json` holds. Only `options` and `model_sha256` must match to resume; the
/// revision may move (a fix between two halves of a run is recorded, with a warning), and the
/// query limit and command line are those of the first session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunConfig {
    pub tableseek_version: String,
    pub git_revision: Option<String>,
    pub model_sha256: Option<String>,
    /// Every option that affects a query's result, as the command line gave it.
    pub options: serde_json::Value,
    #[serde(default)]
    pub limit: Option<usize>,
    #[serde(default)]
    pub command_line: Vec<String>,
}

impl RunConfig {
    /// The config of a run started by this process: its version, build revision and command
    /// line, the weights' hash (`None` for random weights) and `options`.
    pub fn for_this_process(
        options: serde_json::Value,
        weights: Option<&Path>,
        limit: Option<usize>,
    ) -> Result<Self, crate::provenance::HashError> {
        Ok(RunConfig {
            tableseek_version: env!("CARGO_PKG_VERSION").to_string(),
            git_revision: crate::provenance::git_revision(),
            model_sha256: weights.map(crate::provenance::weights_sha256).transpose()?,
            options,
            limit,
            command_line: std::env::args().collect(),
        })
    }

    /// The keys of `options` (and the model hash) whose values differ, in sorted order.
    pub(crate) fn differences(&self, other: &RunConfig) -> Vec<String> {
        let mut keys = BTreeSet::new();
        match (self.options.as_object(), other.options.as_object()) {
            (Some(a), Some(b)) => {
                for key in a.keys().chain(b.keys()) {
                    if a.get(key) != b.get(key) {
                        keys.insert(key.clone());
                    }
                }
            }
            _ if self.options != other.options => {
                keys.insert("options".to_string());
            }
            _ => {}
        }
        if self.model_sha256 != other.model_sha256 {
            keys.insert("model_sha256".to_string());
        }
        keys.into_iter().collect()
    }
}

/// The readable records of a `queries.jsonl`, and how many bytes of the file they span.
struct ReadRecords {
    records: Vec<QueryRecord>,
    valid_len: u64,
    torn_tail: bool,
}

fn read_queries_file(path: &Path) -> Result<ReadRecords, RunError> {
    let text = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(io_error(path)(e)),
    };
    let mut records = Vec::new();
    let mut offset = 0usize;
    let mut line_number = 0;
    while offset < text.len() {
        line_number += 1;
        let Some(end) = text[offset..].iter().position(|&b| b == b'\n') else {
            // No newline: the writer was killed inside this record.
            return Ok(ReadRecords {
                records,
                valid_len: offset as u64,
                torn_tail: true,
            });
        };
        let line = &text[offset..offset + end];
        if !line.iter().all(u8::is_ascii_whitespace) {
            let record = serde_json::from_slice::<QueryRecord>(line).map_err(|e| {
                RunError::CorruptRecord {
                    path: path.to_path_buf(),
                    line: line_number,
                    message: e.to_string(),
                }
            })?;
            records.push(record);
        }
        offset += end + 1;
    }
    Ok(ReadRecords {
        records,
        valid_len: text.len() as u64,
        torn_tail: false,
    })
}

/// The finished records of a run directory, in the order they finished. A half-written last
/// line is ignored (with a warning).
pub fn read_records(dir: &Path) -> Result<Vec<QueryRecord>, RunError> {
    let path = dir.join(QUERIES_FILE);
    if !path.is_file() {
        return Err(RunError::NoRecords(dir.to_path_buf()));
    }
    let read = read_queries_file(&path)?;
    if read.torn_tail {
        tracing::warn!(path = %path.display(), "ignoring a half-written last record");
    }
    Ok(read.records)
}

pub(crate) fn write_atomically(path: &Path, contents: &[u8]) -> Result<(), RunError> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, contents).map_err(io_error(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io_error(path))
}

/// Rebuilds `summary.json` and `report.md` of a run directory from its records.
pub fn write_summary(dir: &Path, records: &[QueryRecord]) -> Result<Summary, RunError> {
    if records.is_empty() {
        return Err(RunError::NoRecords(dir.to_path_buf()));
    }
    let summary = Summary::from_records(records)?;
    let mut json = serde_json::to_string_pretty(&summary).map_err(|source| RunError::Json {
        path: dir.join(SUMMARY_FILE),
        source,
    })?;
    json.push('\n');
    write_atomically(&dir.join(SUMMARY_FILE), json.as_bytes())?;
    let name = dir.display().to_string();
    let report = render_report(&[(name.as_str(), &summary)]);
    write_atomically(&dir.join(REPORT_FILE), report.as_bytes())?;
    let plots = dir.join(PLOTS_DIR);
    std::fs::create_dir_all(&plots).map_err(io_error(&plots))?;
    for chart in super::plots::charts(records, &summary) {
        let path = plots.join(chart.file);
        let svg = chart.to_svg().map_err(|message| RunError::Plot {
            path: path.clone(),
            message,
        })?;
        write_atomically(&path, svg.as_bytes())?;
    }
    Ok(summary)
}

/// An open run directory, ready to append records.
pub struct RunDir {
    path: PathBuf,
    queries: File,
    finished: Vec<QueryRecord>,
}

impl RunDir {
    /// Starts a run in `path` (created if needed; it must not hold a run yet), or with
    /// `resume` continues the one there, which must have been started with the same config.
    pub fn open(path: &Path, config: &RunConfig, resume: bool) -> Result<Self, RunError> {
        std::fs::create_dir_all(path).map_err(io_error(path))?;
        let config_path = path.join(CONFIG_FILE);
        let queries_path = path.join(QUERIES_FILE);
        let existing = config_path.is_file() || queries_path.is_file();
        if existing && !resume {
            return Err(RunError::Exists(path.to_path_buf()));
        }
        if config_path.is_file() {
            let text = std::fs::read_to_string(&config_path).map_err(io_error(&config_path))?;
            let stored: RunConfig =
                serde_json::from_str(&text).map_err(|source| RunError::Json {
                    path: config_path.clone(),
                    source,
                })?;
            let differences = stored.differences(config);
            if !differences.is_empty() {
                return Err(RunError::ConfigMismatch {
                    path: path.to_path_buf(),
                    differences: differences.join(", "),
                });
            }
            if stored.git_revision != config.git_revision {
                tracing::warn!(
                    stored = ?stored.git_revision,
                    now = ?config.git_revision,
                    "resuming a run started at another git revision"
                );
            }
        } else {
            let mut json =
                serde_json::to_string_pretty(config).map_err(|source| RunError::Json {
                    path: config_path.clone(),
                    source,
                })?;
            json.push('\n');
            write_atomically(&config_path, json.as_bytes())?;
        }
        let read = read_queries_file(&queries_path)?;
        let queries = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&queries_path)
            .map_err(io_error(&queries_path))?;
        if read.torn_tail {
            tracing::warn!(path = %queries_path.display(), "redoing a half-written last record");
            queries
                .set_len(read.valid_len)
                .map_err(io_error(&queries_path))?;
        }
        Ok(Self {
            path: path.to_path_buf(),
            queries,
            finished: read.records,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records finished so far (earlier sessions included), in finishing order.
    pub fn finished(&self) -> &[QueryRecord] {
        &self.finished
    }

    pub fn is_finished(&self, qid: &str) -> bool {
        self.finished.iter().any(|r| r.qid == qid)
    }

    /// Appends one record as one line and flushes it, so a kill loses at most this query.
    pub fn append(&mut self, record: QueryRecord) -> Result<(), RunError> {
        let path = self.path.join(QUERIES_FILE);
        let mut line = serde_json::to_vec(&record).map_err(|source| RunError::Json {
            path: path.clone(),
            source,
        })?;
        line.push(b'\n');
        self.queries.write_all(&line).map_err(io_error(&path))?;
        self.queries.flush().map_err(io_error(&path))?;
        self.finished.push(record);
        Ok(())
    }

    /// Runs every query not finished yet, in order, appending each record as it finishes;
    /// `on_done` sees each new record (progress display). Then writes the summary and report.
    pub fn run<L: Llm + ?Sized, S: SearchSpace + ?Sized>(
        &mut self,
        evaluator: &Evaluator<'_, S>,
        llm: &mut L,
        queries: &[EvalQuery],
        mut on_done: impl FnMut(&QueryRecord),
    ) -> Result<Summary, RunError> {
        let done: BTreeSet<String> = self.finished.iter().map(|r| r.qid.clone()).collect();
        for query in queries.iter().filter(|q| !done.contains(&q.qid)) {
            let record = evaluator.run_query(llm, query)?;
            on_done(&record);
            self.append(record)?;
        }
        write_summary(&self.path, &self.finished)
    }

    /// Runs the pending queries on `model` as `drive` says: one at a time on the model itself,
    /// or `drive.concurrency` at once through a batching engine thread (records identical).
    pub fn run_model<S: SearchSpace + Sync + ?Sized>(
        &mut self,
        evaluator: &Evaluator<'_, S>,
        mut model: ChatModel,
        drive: ModelDrive,
        queries: &[EvalQuery],
        on_done: impl FnMut(&QueryRecord),
    ) -> Result<Summary, RunError> {
        fn llm_for(model: &mut ChatModel, drive: ModelDrive) -> EngineLlm<'_> {
            EngineLlm::new(model)
                .enable_thinking(drive.enable_thinking)
                .constrain(drive.constrain)
        }
        if drive.concurrency <= 1 {
            return self.run(evaluator, &mut llm_for(&mut model, drive), queries, on_done);
        }
        let batch = BatchOptions {
            kv_budget_bytes: drive.kv_budget_bytes,
            ..BatchOptions::default()
        };
        let (mut models, engine_thread) = model.into_engine_handles(batch, drive.concurrency)?;
        let llms = models.iter_mut().map(|m| llm_for(m, drive)).collect();
        let summary = self.run_concurrent(evaluator, llms, queries, on_done);
        drop(models);
        let batcher = engine_thread.join()?;
        tracing::info!(
            peak_sequences = batcher.peak_sequences(),
            "concurrent evaluation done"
        );
        summary
    }

    /// [`RunDir::run`] with one LLM per worker thread (e.g. handles to one batching engine):
    /// unfinished queries go to whichever worker is free, in dataset order, and records are
    /// appended in dataset order all the same (a record waits for the ones before it), so the
    /// file equals a one-worker run's and resume works unchanged. An error stops handing out
    /// queries; the records before it are kept.
    pub fn run_concurrent<L: Llm + Send, S: SearchSpace + Sync + ?Sized>(
        &mut self,
        evaluator: &Evaluator<'_, S>,
        llms: Vec<L>,
        queries: &[EvalQuery],
        mut on_done: impl FnMut(&QueryRecord),
    ) -> Result<Summary, RunError> {
        let done: BTreeSet<String> = self.finished.iter().map(|r| r.qid.clone()).collect();
        let pending: Vec<&EvalQuery> = queries.iter().filter(|q| !done.contains(&q.qid)).collect();
        let next = AtomicUsize::new(0);
        let stop = AtomicBool::new(false);
        let (sender, results) = mpsc::channel::<(usize, Result<QueryRecord, EvalError>)>();
        std::thread::scope(|scope| -> Result<(), RunError> {
            for mut llm in llms {
                let (sender, next, stop, pending) = (sender.clone(), &next, &stop, &pending);
                scope.spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(query) = pending.get(i) else {
                            break;
                        };
                        if sender
                            .send((i, evaluator.run_query(&mut llm, query)))
                            .is_err()
                        {
                            break;
                        }
                    }
                });
            }
            drop(sender);
            let mut waiting: BTreeMap<usize, QueryRecord> = BTreeMap::new();
            let mut expected = 0;
            let mut first_error = None;
            for (i, result) in results {
                match result {
                    Ok(record) => {
                        waiting.insert(i, record);
                    }
                    Err(err) => {
                        stop.store(true, Ordering::Relaxed);
                        first_error.get_or_insert((i, err));
                    }
                }
                while let Some(record) = waiting.remove(&expected) {
                    if first_error.as_ref().is_some_and(|(at, _)| *at < expected) {
                        break;
                    }
                    on_done(&record);
                    if let Err(err) = self.append(record) {
                        stop.store(true, Ordering::Relaxed);
                        return Err(err);
                    }
                    expected += 1;
                }
            }
            match first_error {
                Some((_, err)) => Err(err.into()),
                None => Ok(()),
            }
        })?;
        write_summary(&self.path, &self.finished)
    }
}
