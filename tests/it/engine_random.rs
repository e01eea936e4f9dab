//! Random-init models: deterministic per seed, and runnable end to end (used for benchmarks and
//! agent-loop tests without weights).

use tableseek::engine::{Config, DeviceMap, GenerateOptions, Generator, Model};

fn tiny_config() -> Config {
    let mut cfg = Config::preset("qwen3-0.6b").unwrap();
    cfg.vocab_size = 300;
    cfg.hidden_size = 32;
    cfg.intermediate_size = 64;
    cfg.num_hidden_layers = 3;
    cfg.num_attention_heads = 4;
    cfg.num_key_value_heads = 2;
    cfg.head_dim = 8;
    cfg
}

#[test]
fn same_seed_same_weights() {
    let cfg = tiny_config();
    let prompt: Vec<u32> = (0..40).collect();
    let run = |seed: u64, devices: &DeviceMap| -> Vec<f32> {
        let model = Model::random(&cfg, seed, devices, None).unwrap();
        model
            .forward(&prompt, &mut model.new_cache())
            .unwrap()
            .to_vec1()
            .unwrap()
    };
    let cpu = DeviceMap::cpu();
    let a = run(7, &cpu);
    assert_eq!(a.len(), 300);
    assert_eq!(a, run(7, &cpu));
    assert_ne!(a, run(8, &cpu));
    // The layer split moves layers, not numbers.
    assert_eq!(
        a,
        run(7, &DeviceMap::parse("cpu,cpu,cpu", Some("1,1,1")).unwrap())
    );
}

#[test]
fn random_model_generates_with_stop_hook() {
    let model = Model::random(&tiny_config(), 1, &DeviceMap::cpu(), None).unwrap();
    let mut generator = Generator::new(model);
    let opts = GenerateOptions {
        max_new_tokens: 50,
        ..Default::default()
    };
    let out = generator
        .generate(&[1, 2, 3], &opts, |toks| toks.len() == 5)
        .unwrap();
    assert_eq!(out.tokens.len(), 5);
    assert_eq!(out.stop_reason, tableseek::engine::StopReason::Hook);
    // A mask that bans everything but token 42 forces it.
    let mut only_42 = |_: &[u32], logits: &mut [f32]| {
        for (i, l) in logits.iter_mut().enumerate() {
            if i != 42 {
                *l = f32::NEG_INFINITY;
            }
        }
    };
    let out = generator
        .generate_masked(
            &[1, 2, 3],
            &GenerateOptions {
                max_new_tokens: 3,
                ..opts
            },
            Some(&mut only_42),
            |_| false,
        )
        .unwrap();
    assert_eq!(out.tokens, vec![42, 42, 42]);
}

#[test]
fn generation_stops_when_the_context_is_full() {
    let mut cfg = tiny_config();
    cfg.max_position_embeddings = 8;
    let model = Model::random(&cfg, 3, &DeviceMap::cpu(), None).unwrap();
    let mut generator = Generator::new(model);
    let opts = GenerateOptions {
        max_new_tokens: 10,
        ..Default::default()
    };
    // Six prompt positions leave two to feed back; the token after them still comes from logits.
    let out = generator
        .generate(&[1, 2, 3, 4, 5, 6], &opts, |_| false)
        .unwrap();
    assert_eq!(out.stop_reason, tableseek::engine::StopReason::ContextFull);
    assert_eq!(out.tokens.len(), 3);
    // A prompt exactly as long as the context still yields one token.
    let out = generator
        .generate(&[1, 2, 3, 4, 5, 6, 7, 8], &opts, |_| false)
        .unwrap();
    assert_eq!(out.tokens.len(), 1);
}

#[test]
fn stop_tokens_end_generation_and_are_not_returned() {
    let model = Model::random(&tiny_config(), 5, &DeviceMap::cpu(), None).unwrap();
    let mut generator = Generator::new(model);
    let free = generator
        .generate(
            &[10, 20, 30],
            &GenerateOptions {
                max_new_tokens: 12,
                ..Default::default()
            },
            |_| false,
        )
        .unwrap();
    let stop_at = free
        .tokens
        .iter()
        .position(|&t| t == free.tokens[3])
        .unwrap();
    let opts = GenerateOptions {
        max_new_tokens: 12,
        stop_token_ids: vec![free.tokens[3]],
        ..Default::default()
    };
    let stopped = generator.generate(&[10, 20, 30], &opts, |_| false).unwrap();
    assert_eq!(stopped.tokens, free.tokens[..stop_at]);
    assert_eq!(
        stopped.stop_reason,
        tableseek::engine::StopReason::StopToken(free.tokens[3])
    );
    assert_eq!(stopped.stats.generated_tokens, stop_at);
}

