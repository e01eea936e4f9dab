//! TaS's search state: one in-memory SQLite table per query (rusqlite; it stands in for the
//! paper's MongoDB collection), rows = candidate tables, one status and one evidence column per
//! constraint, and the answer column filled at the end.
//!
//! The primitives are the paper's table tools: create (once per query; a second create is
//! refused), append a row (a table already present is skipped: the table id is the key, so a
//! duplicate row cannot exist), update a cell (only out of `pending`, only with evidence), list
//! the rows with pending cells, count, and rank rows for the answer. Every operation returns a
//! snapshot of the whole table for the trajectory.

use rusqlite::{params, Connection};
use serde::{Deserialize, Serialize};

/// A cell of a constraint column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CellStatus {
    /// Still to check: an explicit pending search.
    Pending,
    Yes,
    No,
    /// The constraint does not apply to this table.
    #[serde(rename = "n/a")]
    NotApplicable,
}

impl CellStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CellStatus::Pending => "pending",
            CellStatus::Yes => "yes",
            CellStatus::No => "no",
            CellStatus::NotApplicable => "n/a",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "pending" => Some(CellStatus::Pending),
            "yes" => Some(CellStatus::Yes),
            "no" => Some(CellStatus::No),
            "n/a" => Some(CellStatus::NotApplicable),
            _ => None,
        }
    }
}

/// One cell: a status and the evidence that set it (empty while pending).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cell {
    pub status: CellStatus,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub evidence: String,
}

/// One row: a candidate table (its real id, for the trajectory; prompts show `T<row>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateRow {
    pub row: usize,
    pub table_id: String,
    pub cells: Vec<Cell>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub answer: String,
}

impl StateRow {
    pub fn count(&self, status: CellStatus) -> usize {
        self.cells.iter().filter(|c| c.status == status).count()
    }

    /// Every constraint holds (`n/a` counts as holding: it was judged not to apply).
    pub fn is_full_match(&self) -> bool {
        !self.cells.is_empty()
            && self
                .cells
                .iter()
                .all(|c| matches!(c.status, CellStatus::Yes | CellStatus::NotApplicable))
            && self.count(CellStatus::Yes) > 0
    }
}

/// Errors of the state table: misuse by the loop (a bug), or SQLite itself.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("the state table already exists: one schema per query")]
    AlreadyCreated,
    #[error("the state table does not exist yet")]
    NotCreated,
    #[error("row {row} has no constraint {constraint}")]
    NoSuchCell { row: usize, constraint: usize },
    #[error("row {row}, constraint {constraint} is already {status}, not pending")]
    NotPending {
        row: usize,
        constraint: usize,
        status: &'static str,
    },
    #[error("a cell leaves `pending` only with evidence")]
    NoEvidence,
    #[error("a cell can only be set to yes, no or n/a")]
    BackToPending,
    #[error("SQLite: {0}")]
    Sql(#[from] rusqlite::Error),
}

/// The state table of one query.
pub struct StateTable {
    connection: Connection,
    constraints: Option<usize>,
}

impl StateTable {
    pub fn new() -> Result<Self, StateError> {
        Ok(Self {
            connection: Connection::open_in_memory()?,
            constraints: None,
        })
    }

    fn constraint_count(&self) -> Result<usize, StateError> {
        self.constraints.ok_or(StateError::NotCreated)
    }

    /// Creates the table with `constraints` constraint columns (`c0..`, `e0..`).
    pub fn create(&mut self, constraints: usize) -> Result<(), StateError> {
        if self.constraints.is_some() {
            return Err(StateError::AlreadyCreated);
        }
        let mut columns = String::new();
        for c in 0..constraints {
            columns.push_str(&format!(
                ", c{c} TEXT NOT NULL DEFAULT 'pending', e{c} TEXT NOT NULL DEFAULT ''"
            ));
        }
        self.connection.execute_batch(&format!(
            "CREATE TABLE state (row INTEGER PRIMARY KEY, table_id TEXT NOT NULL UNIQUE{columns}, \
             answer TEXT NOT NULL DEFAULT '')"
        ))?;
        self.constraints = Some(constraints);
        Ok(())
    }

