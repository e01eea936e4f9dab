//! BM25 over documents given as strings (the caller serializes each table), with an inverted index.
//!
//! Two variants, each reproducing the Python tool the reference figures were measured with:
//!
//! - [`Bm25Variant::Okapi`] — `rank_bm25.BM25Okapi`: `idf = ln(N - n + 0.5) - ln(n + 0.5)`; a term in
//!   more than half the documents would get a negative idf, and rank_bm25 replaces it with
//!   `epsilon * mean idf over the vocabulary`. Term weight `idf * tf (k1 + 1) / (tf + k1 (1 - b + b dl/avgdl))`.
//! - [`Bm25Variant::Lucene`] — `bm25s` `method="lucene"`: `idf = ln(1 + (N - n + 0.5) / (n + 0.5))`
//!   (never negative), term weight `idf * tf / (tf + k1 (1 - b + b dl/avgdl))`.
//!
//! Tokens are the maximal runs of Unicode letters and digits of the lowercased text (Python's
//! `[^\W_]+` on `text.lower()`); with [`Bm25Builder::english_stopwords`] the 33 words of bm25s's
//! `"en"` list (Lucene's English stop set) are dropped from documents and queries alike. Repeated
//! query tokens count once per occurrence, as in both Python libraries.
//!
//! Our own implementation rather than a crate: the point of this baseline is to reproduce the two
//! reference configurations exactly (same idf floor, same summation order, so even ties agree with
//! rank_bm25), which neither tantivy (a different scoring pipeline, heavy to build) nor the small
//! `bm25` crate (its own tokenizer and idf) gives. On TARGET-TabFact test-1k it reproduces
//! rank_bm25's R@1/2/3 exactly (tests/bm25_tabfact.rs).
//!
//! ```
//! use tableseek::retrieve::bm25::Bm25Builder;
//! let docs = ["team,points\nessendon,120", "rider,grid\nkazuto sakata,4"];
//! let index = Bm25Builder::lucene().english_stopwords(true).build(&docs).unwrap();
//! let hits = index.search("kazuto sakata be the only rider to ride grid 4", 1);
//! assert_eq!(hits[0].doc, 1);
//! ```

use std::collections::HashMap;
use std::sync::LazyLock;

use rayon::prelude::*;
use regex::Regex;

/// The 33 English stopwords of bm25s's `stopwords="en"` (`bm25s.stopwords.STOPWORDS_EN`, itself
/// Lucene's `EnglishAnalyzer` default set).
pub const ENGLISH_STOPWORDS: [&str; 33] = [
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it",
    "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these",
    "they", "this", "to", "was", "will", "with",
];

/// Why an index could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Bm25Error {
    #[error("cannot index an empty corpus")]
    EmptyCorpus,
    #[error("{0} documents exceed the index's u32 document ids")]
    TooManyDocuments(usize),
    #[error("no document in the corpus has a single token, so the average length is zero")]
    NoTokens,
    #[error("BM25 parameter {name} = {value} is out of range ({expected})")]
    InvalidParameter {
        name: &'static str,
        value: f64,
        expected: &'static str,
    },
}

/// Which BM25 formula to use; see the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bm25Variant {
    Okapi,
    Lucene,
}

/// Configures and builds a [`Bm25Index`]. Defaults follow the reference tools: k1 1.5, b 0.75,
/// epsilon 0.25 (Okapi only), no stopwords.
#[derive(Debug, Clone, PartialEq)]
pub struct Bm25Builder {
    variant: Bm25Variant,
    k1: f64,
    b: f64,
    epsilon: f64,
    english_stopwords: bool,
}

/// The two BM25 setups users pick between (`--bm25`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Bm25Preset {
    /// rank_bm25's BM25Okapi (k1 1.5, b 0.75, epsilon 0.25, no stopwords).
    #[default]
    Okapi,
    /// bm25s's Lucene variant with its English stopwords.
    Lucene,
}

