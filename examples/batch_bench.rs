//! Aggregate decoding speed with several sequences per step, the way llama.cpp's batched-bench
//! measures it: each of NPL sequences gets its own PP-token prompt, then TG decoding steps feed one
//! fixed token per sequence and read every sequence's logits back; S_TG = NPL · TG / time. Prints
//! one JSON line with `tg_npl<N>` for each N.
//!
//! `cargo run --release --example batch_bench -- MODEL [NPL_LIST] [PP] [TG] [THREADS] [DEVICE]`
//! (defaults `1,4,8,16`, 128, 32, all cores, `cpu`; MODEL may be `random:qwen3-4b`).
//! `scripts/bench-batch.sh` runs it side by side with llama.cpp (`scripts/llamacpp_batched.py`);
//! `scripts/gpu-check.sh` runs it on CUDA.
//!
//! Also printed: prefill tokens/s (`pp_tps`, the first prompt), the bytes of weights one decoding
//! step reads (`weight_bytes`: the weights as loaded, from the engine's memory plan), and the
//! device's copy bandwidth (`copy_gbps`: a 1 GiB buffer copied on the
//! device, read plus write), so a decode rate can be put against the bandwidth limit
//! `copy_gbps / weight_bytes`.
use std::time::Instant;

use anyhow::{bail, Context};
use tableseek::engine::plan::{MemoryPlan, ModelFacts};
use tableseek::engine::{DeviceMap, KvCache, LoadOptions, Model, ModelSpec, QuantizedWeights};

fn main() -> anyhow::Result<()> {
    tableseek::keep_freed_memory();
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        bail!("usage: batch_bench MODEL [NPL_LIST] [PP] [TG] [THREADS] [DEVICE]");
    };
    let npls: Vec<usize> = args
        .get(2)
        .map(String::as_str)
        .unwrap_or("1,4,8,16")
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .context("NPL_LIST")?;
    let pp: usize = args.get(3).map(|s| s.parse()).transpose()?.unwrap_or(128);
    let tg: usize = args.get(4).map(|s| s.parse()).transpose()?.unwrap_or(32);
    let threads: usize = match args.get(5) {
        Some(threads) => threads.parse()?,
        None => candle_core::utils::get_num_threads(),
    };
    std::env::set_var("RAYON_NUM_THREADS", threads.to_string());
    std::env::set_var("CANDLE_NUM_THREADS", threads.to_string());
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global()?;
    let device_spec = args.get(6).map(String::as_str).unwrap_or("cpu");
    let devices = DeviceMap::parse(device_spec, None)?;
    let spec = ModelSpec::parse(path)?;
    // As the CLI's `--weights auto` loads a small GGUF: our row-keeping kernels, whose rows
    // share one pass over the weights.
    let options = LoadOptions {
        quantized: QuantizedWeights::DenseWithQ8Decode,
        ..LoadOptions::default()
    };
    let model = Model::load_with(&spec, &devices, &options)?;
    let device = devices.first().clone();
    // Distinct prompts per sequence, so no two rows are the same computation.
    let prompt = |s: usize| -> Vec<u32> {
        (0..pp as u32)
            .map(|i| 100 + (i * 37 + s as u32 * 101) % 5000)
            .collect()
    };
    let mut out = serde_json::Map::new();
    out.insert("impl".into(), "tableseek".into());
    model.forward(&prompt(0)[..1], &mut model.new_cache())?;
    device.synchronize()?;
    let started = Instant::now();
    model.forward(&prompt(0), &mut model.new_cache())?;
    device.synchronize()?;
    out.insert(
        "pp_tps".into(),
        (pp as f64 / started.elapsed().as_secs_f64()).into(),
    );
    out.insert(
        "weight_bytes".into(),
        weight_bytes(&spec, &devices, &options)?.into(),
    );
    out.insert("copy_gbps".into(), copy_gbps(&device)?.into());
    for &npl in &npls {
        let mut caches: Vec<KvCache> = (0..npl).map(|_| model.new_cache()).collect();
        for (s, cache) in caches.iter_mut().enumerate() {
            model.forward(&prompt(s), cache)?;
        }
        device.synchronize()?;
        let started = Instant::now();
        for step in 0..tg {
            let tokens: Vec<u32> = (0..npl)
                .map(|s| 100 + ((step * 53 + s * 7) % 5000) as u32)
                .collect();
            let mut refs: Vec<&mut KvCache> = caches.iter_mut().collect();
            model.decode_batch(&tokens, &mut refs)?.to_vec2::<f32>()?;
        }
        let secs = started.elapsed().as_secs_f64();
        out.insert(format!("tg_npl{npl}"), ((npl * tg) as f64 / secs).into());
    }
    out.insert("device".into(), device_spec.into());
    out.insert("dtype".into(), format!("{:?}", model.dtype()).into());
    out.insert("pp".into(), pp.into());
    out.insert("tg".into(), tg.into());
    out.insert("threads".into(), threads.into());
    println!("{}", serde_json::Value::Object(out));
    Ok(())
}

/// Bytes one decoding step reads: the weights as the engine holds them (the memory plan, from the
/// same options and devices).
fn weight_bytes(
    spec: &ModelSpec,
    devices: &DeviceMap,
    options: &LoadOptions,
) -> anyhow::Result<u64> {
    let facts = ModelFacts::read(spec)?;
    Ok(MemoryPlan::new(&facts, devices, options, 0).weight_bytes())
}

/// Device copy bandwidth in GB/s (bytes read plus written), best of five copies of 1 GiB.
fn copy_gbps(device: &candle_core::Device) -> anyhow::Result<f64> {
    let n = 1usize << 28;
    let src = candle_core::Tensor::ones(n, candle_core::DType::F32, device)?;
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        device.synchronize()?;
        let started = Instant::now();
        let copy = src.copy()?;
        device.synchronize()?;
        best = best.min(started.elapsed().as_secs_f64());
        drop(copy);
    }
    Ok(2.0 * (4 * n) as f64 / best / 1e9)
}
