//! Tokenizers rebuilt from GGUF metadata against llama.cpp's and Hugging Face's tokenizations.
//!
//! Data: `../shared/reference` (or `$TABLESEEK_SHARED/reference`) and `models/` from
//! `scripts/fetch-models.sh`. Tests skip with a message when their files are absent.

use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::Content;
use tableseek::engine::{ChatMessage, ChatTemplate, TemplateOptions, TextStream, Tokenizer};

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

use crate::common::shared_dir;

/// `Some(path)` when it exists, otherwise prints why the test is skipped.
fn existing(path: PathBuf, what: &str) -> Option<PathBuf> {
    if path.exists() {
        Some(path)
    } else {
        eprintln!("SKIP: {what} not found at {}", path.display());
        None
    }
}

fn read_gguf(path: &Path) -> Content {
    let mut file = std::fs::File::open(path).unwrap();
    Content::read(&mut file).unwrap()
}

fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn ids(value: &serde_json::Value) -> Vec<u32> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect()
}

/// A mix that exercises every branch of the pre-tokenizer regexes.
const MIXED_SAMPLES: &[&str] = &[
    "Hello world! It's 1234567 o'clock, isn't it? WE'LL SEE; they'd've...",
    "  leading spaces,\ttabs\tand trailing   ",
    "line one\nline two\n\n\nthree blank\r\nwindows\r\n",
    "<|im_start|>user\nQuelle est la capitale ? été 🚀<|im_end|>\n<|im_start|>assistant\n",
    "prices: $1,000.50 (approx. 3.14159%) -> [a-b]{c} #tag @user",
    "mixed<|endoftext|>special<|im_end|>",
    "",
];

#[test]
fn smollm2_gguf_template_tokens_and_text_match_llamacpp() {
    let Some(model) = existing(
        manifest_dir().join("models/smollm2-135m-instruct-q4_1.gguf"),
        "SmolLM2 GGUF (run scripts/fetch-models.sh)",
    ) else {
        return;
    };
    let Some(reference) = existing(
        shared_dir().join("reference/smollm2-greedy-llamacpp.json"),
        "llama.cpp SmolLM2 reference",
    ) else {
        return;
    };
    let content = read_gguf(&model);
    let reference = read_json(&reference);
    let tokenizer = Tokenizer::from_gguf(&content).unwrap();
    let template = ChatTemplate::from_gguf(&content).unwrap();

    let user = reference["user_message"].as_str().unwrap();
    let prompt = template
        .render(&[ChatMessage::user(user)], &TemplateOptions::default())
        .unwrap();
    assert_eq!(prompt, reference["templated_prompt"].as_str().unwrap());

    let prompt_ids = tokenizer.encode(&prompt, true).unwrap();
    assert_eq!(prompt_ids, ids(&reference["prompt_token_ids"]));
    assert_eq!(prompt_ids.len(), 44);

    let generated = ids(&reference["generated_token_ids"]);
    let expected_text = reference["generated_text"].as_str().unwrap();
    assert_eq!(tokenizer.decode(&generated, true).unwrap(), expected_text);

    let eos = reference["eos_id"].as_u64().unwrap() as u32;
    assert_eq!(tokenizer.eos_token_ids().first(), Some(&eos));
    assert_eq!(tokenizer.vocab_size(), 49152);
    assert!(!tokenizer.add_bos());

    // Streaming the same ids gives the same text.
    let mut stream = TextStream::new(true);
    let mut streamed = String::new();
    for &id in &generated {
        if let Some(chunk) = stream.push(&tokenizer, id).unwrap() {
            streamed.push_str(&chunk);
        }
    }
    if let Some(rest) = stream.finish(&tokenizer).unwrap() {
        streamed.push_str(&rest);
    }
    assert_eq!(streamed, expected_text);
    assert_eq!(stream.text(), expected_text);
}

