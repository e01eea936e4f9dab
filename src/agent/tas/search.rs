//! TaS's search tools: the grep ranker of the run's [`SearchSpace`](crate::agent::SearchSpace),
//! plus rankers over free text (BM25, dense) that the caller supplies through [`TextTools`].
//!
//! The spec's planner adds rows through several strategies per expansion. Each strategy's ranking
//! offers its best unseen tables, and the offered tables join the state table in the order of
//! their reciprocal rank fusion over every ranking of the expansion. The rule-based planner
//! verifies rows in that order, so the first row checked is the one the searches agree on most,
//! not the first search's top table.

use serde::{Deserialize, Serialize};

use crate::agent::AgentError;
use crate::retrieve::fusion::{reciprocal_rank_fusion, RankedList, DEFAULT_RRF_K};

/// Tables a text tool returns for one search: deeper than any expansion takes, so the later
/// deepening still finds unseen tables.
pub const TEXT_SEARCH_DEPTH: usize = 100;

/// One way to rank the corpus.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SearchTool {
    /// The space's ranking under a pattern list (pattern share, or the `--candidates` pool).
    Grep,
    /// BM25 over the query's text.
    Bm25,
    /// The dense encoder over the query's text.
    Dense,
}

impl SearchTool {
    pub fn as_str(self) -> &'static str {
        match self {
            SearchTool::Grep => "grep",
            SearchTool::Bm25 => "bm25",
            SearchTool::Dense => "dense",
        }
    }

    /// A comma-separated list (`grep,bm25,dense`); grep is always part of it, since every
    /// expansion call writes pattern lists.
    pub fn parse_list(s: &str) -> Result<Vec<SearchTool>, AgentError> {
        let mut tools = vec![SearchTool::Grep];
        for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let tool: SearchTool = name.parse()?;
            if !tools.contains(&tool) {
                tools.push(tool);
            }
        }
        tools.sort();
        Ok(tools)
    }
}

impl std::str::FromStr for SearchTool {
    type Err = AgentError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "grep" => Ok(SearchTool::Grep),
            "bm25" => Ok(SearchTool::Bm25),
            "dense" => Ok(SearchTool::Dense),
            _ => Err(AgentError::BadName {
                what: "a TaS search tool",
                input: s.to_string(),
                expected: "grep, bm25 or dense",
            }),
        }
    }
}

/// A ranker over free text.
pub trait TextSearch {
    /// Table indices for `text`, best first, at most `depth`, only tables the text relates to (no
    /// filler in corpus order: a row that matched nothing would still be verified); the error is
    /// the tool's message.
    fn search(&self, text: &str, depth: usize) -> Result<Vec<usize>, String>;
}

/// The text rankers a run may use; a tool in the configuration without one here is refused.
#[derive(Clone, Copy, Default)]
pub struct TextTools<'a> {
    pub bm25: Option<&'a dyn TextSearch>,
    pub dense: Option<&'a dyn TextSearch>,
}

impl<'a> TextTools<'a> {
    /// The ranker behind `tool`; `None` for grep (the space's own ranking) and for a missing one.
    pub(super) fn get(&self, tool: SearchTool) -> Option<&'a dyn TextSearch> {
        match tool {
            SearchTool::Grep => None,
            SearchTool::Bm25 => self.bm25,
            SearchTool::Dense => self.dense,
        }
    }

    /// Fails on a configured text tool that has no ranker.
    pub(super) fn check(&self, tools: &[SearchTool]) -> Result<(), AgentError> {
        for &tool in tools {
            if tool != SearchTool::Grep && self.get(tool).is_none() {
                return Err(AgentError::InvalidConfig(format!(
                    "TaS search tool {} is configured but has no index",
                    tool.as_str()
                )));
            }
        }
        Ok(())
    }
}

/// One search of an expansion.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Search {
    pub tool: SearchTool,
    /// Grep: the pattern list. Text tools: the searched text, as one element.
    pub terms: Vec<String>,
    /// Table indices, best first.
    pub ranking: Vec<usize>,
}

/// The searches' rankings joined by RRF (equal weights, k 60), best first.
pub(super) fn fused_ranking(searches: &[Search]) -> Vec<usize> {
    let lists: Vec<RankedList<'_>> = searches
        .iter()
        .map(|s| RankedList {
            items: &s.ranking,
            weight: 1.0,
        })
        .collect();
    reciprocal_rank_fusion(&lists, DEFAULT_RRF_K)
        .into_iter()
        .map(|f| f.item)
        .collect()
}

/// The order in which the tables offered by an expansion's searches join the state table: by
/// their RRF score over the searches' full rankings (equal weights, k 60), ties in the order
/// offered. `offered` holds no repeats.
pub(super) fn fused_order(searches: &[Search], offered: &[usize]) -> Vec<usize> {
    let fused = fused_ranking(searches);
    let position = |table: usize| fused.iter().position(|&f| f == table).unwrap_or(usize::MAX);
    let mut order: Vec<(usize, usize, usize)> = offered
        .iter()
        .enumerate()
        .map(|(i, &table)| (position(table), i, table))
        .collect();
    order.sort_unstable();
    order.into_iter().map(|(_, _, table)| table).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn search(tool: SearchTool, ranking: &[usize]) -> Search {
        Search {
            tool,
            terms: Vec::new(),
            ranking: ranking.to_vec(),
        }
    }

    #[test]
    fn tool_lists_always_hold_grep_once_in_a_fixed_order() {
        let tools = SearchTool::parse_list("dense, bm25,dense").unwrap();
        assert_eq!(
            tools,
            [SearchTool::Grep, SearchTool::Bm25, SearchTool::Dense]
        );
        assert_eq!(SearchTool::parse_list("").unwrap(), [SearchTool::Grep]);
        assert!(SearchTool::parse_list("grep,colbert").is_err());
    }

    #[test]
    fn offered_tables_join_in_the_order_the_searches_agree_on() {
        // Table 7 is second in both searches, 1 and 4 first in one each: 7 leads.
        let searches = [
            search(SearchTool::Grep, &[1, 7, 3]),
            search(SearchTool::Bm25, &[4, 7, 9]),
        ];
        assert_eq!(fused_order(&searches, &[1, 7, 4]), [7, 1, 4]);
        // A table no ranking holds goes last; ties keep the offered order.
        assert_eq!(fused_order(&searches, &[5, 4, 1]), [1, 4, 5]);
        assert!(fused_order(&searches, &[]).is_empty());
    }

    #[test]
    fn a_configured_tool_without_a_ranker_is_refused() {
        let tools = TextTools::default();
        assert!(tools.check(&[SearchTool::Grep]).is_ok());
        let error = tools.check(&[SearchTool::Grep, SearchTool::Dense]);
        assert!(matches!(error, Err(AgentError::InvalidConfig(m)) if m.contains("dense")));
    }
}
