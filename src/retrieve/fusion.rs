//! One ranking from several: weighted reciprocal rank fusion (Cormack, Clarke and Büttcher,
//! SIGIR 2009), and for two rankings a blend of scores ([`fuse_two`], [`FusionRule`]). RRF needs
//! no common scale (a pattern share in 0..1, BM25's unbounded sums, cosines); the blend divides
//! each side by its best score, so it keeps how far apart a side's hits are, which RRF drops.
//!
//! An item's fused score is `Σ_r w_r / (k + rank_r)` over the rankings `r` that hold it (ranks from
//! 1), so an item found by one ranking only still scores, below an item equally placed in two.
//! Ties are broken by the best rank the item reached in any ranking, then by the earlier ranking
//! that reached it, then by the smaller item index: the order never depends on hashing or on
//! floating-point summation order (each item's sum runs over the rankings in the order given).

/// The `k` of the RRF paper, which damps the head of each ranking; the paper found 60 robust.
pub const DEFAULT_RRF_K: f64 = 60.0;

/// Hits each ranking contributes to a fusion: deeper than any pool refine is shown or any
/// reported cut-off (R@1/3/10), shallow enough to keep a query's fusion cheap.
pub const FUSION_POOL: usize = 100;

/// One ranking's part in a fusion.
#[derive(Debug, Clone, Copy)]
pub struct RankedList<'a> {
    /// Items, best first; an item repeated later in the list keeps its first place.
    pub items: &'a [usize],
    /// Multiplies this ranking's contributions (1.0 for plain RRF).
    pub weight: f64,
}

/// An item of the fused ranking with its fused score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fused {
    pub item: usize,
    pub score: f64,
}

/// The fusion of `lists`, best first, every item that any list holds exactly once.
pub fn reciprocal_rank_fusion(lists: &[RankedList<'_>], k: f64) -> Vec<Fused> {
    let sides: Vec<Side<'_>> = lists
        .iter()
        .map(|list| Side {
            items: list.items.iter().map(|&item| (item, 0.0)).collect(),
            weight: list.weight,
        })
        .collect();
    accumulate(&sides, |rank, _| 1.0 / (k + rank as f64))
}

/// How [`fuse_two`] joins two scored rankings.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "rule", rename_all = "lowercase")]
pub enum FusionRule {
    /// Weighted reciprocal rank fusion: scores are ignored, ranks count.
    Rrf { k: f64, weights: [f64; 2] },
    /// Weighted sum of each side's scores divided by that side's best score, so both sides
    /// span (0, 1] whatever their scale; an item missing from a side gets 0 there.
    Blend { weights: [f64; 2] },
}

impl Default for FusionRule {
    /// Plain RRF with the paper's k.
    fn default() -> Self {
        FusionRule::Rrf {
            k: DEFAULT_RRF_K,
            weights: [1.0, 1.0],
        }
    }
}

/// Two rankings of `(item, score)` pairs, best first, joined by `rule`; ties as in
/// [`reciprocal_rank_fusion`].
pub fn fuse_two(rule: FusionRule, first: &[(usize, f64)], second: &[(usize, f64)]) -> Vec<Fused> {
    let weights = match rule {
        FusionRule::Rrf { weights, .. } | FusionRule::Blend { weights } => weights,
    };
    let sides = [
        Side {
            items: std::borrow::Cow::Borrowed(first),
            weight: weights[0],
        },
        Side {
            items: std::borrow::Cow::Borrowed(second),
            weight: weights[1],
        },
    ];
    match rule {
        FusionRule::Rrf { k, .. } => accumulate(&sides, |rank, _| 1.0 / (k + rank as f64)),
        FusionRule::Blend { .. } => accumulate(&sides, |_, relative| relative),
    }
}

/// `values` mapped linearly onto [0, 1] (smallest 0, largest 1; all equal: all 0). Unlike
/// [`FusionRule::Blend`]'s division by the best score, this also serves scores that are negative,
/// such as log-likelihoods.
pub fn min_max_scaled(values: &[f64]) -> Vec<f64> {
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let span = (max - min).max(1e-12);
    values.iter().map(|v| (v - min) / span).collect()
}

/// Two scores of the same items, each [`min_max_scaled`], summed as `first + weight · second`.
pub fn min_max_blend(first: &[f64], second: &[f64], weight: f64) -> Vec<f64> {
    min_max_scaled(first)
        .into_iter()
        .zip(min_max_scaled(second))
        .map(|(a, b)| a + weight * b)
        .collect()
}

struct Side<'a> {
    items: std::borrow::Cow<'a, [(usize, f64)]>,
    weight: f64,
}

