//! TabFact's `#`-separated `.html.csv` files, through `Corpus::load` (the `.csv` sniffer decides
//! between CSV, TSV and TabFact). Asserted: the text the corpus keeps for grep is exactly the
//! serialization of the table it parses back to.
use tableseek::corpus::{Corpus, LoadOptions};

fn main() {
    tableseek_fuzz::single_threaded();
    afl::fuzz!(|data: &[u8]| {
        let path = tableseek_fuzz::write_input("corpus_tabfact", "t.html.csv", data);
        if let Ok((corpus, _report)) = Corpus::load(&path, &LoadOptions::default()) {
            tableseek_fuzz::assert_texts_are_serialized_tables(&corpus);
        }
    });
}
