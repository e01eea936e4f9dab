//! Structured decoding with the real SmolLM2 tokenizer (and, for determinism, the real model):
//! seeded random walks through every agent grammar, the shown-id restriction, and a constrained
//! greedy reply twice. The GGUF is `$TABLESEEK_SMOLLM2_GGUF`, else
//! `$TABLESEEK_MODELS/smollm2-135m-instruct-q4_1.gguf`, else `models/…`; tests skip without it.

use tableseek::agent::parse::{self, QaVariant, RefineDecision};
use tableseek::agent::{schemas, Strategy, TaskType, Verdict};
use tableseek::engine::{
    read_gguf, ChatMessage, ChatOptions, Grammar, GrammarCompiler, LogitsMask, LoopGuard,
    StopReason, Tokenizer,
};

use tableseek::corpus::{SourceFormat, Table, TableMeta};
use tableseek::sql::grammar::{select_grammar, select_grammar_over};
use tableseek::sql::{Database, QueryLimits, Relation};

use crate::common::{existing, smollm2_chat, smollm2_gguf};

fn tokenizer() -> Option<Tokenizer> {
    let content = read_gguf(&existing(smollm2_gguf())?).expect("reading the GGUF");
    Some(Tokenizer::from_gguf(&content).expect("tokenizer from GGUF"))
}

/// SplitMix64: a seeded, dependency-free generator for reproducible walks.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Extra logits past the tokenizer's vocabulary, as models with padded embeddings have.
const PADDING: usize = 7;

/// The ids the mask leaves finite after `generated`.
fn allowed(mask: &mut dyn LogitsMask, generated: &[u32], vocab: usize) -> Vec<u32> {
    let mut logits = vec![0.0f32; vocab + PADDING];
    mask.apply(generated, &mut logits);
    logits
        .iter()
        .enumerate()
        .filter(|(_, v)| v.is_finite())
        .map(|(i, _)| i as u32)
        .collect()
}

/// Random walk under `grammar`: where EOS is allowed a quarter of the walks stop; otherwise one
/// step in `closing_bias` picks any allowed token and the others prefer tokens that close
/// something (quote, bracket, brace, comma) or EOS, so walks finish. Returns the text of the
/// finished output; checks on the way that the mask is never empty, never offers ids past the
/// vocabulary or special tokens, and offers EOS exactly when `complete(text)` holds (where it
/// says anything: `None` makes no claim about that text).
fn walk(
    tokenizer: &Tokenizer,
    compiler: &GrammarCompiler,
    closes: &[bool],
    grammar: &Grammar,
    rng: &mut Rng,
    complete: &dyn Fn(&str) -> Option<bool>,
    closing_bias: usize,
) -> String {
    let vocab = compiler.vocab_size();
    let eos = tokenizer.eos_token_ids().to_vec();
    let im_start = tokenizer
        .token_id("<|im_start|>")
        .expect("SmolLM2 has <|im_start|>");
    let mut mask = compiler.compile(grammar).expect("grammar compiles");
    let mut generated: Vec<u32> = Vec::new();
    for _ in 0..8000 {
        let ids = allowed(&mut mask, &generated, vocab);
        assert!(mask.failure().is_none(), "{:?}", mask.failure());
        let text = tokenizer.decode(&generated, false).unwrap();
        assert!(!ids.is_empty(), "no token allowed after {text:?}");
        assert!(
            ids.iter().all(|&id| (id as usize) < vocab),
            "padding ids allowed"
        );
        assert!(
            !ids.contains(&im_start),
            "a special token allowed after {text:?}"
        );
        let eos_allowed = ids.iter().any(|id| eos.contains(id));
        if let Some(complete) = complete(&text) {
            assert_eq!(
                eos_allowed, complete,
                "EOS allowed must mean complete, for {text:?}"
            );
        }
        // Where the output may end, end it now and then, so deeply nesting grammars (SQL)
        // finish too.
        if eos_allowed && rng.below(4) == 0 {
            return text;
        }
        let closing: Vec<u32> = ids
            .iter()
            .copied()
            .filter(|&id| eos.contains(&id) || closes[id as usize])
            .collect();
        let pool = if rng.below(closing_bias) != 0 && !closing.is_empty() {
            &closing
        } else {
            &ids
        };
        let next = pool[rng.below(pool.len())];
        if eos.contains(&next) {
            return text;
        }
        generated.push(next);
    }
    panic!(
        "walk did not finish: {:?}",
        tokenizer.decode(&generated, false)
    );
}

