//! The SQLite SELECT statements a constrained SQL-QA call may write, as a Lark grammar for
//! llguidance: one query over one relation whose identifiers are exactly that relation's name and
//! column names (quoted, or bare in any ASCII case).
//!
//! Why a grammar of our own rather than SQLite's: the point is what it leaves out. No other
//! table, no PRAGMA, ATTACH or writes, no unquoted or invented identifier (so a small model
//! cannot write `FROM singers` or `WHERE nationality = …` for columns that do not exist), no
//! aliases (an alias is an identifier the grammar would have to admit anywhere). What remains is
//! what table QA asks for: projections, filters (comparison, LIKE, IN, BETWEEN, IS NULL),
//! aggregates with GROUP BY / HAVING, ORDER BY, LIMIT, DISTINCT and one-column subqueries over
//! the same table. Compound selects (UNION, INTERSECT, EXCEPT) are left out: their column counts
//! must agree, which a context-free grammar over `*` cannot check. Every statement it admits is one SQLite
//! prepares against the relation (property-tested in `tests/it/constrain.rs`).
//!
//! Spaces are part of the keywords (`" FROM "`, `" AND "`), not ignored between tokens: with
//! free whitespace the grammar admitted `SELECTifnull(…)`, one identifier to SQLite. A statement
//! is therefore written on one line with single spaces, which is how the models write them.
//! Binary minus takes spaces on both sides: `1--2` would open an SQL comment.

use super::{quote_ident, RelationSchema};

/// Lark string literal for `text` (JSON escaping is a subset of what Lark accepts).
fn literal(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| "\"\"".to_string())
}

/// The expression rules `expr_{kind}{r}` and below, over the columns of rule `column{r}`;
/// `aggregates`: whether an aggregate call may appear (select list, HAVING) or not (WHERE,
/// GROUP BY, an aggregate's own argument: SQLite refuses those when it prepares the statement).
fn expression_rules(kind: &str, r: &str, aggregates: bool) -> String {
    let aggregate = if aggregates {
        format!(" | aggregate{r}")
    } else {
        String::new()
    };
    format!(
        r#"expr_{s}: conj_{s} (" OR "i conj_{s})*
conj_{s}: neg_{s} (" AND "i neg_{s})*
neg_{s}: "NOT "i? pred_{s}
pred_{s}: sum_{s} (CMP sum_{s} | " IS NULL"i | " IS NOT NULL"i | LIKE sum_{s} | BETWEEN sum_{s} " AND "i sum_{s} | IN "(" (sum_{s} (COMMA sum_{s})* | subselect{r}) ")")?
sum_{s}: prod_{s} (ADD prod_{s})*
prod_{s}: unary_{s} (MUL unary_{s})*
unary_{s}: "-"? atom_{s}
atom_{s}: column{r} | INT | DECIMAL | STRING | "NULL"i | scalar_{s} | "(" expr_{s} ")" | "(" subselect{r} ")"{aggregate}
scalar_{s}: FN1 "(" expr_{s} ")" | FN12 "(" expr_{s} (COMMA expr_{s})? ")" | "SUBSTR("i expr_{s} COMMA expr_{s} (COMMA expr_{s})? ")" | FN2 "(" expr_{s} COMMA expr_{s} ")" | "COALESCE("i expr_{s} (COMMA expr_{s})+ ")" | "REPLACE("i expr_{s} COMMA expr_{s} COMMA expr_{s} ")" | "CAST("i expr_{s} " AS "i TYPE ")"
"#,
        s = format!("{kind}{r}"),
    )
}

