//! Compiling grep patterns once into a matcher that tests all of them in a single pass over a text.

use regex::{Regex, RegexBuilder};
use regex_automata::meta;
use regex_automata::util::syntax;
use regex_automata::{Input, MatchKind};

/// Generous compile limits: a model may write long alternations, and a pattern that does not fit is
/// lost from the score. The default 10 MB is easy to hit with Unicode case folding.
const SIZE_LIMIT: usize = 64 << 20;
/// Most "units" (literal bytes, class ranges) a pattern may expand to once its counted
/// repetitions are unrolled, estimated from the syntax before any automaton is built. Building
/// `\w{100100}` runs for seconds before the NFA size limit stops it (twice: the set, then the
/// pattern alone), which the fuzzer found; 200,000 units is far beyond what a table pattern needs
/// and well inside what compiles in milliseconds.
const EXPANSION_LIMIT: u64 = 200_000;
/// A pattern that can never match: the stand-in for one refused before compiling, which keeps
/// the set's pattern indices in place.
const NEVER_MATCHES: &str = r"[^\s\S]";
/// Ceiling of the lazy DFA's state cache (per thread; it grows only as far as a search needs).
const CACHE_LIMIT: usize = 8 << 20;

/// Patterns as grep applies them: case-insensitive regexes, `^`/`$` at line boundaries (each table row is
/// a line), a pattern that is not a valid regex matched as literal text, empty patterns dropped.
#[derive(Debug, Clone)]
pub struct PatternSet {
    patterns: Vec<String>,
    warnings: Vec<String>,
    matcher: Matcher,
}

#[derive(Debug, Clone)]
enum Matcher {
    Empty,
    /// All patterns in one automaton: one scan per text. This is what `regex::RegexSet` wraps, built
    /// directly so that the literal prefilter can be turned off: in an all-matches search over
    /// case-folded literals it fires constantly and made scoring twice as slow as the bare lazy DFA.
    Set(meta::Regex),
    /// Only when the combined set exceeds the size limit: one scan per pattern. `None` never matches.
    Each(Vec<Option<Regex>>),
}

impl PatternSet {
    /// Never fails. Patterns that are empty (or only whitespace) are dropped and exact duplicates are
    /// kept once, so [`PatternSet::patterns`] may be shorter than the input; indices in
    /// [`super::Hit::matched`] refer to it. Every such change is listed in [`PatternSet::warnings`].
    pub fn compile(patterns: &[String]) -> PatternSet {
        let mut kept: Vec<String> = Vec::new();
        let mut sources: Vec<String> = Vec::new();
        let mut warnings = Vec::new();
        for pattern in patterns {
            if pattern.trim().is_empty() {
                if !pattern.is_empty() {
                    warnings.push(format!("pattern {pattern:?} is only whitespace; ignored"));
                }
                continue;
            }
            if kept.contains(pattern) {
                warnings.push(format!("pattern {pattern:?} given twice; counted once"));
                continue;
            }
            // Only the syntax is checked here (cheap); the automaton is built once, for the whole set.
            let syntax = regex_syntax::ParserBuilder::new()
                .case_insensitive(true)
                .multi_line(true)
                .build()
                .parse(pattern);
            let source = match syntax {
                Ok(hir) if expanded_size(&hir) > EXPANSION_LIMIT => {
                    warnings.push(format!(
                        "pattern {pattern:?} is too large: its repetitions unroll to over \
{EXPANSION_LIMIT} units; it matches nothing"
                    ));
                    NEVER_MATCHES.to_string()
                }
                Ok(_) => pattern.clone(),
                Err(err) => {
                    let reason = err.to_string();
                    let reason = reason.lines().last().unwrap_or("invalid").trim();
                    warnings.push(format!(
                        "pattern {pattern:?} is not a valid regex ({reason}); matched as a literal"
                    ));
                    regex::escape(pattern)
                }
            };
            kept.push(pattern.clone());
            sources.push(source);
        }
        let matcher = if sources.is_empty() {
            Matcher::Empty
        } else {
            let set = meta::Builder::new()
                .configure(
                    meta::Config::new()
                        .match_kind(MatchKind::All)
                        .auto_prefilter(false)
                        .nfa_size_limit(Some(SIZE_LIMIT))
                        .hybrid_cache_capacity(CACHE_LIMIT),
                )
                .syntax(
                    syntax::Config::new()
                        .case_insensitive(true)
                        .multi_line(true),
                )
                .build_many(&sources);
            match set {
                Ok(set) => Matcher::Set(set),
                Err(err) => {
                    tracing::warn!(%err, "pattern set too large for one automaton; matching one by one");
                    let each = sources
                        .iter()
                        .zip(&kept)
                        .map(|(source, pattern)| {
                            let compiled = builder(source).build().ok();
                            if compiled.is_none() {
                                warnings.push(format!(
                                    "pattern {pattern:?} is too large to compile; it matches nothing"
                                ));
                            }
                            compiled
                        })
                        .collect();
                    Matcher::Each(each)
                }
            }
        };
        PatternSet {
            patterns: kept,
            warnings,
            matcher,
        }
    }

