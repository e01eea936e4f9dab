//! Run summaries, the main-results table, and paired comparisons of two runs.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::metrics::{refinement_curve, Aggregate, MetricsError};
use super::run::{QueryRecord, StageMs};
use super::stats::{
    paired_bootstrap, paired_t_test, wilcoxon_signed_rank, BootstrapOptions, BootstrapResult,
    TTestResult, WilcoxonResult,
};
use crate::agent::{CallRecord, StepKind};

/// The paper's metrics plus average cost per query.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SummaryMetrics {
    #[serde(flatten)]
    pub aggregate: Aggregate,
    pub avg_steps: f64,
    pub avg_llm_calls: f64,
    pub avg_prompt_tokens: f64,
    pub avg_cached_tokens: f64,
    /// Mean wall time per query by stage.
    pub avg_ms: StageMs,
    /// Share of the agent's pattern-generation and refine calls whose output parsed into an
    /// action; absent when the runs made none (baselines).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action_parse_rate: Option<f64>,
    /// Share of those calls decoded under their grammar (`--constrain on`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action_constrained_rate: Option<f64>,
    /// Refinement analysis ([`refinement_curve`]): per round of patterns (round 0 = the first
    /// grep ranking), the share of queries whose top-1 candidate is a gold table, a query that
    /// stopped early keeping its last status; absent without agent trajectories.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top1_hit_by_round: Option<Vec<f64>>,
    /// T-RAG's pooled candidates C* (records with a `pool`): recall deep in the ranking and how
    /// often the gold table was in C* at all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<PoolSummary>,
    /// TaS's state tables (records with a TaS trajectory).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tas: Option<TasSummary>,
}

/// Means over the records with a T-RAG pool.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolSummary {
    pub r_at_10: f64,
    pub r_at_20: f64,
    pub r_at_50: f64,
    /// Share of queries whose gold table is in C*.
    pub gold_in_pool: f64,
    /// Mean size of C*.
    pub pool_size: f64,
}

fn pool_summary(records: &[&QueryRecord]) -> Option<PoolSummary> {
    let pooled: Vec<&QueryRecord> = records
        .iter()
        .copied()
        .filter(|r| r.pool.is_some())
        .collect();
    if pooled.is_empty() {
        return None;
    }
    let n = pooled.len() as f64;
    let share =
        |hit: &dyn Fn(&QueryRecord) -> bool| pooled.iter().filter(|r| hit(r)).count() as f64 / n;
    let recall_at = |k: usize| {
        share(&|r: &QueryRecord| {
            r.ranking
                .iter()
                .take(k)
                .any(|id| r.gold.tables.contains(id))
        })
    };
    Some(PoolSummary {
        r_at_10: recall_at(10),
        r_at_20: recall_at(20),
        r_at_50: recall_at(50),
        gold_in_pool: share(&|r: &QueryRecord| r.pool.as_ref().is_some_and(|p| p.gold_in_pool)),
        pool_size: pooled
            .iter()
            .map(|r| r.pool.as_ref().map_or(0, |p| p.union) as f64)
            .sum::<f64>()
            / n,
    })
}

/// Means over the records with a TaS state table (the spec's TaS-specific counts).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TasSummary {
    pub constraints: f64,
    pub rows_added: f64,
    pub cells_filled: f64,
    /// Cells still pending when the loop stopped.
    pub cells_pending: f64,
    /// Share of queries where some row met every constraint.
    pub full_match: f64,
    /// Share of queries where the gold table had a row and it met every constraint.
    pub gold_row_all_yes: f64,
    /// Mean call index after which a row first met every constraint, over queries with one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_full_match_call: Option<f64>,
    /// Queries per stop reason.
    pub stops: BTreeMap<String, usize>,
}

