//! Sharded evaluation: `eval --shard K/N` runs a deterministic 1/N of a dataset, so an existing
//! scheduler (a Slurm job array, any batch system) can spread one evaluation over many machines;
//! `report --merge OUT SHARD_DIR...` joins the shard directories into the run the unsharded
//! command writes.
//!
//! Shard K takes the queries at 0-based positions `K - 1, K - 1 + N, ...` of the (limited)
//! dataset: round robin keeps the shards within one query of each other in size, and a query's
//! shard depends on its position alone. A run directory's `queries.jsonl` is always in dataset
//! order (queries run in order; resume continues where the order stopped), so the merge
//! interleaves the shards' records back without the dataset file. Each query runs as it would in
//! the whole run (nothing carries over between queries that changes a result: the prefix cache is
//! bitwise neutral), so the merged records equal the unsharded ones once timings are zeroed.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::report::Summary;
use super::rundir::{
    read_records, write_atomically, write_summary, RunConfig, RunError, CONFIG_FILE, QUERIES_FILE,
};

/// The options key that holds a shard run's [`ShardInfo`].
pub const SHARD_KEY: &str = "shard";

/// `K/N`: the K-th (1-based) of N shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl FromStr for Shard {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("`{s}` is not a shard: write K/N with 1 <= K <= N, e.g. 2/8");
        let (k, n) = s.split_once('/').ok_or_else(bad)?;
        let index: usize = k.trim().parse().map_err(|_| bad())?;
        let count: usize = n.trim().parse().map_err(|_| bad())?;
        if index == 0 || index > count {
            return Err(bad());
        }
        Ok(Self { index, count })
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl Shard {
    /// This shard's items, in their order.
    pub fn select<T: Clone>(&self, items: &[T]) -> Vec<T> {
        items
            .iter()
            .skip(self.index - 1)
            .step_by(self.count)
            .cloned()
            .collect()
    }

    /// How many of `total` items this shard takes.
    pub fn len_of(&self, total: usize) -> usize {
        total.saturating_sub(self.index - 1).div_ceil(self.count)
    }

    /// What a shard run stores under [`SHARD_KEY`] in its options.
    pub fn info(&self, total: usize) -> ShardInfo {
        ShardInfo {
            index: self.index,
            count: self.count,
            queries: total,
        }
    }
}

/// A shard run's place in the whole: its shard and the size of the whole dataset (after any
/// limit), so a merge can tell a finished shard from an unfinished one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardInfo {
    pub index: usize,
    pub count: usize,
    pub queries: usize,
}

impl ShardInfo {
    fn shard(&self) -> Shard {
        Shard {
            index: self.index,
            count: self.count,
        }
    }
}

/// Why shard directories cannot be merged.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error(
        "{0} is not a shard run (its config.json has no `shard`: it was not run with --shard)"
    )]
    NotAShard(PathBuf),
    #[error("{path} is shard {shard} of {queries} queries, the first is of {expected}")]
    OtherWhole {
        path: PathBuf,
        shard: String,
        queries: usize,
        expected: usize,
    },
    #[error(
        "the shards do not make a whole: got {got:?} of {count} (each of 1..={count} exactly once)"
    )]
    Incomplete { got: Vec<usize>, count: usize },
    #[error("{path} was run with other settings than {first} ({differences})")]
    ConfigMismatch {
        path: PathBuf,
        first: PathBuf,
        differences: String,
    },
    #[error("{path} (shard {shard}) has {finished} of its {expected} queries: finish it with --resume first")]
    Unfinished {
        path: PathBuf,
        shard: String,
        finished: usize,
        expected: usize,
    },
    #[error(transparent)]
    Run(#[from] RunError),
}

