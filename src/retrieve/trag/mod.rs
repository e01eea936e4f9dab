//! T-RAG's retrieval (`../shared/method/t-rag.md`): a hierarchical index built once per corpus
//! (three feature views of every table, seeded KMeans per view, the tables nearest each centroid
//! as its typical nodes), then per query a coarse stage (the best cluster per view by the mean
//! cosine between the query and the cluster's typical nodes, all three unioned into C*) and a fine
//! stage (personalized PageRank over C*'s similarity graph, seeded with the query's similarities).
//!
//! As in the released code, the query is compared with the semantic embeddings in every view (the
//! view only shaped the clusters), and one encoder serves both stages. Tables outside C* are never
//! ranked. The cluster labels and typical nodes are cached on disk beside the dense embeddings,
//! keyed by the corpus texts, the encoder and the settings.

pub mod features;
pub mod kmeans;
pub mod ppr;

use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::bert::Embeddings;
use super::dense::{write_atomically, CacheStatus};
use kmeans::{kmeans, KMeansOptions, Rows};
use ppr::{personalized_pagerank, similarity_graph, PprOptions};

pub use features::{linearize, TragText};

/// The spec's defaults: K = 10 clusters per view, k = 100 typical nodes, τ = 0.3, α = 0.85,
/// ε = 1e-6 over at most 50 iterations, V_final = 10, KMeans seed 42 with 10 restarts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TragSettings {
    pub clusters: usize,
    pub typical: usize,
    pub tau: f64,
    pub alpha: f64,
    pub epsilon: f64,
    pub max_iterations: usize,
    pub v_final: usize,
    pub seed: u64,
    pub restarts: usize,
}

impl Default for TragSettings {
    fn default() -> Self {
        TragSettings {
            clusters: 10,
            typical: 100,
            tau: 0.3,
            alpha: 0.85,
            epsilon: 1e-6,
            max_iterations: 50,
            v_final: 10,
            seed: 42,
            restarts: 10,
        }
    }
}

/// The three views, in the order their results are reported.
pub const VIEWS: [&str; 3] = ["semantic", "structural", "lexical"];

/// One view's clustering: each table's cluster, and per cluster its typical tables.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ViewIndex {
    pub labels: Vec<usize>,
    pub typical: Vec<Vec<usize>>,
}

/// The offline index: three views over the same tables, plus their unit-length semantic
/// embeddings (rows in table order).
#[derive(Debug, Clone, PartialEq)]
pub struct TragIndex {
    pub views: [ViewIndex; 3],
    semantic: Embeddings,
    settings: TragSettings,
}

/// One query's T-RAG ranking and what the coarse stage kept.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TragRanking {
    /// C* by PPR score, best first (ties to the lower table index).
    pub hits: Vec<(usize, f64)>,
    /// The chosen cluster of each view.
    pub clusters: [usize; 3],
    /// The size of each chosen cluster.
    pub view_sizes: [usize; 3],
}

#[derive(Debug, thiserror::Error)]
pub enum TragError {
    #[error("T-RAG needs one embedding per table: {embeddings} embeddings for {tables} tables")]
    Mismatch { embeddings: usize, tables: usize },
    #[error("T-RAG needs at least one table")]
    Empty,
}

#[derive(Serialize, Deserialize)]
struct CacheFile {
    key: String,
    views: [ViewIndex; 3],
}

impl TragIndex {
    /// Clusters `texts` (the tables' linearizations) in the three views. `semantic` holds their
    /// unit-length embeddings, one row per text.
    pub fn build(
        texts: &[String],
        semantic: Embeddings,
        settings: TragSettings,
    ) -> Result<Self, TragError> {
        if texts.is_empty() {
            return Err(TragError::Empty);
        }
        if semantic.len() != texts.len() {
            return Err(TragError::Mismatch {
                embeddings: semantic.len(),
                tables: texts.len(),
            });
        }
        let semantic_rows = Rows::Dense {
            data: semantic.data.clone(),
            dim: semantic.dim,
        };
        let views = [
            view_index(&semantic_rows, &settings),
            view_index(&features::structural(texts), &settings),
            view_index(&features::tf_idf(texts), &settings),
        ];
        Ok(Self {
            views,
            semantic,
            settings,
        })
    }

