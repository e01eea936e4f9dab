//! Memory plans from headers alone: `tableseek inspect` on real and tiny models, and a model too
//! large for the machine refused before any weight is read.

use std::path::{Path, PathBuf};
use std::process::Command;

use tableseek::engine::plan::{MemoryPlan, ModelFacts, WeightFormat};
use tableseek::engine::{DeviceMap, EngineError, LoadOptions, Model, ModelSpec};

use crate::common::{existing, models_dir, shared_dir};

fn tiny_qwen3() -> Option<PathBuf> {
    existing(shared_dir().join("reference/tiny-models/tiny-qwen3"))
}

fn inspect(model: &str, extra: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tableseek"))
        .arg("inspect")
        .arg(model)
        .args(extra)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn facts_of_the_tiny_checkpoint_and_its_gguf_agree() {
    let Some(dir) = tiny_qwen3() else { return };
    let st = ModelFacts::read(&ModelSpec::Path(dir.clone())).unwrap();
    let gguf = ModelFacts::read(&ModelSpec::Path(dir.join("tiny-qwen3-q8_0.gguf"))).unwrap();
    assert_eq!(st.format, WeightFormat::Safetensors);
    assert_eq!(gguf.format, WeightFormat::Gguf);
    assert_eq!(st.config.num_hidden_layers, 2);
    assert_eq!(gguf.config.num_hidden_layers, 2);
    // 24 tensors, F32, and the file is its tensors plus a small header.
    assert_eq!(st.tensors.len(), 24);
    let file = std::fs::metadata(dir.join("model.safetensors"))
        .unwrap()
        .len();
    assert!(st.stored_bytes() <= file && file - st.stored_bytes() < 4096);
    assert!(gguf.dtypes().contains_key("Q8_0"), "{:?}", gguf.dtypes());
    assert!(gguf.stored_bytes() < st.stored_bytes() / 3);
    // Per layer, tied head: the two layers weigh the same on a 1,1 split.
    let devices = DeviceMap::parse("cpu,cpu", Some("1,1")).unwrap();
    let plan = MemoryPlan::new(&st, &devices, &LoadOptions::default(), 1 << 20);
    assert_eq!(plan.devices[0].layers, (0, 1));
    assert_eq!(plan.devices[1].layers, (1, 2));
    assert_eq!(plan.weight_bytes(), st.stored_bytes());
    // 2 layers x 2 KV heads x 16 dims x (K and V) x 4 bytes = 512 bytes per position.
    assert_eq!(plan.kv_bytes_per_1k_tokens, 512_000);
    assert_eq!(
        plan.max_context_in_budget, 512,
        "capped by the context window"
    );
}

/// A checkpoint whose header declares 100 TB of weights: refused with the figures, before the
/// loader would have found that the file holds no data at all.
#[test]
fn a_model_larger_than_memory_is_refused_before_loading() {
    let Some(tiny) = tiny_qwen3() else { return };
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(tiny.join("config.json"), dir.path().join("config.json")).unwrap();
    let huge: u64 = 100 << 40;
    let header = serde_json::json!({
        "model.embed_tokens.weight": {
            "dtype": "F32", "shape": [huge / 4 / 64, 64], "data_offsets": [0, huge]
        }
    })
    .to_string();
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header.as_bytes());
    std::fs::write(dir.path().join("model.safetensors"), bytes).unwrap();
    let err = Model::load(
        &ModelSpec::Path(dir.path().to_path_buf()),
        &DeviceMap::cpu(),
        None,
    )
    .unwrap_err();
    assert!(matches!(err, EngineError::DoesNotFit { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("100.00 TiB") && text.contains("cpu"),
        "{text}"
    );
    assert!(
        text.contains("KV cache"),
        "the plan is in the message: {text}"
    );

    let (ok, out) = inspect(dir.path().to_str().unwrap(), &[]);
    assert!(ok, "{out}");
    assert!(out.contains("does not fit"), "{out}");
}

#[test]
fn inspect_prints_the_plan_of_every_real_gguf_and_the_tiny_models() {
    let mut models: Vec<PathBuf> = std::fs::read_dir(models_dir())
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "gguf"))
                .collect()
        })
        .unwrap_or_default();
    models.sort();
    if let Some(tiny) = tiny_qwen3() {
        models.push(tiny.clone());
        models.push(tiny.join("tiny-qwen3-q8_0.gguf"));
    }
    if models.is_empty() {
        eprintln!("skipping: no models (run scripts/fetch-models.sh)");
        return;
    }
    for model in &models {
        let (ok, out) = inspect(&model.display().to_string(), &["--kv-memory", "1GiB"]);
        assert!(ok, "{}: {out}", model.display());
        for expected in [
            "architecture",
            "layers",
            "heads",
            "tensors:",
            "KV cache",
            "fits",
        ] {
            assert!(
                out.contains(expected),
                "{}: {expected:?} in\n{out}",
                model.display()
            );
        }
        if is_gguf(model) && model.starts_with(models_dir()) {
            assert!(out.contains("chat template: from the model"), "{out}");
        }
    }
    let (ok, out) = inspect(
        "random:qwen3-4b",
        &["--device", "cpu,cpu", "--layer-split", "auto"],
    );
    assert!(ok, "{out}");
    assert!(
        out.contains("layers   0..18") && out.contains("layers  18..36"),
        "{out}"
    );
}

fn is_gguf(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "gguf")
}

/// The tiny Qwen3-MoE checkpoint and its GGUF: experts, per-token count and sparse layers, read
/// from the config or the GGUF's metadata and router tensors; and the 30B-A3B preset's size.
#[test]
fn inspect_shows_the_experts_of_a_moe() {
    let fixtures = crate::common::fixtures_dir();
    let (ok, out) = inspect(&fixtures.join("tiny-qwen3-moe").display().to_string(), &[]);
    assert!(ok, "{out}");
    assert!(out.contains("architecture Qwen3Moe, 3 layers"), "{out}");
    assert!(
        out.contains("experts: 8 of width 32, 2 per token (not renormalized), in 2 of 3 layers"),
        "{out}"
    );
    let gguf = fixtures.join("tiny-qwen3-moe-gguf/tiny-qwen3-moe-gguf-q8_0.gguf");
    let (ok, out) = inspect(&gguf.display().to_string(), &[]);
    assert!(ok, "{out}");
    assert!(
        out.contains("experts: 8 of width 32, 2 per token (renormalized), in 2 of 2 layers"),
        "{out}"
    );
    assert!(out.contains("Q8_0 x"), "{out}");
    // Qwen3-30B-A3B has 30.5B parameters: 61 GB at bf16, refused on a 24 GiB CPU.
    let (ok, out) = inspect("random:qwen3-30b-a3b", &["--dtype", "bf16"]);
    assert!(ok, "{out}");
    assert!(
        out.contains("experts: 128 of width 768, 8 per token"),
        "{out}"
    );
    assert!(out.contains("56.87 GiB"), "{out}");
}
