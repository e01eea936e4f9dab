//! The bad-input suite: each case ends in a clear message (naming the file and what is wrong
//! where that helps) or in a sensible load, never in a panic, and the rest of the work goes on.
//!
//! Cases that live next to the code they exercise and are not repeated here:
//! - a GGUF cut short, so a tensor runs past the end of the file, and an unsupported tensor type:
//!   `engine_errors::truncated_weight_files`, `engine_errors::unsupported_quant_type`;
//! - a prompt over the context window: `engine_errors::prompt_longer_than_context`;
//! - a run directory whose `queries.jsonl` has a torn last line, or a corrupt middle line:
//!   `eval_run::a_killed_run_resumes_to_the_same_summary`,
//!   `eval_run::a_corrupt_middle_line_is_an_error_and_nothing_is_lost`.

use std::path::{Path, PathBuf};

use candle_core::quantized::{gguf_file, QTensor};

use crate::engine_errors::rewrite_gguf;
use candle_core::Device;
use tableseek::agent::testing::ScriptedLlm;
use tableseek::agent::CorpusSpace;
use tableseek::corpus::{Corpus, CorpusError, LoadOptions, LoadReport};
use tableseek::engine::{load_tokenizer, DeviceMap, EngineError, Model, ModelSpec};
use tableseek::eval::rundir::QUERIES_FILE;
use tableseek::eval::{load_queries, DatasetError, EvalOptions, Evaluator, Method, RunDir};
use tableseek::grep::{self, PatternSet, PreviewOptions};

fn load(dir: &Path, options: &LoadOptions) -> (Corpus, LoadReport) {
    Corpus::load(dir, options).unwrap()
}

fn write(dir: &Path, name: &str, bytes: impl AsRef<[u8]>) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn reasons_for(report: &LoadReport, name: &str) -> Vec<String> {
    report
        .skipped
        .iter()
        .filter(|s| s.path.ends_with(name))
        .map(|s| s.reason.clone())
        .collect()
}

/// The folder a new user might point the tool at: one good table among odd files.
#[test]
fn a_folder_of_odd_files_loads_what_it_can_and_says_what_it_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write(dir, "good.csv", "city,country\nParis,France\n");
    // Latin-1: `café` is one byte 0xE9 short of valid UTF-8.
    write(
        dir,
        "latin1.csv",
        b"name,place\nJos\xe9,caf\xe9 du coin\nRen\xe9e,h\xf4tel\n",
    );
    let mut utf16 = vec![0xFF, 0xFE];
    for unit in "drink,price\ncaf\u{e9},3\n".encode_utf16() {
        utf16.extend(unit.to_le_bytes());
    }
    write(dir, "utf16.csv", utf16);
    write(
        dir,
        "blob.csv",
        [0x7f, b'E', b'L', b'F', 2, 1, 1, 0, 0, 0, 0xff, 0x10],
    );
    write(dir, "empty.csv", "");
    write(dir, "header_only.csv", "a,b,c\n");
    write(dir, "dup_headers.csv", "a,a,,b\n1,2,3,4\n");
    write(dir, "ragged.csv", "a,b,c\n1,2\n1,2,3,4\n");
    write(
        dir,
        "unclosed.html",
        "<html><table><tr><th>k<th>v<tr><td>x<td>y",
    );

    let (corpus, report) = load(dir, &LoadOptions::default());
    let ids: Vec<&str> = corpus.tables().iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "dup_headers.csv",
            "good.csv",
            "latin1.csv",
            "ragged.csv",
            "unclosed.html",
            "utf16.csv"
        ]
    );
    let table = |id: &str| corpus.table(corpus.index_of(id).unwrap());
    assert_eq!(table("latin1.csv").rows[0][1], "café du coin");
    assert_eq!(table("utf16.csv").rows[0][0], "café");
    assert_eq!(table("dup_headers.csv").header.len(), 4);
    // Ragged rows are kept as written (the serializers and SQL pad or cut them): nothing lost.
    assert_eq!(
        table("ragged.csv").rows,
        [vec!["1", "2"], vec!["1", "2", "3", "4"]]
    );
    assert_eq!(table("unclosed.html").rows, [["x", "y"]]);
    let transcoded: Vec<&str> = report
        .transcoded
        .iter()
        .map(|(path, _)| path.file_name().unwrap().to_str().unwrap())
        .collect();
    assert_eq!(transcoded, ["latin1.csv", "utf16.csv"]);
    let binary = reasons_for(&report, "blob.csv");
    assert!(
        binary.len() == 1 && binary[0].contains("binary"),
        "{binary:?}"
    );
    assert_eq!(report.empty_tables, 2, "the empty and the header-only file");
}

