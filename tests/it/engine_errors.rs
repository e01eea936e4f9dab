//! Each `EngineError` a user can trigger with bad input comes out as that variant, naming what is
//! wrong, rather than as a panic or a generic candle error.

use std::fs::File;
use std::path::{Path, PathBuf};

use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::Device;
use tableseek::engine::{DeviceMap, EngineError, GenerateOptions, Generator, Model, ModelSpec};

fn tiny(name: &str) -> Option<PathBuf> {
    crate::common::existing(
        crate::common::shared_dir()
            .join("reference/tiny-models")
            .join(name),
    )
}

fn load(path: &Path) -> Result<Model, EngineError> {
    Model::load(
        &ModelSpec::Path(path.to_path_buf()),
        &DeviceMap::cpu(),
        None,
    )
}

/// A copy of a GGUF with edited metadata and tensors.
pub(crate) fn rewrite_gguf(
    src: &Path,
    dst: &Path,
    edit: impl FnOnce(&mut Vec<(String, gguf_file::Value)>, &mut Vec<(String, QTensor)>),
) {
    let mut file = File::open(src).unwrap();
    let content = gguf_file::Content::read(&mut file).unwrap();
    let mut metadata: Vec<(String, gguf_file::Value)> = content
        .metadata
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    metadata.sort_by(|a, b| a.0.cmp(&b.0));
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    let mut tensors: Vec<(String, QTensor)> = names
        .into_iter()
        .map(|n| {
            (
                n.clone(),
                content.tensor(&mut file, n, &Device::Cpu).unwrap(),
            )
        })
        .collect();
    edit(&mut metadata, &mut tensors);
    let md: Vec<(&str, &gguf_file::Value)> =
        metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let ts: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    gguf_file::write(&mut File::create(dst).unwrap(), &md, &ts).unwrap();
}

#[test]
fn missing_weight_files() {
    let tmp = tempfile::tempdir().unwrap();
    let gguf = tmp.path().join("absent.gguf");
    assert!(matches!(load(&gguf), Err(EngineError::MissingWeights { path }) if path == gguf));
    let Some(src) = tiny("tiny-qwen3") else {
        return;
    };
    std::fs::copy(src.join("config.json"), tmp.path().join("config.json")).unwrap();
    match load(tmp.path()) {
        Err(EngineError::MissingWeights { path }) => assert!(path.ends_with("model.safetensors")),
        other => panic!("expected MissingWeights, got {other:?}"),
    }
}

#[test]
fn truncated_weight_files() {
    let Some(src) = tiny("tiny-qwen3") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    std::fs::copy(src.join("config.json"), tmp.path().join("config.json")).unwrap();
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    std::fs::write(
        tmp.path().join("model.safetensors"),
        &bytes[..bytes.len() / 2],
    )
    .unwrap();
    assert!(matches!(
        load(tmp.path()),
        Err(EngineError::TruncatedWeights { .. })
    ));

    let bytes = std::fs::read(src.join("tiny-qwen3-f32.gguf")).unwrap();
    let cut = tmp.path().join("cut.gguf");
    std::fs::write(&cut, &bytes[..bytes.len() - 1000]).unwrap();
    match load(&cut) {
        Err(EngineError::TruncatedWeights { path, detail }) => {
            assert_eq!(path, cut);
            assert!(detail.contains("ends at byte"), "{detail}");
        }
        other => panic!("expected TruncatedWeights, got {other:?}"),
    }
    // Cut inside the header.
    std::fs::write(&cut, &bytes[..100]).unwrap();
    assert!(matches!(
        load(&cut),
        Err(EngineError::TruncatedWeights { .. })
    ));
}

#[test]
fn unsupported_architecture() {
    let Some(src) = tiny("tiny-llama") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let config = std::fs::read_to_string(src.join("config.json")).unwrap();
    std::fs::write(
        tmp.path().join("config.json"),
        config.replace("LlamaForCausalLM", "GPTNeoXForCausalLM"),
    )
    .unwrap();
    std::fs::copy(
        src.join("model.safetensors"),
        tmp.path().join("model.safetensors"),
    )
    .unwrap();
    assert!(
        matches!(load(tmp.path()), Err(EngineError::UnsupportedArchitecture(a)) if a == "GPTNeoXForCausalLM")
    );

    let gguf = tmp.path().join("gpt2.gguf");
    rewrite_gguf(&src.join("tiny-llama-f32.gguf"), &gguf, |md, _| {
        for (k, v) in md.iter_mut() {
            if k == "general.architecture" {
                *v = gguf_file::Value::String("gpt2".into());
            }
        }
    });
    let err = load(&gguf).unwrap_err();
    assert!(matches!(&err, EngineError::UnsupportedArchitecture(a) if a == "gpt2"));
    // The message names the file's architecture and what would load.
    let message = err.to_string();
    for name in ["`gpt2`", "qwen3", "qwen2", "llama"] {
        assert!(message.contains(name), "{message}");
    }
}

#[test]
fn unsupported_quant_type() {
    let Some(src) = tiny("tiny-llama") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let gguf = tmp.path().join("q5_1.gguf");
    rewrite_gguf(&src.join("tiny-llama-f32.gguf"), &gguf, |_, tensors| {
        for (name, t) in tensors.iter_mut() {
            if name == "blk.0.ffn_up.weight" {
                let dense = t.dequantize(&Device::Cpu).unwrap();
                *t = QTensor::quantize(&dense, GgmlDType::Q5_1).unwrap();
            }
        }
    });
    match load(&gguf) {
        Err(EngineError::UnsupportedQuantType { tensor, dtype }) => {
            assert_eq!(tensor, "blk.0.ffn_up.weight");
            assert_eq!(dtype, "Q5_1");
        }
        other => panic!("expected UnsupportedQuantType, got {other:?}"),
    }
}

#[test]
fn prompt_longer_than_context() {
    let Some(src) = tiny("tiny-qwen3") else {
        return;
    };
    let model = load(&src).unwrap();
    assert_eq!(model.context_len(), 512);
    let prompt: Vec<u32> = (0..600).map(|i| i % 500).collect();
    let mut generator = Generator::new(model);
    let opts = GenerateOptions {
        max_new_tokens: 4,
        ..Default::default()
    };
    match generator.generate(&prompt, &opts, |_| false) {
        Err(e @ EngineError::PromptTooLong { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("600") && msg.contains("512"), "{msg}");
        }
        other => panic!("expected PromptTooLong, got {other:?}"),
    }
    // On request the oldest tokens are dropped, leaving room for the new ones.
    let truncated = GenerateOptions {
        truncate_prompt: true,
        ..opts
    };
    let out = generator.generate(&prompt, &truncated, |_| false).unwrap();
    assert_eq!(out.stats.prompt_tokens, 508);
    assert_eq!(out.tokens.len(), 4);
}

#[cfg(not(feature = "cuda"))]
#[test]
fn cuda_requested_in_cpu_build() {
    let err = DeviceMap::parse("cuda:0,1", Some("3,1")).unwrap_err();
    assert!(matches!(err, EngineError::CudaNotCompiled { .. }));
    assert!(err.to_string().contains("--features cuda"));
}
