//! The inverted-index search against a plain dense oracle: score every document with the textbook
//! formula, sort everything by (score desc, index asc), take k. Small vocabularies make ties,
//! negative Okapi idf and untouched documents common.

use proptest::prelude::*;
use tableseek::retrieve::bm25::{tokenize, Bm25Builder, Bm25Variant};

const WORDS: [&str; 8] = ["the", "cat", "mat", "dog", "and", "1", "2010", "team"];

fn oracle(
    docs: &[String],
    query: &str,
    variant: Bm25Variant,
    stopwords: bool,
) -> Vec<(usize, f64)> {
    let (k1, b, epsilon) = (1.5, 0.75, 0.25);
    let tokenized: Vec<Vec<String>> = docs.iter().map(|d| tokenize(d, stopwords)).collect();
    let n = docs.len() as f64;
    let avg = tokenized.iter().map(Vec::len).sum::<usize>() as f64 / n;
    // Vocabulary in first-seen order, for Okapi's mean idf.
    let mut vocab: Vec<&String> = Vec::new();
    for token in tokenized.iter().flatten() {
        if !vocab.contains(&token) {
            vocab.push(token);
        }
    }
    let df = |t: &str| {
        tokenized
            .iter()
            .filter(|d| d.iter().any(|x| x == t))
            .count() as f64
    };
    let raw_idf = |t: &str| match variant {
        Bm25Variant::Okapi => (n - df(t) + 0.5).ln() - (df(t) + 0.5).ln(),
        Bm25Variant::Lucene => (1.0 + (n - df(t) + 0.5) / (df(t) + 0.5)).ln(),
    };
    let mean_idf = vocab.iter().map(|t| raw_idf(t)).sum::<f64>() / vocab.len() as f64;
    let idf = |t: &str| {
        let v = raw_idf(t);
        if variant == Bm25Variant::Okapi && v < 0.0 {
            epsilon * mean_idf
        } else {
            v
        }
    };
    let mut scores: Vec<(usize, f64)> = tokenized
        .iter()
        .enumerate()
        .map(|(i, doc)| {
            let dl = doc.len() as f64;
            let score = tokenize(query, stopwords)
                .iter()
                .filter(|q| vocab.contains(q))
                .fold(0.0, |sum, q| {
                    let tf = doc.iter().filter(|t| *t == q).count() as f64;
                    let norm = k1 * (1.0 - b + b * dl / avg);
                    sum + match variant {
                        Bm25Variant::Okapi => idf(q) * (tf * (k1 + 1.0) / (tf + norm)),
                        Bm25Variant::Lucene => idf(q) * (tf / (tf + norm)),
                    }
                });
            (i, score)
        })
        .collect();
    scores.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)));
    scores
}

fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(WORDS.to_vec()), 0..7).prop_map(|w| w.join(" "))
}

proptest! {
    #[test]
    fn search_equals_dense_oracle(
        docs in prop::collection::vec(text(), 1..9),
        query in text(),
        k in 0usize..10,
        lucene in any::<bool>(),
        stopwords in any::<bool>(),
    ) {
        let variant = if lucene { Bm25Variant::Lucene } else { Bm25Variant::Okapi };
        let built = Bm25Builder::new(variant).english_stopwords(stopwords).build(&docs);
        let Ok(index) = built else {
            // Only a corpus without a single token may be refused.
            prop_assert!(docs.iter().all(|d| tokenize(d, stopwords).is_empty()));
            return Ok(());
        };
        let want = oracle(&docs, &query, variant, stopwords);
        let got = index.search(&query, k);
        prop_assert_eq!(got.len(), k.min(docs.len()));
        // Same arithmetic in the same order: scores and tie order agree exactly.
        let got: Vec<(usize, f64)> = got.iter().map(|h| (h.doc, h.score)).collect();
        prop_assert_eq!(&got[..], &want[..got.len()]);
    }
}