fn tas_summary(records: &[&QueryRecord]) -> Option<TasSummary> {
    let states: Vec<(&QueryRecord, &crate::agent::tas::TasRecord)> = records
        .iter()
        .filter_map(|r| Some((*r, r.trajectory.as_ref()?.tas.as_ref()?)))
        .collect();
    if states.is_empty() {
        return None;
    }
    let n = states.len() as f64;
    let mean = |f: &dyn Fn(&crate::agent::tas::TasRecord) -> f64| {
        states.iter().map(|(_, t)| f(t)).sum::<f64>() / n
    };
    let firsts: Vec<f64> = states
        .iter()
        .filter_map(|(_, t)| t.first_full_match_call.map(|c| c as f64))
        .collect();
    let mut stops = BTreeMap::new();
    for (_, t) in &states {
        let stop = t.stop.map_or("none".to_string(), |s| {
            serde_json::to_value(s)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default()
        });
        *stops.entry(stop).or_insert(0) += 1;
    }
    Some(TasSummary {
        constraints: mean(&|t| t.constraints.len() as f64),
        rows_added: mean(&|t| t.rows_added as f64),
        cells_filled: mean(&|t| t.cells_filled as f64),
        cells_pending: mean(&|t| t.cells_pending as f64),
        full_match: mean(&|t| {
            f64::from(u8::from(t.final_rows().iter().any(|r| r.is_full_match())))
        }),
        gold_row_all_yes: states
            .iter()
            .filter(|(r, t)| {
                t.final_rows()
                    .iter()
                    .any(|row| r.gold.tables.contains(&row.table_id) && row.is_full_match())
            })
            .count() as f64
            / n,
        first_full_match_call: (!firsts.is_empty())
            .then(|| firsts.iter().sum::<f64>() / firsts.len() as f64),
        stops,
    })
}

/// [`SummaryMetrics::top1_hit_by_round`]. A trajectory without any ranking (its pattern call
/// failed) counts as a miss in round 0.
fn top1_hit_by_round(records: &[QueryRecord]) -> Option<Vec<f64>> {
    let hits: Vec<Vec<bool>> = records
        .iter()
        .filter_map(|record| {
            let trajectory = record.trajectory.as_ref()?;
            // TaS's rounds are its searches, run side by side, not refinements of one ranking.
            if trajectory.tas.is_some() {
                return None;
            }
            let mut rounds: Vec<bool> = trajectory
                .rounds
                .iter()
                .map(|round| {
                    round
                        .candidates
                        .first()
                        .is_some_and(|top| record.gold.tables.contains(&top.table_id))
                })
                .collect();
            if rounds.is_empty() {
                rounds.push(false);
            }
            Some(rounds)
        })
        .collect();
    refinement_curve(&hits).ok()
}

/// `(parsed share, constrained share)` of the calls that must have a machine-readable shape:
/// pattern generation and refine (TableSeek), decompose and NL2SQL (TableRAG).
fn action_call_rates(records: &[QueryRecord]) -> (Option<f64>, Option<f64>) {
    let calls: Vec<_> = records
        .iter()
        .filter_map(|r| r.trajectory.as_ref())
        .flat_map(|t| &t.calls)
        // Free-text calls have no shape to parse.
        .filter(|c| {
            !matches!(
                c.kind,
                StepKind::Qa | StepKind::QaFallback | StepKind::Compose
            )
        })
        .collect();
    if calls.is_empty() {
        return (None, None);
    }
    let n = calls.len() as f64;
    let share = |f: &dyn Fn(&&CallRecord) -> bool| calls.iter().filter(|c| f(c)).count() as f64 / n;
    (Some(share(&|c| c.parsed)), Some(share(&|c| c.constrained)))
}

/// `summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// The methods of the records (one for a normal run), sorted.
    pub methods: Vec<String>,
    pub n: usize,
    /// Queries whose model call failed (recorded without an answer, scored as wrong).
    pub errors: usize,
    pub metrics: SummaryMetrics,
}

