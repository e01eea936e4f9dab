//! CSV/TSV loading (`Corpus::load` on a `.csv` file, whose dialect is sniffed, or a `.tsv` file;
//! the first byte picks which), then every loaded table serialized in each text format, and the
//! CSV text reader (`parse_text`). Asserted: the text the corpus keeps for grep is exactly the
//! serialization of the table it parses back to (the loader's canonical-CSV fast path).
use tableseek::corpus::{parse_text, serialize, Corpus, LoadOptions, TextFormat};

fn main() {
    tableseek_fuzz::single_threaded();
    afl::fuzz!(|data: &[u8]| {
        let Some((&selector, body)) = data.split_first() else {
            return;
        };
        let name = if selector & 1 == 0 { "t.csv" } else { "t.tsv" };
        let path = tableseek_fuzz::write_input("corpus_delimited", name, body);
        if let Ok((corpus, _report)) = Corpus::load(&path, &LoadOptions::default()) {
            tableseek_fuzz::assert_texts_are_serialized_tables(&corpus);
            for table in corpus.tables() {
                for format in [TextFormat::Markdown, TextFormat::Html] {
                    let _ = serialize(table, format);
                }
            }
        }
        if let Ok(text) = std::str::from_utf8(body) {
            let _ = parse_text(text, TextFormat::Csv);
        }
    });
}
