//! The real Qwen2.5-Coder-Instruct GGUFs (architecture `qwen2`, Q4_K_M: Q5_0, Q8_0, Q4_K and
//! Q6_K blocks) must reproduce llama.cpp's tokenization of the templated prompt and its greedy
//! continuation (`../shared/reference/qwen25-coder-{0.5b,1.5b}-greedy-llamacpp.json`), through
//! the CLI in the default weights mode and again when the prompt's prefix comes from the cache.
//! The GGUFs come from `scripts/fetch-models.sh` (the 1.5B with `--with 1.5b`); a missing one skips.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;
use tableseek::engine::{
    ChatMessage, ChatModel, ChatModelOptions, ChatOptions, DeviceMap, ModelSpec, QuantizedWeights,
};

use crate::common::{existing, models_dir, shared_dir};

struct Case {
    user_message: String,
    prompt_ids: Vec<u32>,
    generated_ids: Vec<u32>,
}

/// The GGUF and llama.cpp's cases for one model size, or `None` (with a skip message).
fn model_and_cases(size: &str) -> Option<(PathBuf, Vec<Case>)> {
    let gguf = existing(models_dir().join(format!("qwen2.5-coder-{size}-instruct-q4_k_m.gguf")))?;
    let reference = existing(shared_dir().join(format!(
        "reference/qwen25-coder-{size}-greedy-llamacpp.json"
    )))?;
    let json: Value = serde_json::from_str(&std::fs::read_to_string(reference).unwrap()).unwrap();
    let ids = |v: &Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|id| id.as_u64().unwrap() as u32)
            .collect()
    };
    let cases = json["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|case| Case {
            user_message: case["user_message"].as_str().unwrap().to_string(),
            prompt_ids: ids(&case["prompt_token_ids"]),
            generated_ids: ids(&case["generated_token_ids"]),
        })
        .collect();
    Some((gguf, cases))
}

fn cli_generate(gguf: &std::path::Path, message: &str) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_tableseek"))
        .args(["generate", "--model"])
        .arg(gguf)
        .args(["--chat", message, "--max-new-tokens", "64", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "generate failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn as_ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_u64().unwrap() as u32)
        .collect()
}

fn cli_matches_llama_cpp(size: &str) {
    let Some((gguf, cases)) = model_and_cases(size) else {
        return;
    };
    for case in &cases {
        let reply = cli_generate(&gguf, &case.user_message);
        assert_eq!(
            as_ids(&reply["prompt_token_ids"]),
            case.prompt_ids,
            "{size}: prompt ids of {:?}",
            case.user_message
        );
        // Both lists end with the `<|im_end|>` decoding stopped on, if it stopped early.
        assert_eq!(
            as_ids(&reply["generated_token_ids"]),
            case.generated_ids,
            "{size}: generated ids of {:?}, text {:?}",
            case.user_message,
            reply["text"]
        );
    }
}

/// The longest case twice in one process: the second prompt's whole 128-token chunks come from
/// the prefix cache and the tokens stay llama.cpp's.
fn prefix_cache_hit_keeps_the_tokens(size: &str) {
    let Some((gguf, cases)) = model_and_cases(size) else {
        return;
    };
    let case = cases.iter().max_by_key(|c| c.prompt_ids.len()).unwrap();
    assert!(case.prompt_ids.len() > 128, "the case must span a chunk");
    // The weights mode the CLI's default (`--weights auto`) picks for this file.
    let options = ChatModelOptions {
        quantized: QuantizedWeights::auto(&gguf, &DeviceMap::cpu()),
        ..ChatModelOptions::default()
    };
    let mut model = ChatModel::load(&ModelSpec::Path(gguf), &options).unwrap();
    let options = ChatOptions {
        max_new_tokens: 64,
        use_prefix_cache: true,
        ..ChatOptions::default()
    };
    let messages = [ChatMessage::user(&case.user_message)];
    let first = model.chat(&messages, &options).unwrap();
    let second = model.chat(&messages, &options).unwrap();
    assert_eq!(first.stats.cached_tokens, 0);
    assert!(
        second.stats.cached_tokens >= 128,
        "cached {}",
        second.stats.cached_tokens
    );
    assert_eq!(first.prompt_token_ids, case.prompt_ids);
    assert_eq!(second.generated_token_ids, first.generated_token_ids);
    let expected = &case.generated_ids[..first.generated_token_ids.len()];
    assert_eq!(second.generated_token_ids, expected);
}

#[test]
fn qwen25_coder_05b_cli_generate_matches_llama_cpp() {
    cli_matches_llama_cpp("0.5b");
}

#[test]
fn qwen25_coder_05b_prefix_cache_hit_keeps_llama_cpp_tokens() {
    prefix_cache_hit_keeps_the_tokens("0.5b");
}

#[test]
fn qwen25_coder_15b_cli_generate_matches_llama_cpp() {
    cli_matches_llama_cpp("1.5b");
}

#[test]
fn qwen25_coder_15b_prefix_cache_hit_keeps_llama_cpp_tokens() {
    prefix_cache_hit_keeps_the_tokens("1.5b");
}