/// Prefix reuse stays bitwise exact across KV buffer regrowth (256 → 512 → 1024 positions)
/// and a layer split.
#[test]
fn long_prompt_prefix_reuse_is_bitwise_exact() {
    let mut cfg = tiny_config();
    cfg.max_position_embeddings = 2048;
    let devices = DeviceMap::parse("cpu,cpu", Some("2,1")).unwrap();
    let mut model = Model::random(&cfg, 11, &devices, None).unwrap();
    model.set_prefill_chunk(64);
    let prompt: Vec<u32> = (0..700u32).map(|i| (i * 7919 + 13) % 300).collect();
    let opts = GenerateOptions {
        max_new_tokens: 8,
        ..Default::default()
    };
    let scratch_logits = model
        .forward_all(&prompt, &mut model.new_cache())
        .unwrap()
        .narrow(0, 576, 124)
        .unwrap()
        .to_vec2::<f32>()
        .unwrap();
    let mut cold = Generator::new(model.clone());
    let scratch = cold
        .generate(
            &prompt,
            &GenerateOptions {
                use_prefix_cache: false,
                ..opts.clone()
            },
            |_| false,
        )
        .unwrap();

    let mut warm = Generator::new(model.clone());
    let mut earlier = prompt[..600].to_vec();
    earlier.extend([1, 2, 3]);
    warm.generate(&earlier, &opts, |_| false).unwrap();
    let served = warm.generate(&prompt, &opts, |_| false).unwrap();
    assert_eq!(served.stats.cached_tokens, 576);
    assert_eq!(served.tokens, scratch.tokens);

    let mut restored = warm
        .prefix_cache_mut()
        .lookup(&prompt, 64)
        .unwrap()
        .unwrap();
    restored.truncate(576);
    let cached_logits = model
        .forward_all(&prompt[576..], &mut restored)
        .unwrap()
        .to_vec2::<f32>()
        .unwrap();
    assert_eq!(cached_logits, scratch_logits);
}

#[test]
fn model_spec_parsing() {
    use tableseek::engine::{EngineError, ModelSpec};
    assert_eq!(
        ModelSpec::parse("random:qwen3-0.6b:7").unwrap(),
        ModelSpec::Random {
            preset: "qwen3-0.6b".into(),
            seed: 7
        }
    );
    assert_eq!(
        ModelSpec::parse("random:llama-3.1-8b").unwrap(),
        ModelSpec::Random {
            preset: "llama-3.1-8b".into(),
            seed: 0
        }
    );
    assert!(matches!(
        ModelSpec::parse("random:gpt-j"),
        Err(EngineError::UnknownPreset(_))
    ));
    assert_eq!(
        ModelSpec::parse("models/x.gguf").unwrap(),
        ModelSpec::Path("models/x.gguf".into())
    );
}

#[test]
fn continuation_logprob_is_the_sum_of_the_continuations_log_softmax() {
    let model = Model::random(&tiny_config(), 13, &DeviceMap::cpu(), None).unwrap();
    let context: Vec<u32> = (10..30).collect();
    let continuation = [7u32, 250, 3, 3];
    let all: Vec<u32> = context.iter().chain(&continuation).copied().collect();
    // Reference: every position's logits, log-softmax by hand in f64.
    let logits: Vec<Vec<f32>> = model
        .forward_all(&all, &mut model.new_cache())
        .unwrap()
        .to_vec2()
        .unwrap();
    let expected: f64 = continuation
        .iter()
        .enumerate()
        .map(|(i, &token)| {
            let row = &logits[context.len() - 1 + i];
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
            let sum: f64 = row.iter().map(|&l| (l as f64 - max).exp()).sum();
            row[token as usize] as f64 - max - sum.ln()
        })
        .sum();
    let got = model.continuation_logprob(&context, &continuation).unwrap();
    assert!((got - expected).abs() < 1e-3, "{got} vs {expected}");
    assert!(got < 0.0);
    // Another context changes the score; an empty side is an error.
    let other: Vec<u32> = (40..60).collect();
    assert_ne!(
        model.continuation_logprob(&other, &continuation).unwrap(),
        got
    );
    assert!(model.continuation_logprob(&[], &continuation).is_err());
    assert!(model.continuation_logprob(&context, &[]).is_err());
}
