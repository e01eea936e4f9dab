//! HTML tables: `Corpus::load` on an `.html` file and the HTML text reader (`parse_text`), then
//! every table serialized back to HTML.
use tableseek::corpus::{parse_text, serialize, Corpus, LoadOptions, TextFormat};

fn main() {
    tableseek_fuzz::single_threaded();
    afl::fuzz!(|data: &[u8]| {
        let path = tableseek_fuzz::write_input("corpus_html", "t.html", data);
        if let Ok((corpus, _report)) = Corpus::load(&path, &LoadOptions::default()) {
            for table in corpus.tables() {
                let _ = serialize(table, TextFormat::Html);
            }
        }
        if let Ok(text) = std::str::from_utf8(data) {
            if let Ok(tables) = parse_text(text, TextFormat::Html) {
                for table in &tables {
                    let _ = serialize(table, TextFormat::Html);
                }
            }
        }
    });
}