/// Rewrites every case-insensitive literal (`"from "i`) as an ASCII regex (`/[Ff][Rr][Oo][Mm] /`):
/// the `i` flag folds Unicode case, so `"SUBSTR("i` also admitted `ſubstr(` (U+017F folds to
/// `s`), which SQLite does not know.
fn ascii_case_insensitive(grammar: &str) -> String {
    let mut out = String::with_capacity(grammar.len() * 2);
    let mut rest = grammar;
    while let Some(start) = rest.find('"') {
        out.push_str(&rest[..start]);
        let body = &rest[start + 1..];
        // The literal's end: the next unescaped quote.
        let mut end = None;
        let mut escaped = false;
        for (i, c) in body.char_indices() {
            match c {
                '\\' if !escaped => escaped = true,
                '"' if !escaped => {
                    end = Some(i);
                    break;
                }
                _ => escaped = false,
            }
        }
        let Some(end) = end else {
            out.push_str(&rest[start..]);
            return out;
        };
        let text = &body[..end];
        let after = &body[end + 1..];
        match after.strip_prefix('i') {
            Some(after) => {
                out.push('/');
                for c in text.chars() {
                    if c.is_ascii_alphabetic() {
                        out.push('[');
                        out.push(c.to_ascii_uppercase());
                        out.push(c.to_ascii_lowercase());
                        out.push(']');
                    } else if c.is_ascii_alphanumeric() || c == ' ' || c == '_' {
                        out.push(c);
                    } else {
                        out.push('\\');
                        out.push(c);
                    }
                }
                out.push('/');
                rest = after;
            }
            None => {
                out.push_str(&rest[start..start + 1 + end + 1]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The grammar of SELECT statements over `relation`.
pub fn select_grammar(relation: &RelationSchema) -> String {
    select_grammar_over(std::slice::from_ref(relation))
}

/// The grammar of SELECT statements over any one of `relations` (TableRAG's NL2SQL sees the
/// tables its chunks came from): each statement reads one relation and names only that
/// relation's columns, so a column of another table is refused by the mask, not by SQLite.
pub fn select_grammar_over(relations: &[RelationSchema]) -> String {
    let single = relations.len() == 1;
    let suffix = |i: usize| {
        if single {
            String::new()
        } else {
            format!("_{i}")
        }
    };
    let selects: Vec<String> = (0..relations.len())
        .map(|i| format!("select{}", suffix(i)))
        .collect();
    let mut text = format!("start: ({}) \";\"?\n", selects.join(" | "));
    for (i, relation) in relations.iter().enumerate() {
        text.push_str(&relation_rules(relation, &suffix(i)));
    }
    text.push_str(TERMINALS);
    ascii_case_insensitive(&text)
}

/// The rules of SELECT statements over `relation`, every rule name ending in `r`.
fn relation_rules(relation: &RelationSchema, r: &str) -> String {
    // Each name quoted or bare (any ASCII case): bare is how the models write them, and a mask
    // that refuses `age` turns Qwen2.5-Coder-0.5B's first letter into `TOTAL(` or `TRIM(` (6 of
    // 30 Spider queries right under quoted-only names, 84 of 100 unconstrained). Bare names are
    // safe: SQL names are `[a-z_][a-z0-9_]*` and never a keyword.
    let either = |name: &str| format!("{} | {}i", literal(&quote_ident(name)), literal(name));
    let columns: Vec<String> = relation
        .sql_column_names()
        .iter()
        .map(|name| either(name))
        .collect();
    let table = either(&relation.name);
    // A column may be qualified by its table (`T0.age`): TableRAG shows tables as T0, T1, …, and
    // a mask without qualified names turned Qwen2.5-Coder-0.5B's `T1.name` into `ToTAL("nm")`.
    // Subqueries give one column (SQLite refuses more in a scalar or IN position); ORDER BY and
    // GROUP BY terms are never a bare number (`ORDER BY 3` is a column position SQLite checks);
    // ORDER BY sorts by an aggregate only after GROUP BY (SQLite refuses it in a query that may
    // not aggregate).
    format!(
        r#"select{r}: "SELECT "i DISTINCT? results{r} " FROM "i table{r} where{r}? tail{r}
subselect{r}: "SELECT "i DISTINCT? expr_a{r} " FROM "i table{r} where{r}? tail{r}
tail{r}: (group_by{r} order_by_a{r}? | order_by_p{r}?) limit?
results{r}: result{r} (COMMA result{r})*
result{r}: "*" | expr_a{r}
table{r}: {table}
where{r}: " WHERE "i expr_p{r}
group_by{r}: " GROUP BY "i grouping{r} (COMMA grouping{r})* (" HAVING "i expr_a{r})?
grouping{r}: column{r} | scalar_p{r}
order_by_p{r}: " ORDER BY "i ordering_p{r} (COMMA ordering_p{r})*
ordering_p{r}: (column{r} | scalar_p{r}) (" ASC"i | " DESC"i)?
order_by_a{r}: " ORDER BY "i ordering_a{r} (COMMA ordering_a{r})*
ordering_a{r}: (column{r} | aggregate{r} | scalar_a{r}) (" ASC"i | " DESC"i)?
aggregate{r}: "COUNT("i ("*" | DISTINCT? expr_p{r}) ")" | AGG1 "(" DISTINCT? expr_p{r} ")" | "GROUP_CONCAT("i (DISTINCT expr_p{r} | expr_p{r} (COMMA expr_p{r})?) ")"
{plain}{with_aggregates}column{r}: (table{r} ".")? column_name{r}
column_name{r}: {columns}
"#,
        plain = expression_rules("p", r, false),
        with_aggregates = expression_rules("a", r, true),
        columns = columns.join(" | "),
    )
}

/// What every relation's rules share. Integers have at most 18 digits: a longer one is a REAL
/// to SQLite, which `LIMIT` refuses (Qwen2.5-Coder-0.5B wrote `LIMIT 1000…0` with 70 digits).
const TERMINALS: &str = r#"limit: " LIMIT "i INT (" OFFSET "i INT)?
DISTINCT: "DISTINCT "i
LIKE: " LIKE "i | " NOT LIKE "i
BETWEEN: " BETWEEN "i | " NOT BETWEEN "i
IN: " IN "i | " NOT IN "i
COMMA: /, ?/
CMP: / ?(=|==|!=|<>|<|<=|>|>=) ?/
ADD: / ?(\+|\|\|) ?/ | " - "
MUL: / ?(\*|\/|%) ?/
INT: /[0-9]{1,18}/
DECIMAL: /[0-9]+\.[0-9]+/
STRING: /'([^'\n]|'')*'/
TYPE: "INTEGER"i | "REAL"i | "TEXT"i | "NUMERIC"i
AGG1: "SUM"i | "AVG"i | "MIN"i | "MAX"i | "TOTAL"i
FN1: "LOWER"i | "UPPER"i | "LENGTH"i | "ABS"i
FN12: "ROUND"i | "TRIM"i
FN2: "IFNULL"i | "INSTR"i
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::corpus::{SourceFormat, Table, TableMeta};
    use crate::sql::Relation;

    #[test]
    fn identifiers_are_the_relations_quoted_names() {
        let table = Table {
            id: "x.csv".into(),
            source_format: SourceFormat::Csv,
            header: vec!["Name".into(), "Price ($)".into(), "".into()],
            rows: vec![vec!["a".into(), "$5".into(), "x".into()]],
            meta: TableMeta::default(),
        };
        let relation = Relation::from_table(&table, "t").unwrap();
        let grammar = select_grammar(relation.schema());
        assert!(grammar.contains(r#"table: "\"t\"""#), "{grammar}");
        assert!(
            grammar.contains(r#"/[Ss][Ee][Ll][Ee][Cc][Tt] /"#),
            "{grammar}"
        );
        assert!(
            grammar.contains(r#"/[Ss][Uu][Bb][Ss][Tt][Rr]\(/"#),
            "{grammar}"
        );
        assert!(!grammar.contains(r#""i"#), "{grammar}");
        assert!(
            grammar.contains(r#"column_name: "\"name\"" | /[Nn][Aa][Mm][Ee]/ | "\"price\"" | "#),
            "{grammar}"
        );
    }
}