/// Sums `weight · gain(rank, score / best score)` per item over the sides in order (ranks
/// from 1, an item's repeats ignored), then sorts with the documented tie-breaks.
fn accumulate(sides: &[Side<'_>], gain: impl Fn(usize, f64) -> f64) -> Vec<Fused> {
    // item -> (score, best rank, first side reaching that rank)
    let mut seen: std::collections::BTreeMap<usize, (f64, usize, usize)> = Default::default();
    for (side_index, side) in sides.iter().enumerate() {
        let best = side
            .items
            .iter()
            .map(|&(_, score)| score)
            .fold(0.0_f64, f64::max);
        let mut placed = std::collections::BTreeSet::new();
        for &(item, score) in side.items.iter() {
            if !placed.insert(item) {
                continue;
            }
            let rank = placed.len();
            let relative = if best > 0.0 { score / best } else { 0.0 };
            let entry = seen.entry(item).or_insert((0.0, usize::MAX, usize::MAX));
            entry.0 += side.weight * gain(rank, relative);
            if rank < entry.1 {
                entry.1 = rank;
                entry.2 = side_index;
            }
        }
    }
    let mut fused: Vec<(usize, (f64, usize, usize))> = seen.into_iter().collect();
    fused.sort_by(|(a_item, a), (b_item, b)| {
        b.0.total_cmp(&a.0)
            .then(a.1.cmp(&b.1))
            .then(a.2.cmp(&b.2))
            .then(a_item.cmp(b_item))
    });
    fused
        .into_iter()
        .map(|(item, (score, _, _))| Fused { item, score })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_max_blend_scales_each_side_over_its_own_range() {
        assert_eq!(min_max_scaled(&[-60.0, -50.0, -55.0]), [0.0, 1.0, 0.5]);
        assert_eq!(min_max_scaled(&[3.0, 3.0]), [0.0, 0.0]);
        assert!(min_max_scaled(&[]).is_empty());
        let blended = min_max_blend(&[1.0, 1.0, 0.5], &[-50.0, -10.0, 0.0], 1.0);
        assert_eq!(blended, [1.0, 1.8, 1.0]);
    }

    fn items(fused: &[Fused]) -> Vec<usize> {
        fused.iter().map(|f| f.item).collect()
    }

    fn list(items: &[usize]) -> RankedList<'_> {
        RankedList { items, weight: 1.0 }
    }

    #[test]
    fn agreement_wins_over_one_sided_hits() {
        // 7 is second in both; 1 and 2 are first in one ranking each and absent from the other.
        let fused = reciprocal_rank_fusion(&[list(&[1, 7, 3]), list(&[2, 7, 4])], 60.0);
        assert_eq!(items(&fused)[0], 7);
        assert!((fused[0].score - 2.0 / 62.0).abs() < 1e-12);
        // A one-sided hit still appears, once.
        assert_eq!(items(&fused).len(), 5);
        assert!(items(&fused).contains(&3) && items(&fused).contains(&4));
    }

    #[test]
    fn ties_break_by_best_rank_then_list_order_then_index() {
        // 1 and 2 both score 1/61 (first in one list each): the earlier list's item first.
        let fused = reciprocal_rank_fusion(&[list(&[2]), list(&[1])], 60.0);
        assert_eq!(items(&fused), vec![2, 1]);
        // Equal scores and equal best ranks: the item the earlier list put first.
        let fused = reciprocal_rank_fusion(&[list(&[5, 3]), list(&[3, 5])], 60.0);
        assert_eq!(fused[0].score, fused[1].score);
        assert_eq!(items(&fused), vec![5, 3]);
    }

    #[test]
    fn empty_pools_and_repeats() {
        assert!(reciprocal_rank_fusion(&[], 60.0).is_empty());
        assert!(reciprocal_rank_fusion(&[list(&[]), list(&[])], 60.0).is_empty());
        // One empty side: the other ranking, unchanged.
        let fused = reciprocal_rank_fusion(&[list(&[]), list(&[4, 2, 9])], 60.0);
        assert_eq!(items(&fused), vec![4, 2, 9]);
        // A repeated item keeps its first place and counts once.
        let fused = reciprocal_rank_fusion(&[list(&[4, 4, 2])], 60.0);
        assert_eq!(items(&fused), vec![4, 2]);
        assert!((fused[1].score - 1.0 / 62.0).abs() < 1e-12);
    }

    #[test]
    fn weights_tilt_the_order() {
        let grep = [1, 2];
        let bm25 = [2, 1];
        let even = reciprocal_rank_fusion(&[list(&grep), list(&bm25)], 60.0);
        assert_eq!(items(&even), vec![1, 2], "a tie, broken by the first list");
        let tilted = reciprocal_rank_fusion(
            &[
                RankedList {
                    items: &grep,
                    weight: 1.0,
                },
                RankedList {
                    items: &bm25,
                    weight: 2.0,
                },
            ],
            60.0,
        );
        assert_eq!(items(&tilted), vec![2, 1]);
    }

    #[test]
    fn fuse_two_by_rrf_is_weighted_rrf_and_blend_uses_relative_scores() {
        let first = [(1, 0.9), (2, 0.3)];
        let second = [(2, 12.0), (3, 6.0)];
        let rule = FusionRule::Rrf {
            k: 60.0,
            weights: [1.0, 2.0],
        };
        let by_rank = reciprocal_rank_fusion(
            &[
                RankedList {
                    items: &[1, 2],
                    weight: 1.0,
                },
                RankedList {
                    items: &[2, 3],
                    weight: 2.0,
                },
            ],
            60.0,
        );
        assert_eq!(fuse_two(rule, &first, &second), by_rank);

        // Blend: 2 scores 0.3/0.9 + 12/12 = 1.33, 1 scores 1.0, 3 scores 0.5.
        let blend = fuse_two(
            FusionRule::Blend {
                weights: [1.0, 1.0],
            },
            &first,
            &second,
        );
        assert_eq!(items(&blend), vec![2, 1, 3]);
        assert!((blend[0].score - (0.3 / 0.9 + 1.0)).abs() < 1e-12);
        // A zero weight leaves that side as a tie-breaker only.
        let first_only = fuse_two(
            FusionRule::Blend {
                weights: [1.0, 0.0],
            },
            &first,
            &second,
        );
        assert_eq!(items(&first_only), vec![1, 2, 3]);
        // Empty or all-zero sides contribute nothing and never divide by zero.
        let zeros = [(4, 0.0), (5, 0.0)];
        let fused = fuse_two(
            FusionRule::Blend {
                weights: [1.0, 1.0],
            },
            &zeros,
            &[],
        );
        assert_eq!(items(&fused), vec![4, 5]);
        assert!(fused.iter().all(|f| f.score == 0.0));
    }
}
