//! `tableseek generate` (one greedy reply, scriptable) and `tableseek chat` (interactive).
//!
//! Over 150 lines because it holds two commands: their flags (~40 lines), the JSON shape
//! `generate --json` prints, and chat's read-reply loop; the decoding itself is the engine's.

use std::io::{BufRead, Write};

use serde::Serialize;
use tableseek::engine::{ChatMessage, ChatOptions, ChatOutput, LoopGuard, StopReason};

use super::model_args::ModelArgs;

#[derive(Debug, clap::Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// System message; without it the model's own template decides (SmolLM2's adds its default).
    #[arg(long)]
    pub system: Option<String>,
    /// The user message.
    #[arg(long)]
    pub chat: String,
    #[arg(long, default_value_t = 256)]
    pub max_new_tokens: usize,
    /// Stop at this string (repeatable); the reply is cut before it.
    #[arg(long = "stop")]
    pub stop: Vec<String>,
    /// For thinking models (Qwen3): true or false; default is the template's.
    #[arg(long)]
    pub enable_thinking: Option<bool>,
    /// Drop the oldest prompt tokens if the prompt exceeds the context window.
    #[arg(long)]
    pub truncate_prompt: bool,
    /// Keep decoding when the reply repeats itself (by default a reply that cycles, a block of
    /// tokens repeated back to back over 64+ tokens, ends there with stop reason `loop:PERIOD`).
    #[arg(long)]
    pub no_loop_guard: bool,
    /// Print one JSON object (ids, text, counters) instead of the text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct ChatArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[arg(long)]
    pub system: Option<String>,
    #[arg(long, default_value_t = 1024)]
    pub max_new_tokens: usize,
    #[arg(long)]
    pub enable_thinking: Option<bool>,
}

#[derive(Serialize)]
struct GenerateJson<'a> {
    prompt_token_ids: &'a [u32],
    generated_token_ids: &'a [u32],
    text: &'a str,
    thinking: Option<&'a str>,
    prompt_tokens: usize,
    cached_tokens: usize,
    generated_tokens: usize,
    prefill_ms: f64,
    decode_ms: f64,
    stop_reason: String,
}

fn stop_reason_name(reason: StopReason) -> String {
    match reason {
        StopReason::StopToken(id) => format!("stop_token:{id}"),
        StopReason::MaxNewTokens => "max_new_tokens".into(),
        StopReason::Hook => "stop_string".into(),
        StopReason::ContextFull => "context_full".into(),
        StopReason::Loop { period } => format!("loop:{period}"),
    }
}

fn messages(system: Option<&str>, user: &str) -> Vec<ChatMessage> {
    let mut messages = Vec::new();
    if let Some(system) = system {
        messages.push(ChatMessage::system(system));
    }
    messages.push(ChatMessage::user(user));
    messages
}

pub fn run_generate(args: GenerateArgs) -> anyhow::Result<()> {
    let mut model = args.model.load()?;
    let options = ChatOptions {
        max_new_tokens: args.max_new_tokens,
        stop_strings: args.stop.clone(),
        enable_thinking: args.enable_thinking,
        truncate_prompt: args.truncate_prompt,
        use_prefix_cache: true,
        loop_guard: (!args.no_loop_guard).then(LoopGuard::default),
    };
    let output = model.chat(&messages(args.system.as_deref(), &args.chat), &options)?;
    if args.json {
        println!("{}", serde_json::to_string(&to_json(&output))?);
    } else {
        println!("{}", output.text);
        tracing::info!(?output.stats, "generate");
    }
    Ok(())
}

fn to_json(output: &ChatOutput) -> GenerateJson<'_> {
    GenerateJson {
        prompt_token_ids: &output.prompt_token_ids,
        generated_token_ids: &output.generated_token_ids,
        text: &output.text,
        thinking: output.thinking.as_deref(),
        prompt_tokens: output.stats.prompt_tokens,
        cached_tokens: output.stats.cached_tokens,
        generated_tokens: output.stats.generated_tokens,
        prefill_ms: output.stats.prefill_ms,
        decode_ms: output.stats.decode_ms,
        stop_reason: stop_reason_name(output.stop_reason),
    }
}

pub fn run_chat(args: ChatArgs) -> anyhow::Result<()> {
    let mut model = args.model.load()?;
    let mut history: Vec<ChatMessage> = args
        .system
        .as_deref()
        .map(ChatMessage::system)
        .into_iter()
        .collect();
    let options = ChatOptions {
        max_new_tokens: args.max_new_tokens,
        enable_thinking: args.enable_thinking,
        truncate_prompt: true,
        ..ChatOptions::default()
    };
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout();
    eprintln!("tableseek chat: type a message, an empty line or Ctrl-D to quit.");
    loop {
        write!(stdout, "> ")?;
        stdout.flush()?;
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 || line.trim().is_empty() {
            break;
        }
        history.push(ChatMessage::user(line.trim_end()));
        let output = model.chat(&history, &options)?;
        println!("{}", output.text);
        eprintln!(
            "[{} prompt tokens, {} from cache, {} generated, {:.0} ms prefill, {:.0} ms decode]",
            output.stats.prompt_tokens,
            output.stats.cached_tokens,
            output.stats.generated_tokens,
            output.stats.prefill_ms,
            output.stats.decode_ms
        );
        history.push(ChatMessage::assistant(output.text));
    }
    Ok(())
}
