//! The real model: SmolLM2-135M-Instruct Q4_1 (Llama architecture) must greedy-decode exactly the
//! tokens llama.cpp produced (`../shared/reference/smollm2-greedy-llamacpp.json`).
//! The GGUF is looked up at `models/smollm2-135m-instruct-q4_1.gguf` or `$TABLESEEK_SMOLLM2_GGUF`.

use tableseek::engine::{
    DeviceMap, GenerateOptions, Generator, LoadOptions, Model, ModelSpec, QuantizedWeights,
    StopReason,
};

use crate::common::{shared_dir as shared, smollm2_chat, smollm2_gguf as gguf};

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
    use tableseek::engine::{ChatMessage, ChatOptions, LoopGuard};
    let Some(mut model) = smollm2_chat() else {
        return;
    };
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

/// Spider's world_1 city table cut at 16,000 characters made QA prompts of 9,621–14,285 tokens
/// against SmolLM2's 8,192: the agent must measure with the real tokenizer and cut to fit.
#[test]
fn number_heavy_tables_are_cut_to_the_real_context_window() {
    use tableseek::agent::prompts::{baseline_qa, ShownTable};
    use tableseek::agent::{fit_tables, EngineLlm, Llm, TaskType};

    let Some(mut model) = smollm2_chat() else {
        return;
    };
    let mut llm = EngineLlm::new(&mut model);
    let rows: String = (0..2000)
        .map(|i| format!("\n{i}|Kabul{i}|AFG|Kabol|{}", 1_780_000 + 37 * i))
        .collect();
    let table = |id: &str| ShownTable {
        id: id.into(),
        text: format!("ID|Name|CountryCode|District|Population{rows}"),
        score: None,
    };
    let query = "What is the population of Kabul1999?";
    let build = |shown: &[ShownTable]| baseline_qa(TaskType::Tableqa, query, shown);
    let mut shown = vec![table("T0"), table("T1")];
    let before = llm.measure(&build(&shown), 1024).unwrap();
    assert_eq!(before.limit, 8192 - 1024);
    assert!(before.tokens > 2 * before.limit, "{before:?}");

    assert_eq!(fit_tables(&mut llm, 1024, &mut shown, build), 2);
    let after = llm.measure(&build(&shown), 1024).unwrap();
    assert!(after.fits(), "{after:?}");
    // The cut keeps most of the room, and both tables share it.
    assert!(after.tokens * 10 >= after.limit * 9, "{after:?}");
    let (a, b) = (shown[0].text.lines().count(), shown[1].text.lines().count());
    assert!(a.abs_diff(b) <= 2 && a > 100, "{a} and {b} lines");
    assert!(shown[0].text.ends_with("more lines not shown]\n"));
}