impl Bm25Preset {
    pub fn builder(self) -> Bm25Builder {
        match self {
            Bm25Preset::Okapi => Bm25Builder::okapi(),
            Bm25Preset::Lucene => Bm25Builder::lucene().english_stopwords(true),
        }
    }
}

impl Bm25Builder {
    pub fn new(variant: Bm25Variant) -> Self {
        Self {
            variant,
            k1: 1.5,
            b: 0.75,
            epsilon: 0.25,
            english_stopwords: false,
        }
    }

    /// rank_bm25's `BM25Okapi`.
    pub fn okapi() -> Self {
        Self::new(Bm25Variant::Okapi)
    }

    /// bm25s's `method="lucene"`.
    pub fn lucene() -> Self {
        Self::new(Bm25Variant::Lucene)
    }

    /// Term-frequency saturation, >= 0.
    pub fn k1(mut self, k1: f64) -> Self {
        self.k1 = k1;
        self
    }

    /// Length normalisation, in [0, 1].
    pub fn b(mut self, b: f64) -> Self {
        self.b = b;
        self
    }

    /// Okapi's floor for negative idf, as a fraction of the mean idf.
    pub fn epsilon(mut self, epsilon: f64) -> Self {
        self.epsilon = epsilon;
        self
    }

    /// Drop [`ENGLISH_STOPWORDS`] from documents and queries.
    pub fn english_stopwords(mut self, on: bool) -> Self {
        self.english_stopwords = on;
        self
    }

    fn validate(&self) -> Result<(), Bm25Error> {
        let checks = [
            ("k1", self.k1, self.k1 >= 0.0, "finite, >= 0"),
            ("b", self.b, (0.0..=1.0).contains(&self.b), "within [0, 1]"),
            ("epsilon", self.epsilon, self.epsilon.is_finite(), "finite"),
        ];
        for (name, value, ok, expected) in checks {
            if !ok || !value.is_finite() {
                return Err(Bm25Error::InvalidParameter {
                    name,
                    value,
                    expected,
                });
            }
        }
        Ok(())
    }

    /// Tokenizes every document (in parallel) and builds the inverted index. Search hits name
    /// documents by their index in `documents`.
    pub fn build<S: AsRef<str> + Sync>(self, documents: &[S]) -> Result<Bm25Index, Bm25Error> {
        self.validate()?;
        if documents.is_empty() {
            return Err(Bm25Error::EmptyCorpus);
        }
        if u32::try_from(documents.len()).is_err() {
            return Err(Bm25Error::TooManyDocuments(documents.len()));
        }
        let stopwords = self.english_stopwords;
        let tokenized: Vec<Vec<String>> = documents
            .par_iter()
            .map(|doc| tokenize(doc.as_ref(), stopwords))
            .collect();

        // Term ids in order of first appearance, so the Okapi mean idf sums in rank_bm25's order.
        let mut vocabulary: HashMap<String, u32> = HashMap::new();
        let mut postings: Vec<Vec<Posting>> = Vec::new();
        let mut doc_len = Vec::with_capacity(documents.len());
        for (doc, doc_tokens) in tokenized.into_iter().enumerate() {
            doc_len.push(doc_tokens.len() as u32);
            let mut ids: Vec<u32> = doc_tokens
                .into_iter()
                .map(|token| {
                    let next = vocabulary.len() as u32;
                    *vocabulary.entry(token).or_insert_with(|| {
                        postings.push(Vec::new());
                        next
                    })
                })
                .collect();
            ids.sort_unstable();
            for run in ids.chunk_by(|x, y| x == y) {
                postings[run[0] as usize].push(Posting {
                    doc: doc as u32,
                    tf: run.len() as u32,
                });
            }
        }

        let total_len: u64 = doc_len.iter().map(|&l| u64::from(l)).sum();
        if total_len == 0 {
            return Err(Bm25Error::NoTokens);
        }
        let n_docs = documents.len() as f64;
        let avg_len = total_len as f64 / n_docs;
        let idf = self.idf(&postings, n_docs);
        // The length part of the denominator depends on the document only: compute it once.
        let length_norm = doc_len
            .iter()
            .map(|&l| self.k1 * (1.0 - self.b + self.b * f64::from(l) / avg_len))
            .collect();
        Ok(Bm25Index {
            variant: self.variant,
            k1: self.k1,
            english_stopwords: self.english_stopwords,
            vocabulary,
            postings,
            idf,
            length_norm,
        })
    }

