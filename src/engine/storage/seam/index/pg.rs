//! PostgreSQL's thread index: the `threads` and `history` tables (the run queue is their
//! `queued` column), the registry tables, and the nodes table, which this root's `cas/`
//! caches.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::cas::gc::{GcOptions, GcReport};
use crate::cas::{Hash, Store};
use crate::engine::storage::index_db::Scan;
use crate::engine::storage::index_files::{self, IndexError, Registry, Threads};
use crate::pg::{
    ArchivedThread, Entry, Exported, IndexRow, Learned, ListPage, NewThread, Occupancy, PgError,
    PgStore, SpentChange, Successor, ThreadState, search_text,
};

use super::{
    ExportError, GcError, MaintenanceError, NodeCheck, Nodes, Pruned, State, ThreadIndex,
    ThreadIndexError, ThreadRecords,
};
use crate::engine::storage::seam::nodes::PgNodes;
use crate::engine::storage::seam::nodes::upkeep::{check_nodes, collect_garbage};

/// Rows per page of a listing.
const PAGE: usize = 2000;

/// One root's view of a PostgreSQL store.
pub(super) struct Pg {
    root: PathBuf,
    pg: Arc<PgStore>,
}

impl Pg {
    pub(super) fn new(root: &Path, pg: Arc<PgStore>) -> Pg {
        Pg {
            root: root.to_path_buf(),
            pg,
        }
    }

    /// The nodes table, with `store`'s files as its cache.
    fn nodes<'a>(&self, store: &'a Store) -> PgNodes<'a> {
        PgNodes {
            pg: self.pg.clone(),
            cache: Some(store),
        }
    }
}

/// A PostgreSQL error about one thread in the index's words.
fn thread_error(id: &str, e: PgError) -> ThreadIndexError {
    match e {
        PgError::Archived { status, .. } => ThreadIndexError::Archived {
            id: id.to_owned(),
            status,
            onto: None,
        },
        PgError::UnknownThread(_) => ThreadIndexError::Unknown(id.to_owned()),
        e => IndexError::from(e).into(),
    }
}

impl ThreadIndex for Pg {
    fn state(&self, id: &str) -> Result<State, ThreadIndexError> {
        match self.pg.thread(id) {
            Ok(ThreadState::Active(t)) => Ok(State::Active { head: t.head }),
            Ok(ThreadState::Archived(a)) => Ok(State::Archived(a)),
            Err(PgError::UnknownThread(_)) => Err(ThreadIndexError::Unknown(id.to_owned())),
            Err(e) => Err(IndexError::from(e).into()),
        }
    }

    fn with_prefix(&self, prefix: &str, limit: usize) -> Result<Vec<String>, ThreadIndexError> {
        self.pg
            .ids_with_prefix(prefix, limit)
            .map_err(|e| IndexError::from(e).into())
    }

    fn active_at(&self, head: Hash) -> Result<Vec<String>, ThreadIndexError> {
        Ok(self
            .active()?
            .into_iter()
            .filter(|(_, h)| *h == head)
            .map(|(id, _)| id)
            .collect())
    }

    fn add(&self, row: &NewThread<'_>) -> Result<(), ThreadIndexError> {
        self.pg
            .add_thread(row)
            .map_err(|e| IndexError::from(e).into())
    }

    fn spent_at(&self, id: &str, head: Hash) -> Result<Option<String>, IndexError> {
        Ok(self.pg.spent_at(id, head)?)
    }

    fn note_spent(&self, id: &str, head: Hash, spent: &str) {
        let _ = self.pg.note_spent(id, head, spent);
    }

