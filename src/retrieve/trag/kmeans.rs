//! Seeded k-means (k-means++ seeding, Lloyd iterations, best of several restarts) over dense or
//! sparse rows.
//!
//! Our own rather than linfa-clustering's: linfa needs a dense `ndarray`, and T-RAG's lexical view
//! is a TF-IDF matrix with one column per corpus word (tens of thousands): dense, TabFact's 1,695
//! tables would take ~270 MB per copy, where the sparse rows take a few. The algorithm is small and
//! its determinism (fixed seeds, ties to the lower index, sums in row order) is what the tests pin.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Points to cluster: `Dense` is row-major with `dim` columns; `Sparse` rows are `(column, value)`
/// pairs with columns below `dim`.
#[derive(Debug, Clone, PartialEq)]
pub enum Rows {
    Dense {
        data: Vec<f32>,
        dim: usize,
    },
    Sparse {
        rows: Vec<Vec<(u32, f32)>>,
        dim: usize,
    },
}

impl Rows {
    pub fn len(&self) -> usize {
        match self {
            Rows::Dense { data, dim } => data.len().checked_div(*dim).unwrap_or(0),
            Rows::Sparse { rows, .. } => rows.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn dim(&self) -> usize {
        match self {
            Rows::Dense { dim, .. } | Rows::Sparse { dim, .. } => *dim,
        }
    }

    /// `f(column, value)` for each stored value of row `i`.
    fn for_each(&self, i: usize, mut f: impl FnMut(usize, f64)) {
        match self {
            Rows::Dense { data, dim } => {
                for (c, &v) in data[i * dim..(i + 1) * dim].iter().enumerate() {
                    f(c, f64::from(v));
                }
            }
            Rows::Sparse { rows, .. } => {
                for &(c, v) in &rows[i] {
                    f(c as usize, f64::from(v));
                }
            }
        }
    }

    fn squared_norm(&self, i: usize) -> f64 {
        let mut sum = 0.0;
        self.for_each(i, |_, v| sum += v * v);
        sum
    }

    fn dot(&self, i: usize, centroid: &[f64]) -> f64 {
        let mut sum = 0.0;
        self.for_each(i, |c, v| sum += v * centroid[c]);
        sum
    }

    /// Cosine of row `i` with a dense vector (0 where either is zero).
    pub fn cosine(&self, i: usize, other: &[f64]) -> f64 {
        let norms = (self.squared_norm(i) * other.iter().map(|v| v * v).sum::<f64>()).sqrt();
        if norms == 0.0 {
            0.0
        } else {
            self.dot(i, other) / norms
        }
    }
}

/// sklearn's defaults, which the T-RAG code used.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KMeansOptions {
    pub clusters: usize,
    pub restarts: usize,
    pub max_iterations: usize,
    /// Stop when the centroids' total squared shift is below `tolerance` × the mean per-column
    /// variance of the data.
    pub tolerance: f64,
    pub seed: u64,
}

impl Default for KMeansOptions {
    fn default() -> Self {
        KMeansOptions {
            clusters: 10,
            restarts: 10,
            max_iterations: 300,
            tolerance: 1e-4,
            seed: 42,
        }
    }
}

/// A clustering: each row's cluster and the centroids (row-major, `clusters × dim`).
#[derive(Debug, Clone, PartialEq)]
pub struct Clustering {
    pub labels: Vec<usize>,
    pub centroids: Vec<Vec<f64>>,
    pub inertia: f64,
}

/// The best (lowest inertia, earliest on ties) of `restarts` seeded runs. Fewer rows than
/// clusters gives one cluster per row.
pub fn kmeans(rows: &Rows, options: &KMeansOptions) -> Clustering {
    let n = rows.len();
    let k = options.clusters.clamp(1, n.max(1));
    if n == 0 {
        return Clustering {
            labels: Vec::new(),
            centroids: Vec::new(),
            inertia: 0.0,
        };
    }
    let threshold = options.tolerance * mean_variance(rows);
    let mut best: Option<Clustering> = None;
    for restart in 0..options.restarts.max(1) {
        let mut rng = ChaCha8Rng::seed_from_u64(options.seed.wrapping_add(restart as u64));
        let centroids = seed_centroids(rows, k, &mut rng);
        let run = lloyd(rows, centroids, options.max_iterations, threshold);
        if best.as_ref().is_none_or(|b| run.inertia < b.inertia) {
            best = Some(run);
        }
    }
    best.unwrap_or_else(|| unreachable!("at least one restart runs"))
}

fn mean_variance(rows: &Rows) -> f64 {
    let (n, dim) = (rows.len() as f64, rows.dim());
    let mut sum = vec![0.0; dim];
    let mut sum_sq = vec![0.0; dim];
    for i in 0..rows.len() {
        rows.for_each(i, |c, v| {
            sum[c] += v;
            sum_sq[c] += v * v;
        });
    }
    let total: f64 = (0..dim).map(|c| sum_sq[c] / n - (sum[c] / n).powi(2)).sum();
    total / dim.max(1) as f64
}

fn squared_distance(rows: &Rows, i: usize, centroid: &[f64], centroid_norm: f64) -> f64 {
    (rows.squared_norm(i) - 2.0 * rows.dot(i, centroid) + centroid_norm).max(0.0)
}

fn dense_row(rows: &Rows, i: usize) -> Vec<f64> {
    let mut out = vec![0.0; rows.dim()];
    rows.for_each(i, |c, v| out[c] = v);
    out
}

/// k-means++: the first centroid uniformly, each next one with probability ∝ squared distance to
/// the nearest chosen centroid.
fn seed_centroids(rows: &Rows, k: usize, rng: &mut ChaCha8Rng) -> Vec<Vec<f64>> {
    let n = rows.len();
    let mut centroids = vec![dense_row(rows, rng.random_range(0..n))];
    let mut nearest: Vec<f64> = vec![f64::INFINITY; n];
    while centroids.len() < k {
        let last = centroids.last().map(|c| c.as_slice()).unwrap_or_default();
        let last_norm: f64 = last.iter().map(|v| v * v).sum();
        for (i, d) in nearest.iter_mut().enumerate() {
            *d = d.min(squared_distance(rows, i, last, last_norm));
        }
        let total: f64 = nearest.iter().sum();
        let pick = if total > 0.0 {
            let mut target = rng.random::<f64>() * total;
            let mut chosen = n - 1;
            for (i, &d) in nearest.iter().enumerate() {
                if target < d {
                    chosen = i;
                    break;
                }
                target -= d;
            }
            chosen
        } else {
            // Every row sits on a centroid already: take the next row in order.
            centroids.len() % n
        };
        centroids.push(dense_row(rows, pick));
    }
    centroids
}

fn lloyd(
    rows: &Rows,
    mut centroids: Vec<Vec<f64>>,
    max_iterations: usize,
    threshold: f64,
) -> Clustering {
    let (n, k, dim) = (rows.len(), centroids.len(), rows.dim());
    let mut labels = vec![0usize; n];
    for _ in 0..max_iterations.max(1) {
        let distances = assign(rows, &centroids, &mut labels);
        let mut sums = vec![vec![0.0; dim]; k];
        let mut counts = vec![0usize; k];
        for (i, &label) in labels.iter().enumerate() {
            counts[label] += 1;
            rows.for_each(i, |c, v| sums[label][c] += v);
        }
        // An emptied cluster takes the row farthest from its centroid (sklearn's rule), so K stays K.
        let mut taken = vec![false; n];
        for cluster in 0..k {
            if counts[cluster] > 0 {
                continue;
            }
            let far = (0..n)
                .filter(|&i| !taken[i])
                .max_by(|&a, &b| distances[a].total_cmp(&distances[b]).then(b.cmp(&a)));
            if let Some(far) = far {
                taken[far] = true;
                sums[cluster] = dense_row(rows, far);
                counts[cluster] = 1;
            }
        }
        let mut shift = 0.0;
        for cluster in 0..k {
            let count = counts[cluster].max(1) as f64;
            for c in 0..dim {
                let value = sums[cluster][c] / count;
                shift += (value - centroids[cluster][c]).powi(2);
                centroids[cluster][c] = value;
            }
        }
        if shift <= threshold {
            break;
        }
    }
    let distances = assign(rows, &centroids, &mut labels);
    Clustering {
        labels,
        centroids,
        inertia: distances.iter().sum(),
    }
}

/// Each row to its nearest centroid (ties to the lower cluster); returns the squared distances.
fn assign(rows: &Rows, centroids: &[Vec<f64>], labels: &mut [usize]) -> Vec<f64> {
    let norms: Vec<f64> = centroids
        .iter()
        .map(|c| c.iter().map(|v| v * v).sum())
        .collect();
    (0..rows.len())
        .map(|i| {
            let mut best = (f64::INFINITY, 0);
            for (cluster, centroid) in centroids.iter().enumerate() {
                let d = squared_distance(rows, i, centroid, norms[cluster]);
                if d < best.0 {
                    best = (d, cluster);
                }
            }
            labels[i] = best.1;
            best.0
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three well-separated blobs of 2-D points, in a shuffled order.
    fn blobs() -> Rows {
        let mut data = Vec::new();
        for i in 0..30 {
            let (cx, cy) = [(0.0, 0.0), (10.0, 0.0), (0.0, 10.0)][(i * 7) % 3];
            let jitter = (i as f32 * 0.37).sin() * 0.5;
            data.extend([cx + jitter, cy - jitter]);
        }
        Rows::Dense { data, dim: 2 }
    }

    #[test]
    fn the_same_seed_gives_the_same_clustering_and_blobs_are_found() {
        let rows = blobs();
        let options = KMeansOptions {
            clusters: 3,
            ..KMeansOptions::default()
        };
        let first = kmeans(&rows, &options);
        assert_eq!(first, kmeans(&rows, &options));
        // Points of one blob share a label, and the three blobs have three labels.
        for i in 0..30 {
            assert_eq!(first.labels[i], first.labels[blob_head(i)]);
        }
        let mut distinct = first.labels.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), 3);
    }

    /// The first row index of the blob row `i` belongs to.
    fn blob_head(i: usize) -> usize {
        (0..30).find(|&j| (j * 7) % 3 == (i * 7) % 3).unwrap_or(0)
    }

    #[test]
    fn sparse_and_dense_rows_cluster_alike() {
        let Rows::Dense { data, dim } = blobs() else {
            unreachable!()
        };
        let sparse = Rows::Sparse {
            rows: data
                .chunks(dim)
                .map(|row| {
                    row.iter()
                        .enumerate()
                        .filter(|(_, v)| **v != 0.0)
                        .map(|(c, &v)| (c as u32, v))
                        .collect()
                })
                .collect(),
            dim,
        };
        let options = KMeansOptions {
            clusters: 3,
            ..KMeansOptions::default()
        };
        let dense = kmeans(&Rows::Dense { data, dim }, &options);
        let sparse = kmeans(&sparse, &options);
        assert_eq!(dense.labels, sparse.labels);
        assert!((dense.inertia - sparse.inertia).abs() < 1e-9);
    }

    #[test]
    fn fewer_rows_than_clusters_and_identical_rows_stay_well_defined() {
        let rows = Rows::Dense {
            data: vec![1.0, 1.0, 1.0, 1.0],
            dim: 2,
        };
        let clustering = kmeans(&rows, &KMeansOptions::default());
        assert_eq!(clustering.labels.len(), 2);
        assert_eq!(clustering.centroids.len(), 2);
        assert!(clustering.inertia.is_finite());
        let empty = Rows::Sparse {
            rows: Vec::new(),
            dim: 4,
        };
        assert!(kmeans(&empty, &KMeansOptions::default()).labels.is_empty());
    }
}
