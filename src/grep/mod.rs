//! The grep stage: pattern compilation, table scoring, and previews.
//!
//! `Score(T) = (1/|P|) Σ_p 1[p occurs in T]`, each pattern a case-insensitive regex over the table's
//! serialization ([`crate::corpus::Corpus::text`]). All patterns are tested in one pass per table (one
//! multi-pattern automaton, the engine behind `regex::RegexSet`), tables in parallel (rayon). [`rank`]
//! sorts by score, highest first; equal scores keep corpus order, which for a loaded corpus is the
//! walk order of file paths (names sorted per directory). [`preview`] cuts what a model sees of a
//! candidate.

mod pattern;
mod preview;
mod rank;

pub use pattern::PatternSet;
pub use preview::{preview, Evidence, PreviewOptions};
pub use rank::{rank, Hit};
