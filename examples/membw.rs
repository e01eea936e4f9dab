//! Memory bandwidth of this machine, the ceiling of decoding speed: a decoded token reads every
//! weight once, so `tokens/s ≤ bandwidth / bytes read per token`. Prints one JSON line with the
//! read bandwidth (summing a buffer far larger than the caches, the access pattern of a matrix-
//! vector product) and the copy bandwidth (bytes read + written), in GB/s, best of `ROUNDS`.
//!
//! `cargo run --release --example membw -- [THREADS] [MIB] [ROUNDS]` (defaults 2, 1024, 5).
//! With a GGUF as a fourth argument it also prints the bytes of its 2-D weights that decoding reads
//! per token (as stored: every projection, and the output head, or the embedding table when tied)
//! and the tokens/s that bandwidth allows.
use std::time::Instant;

use anyhow::Context;
use rayon::prelude::*;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let threads: usize = args.get(1).map(|s| s.parse()).transpose()?.unwrap_or(2);
    let mib: usize = args.get(2).map(|s| s.parse()).transpose()?.unwrap_or(1024);
    let rounds: usize = args.get(3).map(|s| s.parse()).transpose()?.unwrap_or(5);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()?;
    let n = mib * (1 << 20) / 8;
    let src: Vec<u64> = (0..n as u64).collect();
    let mut dst = vec![0u64; n];
    let chunk = n.div_ceil(threads * 16);
    let bytes = (n * 8) as f64;
    let (mut read, mut copy) = (0f64, 0f64);
    let mut checksum = 0u64;
    for _ in 0..rounds {
        let started = Instant::now();
        // Wrapping sums of u64 lanes vectorize to full-width loads; the checksum keeps them alive.
        checksum ^= pool.install(|| {
            src.par_chunks(chunk)
                .map(|c| c.iter().fold(0u64, |a, &x| a.wrapping_add(x)))
                .reduce(|| 0, u64::wrapping_add)
        });
        read = read.max(bytes / started.elapsed().as_secs_f64() / 1e9);
        let started = Instant::now();
        pool.install(|| {
            dst.par_chunks_mut(chunk)
                .zip(src.par_chunks(chunk))
                .for_each(|(d, s)| d.copy_from_slice(s))
        });
        copy = copy.max(2.0 * bytes / started.elapsed().as_secs_f64() / 1e9);
    }
    let mut out = serde_json::json!({
        "threads": threads,
        "mib": mib,
        "read_gb_s": read,
        "copy_gb_s": copy,
        "checksum": checksum ^ dst[n / 2],
    });
    if let Some(gguf) = args.get(4) {
        let content = tableseek::engine::read_gguf(std::path::Path::new(gguf))
            .with_context(|| format!("reading {gguf}"))?;
        let tied = !content.tensor_infos.contains_key("output.weight");
        let weight_bytes: usize = content
            .tensor_infos
            .iter()
            .filter(|(name, info)| {
                info.shape.dims().len() == 2 && (name.as_str() != "token_embd.weight" || tied)
            })
            .map(|(_, info)| {
                info.shape.elem_count() / info.ggml_dtype.block_size() * info.ggml_dtype.type_size()
            })
            .sum();
        out["decode_bytes_per_token"] = weight_bytes.into();
        out["tokens_per_s_at_read_bandwidth"] = (read * 1e9 / weight_bytes as f64).into();
    }
    println!("{out}");
    Ok(())
}