impl Summary {
    /// Aggregates records in query-id order: a run with several threads finishes them in varying
    /// order, and float sums in another order differ in the last digit (two runs' summaries,
    /// or a run's and `report`'s, differed in `avg_ms`).
    pub fn from_records(records: &[QueryRecord]) -> Result<Self, MetricsError> {
        let mut ordered: Vec<&QueryRecord> = records.iter().collect();
        ordered.sort_by(|a, b| a.qid.cmp(&b.qid));
        let per_query: Vec<_> = ordered.iter().map(|r| r.metrics.clone()).collect();
        let aggregate = Aggregate::from_metrics(&per_query)?;
        let n = records.len() as f64;
        let mean = |f: &dyn Fn(&QueryRecord) -> f64| ordered.iter().map(|r| f(r)).sum::<f64>() / n;
        let mut methods: Vec<String> = records.iter().map(|r| r.method.to_string()).collect();
        methods.sort();
        methods.dedup();
        let (action_parse_rate, action_constrained_rate) = action_call_rates(records);
        Ok(Self {
            methods,
            n: records.len(),
            errors: records.iter().filter(|r| r.error.is_some()).count(),
            metrics: SummaryMetrics {
                aggregate,
                avg_steps: mean(&|r| r.cost.steps as f64),
                avg_llm_calls: mean(&|r| r.cost.llm_calls as f64),
                avg_prompt_tokens: mean(&|r| r.cost.prompt_tokens as f64),
                avg_cached_tokens: mean(&|r| r.cost.cached_tokens as f64),
                avg_ms: StageMs {
                    retrieval: mean(&|r| r.cost.ms.retrieval),
                    encode: mean(&|r| r.cost.ms.encode),
                    rerank: mean(&|r| r.cost.ms.rerank),
                    pattern_gen: mean(&|r| r.cost.ms.pattern_gen),
                    refine: mean(&|r| r.cost.ms.refine),
                    qa: mean(&|r| r.cost.ms.qa),
                    decompose: mean(&|r| r.cost.ms.decompose),
                    nl2sql: mean(&|r| r.cost.ms.nl2sql),
                    compose: mean(&|r| r.cost.ms.compose),
                    total: mean(&|r| r.cost.ms.total),
                },
                action_parse_rate,
                action_constrained_rate,
                top1_hit_by_round: top1_hit_by_round(records),
                pool: pool_summary(&ordered),
                tas: tas_summary(&ordered),
            },
        })
    }
}