    /// [`TragIndex::build`], or its clusterings read from `cache_dir` when a file for exactly these
    /// texts, encoder (`encoder_identity`) and settings is there.
    pub fn load_or_build(
        texts: &[String],
        semantic: Embeddings,
        settings: TragSettings,
        encoder_identity: &[u8],
        cache_dir: &Path,
    ) -> Result<(Self, CacheStatus), TragError> {
        let key = hex::encode(cache_key(texts, encoder_identity, &settings));
        let path = cache_dir.join(format!("trag-{key}.json"));
        let mut status = CacheStatus::Built(path.clone());
        match std::fs::read(&path) {
            Ok(bytes) => match serde_json::from_slice::<CacheFile>(&bytes) {
                Ok(file)
                    if file.key == key
                        && file.views.iter().all(|v| v.labels.len() == texts.len()) =>
                {
                    if semantic.len() != texts.len() {
                        return Err(TragError::Mismatch {
                            embeddings: semantic.len(),
                            tables: texts.len(),
                        });
                    }
                    tracing::info!("T-RAG index from {}", path.display());
                    let index = Self {
                        views: file.views,
                        semantic,
                        settings,
                    };
                    return Ok((index, CacheStatus::Hit(path)));
                }
                Ok(_) => {
                    status = CacheStatus::Rebuilt(path.clone(), "another corpus or settings".into())
                }
                Err(e) => status = CacheStatus::Rebuilt(path.clone(), format!("unreadable: {e}")),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => status = CacheStatus::Rebuilt(path.clone(), format!("unreadable: {e}")),
        }
        let index = Self::build(texts, semantic, settings)?;
        let file = CacheFile {
            key,
            views: index.views.clone(),
        };
        // Clustering is cheap next to embedding: a cache that cannot be written is only a warning.
        match serde_json::to_vec(&file) {
            Ok(bytes) => {
                if let Err(e) = write_atomically(&path, &bytes) {
                    tracing::warn!("T-RAG index not cached: {e}");
                }
            }
            Err(e) => tracing::warn!("T-RAG index not cached: {e}"),
        }
        Ok((index, status))
    }

    pub fn settings(&self) -> &TragSettings {
        &self.settings
    }

    /// The cosine of two tables' semantic embeddings (the fine stage's edge weight before τ).
    pub fn similarity(&self, a: usize, b: usize) -> f64 {
        self.semantic
            .row(a)
            .iter()
            .zip(self.semantic.row(b))
            .map(|(x, y)| f64::from(*x) * f64::from(*y))
            .sum()
    }

    /// The coarse and fine stages for a unit-length query embedding.
    pub fn search(&self, query: &[f32]) -> TragRanking {
        let similarity = |table: usize| -> f64 {
            self.semantic
                .row(table)
                .iter()
                .zip(query)
                .map(|(a, b)| f64::from(*a) * f64::from(*b))
                .sum()
        };
        let query_similarity: Vec<f64> = (0..self.semantic.len()).map(similarity).collect();
        let mut clusters = [0usize; 3];
        let mut view_sizes = [0usize; 3];
        let mut in_union = vec![false; self.semantic.len()];
        for (v, view) in self.views.iter().enumerate() {
            let mut best = (f64::NEG_INFINITY, 0usize);
            for (cluster, typical) in view.typical.iter().enumerate() {
                if typical.is_empty() {
                    continue;
                }
                let mean = typical.iter().map(|&t| query_similarity[t]).sum::<f64>()
                    / typical.len() as f64;
                if mean > best.0 {
                    best = (mean, cluster);
                }
            }
            clusters[v] = best.1;
            for (table, &label) in view.labels.iter().enumerate() {
                if label == best.1 {
                    in_union[table] = true;
                    view_sizes[v] += 1;
                }
            }
        }
        let union: Vec<usize> = (0..in_union.len()).filter(|&t| in_union[t]).collect();
        let cosine = |i: usize, j: usize| -> f64 {
            self.semantic
                .row(union[i])
                .iter()
                .zip(self.semantic.row(union[j]))
                .map(|(a, b)| f64::from(*a) * f64::from(*b))
                .sum()
        };
        let graph = similarity_graph(union.len(), self.settings.tau, cosine);
        let seeds: Vec<f64> = union.iter().map(|&t| query_similarity[t]).collect();
        let options = PprOptions {
            alpha: self.settings.alpha,
            epsilon: self.settings.epsilon,
            max_iterations: self.settings.max_iterations,
        };
        let scores = personalized_pagerank(&graph, &seeds, &options);
        let mut hits: Vec<(usize, f64)> = union.iter().copied().zip(scores).collect();
        hits.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        TragRanking {
            hits,
            clusters,
            view_sizes,
        }
    }
}

fn view_index(rows: &Rows, settings: &TragSettings) -> ViewIndex {
    let clustering = kmeans(
        rows,
        &KMeansOptions {
            clusters: settings.clusters,
            restarts: settings.restarts,
            seed: settings.seed,
            ..KMeansOptions::default()
        },
    );
    let mut members: Vec<Vec<(usize, f64)>> = vec![Vec::new(); clustering.centroids.len()];
    for (table, &label) in clustering.labels.iter().enumerate() {
        members[label].push((table, rows.cosine(table, &clustering.centroids[label])));
    }
    let typical = members
        .into_iter()
        .map(|mut m| {
            m.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            m.into_iter()
                .take(settings.typical)
                .map(|(t, _)| t)
                .collect()
        })
        .collect();
    ViewIndex {
        labels: clustering.labels,
        typical,
    }
}

fn cache_key(texts: &[String], encoder_identity: &[u8], settings: &TragSettings) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(b"tableseek-trag-v1");
    hasher.update(encoder_identity);
    // Only what shapes the clusters: τ, α and V_final act at query time.
    for value in [settings.clusters, settings.typical, settings.restarts] {
        hasher.update((value as u64).to_le_bytes());
    }
    hasher.update(settings.seed.to_le_bytes());
    hasher.update((texts.len() as u64).to_le_bytes());
    for text in texts {
        hasher.update((text.len() as u64).to_le_bytes());
        hasher.update(text.as_bytes());
    }
    hasher.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Unit 2-D embeddings on a circle: tables 0-4 near angle 0, 5-9 near angle π/2.
    fn corpus() -> (Vec<String>, Embeddings) {
        let mut data = Vec::new();
        let mut texts = Vec::new();
        for i in 0..10 {
            let angle = if i < 5 {
                0.05 * i as f32
            } else {
                1.5 + 0.05 * i as f32
            };
            data.extend([angle.cos(), angle.sin()]);
            texts.push(if i < 5 {
                format!("Headers: team | points\nRow: club{i} | {i}")
            } else {
                format!("Headers: planet | moons\nRow: world{i} | {i}")
            });
        }
        let embeddings = Embeddings {
            data,
            dim: 2,
            truncated: 0,
        };
        (texts, embeddings)
    }