/// One 50 MB cell: it loads under the default limit, its previews stay short, and a lower
/// `max_table_bytes` skips it by name while the other table loads.
#[test]
fn a_fifty_megabyte_cell_loads_with_short_previews_or_is_skipped_by_the_table_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut huge = String::with_capacity(50 << 20);
    huge.push_str("name,notes\nbig,");
    while huge.len() < 50 << 20 {
        huge.push_str("lorem ipsum ");
    }
    huge.push_str("needle\n");
    write(dir, "huge.csv", &huge);
    write(dir, "small.csv", "name,notes\nsmall,tiny\n");

    let (corpus, report) = load(dir, &LoadOptions::default());
    assert_eq!(corpus.len(), 2, "{:?}", report.skipped);
    let patterns = PatternSet::compile(&["needle".to_string()]);
    let hits = grep::rank(&corpus, &patterns);
    let huge_index = corpus.index_of("huge.csv").unwrap();
    assert_eq!(hits[0].table, huge_index);
    let preview = grep::preview(&corpus, huge_index, &patterns, &PreviewOptions::default());
    assert!(preview.len() < 20_000, "preview of {} bytes", preview.len());

    let (corpus, report) = load(dir, &LoadOptions::default().max_table_bytes(1 << 20));
    assert_eq!(corpus.len(), 1);
    let reasons = reasons_for(&report, "huge.csv");
    assert!(
        reasons.len() == 1
            && reasons[0].contains("huge.csv")
            && reasons[0].contains("--max-table-bytes"),
        "{reasons:?}"
    );
}

#[test]
fn a_hundred_thousand_columns_and_a_million_rows_load() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let header: Vec<String> = (0..100_000).map(|i| format!("c{i}")).collect();
    let row: Vec<String> = (0..100_000).map(|i| i.to_string()).collect();
    write(
        dir,
        "wide.csv",
        format!("{}\n{}\n", header.join(","), row.join(",")),
    );
    let mut tall = String::from("id,value\n");
    for i in 0..1_000_000 {
        tall.push_str(&format!("{i},v{i}\n"));
    }
    write(dir, "tall.csv", tall);

    let (corpus, report) = load(dir, &LoadOptions::default());
    assert!(report.skipped.is_empty(), "{:?}", report.skipped);
    let wide = corpus.table(corpus.index_of("wide.csv").unwrap());
    assert_eq!(wide.header.len(), 100_000);
    assert_eq!(wide.rows[0][99_999], "99999");
    let tall_index = corpus.index_of("tall.csv").unwrap();
    assert_eq!(corpus.table(tall_index).rows.len(), 1_000_000);
    let patterns = PatternSet::compile(&["v999999".to_string()]);
    assert_eq!(grep::rank(&corpus, &patterns)[0].table, tall_index);
    for table in 0..corpus.len() {
        let preview = grep::preview(&corpus, table, &patterns, &PreviewOptions::default());
        assert!(preview.len() < 20_000, "preview of {} bytes", preview.len());
    }
}