    fn idf(&self, postings: &[Vec<Posting>], n_docs: f64) -> Vec<f64> {
        let dfs = postings.iter().map(|p| p.len() as f64);
        match self.variant {
            Bm25Variant::Lucene => dfs
                .map(|df| (1.0 + (n_docs - df + 0.5) / (df + 0.5)).ln())
                .collect(),
            Bm25Variant::Okapi => {
                let mut idf: Vec<f64> = dfs
                    .map(|df| (n_docs - df + 0.5).ln() - (df + 0.5).ln())
                    .collect();
                let mean = idf.iter().sum::<f64>() / idf.len().max(1) as f64;
                let floor = self.epsilon * mean;
                for value in idf.iter_mut().filter(|v| **v < 0.0) {
                    *value = floor;
                }
                idf
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Posting {
    doc: u32,
    tf: u32,
}

/// One search result: a document's position in the indexed slice and its BM25 score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    pub doc: usize,
    pub score: f64,
}

/// An immutable BM25 index; build it with [`Bm25Builder`]. Safe to share across threads.
#[derive(Debug, Clone)]
pub struct Bm25Index {
    variant: Bm25Variant,
    k1: f64,
    english_stopwords: bool,
    vocabulary: HashMap<String, u32>,
    postings: Vec<Vec<Posting>>,
    idf: Vec<f64>,
    /// `k1 (1 - b + b dl / avgdl)` per document.
    length_norm: Vec<f64>,
}

impl Bm25Index {
    /// Number of indexed documents.
    pub fn len(&self) -> usize {
        self.length_norm.len()
    }

    pub fn is_empty(&self) -> bool {
        self.length_norm.is_empty()
    }

    /// Number of distinct terms.
    pub fn vocabulary_len(&self) -> usize {
        self.vocabulary.len()
    }

    /// The `k` best documents for `query`, best first; equal scores keep document order. Documents
    /// the query does not touch score 0 and still fill the list, as in the reference tools' full
    /// sorts, so the result has `min(k, len())` hits. Cost: the query terms' postings, plus k.
    pub fn search(&self, query: &str, k: usize) -> Vec<Hit> {
        let k = k.min(self.len());
        let mut scored = self.touched_scores(query);
        scored.sort_by(|x, y| y.score.total_cmp(&x.score).then(x.doc.cmp(&y.doc)));
        let positive = scored.iter().take_while(|h| h.score > 0.0).count();
        if positive >= k {
            scored.truncate(k);
            return scored;
        }
        // Score 0 is shared by every untouched document and by touched ones whose terms cancel
        // out; that group comes in index order, ahead of negative scores (possible for Okapi when
        // the mean idf itself is negative).
        let negative_start = positive
            + scored[positive..]
                .iter()
                .take_while(|h| h.score == 0.0)
                .count();
        let mut nonzero_docs: Vec<usize> = scored[..positive]
            .iter()
            .chain(&scored[negative_start..])
            .map(|h| h.doc)
            .collect();
        nonzero_docs.sort_unstable();
        let zero_group = (0..self.len())
            .filter(|doc| nonzero_docs.binary_search(doc).is_err())
            .map(|doc| Hit { doc, score: 0.0 });
        let mut result = scored[..positive].to_vec();
        result.extend(zero_group.take(k - positive));
        let missing = k - result.len();
        result.extend(scored[negative_start..].iter().take(missing));
        result
    }

    /// [`Self::search`] for many queries in parallel; results are in query order.
    pub fn search_batch<S: AsRef<str> + Sync>(&self, queries: &[S], k: usize) -> Vec<Vec<Hit>> {
        queries
            .par_iter()
            .map(|q| self.search(q.as_ref(), k))
            .collect()
    }

    /// Scores of the documents that hold at least one query term. Each document's terms are summed
    /// in query order, the order rank_bm25 adds them in, so equal scores stay bit-equal.
    fn touched_scores(&self, query: &str) -> Vec<Hit> {
        let mut contributions: Vec<(u32, u32, f64)> = Vec::new();
        for (position, token) in tokenize(query, self.english_stopwords).iter().enumerate() {
            let Some(&term) = self.vocabulary.get(token) else {
                continue;
            };
            let idf = self.idf[term as usize];
            for posting in &self.postings[term as usize] {
                let tf = f64::from(posting.tf);
                let norm = self.length_norm[posting.doc as usize];
                let weight = match self.variant {
                    Bm25Variant::Okapi => idf * (tf * (self.k1 + 1.0) / (tf + norm)),
                    Bm25Variant::Lucene => idf * (tf / (tf + norm)),
                };
                contributions.push((posting.doc, position as u32, weight));
            }
        }
        contributions.sort_unstable_by_key(|&(doc, position, _)| (doc, position));
        contributions
            .chunk_by(|x, y| x.0 == y.0)
            .map(|run| Hit {
                doc: run[0].0 as usize,
                score: run.iter().fold(0.0, |sum, c| sum + c.2),
            })
            .collect()
    }
}

/// The tokens BM25 sees: lowercased maximal runs of Unicode letters and digits, optionally without
/// [`ENGLISH_STOPWORDS`].
pub fn tokenize(text: &str, english_stopwords: bool) -> Vec<String> {
    // Letters and numbers by general category (L*, N*), which is what Python's `[^\W_]` means;
    // Rust's `char::is_alphanumeric` also takes combining vowel signs (Devanagari and the like),
    // which would change some tokens and break the exact match with the reference tools.
    static TOKEN: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"[\p{L}\p{N}]+").unwrap_or_else(|e| unreachable!("constant pattern: {e}"))
    });
    // Lowercase the whole text first: some characters lowercase to several.
    let lower = text.to_lowercase();
    TOKEN
        .find_iter(&lower)
        .map(|m| m.as_str())
        .filter(|t| !(english_stopwords && ENGLISH_STOPWORDS.contains(t)))
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOCS: [&str; 5] = [
        "the cat sat on the mat",
        "the dog sat",
        "cats and dogs",
        "the the the end",
        "mat mat cat",
    ];

