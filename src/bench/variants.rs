//! How a benchmark variant looks: its renamed schema (synonyms, abbreviations such as `AddrTypeID`,
//! camelCase, snake_case …) and its value formats (integers as floats, numbers spelled out in words,
//! dates in other layouts).
//!
//! The word lists live in `dictionaries.json` beside this file (compiled in with `include_str!`), so
//! extending a rename or a date layout is a data change. Every choice is drawn from a caller's seeded
//! RNG, so the same seed gives the same schema and the same cells.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use rand::Rng;
use rusqlite::types::Value;
use serde::{Deserialize, Serialize};

use crate::calendar::MONTH_NAMES;

/// The rename and reformat dictionaries.
#[derive(Debug, Clone, Deserialize)]
pub struct Dictionaries {
    /// Lowercase word or space-separated phrase → phrases it may become.
    pub synonyms: BTreeMap<String, Vec<String>>,
    /// Lowercase word → its short form, case kept (`identifier` → `ID`).
    pub abbreviations: BTreeMap<String, String>,
    /// Date layouts with `{Y}` `{m}` `{d}` `{b}` `{Yw}` `{mw}` `{dw}` placeholders.
    pub date_layouts: Vec<String>,
}

/// The built-in dictionaries' source text, hashed into the manifest.
pub const BUILTIN_DICTIONARIES: &str = include_str!("dictionaries.json");

impl Dictionaries {
    /// The dictionaries shipped in `src/bench/dictionaries.json`.
    pub fn builtin() -> &'static Dictionaries {
        static BUILTIN: LazyLock<Dictionaries> = LazyLock::new(|| {
            Dictionaries::from_json(BUILTIN_DICTIONARIES)
                .unwrap_or_else(|e| unreachable!("built-in dictionaries.json: {e}"))
        });
        &BUILTIN
    }

    pub fn from_json(text: &str) -> Result<Dictionaries, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// Longest phrase in `synonyms` starting at `words[start]` (up to three words), with its length.
    fn synonym_at(&self, words: &[String], start: usize) -> Option<(usize, &[String])> {
        (1..=3usize.min(words.len() - start)).rev().find_map(|len| {
            self.synonyms
                .get(&words[start..start + len].join(" "))
                .filter(|choices| !choices.is_empty())
                .map(|choices| (len, choices.as_slice()))
        })
    }
}

/// How the words of a renamed identifier are joined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Case {
    /// `addr_type_id`
    Snake,
    /// `addrTypeID`
    Camel,
    /// `AddrTypeID`
    Pascal,
    /// `ADDR_TYPE_ID`
    UpperSnake,
}

/// A variant's naming: a case plus whether synonyms and abbreviations are applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct NamingStyle {
    pub case: Case,
    pub synonyms: bool,
    pub abbreviate: bool,
}

impl NamingStyle {
    pub fn random(rng: &mut impl Rng) -> NamingStyle {
        const CASES: [Case; 4] = [Case::Snake, Case::Camel, Case::Pascal, Case::UpperSnake];
        NamingStyle {
            case: CASES[rng.random_range(0..CASES.len())],
            synonyms: rng.random_bool(0.6),
            abbreviate: rng.random_bool(0.4),
        }
    }

    /// `name` in this style. Synonyms replace each matching phrase with probability 0.6, so two
    /// columns of one table do not all change at once.
    pub fn rename(&self, dict: &Dictionaries, name: &str, rng: &mut impl Rng) -> String {
        let mut words = split_words(name);
        if words.is_empty() {
            return name.to_string();
        }
        if self.synonyms {
            let mut out = Vec::with_capacity(words.len());
            let mut i = 0;
            while i < words.len() {
                match dict.synonym_at(&words, i) {
                    Some((len, choices)) if rng.random_bool(0.6) => {
                        let choice = &choices[rng.random_range(0..choices.len())];
                        out.extend(choice.split_whitespace().map(str::to_lowercase));
                        i += len;
                    }
                    _ => {
                        out.push(words[i].clone());
                        i += 1;
                    }
                }
            }
            words = out;
        }
        // Abbreviated words keep their own case (`ID`), others are lowercase until joined.
        let words: Vec<(String, bool)> = words
            .into_iter()
            .map(
                |w| match dict.abbreviations.get(&w).filter(|_| self.abbreviate) {
                    Some(short) => (short.clone(), true),
                    None => (w, false),
                },
            )
            .collect();
        join_words(&words, self.case)
    }
}

