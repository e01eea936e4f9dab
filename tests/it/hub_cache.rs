//! `ORG/NAME[@REVISION][:QUANT]` resolved in a Hugging Face cache laid out as `huggingface_hub`
//! writes it (refs, snapshots of symlinks into blobs), built in a temp dir from the tiny fixtures.

use std::path::{Path, PathBuf};
use std::process::Command;

use tableseek::engine::hub::{HubCache, HubError, HubModelId};
use tableseek::engine::{DeviceMap, Model, ModelSpec};

use crate::common::{existing, shared_dir};

const MAIN: &str = "0123456789abcdef0123456789abcdef01234567";
const TAGGED: &str = "fedcba9876543210fedcba9876543210fedcba98";

fn tiny_qwen3() -> Option<PathBuf> {
    existing(shared_dir().join("reference/tiny-models/tiny-qwen3"))
}

/// Copies `files` of `source` into `repo`'s blobs and links them from `snapshots/<hash>/`, as the
/// real cache does (relative symlinks `../../blobs/<name>`).
fn add_snapshot(repo: &Path, hash: &str, source: &Path, files: &[&str]) {
    let snapshot = repo.join("snapshots").join(hash);
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::create_dir_all(repo.join("blobs")).unwrap();
    for file in files {
        let blob = format!("{hash}-{}", file.replace('/', "_"));
        std::fs::copy(source.join(file), repo.join("blobs").join(&blob)).unwrap();
        std::os::unix::fs::symlink(Path::new("../../blobs").join(&blob), snapshot.join(file))
            .unwrap();
    }
}

fn set_ref(repo: &Path, name: &str, hash: &str) {
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs").join(name), hash).unwrap();
}

/// A cache with `Org/Tiny` (a checkpoint whose weights are listed by an index, as sharded
/// checkpoints are; `main` and tag `v1`) and `Org/Tiny-GGUF` (f32 and q8_0 files).
fn build_cache(tiny: &Path) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let repo = root.path().join("models--Org--Tiny");
    let files = [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ];
    add_snapshot(&repo, MAIN, tiny, &files);
    // The weight map of a one-shard checkpoint under another name, so the loader can only find it
    // through the index.
    let snapshot = repo.join("snapshots").join(MAIN);
    std::fs::rename(
        snapshot.join("model.safetensors"),
        snapshot.join("model-00001-of-00001.safetensors"),
    )
    .unwrap();
    let names = tensor_names(&tiny.join("model.safetensors"));
    let map: serde_json::Map<String, serde_json::Value> = names
        .into_iter()
        .map(|n| (n, "model-00001-of-00001.safetensors".into()))
        .collect();
    let index = serde_json::json!({ "metadata": {}, "weight_map": map });
    std::fs::write(
        snapshot.join("model.safetensors.index.json"),
        index.to_string(),
    )
    .unwrap();
    // The tiny tokenizer has no chat template; `generate` needs one.
    let config = snapshot.join("tokenizer_config.json");
    let mut tokenizer_config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    tokenizer_config["chat_template"] =
        "{% for m in messages %}{{ m['content'] }}{% endfor %}".into();
    std::fs::remove_file(&config).unwrap();
    std::fs::write(&config, tokenizer_config.to_string()).unwrap();
    set_ref(&repo, "main", MAIN);
    add_snapshot(&repo, TAGGED, tiny, &files);
    set_ref(&repo, "v1", TAGGED);

    let gguf = root.path().join("models--Org--Tiny-GGUF");
    add_snapshot(
        &gguf,
        MAIN,
        tiny,
        &["tiny-qwen3-f32.gguf", "tiny-qwen3-q8_0.gguf"],
    );
    set_ref(&gguf, "main", MAIN);
    root
}

fn tensor_names(path: &Path) -> Vec<String> {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    st.names().into_iter().map(str::to_string).collect()
}