/// A corpus over the cap is refused before anything is read, with the sizes and the flag.
#[test]
fn a_corpus_over_the_memory_cap_is_refused_up_front() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), "a.csv", "x,y\n1,2\n");
    write(tmp.path(), "b.csv", "x,y\n3,4\n");
    let err = Corpus::load(
        tmp.path(),
        &LoadOptions::default().max_corpus_bytes(Some(10)),
    )
    .err()
    .unwrap();
    assert!(
        matches!(
            err,
            CorpusError::TooLarge {
                bytes: 16,
                limit: 10,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("--max-corpus-bytes"), "{err}");
    let (corpus, _) = load(
        tmp.path(),
        &LoadOptions::default().max_corpus_bytes(Some(16)),
    );
    assert_eq!(corpus.len(), 2);
}

/// Regexes that would compile into huge automata stay within the size limit: they are searched
/// literally, with a warning, and a search over them is quick.
#[test]
fn an_exploding_regex_is_held_to_the_size_limit() {
    let exploding = [
        r"(\w{100}){100}{100}".to_string(),
        r"((a+)+)+(b*)*[\p{L}\p{N}]{500}{200}".to_string(),
    ];
    let set = PatternSet::compile(&exploding);
    assert_eq!(set.warnings().len(), 2, "{:?}", set.warnings());
    for warning in set.warnings() {
        assert!(warning.contains("too large"), "{warning}");
    }
    let corpus = Corpus::from_tables(vec![]);
    assert!(grep::rank(&corpus, &set).is_empty());
    let text = "a".repeat(100_000);
    let started = std::time::Instant::now();
    assert!(set.matches(&text).is_empty());
    assert!(started.elapsed().as_secs() < 5);
}

/// A model may stop inside a UTF-8 character or emit bytes that form none: the text stream
/// holds the partial character back, `finish` releases it as U+FFFD, and the agent's parsers
/// read that text as unparseable rather than failing.
#[test]
fn invalid_utf8_in_model_output_becomes_replacement_characters() {
    let Some(gguf) = crate::common::existing(crate::common::smollm2_gguf()) else {
        return;
    };
    let tokenizer = load_tokenizer(&gguf, None).unwrap();
    // Byte-level BPE has a token per byte: find one that decodes alone to U+FFFD (a lead or
    // continuation byte, or one never valid in UTF-8).
    let lone_bytes: Vec<u32> = (0..tokenizer.vocab_size() as u32)
        .filter(|&id| tokenizer.decode(&[id], false).ok().as_deref() == Some("\u{FFFD}"))
        .take(2)
        .collect();
    assert_eq!(lone_bytes.len(), 2, "no single-byte tokens found");
    let (lead, invalid) = (lone_bytes[0], lone_bytes[1]);
    let mut stream = tableseek::engine::TextStream::new(true);
    assert_eq!(stream.push(&tokenizer, lead).unwrap(), None);
    let rest = stream.finish(&tokenizer).unwrap().unwrap_or_default();
    assert!(rest.contains('\u{FFFD}'), "{rest:?}");
    let mut stream = tableseek::engine::TextStream::new(true);
    stream.push(&tokenizer, invalid).unwrap();
    stream.finish(&tokenizer).unwrap();
    let text = stream.text().to_string();
    assert!(text.contains('\u{FFFD}'), "{text:?}");
    let refine = tableseek::agent::parse::parse_refine(&text, 3, 1);
    assert!(
        !matches!(
            refine.decision,
            tableseek::agent::parse::RefineDecision::Choose(_)
        ),
        "{refine:?}"
    );
    // Whatever patterns the parser takes from it compile (a U+FFFD is a literal like any other).
    let patterns = tableseek::agent::parse::parse_patterns(&text).unwrap_or_default();
    assert!(PatternSet::compile(&patterns).warnings().is_empty());
}

fn tiny_llama() -> Option<PathBuf> {
    crate::common::existing(
        crate::common::shared_dir().join("reference/tiny-models/tiny-llama/tiny-llama-f32.gguf"),
    )
}

fn load_model(path: &Path) -> Result<Model, EngineError> {
    Model::load(
        &ModelSpec::Path(path.to_path_buf()),
        &DeviceMap::cpu(),
        None,
    )
}

/// A tensor of the wrong shape, and a metadata value of the wrong type, are named in the error.
#[test]
fn a_gguf_with_a_wrong_shape_or_a_wrongly_typed_value_is_named() {
    let Some(src) = tiny_llama() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let reshaped = tmp.path().join("reshaped.gguf");
    rewrite_gguf(&src, &reshaped, |_, tensors| {
        for (name, tensor) in tensors.iter_mut() {
            if name == "blk.0.ffn_up.weight" {
                let dense = tensor.dequantize(&Device::Cpu).unwrap();
                let (rows, cols) = dense.dims2().unwrap();
                // Fresh storage: quantize reads the whole buffer, not the narrowed view.
                let values: Vec<f32> = dense
                    .narrow(0, 0, rows / 2)
                    .unwrap()
                    .flatten_all()
                    .unwrap()
                    .to_vec1()
                    .unwrap();
                let cut =
                    candle_core::Tensor::from_vec(values, (rows / 2, cols), &Device::Cpu).unwrap();
                assert_eq!(cut.dims2().unwrap(), (rows / 2, cols));
                *tensor = QTensor::quantize(&cut, tensor.dtype()).unwrap();
            }
        }
    });
    let message = load_model(&reshaped).err().unwrap().to_string();
    assert!(
        message.contains("blk.0.ffn_up.weight") && message.contains("shape"),
        "{message}"
    );

    let mistyped = tmp.path().join("mistyped.gguf");
    rewrite_gguf(&src, &mistyped, |metadata, _| {
        for (key, value) in metadata.iter_mut() {
            if key == "llama.block_count" {
                *value = gguf_file::Value::String("two".into());
            }
        }
    });
    let message = load_model(&mistyped).err().unwrap().to_string();
    assert!(message.contains("block_count"), "{message}");
}

#[test]
fn a_tokenizer_json_without_a_model_names_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let path = write(
        tmp.path(),
        "tokenizer.json",
        r#"{"version": "1.0", "added_tokens": []}"#,
    );
    let err = load_tokenizer(tmp.path(), Some(&path)).err().unwrap();
    let message = err.to_string();
    assert!(message.contains("tokenizer.json"), "{message}");
}

