//! `Tokenizer::from_file` on a non-BPE `tokenizer.json` (all-MiniLM-L6-v2's WordPiece) against
//! transformers' ids in `tests/fixtures/minilm_tokens.json` (`make_minilm_tokens.py`).
//! Needs `models/all-MiniLM-L6-v2/` from `scripts/fetch-models.sh`; skips when absent.

use std::path::PathBuf;

use tableseek::engine::Tokenizer;

#[test]
fn minilm_ids_equal_transformers_without_padding_or_truncation() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let path = root.join("models/all-MiniLM-L6-v2/tokenizer.json");
    if !path.exists() {
        eprintln!(
            "SKIP: {} not found (run scripts/fetch-models.sh)",
            path.display()
        );
        return;
    }
    let tokenizer = Tokenizer::from_file(&path).unwrap();
    let fixture: serde_json::Value = serde_json::from_slice(
        &std::fs::read(root.join("tests/fixtures/minilm_tokens.json")).unwrap(),
    )
    .unwrap();
    let cases = fixture["cases"].as_array().unwrap();
    assert!(
        cases
            .iter()
            .any(|c| c["ids"].as_array().unwrap().len() > 128),
        "the fixture must include a text longer than tokenizer.json's truncation"
    );
    for case in cases {
        let text = case["text"].as_str().unwrap();
        let ids: Vec<u32> = serde_json::from_value(case["ids"].clone()).unwrap();
        let with_specials: Vec<u32> =
            serde_json::from_value(case["ids_with_special_tokens"].clone()).unwrap();
        assert_eq!(tokenizer.encode(text, true).unwrap(), ids, "{text:?}");
        assert_eq!(
            tokenizer.encode_with_special_tokens(text).unwrap(),
            with_specials,
            "{text:?}"
        );
    }
}
