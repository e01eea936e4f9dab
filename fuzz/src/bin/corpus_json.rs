//! JSON and JSON Lines tables: `Corpus::load` on a `.json` or `.jsonl` file (the first byte picks
//! which), then every loaded table serialized as CSV.
use tableseek::corpus::{serialize, Corpus, LoadOptions, TextFormat};

fn main() {
    tableseek_fuzz::single_threaded();
    afl::fuzz!(|data: &[u8]| {
        let Some((&selector, body)) = data.split_first() else {
            return;
        };
        let name = if selector & 1 == 0 {
            "t.json"
        } else {
            "t.jsonl"
        };
        let path = tableseek_fuzz::write_input("corpus_json", name, body);
        if let Ok((corpus, _report)) = Corpus::load(&path, &LoadOptions::default()) {
            for table in corpus.tables() {
                let _ = serialize(table, TextFormat::Csv);
            }
        }
    });
}
