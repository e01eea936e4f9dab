//! Rough CPU speed of a GGUF model: prefill of N tokens and greedy decode of M tokens.
//! `cargo run --release --example engine_bench -- MODEL [N] [M] [dense]`, where MODEL is a GGUF
//! file, an HF checkpoint directory, or `random:PRESET` (e.g. `random:qwen3-0.6b`).
//! (`dense` / `dense-q8`: see `QuantizedWeights`).
use std::time::Instant;

use tableseek::engine::{DeviceMap, LoadOptions, Model, ModelSpec, QuantizedWeights};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .ok_or_else(|| anyhow::anyhow!("usage: engine_bench MODEL [N] [M]"))?;
    let n: usize = args.get(2).map(|s| s.parse()).transpose()?.unwrap_or(128);
    let m: usize = args.get(3).map(|s| s.parse()).transpose()?.unwrap_or(32);
    let opts = LoadOptions {
        quantized: match args.get(4).map(String::as_str) {
            Some("dense") => QuantizedWeights::Dense,
            Some("dense-q8") => QuantizedWeights::DenseWithQ8Decode,
            _ => QuantizedWeights::AsStored,
        },
        ..Default::default()
    };
    let spec = ModelSpec::parse(path)?;
    let t = Instant::now();
    let model = Model::load_with(&spec, &DeviceMap::cpu(), &opts)?;
    println!("loaded in {:.1} s", t.elapsed().as_secs_f64());
    let prompt: Vec<u32> = (0..n as u32).map(|i| 100 + (i * 37) % 5000).collect();
    let mut cache = model.new_cache();
    let t = Instant::now();
    let mut logits = model.forward(&prompt, &mut cache)?;
    let pp = t.elapsed().as_secs_f64();
    let t = Instant::now();
    for _ in 0..m {
        let next = tableseek::engine::generate::argmax(&logits.to_vec1::<f32>()?);
        logits = model.forward(&[next], &mut cache)?;
    }
    let tg = t.elapsed().as_secs_f64();
    println!(
        "threads {} pp{n}: {:.1} t/s, tg{m}: {:.1} t/s",
        candle_core::utils::get_num_threads(),
        n as f64 / pp,
        m as f64 / tg
    );
    Ok(())
}