type Column = (&'static str, fn(&Summary) -> Option<f64>);

/// The main-results columns; a column is shown when some run has a value for it.
const COLUMNS: [Column; 24] = [
    ("R@1", |s| Some(s.metrics.aggregate.r_at_1)),
    ("R@3", |s| Some(s.metrics.aggregate.r_at_3)),
    ("R@5", |s| Some(s.metrics.aggregate.r_at_5)),
    ("R@all", |s| s.metrics.aggregate.r_all),
    ("R@final", |s| s.metrics.aggregate.r_final),
    // T-RAG only: deep recall over its pool C*, and how often C* held the gold table.
    ("R@10", |s| s.metrics.pool.as_ref().map(|p| p.r_at_10)),
    ("R@20", |s| s.metrics.pool.as_ref().map(|p| p.r_at_20)),
    ("R@50", |s| s.metrics.pool.as_ref().map(|p| p.r_at_50)),
    ("gold in C*", |s| {
        s.metrics.pool.as_ref().map(|p| p.gold_in_pool)
    }),
    ("GR@1", |s| s.metrics.aggregate.gr_at_1),
    ("GR@all", |s| s.metrics.aggregate.gr_all),
    ("DS@all", |s| s.metrics.aggregate.ds_all),
    ("F1", |s| s.metrics.aggregate.f1),
    ("EM", |s| s.metrics.aggregate.em),
    ("Acc", |s| s.metrics.aggregate.acc),
    ("Acc-Sup", |s| s.metrics.aggregate.acc_sup),
    ("Acc-Ref", |s| s.metrics.aggregate.acc_ref),
    ("Eff", |s| s.metrics.aggregate.eff),
    ("parsed", |s| s.metrics.action_parse_rate),
    ("steps", |s| Some(s.metrics.avg_steps)),
    ("prompt tok", |s| Some(s.metrics.avg_prompt_tokens)),
    // Share of prompt tokens whose KV came from the prefix cache (the history modes' point).
    ("cached", |s| {
        let m = &s.metrics;
        (m.avg_prompt_tokens > 0.0).then(|| m.avg_cached_tokens / m.avg_prompt_tokens)
    }),
    ("s/query", |s| Some(s.metrics.avg_ms.total / 1e3)),
    ("errors", |s| (s.errors > 0).then_some(s.errors as f64)),
];

/// A Markdown main-results table, one row per named run.
pub fn render_report(runs: &[(&str, &Summary)]) -> String {
    let shown: Vec<&Column> = COLUMNS
        .iter()
        .filter(|(_, get)| runs.iter().any(|(_, s)| get(s).is_some()))
        .collect();
    let mut out = String::from("| run | method | n |");
    for (name, _) in &shown {
        let _ = write!(out, " {name} |");
    }
    out.push_str("\n|---|---|---:|");
    out.push_str(&"---:|".repeat(shown.len()));
    out.push('\n');
    for (name, summary) in runs {
        let _ = write!(
            out,
            "| {name} | {} | {} |",
            summary.methods.join("+"),
            summary.n
        );
        for (column, get) in &shown {
            match get(summary) {
                Some(v) if *column == "errors" => {
                    let _ = write!(out, " {v:.0} |");
                }
                Some(v) if matches!(*column, "steps" | "prompt tok") => {
                    let _ = write!(out, " {v:.1} |");
                }
                Some(v) if *column == "s/query" => {
                    let _ = write!(out, " {v:.2} |");
                }
                Some(v) => {
                    let _ = write!(out, " {v:.3} |");
                }
                None => out.push_str(" – |"),
            }
        }
        out.push('\n');
    }
    let curves: Vec<_> = runs
        .iter()
        .filter_map(|(name, s)| Some((name, s.metrics.top1_hit_by_round.as_ref()?)))
        .collect();
    if !curves.is_empty() {
        out.push_str("\nTop-1 hit rate by refine round (round 0: the first patterns):\n\n");
        for (name, curve) in curves {
            let rates: Vec<String> = curve.iter().map(|r| format!("{r:.3}")).collect();
            let _ = writeln!(out, "- {name}: {}", rates.join(" → "));
        }
    }
    let pools: Vec<_> = runs
        .iter()
        .filter_map(|(name, s)| Some((name, s.metrics.pool.as_ref()?)))
        .collect();
    if !pools.is_empty() {
        out.push_str("\nT-RAG pool C*:\n\n");
        for (name, p) in pools {
            let _ = writeln!(
                out,
                "- {name}: mean |C*| {:.1}, gold in C* {:.3}, R@10 {:.3}, R@20 {:.3}, R@50 {:.3}",
                p.pool_size, p.gold_in_pool, p.r_at_10, p.r_at_20, p.r_at_50
            );
        }
    }
    let states: Vec<_> = runs
        .iter()
        .filter_map(|(name, s)| Some((name, s.metrics.tas.as_ref()?)))
        .collect();
    if !states.is_empty() {
        out.push_str("\nTaS state tables (means per query):\n\n");
        for (name, t) in states {
            let stops: Vec<String> = t.stops.iter().map(|(k, v)| format!("{k} {v}")).collect();
            let first = t
                .first_full_match_call
                .map_or("–".to_string(), |c| format!("{c:.1}"));
            let _ = writeln!(
                out,
                "- {name}: constraints {:.1}, rows added {:.1}, cells filled {:.1}, pending at stop \
{:.1}, a full-match row {:.3}, gold row all yes {:.3}, first full match at call {first}; stops: {}",
                t.constraints,
                t.rows_added,
                t.cells_filled,
                t.cells_pending,
                t.full_match,
                t.gold_row_all_yes,
                stops.join(", ")
            );
        }
    }
    out
}

/// The three paired tests on one per-query score; a test that cannot run says why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricComparison {
    pub metric: &'static str,
    pub n: usize,
    pub mean_a: f64,
    pub mean_b: f64,
    pub bootstrap: Result<BootstrapResult, String>,
    pub wilcoxon: Result<WilcoxonResult, String>,
    pub t_test: Result<TTestResult, String>,
}

/// Two runs compared over the qids both finished.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub common: usize,
    pub only_a: usize,
    pub only_b: usize,
    pub metrics: Vec<MetricComparison>,
}

