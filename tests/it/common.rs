//! Where the tests find what the repository does not carry: the shared data (`../shared` beside
//! the checkout, or `$TABLESEEK_SHARED` for checkouts such as git worktrees that sit elsewhere)
//! and the fetched models (`<repo>/models`, or `$TABLESEEK_MODELS`). Tests that need either skip
//! with a message naming the missing path, so a skip is never silent.

use std::path::{Path, PathBuf};

fn env_or_repo(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(default))
}

pub fn shared_dir() -> PathBuf {
    env_or_repo("TABLESEEK_SHARED", "../shared")
}

/// The repository's own fixtures (`tests/fixtures`, or `$TABLESEEK_FIXTURES` where the test
/// binary runs away from its build tree, as on the GPU machine).
pub fn fixtures_dir() -> PathBuf {
    env_or_repo("TABLESEEK_FIXTURES", "tests/fixtures")
}

pub fn models_dir() -> PathBuf {
    env_or_repo("TABLESEEK_MODELS", "models")
}

/// SmolLM2-135M-Instruct (Q4_1): `$TABLESEEK_SMOLLM2_GGUF`, else in [`models_dir`].
pub fn smollm2_gguf() -> PathBuf {
    std::env::var_os("TABLESEEK_SMOLLM2_GGUF")
        .map(PathBuf::from)
        .unwrap_or_else(|| models_dir().join("smollm2-135m-instruct-q4_1.gguf"))
}

/// `Some(path)` when it exists; otherwise says the test skips for want of it.
pub fn existing(path: PathBuf) -> Option<PathBuf> {
    if path.exists() {
        Some(path)
    } else {
        eprintln!(
            "skipping: {} not found (../shared, $TABLESEEK_SHARED, scripts/fetch-models.sh)",
            path.display()
        );
        None
    }
}

/// SmolLM2 loaded for chat with default options, or `None` (with a skip message) when the GGUF
/// has not been fetched.
pub fn smollm2_chat() -> Option<tableseek::engine::ChatModel> {
    use tableseek::engine::{ChatModel, ChatModelOptions, ModelSpec};
    let path = existing(smollm2_gguf())?;
    Some(
        ChatModel::load(&ModelSpec::Path(path), &ChatModelOptions::default())
            .expect("SmolLM2 loads"),
    )
}