/// Per token id: does its text close a string, list or object, or separate items?
fn closing_tokens(tokenizer: &Tokenizer, vocab: usize) -> Vec<bool> {
    (0..vocab as u32)
        .map(|id| {
            tokenizer
                .decode(&[id], false)
                .is_ok_and(|t| t.contains(['"', ']', '}', ',']))
        })
        .collect()
}

fn is_json(text: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(text).is_ok()
}

fn ids(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("T{i}")).collect()
}

#[test]
fn random_walks_stay_viable_and_parse_into_the_action() {
    let Some(tokenizer) = tokenizer() else { return };
    let compiler = GrammarCompiler::new(&tokenizer).expect("token trie");
    let closes = closing_tokens(&tokenizer, compiler.vocab_size());
    let mut rng = Rng(0x7ab1_e5ee);
    for _ in 0..6 {
        let text = walk(
            &tokenizer,
            &compiler,
            &closes,
            &schemas::patterns(),
            &mut rng,
            &|t| Some(is_json(t)),
            4,
        );
        let patterns = parse::parse_patterns(&text).unwrap_or_else(|| panic!("{text:?}"));
        assert!(
            (1..=schemas::MAX_PATTERNS).contains(&patterns.len()),
            "{text:?}"
        );
    }
    let cases = [
        (Strategy::Select { n: 5, m: 1 }, 5, true, true),
        (Strategy::Select { n: 5, m: 3 }, 3, true, true),
        (Strategy::Rerank { n: 3 }, 3, true, true),
        (Strategy::Select { n: 5, m: 2 }, 4, true, false),
        (Strategy::Select { n: 5, m: 1 }, 0, true, true),
    ];
    for (strategy, shown, select, regenerate) in cases {
        let grammar = schemas::refine(strategy, &ids(shown), select, regenerate);
        let cap = match strategy {
            Strategy::Select { m, .. } => m,
            Strategy::Rerank { n } => n,
            Strategy::Likelihood { .. } => 1,
        };
        for _ in 0..8 {
            let text = walk(
                &tokenizer,
                &compiler,
                &closes,
                &grammar,
                &mut rng,
                &|t| Some(is_json(t)),
                4,
            );
            let refine = parse::parse_refine(&text, shown, cap);
            assert!(refine.parsed, "{strategy} {text:?}");
            match refine.decision {
                RefineDecision::Choose(positions) => {
                    assert!(select && shown > 0, "{text:?}");
                    assert!(!positions.is_empty() && positions.len() <= cap, "{text:?}");
                    assert!(positions.iter().all(|&p| p < shown), "{text:?}");
                }
                RefineDecision::Regenerate(patterns) => {
                    assert!(regenerate && !patterns.is_empty(), "{text:?}")
                }
                RefineDecision::None(reason) => {
                    assert!(!regenerate, "{text:?} gave {reason:?}")
                }
            }
        }
    }
    for (variant, labels) in [
        (
            QaVariant::TableSeek,
            &["SUPPORTED", "REFUTED", "CANNOT VERIFY"][..],
        ),
        (QaVariant::Baseline, &["SUPPORTED", "REFUTED"][..]),
    ] {
        let grammar = schemas::qa(TaskType::FactVerification, variant).expect("a grammar");
        let complete = |text: &str| Some(labels.iter().any(|l| text == format!("Answer: {l}")));
        for _ in 0..6 {
            let text = walk(
                &tokenizer, &compiler, &closes, &grammar, &mut rng, &complete, 4,
            );
            let outcome = parse::parse_qa(&text, TaskType::FactVerification, variant);
            assert!(outcome.parsed, "{text:?}");
            if variant == QaVariant::Baseline {
                assert_ne!(outcome.verdict, Verdict::Unverifiable);
            }
        }
    }
    assert!(schemas::qa(TaskType::Tableqa, QaVariant::TableSeek).is_none());
}

/// Feeds `text`'s tokens one by one, each of which must be allowed, and returns them.
fn force(tokenizer: &Tokenizer, mask: &mut dyn LogitsMask, vocab: usize, text: &str) -> Vec<u32> {
    let tokens = tokenizer.encode(text, false).unwrap();
    for i in 0..tokens.len() {
        let ids = allowed(mask, &tokens[..i], vocab);
        assert!(
            ids.contains(&tokens[i]),
            "{:?} not allowed after {:?}",
            tokenizer.decode(&tokens[i..=i], false),
            tokenizer.decode(&tokens[..i], false)
        );
    }
    tokens
}