fn capitalize(word: &str) -> String {
    let mut chars = word.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn join_words(words: &[(String, bool)], case: Case) -> String {
    match case {
        Case::Snake => words
            .iter()
            .map(|(w, _)| w.to_lowercase())
            .collect::<Vec<_>>()
            .join("_"),
        Case::UpperSnake => words
            .iter()
            .map(|(w, _)| w.to_uppercase())
            .collect::<Vec<_>>()
            .join("_"),
        Case::Camel | Case::Pascal => words
            .iter()
            .enumerate()
            .map(|(i, (w, abbreviated))| {
                if i == 0 && case == Case::Camel {
                    w.to_lowercase()
                } else if *abbreviated {
                    w.clone()
                } else {
                    capitalize(w)
                }
            })
            .collect(),
    }
}

/// Lowercase words of an identifier: split at `_`, spaces, `-`, `.`, camelCase humps, acronym ends
/// (`IDNumber` → id, number) and letter/digit boundaries.
pub fn split_words(name: &str) -> Vec<String> {
    let chars: Vec<char> = name.chars().collect();
    let mut words = Vec::new();
    let mut current = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_alphanumeric() {
            if !current.is_empty() {
                words.push(std::mem::take(&mut current));
            }
            continue;
        }
        if let Some(prev) = current.chars().last() {
            let next = chars.get(i + 1).copied();
            let boundary = (prev.is_lowercase() && c.is_uppercase())
                || (prev.is_uppercase()
                    && c.is_uppercase()
                    && next.is_some_and(char::is_lowercase))
                || (prev.is_ascii_digit() != c.is_ascii_digit());
            if boundary {
                words.push(std::mem::take(&mut current));
            }
        }
        current.push(c);
    }
    if !current.is_empty() {
        words.push(current);
    }
    words.into_iter().map(|w| w.to_lowercase()).collect()
}

/// How integers of a column are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NumberStyle {
    Plain,
    /// `504` → `504.0`
    Float,
    /// `14676` → `fourteen thousand, six hundred and seventy-six`; reals as `three point five`.
    Words,
}

/// The value formats of one column of a variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ColumnFormat {
    pub numbers: NumberStyle,
    /// Index into [`Dictionaries::date_layouts`]; `None` keeps ISO dates.
    pub date_layout: Option<usize>,
}

impl ColumnFormat {
    pub const PLAIN: ColumnFormat = ColumnFormat {
        numbers: NumberStyle::Plain,
        date_layout: None,
    };

    /// Formats for `columns` columns of one variant: one number style and one date layout for the
    /// variant; with `Words`, each column is spelled out with probability 0.5 (whole tables of words
    /// would be unreadable, and TCR-Bench spells out some columns, not all).
    pub fn random_for_variant(
        dict: &Dictionaries,
        columns: usize,
        rng: &mut impl Rng,
    ) -> Vec<ColumnFormat> {
        let numbers = match rng.random_range(0..3) {
            0 => NumberStyle::Plain,
            1 => NumberStyle::Float,
            _ => NumberStyle::Words,
        };
        let date_layout = if dict.date_layouts.is_empty() || rng.random_bool(0.3) {
            None
        } else {
            Some(rng.random_range(0..dict.date_layouts.len()))
        };
        (0..columns)
            .map(|_| ColumnFormat {
                numbers: match numbers {
                    NumberStyle::Words if rng.random_bool(0.5) => NumberStyle::Plain,
                    other => other,
                },
                date_layout,
            })
            .collect()
    }

