//! Batch invariance of the continuous-batching engine: a sequence's tokens and the bits of every
//! logits row it sees are the same whether it runs alone or among others that join and leave at
//! other steps, with grammars on some of them, a prefix shared through the cache, and a KV budget
//! that makes requests wait. Real GGUFs exercise our row-keeping kernels (Q4_1; Q5_0, Q8_0, Q4_K,
//! Q6_K); the tiny f32 Qwen3 checkpoint exercises the one-row-at-a-time fallback.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use candle_core::DType;
use tableseek::engine::{
    BatchOptions, Batcher, DeviceMap, EngineHandle, GenerateOptions, Generator, Grammar,
    GrammarCompiler, GrammarMask, LoadOptions, LogitsMask, Model, ModelSpec, QuantizedWeights,
    Request, Tokenizer,
};

use crate::common::{existing, models_dir, shared_dir, smollm2_gguf};

/// Records a hash of the bits of every logits row it sees, then applies its grammar if any.
struct Recording {
    log: Arc<Mutex<Vec<u64>>>,
    grammar: Option<GrammarMask>,
}

impl LogitsMask for Recording {
    fn apply(&mut self, generated: &[u32], logits: &mut [f32]) {
        let mut hasher = DefaultHasher::new();
        logits.iter().for_each(|v| v.to_bits().hash(&mut hasher));
        self.log.lock().unwrap().push(hasher.finish());
        if let Some(grammar) = self.grammar.as_mut() {
            grammar.apply(generated, logits);
        }
    }
}

/// What one sequence produced: its tokens and the logits hashes of every step.
#[derive(Debug, PartialEq)]
struct Trace {
    tokens: Vec<u32>,
    logits: Vec<u64>,
}

/// `n` prompts of different lengths (some past one prefill chunk, some sharing a long prefix so
/// that later ones hit the prefix cache), as token ids drawn from the vocabulary's middle.
fn prompts(n: usize, vocab: usize) -> Vec<Vec<u32>> {
    let id = |x: usize| (x % (vocab - 10)) as u32;
    let shared: Vec<u32> = (0..150).map(|i| id(1000 + i * 37 % 5000)).collect();
    (0..n)
        .map(|s| {
            let len = 5 + (s * 29) % 170;
            let own = (0..len).map(|i| id(3000 + s * 101 + i * 13));
            if s % 3 == 0 {
                shared.iter().copied().chain(own).collect()
            } else {
                own.collect()
            }
        })
        .collect()
}

fn options(s: usize) -> GenerateOptions {
    GenerateOptions {
        max_new_tokens: 6 + s % 7,
        ..Default::default()
    }
}

/// Grammar of sequence `s`: every fourth one answers under a small JSON schema.
fn grammar(s: usize, compiler: Option<&GrammarCompiler>) -> Option<GrammarMask> {
    let compiler = compiler?;
    (s % 4 == 1).then(|| {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {"answer": {"type": "string", "maxLength": 8}},
            "required": ["answer"],
            "additionalProperties": false
        });
        compiler.compile(&Grammar::JsonSchema(schema)).unwrap()
    })
}

fn alone(model: &Model, prompts: &[Vec<u32>], compiler: Option<&GrammarCompiler>) -> Vec<Trace> {
    prompts
        .iter()
        .enumerate()
        .map(|(s, prompt)| {
            // A fresh generator per prompt: alone means no prefix cache from the others either.
            let mut generator = Generator::new(model.clone());
            let log = Arc::new(Mutex::new(Vec::new()));
            let mut mask = Recording {
                log: log.clone(),
                grammar: grammar(s, compiler),
            };
            let out = generator
                .generate_masked(prompt, &options(s), Some(&mut mask), |_| false)
                .unwrap();
            let logits = log.lock().unwrap().clone();
            Trace {
                tokens: out.tokens,
                logits,
            }
        })
        .collect()
}