#[test]
fn ids_outside_the_shown_set_cannot_be_written() {
    let Some(tokenizer) = tokenizer() else { return };
    let compiler = GrammarCompiler::new(&tokenizer).expect("token trie");
    let vocab = compiler.vocab_size();
    let grammar = schemas::refine(Strategy::Select { n: 5, m: 3 }, &ids(3), true, true);
    let mut mask = compiler.compile(&grammar).unwrap();
    let prefix = r#"{"action": "select", "tables": ["T"#;
    let tokens = force(&tokenizer, &mut mask, vocab, prefix);
    let next = allowed(&mut mask, &tokens, vocab);
    let texts: Vec<String> = next
        .iter()
        .map(|&id| tokenizer.decode(&[id], false).unwrap())
        .collect();
    for digit in ["0", "1", "2"] {
        assert!(
            texts.iter().any(|t| t == digit),
            "{digit} masked: {texts:?}"
        );
    }
    assert!(
        texts
            .iter()
            .all(|t| matches!(t.chars().next(), Some('0'..='2'))),
        "only shown ids may follow: {texts:?}"
    );
    // After T1, "T10".."T19" would be new ids: only the closing quote may come.
    let mut mask = compiler.compile(&grammar).unwrap();
    let tokens = force(&tokenizer, &mut mask, vocab, &format!("{prefix}1"));
    for id in allowed(&mut mask, &tokens, vocab) {
        let text = tokenizer.decode(&[id], false).unwrap();
        assert!(text.starts_with('"'), "{text:?} allowed after T1");
    }
    // A fourth id exceeds m = 3.
    let mut mask = compiler.compile(&grammar).unwrap();
    let tokens = force(
        &tokenizer,
        &mut mask,
        vocab,
        r#"{"action": "select", "tables": ["T0", "T1", "T2""#,
    );
    for id in allowed(&mut mask, &tokens, vocab) {
        let text = tokenizer.decode(&[id], false).unwrap();
        assert!(text.starts_with(']'), "{text:?} allowed after three ids");
    }
}

#[test]
fn constrained_greedy_reply_is_deterministic_and_parses() {
    let Some(mut model) = smollm2_chat() else {
        return;
    };
    let messages = [
        ChatMessage::new("system", "Reply with one JSON object only."),
        ChatMessage::new(
            "user",
            "Question: Which river is longest?\n\nCandidates: T0 (rivers), T1 (cities)\n\
             Your decision, as one JSON object: {\"action\": \"select\", \"tables\": [...]}",
        ),
    ];
    let grammar = schemas::refine(Strategy::Select { n: 2, m: 1 }, &ids(2), true, true);
    let options = ChatOptions {
        max_new_tokens: 48,
        ..ChatOptions::default()
    };
    let first = model
        .chat_constrained(&messages, &options, &grammar)
        .unwrap();
    let second = model
        .chat_constrained(&messages, &options, &grammar)
        .unwrap();
    assert_eq!(first.generated_token_ids, second.generated_token_ids);
    assert_eq!(first.raw_text, second.raw_text);
    assert!(first.constrained);
    // The grammar closed the object and then allowed only EOS.
    assert!(matches!(first.stop_reason, StopReason::StopToken(_)));
    let refine = parse::parse_refine(&first.raw_text, 2, 1);
    assert!(refine.parsed, "{:?}", first.raw_text);
    // Every admissible action fits the default budget, so a constrained call always closes.
    assert!(model.default_max_new_tokens() >= schemas::MAX_ACTION_CHARS);
}

