//! Answer scoring for free-form table QA: SQuAD-style normalised token F1 and exact match, with
//! numbers compared by value format rather than spelling.
//!
//! Normalisation follows the SQuAD evaluation script (lowercase, drop ASCII punctuation and the
//! articles a/an/the, collapse whitespace; identical output on text without numbers), with one
//! addition: a whitespace-separated token that reads as a decimal number is rewritten to a
//! canonical form first, so `35156.0` = `35156`, `1,234` = `1234`, `$0.50` = `.5`. Without it
//! SQuAD's punctuation stripping would turn `3.5` into `35` and `1,234.0` into `12340`, and LLM
//! answers routinely print numbers in a different format from the gold answer.

use std::sync::LazyLock;

use regex::Regex;

/// Normalised tokens of an answer.
pub fn normalize_answer(text: &str) -> Vec<String> {
    // SQuAD removes articles with `\b(a|an|the)\b`, so "the" goes even when glued to non-ASCII
    // punctuation ("the—end" -> "—end"), and the space it leaves splits the token.
    static ARTICLE: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"\b(?:a|an|the)\b").unwrap_or_else(|e| unreachable!("constant pattern: {e}"))
    });
    let mut tokens = Vec::new();
    for raw in text.to_lowercase().split_whitespace() {
        if let Some(number) = canonical_number(raw) {
            tokens.push(number);
            continue;
        }
        let word: String = raw.chars().filter(|c| !c.is_ascii_punctuation()).collect();
        let word = ARTICLE.replace_all(&word, " ");
        tokens.extend(word.split_whitespace().map(str::to_owned));
    }
    tokens
}

/// `[+-]digits[.digits]` with optional thousands commas (`1,234,567`), possibly wrapped in other
/// punctuation (`$`, `%`, `(`, a sentence's final `.`), rewritten without commas, leading zeros,
/// trailing fractional zeros, a `+` sign or a negative zero.
fn canonical_number(raw: &str) -> Option<String> {
    let core = raw
        .trim_start_matches(|c: char| c.is_ascii_punctuation() && !matches!(c, '-' | '+' | '.'))
        .trim_end_matches(|c: char| c.is_ascii_punctuation());
    let (negative, unsigned) = match core.as_bytes().first() {
        Some(b'-') => (true, &core[1..]),
        Some(b'+') => (false, &core[1..]),
        _ => (false, core),
    };
    let (int_part, frac_part) = match unsigned.split_once('.') {
        Some((int_part, frac_part)) => (int_part, Some(frac_part)),
        None => (unsigned, None),
    };
    let int_digits = plain_or_grouped_digits(int_part)?;
    if let Some(frac) = frac_part {
        if frac.is_empty() || !frac.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
    }
    if int_digits.is_empty() && frac_part.is_none() {
        return None;
    }
    let int_digits = int_digits.trim_start_matches('0');
    let frac = frac_part.unwrap_or("").trim_end_matches('0');
    let mut out = String::new();
    if negative && !(int_digits.is_empty() && frac.is_empty()) {
        out.push('-');
    }
    out.push_str(if int_digits.is_empty() {
        "0"
    } else {
        int_digits
    });
    if !frac.is_empty() {
        out.push('.');
        out.push_str(frac);
    }
    Some(out)
}

/// The digits of `1234` or `1,234`; `Some("")` for an empty integer part (`.5`), `None` otherwise.
fn plain_or_grouped_digits(int_part: &str) -> Option<String> {
    if int_part.bytes().all(|b| b.is_ascii_digit()) {
        return Some(int_part.to_owned());
    }
    let mut groups = int_part.split(',');
    let first = groups.next()?;
    let first_ok = (1..=3).contains(&first.len()) && first.bytes().all(|b| b.is_ascii_digit());
    let mut digits = first.to_owned();
    for group in groups {
        if group.len() != 3 || !group.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.push_str(group);
    }
    first_ok.then_some(digits)
}

