//! Qwen3-Embedding and Qwen3-Reranker parity with Hugging Face transformers on the tiny random
//! Qwen3 checkpoint (`tests/fixtures/qwen3_retrieval.json`, written by
//! `tests/fixtures/make_qwen3_retrieval.py`): token ids, pooled vectors and p(yes) within 1e-4,
//! truncation, Matryoshka width, and prefix-cache reuse across documents. Needs ../shared
//! (`TABLESEEK_SHARED`); skips with a message when it is absent.

use std::path::PathBuf;

use serde::Deserialize;
use tableseek::engine::{
    load_tokenizer, DeviceMap, LoadOptions, Model, ModelSpec, QuantizedWeights, Tokenizer,
};
use tableseek::retrieve::llm_embed::{LlmEmbedOptions, LlmEncoder};
use tableseek::retrieve::rerank::{RerankBatching, RerankError, RerankOptions, Reranker};

#[derive(Deserialize)]
struct Fixture {
    embed: EmbedFixture,
    rerank: RerankFixture,
}

#[derive(Deserialize)]
struct EmbedFixture {
    task: String,
    end_id: u32,
    documents: Vec<String>,
    document_ids: Vec<Vec<u32>>,
    document_embeddings: Vec<Vec<f32>>,
    document_embeddings_dim32: Vec<Vec<f32>>,
    queries: Vec<String>,
    query_ids: Vec<Vec<u32>>,
    query_embeddings: Vec<Vec<f32>>,
}

#[derive(Deserialize)]
struct RerankFixture {
    instruction: String,
    yes_id: u32,
    no_id: u32,
    max_length: usize,
    pairs: Vec<Pair>,
}

#[derive(Deserialize)]
struct Pair {
    query: String,
    document: String,
    input_ids: Vec<u32>,
    truncated: bool,
    p_yes: f64,
}

fn tiny_dir() -> Option<PathBuf> {
    let dir = crate::common::shared_dir().join("reference/tiny-models/tiny-qwen3");
    if !dir.join("model.safetensors").is_file() {
        eprintln!("skipping: {} not found", dir.display());
        return None;
    }
    Some(dir)
}