    /// Appends a row for `table_id` with every cell pending; `None` when the table already has a
    /// row (the duplicate check of the paper's row expansion).
    pub fn append(&mut self, table_id: &str) -> Result<Option<usize>, StateError> {
        self.constraint_count()?;
        let inserted = self.connection.execute(
            "INSERT OR IGNORE INTO state (row, table_id) VALUES ((SELECT COUNT(*) FROM state), ?1)",
            params![table_id],
        )?;
        if inserted == 0 {
            return Ok(None);
        }
        Ok(Some(self.count()? - 1))
    }

    /// Sets one pending cell; the evidence must be non-empty.
    pub fn update(
        &mut self,
        row: usize,
        constraint: usize,
        status: CellStatus,
        evidence: &str,
    ) -> Result<(), StateError> {
        let constraints = self.constraint_count()?;
        if constraint >= constraints || row >= self.count()? {
            return Err(StateError::NoSuchCell { row, constraint });
        }
        if status == CellStatus::Pending {
            return Err(StateError::BackToPending);
        }
        if evidence.trim().is_empty() {
            return Err(StateError::NoEvidence);
        }
        let current: String = self.connection.query_row(
            &format!("SELECT c{constraint} FROM state WHERE row = ?1"),
            params![row as i64],
            |r| r.get(0),
        )?;
        if current != CellStatus::Pending.as_str() {
            return Err(StateError::NotPending {
                row,
                constraint,
                status: CellStatus::parse(&current).map_or("unknown", CellStatus::as_str),
            });
        }
        self.connection.execute(
            &format!("UPDATE state SET c{constraint} = ?1, e{constraint} = ?2 WHERE row = ?3"),
            params![status.as_str(), evidence.trim(), row as i64],
        )?;
        Ok(())
    }

    /// Records the answer a QA call gave on this row's table.
    pub fn set_answer(&mut self, row: usize, answer: &str) -> Result<(), StateError> {
        self.connection.execute(
            "UPDATE state SET answer = ?1 WHERE row = ?2",
            params![answer, row as i64],
        )?;
        Ok(())
    }

    pub fn count(&self) -> Result<usize, StateError> {
        let n: i64 = self
            .connection
            .query_row("SELECT COUNT(*) FROM state", [], |r| r.get(0))?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// Rows with at least one pending cell, in insertion order (the paper's "filter pending").
    pub fn pending_rows(&self) -> Result<Vec<usize>, StateError> {
        let constraints = self.constraint_count()?;
        if constraints == 0 {
            return Ok(Vec::new());
        }
        let any_pending: Vec<String> = (0..constraints)
            .map(|c| format!("c{c} = 'pending'"))
            .collect();
        self.row_numbers(&format!(
            "SELECT row FROM state WHERE {} ORDER BY row",
            any_pending.join(" OR ")
        ))
    }

    /// Rows for answer synthesis: most `yes` first, then fewest `no`, then insertion order.
    pub fn ranked_rows(&self) -> Result<Vec<usize>, StateError> {
        let constraints = self.constraint_count()?;
        let sum = |status: &str| {
            if constraints == 0 {
                "0".to_string()
            } else {
                (0..constraints)
                    .map(|c| format!("(c{c} = '{status}')"))
                    .collect::<Vec<_>>()
                    .join(" + ")
            }
        };
        self.row_numbers(&format!(
            "SELECT row FROM state ORDER BY {} DESC, {} ASC, row ASC",
            sum("yes"),
            sum("no")
        ))
    }

    /// The `row` column of a query's result, in its order.
    fn row_numbers(&self, sql: &str) -> Result<Vec<usize>, StateError> {
        let mut statement = self.connection.prepare(sql)?;
        let rows = statement
            .query_map([], |r| r.get::<_, i64>(0))?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows.into_iter().map(|r| r as usize).collect())
    }