/// Token F1 between a prediction and one gold answer, both already normalised. Two empty answers
/// agree (1.0); one empty answer agrees with nothing (0.0), as in SQuAD v2's script.
fn token_f1(prediction: &[String], gold: &[String]) -> f64 {
    if prediction.is_empty() || gold.is_empty() {
        return if prediction == gold { 1.0 } else { 0.0 };
    }
    let mut p: Vec<&str> = prediction.iter().map(String::as_str).collect();
    let mut g: Vec<&str> = gold.iter().map(String::as_str).collect();
    p.sort_unstable();
    g.sort_unstable();
    // Size of the multiset intersection, by merging the two sorted lists.
    let (mut i, mut j, mut common) = (0, 0, 0usize);
    while i < p.len() && j < g.len() {
        match p[i].cmp(g[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                common += 1;
                i += 1;
                j += 1;
            }
        }
    }
    if common == 0 {
        return 0.0;
    }
    let precision = common as f64 / p.len() as f64;
    let recall = common as f64 / g.len() as f64;
    2.0 * precision * recall / (precision + recall)
}

/// Best token F1 of `prediction` over the gold answers (0.0 when there are none).
pub fn answer_f1<S: AsRef<str>>(prediction: &str, gold_answers: &[S]) -> f64 {
    let prediction = normalize_answer(prediction);
    gold_answers
        .iter()
        .map(|gold| token_f1(&prediction, &normalize_answer(gold.as_ref())))
        .fold(0.0, f64::max)
}

/// Whether `prediction` equals some gold answer after normalisation.
pub fn exact_match<S: AsRef<str>>(prediction: &str, gold_answers: &[S]) -> bool {
    let prediction = normalize_answer(prediction);
    gold_answers
        .iter()
        .any(|gold| normalize_answer(gold.as_ref()) == prediction)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn squad_normalisation() {
        assert_eq!(
            normalize_answer("The  Quick, brown fox -- an Apple!"),
            ["quick", "brown", "fox", "apple"]
        );
        assert_eq!(normalize_answer("don't stop"), ["dont", "stop"]);
        assert!(normalize_answer(" the . a ").is_empty());
        assert_eq!(normalize_answer("the—end theory"), ["—end", "theory"]);
    }

    #[test]
    fn numbers_compare_by_value_format() {
        let n = |s: &str| normalize_answer(s);
        assert_eq!(n("35156.0"), n("35156"));
        assert_eq!(n("1,234"), n("1234"));
        assert_eq!(n("$1,234.50"), ["1234.5"]);
        assert_eq!(n(".50"), ["0.5"]);
        assert_eq!(n("-0.0"), ["0"]);
        assert_eq!(n("+007"), ["7"]);
        assert_eq!(n("-12."), ["-12"]);
        assert_eq!(n("35%"), ["35"]);
        // A decimal point is not dropped, so 3.5 and 35 stay different.
        assert_ne!(n("3.5"), n("35"));
        // Not numbers: SQuAD's punctuation stripping applies.
        assert_eq!(n("1,2"), ["12"]);
        assert_eq!(n("12,34,567"), ["1234567"]);
        assert_eq!(n("2010-05-12"), ["20100512"]);
        assert_eq!(n("v1.2"), ["v12"]);
    }

    #[test]
    fn f1_takes_the_best_gold_answer() {
        assert_eq!(answer_f1("Essendon", &["essendon"]), 1.0);
        // 1 common token of 2 predicted and 1 gold: P 0.5, R 1, F1 2/3.
        let f1 = answer_f1("essendon fc", &["carlton", "Essendon"]);
        assert!((f1 - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(answer_f1("35156.0 viewers", &["35,156 viewers"]), 1.0);
        assert_eq!(answer_f1("", &["the"]), 1.0);
        assert_eq!(answer_f1("something", &["the"]), 0.0);
        assert_eq!(answer_f1("x", &[] as &[&str]), 0.0);
        // Repeated tokens count as a multiset.
        let f1 = answer_f1("x y y", &["y y z"]);
        assert!((f1 - 2.0 / 3.0).abs() < 1e-12, "{f1}");
    }

    #[test]
    fn exact_match_after_normalisation() {
        assert!(exact_match("The 1,234.", &["1234"]));
        assert!(!exact_match("1234 people", &["1234"]));
    }
}
