//! Inputs the fuzz targets (`fuzz/`, `scripts/fuzz.sh`) found to crash, minimised, fed through the
//! same public function as the target: each must now return (`Ok` or a clear `Err`), not panic.
//! `fuzz/RESULTS.md` lists where each came from.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tableseek::corpus::{SourceFormat, Table, TableMeta};
use tableseek::engine::plan::ModelFacts;
use tableseek::engine::{
    read_gguf, ChatMessage, ChatTemplate, Config, EngineError, ModelSpec, TemplateOptions,
    Tokenizer, TokenizerError,
};
use tableseek::sql::{Database, QueryLimits};

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

/// A GGUF v3 file with no metadata and the given tensor index entries `(name, dims, ggml type,
/// offset)`, followed by 64 bytes of tensor data.
fn gguf_with_tensors(tensors: &[(&str, &[u64], u32, u64)]) -> Vec<u8> {
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend((tensors.len() as u64).to_le_bytes());
    out.extend(0u64.to_le_bytes());
    for (name, dims, ggml_type, offset) in tensors {
        out.extend((name.len() as u64).to_le_bytes());
        out.extend(name.as_bytes());
        out.extend((dims.len() as u32).to_le_bytes());
        for d in *dims {
            out.extend(d.to_le_bytes());
        }
        out.extend(ggml_type.to_le_bytes());
        out.extend(offset.to_le_bytes());
    }
    out.resize(out.len().next_multiple_of(32) + 64, 0);
    out
}

/// fuzz target `gguf`: `read_gguf` computed a tensor's extent with unchecked arithmetic on header
/// fields, so a shape whose element count overflows, a byte size that overflows, or an offset near
/// `u64::MAX` panicked ("attempt to multiply/add with overflow") in debug builds and wrapped in
/// release ones (where the wrapped end could pass the file-size check).
#[test]
fn gguf_tensor_extent_overflow_is_an_error() {
    const F32: u32 = 0;
    for (what, dims, offset) in [
        ("element count", &[1u64 << 33, 1 << 33][..], 0),
        ("byte size", &[1u64 << 62][..], 0),
        ("end offset", &[8u64][..], u64::MAX - 15),
    ] {
        let (_dir, path) = write_temp(
            "model.gguf",
            &gguf_with_tensors(&[("t", dims, F32, offset)]),
        );
        match read_gguf(&path) {
            Err(EngineError::TruncatedWeights { .. }) => {}
            other => panic!("{what}: expected a truncated-weights error, got {other:?}"),
        }
    }
    // A sound tensor in the same layout still reads.
    let (_dir, path) = write_temp("model.gguf", &gguf_with_tensors(&[("t", &[8], F32, 0)]));
    assert!(read_gguf(&path).is_ok());
}

/// fuzz target `gguf` (a hang): one flipped byte made the tiny Qwen3-MoE GGUF's `block_count`
/// 50,331,650; `Config::from_gguf_content` then formatted a tensor name per layer (45 s, 400 MB),
/// and a count near `u32::MAX` would have asked for ~32 GB. More layers than tensors is an error.
#[test]
fn gguf_absurd_block_count_is_a_quick_error() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tiny-qwen3-moe-gguf/tiny-qwen3-moe-gguf-q8_0.gguf");
    let original = std::fs::read(&fixture).unwrap();
    let key = b"qwen3moe.block_count";
    let at = original
        .windows(key.len())
        .position(|w| w == key)
        .expect("the fixture names its block count")
        + key.len();
    // The key is followed by its u32 type tag (4) and the u32 value.
    assert_eq!(original[at..at + 4], 4u32.to_le_bytes());
    for layers in [0x0300_0002u32, u32::MAX] {
        let mut data = original.clone();
        data[at + 4..at + 8].copy_from_slice(&layers.to_le_bytes());
        let (_dir, path) = write_temp("model.gguf", &data);
        let started = std::time::Instant::now();
        let content = read_gguf(&path).unwrap();
        match Config::from_gguf_content(&content, "fuzz") {
            Err(EngineError::BadConfig { detail, .. }) => assert!(detail.contains("layers")),
            other => panic!("{layers} layers: expected a config error, got {other:?}"),
        }
        assert!(ModelFacts::read(&ModelSpec::Path(path.clone())).is_err());
        assert!(started.elapsed().as_secs() < 5, "{:?}", started.elapsed());
    }
}

