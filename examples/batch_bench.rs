//! Aggregate decoding speed with several sequences per step, the way llama.cpp's batched-bench
//! measures it: each of NPL sequences gets its own PP-token prompt, then TG decoding steps feed one
//! fixed token per sequence and read every sequence's logits back; S_TG = NPL · TG / time. Prints
//! one JSON line with `tg_npl<N>` for each N.
//!
//! `cargo run --release --example batch_bench -- MODEL [NPL_LIST] [PP] [TG] [THREADS]`
//! (defaults `1,4,8,16`, 128, 32, all cores). `scripts/bench-batch.sh` runs it side by side with
//! llama.cpp (`scripts/llamacpp_batched.py`).
use std::time::Instant;

use anyhow::{bail, Context};
use tableseek::engine::{DeviceMap, KvCache, LoadOptions, Model, ModelSpec, QuantizedWeights};

fn main() -> anyhow::Result<()> {
    tableseek::keep_freed_memory();
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        bail!("usage: batch_bench MODEL [NPL_LIST] [PP] [TG] [THREADS]");
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
    let spec = ModelSpec::parse(path)?;
    // As the CLI's `--weights auto` loads a small GGUF: our row-keeping kernels, whose rows
    // share one pass over the weights.
    let options = LoadOptions {
        quantized: QuantizedWeights::DenseWithQ8Decode,
        ..LoadOptions::default()
    };
    let model = Model::load_with(&spec, &DeviceMap::cpu(), &options)?;
    // Distinct prompts per sequence, so no two rows are the same computation.
    let prompt = |s: usize| -> Vec<u32> {
        (0..pp as u32)
            .map(|i| 100 + (i * 37 + s as u32 * 101) % 5000)
            .collect()
    };
    let mut out = serde_json::Map::new();
    out.insert("impl".into(), "tableseek".into());
    model.forward(&prompt(0)[..1], &mut model.new_cache())?;
    for &npl in &npls {
        let mut caches: Vec<KvCache> = (0..npl).map(|_| model.new_cache()).collect();
        for (s, cache) in caches.iter_mut().enumerate() {
            model.forward(&prompt(s), cache)?;
        }
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
    out.insert("pp".into(), pp.into());
    out.insert("tg".into(), tg.into());
    out.insert("threads".into(), threads.into());
    println!("{}", serde_json::Value::Object(out));
    Ok(())
}
