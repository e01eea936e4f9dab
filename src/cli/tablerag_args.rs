//! TableRAG's flags for `tableseek eval`, and the settings they make.

use tableseek::agent::tablerag::{SqlTables, TableRagConfig};
use tableseek::eval::options::TableRagOptions;
use tableseek::retrieve::chunks::ChunkOptions;

pub const TABLERAG_MAX_NEW_TOKENS: usize = 256;

#[derive(Debug, clap::Args)]
pub struct TableRagArgs {
    /// TableRAG: most decompose iterations per query.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    pub tablerag_iterations: u64,
    /// TableRAG: chunks recalled per retrieval (N).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub tablerag_recall: u64,
    /// TableRAG: chunks kept for compose and SQL (k).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    pub tablerag_top_k: u64,
    /// TableRAG: the SQL reads the tables of the top-k chunks (the paper) or the first
    /// retrieved table only (the paper's code).
    #[arg(long, value_enum, default_value_t = SqlTables::Retrieved)]
    pub tablerag_sql_tables: SqlTables,
    /// TableRAG: one more call that must answer when the iterations run out.
    #[arg(long)]
    pub tablerag_force_answer: bool,
    /// TableRAG: most characters per table chunk (row-aligned, header repeated).
    #[arg(long, default_value_t = ChunkOptions::default().max_chars)]
    pub tablerag_chunk_chars: usize,
    /// TableRAG: NL2SQL retries after a failed query, each shown the error (0: the paper, the
    /// error goes to compose).
    #[arg(long, default_value_t = TableRagConfig::default().sql_retries)]
    pub tablerag_sql_retries: usize,
}

impl TableRagArgs {
    pub fn config(&self, max_new_tokens: usize) -> TableRagConfig {
        TableRagConfig {
            max_iterations: self.tablerag_iterations as usize,
            recall: self.tablerag_recall as usize,
            top_k: self.tablerag_top_k as usize,
            sql_tables: self.tablerag_sql_tables,
            force_answer: self.tablerag_force_answer,
            max_new_tokens,
            sql_retries: self.tablerag_sql_retries,
            ..TableRagConfig::default()
        }
    }

    pub fn chunk_options(&self) -> ChunkOptions {
        ChunkOptions {
            max_chars: self.tablerag_chunk_chars,
            ..ChunkOptions::default()
        }
    }

    /// What the run's config records.
    pub fn run_options(&self) -> TableRagOptions {
        TableRagOptions {
            iterations: self.tablerag_iterations,
            recall: self.tablerag_recall,
            top_k: self.tablerag_top_k,
            sql_tables: self.tablerag_sql_tables,
            force_answer: self.tablerag_force_answer,
            chunk_chars: self.tablerag_chunk_chars,
            chunk_overlap: self.chunk_options().overlap,
            sql_retries: self.tablerag_sql_retries,
        }
    }
}
