//! PostgreSQL's thread records: a `thread_context` row per thread (the pause flag in a column of
//! its own, which claims read), and one `lineage` row per fork (`kind = 'fork'`) or child
//! (`kind = 'child'`), read by every machine.

use std::path::PathBuf;
use std::sync::Arc;

use super::dir::parse_context;
use super::{Fork, ParentLink, ThreadContext, ThreadRecords};
use crate::cas::store::now_ms;
use crate::engine::storage::index_files::IndexError;
use crate::pg::{LineageRow, PgStore};

/// Thread records in the database.
pub(super) struct Pg {
    pg: Arc<PgStore>,
}

impl Pg {
    pub(super) fn new(pg: Arc<PgStore>) -> Pg {
        Pg { pg }
    }
}

/// A fork's `lineage` row as a record (`None` for a row whose step is not a hash).
fn fork_of_row(row: LineageRow) -> Option<Fork> {
    Some(Fork {
        step: row.step.parse().ok()?,
        thread: row.thread,
        from: row.source,
        at: row.at_ms,
    })
}

impl ThreadRecords for Pg {
    fn context(&self, id: &str) -> Result<ThreadContext, IndexError> {
        let Some(row) = self.pg.thread_context(id)? else {
            return Ok(ThreadContext::default());
        };
        let mut context =
            parse_context(&row.body, || PathBuf::from(format!("thread_context {id}")))?;
        context.paused = row.paused;
        Ok(context)
    }

    /// Keeps whether it is paused (its own column) unless `context` says paused.
    fn set_context(&self, id: &str, context: &ThreadContext) -> Result<(), IndexError> {
        let body = serde_json::to_string(&ThreadContext {
            paused: false,
            ..context.clone()
        })
        .expect("a context serialises");
        self.pg.put_thread_context(id, &body, now_ms())?;
        if context.paused {
            self.pg.set_thread_paused(id, true, now_ms())?;
        }
        Ok(())
    }

    fn set_paused(&self, id: &str, paused: bool) -> Result<(), IndexError> {
        self.pg.set_thread_paused(id, paused, now_ms())?;
        Ok(())
    }

    fn record_fork(&self, fork: &Fork) -> Result<(), IndexError> {
        self.pg.add_lineage(&LineageRow {
            thread: fork.thread.clone(),
            kind: "fork".to_owned(),
            source: fork.from.clone(),
            step: fork.step.to_string(),
            role: None,
            at_ms: fork.at,
        })?;
        Ok(())
    }

    fn forks(&self) -> Result<Vec<Fork>, IndexError> {
        Ok(self
            .pg
            .lineage_all("fork")?
            .into_iter()
            .filter_map(fork_of_row)
            .collect())
    }

    /// One row, not every fork.
    fn origin_of(&self, id: &str) -> Result<Option<Fork>, IndexError> {
        Ok(self
            .pg
            .lineage_of(id)?
            .filter(|row| row.kind == "fork")
            .and_then(fork_of_row))
    }

    fn link_parent(&self, child: &str, link: &ParentLink) -> Result<(), IndexError> {
        self.pg.add_lineage(&LineageRow {
            thread: child.to_owned(),
            kind: "child".to_owned(),
            source: Some(link.thread.clone()),
            step: link.head.to_string(),
            role: Some(link.role.clone()),
            at_ms: now_ms(),
        })?;
        Ok(())
    }

    fn parent(&self, child: &str) -> Option<ParentLink> {
        let row = self.pg.lineage_of(child).ok()??;
        (row.kind == "child").then_some(ParentLink {
            thread: row.source?,
            head: row.step.parse().ok()?,
            role: row.role.unwrap_or_default(),
        })
    }

    fn children(&self, parent: &str) -> Vec<String> {
        self.pg
            .lineage_from(parent, "child")
            .map(|rows| rows.into_iter().map(|r| r.thread).collect())
            .unwrap_or_default()
    }
}