fn read_config(dir: &Path) -> Result<RunConfig, RunError> {
    let path = dir.join(CONFIG_FILE);
    let text = std::fs::read_to_string(&path).map_err(|source| RunError::Io {
        path: path.clone(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| RunError::Json { path, source })
}

fn shard_info(dir: &Path, config: &RunConfig) -> Result<ShardInfo, MergeError> {
    config
        .options
        .get(SHARD_KEY)
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .ok_or_else(|| MergeError::NotAShard(dir.to_path_buf()))
}

/// Joins the shard runs in `shards` (any order) into a new run directory `out`: `queries.jsonl`
/// in dataset order, `config.json` without the shard, then the summary, report and plots.
pub fn merge(shards: &[PathBuf], out: &Path) -> Result<Summary, MergeError> {
    let mut parts = Vec::with_capacity(shards.len());
    for dir in shards {
        let config = read_config(dir)?;
        let info = shard_info(dir, &config)?;
        parts.push((dir.clone(), config, info));
    }
    let Some((first_dir, first_config, first_info)) = parts.first().cloned() else {
        return Err(MergeError::Incomplete {
            got: Vec::new(),
            count: 0,
        });
    };
    let mut got: Vec<usize> = parts.iter().map(|(_, _, info)| info.index).collect();
    got.sort_unstable();
    let whole: Vec<usize> = (1..=first_info.count).collect();
    if got != whole || parts.iter().any(|(_, _, i)| i.count != first_info.count) {
        return Err(MergeError::Incomplete {
            got,
            count: first_info.count,
        });
    }
    let without_shard = |config: &RunConfig| {
        let mut config = config.clone();
        if let Some(options) = config.options.as_object_mut() {
            options.remove(SHARD_KEY);
        }
        config
    };
    let base = without_shard(&first_config);
    let mut by_index: Vec<Vec<_>> = vec![Vec::new(); first_info.count];
    for (dir, config, info) in &parts {
        if info.queries != first_info.queries {
            return Err(MergeError::OtherWhole {
                path: dir.clone(),
                shard: info.shard().to_string(),
                queries: info.queries,
                expected: first_info.queries,
            });
        }
        let differences = base.differences(&without_shard(config));
        if !differences.is_empty() {
            return Err(MergeError::ConfigMismatch {
                path: dir.clone(),
                first: first_dir.clone(),
                differences: differences.join(", "),
            });
        }
        let records = read_records(dir)?;
        let expected = info.shard().len_of(info.queries);
        if records.len() != expected {
            return Err(MergeError::Unfinished {
                path: dir.clone(),
                shard: info.shard().to_string(),
                finished: records.len(),
                expected,
            });
        }
        by_index[info.index - 1] = records;
    }
    // Record j of shard K sits at position j·N + K − 1 of the whole.
    let mut iters: Vec<_> = by_index.into_iter().map(Vec::into_iter).collect();
    let mut merged = Vec::with_capacity(first_info.queries);
    for position in 0..first_info.queries {
        if let Some(record) = iters[position % first_info.count].next() {
            merged.push(record);
        }
    }
    std::fs::create_dir_all(out).map_err(|source| RunError::Io {
        path: out.to_path_buf(),
        source,
    })?;
    if out.join(CONFIG_FILE).exists() || out.join(QUERIES_FILE).exists() {
        return Err(RunError::Exists(out.to_path_buf()).into());
    }
    let config = RunConfig {
        command_line: std::iter::once("merge".to_string())
            .chain(shards.iter().map(|d| d.display().to_string()))
            .collect(),
        ..base
    };
    let config_path = out.join(CONFIG_FILE);
    let mut text = serde_json::to_string_pretty(&config).map_err(|source| RunError::Json {
        path: config_path.clone(),
        source,
    })?;
    text.push('\n');
    write_atomically(&config_path, text.as_bytes())?;
    let queries_path = out.join(QUERIES_FILE);
    let mut lines = Vec::new();
    for record in &merged {
        lines.extend(serde_json::to_vec(record).map_err(|source| RunError::Json {
            path: queries_path.clone(),
            source,
        })?);
        lines.push(b'\n');
    }
    write_atomically(&queries_path, &lines)?;
    Ok(write_summary(out, &merged)?)
}
