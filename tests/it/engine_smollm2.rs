//! The real model: SmolLM2-135M-Instruct Q4_1 (Llama architecture) must greedy-decode exactly the
//! tokens llama.cpp produced (`../shared/reference/smollm2-greedy-llamacpp.json`).
//! The GGUF is looked up at `models/smollm2-135m-instruct-q4_1.gguf` or `$TABLESEEK_SMOLLM2_GGUF`.

use tableseek::engine::{
    DeviceMap, GenerateOptions, Generator, LoadOptions, Model, ModelSpec, QuantizedWeights,
    StopReason,
};

use crate::common::{shared_dir as shared, smollm2_gguf as gguf};

#[test]
fn smollm2_q4_1_greedy_matches_llama_cpp() {
    let (model_path, reference) = (
        gguf(),
        shared().join("reference/smollm2-greedy-llamacpp.json"),
    );
    if !model_path.exists() || !reference.exists() {
        eprintln!(
            "skipping: {} or {} not found",
            model_path.display(),
            reference.display()
        );
        return;
    }
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(reference).unwrap()).unwrap();
    let as_ids = |key: &str| -> Vec<u32> {
        reference[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect()
    };
    let (prompt, expected) = (as_ids("prompt_token_ids"), as_ids("generated_token_ids"));
    let eos = reference["eos_id"].as_u64().unwrap() as u32;

    // The fastest CPU setting (dense prefill, Q8_0 decode) still reproduces llama.cpp's tokens.
    let load = LoadOptions {
        quantized: QuantizedWeights::DenseWithQ8Decode,
        ..Default::default()
    };
    let model = Model::load_with(
        &ModelSpec::Path(model_path.clone()),
        &DeviceMap::cpu(),
        &load,
    )
    .unwrap();
    assert_eq!(model.config().eos_token_ids, vec![eos]);
    let mut generator = Generator::new(model);
    let opts = GenerateOptions {
        max_new_tokens: 64,
        stop_token_ids: vec![eos],
        ..Default::default()
    };
    let out = generator.generate(&prompt, &opts, |_| false).unwrap();
    // llama.cpp's list ends with the EOS it stopped on; ours reports it as the stop reason.
    assert_eq!(out.stop_reason, StopReason::StopToken(eos));
    assert_eq!(out.tokens, expected[..expected.len() - 1]);
    eprintln!("stats: {:?}", out.stats);

    // Same prompt again: served from the prefix cache, same tokens.
    let again = generator.generate(&prompt, &opts, |_| false).unwrap();
    assert_eq!(again.tokens, out.tokens);
    assert!(again.stats.cached_tokens > 0 || prompt.len() <= generator.model().prefill_chunk());

    // The quantized kernels (Q4_1 x Q8_1, as llama.cpp computes): same tokens, first 8 only
    // because candle's scalar Q4_1 kernel is slow.
    let model = Model::load(&ModelSpec::Path(model_path), &DeviceMap::cpu(), None).unwrap();
    let mut generator = Generator::new(model);
    let short = GenerateOptions {
        max_new_tokens: 8,
        ..opts
    };
    let out = generator.generate(&prompt, &short, |_| false).unwrap();
    assert_eq!(out.tokens, expected[..8]);
}

/// A chat reply that falls into a cycle ends there instead of running to the token cap, and only
/// chat calls (not raw decoding) stop so.
#[test]
fn a_looping_chat_reply_ends_at_the_loop() {
    use tableseek::engine::{ChatMessage, ChatModel, ChatModelOptions, ChatOptions, LoopGuard};
    let model_path = gguf();
    if !model_path.exists() {
        eprintln!("skipping: {} not found", model_path.display());
        return;
    }
    let mut model =
        ChatModel::load(&ModelSpec::Path(model_path), &ChatModelOptions::default()).unwrap();
    let messages = [ChatMessage::user(
        "Repeat the sentence 'The answer is:' one hundred times.",
    )];
    let guarded = ChatOptions {
        max_new_tokens: 200,
        ..ChatOptions::default()
    };
    let output = model.chat(&messages, &guarded).unwrap();
    let StopReason::Loop { period } = output.stop_reason else {
        panic!("expected a loop stop, got {:?}", output.stop_reason);
    };
    let guard = LoopGuard::default();
    let copies = guard.min_repeats.max(guard.min_span.div_ceil(period));
    assert!(output.stats.generated_tokens < 200);
    assert!(output.stats.generated_tokens >= period * copies);
    assert!(output.text.matches("The answer is:").count() >= copies);

    let unguarded = ChatOptions {
        max_new_tokens: 100,
        loop_guard: None,
        ..ChatOptions::default()
    };
    let output = model.chat(&messages, &unguarded).unwrap();
    assert_eq!(output.stop_reason, StopReason::MaxNewTokens);
    assert_eq!(output.stats.generated_tokens, 100);
}