#[test]
fn smollm2_special_token_text_is_plain_text_without_parse_special() {
    let Some(model) = existing(
        manifest_dir().join("models/smollm2-135m-instruct-q4_1.gguf"),
        "SmolLM2 GGUF (run scripts/fetch-models.sh)",
    ) else {
        return;
    };
    let tokenizer = Tokenizer::from_gguf(&read_gguf(&model)).unwrap();
    let im_start = tokenizer.token_id("<|im_start|>").unwrap();
    assert_eq!(tokenizer.encode("<|im_start|>", true).unwrap(), [im_start]);
    let literal = tokenizer.encode("<|im_start|>", false).unwrap();
    assert!(
        literal.len() > 1 && !literal.contains(&im_start),
        "{literal:?}"
    );
    assert_eq!(tokenizer.decode(&literal, true).unwrap(), "<|im_start|>");
    // Control tokens are skipped only when asked.
    assert_eq!(tokenizer.decode(&[im_start], true).unwrap(), "");
    assert_eq!(
        tokenizer.decode(&[im_start], false).unwrap(),
        "<|im_start|>"
    );
}

#[test]
fn smollm2_system_message_replaces_the_default_one() {
    let Some(model) = existing(
        manifest_dir().join("models/smollm2-135m-instruct-q4_1.gguf"),
        "SmolLM2 GGUF (run scripts/fetch-models.sh)",
    ) else {
        return;
    };
    let template = ChatTemplate::from_gguf(&read_gguf(&model)).unwrap();
    let prompt = template
        .render(
            &[
                ChatMessage::system("Answer briefly."),
                ChatMessage::user("Hi"),
            ],
            &TemplateOptions {
                add_generation_prompt: false,
                enable_thinking: None,
            },
        )
        .unwrap();
    assert_eq!(
        prompt,
        "<|im_start|>system\nAnswer briefly.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
    );
}

#[test]
fn tiny_model_ggufs_tokenize_like_their_tokenizer_json() {
    let Some(dir) = existing(
        shared_dir().join("reference/tiny-models"),
        "tiny-models reference",
    ) else {
        return;
    };
    let from_json = Tokenizer::from_file(dir.join("tiny-qwen3/tokenizer.json")).unwrap();
    for gguf in [
        "tiny-qwen3/tiny-qwen3-f32.gguf",
        "tiny-qwen3/tiny-qwen3-q8_0.gguf",
        "tiny-llama/tiny-llama-f32.gguf",
    ] {
        let from_gguf = Tokenizer::from_gguf(&read_gguf(&dir.join(gguf))).unwrap();
        assert_eq!(from_gguf.vocab_size(), 512, "{gguf}");
        assert_eq!(from_gguf.vocab_size(), from_json.vocab_size(), "{gguf}");
        assert_eq!(
            from_gguf.eos_token_ids(),
            from_json.eos_token_ids(),
            "{gguf}"
        );
        assert_eq!(from_gguf.eos_token_ids().first(), Some(&511), "{gguf}");
        for sample in MIXED_SAMPLES {
            for parse_special in [true, false] {
                let expected = from_json.encode(sample, parse_special).unwrap();
                let got = from_gguf.encode(sample, parse_special).unwrap();
                assert_eq!(
                    got, expected,
                    "{gguf}, {sample:?}, parse_special {parse_special}"
                );
                assert_eq!(from_gguf.decode(&got, false).unwrap(), *sample, "{gguf}");
            }
        }
    }
}

#[test]
fn tiny_tokenizer_maps_specials_and_splits_digits() {
    let Some(path) = existing(
        shared_dir().join("reference/tiny-models/tiny-qwen3/tiny-qwen3-f32.gguf"),
        "tiny-qwen3 GGUF",
    ) else {
        return;
    };
    let tokenizer = Tokenizer::from_gguf(&read_gguf(&path)).unwrap();
    let ids = tokenizer
        .encode("<|im_start|>user\n1234567<|im_end|>", true)
        .unwrap();
    assert_eq!(ids.first(), Some(&510));
    assert_eq!(ids.last(), Some(&511));
    // Qwen2's pre-tokenizer splits numbers into single digits.
    let digit_ids: Vec<u32> = "1234567"
        .chars()
        .map(|d| tokenizer.token_id(&d.to_string()).unwrap())
        .collect();
    assert!(
        ids.windows(7).any(|w| w == digit_ids.as_slice()),
        "{ids:?} lacks {digit_ids:?}"
    );
    let plain = tokenizer.encode("<|im_start|>", false).unwrap();
    assert!(plain.iter().all(|&id| id < 509), "{plain:?}");
    assert_eq!(
        tokenizer.bos_token(),
        Some((509, "<|endoftext|>".to_string()))
    );
    assert!(tokenizer.decode(&[512], false).is_err());
}

