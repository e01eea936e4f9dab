//! all-MiniLM-L6-v2 against sentence-transformers: the embeddings of five sentences
//! (shared/reference/minilm-5-sentences-sentence-transformers.json) must agree to cosine ≥ 0.9999,
//! embedded one by one and as one padded batch. Needs the model (`TABLESEEK_MODELS`, else
//! `<repo>/models`) and ../shared (`TABLESEEK_SHARED`); skips with a message when either is absent.

use std::path::PathBuf;

use candle_core::Device;
use serde::Deserialize;
use tableseek::retrieve::bert::{BertEncoder, EncodeOptions};

#[derive(Deserialize)]
struct Reference {
    sentences: Vec<String>,
    embeddings: Vec<Vec<f32>>,
}

fn inputs() -> Option<(PathBuf, Reference)> {
    let model = crate::common::models_dir().join("all-MiniLM-L6-v2");
    let reference =
        crate::common::shared_dir().join("reference/minilm-5-sentences-sentence-transformers.json");
    if !model.join("model.safetensors").is_file() || !reference.is_file() {
        eprintln!(
            "skipping: need {} and {}",
            model.display(),
            reference.display()
        );
        return None;
    }
    let reference = serde_json::from_str(&std::fs::read_to_string(reference).unwrap()).unwrap();
    Some((model, reference))
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

#[test]
fn minilm_matches_sentence_transformers() {
    let Some((model, reference)) = inputs() else {
        return;
    };
    let encoder = BertEncoder::load(&model, &Device::Cpu, EncodeOptions::default()).unwrap();
    assert_eq!(encoder.dim(), 384);

    let batched = encoder.embed(&reference.sentences).unwrap();
    assert_eq!(batched.len(), 5);
    assert_eq!(batched.truncated, 0);
    for (i, (sentence, expected)) in reference
        .sentences
        .iter()
        .zip(&reference.embeddings)
        .enumerate()
    {
        let alone = encoder.embed_one(sentence).unwrap();
        let norm: f32 = alone.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "norm {norm}");
        let c_alone = cosine(&alone, expected);
        let c_batch = cosine(batched.row(i), expected);
        eprintln!("{sentence:?}: cosine alone {c_alone:.7}, batched {c_batch:.7}");
        assert!(c_alone >= 0.9999, "{sentence:?}: cosine {c_alone}");
        assert!(
            c_batch >= 0.9999,
            "{sentence:?} in a padded batch: cosine {c_batch}"
        );
    }
}

#[test]
fn long_texts_are_truncated_and_counted() {
    let Some((model, _)) = inputs() else { return };
    let options = EncodeOptions::default().max_length(16);
    let encoder = BertEncoder::load(&model, &Device::Cpu, options).unwrap();
    let long = "word ".repeat(100);
    let (ids, cut) = encoder.token_ids(&long).unwrap();
    assert!(cut);
    assert_eq!(ids.len(), 16);
    // [CLS] … [SEP] survive truncation.
    assert_eq!(ids[0], 101);
    assert_eq!(ids[15], 102);
    let embeddings = encoder.embed(&[long.as_str(), "short"]).unwrap();
    assert_eq!(embeddings.truncated, 1);
    // A truncated text embeds as its first 16 tokens would.
    let prefix = encoder.embed_one(&"word ".repeat(14)).unwrap();
    assert!(cosine(embeddings.row(0), &prefix) > 0.99999);
}

#[test]
fn rejects_a_max_length_beyond_the_position_table() {
    let Some((model, _)) = inputs() else { return };
    let err = BertEncoder::load(
        &model,
        &Device::Cpu,
        EncodeOptions::default().max_length(513),
    )
    .unwrap_err();
    assert!(err.to_string().contains("512"), "{err}");
}
