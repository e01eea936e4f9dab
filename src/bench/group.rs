//! A source table's sibling group: which rows and columns each variant keeps, its renamed schema
//! and value formats, its in-memory SQLite copy under the original names, and its corpus file.

use std::collections::BTreeSet;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rusqlite::types::Value;
use rusqlite::Connection;

use super::sql::{self, Column, SourceTable};
use super::tcr::{ColumnRecord, TableRecord, TcrOptions, TcrTable};
use super::variants::{ColumnFormat, Dictionaries, NamingStyle};
use super::BenchError;
use crate::corpus::{mixed_format, serialize, Serialization, SourceFormat, Table, TextFormat};

/// One variant of a source table, before serialization.
pub(super) struct Variant {
    pub(super) id: String,
    pub(super) rows: Vec<usize>,
    pub(super) columns: Vec<usize>,
    pub(super) table_name: String,
    pub(super) column_names: Vec<String>,
    pub(super) naming: NamingStyle,
    pub(super) formats: Vec<ColumnFormat>,
    pub(super) format: TextFormat,
}

/// A source table's variants and their in-memory copies under the original names.
pub(super) struct Group {
    pub(super) db_id: String,
    pub(super) source: SourceTable,
    pub(super) variants: Vec<Variant>,
    pub(super) copies: Vec<Connection>,
}

