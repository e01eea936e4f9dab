//! Decode speed with and without structured decoding on the agent's real prompts.
//! `cargo run --release --example constrain_bench -- MODEL [RUNS] [MAX_NEW_TOKENS]`
//!
//! For the pattern-generation and a refine prompt, alternates unconstrained and constrained greedy
//! calls (same prompt, same token cap; the prefix cache is off so every call prefills alike) and
//! prints decode tokens/s of each, plus the time the grammar mask itself takes per token.
use std::time::Instant;

use tableseek::agent::prompts::{PromptOptions, Prompts, ShownTable};
use tableseek::agent::{schemas, Role, Strategy, TaskType};
use tableseek::engine::{
    ChatMessage, ChatModel, ChatModelOptions, ChatOptions, Grammar, LogitsMask, ModelSpec,
};

/// Times the wrapped mask.
struct Timed<M> {
    inner: M,
    ms: f64,
    calls: usize,
}

impl<M: LogitsMask> LogitsMask for Timed<M> {
    fn apply(&mut self, generated: &[u32], logits: &mut [f32]) {
        let t = Instant::now();
        self.inner.apply(generated, logits);
        self.ms += t.elapsed().as_secs_f64() * 1e3;
        self.calls += 1;
    }
}

fn engine_messages(messages: Vec<tableseek::agent::ChatMessage>) -> Vec<ChatMessage> {
    messages
        .into_iter()
        .map(|m| {
            let role = match m.role {
                Role::System => "system",
                Role::User => "user",
                Role::Assistant => "assistant",
            };
            ChatMessage::new(role, m.content)
        })
        .collect()
}

fn main() -> anyhow::Result<()> {
    // As the CLI runs: freed buffers stay in the process for reuse.
    tableseek::keep_freed_memory();
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .ok_or_else(|| anyhow::anyhow!("usage: constrain_bench MODEL [RUNS] [MAX_NEW_TOKENS]"))?;
    let runs: usize = args.get(2).map(|s| s.parse()).transpose()?.unwrap_or(3);
    let max_new_tokens: usize = args.get(3).map(|s| s.parse()).transpose()?.unwrap_or(96);
    let mut model = ChatModel::load(&ModelSpec::parse(path)?, &ChatModelOptions::default())?;
    let t = Instant::now();
    model.grammar_compiler()?;
    println!(
        "token trie + grammar factory: {:.0} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    let strategy = Strategy::Select { n: 5, m: 1 };
    let prompts = Prompts::new(&PromptOptions {
        task: TaskType::Tableqa,
        strategy,
        refine: true,
        allow_select: true,
        allow_regenerate: true,
    });
    let query = "What was the population of Paris, France in 2020?";
    let previews: Vec<ShownTable> = [
        "city,country,population_2020\nParis,France,2148000\nBerlin,Germany,3645000",
        "river,length_km,country\nSeine,777,France\nRhine,1233,Germany",
        "country,capital\nFrance,Paris\nGermany,Berlin",
    ]
    .iter()
    .enumerate()
    .map(|(i, text)| ShownTable {
        id: format!("T{i}"),
        text: text.to_string(),
        score: Some(0.5),
    })
    .collect();
    let ids: Vec<String> = previews.iter().map(|p| p.id.clone()).collect();
    let patterns = vec!["Paris".to_string(), "population".to_string()];
    let cases: [(&str, _, Grammar); 2] = [
        (
            "pattern-gen",
            prompts.pattern_generation(query),
            schemas::patterns(),
        ),
        (
            "refine",
            prompts.refine(query, &patterns, &previews),
            schemas::refine(strategy, &ids, true, true),
        ),
    ];
    let options = ChatOptions {
        max_new_tokens,
        use_prefix_cache: false,
        ..ChatOptions::default()
    };
    println!("| call | mode | tokens | decode ms | tokens/s | mask ms/token |");
    println!("|---|---|---:|---:|---:|---:|");
    for (name, messages, grammar) in cases {
        let messages = engine_messages(messages);
        let (mut off, mut on) = ((0usize, 0.0f64), (0usize, 0.0f64));
        let (mut mask_ms, mut mask_calls) = (0.0, 0usize);
        for _ in 0..runs {
            let out = model.chat(&messages, &options)?;
            off.0 += out.stats.generated_tokens;
            off.1 += out.stats.decode_ms;
            let compiled = model.grammar_compiler()?.compile(&grammar)?;
            let mut timed = Timed {
                inner: compiled,
                ms: 0.0,
                calls: 0,
            };
            let out = model.chat_masked(&messages, &options, Some(&mut timed))?;
            on.0 += out.stats.generated_tokens;
            on.1 += out.stats.decode_ms;
            mask_ms += timed.ms;
            mask_calls += timed.calls;
            if timed.inner.failure().is_some() {
                anyhow::bail!("mask failed: {:?}", timed.inner.failure());
            }
        }
        for (mode, (tokens, ms), per_token) in [
            ("off", off, None),
            ("on", on, Some(mask_ms / mask_calls.max(1) as f64)),
        ] {
            println!(
                "| {name} | {mode} | {tokens} | {ms:.0} | {:.1} | {} |",
                tokens as f64 / (ms / 1e3),
                per_token.map_or("–".to_string(), |v: f64| format!("{v:.3}"))
            );
        }
    }
    Ok(())
}
