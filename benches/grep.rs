//! Criterion benchmarks of the grep stage: pattern compilation, scoring a corpus, previews, and the
//! corpus load that precedes them. Uses the TabFact tables at `../shared` (or `TABLESEEK_SHARED`) when
//! present, else a synthetic corpus of the same order of size.

use std::hint::black_box;
use std::path::{Path, PathBuf};

use criterion::{criterion_group, criterion_main, Criterion};
use tableseek::corpus::{Corpus, LoadOptions, SourceFormat, Table, TableMeta};
use tableseek::grep::{preview, rank, PatternSet, PreviewOptions};

const PATTERNS: [&str; 8] = [
    "capital",
    "seat of government",
    "australia",
    "population",
    "19[0-9]{2}",
    "canberra",
    "district",
    "year",
];

fn tabfact_dir() -> Option<PathBuf> {
    let shared = std::env::var_os("TABLESEEK_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared"));
    let dir = shared.join("data/tabfact/tables");
    dir.is_dir().then_some(dir)
}

/// 1,700 tables of 14 rows × 7 columns, mostly filler words and years.
fn synthetic() -> Corpus {
    let words = [
        "district", "team", "canberra", "points", "season", "club", "round",
    ];
    let tables = (0..1700)
        .map(|t| Table {
            id: format!("synthetic-{t}.csv"),
            source_format: SourceFormat::Csv,
            header: (0..7)
                .map(|c| format!("{}{c}", words[(t + c) % 7]))
                .collect(),
            rows: (0..14)
                .map(|r| {
                    (0..7)
                        .map(|c| match (t * 31 + r * 7 + c) % 11 {
                            0 => format!("{}", 1900 + (t + r) % 120),
                            1 => words[(t + r) % 7].to_string(),
                            _ => format!("value {r} {c}"),
                        })
                        .collect()
                })
                .collect(),
            meta: TableMeta::default(),
        })
        .collect();
    Corpus::from_tables(tables)
}

fn bench(c: &mut Criterion) {
    let patterns: Vec<String> = PATTERNS.iter().map(|p| p.to_string()).collect();
    let corpus = match tabfact_dir() {
        Some(dir) => {
            c.bench_function("load tabfact (1,695 files)", |b| {
                b.iter(|| Corpus::load(black_box(&dir), &LoadOptions::default()))
            });
            Corpus::load(&dir, &LoadOptions::default())
                .expect("tabfact tables load")
                .0
        }
        None => {
            eprintln!("../shared/data/tabfact/tables not found: benchmarking a synthetic corpus");
            synthetic()
        }
    };
    c.bench_function("compile 8 patterns", |b| {
        b.iter(|| PatternSet::compile(black_box(&patterns)))
    });
    let set = PatternSet::compile(&patterns);
    c.bench_function("rank corpus, 8 patterns", |b| {
        b.iter(|| rank(black_box(&corpus), black_box(&set)))
    });
    let top: Vec<usize> = rank(&corpus, &set)
        .iter()
        .take(5)
        .map(|h| h.table)
        .collect();
    let opts = PreviewOptions::default();
    c.bench_function("previews of the top 5", |b| {
        b.iter(|| {
            top.iter()
                .map(|&t| preview(&corpus, t, &set, &opts).len())
                .sum::<usize>()
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
