//! Table-as-Search's flags (`eval --method tas`).

use tableseek::agent::tas::search::SearchTool;
use tableseek::agent::tas::{TasConfig, TasPlanner};

#[derive(Debug, Clone, clap::Args)]
pub struct TasArgs {
    /// TaS: pattern lists per row expansion (n).
    #[arg(long, default_value_t = TasConfig::default().searches)]
    pub tas_searches: usize,
    /// TaS: unseen tables appended from each list's ranking (m).
    #[arg(long, default_value_t = TasConfig::default().per_search)]
    pub tas_per_search: usize,
    /// TaS: most constraint columns the schema call may write.
    #[arg(long, default_value_t = TasConfig::default().max_constraints)]
    pub tas_constraints: usize,
    /// TaS: who picks each step. `rule` (the spec's default for small models: verify pending
    /// rows, expand when none matches, answer on a full match) or `llm` (one planner call per
    /// step, the rule on unusable output).
    #[arg(long, default_value = "rule")]
    pub tas_planner: TasPlanner,
    /// TaS: the search tools of the first row expansion, comma-separated: grep (the pattern
    /// ranking, always on), bm25 and dense over the query; the offered tables join the state
    /// table in their fused (RRF) order. Dense loads the `--embed-model` encoder.
    #[arg(long, default_value = "grep,bm25,dense", value_parser = parse_tools)]
    pub tas_tools: ToolList,
}

/// `--tas-tools`, one value (a `Vec` field would make clap expect the flag once per tool).
#[derive(Debug, Clone)]
pub struct ToolList(Vec<SearchTool>);

fn parse_tools(s: &str) -> Result<ToolList, String> {
    SearchTool::parse_list(s)
        .map(ToolList)
        .map_err(|e| e.to_string())
}

impl TasArgs {
    /// The settings; the task, budget, evidence size and token cap come from the agent's flags.
    pub fn config(&self) -> TasConfig {
        TasConfig {
            searches: self.tas_searches,
            per_search: self.tas_per_search,
            max_constraints: self.tas_constraints,
            planner: self.tas_planner,
            tools: self.tas_tools.0.clone(),
            ..TasConfig::default()
        }
    }
}
