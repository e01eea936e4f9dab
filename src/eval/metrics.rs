//! The paper's metrics: per query ([`QueryMetrics`]) and over a run ([`Aggregate`]), plus format
//! robustness across table formats and the refinement curve.
//!
//! Definitions (method spec, "Metrics"):
//! - R@k: the gold table is among the first k of the ranking.
//! - GR@k (group recall): some table of the query's sibling group (gold and its related variants)
//!   is among the first k. Only for datasets with groups.
//! - R@all: the gold table is among the tables QA saw, at any QA call. R@final: the table of the
//!   final answer is the gold table.
//! - GR@all: 1 if R@all, else whether the final QA table is in the group. GR@final: the final QA
//!   table is in the group (the gold table being a member, that includes R@final).
//! - DS@cut = R@cut / GR@cut, as a ratio of the two means over the same queries (not a mean of
//!   per-query ratios, which are undefined whenever GR is 0). When no query has a group hit
//!   (mean GR = 0) DS is undefined and reported as `None` (`null` in JSON).
//! - F1 and EM: [`answer_f1`], [`exact_match`]. Acc: verdict equals the gold label; Acc-Sup and
//!   Acc-Ref restrict to supported (label 1) and refuted (label 0) claims.
//! - Eff = mean F1 / mean R@all over the queries that have both; `None` when mean R@all is 0.
//!
//! Every mean is taken over the queries for which the metric applies (e.g. F1 over table-QA
//! queries, R@all over queries that report the tables QA saw); [`Aggregate`] says how many.

use serde::{Deserialize, Serialize};

use super::answer::{answer_f1, exact_match};

/// Why metrics could not be computed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MetricsError {
    #[error("no queries to aggregate")]
    NoQueries,
    #[error("query {query}: table QA needs at least one gold answer")]
    NoGoldAnswers { query: usize },
    #[error("fact-verification label must be 1 (supported) or 0 (refuted), got {0}")]
    InvalidLabel(i64),
    #[error("format robustness needs at least one score")]
    NoScores,
    #[error("score {index} ({value}) is not a finite, non-negative number")]
    InvalidScore { index: usize, value: f64 },
    #[error("sample {sample} has no refinement rounds (round 0, the first patterns, is required)")]
    EmptyTrajectory { sample: usize },
}

/// A fact-verification verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Supported,
    Refuted,
}

impl Verdict {
    /// TabFact's label: 1 supported, 0 refuted.
    pub fn from_label(label: i64) -> Result<Self, MetricsError> {
        match label {
            1 => Ok(Self::Supported),
            0 => Ok(Self::Refuted),
            other => Err(MetricsError::InvalidLabel(other)),
        }
    }
}

/// What the system answered, with the gold answer to score it against.
#[derive(Debug, Clone, PartialEq)]
pub enum AnswerOutcome {
    TableQa {
        prediction: String,
        /// Acceptable answers; F1 and EM take the best.
        gold_answers: Vec<String>,
    },
    FactVerification {
        /// `None`: no verdict (unparsable, or "cannot be verified" where the protocol does not
        /// map that to refuted; baseline pipelines should pass `Some(Refuted)` for it). Scored
        /// as wrong.
        prediction: Option<Verdict>,
        gold: Verdict,
    },
}

/// Everything needed to score one query. Table ids are whatever the harness uses (file names);
/// they are only compared for equality.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryOutcome {
    pub gold_table: String,
    /// The sibling group. The gold table counts as a member whether listed or not. `None` when
    /// the dataset has no groups; the GR fields are then omitted.
    pub group: Option<Vec<String>>,
    /// Retrieval ranking, best first (may be shorter than 5).
    pub ranking: Vec<String>,
    /// Every table QA saw over all its calls; `None` for retrieval-only runs.
    pub tables_seen: Option<Vec<String>>,
    /// The table the final answer came from; `None` for retrieval-only runs.
    pub final_table: Option<String>,
    /// `None` for retrieval-only runs.
    pub answer: Option<AnswerOutcome>,
}

/// One query's scores. Hits are booleans; fields that do not apply are omitted from JSON.
/// `label` repeats the gold verdict so that Acc-Sup / Acc-Ref can be aggregated from stored
/// per-query records alone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueryMetrics {
    pub r_at_1: bool,
    pub r_at_3: bool,
    pub r_at_5: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r_all: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r_final: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gr_at_1: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gr_all: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gr_final: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub f1: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub em: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correct: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<Verdict>,
}

/// Whether `gold` is among the first `k` ids of `ranking`.
pub fn recall_at_k<S: AsRef<str>>(ranking: &[S], gold: &str, k: usize) -> bool {
    ranking.iter().take(k).any(|id| id.as_ref() == gold)
}

impl QueryOutcome {
    fn in_group(&self, group: &[String], table: &str) -> bool {
        table == self.gold_table || group.iter().any(|g| g == table)
    }

