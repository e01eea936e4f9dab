//! Inputs the fuzz targets (`fuzz/`, `scripts/fuzz.sh`) found to crash, minimised, fed through the
//! same public function as the target: each must now return (`Ok` or a clear `Err`), not panic.
//! `fuzz/RESULTS.md` lists where each came from.

use std::path::{Path, PathBuf};

use tableseek::engine::{Tokenizer, TokenizerError};

/// Writes `data` as `name` in a fresh temporary directory (kept alive by the returned guard).
fn write_temp(name: &str, data: &[u8]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, data).unwrap();
    (dir, path)
}

fn tokenizer_from(data: &[u8]) -> Result<Tokenizer, TokenizerError> {
    let (_dir, path) = write_temp("tokenizer.json", data);
    Tokenizer::from_file(&path)
}

/// fuzz target `tokenizer_json`: tokenizers 0.23 panicked (`expect("Helper")` in its decoder
/// deserializer) on any syntax error inside `"decoder"`, e.g. a `tokenizer.json` cut off there.
#[test]
fn tokenizer_json_broken_inside_decoder_is_an_error() {
    for text in [
        r#"{"decoder":"#,
        r#"{"decoder":}"#,
        r#"{"decoder":["#,
        r#"{"decoder":{"type":"ByteLevel",}}"#,
        // The minimised fuzzer input, shortened: truncated right after the key.
        r#"{"truncation":null,"padding":null,"added_tokens":[],"normalizer":{"type":"NFC"},"decoder":"#,
    ] {
        match tokenizer_from(text.as_bytes()) {
            Err(TokenizerError::Load { .. }) => {}
            other => panic!("{text:?}: expected a load error, got {other:?}"),
        }
    }
}

/// The same with a real `tokenizer.json` (the tiny Qwen3-MoE fixture) truncated at every point
/// inside its `"decoder"` value: a partial download.
#[test]
fn truncated_real_tokenizer_json_is_an_error() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tiny-qwen3-moe-gguf/tokenizer.json");
    let full = std::fs::read(&path).unwrap();
    assert!(Tokenizer::from_file(&path).is_ok());
    let start = full
        .windows(b"\"decoder\"".len())
        .position(|w| w == b"\"decoder\"")
        .expect("the fixture has a decoder");
    let end = (start + 200).min(full.len());
    for cut in start..end {
        assert!(
            tokenizer_from(&full[..cut]).is_err(),
            "truncated at byte {cut}"
        );
    }
}