/// All prompts through one batcher; prompt `s` is submitted at step `arrival(s)`.
fn batched(
    model: &Model,
    prompts: &[Vec<u32>],
    compiler: Option<&GrammarCompiler>,
    batch: BatchOptions,
    arrival: impl Fn(usize) -> usize,
) -> (Vec<Trace>, usize) {
    let mut batcher = Batcher::new(Generator::new(model.clone()), batch);
    let logs: Vec<Arc<Mutex<Vec<u64>>>> = prompts
        .iter()
        .map(|_| Arc::new(Mutex::new(Vec::new())))
        .collect();
    let mut ids = vec![None; prompts.len()];
    let mut outputs = vec![None; prompts.len()];
    let mut step = 0;
    while outputs.iter().any(Option::is_none) {
        for (s, prompt) in prompts.iter().enumerate() {
            if arrival(s) == step {
                let mask = Recording {
                    log: logs[s].clone(),
                    grammar: grammar(s, compiler),
                };
                let request = Request::new(prompt.clone(), options(s)).with_mask(Box::new(mask));
                ids[s] = Some(batcher.submit(request));
            }
        }
        for done in batcher.step() {
            let s = ids.iter().position(|&id| id == Some(done.id)).unwrap();
            outputs[s] = Some(done.result.unwrap().tokens);
        }
        step += 1;
        assert!(step < 10_000, "the batcher made no progress");
    }
    let traces = outputs
        .into_iter()
        .zip(&logs)
        .map(|(tokens, log)| Trace {
            tokens: tokens.unwrap(),
            logits: log.lock().unwrap().clone(),
        })
        .collect();
    (traces, batcher.peak_sequences())
}

/// `thorough`: also the two KV-budget schedules (the slow part on a real model).
fn check_invariance(model: Model, tokenizer: Option<Tokenizer>, n: usize, thorough: bool) {
    let compiler = tokenizer.map(|t| GrammarCompiler::new(&t).unwrap());
    let prompts = prompts(n, model.vocab_size());
    let reference = alone(&model, &prompts, compiler.as_ref());
    // Staggered: a new request every step, while earlier ones prefill and decode.
    let (together, peak) = batched(
        &model,
        &prompts,
        compiler.as_ref(),
        BatchOptions {
            max_step_tokens: 256,
            ..Default::default()
        },
        |s| s,
    );
    assert!(peak >= 4, "only {peak} sequences ran at once");
    for (s, (a, b)) in reference.iter().zip(&together).enumerate() {
        assert_eq!(a, b, "sequence {s}: alone vs staggered batch");
    }
    if !thorough {
        return;
    }
    // All at once, under a KV budget that holds only a few sequences: the rest wait.
    let (tight, peak) = batched(
        &model,
        &prompts,
        compiler.as_ref(),
        BatchOptions {
            max_step_tokens: 64,
            max_sequences: 64,
            kv_budget_bytes: 1,
        },
        |_| 0,
    );
    assert_eq!(peak, 1, "a 1-byte KV budget admits one sequence at a time");
    assert_eq!(
        reference, tight,
        "alone vs one at a time under a tight budget"
    );
    let budget = model_kv_bytes(&model, 3);
    let (some, peak) = batched(
        &model,
        &prompts,
        compiler.as_ref(),
        BatchOptions {
            max_step_tokens: 512,
            max_sequences: 64,
            kv_budget_bytes: budget,
        },
        |s| s % 2,
    );
    assert!(
        (2..n).contains(&peak),
        "a budget of 3 short sequences ran {peak} at once"
    );
    assert_eq!(reference, some, "alone vs a KV budget for a few");
}

/// KV bytes of `n` sequences of up to 256 positions (the smallest buffer the cache allocates).
fn model_kv_bytes(model: &Model, n: usize) -> usize {
    let cfg = model.config();
    n * 256 * 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * 4
}

/// As `--weights auto` loads a small GGUF on the CPU: our kernels, whose rows share one pass over
/// the weights in a decoding step (where the CPU has AVX-512 VNNI; elsewhere the fallback).
fn load_fast(path: &std::path::Path) -> Model {
    let options = LoadOptions {
        quantized: QuantizedWeights::DenseWithQ8Decode,
        ..LoadOptions::default()
    };
    Model::load_with(
        &ModelSpec::Path(path.to_path_buf()),
        &DeviceMap::cpu(),
        &options,
    )
    .unwrap()
}

