//! The thread index of either backend, read whole: active threads and their heads, archived
//! threads, or both — from PostgreSQL when the root names a database, else from `index.db`.

use std::path::Path;

use crate::cas::Hash;

use crate::engine::storage::index_files::{
    Archived, Entry, IndexError, Threads, archived_of, read_registry,
};
use crate::engine::storage::{self, index_db};

/// Every active thread and its head (the thread index of either backend).
pub fn read_threads(root: &Path) -> Result<Threads, IndexError> {
    if let Some(pg) = storage::pg(root)? {
        return Ok(pg
            .active_threads(None)?
            .into_iter()
            .map(|t| (t.id, t.head))
            .collect());
    }
    index_db::active(root)
}

/// Every archived thread, in the order they ended (the thread index of either backend).
pub fn read_history(root: &Path) -> Result<Vec<Archived>, IndexError> {
    if let Some(pg) = storage::pg(root)? {
        return Ok(pg
            .archived_threads()?
            .into_iter()
            .map(archived_of)
            .collect());
    }
    index_db::archived(root)
}

/// Every thread, active and archived, with its workflow: one read of either backend's index.
pub fn read_entries(root: &Path) -> Result<Vec<Entry>, IndexError> {
    if let Some(pg) = storage::pg(root)? {
        let mut out: Vec<Entry> = pg
            .archived_threads()?
            .into_iter()
            .map(|a| Entry {
                id: a.thread,
                workflow: a.workflow,
                head: a.head,
                archived: Some(a.status),
            })
            .collect();
        out.extend(pg.active_threads(None)?.into_iter().map(|t| Entry {
            id: t.id,
            workflow: t.workflow,
            head: t.head,
            archived: None,
        }));
        return Ok(out);
    }
    index_db::entries(root)
}

/// Every hash the index files keep alive: registry versions (current and history), active
/// thread heads and archived thread heads.
pub fn gc_roots(root: &Path) -> Result<Vec<Hash>, IndexError> {
    let mut roots = Vec::new();
    for entry in read_registry(root)?.values() {
        roots.push(entry.hash);
        roots.extend(entry.source);
        roots.extend(entry.history.iter().map(|v| v.hash));
        roots.extend(entry.history.iter().filter_map(|v| v.source));
    }
    roots.extend(read_threads(root)?.into_values());
    roots.extend(read_history(root)?.into_iter().map(|a| a.head));
    Ok(roots)
}