#[test]
fn the_longest_action_is_bounded_by_max_action_chars() {
    let Some(tokenizer) = tokenizer() else { return };
    let compiler = GrammarCompiler::new(&tokenizer).expect("token trie");
    let vocab = compiler.vocab_size();
    let grammar = schemas::refine(Strategy::Select { n: 5, m: 1 }, &ids(5), true, true);
    let pattern = |i: usize| format!("{i:02}{}", "x".repeat(schemas::MAX_PATTERN_CHARS - 2));
    let list: Vec<String> = (0..schemas::MAX_PATTERNS)
        .map(|i| format!("\"{}\"", pattern(i)))
        .collect();
    let longest = format!(
        r#"{{"action": "regenerate", "patterns": [{}]}}"#,
        list.join(", ")
    );
    assert_eq!(longest.len(), schemas::MAX_ACTION_CHARS);
    let mut mask = compiler.compile(&grammar).unwrap();
    let tokens = force(&tokenizer, &mut mask, vocab, &longest);
    allowed(&mut mask, &tokens, vocab);
    assert!(mask.is_accepting());
    // One more pattern, or one more character in the last, is masked.
    let full_list = &longest[..longest.len() - 2];
    let mut mask = compiler.compile(&grammar).unwrap();
    let tokens = force(&tokenizer, &mut mask, vocab, full_list);
    for id in allowed(&mut mask, &tokens, vocab) {
        let text = tokenizer.decode(&[id], false).unwrap();
        assert!(
            text.starts_with(']'),
            "{text:?} allowed after the last pattern"
        );
    }
    let mut mask = compiler.compile(&grammar).unwrap();
    let tokens = force(
        &tokenizer,
        &mut mask,
        vocab,
        &full_list[..full_list.len() - 1],
    );
    for id in allowed(&mut mask, &tokens, vocab) {
        let text = tokenizer.decode(&[id], false).unwrap();
        assert!(
            text.starts_with('"'),
            "{text:?} allowed after the longest pattern"
        );
    }
}

#[test]
fn patterns_without_literal_text_cannot_be_closed() {
    let Some(tokenizer) = tokenizer() else { return };
    let compiler = GrammarCompiler::new(&tokenizer).expect("token trie");
    let vocab = compiler.vocab_size();
    let grammar = schemas::patterns();
    // A pattern with a name in it closes; so does one in another script.
    for good in [r#"["Canberra", "capital.*Australia"]"#, r#"["東京"]"#] {
        let mut mask = compiler.compile(&grammar).unwrap();
        let tokens = force(&tokenizer, &mut mask, vocab, good);
        allowed(&mut mask, &tokens, vocab);
        assert!(mask.is_accepting(), "{good} not accepted");
    }
    // `.*.*` matches every table: no next token may close the string before two letters or
    // digits in a row have been written.
    let closes_early = |text: &str| {
        let close = text
            .char_indices()
            .find(|&(i, c)| c == '"' && !text[..i].ends_with('\\'));
        close.is_some_and(|(i, _)| {
            let chars: Vec<char> = text[..i].chars().collect();
            !chars
                .windows(2)
                .any(|w| w.iter().all(|c| c.is_ascii_alphanumeric() || !c.is_ascii()))
        })
    };
    for degenerate in [r#"[".*.*"#, r#"["a.*"#, r#"["Canberra", "..."#] {
        let mut mask = compiler.compile(&grammar).unwrap();
        let tokens = force(&tokenizer, &mut mask, vocab, degenerate);
        let next = allowed(&mut mask, &tokens, vocab);
        assert!(!next.is_empty());
        for id in next {
            let text = tokenizer.decode(&[id], false).unwrap();
            assert!(
                !closes_early(&text),
                "{text:?} may close the pattern after {degenerate}"
            );
        }
    }
}

/// A constrained reply that falls into a cycle is not cut by the chat loop guard (that left
/// unclosed JSON on 22 of 50 TabFact pattern lists in a real run): the grammar bounds the reply
/// and closes it.
#[test]
fn a_cycling_constrained_reply_still_closes_and_parses() {
    let Some(mut model) = smollm2_chat() else {
        return;
    };
    let messages = [ChatMessage::new(
        "user",
        "Repeat the sentence 'The answer is:' one hundred times, as one JSON string.",
    )];
    let grammar = Grammar::JsonSchema(serde_json::json!({ "type": "string", "maxLength": 300 }));
    let options = ChatOptions {
        max_new_tokens: 400,
        ..ChatOptions::default()
    };
    let output = model
        .chat_constrained(&messages, &options, &grammar)
        .unwrap();
    assert!(matches!(output.stop_reason, StopReason::StopToken(_)));
    let text: String = serde_json::from_str(&output.raw_text)
        .unwrap_or_else(|err| panic!("{err}: {:?}", output.raw_text));
    // It did cycle, over far more tokens than the guard lets an unconstrained reply repeat.
    assert!(text.matches("The answer is:").count() >= 20, "{text:?}");
    assert!(output.stats.generated_tokens > LoopGuard::default().min_span);
}