    /// The cell text of `value` in this format (NULL is an empty cell).
    pub fn format(&self, dict: &Dictionaries, value: &Value) -> String {
        match value {
            Value::Null => String::new(),
            Value::Integer(i) => match self.numbers {
                NumberStyle::Plain => i.to_string(),
                NumberStyle::Float => format!("{i}.0"),
                NumberStyle::Words => spell_integer(*i),
            },
            Value::Real(r) => match self.numbers {
                NumberStyle::Words => spell_real(*r).unwrap_or_else(|| plain_real(*r)),
                NumberStyle::Plain | NumberStyle::Float => plain_real(*r),
            },
            Value::Text(text) => self
                .date_layout
                .and_then(|i| dict.date_layouts.get(i))
                .and_then(|layout| relayout_date(text, layout))
                .unwrap_or_else(|| text.clone()),
            Value::Blob(bytes) => hex::encode(bytes),
        }
    }
}

/// A real as SQLite prints it: `504.0`, `3.5`.
pub fn plain_real(r: f64) -> String {
    if r.is_finite() && r.fract() == 0.0 && r.abs() < 1e15 {
        format!("{r:.1}")
    } else {
        r.to_string()
    }
}

const ONES: [&str; 20] = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
];
const TENS: [&str; 10] = [
    "", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
];
const SCALES: [&str; 7] = [
    "",
    "thousand",
    "million",
    "billion",
    "trillion",
    "quadrillion",
    "quintillion",
];

fn below_hundred(n: u64) -> String {
    if n < 20 {
        ONES[n as usize].to_string()
    } else if n.is_multiple_of(10) {
        TENS[(n / 10) as usize].to_string()
    } else {
        format!("{}-{}", TENS[(n / 10) as usize], ONES[(n % 10) as usize])
    }
}

/// An integer in British English words, the way TCR-Bench spells them: `14676` → `fourteen
/// thousand, six hundred and seventy-six`, `2006` → `two thousand and six`. Written here rather than
/// taken from a crate because the common crates drop the British "and" and the group commas.
pub fn spell_integer(n: i64) -> String {
    let magnitude = n.unsigned_abs();
    let words = if magnitude == 0 {
        ONES[0].to_string()
    } else {
        let mut groups = Vec::new();
        let mut rest = magnitude;
        while rest > 0 {
            groups.push(rest % 1000);
            rest /= 1000;
        }
        let mut parts: Vec<String> = Vec::new();
        for (scale, &group) in groups.iter().enumerate().rev() {
            if group == 0 {
                continue;
            }
            let (hundreds, tens) = (group / 100, group % 100);
            let mut part = String::new();
            if hundreds > 0 {
                part.push_str(ONES[hundreds as usize]);
                part.push_str(" hundred");
            }
            if tens > 0 {
                if hundreds > 0 {
                    part.push_str(" and ");
                } else if scale == 0 && !parts.is_empty() {
                    // "two thousand and six": a last group under 100 after higher groups.
                    part.push_str("and ");
                }
                part.push_str(&below_hundred(tens));
            }
            if scale > 0 {
                part.push(' ');
                part.push_str(SCALES[scale]);
            }
            parts.push(part);
        }
        // A trailing "and six" joins with a space, other groups with a comma.
        let mut out = String::new();
        for (i, part) in parts.iter().enumerate() {
            if i > 0 {
                out.push_str(if part.starts_with("and ") { " " } else { ", " });
            }
            out.push_str(part);
        }
        out
    };
    if n < 0 {
        format!("minus {words}")
    } else {
        words
    }
}

/// `3.25` → `three point two five`; `None` for values that have no short decimal form.
fn spell_real(r: f64) -> Option<String> {
    if !r.is_finite() || r.abs() >= 1e15 {
        return None;
    }
    let text = plain_real(r);
    let (int_part, frac) = text.trim_start_matches('-').split_once('.')?;
    let int: i64 = int_part.parse().ok()?;
    let mut out = spell_integer(if r < 0.0 { -int } else { int });
    if r < 0.0 && int == 0 {
        out = format!("minus {out}");
    }
    if frac != "0" {
        out.push_str(" point");
        for digit in frac.bytes() {
            out.push(' ');
            out.push_str(ONES[usize::from(digit - b'0')]);
        }
    }
    Some(out)
}