    fn compare_and_set(
        &self,
        id: &str,
        expected: Hash,
        new: Hash,
        moved: (Option<&str>, SpentChange<'_>),
    ) -> Result<(), ThreadIndexError> {
        if self
            .pg
            .compare_and_set_next(id, expected, new, moved)
            .map_err(IndexError::from)?
        {
            return Ok(());
        }
        Err(match self.state(id)? {
            State::Active { head } => ThreadIndexError::HeadMoved {
                id: id.to_owned(),
                expected,
                actual: head,
            },
            State::Archived(a) => ThreadIndexError::Archived {
                id: id.to_owned(),
                status: a.status,
                onto: None,
            },
        })
    }

    fn archive(&self, id: &str, status: &str) -> Result<ArchivedThread, ThreadIndexError> {
        match self.pg.archive(id, status) {
            Ok(a) => Ok(a),
            Err(PgError::Archived { id, status }) => Err(ThreadIndexError::Archived {
                id,
                status,
                onto: None,
            }),
            Err(PgError::UnknownThread(id)) => Err(ThreadIndexError::Unknown(id)),
            Err(e) => Err(IndexError::from(e).into()),
        }
    }

    fn rebase(
        &self,
        id: &str,
        head: Hash,
        new: &Successor<'_>,
    ) -> Result<Option<ArchivedThread>, ThreadIndexError> {
        self.pg
            .rebase(id, head, new)
            .map_err(|e| thread_error(id, e))
    }

    fn successor(&self, id: &str) -> Result<Option<String>, ThreadIndexError> {
        self.pg
            .successor_of(id)
            .map_err(|e| IndexError::from(e).into())
    }

    fn parent(&self, id: &str) -> Option<String> {
        match self.pg.thread(id).ok()? {
            ThreadState::Active(t) => t.parent,
            ThreadState::Archived(a) => a.parent,
        }
    }

    fn queue(&self, id: &str) -> Result<(), ThreadIndexError> {
        self.pg.queue(id).map_err(|e| thread_error(id, e))
    }

    fn dequeue(&self, id: &str) -> Result<(), ThreadIndexError> {
        match self.pg.dequeue(id) {
            Ok(()) | Err(PgError::Archived { .. } | PgError::UnknownThread(_)) => Ok(()),
            Err(e) => Err(IndexError::from(e).into()),
        }
    }

    fn queued(&self) -> Result<Vec<String>, ThreadIndexError> {
        // The table keeps no time of queuing: oldest thread (ULIDs sort by creation) first.
        let mut ids: Vec<String> = self
            .pg
            .active_threads(None)
            .map_err(IndexError::from)?
            .into_iter()
            .filter(|t| t.queued)
            .map(|t| t.id)
            .collect();
        ids.sort();
        Ok(ids)
    }

    fn active(&self) -> Result<Threads, IndexError> {
        Ok(self
            .pg
            .active_threads(None)?
            .into_iter()
            .map(|t| (t.id, t.head))
            .collect())
    }

    fn archived(&self) -> Result<Vec<ArchivedThread>, IndexError> {
        Ok(self.pg.archived_threads()?)
    }

    fn entries(&self) -> Result<Vec<Entry>, IndexError> {
        Ok(self.pg.entries()?)
    }

    fn thread_workflows(&self) -> Result<Vec<Hash>, IndexError> {
        Ok(self.pg.thread_workflows()?)
    }

    fn scan(&self, scan: &Scan, each: &mut dyn FnMut(IndexRow) -> bool) -> Result<(), IndexError> {
        let mut before = scan.before_id.clone();
        loop {
            let page = self.pg.list_page(&ListPage {
                all: scan.all,
                workflows: scan.workflows.clone(),
                since_id: scan.since_id.clone(),
                before_id: before.clone(),
                text: scan
                    .text
                    .as_ref()
                    .map(|t| (t.needle(), t.workflows.clone())),
                limit: PAGE,
            })?;
            let full = page.len() == PAGE;
            before = page.last().map(|r| r.id.clone());
            for row in page {
                if !each(row) {
                    return Ok(());
                }
            }
            if !full {
                return Ok(());
            }
        }
    }

    fn note_derived(&self, learned: &[Learned]) {
        let _ = self.pg.note_derived(learned);
    }

    fn unsearchable(&self, limit: usize) -> Result<Vec<(String, Hash)>, IndexError> {
        Ok(self.pg.unsearchable(limit)?)
    }

    fn note_prompts(&self, prompts: &[(String, String)]) -> Result<(), IndexError> {
        let kept: Vec<(String, String)> = prompts
            .iter()
            .map(|(id, prompt)| (id.clone(), search_text(prompt)))
            .collect();
        Ok(self.pg.note_prompts(&kept)?)
    }

    fn registry(&self) -> Result<Registry, IndexError> {
        Ok(index_files::registry_from_rows(self.pg.registry_names()?))
    }

    fn update_registry(
        &self,
        change: &mut dyn FnMut(&mut Registry) -> bool,
    ) -> Result<(), IndexError> {
        let changed = self.pg.update_registry(|rows| {
            let mut registry = index_files::registry_from_rows(std::mem::take(rows));
            let keep = change(&mut registry);
            *rows = index_files::registry_to_rows(registry);
            if keep { Ok(()) } else { Err(()) }
        })?;
        // A refused change wrote nothing (the transaction ended without its rows).
        let _ = changed;
        Ok(())
    }

    fn prune_logs(&self, cut: u64, dry_run: bool) -> Result<Pruned, IndexError> {
        let (threads, bytes) = self.pg.prune_runs(cut, dry_run)?;
        Ok(Pruned { threads, bytes })
    }

    fn collect_garbage(&self, store: &Store, options: &GcOptions) -> Result<GcReport, GcError> {
        let roots =
            || crate::engine::storage::threads::gc_roots(&self.root).map_err(GcError::Roots);
        collect_garbage(store, &self.nodes(store), roots, options)
    }

    fn check_nodes<'a>(&'a self, store: &'a Store) -> Result<NodeCheck<'a>, MaintenanceError> {
        check_nodes(store, Box::new(self.nodes(store)))
    }

    fn occupancy(&self) -> Result<Occupancy, IndexError> {
        Ok(self.pg.occupancy()?)
    }

    /// The rows keep all a copy takes: start times, parents and what lists show.
    fn export_threads(
        &self,
        _records: &dyn ThreadRecords,
        _nodes: &dyn Nodes,
    ) -> Result<Exported, ExportError> {
        Ok(Exported {
            active: self.pg.active_threads(None).map_err(IndexError::from)?,
            archived: self.pg.archived_threads().map_err(IndexError::from)?,
            known: self.pg.row_facts().map_err(IndexError::from)?,
        })
    }

    fn import_threads(&self, threads: &Exported) -> Result<Result<(), Occupancy>, IndexError> {
        Ok(self.pg.insert_copied_threads(threads)?)
    }

    fn shared(&self) -> bool {
        true
    }
}
