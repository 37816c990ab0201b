//! Where forks come from (`forks.jsonl` in the storage root): one JSON line per fork,
//! `{"thread": <new id>, "from": <source thread id or null>, "step": <hash>, "at": <ms>}`.
//!
//! A fork's head is a step (or start node) of another thread; content addressing alone cannot
//! say which thread it was taken from (two threads can share a start node), so the fork says it
//! when it is made. The mount shows these lines as `threads/<fork>/origin` and
//! `threads/<id>/forks/`.
//!
//! Over PostgreSQL the record is a row of the `lineage` table instead, read by every
//! machine; the file is not written.
//!
//! Architecture Invariant: a fork's line is written before the fork enters the thread index, so
//! whoever sees the thread can see where it came from; lines are only appended (one `write` on an
//! `O_APPEND` descriptor each), never rewritten.

use std::path::{Path, PathBuf};

use crate::cas::store::now_ms;
use crate::cas::{Hash, Store};
use crate::engine::chain;
use crate::engine::storage::index_files::IndexError;
use crate::engine::storage::seam::records::dir as record_files;

pub(crate) use crate::engine::storage::seam::records::Fork;

/// The path of the forks file under `root`.
pub(crate) fn path(root: &Path) -> PathBuf {
    record_files::forks_path(root)
}

/// Appends the record of a fork.
pub fn record(root: &Path, thread: &str, from: Option<&str>, step: Hash) -> Result<(), IndexError> {
    let fork = Fork {
        thread: thread.to_owned(),
        from: from.map(str::to_owned),
        step,
        at: now_ms(),
    };
    crate::engine::storage::handle(root)?
        .records()
        .record_fork(&fork)
}

/// Every fork, oldest first. Lines that do not parse (a torn last line) are skipped.
pub fn read(root: &Path) -> Result<Vec<Fork>, IndexError> {
    crate::engine::storage::handle(root)?.records().forks()
}

/// The fork record of thread `id`, if it is a fork (over PostgreSQL one row, not every fork).
pub fn origin_of(root: &Path, id: &str) -> Result<Option<Fork>, IndexError> {
    crate::engine::storage::handle(root)?
        .records()
        .origin_of(id)
}

/// The oldest thread whose history holds `step` (for a fork made by hash alone).
pub(crate) fn source_of(store: &Store, step: Hash) -> Option<String> {
    let root = store.root();
    let active = crate::engine::storage::threads::read_threads(root).ok()?;
    let archived = crate::engine::storage::threads::read_history(root).unwrap_or_default();
    let mut candidates: Vec<(String, Hash)> = active.into_iter().collect();
    candidates.extend(archived.into_iter().map(|a| (a.thread, a.head)));
    // Thread ids are ULIDs: sorting them sorts by creation.
    candidates.sort();
    candidates.into_iter().find_map(|(id, head)| {
        let c = chain::load(store, head).ok()?;
        (c.start_hash == step || c.steps.iter().any(|s| s.hash == step)).then_some(id)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forks_are_appended_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read(dir.path()).unwrap().is_empty());
        record(dir.path(), "B", Some("A"), Hash::META).unwrap();
        record(dir.path(), "C", None, Hash::META).unwrap();
        let forks = read(dir.path()).unwrap();
        assert_eq!(forks.len(), 2);
        assert_eq!(forks[0].thread, "B");
        assert_eq!(forks[0].from.as_deref(), Some("A"));
        assert_eq!(forks[1].from, None);
    }
}