    /// Scores this query; `index` only labels errors.
    pub fn metrics(&self, index: usize) -> Result<QueryMetrics, MetricsError> {
        let gold = self.gold_table.as_str();
        let r_all = self
            .tables_seen
            .as_ref()
            .map(|seen| seen.iter().any(|t| t == gold));
        let r_final = self.final_table.as_ref().map(|t| t == gold);
        let (gr_at_1, gr_all, gr_final) = match &self.group {
            None => (None, None, None),
            Some(group) => {
                let final_in_group = self.final_table.as_ref().map(|t| self.in_group(group, t));
                let gr_all = match (r_all, final_in_group) {
                    (Some(true), _) => Some(true),
                    (Some(false), in_group) => Some(in_group.unwrap_or(false)),
                    (None, _) => None,
                };
                let top1 = self
                    .ranking
                    .first()
                    .is_some_and(|t| self.in_group(group, t));
                (Some(top1), gr_all, final_in_group)
            }
        };
        let (mut f1, mut em, mut correct, mut label) = (None, None, None, None);
        match &self.answer {
            None => {}
            Some(AnswerOutcome::TableQa {
                prediction,
                gold_answers,
            }) => {
                if gold_answers.is_empty() {
                    return Err(MetricsError::NoGoldAnswers { query: index });
                }
                f1 = Some(answer_f1(prediction, gold_answers));
                em = Some(exact_match(prediction, gold_answers));
            }
            Some(AnswerOutcome::FactVerification { prediction, gold }) => {
                correct = Some(*prediction == Some(*gold));
                label = Some(*gold);
            }
        }
        Ok(QueryMetrics {
            r_at_1: recall_at_k(&self.ranking, gold, 1),
            r_at_3: recall_at_k(&self.ranking, gold, 3),
            r_at_5: recall_at_k(&self.ranking, gold, 5),
            r_all,
            r_final,
            gr_at_1,
            gr_all,
            gr_final,
            f1,
            em,
            correct,
            label,
        })
    }
}

/// Means over a run; see the module documentation for each definition.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Aggregate {
    pub queries: usize,
    pub r_at_1: f64,
    pub r_at_3: f64,
    pub r_at_5: f64,
    pub r_all: Option<f64>,
    pub r_final: Option<f64>,
    pub gr_at_1: Option<f64>,
    pub gr_all: Option<f64>,
    pub gr_final: Option<f64>,
    pub ds_at_1: Option<f64>,
    pub ds_all: Option<f64>,
    pub ds_final: Option<f64>,
    /// Table-QA queries (those F1 and EM average over).
    pub qa_queries: usize,
    pub f1: Option<f64>,
    pub em: Option<f64>,
    /// Fact-verification claims (those the accuracies average over).
    pub verification_queries: usize,
    pub acc: Option<f64>,
    pub acc_sup: Option<f64>,
    pub acc_ref: Option<f64>,
    pub eff: Option<f64>,
}

/// Running sum and count of one metric, so every mean knows its own denominator.
#[derive(Default, Clone, Copy)]
struct Mean {
    sum: f64,
    count: usize,
}

impl Mean {
    fn add(&mut self, value: f64) {
        self.sum += value;
        self.count += 1;
    }

    fn get(self) -> Option<f64> {
        (self.count > 0).then(|| self.sum / self.count as f64)
    }
}

fn flag(hit: bool) -> f64 {
    if hit {
        1.0
    } else {
        0.0
    }
}

/// Ratio of two means over the same queries; `None` when the denominator's mean is 0 or absent.
fn ratio(numerator: Mean, denominator: Mean) -> Option<f64> {
    match (numerator.get(), denominator.get()) {
        (Some(n), Some(d)) if d > 0.0 => Some(n / d),
        _ => None,
    }
}