    fn settings() -> TragSettings {
        TragSettings {
            clusters: 2,
            typical: 3,
            ..TragSettings::default()
        }
    }

    #[test]
    fn the_query_finds_its_group_and_the_index_is_deterministic() {
        let (texts, embeddings) = corpus();
        let index = TragIndex::build(&texts, embeddings.clone(), settings()).unwrap();
        assert_eq!(
            index,
            TragIndex::build(&texts, embeddings, settings()).unwrap()
        );
        let ranking = index.search(&[0.0, 1.0]);
        let mut found: Vec<usize> = ranking.hits.iter().map(|h| h.0).collect();
        assert!(found[0] >= 5, "{ranking:?}");
        found.sort();
        // Every view's cluster of planets is in C*; nothing else outranks them.
        assert!((5..10).all(|t| found.contains(&t)), "{ranking:?}");
        let total: f64 = ranking.hits.iter().map(|h| h.1).sum();
        assert!((total - 1.0).abs() < 1e-6);
    }

    #[test]
    fn the_cache_is_read_back_and_invalidated_when_the_corpus_changes() {
        let tmp = tempfile::tempdir().unwrap();
        let (mut texts, embeddings) = corpus();
        let (built, status) =
            TragIndex::load_or_build(&texts, embeddings.clone(), settings(), b"enc", tmp.path())
                .unwrap();
        assert!(matches!(status, CacheStatus::Built(_)), "{status:?}");
        let (read, status) =
            TragIndex::load_or_build(&texts, embeddings.clone(), settings(), b"enc", tmp.path())
                .unwrap();
        assert!(matches!(status, CacheStatus::Hit(_)), "{status:?}");
        assert_eq!(read, built);
        texts[3].push_str(" changed");
        let (_, status) =
            TragIndex::load_or_build(&texts, embeddings.clone(), settings(), b"enc", tmp.path())
                .unwrap();
        assert!(
            matches!(status, CacheStatus::Built(_)),
            "a changed corpus reused the cache: {status:?}"
        );
        let (_, status) =
            TragIndex::load_or_build(&texts, embeddings, settings(), b"other encoder", tmp.path())
                .unwrap();
        assert!(matches!(status, CacheStatus::Built(_)), "{status:?}");
    }

    #[test]
    fn mismatched_embeddings_are_an_error() {
        let (texts, mut embeddings) = corpus();
        embeddings.data.truncate(4);
        assert!(matches!(
            TragIndex::build(&texts, embeddings, settings()),
            Err(TragError::Mismatch {
                embeddings: 2,
                tables: 10
            })
        ));
    }
}
