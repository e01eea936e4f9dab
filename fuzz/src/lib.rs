//! Helpers shared by the fuzz targets in `src/bin/`.
//!
//! Several surfaces (the corpus loaders, the GGUF reader, `tokenizer.json`, the dataset reader) are
//! only reachable through a file path, so their targets write the input to a scratch file first.
//! One fuzzer process runs one input at a time, so a fixed path per target is safe; the directory is
//! `$TABLESEEK_FUZZ_TMP` (scripts/fuzz.sh points it at a tmpfs when there is one) or
//! `<temp dir>/tableseek-fuzz/<target>`.

use std::path::PathBuf;

/// The scratch directory of `target`, created on first use.
pub fn scratch_dir(target: &str) -> PathBuf {
    let dir = match std::env::var_os("TABLESEEK_FUZZ_TMP") {
        Some(dir) => PathBuf::from(dir),
        None => std::env::temp_dir().join("tableseek-fuzz").join(target),
    };
    std::fs::create_dir_all(&dir).expect("creating the fuzz scratch directory");
    dir
}

/// Writes `data` to `<scratch dir of target>/<file_name>` and returns the path.
pub fn write_input(target: &str, file_name: &str, data: &[u8]) -> PathBuf {
    let path = scratch_dir(target).join(file_name);
    std::fs::write(&path, data).expect("writing the fuzz input file");
    path
}

/// One worker thread for rayon (the corpus loader and the grep ranker use it): a fuzzer gets one
/// core, and a single-threaded run is what makes a crash reproducible. Call first thing in `main`.
pub fn single_threaded() {
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        std::env::set_var("RAYON_NUM_THREADS", "1");
    }
}

/// Splits `data` at the first NUL byte: `(before, Some(after))`, or `(data, None)` without one.
pub fn split_nul(data: &[u8]) -> (&[u8], Option<&[u8]>) {
    match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], Some(&data[at + 1..])),
        None => (data, None),
    }
}

/// The corpus's documented invariant: the text kept for each table (what grep searches) is exactly
/// `serialize(table, text_format)`. For delimited files the loader writes canonical CSV without
/// building the table and parses the cells back from that text on demand, so this checks that the
/// fast path and the parser agree.
pub fn assert_texts_are_serialized_tables(corpus: &tableseek::corpus::Corpus) {
    for i in 0..corpus.len() {
        let table = corpus.table(i);
        let again = tableseek::corpus::serialize(table, corpus.text_format(i));
        assert_eq!(
            corpus.text(i),
            again,
            "table {:?}: its corpus text is not the serialization of its parsed cells",
            corpus.id(i)
        );
    }
}