    /// The patterns in effect, in input order.
    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }

    /// What `compile` changed: literal fallbacks, dropped empties, duplicates.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    pub fn len(&self) -> usize {
        self.patterns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// Indices (ascending) of the patterns that occur in `text`.
    pub fn matches(&self, text: &str) -> Vec<usize> {
        match &self.matcher {
            Matcher::Empty => Vec::new(),
            Matcher::Set(set) => {
                let mut found = regex_automata::PatternSet::new(set.pattern_len());
                set.which_overlapping_matches(&Input::new(text), &mut found);
                found.iter().map(|p| p.as_usize()).collect()
            }
            Matcher::Each(each) => each
                .iter()
                .enumerate()
                .filter(|(_, re)| re.as_ref().is_some_and(|re| re.is_match(text)))
                .map(|(i, _)| i)
                .collect(),
        }
    }
}

/// The size of `hir` with counted repetitions unrolled (an unbounded one counted as its minimum
/// plus one), in literal bytes and class ranges; saturating.
fn expanded_size(hir: &regex_syntax::hir::Hir) -> u64 {
    use regex_syntax::hir::{Class, HirKind};
    match hir.kind() {
        HirKind::Empty | HirKind::Look(_) => 1,
        HirKind::Literal(literal) => literal.0.len() as u64,
        HirKind::Class(Class::Unicode(class)) => class.ranges().len().max(1) as u64,
        HirKind::Class(Class::Bytes(class)) => class.ranges().len().max(1) as u64,
        HirKind::Repetition(repetition) => {
            let copies =
                u64::from(repetition.max.unwrap_or(repetition.min).max(repetition.min)) + 1;
            copies.saturating_mul(expanded_size(&repetition.sub))
        }
        HirKind::Capture(capture) => expanded_size(&capture.sub),
        HirKind::Concat(parts) | HirKind::Alternation(parts) => parts
            .iter()
            .map(expanded_size)
            .fold(0u64, u64::saturating_add),
    }
}

fn builder(pattern: &str) -> RegexBuilder {
    let mut builder = RegexBuilder::new(pattern);
    builder
        .case_insensitive(true)
        .multi_line(true)
        .size_limit(SIZE_LIMIT)
        .dfa_size_limit(SIZE_LIMIT);
    builder
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(patterns: &[&str]) -> PatternSet {
        PatternSet::compile(&patterns.iter().map(|p| p.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn invalid_regex_is_a_literal() {
        let set = set(&["a(b", "x+"]);
        assert_eq!(set.len(), 2);
        assert_eq!(set.warnings().len(), 1);
        assert!(set.warnings()[0].contains("\"a(b\""));
        assert_eq!(set.matches("zzA(Bzz"), vec![0]);
        assert_eq!(set.matches("ab"), Vec::<usize>::new());
        assert_eq!(set.matches("XXX a(b"), vec![0, 1]);
    }

    #[test]
    fn empties_and_duplicates_are_dropped() {
        let set = set(&["", "  ", "a", "a", "b"]);
        assert_eq!(set.patterns(), ["a", "b"]);
        assert_eq!(set.warnings().len(), 2);
    }

    #[test]
    fn anchors_work_per_line() {
        let set = set(&["^1,", "x$"]);
        assert_eq!(set.matches("a,b\n1,x\n"), vec![0, 1]);
    }
}