    fn scores(index: &Bm25Index, query: &str) -> Vec<f64> {
        let mut dense = vec![0.0; index.len()];
        for hit in index.search(query, index.len()) {
            dense[hit.doc] = hit.score;
        }
        dense
    }

    fn assert_close(got: &[f64], want: &[f64], tol: f64) {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() <= tol, "got {got:?}, want {want:?}");
        }
    }

    #[test]
    fn okapi_matches_rank_bm25_including_the_negative_idf_floor() {
        // Values from rank_bm25 0.2.2 BM25Okapi on DOCS (whitespace tokens, same as ours here).
        let index = Bm25Builder::okapi().build(&DOCS).unwrap();
        let want = [
            0.533_859_916_142_216_7,
            0.0,
            0.0,
            0.0,
            0.887_246_745_479_042_3,
        ];
        assert_close(&scores(&index, "cat mat"), &want, 1e-14);
        // "the" is in 3 of 5 documents: its idf is floored at 0.25 * mean idf.
        let want = [
            0.218_744_446_750_825_02,
            0.200_621_723_691_527_03,
            0.0,
            0.298_761_354_761_408_3,
            0.0,
        ];
        assert_close(&scores(&index, "The"), &want, 1e-14);
        // A repeated query token counts twice.
        let want = [
            0.533_859_916_142_216_7,
            1.956_952_236_994_195_8,
            0.0,
            0.0,
            0.0,
        ];
        assert_close(&scores(&index, "dog sat sat"), &want, 1e-14);
    }

    #[test]
    fn lucene_matches_bm25s() {
        // bm25s 0.3.16 computes in float32, hence the tolerance.
        let index = Bm25Builder::lucene().build(&DOCS).unwrap();
        assert_close(
            &scores(&index, "cat mat"),
            &[0.555_621_1, 0.0, 0.0, 0.0, 0.923_412_56],
            1e-6,
        );
        assert_close(
            &scores(&index, "the"),
            &[0.259_675_03, 0.238_161_25, 0.0, 0.354_664_4, 0.0],
            1e-6,
        );
    }

    #[test]
    fn ties_and_untouched_documents_follow_document_order() {
        let index = Bm25Builder::okapi().build(&DOCS).unwrap();
        let hits = index.search("zebra", 3);
        assert_eq!(hits.iter().map(|h| h.doc).collect::<Vec<_>>(), [0, 1, 2]);
        // Docs 4 and 0 hold "mat"; untouched docs fill the rest in index order.
        let hits = index.search("mat", 3);
        assert_eq!(hits.iter().map(|h| h.doc).collect::<Vec<_>>(), [4, 0, 1]);
        assert!(index.search("mat", 99).len() == 5);
        let twins = Bm25Builder::okapi()
            .build(&["x y", "z", "x y", "w", "v"])
            .unwrap();
        let hits = twins.search("x", 2);
        assert_eq!((hits[0].doc, hits[1].doc), (0, 2));
        assert_eq!(hits[0].score, hits[1].score);
    }

    #[test]
    fn negative_scores_rank_below_untouched_documents() {
        // Every term is in 2 of 3 documents, so every idf and the mean are negative; with
        // epsilon > 0 the floor stays negative and a match lowers the score below zero.
        let index = Bm25Builder::okapi().build(&["a b", "a b", "c"]).unwrap();
        let hits = index.search("a", 3);
        assert_eq!(hits[0], Hit { doc: 2, score: 0.0 });
        assert!(hits[1].score < 0.0 && hits[2].score < 0.0);
    }

    #[test]
    fn tokenizer_is_unicode_aware_and_drops_stopwords_on_request() {
        assert_eq!(
            tokenize("Eugène SCHAUS, 35,156.0", false),
            ["eugène", "schaus", "35", "156", "0"]
        );
        assert_eq!(tokenize("the Rider_of the year", true), ["rider", "year"]);
        // A Devanagari vowel sign is a combining mark, not a letter: Python splits there too.
        assert_eq!(tokenize("हिन्दी", false), ["ह", "न", "द"]);
    }

    #[test]
    fn bad_input_is_refused() {
        let empty: [&str; 0] = [];
        assert_eq!(
            Bm25Builder::okapi().build(&empty).unwrap_err(),
            Bm25Error::EmptyCorpus
        );
        assert_eq!(
            Bm25Builder::okapi().build(&["", "!!"]).unwrap_err(),
            Bm25Error::NoTokens
        );
        assert!(matches!(
            Bm25Builder::lucene().b(1.5).build(&DOCS),
            Err(Bm25Error::InvalidParameter { name: "b", .. })
        ));
    }

    #[test]
    fn batch_search_equals_single_searches() {
        let index = Bm25Builder::lucene()
            .english_stopwords(true)
            .build(&DOCS)
            .unwrap();
        let queries = ["cat", "the dog", "end of mat"];
        let batch = index.search_batch(&queries, 3);
        for (query, hits) in queries.iter().zip(&batch) {
            assert_eq!(hits, &index.search(query, 3));
        }
    }
}