/// A ChaCha8 stream for one named decision: FNV-1a over the name parts, folded with the seed.
pub(super) fn rng_for(seed: u64, parts: &[&str]) -> ChaCha8Rng {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for byte in part.bytes().chain(std::iter::once(0x1f)) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    ChaCha8Rng::seed_from_u64(hash ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// A path component made of safe characters only.
pub(super) fn file_part(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

pub(super) fn extension(format: TextFormat) -> &'static str {
    match format {
        TextFormat::Csv => "csv",
        TextFormat::Markdown => "md",
        TextFormat::Html => "html",
    }
}

/// Row subsets of a source table with `n` rows for `count` variants of at most `max_rows` rows.
pub(super) fn row_subsets(
    n: usize,
    count: usize,
    max_rows: usize,
    rng: &mut ChaCha8Rng,
) -> Vec<Vec<usize>> {
    let sorted = |mut rows: Vec<usize>| {
        rows.sort_unstable();
        rows
    };
    if count == 1 {
        if n <= max_rows {
            return vec![(0..n).collect()];
        }
        return vec![sorted(
            rand::seq::index::sample(rng, n, max_rows).into_vec(),
        )];
    }
    if n >= count * max_rows {
        let mut order: Vec<usize> = (0..n).collect();
        order.shuffle(rng);
        return order
            .chunks(max_rows)
            .take(count)
            .map(|chunk| sorted(chunk.to_vec()))
            .collect();
    }
    (0..count)
        .map(|_| {
            let share = rng.random_range(0.4..0.75);
            let size = ((n as f64 * share).ceil() as usize).clamp(n.min(1), max_rows.min(n));
            sorted(rand::seq::index::sample(rng, n, size).into_vec())
        })
        .collect()
}

/// Column positions a variant keeps: all, or (for about a third of the variants of a group with
/// three or more columns) all but one to a quarter of them.
pub(super) fn column_subset(width: usize, in_group: bool, rng: &mut ChaCha8Rng) -> Vec<usize> {
    if !in_group || width < 3 || !rng.random_bool(0.35) {
        return (0..width).collect();
    }
    let drop = rng.random_range(1..=(width / 4).max(1));
    let mut dropped = rand::seq::index::sample(rng, width, drop).into_vec();
    dropped.sort_unstable();
    (0..width)
        .filter(|c| dropped.binary_search(c).is_err())
        .collect()
}

/// Renamed table and column names for one variant: never the original header, never the header of
/// an earlier sibling, never two columns SQLite would confuse (names are case-insensitive).
pub(super) fn rename_schema(
    dict: &Dictionaries,
    table: &str,
    columns: &[&str],
    taken: &[Vec<String>],
    variant: usize,
    rng: &mut ChaCha8Rng,
) -> (NamingStyle, String, Vec<String>) {
    for _ in 0..32 {
        let style = NamingStyle::random(rng);
        let names: Vec<String> = columns.iter().map(|c| style.rename(dict, c, rng)).collect();
        let distinct: BTreeSet<String> = names.iter().map(|n| n.to_lowercase()).collect();
        let fresh = names.iter().zip(columns).any(|(n, c)| n.as_str() != *c);
        if distinct.len() == names.len()
            && names.iter().all(|n| !n.is_empty())
            && fresh
            && !taken.contains(&names)
        {
            return (style, style.rename(dict, table, rng), names);
        }
    }
    // Names the dictionaries cannot vary (say, one column `x`): number them instead.
    let style = NamingStyle::random(rng);
    let names = columns
        .iter()
        .enumerate()
        .map(|(i, c)| format!("{c}_{}_{i}", variant + 1))
        .collect();
    (style, format!("{table}_{}", variant + 1), names)
}

pub(super) fn text_format(serialization: Serialization, stem: &str) -> TextFormat {
    match serialization {
        Serialization::Fixed(format) => format,
        Serialization::Mixed { seed } => mixed_format(stem, seed),
        Serialization::Own => TextFormat::Csv,
    }
}

pub(super) fn make_group(
    dict: &Dictionaries,
    db_id: &str,
    source: SourceTable,
    with_questions: bool,
    options: &TcrOptions,
) -> Result<Group, BenchError> {
    let mut rng = rng_for(options.seed, &["group", db_id, &source.name]);
    let count = if with_questions {
        rng.random_range(options.siblings.0..=options.siblings.1)
    } else {
        1
    };
    let subsets = row_subsets(source.rows.len(), count, options.rows, &mut rng);
    let mut variants: Vec<Variant> = Vec::with_capacity(count);
    let mut taken = Vec::new();
    for (k, rows) in subsets.into_iter().enumerate() {
        let columns = column_subset(source.columns.len(), with_questions, &mut rng);
        let names: Vec<&str> = columns
            .iter()
            .map(|&c| source.columns[c].name.as_str())
            .collect();
        let (naming, table_name, column_names) =
            rename_schema(dict, &source.name, &names, &taken, k, &mut rng);
        taken.push(column_names.clone());
        let formats = ColumnFormat::random_for_variant(dict, columns.len(), &mut rng);
        let stem = format!("{}/{}_T{k}", file_part(db_id), file_part(&source.name));
        let format = text_format(options.serialization, &stem);
        variants.push(Variant {
            id: format!("{stem}.{}", extension(format)),
            rows,
            columns,
            table_name,
            column_names,
            naming,
            formats,
            format,
        });
    }
    let copies = if with_questions {
        variants
            .iter()
            .map(|v| {
                let (columns, rows) = original_view(&source, v);
                sql::load_table(&source.name, &columns, &rows).map_err(|e| BenchError::Variant {
                    id: v.id.clone(),
                    source: e,
                })
            })
            .collect::<Result<_, _>>()?
    } else {
        Vec::new()
    };
    Ok(Group {
        db_id: db_id.to_string(),
        source,
        variants,
        copies,
    })
}

/// A variant's columns and rows with the original names and values.
pub(super) fn original_view(
    source: &SourceTable,
    variant: &Variant,
) -> (Vec<Column>, Vec<Vec<Value>>) {
    let columns = variant
        .columns
        .iter()
        .map(|&c| source.columns[c].clone())
        .collect();
    let rows = variant
        .rows
        .iter()
        .map(|&r| {
            variant
                .columns
                .iter()
                .map(|&c| source.rows[r].get(c).cloned().unwrap_or(Value::Null))
                .collect()
        })
        .collect();
    (columns, rows)
}

/// The corpus file of a variant: renamed header, reformatted cells.
pub(super) fn render(dict: &Dictionaries, group: &Group, variant: &Variant) -> TcrTable {
    let (_, rows) = original_view(&group.source, variant);
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            row.iter()
                .zip(&variant.formats)
                .map(|(value, format)| format.format(dict, value))
                .collect()
        })
        .collect();
    let table = Table {
        id: variant.id.clone(),
        source_format: match variant.format {
            TextFormat::Csv => SourceFormat::Csv,
            TextFormat::Markdown => SourceFormat::Markdown,
            TextFormat::Html => SourceFormat::Html,
        },
        header: variant.column_names.clone(),
        rows,
        meta: Default::default(),
    };
    let text = serialize(&table, variant.format);
    let record = TableRecord {
        id: variant.id.clone(),
        db_id: group.db_id.clone(),
        source_table: group.source.name.clone(),
        variant: group
            .variants
            .iter()
            .position(|v| v.id == variant.id)
            .unwrap_or(0),
        group_size: group.variants.len(),
        format: variant.format,
        table_name: variant.table_name.clone(),
        naming: variant.naming,
        columns: variant
            .columns
            .iter()
            .zip(&variant.column_names)
            .zip(&variant.formats)
            .map(|((&c, name), &format)| ColumnRecord {
                source: group.source.columns[c].name.clone(),
                name: name.clone(),
                format,
            })
            .collect(),
        source_rows: variant.rows.clone(),
        bytes: text.len(),
    };
    TcrTable { record, text }
}
