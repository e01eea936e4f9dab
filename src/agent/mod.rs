//! The TableSeek loop: pattern generation, refine rounds, answerability check with fallback.
