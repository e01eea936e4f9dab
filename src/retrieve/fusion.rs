//! One ranking from several: weighted reciprocal rank fusion (Cormack, Clarke and Büttcher,
//! SIGIR 2009). Rank-based rather than a blend of scores because the rankings it joins score on
//! unrelated scales (a pattern share in 0..1, BM25's unbounded sums, cosines), and a blend would
//! need per-corpus normalization that RRF does not.
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
    // item -> (score, best rank, first list reaching that rank)
    let mut seen: std::collections::BTreeMap<usize, (f64, usize, usize)> = Default::default();
    for (list_index, list) in lists.iter().enumerate() {
        let mut placed = std::collections::BTreeSet::new();
        for &item in list.items {
            if !placed.insert(item) {
                continue;
            }
            let rank = placed.len();
            let gain = list.weight / (k + rank as f64);
            let entry = seen.entry(item).or_insert((0.0, usize::MAX, usize::MAX));
            entry.0 += gain;
            if rank < entry.1 {
                entry.1 = rank;
                entry.2 = list_index;
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
}