/// fuzz target `chat_template`: a namespace that holds itself (`{% set ns.n = ns %}`) overflowed
/// the stack when printed or serialized (minijinja 3.1.0 formats values recursively, without a
/// cycle check), which aborted the process, so a GGUF's `tokenizer.chat_template` could crash
/// `tableseek`. `ChatTemplate::new` now refuses any template that could store a namespace inside a
/// namespace (`engine/chat_namespace.rs`). Inputs: `fuzz/crashes/chat_template/`.
#[test]
fn chat_template_self_referencing_namespace_is_an_error() {
    let messages = [ChatMessage::user("hi")];
    for source in [
        "{% set ns = namespace() %}{% set ns.n = ns %}{{ ns }}",
        "{% set ns = namespace() %}{% set ns.n = [ns] %}{{ ns.n }}",
        "{% set ns = namespace() %}{% set ns.n = ns %}{{ ns | tojson }}",
    ] {
        match ChatTemplate::new(source, None, None) {
            Err(err) => assert!(err.to_string().contains("namespace"), "{source}: {err}"),
            Ok(template) => panic!(
                "{source}: accepted, renders {:?}",
                template
                    .render(&messages, &TemplateOptions::default())
                    .is_ok()
            ),
        }
    }
    for crash in std::fs::read_dir(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fuzz/crashes/chat_template"
    ))
    .expect("the committed crash inputs")
    {
        let path = crash.expect("a directory entry").path();
        let bytes = std::fs::read(&path).expect("a crash input");
        // The fuzz target's layout: template source, NUL, then `role<TAB>content` lines.
        let source_end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        let source = String::from_utf8_lossy(&bytes[..source_end]);
        if let Ok(template) = ChatTemplate::new(source.as_ref(), None, None) {
            let _ = template.render(&messages, &TemplateOptions::default());
        }
    }
}

/// fuzz target `sql_guard` (a hang): `printf` with a huge width built a 1.4 GB string in 9.5 s
/// although the guard's time limit was 200 ms (the progress handler cannot interrupt one step).
/// Strings, blobs and rows are now capped at 64 MiB, so such a query fails at once.
#[test]
fn sql_huge_string_is_a_quick_error() {
    let row = |cells: &[&str]| cells.iter().map(|c| c.to_string()).collect::<Vec<_>>();
    let table = Table {
        id: "cities.csv".into(),
        source_format: SourceFormat::Csv,
        header: row(&["name", "population"]),
        rows: vec![row(&["Canberra", "431,380"]), row(&["Lyon", "522 250"])],
        meta: TableMeta::default(),
    };
    let db = Database::new(&[(&table, "cities")]).unwrap();
    let limits = QueryLimits {
        timeout: Duration::from_millis(200),
        max_rows: 16,
    };
    for sql in [
        "SELECT printf('%6666666666666666666666666666666.3f', population / 7.0)- upper(name) FROM cities",
        "SELECT length(printf('%999999999d', 1))",
        "SELECT zeroblob(1000000000)",
    ] {
        let started = Instant::now();
        assert!(db.query(sql, &limits).is_err(), "{sql}");
        assert!(started.elapsed() < Duration::from_secs(2), "{sql}: {:?}", started.elapsed());
    }
    assert_eq!(
        db.query("SELECT name FROM cities", &limits)
            .unwrap()
            .rows
            .len(),
        2
    );
}

/// fuzz target `grep_pattern` (3 hangs): a counted repetition of a large class, such as
/// `\w{100100}` or `\bS\w{12345}{3}w+o\b`, took 6 s to refuse, since the NFA builder ran until
/// the 64 MB size limit, once for the set and again for the pattern alone. Patterns whose
/// repetitions unroll past 200,000 units are now refused from the syntax, before any automaton.
/// Inputs: `fuzz/crashes/grep_pattern/` (one pattern per line, as the target reads them).
#[test]
fn grep_pattern_huge_repetitions_are_refused_quickly() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/crashes/grep_pattern");
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("the committed hang inputs")
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    inputs.sort();
    assert_eq!(inputs.len(), 3);
    for path in inputs {
        let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
        let patterns: Vec<String> = text.lines().map(str::to_string).collect();
        let started = Instant::now();
        let set = tableseek::grep::PatternSet::compile(&patterns);
        let _ = set.matches("Lyon 2148000 Sxxxwo abc");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{}: {:?}",
            path.display(),
            started.elapsed()
        );
        assert!(
            set.warnings().iter().any(|w| w.contains("too large")),
            "{}: {:?}",
            path.display(),
            set.warnings()
        );
    }
    // An ordinary pattern beside a refused one still matches, at its own index.
    let set =
        tableseek::grep::PatternSet::compile(&[r"\w{100100}".to_string(), "lyon".to_string()]);
    assert_eq!(set.matches("Lyon"), [1]);
}