#[test]
fn model_ids_resolve_to_snapshots_through_refs_tags_and_hashes() {
    let Some(tiny) = tiny_qwen3() else { return };
    let root = build_cache(&tiny);
    let cache = HubCache::at(root.path());
    let resolve = |id: &str| cache.resolve(&HubModelId::parse(id).unwrap());
    let repo = root.path().join("models--Org--Tiny/snapshots");
    assert_eq!(resolve("Org/Tiny").unwrap(), repo.join(MAIN));
    assert_eq!(resolve("Org/Tiny@v1").unwrap(), repo.join(TAGGED));
    assert_eq!(
        resolve(&format!("Org/Tiny@{TAGGED}")).unwrap(),
        repo.join(TAGGED)
    );
    let gguf = root
        .path()
        .join("models--Org--Tiny-GGUF/snapshots")
        .join(MAIN);
    assert_eq!(
        resolve("Org/Tiny-GGUF:Q8_0").unwrap(),
        gguf.join("tiny-qwen3-q8_0.gguf")
    );
    assert_eq!(
        resolve("Org/Tiny-GGUF:f32").unwrap(),
        gguf.join("tiny-qwen3-f32.gguf")
    );
    // Two GGUFs and no suffix: the error lists both and shows the syntax.
    let err = resolve("Org/Tiny-GGUF").unwrap_err();
    assert!(matches!(err, HubError::AmbiguousGguf { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("tiny-qwen3-f32.gguf") && text.contains("tiny-qwen3-q8_0.gguf"),
        "{text}"
    );
    assert!(text.contains("Org/Tiny-GGUF:"), "{text}");
    assert!(resolve("Org/Tiny-GGUF:Q4_K_M")
        .unwrap_err()
        .to_string()
        .contains("no GGUF file name contains"));
}

#[test]
fn a_cached_checkpoint_loads_as_its_folder_does() {
    let Some(tiny) = tiny_qwen3() else { return };
    let root = build_cache(&tiny);
    let cache = HubCache::at(root.path());
    let input: Vec<u32> = (0..40).map(|i| (i * 7 + 3) % 500).collect();
    let logits = |path: PathBuf| {
        let model = Model::load(&ModelSpec::Path(path), &DeviceMap::cpu(), None).unwrap();
        model
            .forward(&input, &mut model.new_cache())
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
    };
    let reference = logits(tiny.clone());
    let sharded = cache.resolve(&HubModelId::parse("Org/Tiny").unwrap());
    assert_eq!(logits(sharded.unwrap()), reference);
    let gguf = cache.resolve(&HubModelId::parse("Org/Tiny-GGUF:f32").unwrap());
    let from_gguf = logits(gguf.unwrap());
    let diff = from_gguf
        .iter()
        .zip(&reference)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(diff < 1e-3, "{diff}");
}

#[test]
fn a_miss_says_where_it_looked_and_how_to_fill_the_cache() {
    let root = tempfile::tempdir().unwrap();
    let cache = HubCache::at(root.path());
    let err = cache
        .resolve(&HubModelId::parse("Qwen/Qwen3-8B@v2").unwrap())
        .unwrap_err();
    let text = err.to_string();
    for expected in [
        "Qwen/Qwen3-8B@v2 is not in the local Hugging Face cache",
        &root.path().display().to_string(),
        "models--Qwen--Qwen3-8B (missing)",
        "refs/v2 (missing)",
        "huggingface-cli download Qwen/Qwen3-8B --revision v2",
    ] {
        assert!(text.contains(expected), "{expected:?} not in:\n{text}");
    }
}

/// The CLI, offline: `--model ORG/NAME` through $HF_HUB_CACHE (set for the child only), and the
/// miss message through $HF_HOME when $HF_HUB_CACHE is unset.
#[test]
fn generate_takes_a_model_id_from_the_cache_named_by_the_environment() {
    let Some(tiny) = tiny_qwen3() else { return };
    let root = build_cache(&tiny);
    let run = |model: &str, env: (&str, &Path)| {
        Command::new(env!("CARGO_BIN_EXE_tableseek"))
            .args(["generate", "--model", model, "--chat", "hello"])
            .args(["--max-new-tokens", "4", "--json", "--threads", "1"])
            .env_remove("HF_HUB_CACHE")
            .env_remove("HF_HOME")
            .env(env.0, env.1)
            .output()
            .unwrap()
    };
    let out = run("Org/Tiny", ("HF_HUB_CACHE", root.path()));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["generated_token_ids"].as_array().unwrap().len(), 4);

    let home = tempfile::tempdir().unwrap();
    let out = run("Org/Missing", ("HF_HOME", home.path()));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("$HF_HOME/hub"), "{stderr}");
    assert!(
        stderr.contains(&home.path().join("hub").display().to_string()),
        "{stderr}"
    );
}
