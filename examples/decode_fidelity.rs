//! How far quantized decoding moves the logits from the exact (dequantized) weights: the same
//! token sequences are fed one token at a time (the decode path) to the model loaded `dense` and
//! loaded with another weights mode, and per step we compare the next-token distributions.
//!
//! `cargo run --release --example decode_fidelity -- MODEL TOKENS.json [WEIGHTS] [THREADS]`
//! TOKENS.json holds a list of token-id lists (or one object with `prompt_token_ids` and
//! `generated_token_ids`, as in `../shared/reference/smollm2-greedy-llamacpp.json`); WEIGHTS is
//! `dense-q8` (default) or `as-stored`. Prints one JSON line: steps, mean and max KL(dense ‖
//! other) in nats, mean max |Δlogit|, and the share of steps whose argmax agrees.
use anyhow::{bail, Context};
use tableseek::engine::{DeviceMap, LoadOptions, Model, ModelSpec, QuantizedWeights};

fn log_softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x)) as f64;
    let log_sum = logits
        .iter()
        .map(|&x| (x as f64 - max).exp())
        .sum::<f64>()
        .ln();
    logits.iter().map(|&x| x as f64 - max - log_sum).collect()
}

fn argmax(logits: &[f32]) -> usize {
    // Ties to the lowest id, as the engine's greedy decoding does.
    let mut best = 0;
    for (i, &x) in logits.iter().enumerate() {
        if x > logits[best] {
            best = i;
        }
    }
    best
}

fn main() -> anyhow::Result<()> {
    tableseek::keep_freed_memory();
    let args: Vec<String> = std::env::args().collect();
    let (Some(model_path), Some(tokens_path)) = (args.get(1), args.get(2)) else {
        bail!("usage: decode_fidelity MODEL TOKENS.json [WEIGHTS] [THREADS]");
    };
    let other_mode = match args.get(3).map(String::as_str) {
        None | Some("dense-q8") => QuantizedWeights::DenseWithQ8Decode,
        Some("as-stored") => QuantizedWeights::AsStored,
        Some(other) => bail!("unknown weights mode {other}"),
    };
    let threads = args
        .get(4)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(2usize);
    std::env::set_var("RAYON_NUM_THREADS", threads.to_string());
    std::env::set_var("CANDLE_NUM_THREADS", threads.to_string());

    let text = std::fs::read_to_string(tokens_path).with_context(|| tokens_path.clone())?;
    let value: serde_json::Value = serde_json::from_str(&text)?;
    let sequences: Vec<Vec<u32>> = match &value {
        serde_json::Value::Object(reference) => {
            let ids = |key: &str| -> anyhow::Result<Vec<u32>> {
                Ok(serde_json::from_value(
                    reference.get(key).cloned().context(key.to_string())?,
                )?)
            };
            vec![[ids("prompt_token_ids")?, ids("generated_token_ids")?].concat()]
        }
        _ => serde_json::from_value(value)?,
    };

    let spec = ModelSpec::parse(model_path)?;
    let load = |quantized| {
        Model::load_with(
            &spec,
            &DeviceMap::cpu(),
            &LoadOptions {
                quantized,
                ..Default::default()
            },
        )
    };
    let exact = load(QuantizedWeights::Dense)?;
    let other = load(other_mode)?;

    let (mut steps, mut agree) = (0usize, 0usize);
    let (mut kl_sum, mut kl_max, mut diff_sum) = (0f64, 0f64, 0f64);
    for sequence in &sequences {
        let (mut exact_cache, mut other_cache) = (exact.new_cache(), other.new_cache());
        for &token in sequence {
            let p = exact
                .forward(&[token], &mut exact_cache)?
                .to_vec1::<f32>()?;
            let q = other
                .forward(&[token], &mut other_cache)?
                .to_vec1::<f32>()?;
            let (lp, lq) = (log_softmax(&p), log_softmax(&q));
            let kl: f64 = lp.iter().zip(&lq).map(|(a, b)| a.exp() * (a - b)).sum();
            kl_sum += kl;
            kl_max = kl_max.max(kl);
            diff_sum += p
                .iter()
                .zip(&q)
                .map(|(a, b)| (a - b).abs() as f64)
                .fold(0.0, f64::max);
            agree += usize::from(argmax(&p) == argmax(&q));
            steps += 1;
        }
    }
    let steps_f = steps.max(1) as f64;
    println!(
        "{}",
        serde_json::json!({
            "steps": steps,
            "mean_kl": kl_sum / steps_f,
            "max_kl": kl_max,
            "mean_max_abs_logit_diff": diff_sum / steps_f,
            "argmax_agreement": agree as f64 / steps_f,
        })
    );
    Ok(())
}
