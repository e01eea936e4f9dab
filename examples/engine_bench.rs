//! CPU speed of a model: prompt processing of N tokens from an empty cache and greedy-free decode of
//! M tokens (one forward per token, fixed ids, like llama-bench), printed as one JSON line.
//!
//! `cargo run --release --example engine_bench -- MODEL [PP_LIST] [TG] [WEIGHTS] [THREADS] [CHUNK]`
//! MODEL is a GGUF file, an HF checkpoint directory, or `random:PRESET` (e.g. `random:qwen3-0.6b`);
//! PP_LIST is comma-separated (default `128,512`), TG defaults to 128, WEIGHTS is
//! `as-stored|dense|dense-q8` (default dense-q8, what the CLI's `auto` picks for small GGUF files on
//! CPU), CHUNK the prefill chunk (default the engine's). `scripts/bench-engine.sh` runs this side by
//! side with llama.cpp.
use std::time::Instant;

use anyhow::{bail, Context};
use tableseek::engine::{DeviceMap, LoadOptions, Model, ModelSpec, QuantizedWeights};

fn main() -> anyhow::Result<()> {
    // As the CLI runs: freed buffers stay in the process for reuse.
    tableseek::keep_freed_memory();
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        bail!("usage: engine_bench MODEL [PP_LIST] [TG] [WEIGHTS] [THREADS] [CHUNK]");
    };
    let pps: Vec<usize> = args
        .get(2)
        .map(String::as_str)
        .unwrap_or("128,512")
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .context("PP_LIST")?;
    let tg: usize = args.get(3).map(|s| s.parse()).transpose()?.unwrap_or(128);
    let quantized = match args.get(4).map(String::as_str) {
        None | Some("dense-q8") => QuantizedWeights::DenseWithQ8Decode,
        Some("dense") => QuantizedWeights::Dense,
        Some("as-stored") => QuantizedWeights::AsStored,
        Some(other) => bail!("unknown weights mode {other}"),
    };
    let prefill_chunk: Option<usize> = args.get(6).map(|s| s.parse()).transpose()?;
    let threads: usize = match args.get(5) {
        Some(threads) => threads.parse()?,
        None => candle_core::utils::get_num_threads(),
    };
    // As the CLI does: with neither variable set, candle re-reads /proc/cpuinfo on every matmul.
    std::env::set_var("RAYON_NUM_THREADS", threads.to_string());
    std::env::set_var("CANDLE_NUM_THREADS", threads.to_string());
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global()?;
    let opts = LoadOptions {
        quantized,
        prefill_chunk,
        ..Default::default()
    };
    let spec = ModelSpec::parse(path)?;
    let started = Instant::now();
    let model = Model::load_with(&spec, &DeviceMap::cpu(), &opts)?;
    let load_s = started.elapsed().as_secs_f64();
    let tokens = |n: usize| -> Vec<u32> { (0..n as u32).map(|i| 100 + (i * 37) % 5000).collect() };

    let mut out = serde_json::Map::new();
    out.insert("impl".into(), "tableseek".into());
    out.insert("load_s".into(), load_s.into());
    for &n in &pps {
        // Warm-up outside the timing (first-touch of weights and buffers), as on the llama.cpp side.
        model.forward(&tokens(1), &mut model.new_cache())?;
        let mut cache = model.new_cache();
        let started = Instant::now();
        model.forward(&tokens(n), &mut cache)?.to_vec1::<f32>()?;
        out.insert(
            format!("pp{n}"),
            (n as f64 / started.elapsed().as_secs_f64()).into(),
        );
    }
    if tg > 0 {
        let mut cache = model.new_cache();
        model.forward(&tokens(1), &mut cache)?;
        let started = Instant::now();
        for token in tokens(tg) {
            // Reading the logits back is part of every real decode step.
            model.forward(&[token], &mut cache)?.to_vec1::<f32>()?;
        }
        out.insert(
            format!("tg{tg}"),
            (tg as f64 / started.elapsed().as_secs_f64()).into(),
        );
    }
    out.insert("chunk".into(), model.prefill_chunk().into());
    out.insert(
        "threads".into(),
        candle_core::utils::get_num_threads().into(),
    );
    println!("{}", serde_json::Value::Object(out));
    Ok(())
}