#[test]
fn streaming_never_emits_half_a_character() {
    let Some(path) = existing(
        shared_dir().join("reference/tiny-models/tiny-qwen3/tiny-qwen3-f32.gguf"),
        "tiny-qwen3 GGUF",
    ) else {
        return;
    };
    let tokenizer = Tokenizer::from_gguf(&read_gguf(&path)).unwrap();
    let text = "été 🚀 naïve 日本";
    let ids = tokenizer.encode(text, true).unwrap();
    // The tiny vocabulary has no merges for these, so characters span several byte tokens.
    assert!(ids.len() > text.chars().count(), "{ids:?}");
    let mut stream = TextStream::new(true);
    let mut chunks = Vec::new();
    for &id in &ids {
        if let Some(chunk) = stream.push(&tokenizer, id).unwrap() {
            assert!(!chunk.contains(char::REPLACEMENT_CHARACTER), "{chunk:?}");
            chunks.push(chunk);
        }
    }
    assert_eq!(stream.finish(&tokenizer).unwrap(), None);
    assert_eq!(chunks.concat(), text);
    assert!(chunks.len() > 1);
}

#[test]
fn gguf_without_tokenizer_metadata_is_a_clear_error() {
    let Some(path) = existing(
        shared_dir().join("reference/tiny-models/tiny-qwen3/tiny-qwen3-f32.gguf"),
        "tiny-qwen3 GGUF",
    ) else {
        return;
    };
    let mut content = read_gguf(&path);
    content.metadata.remove("tokenizer.ggml.merges");
    let err = Tokenizer::from_gguf(&content).unwrap_err();
    assert!(err.to_string().contains("tokenizer.ggml.merges"), "{err}");

    let mut content = read_gguf(&path);
    content.metadata.insert(
        "tokenizer.ggml.pre".to_string(),
        candle_core::quantized::gguf_file::Value::String("no-such-pre".to_string()),
    );
    let err = Tokenizer::from_gguf(&content).unwrap_err();
    assert!(err.to_string().contains("no-such-pre"), "{err}");
}

#[test]
fn smollm2_splits_numbers_into_single_digits() {
    let Some(model) = existing(
        manifest_dir().join("models/smollm2-135m-instruct-q4_1.gguf"),
        "SmolLM2 GGUF (run scripts/fetch-models.sh)",
    ) else {
        return;
    };
    let tokenizer = Tokenizer::from_gguf(&read_gguf(&model)).unwrap();
    // SmolLM2's own tokenizer.json starts its pre-tokenizer with Digits(individual_digits).
    let ids = tokenizer.encode("in 1234567 rows", true).unwrap();
    let digits: Vec<u32> = "1234567"
        .chars()
        .map(|d| tokenizer.token_id(&d.to_string()).unwrap())
        .collect();
    assert!(ids.windows(7).any(|w| w == digits.as_slice()), "{ids:?}");
    assert_eq!(tokenizer.decode(&ids, false).unwrap(), "in 1234567 rows");
    // No BOS for SmolLM2, so both encodings agree.
    assert_eq!(
        tokenizer
            .encode_with_special_tokens("in 1234567 rows")
            .unwrap(),
        ids
    );
}

#[test]
fn add_bos_token_adds_bos_only_through_encode_with_special_tokens() {
    let Some(path) = existing(
        shared_dir().join("reference/tiny-models/tiny-qwen3/tiny-qwen3-f32.gguf"),
        "tiny-qwen3 GGUF",
    ) else {
        return;
    };
    let mut content = read_gguf(&path);
    content.metadata.insert(
        "tokenizer.ggml.add_bos_token".to_string(),
        candle_core::quantized::gguf_file::Value::Bool(true),
    );
    let tokenizer = Tokenizer::from_gguf(&content).unwrap();
    assert!(tokenizer.add_bos());
    let plain = tokenizer.encode("hello there", true).unwrap();
    let with_bos = tokenizer.encode_with_special_tokens("hello there").unwrap();
    assert_eq!(with_bos[0], 509);
    assert_eq!(&with_bos[1..], plain.as_slice());
}
