//! The thread index of either backend, read whole: active threads and their heads, archived
//! threads, or both, through the root's storage handle ([`crate::engine::storage::seam::ThreadIndex`]).

use std::path::Path;

use crate::cas::Hash;

use crate::engine::storage::index_files::{
    ArchivedThread, Entry, IndexError, Threads, read_registry,
};

/// Every active thread and its head (the thread index of either backend).
pub fn read_threads(root: &Path) -> Result<Threads, IndexError> {
    crate::engine::storage::handle(root)?.index().active()
}

/// Every archived thread, in the order they ended (the thread index of either backend).
pub fn read_history(root: &Path) -> Result<Vec<ArchivedThread>, IndexError> {
    crate::engine::storage::handle(root)?.index().archived()
}

/// Every thread, active and archived, with its workflow: one read of either backend's index.
pub(crate) fn read_entries(root: &Path) -> Result<Vec<Entry>, IndexError> {
    crate::engine::storage::handle(root)?.index().entries()
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