impl Aggregate {
    /// Aggregates stored per-query metrics (e.g. re-read from a resumable run's records).
    pub fn from_metrics(metrics: &[QueryMetrics]) -> Result<Self, MetricsError> {
        if metrics.is_empty() {
            return Err(MetricsError::NoQueries);
        }
        let mut r = [Mean::default(); 3];
        let [mut r_all, mut r_final] = [Mean::default(); 2];
        let [mut gr1, mut gr_all, mut gr_final] = [Mean::default(); 3];
        // R over exactly the queries whose GR is defined, for the DS ratios.
        let [mut r1_g, mut r_all_g, mut r_final_g] = [Mean::default(); 3];
        let [mut f1, mut em] = [Mean::default(); 2];
        let [mut acc, mut acc_sup, mut acc_ref] = [Mean::default(); 3];
        // F1 and R@all over the queries that have both, for Eff.
        let [mut f1_e, mut r_all_e] = [Mean::default(); 2];
        for m in metrics {
            r[0].add(flag(m.r_at_1));
            r[1].add(flag(m.r_at_3));
            r[2].add(flag(m.r_at_5));
            if let Some(hit) = m.r_all {
                r_all.add(flag(hit));
            }
            if let Some(hit) = m.r_final {
                r_final.add(flag(hit));
            }
            let pairs = [
                (Some(m.r_at_1), m.gr_at_1, &mut r1_g, &mut gr1),
                (m.r_all, m.gr_all, &mut r_all_g, &mut gr_all),
                (m.r_final, m.gr_final, &mut r_final_g, &mut gr_final),
            ];
            for (recall, group_recall, r_sum, gr_sum) in pairs {
                if let (Some(recall), Some(group_recall)) = (recall, group_recall) {
                    r_sum.add(flag(recall));
                    gr_sum.add(flag(group_recall));
                }
            }
            if let Some(value) = m.f1 {
                f1.add(value);
                if let Some(hit) = m.r_all {
                    f1_e.add(value);
                    r_all_e.add(flag(hit));
                }
            }
            if let Some(hit) = m.em {
                em.add(flag(hit));
            }
            if let Some(ok) = m.correct {
                acc.add(flag(ok));
                match m.label {
                    Some(Verdict::Supported) => acc_sup.add(flag(ok)),
                    Some(Verdict::Refuted) => acc_ref.add(flag(ok)),
                    None => {}
                }
            }
        }
        Ok(Self {
            queries: metrics.len(),
            r_at_1: r[0].sum / r[0].count as f64,
            r_at_3: r[1].sum / r[1].count as f64,
            r_at_5: r[2].sum / r[2].count as f64,
            r_all: r_all.get(),
            r_final: r_final.get(),
            gr_at_1: gr1.get(),
            gr_all: gr_all.get(),
            gr_final: gr_final.get(),
            ds_at_1: ratio(r1_g, gr1),
            ds_all: ratio(r_all_g, gr_all),
            ds_final: ratio(r_final_g, gr_final),
            qa_queries: f1.count,
            f1: f1.get(),
            em: em.get(),
            verification_queries: acc.count,
            acc: acc.get(),
            acc_sup: acc_sup.get(),
            acc_ref: acc_ref.get(),
            eff: ratio(f1_e, r_all_e),
        })
    }
}

/// Per-query metrics in input order, and their means.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evaluation {
    pub per_query: Vec<QueryMetrics>,
    pub aggregate: Aggregate,
}

/// Scores every query and aggregates.
pub fn evaluate(outcomes: &[QueryOutcome]) -> Result<Evaluation, MetricsError> {
    let per_query = outcomes
        .iter()
        .enumerate()
        .map(|(index, outcome)| outcome.metrics(index))
        .collect::<Result<Vec<_>, _>>()?;
    let aggregate = Aggregate::from_metrics(&per_query)?;
    Ok(Evaluation {
        per_query,
        aggregate,
    })
}

/// How much a score moves across table formats (CSV, Markdown, HTML, Mixed).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FormatRobustness {
    pub mean: f64,
    /// max - min.
    pub range: f64,
    /// Population standard deviation (divides by the number of formats, not n-1): the formats
    /// are the whole population of interest, not a sample of it.
    pub std: f64,
    /// Worst-case drop, (max - min) / max. `None` when every score is 0.
    pub wcd: Option<f64>,
    /// Format robustness score, 100 * min / max. `None` when every score is 0.
    pub frs: Option<f64>,
}

/// Robustness of one metric's value across formats; scores must be finite and non-negative.
pub fn format_robustness(scores: &[f64]) -> Result<FormatRobustness, MetricsError> {
    if scores.is_empty() {
        return Err(MetricsError::NoScores);
    }
    if let Some((index, &value)) = scores
        .iter()
        .enumerate()
        .find(|(_, v)| !v.is_finite() || **v < 0.0)
    {
        return Err(MetricsError::InvalidScore { index, value });
    }
    let n = scores.len() as f64;
    let mean = scores.iter().sum::<f64>() / n;
    let std = (scores.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / n).sqrt();
    let max = scores.iter().copied().fold(f64::MIN, f64::max);
    let min = scores.iter().copied().fold(f64::MAX, f64::min);
    let (wcd, frs) = if max > 0.0 {
        (Some((max - min) / max), Some(100.0 * min / max))
    } else {
        (None, None)
    };
    Ok(FormatRobustness {
        mean,
        range: max - min,
        std,
        wcd,
        frs,
    })
}

/// Top-1 hit rate by refine round. `trajectories[i][r]` says whether sample i's top-1 table was
/// gold after round r (round 0: the first patterns). A sample that stopped early (selected, gave
/// up, ran out of budget) keeps its last status in later rounds, so every rate is over all
/// samples. The result has one entry per round up to the longest trajectory.
pub fn refinement_curve(trajectories: &[Vec<bool>]) -> Result<Vec<f64>, MetricsError> {
    if trajectories.is_empty() {
        return Err(MetricsError::NoQueries);
    }
    if let Some(sample) = trajectories.iter().position(Vec::is_empty) {
        return Err(MetricsError::EmptyTrajectory { sample });
    }
    let rounds = trajectories.iter().map(Vec::len).max().unwrap_or(0);
    let n = trajectories.len() as f64;
    Ok((0..rounds)
        .map(|round| {
            let hits = trajectories
                .iter()
                .filter(|t| t.get(round).or(t.last()).copied().unwrap_or(false))
                .count();
            hits as f64 / n
        })
        .collect())
}
