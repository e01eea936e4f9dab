//! Markdown pipe tables: `Corpus::load` on a `.md` file and the Markdown text reader
//! (`parse_text`), then every table serialized back to Markdown.
use tableseek::corpus::{parse_text, serialize, Corpus, LoadOptions, TextFormat};

fn main() {
    tableseek_fuzz::single_threaded();
    afl::fuzz!(|data: &[u8]| {
        let path = tableseek_fuzz::write_input("corpus_markdown", "t.md", data);
        if let Ok((corpus, _report)) = Corpus::load(&path, &LoadOptions::default()) {
            for table in corpus.tables() {
                let _ = serialize(table, TextFormat::Markdown);
            }
        }
        if let Ok(text) = std::str::from_utf8(data) {
            if let Ok(tables) = parse_text(text, TextFormat::Markdown) {
                for table in &tables {
                    let _ = serialize(table, TextFormat::Markdown);
                }
            }
        }
    });
}
