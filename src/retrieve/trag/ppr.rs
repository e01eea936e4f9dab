//! Personalized PageRank over T-RAG's local similarity graph.
//!
//! Our own rather than petgraph's `page_rank`: that one has no personalization vector, no edge
//! weights and no convergence test, and the graph here is a small dense matrix (the coarse stage's
//! tables) that a plain power iteration handles directly.

/// The spec's settings: damping `alpha`, stop when the L1 change is below `epsilon` or after
/// `max_iterations`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PprOptions {
    pub alpha: f64,
    pub epsilon: f64,
    pub max_iterations: usize,
}

impl Default for PprOptions {
    fn default() -> Self {
        PprOptions {
            alpha: 0.85,
            epsilon: 1e-6,
            max_iterations: 50,
        }
    }
}

/// The edge weights: `cos(i, j)` where at least `tau`, else 0, and 1 on the diagonal at any `tau`
/// (every node keeps its self-loop). `cosine(i, j)` is called for `i < j` only.
// Index loops: each pair writes both `[i][j]` and `[j][i]`.
#[allow(clippy::needless_range_loop)]
pub fn similarity_graph(n: usize, tau: f64, cosine: impl Fn(usize, usize) -> f64) -> Vec<Vec<f64>> {
    let mut graph = vec![vec![0.0; n]; n];
    for i in 0..n {
        graph[i][i] = 1.0;
        for j in i + 1..n {
            let c = cosine(i, j);
            if c.is_finite() && c >= tau {
                graph[i][j] = c;
                graph[j][i] = c;
            }
        }
    }
    graph
}

/// `v ← (1 − α) h + α Pᵀ v` from `v = h`, with `P` the row-normalised graph and `h` the query
/// similarities clipped at 0 and normalised (uniform when all are 0 or not finite). Scores are
/// non-negative and sum to 1.
pub fn personalized_pagerank(
    graph: &[Vec<f64>],
    query_similarity: &[f64],
    options: &PprOptions,
) -> Vec<f64> {
    let n = graph.len();
    if n == 0 {
        return Vec::new();
    }
    let clipped: Vec<f64> = query_similarity
        .iter()
        .map(|&s| if s.is_finite() { s.max(0.0) } else { 0.0 })
        .collect();
    let total: f64 = clipped.iter().sum();
    let h: Vec<f64> = if total > 0.0 {
        clipped.iter().map(|s| s / total).collect()
    } else {
        vec![1.0 / n as f64; n]
    };
    // The spec's +1e-10 keeps an all-zero row (impossible with self-loops, but cheap) finite.
    let row_sums: Vec<f64> = graph
        .iter()
        .map(|row| row.iter().sum::<f64>() + 1e-10)
        .collect();
    let mut v = h.clone();
    for _ in 0..options.max_iterations {
        let mut next: Vec<f64> = h.iter().map(|x| (1.0 - options.alpha) * x).collect();
        for (i, row) in graph.iter().enumerate() {
            let share = options.alpha * v[i] / row_sums[i];
            for (j, &w) in row.iter().enumerate() {
                next[j] += share * w;
            }
        }
        let change: f64 = next.iter().zip(&v).map(|(a, b)| (a - b).abs()).sum();
        v = next;
        if change < options.epsilon {
            break;
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Solves `(I − α Pᵀ) v = (1 − α) h` by Gaussian elimination: PPR's fixed point, closed form.
    fn closed_form(graph: &[Vec<f64>], h: &[f64], alpha: f64) -> Vec<f64> {
        let n = graph.len();
        let sums: Vec<f64> = graph
            .iter()
            .map(|r| r.iter().sum::<f64>() + 1e-10)
            .collect();
        let mut a = vec![vec![0.0; n + 1]; n];
        for j in 0..n {
            for i in 0..n {
                a[j][i] = if i == j { 1.0 } else { 0.0 } - alpha * graph[i][j] / sums[i];
            }
            a[j][n] = (1.0 - alpha) * h[j];
        }
        for col in 0..n {
            let pivot = (col..n)
                .max_by(|&x, &y| a[x][col].abs().total_cmp(&a[y][col].abs()))
                .unwrap();
            a.swap(col, pivot);
            for row in 0..n {
                if row != col {
                    let f = a[row][col] / a[col][col];
                    let pivot_row = a[col].clone();
                    for (value, pivot) in a[row].iter_mut().zip(&pivot_row).skip(col) {
                        *value -= f * pivot;
                    }
                }
            }
        }
        (0..n).map(|i| a[i][n] / a[i][i]).collect()
    }

    #[test]
    fn four_nodes_match_the_closed_form() {
        // A path 0 - 1 - 2 with 3 alone (its only edge is below tau).
        let cos = [
            [1.0, 0.9, 0.2, 0.1],
            [0.9, 1.0, 0.5, 0.1],
            [0.2, 0.5, 1.0, 0.29],
            [0.1, 0.1, 0.29, 1.0],
        ];
        let graph = similarity_graph(4, 0.3, |i, j| cos[i][j]);
        assert_eq!(graph[2][3], 0.0);
        assert_eq!(graph[3][3], 1.0);
        let query = [0.8, -0.2, 0.4, 0.0];
        let options = PprOptions {
            epsilon: 1e-12,
            max_iterations: 10_000,
            ..PprOptions::default()
        };
        let scores = personalized_pagerank(&graph, &query, &options);
        let h: Vec<f64> = [0.8, 0.0, 0.4, 0.0].iter().map(|x| x / 1.2).collect();
        let expected = closed_form(&graph, &h, 0.85);
        for (got, want) in scores.iter().zip(&expected) {
            assert!((got - want).abs() < 1e-6, "{scores:?} vs {expected:?}");
        }
        assert!(scores.iter().all(|&s| s >= 0.0));
        assert!((scores.iter().sum::<f64>() - 1.0).abs() < 1e-6);
        // Node 1 has no query similarity of its own but sits between 0 and 2: it outranks 3.
        assert!(scores[1] > scores[3]);
    }

    #[test]
    fn an_all_zero_query_row_is_uniform_and_nothing_is_nan() {
        let graph = similarity_graph(3, 1.1, |_, _| f64::NAN);
        let scores = personalized_pagerank(&graph, &[0.0, -1.0, f64::NAN], &PprOptions::default());
        for s in &scores {
            assert!((s - 1.0 / 3.0).abs() < 1e-9, "{scores:?}");
        }
        assert!(personalized_pagerank(&[], &[], &PprOptions::default()).is_empty());
    }
}