#[test]
fn smollm2_sequences_are_bitwise_the_same_alone_and_batched() {
    let Some(path) = existing(smollm2_gguf()) else {
        return;
    };
    let model = load_fast(&path);
    let tokenizer = tableseek::engine::load_tokenizer(&path, None).unwrap();
    check_invariance(model, Some(tokenizer), 12, true);
}

#[test]
fn qwen25_sequences_are_bitwise_the_same_alone_and_batched() {
    let Some(path) = existing(models_dir().join("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")) else {
        return;
    };
    let tokenizer = || tableseek::engine::load_tokenizer(&path, None).unwrap();
    check_invariance(load_fast(&path), Some(tokenizer()), 6, false);
    // As stored (candle's kernels, which batch rows differently): decoded row by row, equal too.
    let as_stored = Model::load(&ModelSpec::Path(path.clone()), &DeviceMap::cpu(), None).unwrap();
    check_invariance(as_stored, Some(tokenizer()), 4, false);
}

fn tiny_qwen3() -> Option<PathBuf> {
    existing(shared_dir().join("reference/tiny-models/tiny-qwen3"))
}

#[test]
fn dense_f32_sequences_are_bitwise_the_same_alone_and_batched() {
    let Some(dir) = tiny_qwen3() else {
        return;
    };
    let mut model =
        Model::load(&ModelSpec::Path(dir), &DeviceMap::cpu(), Some(DType::F32)).unwrap();
    // Small chunks, so the tiny model's short prompts cross several boundaries.
    model.set_prefill_chunk(16);
    check_invariance(model, None, 16, true);
}

#[test]
fn engine_handle_serves_threads_with_the_tokens_they_get_alone() {
    let Some(dir) = tiny_qwen3() else {
        return;
    };
    let model = Model::load(&ModelSpec::Path(dir), &DeviceMap::cpu(), Some(DType::F32)).unwrap();
    let prompts = prompts(12, model.vocab_size());
    let reference = alone(&model, &prompts, None);
    let (handle, thread) =
        EngineHandle::spawn(Generator::new(model), BatchOptions::default()).unwrap();
    let traces: Vec<Trace> = std::thread::scope(|scope| {
        let workers: Vec<_> = prompts
            .iter()
            .enumerate()
            .map(|(s, prompt)| {
                let handle = handle.clone();
                scope.spawn(move || {
                    let log = Arc::new(Mutex::new(Vec::new()));
                    let mask = Recording {
                        log: log.clone(),
                        grammar: None,
                    };
                    let request =
                        Request::new(prompt.clone(), options(s)).with_mask(Box::new(mask));
                    let done = handle.generate(request).unwrap();
                    let logits = log.lock().unwrap().clone();
                    Trace {
                        tokens: done.result.unwrap().tokens,
                        logits,
                    }
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    assert_eq!(reference, traces);
    drop(handle);
    let batcher = thread.join().unwrap();
    assert!(batcher.is_idle());
}

#[test]
fn batcher_reports_bad_requests_and_keeps_serving_the_rest() {
    let Some(dir) = tiny_qwen3() else {
        return;
    };
    let model = Model::load(&ModelSpec::Path(dir), &DeviceMap::cpu(), Some(DType::F32)).unwrap();
    let ctx = model.context_len();
    let vocab = model.vocab_size() as u32;
    let mut batcher = Batcher::new(Generator::new(model), BatchOptions::default());
    let empty = batcher.submit(Request::new(Vec::new(), GenerateOptions::default()));
    let too_long = batcher.submit(Request::new(vec![5; ctx + 1], GenerateOptions::default()));
    let bad_id = batcher.submit(Request::new(vec![5, vocab + 7], GenerateOptions::default()));
    let good = batcher.submit(Request::new(
        vec![5, 6, 7],
        GenerateOptions {
            max_new_tokens: 3,
            ..Default::default()
        },
    ));
    let done = batcher.run_to_completion();
    let result = |id| &done.iter().find(|c| c.id == id).unwrap().result;
    let message = |id| result(id).as_ref().err().map(|e| e.to_string());
    assert!(message(empty).unwrap().contains("empty prompt"));
    assert!(message(too_long).unwrap().contains("context window"));
    assert!(message(bad_id).unwrap().contains("outside the vocabulary"));
    assert_eq!(result(good).as_ref().unwrap().tokens.len(), 3);
}
