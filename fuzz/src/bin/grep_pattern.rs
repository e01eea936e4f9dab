//! Pattern compilation (`grep::PatternSet::compile`: model-written regexes, literal fallback):
//! patterns are the input's lines. The set is matched against a fixed table text and against the
//! input itself; matches must be ascending indices of kept patterns.
use tableseek::grep::PatternSet;

const TABLE: &str = "city,country,population\nCanberra,Australia,\"431,380\"\nLyon,France,522 250\nSão Paulo,Brasil,12.3M\n";

fn main() {
    tableseek_fuzz::single_threaded();
    afl::fuzz!(|data: &[u8]| {
        let text = String::from_utf8_lossy(data);
        let patterns: Vec<String> = text.lines().map(str::to_string).collect();
        let set = PatternSet::compile(&patterns);
        assert!(set.len() <= patterns.len());
        for haystack in [TABLE, &text] {
            let matched = set.matches(haystack);
            assert!(matched.windows(2).all(|w| w[0] < w[1]), "{matched:?}");
            assert!(matched.iter().all(|&i| i < set.len()), "{matched:?}");
        }
    });
}