#[test]
fn a_dataset_line_that_is_not_json_is_named_by_line() {
    let tmp = tempfile::tempdir().unwrap();
    let path = write(
        tmp.path(),
        "queries.jsonl",
        "{\"qid\":\"a\",\"query\":\"q\",\"task\":\"tableqa\",\"answers\":[\"x\"],\"gold_tables\":[\"t.csv\"]}\nnot json at all\n",
    );
    match load_queries(&path) {
        Err(DatasetError::Invalid { line, .. }) => assert_eq!(line, 2),
        other => panic!("expected a line-2 error, got {other:?}"),
    }
}

/// A query whose gold table is not in the corpus still runs and scores as a miss; the other
/// queries are unaffected.
#[test]
fn a_gold_table_missing_from_the_corpus_scores_as_a_miss() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus_dir = tmp.path().join("corpus");
    std::fs::create_dir(&corpus_dir).unwrap();
    write(
        &corpus_dir,
        "capitals.csv",
        "country,capital\nAustralia,Canberra\n",
    );
    let dataset = write(
        tmp.path(),
        "queries.jsonl",
        concat!(
            "{\"qid\":\"here\",\"query\":\"What is the capital of Australia?\",\"task\":\"tableqa\",\"answers\":[\"Canberra\"],\"gold_tables\":[\"capitals.csv\"]}\n",
            "{\"qid\":\"gone\",\"query\":\"What is the capital of Australia?\",\"task\":\"tableqa\",\"answers\":[\"Canberra\"],\"gold_tables\":[\"deleted.csv\"]}\n",
        ),
    );
    let queries = load_queries(&dataset).unwrap();
    let (corpus, _) = load(&corpus_dir, &LoadOptions::default());
    let space = CorpusSpace::new(&corpus);
    let options = EvalOptions {
        timings: false,
        ..EvalOptions::default()
    };
    let evaluator = Evaluator::new(Method::Bm25, &space, corpus.len(), options).unwrap();
    let mut llm = ScriptedLlm::new(["Answer: Canberra", "Answer: Canberra"]);
    let here = evaluator.run_query(&mut llm, &queries[0]).unwrap();
    let gone = evaluator.run_query(&mut llm, &queries[1]).unwrap();
    assert_eq!(here.metrics.r_all, Some(true));
    assert_eq!(gone.metrics.r_all, Some(false));
    assert_eq!(gone.metrics.em, Some(true), "the answer is still scored");
}

/// A `queries.jsonl` whose last line is binary garbage without a newline (a kill, or a disk
/// that filled) resumes past it; the same garbage followed by a newline is refused by line.
#[test]
fn a_run_directory_with_a_garbage_tail_resumes_or_is_refused_by_line() {
    use tableseek::eval::{RunConfig, RunError};
    let tmp = tempfile::tempdir().unwrap();
    let config = RunConfig {
        tableseek_version: "test".into(),
        git_revision: None,
        model_sha256: None,
        options: serde_json::json!({ "method": "bm25" }),
        limit: None,
        command_line: Vec::new(),
    };
    let dir = tmp.path().join("run");
    drop(RunDir::open(&dir, &config, false).unwrap());
    let path = dir.join(QUERIES_FILE);
    std::fs::write(&path, b"\x00\xff\xfe{\"qid\":").unwrap();
    let run = RunDir::open(&dir, &config, true).unwrap();
    assert!(run.finished().is_empty());
    drop(run);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        b"",
        "the torn tail is cut off"
    );

    std::fs::write(&path, b"\x00\xff\xfe\n").unwrap();
    match RunDir::open(&dir, &config, true) {
        Err(RunError::CorruptRecord { line: 1, .. }) => {}
        Err(other) => panic!("expected CorruptRecord on line 1, got {other}"),
        Ok(_) => panic!("a corrupt complete line was accepted"),
    }
    assert_eq!(
        std::fs::read(&path).unwrap(),
        b"\x00\xff\xfe\n",
        "nothing lost"
    );
}