    /// The whole table, in insertion order.
    pub fn snapshot(&self) -> Result<Vec<StateRow>, StateError> {
        let constraints = self.constraint_count()?;
        let mut columns = vec!["row".to_string(), "table_id".to_string()];
        for c in 0..constraints {
            columns.push(format!("c{c}"));
            columns.push(format!("e{c}"));
        }
        columns.push("answer".to_string());
        let sql = format!("SELECT {} FROM state ORDER BY row", columns.join(", "));
        let mut statement = self.connection.prepare(&sql)?;
        let rows = statement
            .query_map([], |r| {
                let mut cells = Vec::with_capacity(constraints);
                for c in 0..constraints {
                    let status: String = r.get(2 + 2 * c)?;
                    cells.push(Cell {
                        status: CellStatus::parse(&status).unwrap_or(CellStatus::Pending),
                        evidence: r.get(3 + 2 * c)?,
                    });
                }
                Ok(StateRow {
                    row: r.get::<_, i64>(0)? as usize,
                    table_id: r.get(1)?,
                    cells,
                    answer: r.get(2 + 2 * constraints)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transitions_keep_the_invariants() {
        let mut state = StateTable::new().unwrap();
        assert!(matches!(state.append("a"), Err(StateError::NotCreated)));
        state.create(2).unwrap();
        assert!(matches!(state.create(3), Err(StateError::AlreadyCreated)));
        assert_eq!(state.append("a").unwrap(), Some(0));
        assert_eq!(state.append("b").unwrap(), Some(1));
        assert_eq!(state.append("a").unwrap(), None, "no duplicate rows");
        assert_eq!(state.count().unwrap(), 2);
        assert_eq!(state.pending_rows().unwrap(), [0, 1]);
        assert!(matches!(
            state.update(0, 0, CellStatus::Yes, "  "),
            Err(StateError::NoEvidence)
        ));
        assert!(matches!(
            state.update(0, 0, CellStatus::Pending, "x"),
            Err(StateError::BackToPending)
        ));
        assert!(matches!(
            state.update(0, 2, CellStatus::Yes, "x"),
            Err(StateError::NoSuchCell { .. })
        ));
        state
            .update(1, 0, CellStatus::Yes, "Paris | 2148000")
            .unwrap();
        state
            .update(1, 1, CellStatus::NotApplicable, "no year column")
            .unwrap();
        assert!(matches!(
            state.update(1, 0, CellStatus::No, "x"),
            Err(StateError::NotPending { status: "yes", .. })
        ));
        state.update(0, 0, CellStatus::No, "only Lyon").unwrap();
        assert_eq!(state.pending_rows().unwrap(), [0]);
        assert_eq!(state.ranked_rows().unwrap(), [1, 0]);
        let snapshot = state.snapshot().unwrap();
        assert!(snapshot[1].is_full_match());
        assert!(!snapshot[0].is_full_match());
        assert_eq!(snapshot[0].cells[1].status, CellStatus::Pending);
        assert_eq!(snapshot[1].cells[0].evidence, "Paris | 2148000");
        state.set_answer(1, "2148000").unwrap();
        assert_eq!(state.snapshot().unwrap()[1].answer, "2148000");
    }

    #[test]
    fn ranking_prefers_yes_then_fewer_no_then_order() {
        let mut state = StateTable::new().unwrap();
        state.create(2).unwrap();
        for id in ["a", "b", "c", "d"] {
            state.append(id).unwrap();
        }
        state.update(0, 0, CellStatus::No, "e").unwrap();
        state.update(1, 0, CellStatus::Yes, "e").unwrap();
        state.update(1, 1, CellStatus::No, "e").unwrap();
        state.update(2, 0, CellStatus::Yes, "e").unwrap();
        assert_eq!(state.ranked_rows().unwrap(), [2, 1, 3, 0]);
    }
}