fn compare_metric(
    metric: &'static str,
    a: &[f64],
    b: &[f64],
    bootstrap: &BootstrapOptions,
) -> MetricComparison {
    let mean = |v: &[f64]| {
        if v.is_empty() {
            0.0
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    MetricComparison {
        metric,
        n: a.len(),
        mean_a: mean(a),
        mean_b: mean(b),
        bootstrap: paired_bootstrap(a, b, bootstrap).map_err(|e| e.to_string()),
        wilcoxon: wilcoxon_signed_rank(a, b).map_err(|e| e.to_string()),
        t_test: paired_t_test(a, b).map_err(|e| e.to_string()),
    }
}

/// Pairs the records by qid (in `a`'s order) and tests the answer score (F1 for table QA,
/// correctness for claims) and R@all. Differences are `a - b`.
pub fn compare_runs(
    a: &[QueryRecord],
    b: &[QueryRecord],
    bootstrap: &BootstrapOptions,
) -> Comparison {
    let b_by_qid: BTreeMap<&str, &QueryRecord> = b.iter().map(|r| (r.qid.as_str(), r)).collect();
    let pairs: Vec<(&QueryRecord, &QueryRecord)> = a
        .iter()
        .filter_map(|ra| b_by_qid.get(ra.qid.as_str()).map(|rb| (ra, *rb)))
        .collect();
    let mut metrics = Vec::new();
    let scored: Vec<(f64, f64)> = pairs
        .iter()
        .filter_map(|(ra, rb)| Some((ra.answer_score()?, rb.answer_score()?)))
        .collect();
    if !scored.is_empty() {
        let tableqa = pairs.iter().any(|(ra, _)| ra.metrics.f1.is_some());
        let name = if tableqa { "answer (F1 / Acc)" } else { "Acc" };
        let (xa, xb): (Vec<f64>, Vec<f64>) = scored.into_iter().unzip();
        metrics.push(compare_metric(name, &xa, &xb, bootstrap));
    }
    let flag = |hit: bool| f64::from(u8::from(hit));
    let recall: Vec<(f64, f64)> = pairs
        .iter()
        .filter_map(|(ra, rb)| Some((flag(ra.metrics.r_all?), flag(rb.metrics.r_all?))))
        .collect();
    if !recall.is_empty() {
        let (xa, xb): (Vec<f64>, Vec<f64>) = recall.into_iter().unzip();
        metrics.push(compare_metric("R@all", &xa, &xb, bootstrap));
    }
    Comparison {
        common: pairs.len(),
        only_a: a.len() - pairs.len(),
        only_b: b.len() - pairs.len(),
        metrics,
    }
}

/// The comparison as a short Markdown table.
pub fn render_comparison(name_a: &str, name_b: &str, comparison: &Comparison) -> String {
    let mut out = format!(
        "A = {name_a}\nB = {name_b}\n{} common queries ({} only in A, {} only in B)\n\n",
        comparison.common, comparison.only_a, comparison.only_b
    );
    out.push_str(
        "| metric | n | A | B | A-B | 95% CI (bootstrap) | p bootstrap | p Wilcoxon | p t-test |\n",
    );
    out.push_str("|---|---:|---:|---:|---:|---|---:|---:|---:|\n");
    for m in &comparison.metrics {
        let (diff, ci, p_boot) = match &m.bootstrap {
            Ok(b) => (
                format!("{:+.3}", b.mean_diff),
                format!("[{:+.3}, {:+.3}]", b.ci_low, b.ci_high),
                format!("{:.4}", b.p_value),
            ),
            Err(e) => (
                format!("{:+.3}", m.mean_a - m.mean_b),
                e.clone(),
                "–".into(),
            ),
        };
        let p = |r: Result<f64, &String>| match r {
            Ok(p) => format!("{p:.4}"),
            Err(e) => e.clone(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {:.3} | {:.3} | {diff} | {ci} | {p_boot} | {} | {} |",
            m.metric,
            m.n,
            m.mean_a,
            m.mean_b,
            p(m.wilcoxon.as_ref().map(|w| w.p_value)),
            p(m.t_test.as_ref().map(|t| t.p_value)),
        );
    }
    out
}
