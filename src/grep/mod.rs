//! The grep stage: pattern compilation, table scoring, matched rows and previews.