/// A table with awkward headers (duplicates, empty, reserved words, symbols, non-ASCII) and
/// cells mixing numbers, formatted numbers, text and blanks.
fn awkward_table(rng: &mut Rng) -> Table {
    const HEADERS: [&str; 11] = [
        "Name",
        "name",
        "",
        "Price ($)",
        "select",
        "2nd place",
        "Country",
        "age",
        "Åland",
        "a b c",
        "count",
    ];
    const CELLS: [&str; 8] = ["1", "2.5", "$5", "x", "", "1,234", "France", "it's"];
    let width = 1 + rng.below(5);
    let header: Vec<String> = (0..width)
        .map(|_| HEADERS[rng.below(HEADERS.len())].to_string())
        .collect();
    let rows = (0..rng.below(4))
        .map(|_| {
            (0..width)
                .map(|_| CELLS[rng.below(CELLS.len())].to_string())
                .collect()
        })
        .collect();
    Table {
        id: "awkward.csv".into(),
        source_format: SourceFormat::Csv,
        header,
        rows,
        meta: TableMeta::default(),
    }
}

/// The quoted identifiers of a statement (`"…"`, doubled quotes inside).
fn quoted_identifiers(sql: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut chars = sql.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        match c {
            '\'' => in_string = !in_string,
            '"' if !in_string => {
                let mut name = String::new();
                while let Some(c) = chars.next() {
                    if c == '"' {
                        if chars.peek() == Some(&'"') {
                            chars.next();
                            name.push('"');
                            continue;
                        }
                        break;
                    }
                    name.push(c);
                }
                found.push(name);
            }
            _ => {}
        }
    }
    found
}

/// Tokens that only end an identifier, a string, a group or the statement, or move on to FROM,
/// so walks through a recursive SQL grammar finish.
fn sql_closing_tokens(tokenizer: &Tokenizer, vocab: usize) -> Vec<bool> {
    (0..vocab as u32)
        .map(|id| {
            tokenizer.decode(&[id], false).is_ok_and(|t| {
                matches!(
                    t.trim(),
                    "\"" | ")" | "'" | ";" | "," | "FROM" | "from" | "WHERE" | "where" | "1"
                )
            })
        })
        .collect()
}

/// Feeds `text` token by token under `grammar`; whether every token was allowed.
fn admits_text(
    tokenizer: &Tokenizer,
    compiler: &GrammarCompiler,
    grammar: &Grammar,
    text: &str,
) -> bool {
    let vocab = compiler.vocab_size();
    let mut mask = compiler.compile(grammar).expect("grammar compiles");
    let ids = tokenizer.encode(text, false).unwrap();
    let mut generated = Vec::new();
    for id in ids {
        if !allowed(&mut mask, &generated, vocab).contains(&id) {
            return false;
        }
        generated.push(id);
    }
    true
}

/// A random walk through an SQL grammar; wherever the grammar would let the model stop,
/// SQLite must accept the statement (`prepare`).
fn sql_walk(
    tokenizer: &Tokenizer,
    compiler: &GrammarCompiler,
    closes: &[bool],
    grammar: &Grammar,
    rng: &mut Rng,
    prepare: &dyn Fn(&str) -> Result<(), String>,
) -> String {
    walk(
        tokenizer,
        compiler,
        closes,
        grammar,
        rng,
        &|t| prepare(t).is_err().then_some(false),
        12,
    )
}

#[test]
fn sql_walks_always_prepare_and_name_only_the_relations_columns() {
    let Some(tokenizer) = tokenizer() else { return };
    let compiler = GrammarCompiler::new(&tokenizer).expect("token trie");
    let vocab = compiler.vocab_size();
    let closes = sql_closing_tokens(&tokenizer, vocab);
    let mut rng = Rng(0x5e1e_c7ed);
    let limits = QueryLimits::default();
    for case in 0..60 {
        let table = awkward_table(&mut rng);
        let relation = Relation::from_table(&table, "t").unwrap();
        let grammar = Grammar::Lark(select_grammar(relation.schema()));
        let text = sql_walk(&tokenizer, &compiler, &closes, &grammar, &mut rng, &|t| {
            relation
                .query(t, &limits)
                .map(|_| ())
                .map_err(|e| e.to_string())
        });
        let result = relation.query(&text, &limits);
        assert!(result.is_ok(), "case {case}: {text:?}: {result:?}");
        let mut names = relation.sql_column_names();
        names.push(relation.name().to_string());
        for ident in quoted_identifiers(&text) {
            assert!(names.contains(&ident), "case {case}: {ident:?} in {text:?}");
        }
    }
}