fn fixture() -> Fixture {
    let path = crate::common::fixtures_dir().join("qwen3_retrieval.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn tiny() -> Option<(Model, Tokenizer)> {
    let dir = tiny_dir()?;
    let model = Model::load(&ModelSpec::Path(dir.clone()), &DeviceMap::cpu(), None).unwrap();
    Some((model, load_tokenizer(&dir, None).unwrap()))
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn encoder(options: LlmEmbedOptions) -> Option<LlmEncoder> {
    let (model, tokenizer) = tiny()?;
    Some(LlmEncoder::new(model, tokenizer, "tiny".into(), options).unwrap())
}

#[test]
fn embeddings_match_transformers() {
    let fx = fixture().embed;
    // Batches of two, so rows are padded differently from the reference's single batch.
    let Some(enc) = encoder(LlmEmbedOptions {
        task: fx.task.clone(),
        batch_size: 2,
        ..LlmEmbedOptions::default()
    }) else {
        return;
    };
    assert_eq!(enc.end_id(), fx.end_id);
    for (text, ids) in fx.documents.iter().zip(&fx.document_ids) {
        assert_eq!(
            &enc.token_ids(text).unwrap(),
            &(ids.clone(), false),
            "{text:?}"
        );
    }
    let docs = enc.embed_documents(&fx.documents).unwrap();
    assert_eq!((docs.len(), docs.dim, docs.truncated), (5, 64, 0));
    for (i, expected) in fx.document_embeddings.iter().enumerate() {
        let diff = max_diff(docs.row(i), expected);
        assert!(diff <= 1e-4, "document {i}: {diff}");
    }
    for ((query, ids), expected) in fx
        .queries
        .iter()
        .zip(&fx.query_ids)
        .zip(&fx.query_embeddings)
    {
        let text = enc.query_text(query);
        assert_eq!(enc.token_ids(&text).unwrap().0, *ids);
        let diff = max_diff(&enc.embed_query(query).unwrap(), expected);
        assert!(diff <= 1e-4, "query {query:?}: {diff}");
    }
}

#[test]
fn matryoshka_width_and_truncation() {
    let fx = fixture().embed;
    let Some(enc) = encoder(LlmEmbedOptions {
        dim: Some(32),
        ..LlmEmbedOptions::default()
    }) else {
        return;
    };
    let docs = enc.embed_documents(&fx.documents).unwrap();
    assert_eq!(docs.dim, 32);
    for (i, expected) in fx.document_embeddings_dim32.iter().enumerate() {
        let diff = max_diff(docs.row(i), expected);
        assert!(diff <= 1e-4, "document {i}: {diff}");
        let norm: f32 = docs.row(i).iter().map(|x| x * x).sum();
        assert!((norm - 1.0).abs() < 1e-5);
    }

    let Some(short) = encoder(LlmEmbedOptions {
        max_length: 10,
        ..LlmEmbedOptions::default()
    }) else {
        return;
    };
    let (ids, cut) = short.token_ids(&fx.documents[0]).unwrap();
    assert!(cut);
    assert_eq!(ids.len(), 10);
    assert_eq!(ids[..9], fx.document_ids[0][..9]);
    assert_eq!(ids[9], fx.end_id, "the pooled token survives truncation");
    // Four of the five documents are longer than 10 tokens; "x" is not.
    assert_eq!(short.embed_documents(&fx.documents).unwrap().truncated, 4);
    // The window caps the option: no text under it is cut.
    let Some(wide) = encoder(LlmEmbedOptions::default()) else {
        return;
    };
    assert_eq!(wide.options().max_length, 512);
    assert!(LlmEncoder::new(
        tiny().unwrap().0,
        tiny().unwrap().1,
        "tiny".into(),
        LlmEmbedOptions {
            dim: Some(65),
            ..LlmEmbedOptions::default()
        }
    )
    .is_err());
}

fn reranker(fx: &RerankFixture) -> Option<Reranker> {
    let (model, tokenizer) = tiny()?;
    let options = RerankOptions {
        instruction: fx.instruction.clone(),
        max_length: fx.max_length,
        yes_no_ids: Some((fx.yes_id, fx.no_id)),
        batching: RerankBatching::SharedPrefix,
    };
    Some(Reranker::new(model, tokenizer, options).unwrap())
}

/// The accelerator's mode, run on the CPU: every document of a query in one left-padded forward,
/// scores as transformers' and as the shared-prefix loop's up to rounding.
#[test]
fn reranker_scores_a_query_as_one_padded_batch() {
    let fx = fixture().rerank;
    let Some(mut sequential) = reranker(&fx) else {
        return;
    };
    let (model, tokenizer) = tiny().unwrap();
    let options = RerankOptions {
        batching: RerankBatching::Padded,
        ..sequential.options().clone()
    };
    let mut padded = Reranker::new(model, tokenizer, options).unwrap();
    let query = &fx.pairs[0].query;
    let pairs: Vec<&Pair> = fx.pairs.iter().filter(|p| &p.query == query).collect();
    let docs: Vec<&str> = pairs.iter().map(|p| p.document.as_str()).collect();
    let one = padded.score(query, &docs).unwrap();
    let loop_ = sequential.score(query, &docs).unwrap();
    assert_eq!(one.calls, 1, "one forward for the whole group");
    assert_eq!(one.truncated, loop_.truncated);
    assert_eq!(one.reused_tokens, 0);
    let total: usize = pairs.iter().map(|p| p.input_ids.len()).sum();
    assert_eq!(one.computed_tokens, total);
    for ((pair, a), b) in pairs.iter().zip(&one.scores).zip(&loop_.scores) {
        assert!((a - pair.p_yes).abs() <= 1e-4, "{a} vs {}", pair.p_yes);
        assert!((a - b).abs() <= 1e-4, "{a} vs {b}");
    }
    assert!(padded.score(query, &[]).unwrap().scores.is_empty());
}

#[test]
fn reranker_matches_transformers_with_a_shared_prefix() {
    let fx = fixture().rerank;
    let Some(mut rr) = reranker(&fx) else { return };
    for pair in &fx.pairs {
        let (ids, cut) = rr.prompt_ids(&pair.query, &pair.document).unwrap();
        assert_eq!(ids, pair.input_ids, "{:?}", pair.document);
        assert_eq!(cut, pair.truncated);
    }
    // Both queries, one call each: the prefix up to `<Document>:` is computed once per query.
    for query in [
        "What is the capital of Australia?",
        "essendon scored more points than carlton",
    ] {
        let pairs: Vec<&Pair> = fx.pairs.iter().filter(|p| p.query == query).collect();
        let docs: Vec<&str> = pairs.iter().map(|p| p.document.as_str()).collect();
        let out = rr.score(query, &docs).unwrap();
        assert_eq!(out.calls, docs.len());
        assert_eq!(out.truncated, 1);
        // Every document after the first reuses the whole query prefix: at least the ids all
        // of this query's prompts start with.
        let common = pairs[0]
            .input_ids
            .iter()
            .enumerate()
            .take_while(|&(i, id)| pairs.iter().all(|p| p.input_ids[i] == *id))
            .count();
        assert!(common > 100, "{common}");
        assert!(out.reused_tokens >= (docs.len() - 1) * common, "{out:?}");
        let total: usize = pairs.iter().map(|p| p.input_ids.len()).sum();
        assert_eq!(out.reused_tokens + out.computed_tokens, total);
        for (pair, score) in pairs.iter().zip(&out.scores) {
            assert!(
                (score - pair.p_yes).abs() <= 1e-4,
                "{:?}: {score} vs {}",
                pair.document,
                pair.p_yes
            );
        }
    }
}

#[test]
fn a_document_scores_the_same_alone_or_after_others() {
    let fx = fixture().rerank;
    let Some(mut rr) = reranker(&fx) else { return };
    let query = &fx.pairs[0].query;
    let docs: Vec<&str> = fx.pairs[..3].iter().map(|p| p.document.as_str()).collect();
    let together = rr.score(query, &docs).unwrap().scores;
    let Some(mut fresh) = reranker(&fx) else {
        return;
    };
    let alone = fresh.score(query, &docs[2..]).unwrap().scores;
    assert!(
        (together[2] - alone[0]).abs() < 1e-6,
        "{together:?} {alone:?}"
    );
    // The system prefix kept from the previous query is reused by the next one.
    let again = rr.score(query, &docs[2..]).unwrap();
    assert!(again.reused_tokens > 0);
    assert!((again.scores[0] - alone[0]).abs() < 1e-6);
}

#[test]
fn reranker_needs_yes_and_no_tokens() {
    let Some((model, tokenizer)) = tiny() else {
        return;
    };
    // The tiny vocabulary spells "yes" and "no" with several tokens.
    let err = Reranker::new(model, tokenizer, RerankOptions::default()).unwrap_err();
    assert!(
        matches!(err, RerankError::NoToken(ref w) if w == "yes"),
        "{err}"
    );
}

/// The head rows of a block-quantized model come from its blocks: the same values as the rows
/// of the matrix dequantized whole at load.
#[test]
fn quantized_head_rows_equal_dense_rows() {
    let Some(dir) = tiny_dir() else { return };
    let gguf = ModelSpec::Path(dir.join("tiny-qwen3-q8_0.gguf"));
    let load = |quantized| {
        let options = LoadOptions {
            quantized,
            ..LoadOptions::default()
        };
        Model::load_with(&gguf, &DeviceMap::cpu(), &options).unwrap()
    };
    let rows = |model: &Model| -> Vec<Vec<f32>> {
        model.head_rows(&[11, 10, 500]).unwrap().to_vec2().unwrap()
    };
    let stored = rows(&load(QuantizedWeights::AsStored));
    let dense = rows(&load(QuantizedWeights::Dense));
    assert_eq!(stored, dense);
    assert!(load(QuantizedWeights::AsStored).head_rows(&[512]).is_err());
}

/// The pipeline's one rule for a reranker that fails (here: a maximum length its prompt cannot
/// fit): the query keeps the dense order, with a warning, in `retrieve` and `eval` alike.
#[test]
fn a_failing_reranker_keeps_the_dense_order_with_a_warning() {
    use tableseek::retrieve::dense::DenseIndex;
    use tableseek::retrieve::pipeline::{Ranker, Rerank};
    let Some(enc) = encoder(LlmEmbedOptions::default()) else {
        return;
    };
    let docs = [
        "| year | team |\n| 1998 | red |",
        "a recipe for bread",
        "rivers of europe",
    ];
    let index = DenseIndex::build(&enc, &docs).unwrap();
    let (model, tokenizer) = tiny().unwrap();
    let options = RerankOptions {
        max_length: 8,
        yes_no_ids: Some((11, 10)),
        ..RerankOptions::default()
    };
    let mut reranker = Reranker::new(model, tokenizer, options).unwrap();
    let lock = std::sync::Mutex::new(&mut reranker);
    let document = |i: usize| docs[i].to_string();
    let query = "which team won in 1998";
    let plain = Ranker::Dense {
        encoder: &enc,
        index: &index,
        rerank: None,
    }
    .rank(query, 3, &document)
    .unwrap();
    let reranked = Ranker::Dense {
        encoder: &enc,
        index: &index,
        rerank: Some(Rerank {
            reranker: &lock,
            depth: 3,
        }),
    }
    .rank(query, 3, &document)
    .unwrap();
    assert_eq!(reranked.hits, plain.hits);
    assert_eq!(reranked.rerank_calls, 0);
    assert_eq!(reranked.warnings.len(), 1);
    assert!(
        reranked.warnings[0].contains("rerank failed")
            && reranked.warnings[0].contains("dense order kept"),
        "{:?}",
        reranked.warnings
    );
    assert!(plain.warnings.is_empty());
}
