//! T-RAG's three views of a table: its text for the encoder (semantic), six shape counts
//! (structural), and TF-IDF over the corpus (lexical).

use std::collections::BTreeMap;

use crate::corpus::Table;
use crate::retrieve::bm25::tokenize;

use super::kmeans::Rows;

/// Rows of data shown with the header in the default linearization.
pub const LINEARIZED_ROWS: usize = 3;

/// What of a table the index reads. Never its caption, title or file name (the project's rule:
/// storage metadata must not find the table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TragText {
    /// The header and the first [`LINEARIZED_ROWS`] rows (our default: no captions to lean on).
    #[default]
    HeaderAndRows,
    /// The header only (the paper's schema linearization, without its caption).
    Schema,
}

/// `Headers: a | b | c` and, unless `Schema`, one `Row: ...` line per shown row.
pub fn linearize(table: &Table, text: TragText) -> String {
    let mut out = format!("Headers: {}", table.header.join(" | "));
    if text == TragText::HeaderAndRows {
        for row in table.rows.iter().take(LINEARIZED_ROWS) {
            out.push_str("\nRow: ");
            out.push_str(&row.join(" | "));
        }
    }
    out
}

/// Our stand-in for the code's spaCy counts (no spaCy offline): tokens, mean token length, and
/// numeric, capitalised, alphabetic and punctuation counts, z-scored per column over the corpus.
pub fn structural(texts: &[String]) -> Rows {
    const DIM: usize = 6;
    let mut data: Vec<f64> = Vec::with_capacity(texts.len() * DIM);
    for text in texts {
        let tokens: Vec<&str> = text.split_whitespace().collect();
        let words: Vec<&str> = tokens
            .iter()
            .map(|t| t.trim_matches(|c: char| !c.is_alphanumeric()))
            .filter(|t| !t.is_empty())
            .collect();
        let mean_len = if words.is_empty() {
            0.0
        } else {
            words.iter().map(|w| w.chars().count()).sum::<usize>() as f64 / words.len() as f64
        };
        let count = |f: fn(&str) -> bool| words.iter().filter(|w| f(w)).count() as f64;
        data.extend([
            tokens.len() as f64,
            mean_len,
            count(|w| {
                w.chars()
                    .all(|c| c.is_ascii_digit() || c == '.' || c == ',')
            }),
            count(|w| w.chars().next().is_some_and(char::is_uppercase)),
            count(|w| w.chars().all(char::is_alphabetic)),
            text.chars().filter(|c| c.is_ascii_punctuation()).count() as f64,
        ]);
    }
    for column in 0..DIM {
        let values: Vec<f64> = data.iter().skip(column).step_by(DIM).copied().collect();
        let n = values.len().max(1) as f64;
        let mean = values.iter().sum::<f64>() / n;
        let sd = (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt();
        for value in data.iter_mut().skip(column).step_by(DIM) {
            *value = if sd > 0.0 { (*value - mean) / sd } else { 0.0 };
        }
    }
    Rows::Dense {
        data: data.into_iter().map(|v| v as f32).collect(),
        dim: DIM,
    }
}

/// sklearn's `TfidfVectorizer` defaults on our tokens: raw counts, smooth idf
/// `ln((1 + n) / (1 + df)) + 1`, rows L2-normalised; columns in word order.
pub fn tf_idf(texts: &[String]) -> Rows {
    let documents: Vec<BTreeMap<String, u32>> = texts
        .iter()
        .map(|text| {
            let mut counts = BTreeMap::new();
            for token in tokenize(text, false) {
                *counts.entry(token).or_insert(0) += 1;
            }
            counts
        })
        .collect();
    let mut df: BTreeMap<&str, u32> = BTreeMap::new();
    for counts in &documents {
        for word in counts.keys() {
            *df.entry(word.as_str()).or_insert(0) += 1;
        }
    }
    let column: BTreeMap<&str, u32> = df.keys().enumerate().map(|(i, w)| (*w, i as u32)).collect();
    let n = documents.len() as f64;
    let rows = documents
        .iter()
        .map(|counts| {
            let mut row: Vec<(u32, f32)> = counts
                .iter()
                .map(|(word, &tf)| {
                    let idf = ((1.0 + n) / (1.0 + f64::from(df[word.as_str()]))).ln() + 1.0;
                    (column[word.as_str()], (f64::from(tf) * idf) as f32)
                })
                .collect();
            let norm = row.iter().map(|(_, v)| v * v).sum::<f32>().sqrt();
            if norm > 0.0 {
                row.iter_mut().for_each(|(_, v)| *v /= norm);
            }
            row
        })
        .collect();
    Rows::Sparse {
        rows,
        dim: column.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::corpus::{SourceFormat, TableMeta};

    #[test]
    fn linearization_never_shows_the_caption_or_the_id() {
        let table = Table {
            id: "secret/file.csv".into(),
            source_format: SourceFormat::Csv,
            header: vec!["city".into(), "pop".into()],
            rows: (0..5)
                .map(|i| vec![format!("c{i}"), i.to_string()])
                .collect(),
            meta: TableMeta {
                caption: Some("Hidden caption".into()),
                ..TableMeta::default()
            },
        };
        let text = linearize(&table, TragText::HeaderAndRows);
        assert_eq!(
            text,
            "Headers: city | pop\nRow: c0 | 0\nRow: c1 | 1\nRow: c2 | 2"
        );
        assert_eq!(linearize(&table, TragText::Schema), "Headers: city | pop");
    }

    #[test]
    fn tf_idf_rows_are_unit_length_and_rare_words_weigh_more() {
        let texts = [
            "apple banana".to_string(),
            "apple cherry".to_string(),
            "apple".to_string(),
        ];
        let Rows::Sparse { rows, dim } = tf_idf(&texts) else {
            unreachable!()
        };
        assert_eq!(dim, 3);
        for row in &rows {
            let norm: f32 = row.iter().map(|(_, v)| v * v).sum();
            assert!((norm - 1.0).abs() < 1e-6);
        }
        // Row 0: apple (in all three) weighs less than banana (in one).
        assert!(rows[0][0].1 < rows[0][1].1);
        let structural = structural(&texts);
        assert_eq!(structural.len(), 3);
    }
}