/// An ISO date (`YYYY-MM-DD`, optionally followed by a time) in `layout`; `None` when `text` is not
/// one. The time part is kept as it is, after a space.
pub fn relayout_date(text: &str, layout: &str) -> Option<String> {
    let bytes = text.as_bytes();
    if bytes.len() < 10
        || bytes[4] != b'-'
        || bytes[7] != b'-'
        || ![0, 1, 2, 3, 5, 6, 8, 9]
            .iter()
            .all(|&i| bytes[i].is_ascii_digit())
    {
        return None;
    }
    let rest = &text[10..];
    let time = match rest.as_bytes().first() {
        None => "",
        Some(b' ' | b'T') if rest.len() > 1 && rest.as_bytes()[1].is_ascii_digit() => &rest[1..],
        Some(_) => return None,
    };
    let year: i64 = text[0..4].parse().ok()?;
    let month: usize = text[5..7].parse().ok()?;
    let day: i64 = text[8..10].parse().ok()?;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    let mut out = layout
        .replace("{Yw}", &spell_integer(year))
        .replace("{mw}", &spell_integer(month as i64))
        .replace("{dw}", &spell_integer(day))
        .replace("{Y}", &text[0..4])
        .replace("{m}", &text[5..7])
        .replace("{d}", &text[8..10])
        .replace("{b}", MONTH_NAMES[month - 1]);
    if !time.is_empty() {
        out.push(' ');
        out.push_str(time);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn spells_numbers_the_tcr_way() {
        assert_eq!(
            spell_integer(14676),
            "fourteen thousand, six hundred and seventy-six"
        );
        assert_eq!(spell_integer(2006), "two thousand and six");
        assert_eq!(spell_integer(100), "one hundred");
        assert_eq!(spell_integer(1_000_001), "one million and one");
        assert_eq!(spell_integer(-40), "minus forty");
        assert_eq!(spell_integer(0), "zero");
        assert!(spell_integer(i64::MIN).starts_with("minus nine quintillion"));
        assert_eq!(spell_real(3.25).as_deref(), Some("three point two five"));
        assert_eq!(spell_real(-0.5).as_deref(), Some("minus zero point five"));
    }

    #[test]
    fn splits_and_joins_identifiers() {
        assert_eq!(split_words("AddrTypeID"), ["addr", "type", "id"]);
        assert_eq!(split_words("Singer_ID"), ["singer", "id"]);
        assert_eq!(split_words("IDNumber2x"), ["id", "number", "2", "x"]);
        assert_eq!(split_words("zip_postcode"), ["zip", "postcode"]);
        let dict = Dictionaries::builtin();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let style = NamingStyle {
            case: Case::Pascal,
            synonyms: false,
            abbreviate: true,
        };
        assert_eq!(
            style.rename(dict, "address_type_id", &mut rng),
            "AddrTypeID"
        );
        let camel = NamingStyle {
            case: Case::Camel,
            synonyms: false,
            abbreviate: false,
        };
        assert_eq!(
            camel.rename(dict, "is_foreign_only", &mut rng),
            "isForeignOnly"
        );
    }

    #[test]
    fn relays_iso_dates_only() {
        assert_eq!(
            relayout_date("2006-02-15 04:45:30.0", "{Yw}.{mw}.{dw}").as_deref(),
            Some("two thousand and six.two.fifteen 04:45:30.0")
        );
        assert_eq!(
            relayout_date("2018-03-17", "{b} {d}, {Y}").as_deref(),
            Some("March 17, 2018")
        );
        assert_eq!(relayout_date("2018-13-17", "{d}/{m}/{Y}"), None);
        assert_eq!(relayout_date("20180317", "{d}/{m}/{Y}"), None);
        assert_eq!(relayout_date("2018-03-17x", "{d}/{m}/{Y}"), None);
    }

    #[test]
    fn dictionaries_are_well_formed() {
        let dict = Dictionaries::builtin();
        for (key, choices) in &dict.synonyms {
            assert_eq!(key, &key.to_lowercase(), "synonym keys are lowercase");
            assert!(
                !choices.is_empty() && choices.iter().all(|c| c != key),
                "{key}"
            );
        }
        for layout in &dict.date_layouts {
            assert!(relayout_date("2001-02-03", layout).is_some_and(|d| !d.contains('{')));
        }
    }
}
