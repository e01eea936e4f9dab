//! Prefix reuse, measured: prompts that share a long prefix (a system message and tables, as in the
//! agent's refine rounds) and differ after it, prefilled once without the prefix cache and once
//! with it. Prints total prefill time both ways, their ratio, and checks that every generated
//! token is the same.
//!
//! `cargo run --release --example prefix_reuse -- MODEL [PREFIX_TOKENS] [PROMPTS] [CHUNK] [WEIGHTS]`
//! (defaults: 1500 tokens, 10 prompts, the engine's prefill chunk, dense-q8 weights).
use std::time::Instant;

use anyhow::{bail, Context};
use tableseek::engine::{
    ChatModel, ChatModelOptions, GenerateOptions, ModelSpec, QuantizedWeights,
};

const NEW_TOKENS: usize = 16;

fn main() -> anyhow::Result<()> {
    // As the CLI runs: freed buffers stay in the process for reuse.
    tableseek::keep_freed_memory();
    let args: Vec<String> = std::env::args().collect();
    let Some(model_path) = args.get(1) else {
        bail!("usage: prefix_reuse MODEL [PREFIX_TOKENS] [PROMPTS] [CHUNK] [WEIGHTS]");
    };
    let prefix_len: usize = args.get(2).map(|s| s.parse()).transpose()?.unwrap_or(1500);
    let prompts: usize = args.get(3).map(|s| s.parse()).transpose()?.unwrap_or(10);
    let chunk: Option<usize> = args.get(4).map(|s| s.parse()).transpose()?;
    let quantized = match args.get(5).map(String::as_str) {
        None | Some("dense-q8") => QuantizedWeights::DenseWithQ8Decode,
        Some("dense") => QuantizedWeights::Dense,
        Some("as-stored") => QuantizedWeights::AsStored,
        Some(other) => bail!("unknown weights mode {other}"),
    };
    let options = ChatModelOptions {
        quantized,
        prefill_chunk: chunk,
        ..ChatModelOptions::default()
    };
    let mut model = ChatModel::load(&ModelSpec::parse(model_path)?, &options)
        .with_context(|| format!("loading {model_path}"))?;

    // Real table text from the bundled sample corpus, repeated until it is long enough: the
    // content only matters in that it looks like what the agent sends.
    let mut tables = String::new();
    for entry in walkdir::WalkDir::new("samples/corpus").sort_by_file_name() {
        let entry = entry?;
        if entry.file_type().is_file() {
            tables.push_str(&std::fs::read_to_string(entry.path())?);
            tables.push('\n');
        }
    }
    let system = "<|im_start|>system\nYou find the table that answers a question. Read the tables \
                  below and answer with the id of the table that holds the evidence.<|im_end|>\n\
                  <|im_start|>user\n";
    let mut prefix = model.encode_prompt(system)?;
    let table_ids = model.tokenizer().encode(&tables, false)?;
    if table_ids.is_empty() {
        bail!("no sample tables found: run from the repository root");
    }
    while prefix.len() < prefix_len {
        let need = prefix_len - prefix.len();
        prefix.extend_from_slice(&table_ids[..need.min(table_ids.len())]);
    }
    let questions = [
        "Which city is the capital of Australia?",
        "How many moons does Jupiter have?",
        "Who won the Nobel prize in physics in 1921?",
        "Which airport is the busiest?",
        "Where were the 2000 Olympic games held?",
        "How long is the Nile?",
        "What was the revenue of the largest company?",
        "Which stadium holds the most people?",
        "Who won the most grand slam titles?",
        "How many seasons did the Raiders win?",
    ];
    let suffixes: Vec<Vec<u32>> = (0..prompts)
        .map(|i| {
            let question = questions[i % questions.len()];
            let text = format!("\nQuestion {i}: {question}<|im_end|>\n<|im_start|>assistant\n");
            model.encode_prompt(&text)
        })
        .collect::<Result<_, _>>()?;

    let generator = model
        .generator_mut()
        .context("a freshly loaded model runs locally")?;
    let mut run = |use_prefix_cache: bool| -> anyhow::Result<(f64, usize, usize, Vec<Vec<u32>>)> {
        generator.prefix_cache_mut().clear();
        let opts = GenerateOptions {
            max_new_tokens: NEW_TOKENS,
            use_prefix_cache,
            ..GenerateOptions::default()
        };
        let (mut prefill_ms, mut prompt_tokens, mut cached) = (0.0, 0, 0);
        let mut outputs = Vec::new();
        for suffix in &suffixes {
            let prompt: Vec<u32> = prefix.iter().chain(suffix).copied().collect();
            let out = generator.generate(&prompt, &opts, |_| false)?;
            prefill_ms += out.stats.prefill_ms;
            prompt_tokens += out.stats.prompt_tokens;
            cached += out.stats.cached_tokens;
            outputs.push(out.tokens);
        }
        Ok((prefill_ms, prompt_tokens, cached, outputs))
    };
    let started = Instant::now();
    let (cold_ms, prompt_tokens, _, cold_out) = run(false)?;
    let (warm_ms, _, cached, warm_out) = run(true)?;
    let identical = cold_out == warm_out;
    println!(
        "prompts {prompts}, shared prefix {} tokens, chunk {}, prompt tokens {prompt_tokens}, served from cache {cached}",
        prefix.len(),
        model.model().prefill_chunk()
    );
    println!("prefill without reuse: {cold_ms:.0} ms");
    println!("prefill with reuse:    {warm_ms:.0} ms");
    println!("ratio without/with: {:.2}", cold_ms / warm_ms);
    println!(
        "outputs identical: {identical} ({NEW_TOKENS} tokens each; {:.0} s in all)",
        started.elapsed().as_secs_f64()
    );
    if !identical {
        bail!("outputs differ between the cached and uncached runs");
    }
    Ok(())
}
