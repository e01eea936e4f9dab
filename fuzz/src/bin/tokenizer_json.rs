//! Loading a Hugging Face `tokenizer.json` (`engine::Tokenizer::from_file`), then a round trip of a
//! fixed text through it.
use tableseek::engine::Tokenizer;

fn main() {
    tableseek_fuzz::single_threaded();
    afl::fuzz!(|data: &[u8]| {
        let path = tableseek_fuzz::write_input("tokenizer_json", "tokenizer.json", data);
        let Ok(tokenizer) = Tokenizer::from_file(&path) else {
            return;
        };
        for parse_special in [true, false] {
            if let Ok(ids) = tokenizer.encode("Hello <|im_start|>wörld 42\n\tÅ", parse_special) {
                let _ = tokenizer.decode(&ids, true);
                let _ = tokenizer.decode(&ids, false);
            }
        }
        let _ = tokenizer.decode(&[0, 1, 2, u32::MAX], false);
    });
}