#[test]
fn sql_walks_over_several_tables_read_one_and_name_only_its_columns() {
    let Some(tokenizer) = tokenizer() else { return };
    let compiler = GrammarCompiler::new(&tokenizer).expect("token trie");
    let vocab = compiler.vocab_size();
    let closes = sql_closing_tokens(&tokenizer, vocab);
    let mut rng = Rng(0x7ab1_e5e7);
    let limits = QueryLimits::default();
    for case in 0..24 {
        let tables: Vec<Table> = (0..2 + rng.below(2))
            .map(|_| awkward_table(&mut rng))
            .collect();
        let names: Vec<String> = (0..tables.len()).map(|i| format!("T{i}")).collect();
        let pairs: Vec<(&Table, &str)> = tables
            .iter()
            .zip(&names)
            .map(|(t, n)| (t, n.as_str()))
            .collect();
        let database = Database::new(&pairs).unwrap();
        let grammar = Grammar::Lark(select_grammar_over(database.relations()));
        // SQLite refuses a column of another table when it prepares, so preparing is the
        // check that each statement names only the columns of the table it reads.
        let text = sql_walk(&tokenizer, &compiler, &closes, &grammar, &mut rng, &|t| {
            database
                .query(t, &limits)
                .map(|_| ())
                .map_err(|e| e.to_string())
        });
        let result = database.query(&text, &limits);
        assert!(result.is_ok(), "case {case}: {text:?}: {result:?}");
    }
}

#[test]
fn the_sql_grammar_refuses_other_tables_unknown_columns_and_writes() {
    let Some(tokenizer) = tokenizer() else { return };
    let compiler = GrammarCompiler::new(&tokenizer).expect("token trie");
    let table = Table {
        id: "singer.csv".into(),
        source_format: SourceFormat::Csv,
        header: vec!["Name".into(), "Age".into()],
        rows: vec![vec!["Joe".into(), "52".into()]],
        meta: TableMeta::default(),
    };
    let relation = Relation::from_table(&table, "t").unwrap();
    let grammar = Grammar::Lark(select_grammar(relation.schema()));
    let admits = |text: &str| admits_text(&tokenizer, &compiler, &grammar, text);
    assert!(admits(r#"SELECT COUNT(*) FROM "t" WHERE "age" > 40"#));
    assert!(admits(
        r#"select "name" from "t" where "age" = (select max("age") from "t") order by "name" limit 1;"#
    ));
    assert!(!admits(r#"SELECT "name" FROM "singer""#));
    assert!(!admits(r#"SELECT "nationality" FROM "t""#));
    assert!(admits("SELECT name, AGE FROM t WHERE age > 40"));
    assert!(!admits("SELECT nationality FROM t"));
    assert!(!admits("SELECT name FROM singer"));
    assert!(!admits("DELETE FROM \"t\""));
    assert!(!admits("PRAGMA table_info(\"t\")"));
    assert!(!admits(r#"SELECT "name" FROM "t"; DROP TABLE "t""#));
    assert!(admits("SELECT name FROM t LIMIT 100000"));
    assert!(!admits("SELECT name FROM t LIMIT 10000000000000000000000"));

    // Over two tables: each statement reads one and names only its columns.
    let other = Table {
        id: "city.csv".into(),
        source_format: SourceFormat::Csv,
        header: vec!["City".into()],
        rows: vec![vec!["Oslo".into()]],
        meta: TableMeta::default(),
    };
    let database = Database::new(&[(&table, "T0"), (&other, "T1")]).unwrap();
    let grammar = Grammar::Lark(select_grammar_over(database.relations()));
    let admits = |text: &str| admits_text(&tokenizer, &compiler, &grammar, text);
    assert!(admits("SELECT name FROM T0 WHERE age > 40"));
    assert!(admits("SELECT T0.name FROM T0 WHERE T0.age > 40"));
    assert!(admits(r#"SELECT "T1"."city" FROM T1"#));
    assert!(!admits("SELECT T1.city FROM T0"));
    assert!(!admits("SELECT T0.city FROM T1"));
    assert!(admits(r#"SELECT "city" FROM "T1""#));
    assert!(!admits("SELECT city FROM T0"));
    assert!(!admits("SELECT name FROM T1"));
    assert!(!admits("SELECT name FROM T2"));
}
