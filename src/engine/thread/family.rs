//! Parents and children: threads that sub-workflows start
//! (`docs/agents.md#workflows-as-agents-and-steps-a-person-answers`).
//!
//! The child's start node records its parent's head (`parent`), which is what GC and fsck
//! follow. Which *thread* that head belongs to, and which children a thread has, are kept as
//! small run files beside the other per-thread files, written when a child starts:
//! `runs/<child>.parent.json` (`{thread, head, role}`) and `runs/<parent>.children` (one child
//! id per line, appended). They are informational: losing them loses the links shown by
//! `thread show` and the mount, never a node.
//!
//! Over PostgreSQL the link is a row of the `lineage` table instead, so a parent's
//! children are found from any machine (a `kill` on one machine ends children started on
//! another).
//!
//! Architecture Invariant: a child is linked before its first step runs, so `thread kill` of
//! the parent always finds a running child.

use std::path::Path;

use crate::cas::{Hash, Store, builtin};
use crate::engine::chain::{self, ChainError};
use crate::engine::storage::index_files::IndexError;
use crate::engine::storage::seam::records::dir as record_files;

pub use crate::engine::storage::seam::records::ParentLink;

/// Records that `child` was started by `link.thread`.
pub fn link(root: &Path, child: &str, link: &ParentLink) -> Result<(), IndexError> {
    crate::engine::storage::handle(root)?
        .records()
        .link_parent(child, link)
}

/// The parent of thread `child`, if a sub-workflow started it.
pub fn parent(root: &Path, child: &str) -> Option<ParentLink> {
    match crate::engine::storage::handle(root) {
        Ok(storage) => storage.records().parent(child),
        Err(_) => parent_file_link(root, child),
    }
}

/// The parent link in `runs/<child>.parent.json` under `root`, whatever the backend.
pub(crate) fn parent_file_link(root: &Path, child: &str) -> Option<ParentLink> {
    record_files::read_parent(root, child)
}

/// The threads that sub-workflows of thread `parent` started, oldest first.
pub fn children(root: &Path, parent: &str) -> Vec<String> {
    match crate::engine::storage::handle(root) {
        Ok(storage) => storage.records().children(parent),
        Err(_) => record_files::read_children(root, parent),
    }
}

/// How many ancestors a thread whose start node names `parent` has: 0 for a top-level thread.
/// Walks parent heads to their start nodes, one node read per level and two per step head.
pub(crate) fn depth(store: &Store, parent: Option<Hash>) -> Result<usize, ChainError> {
    let mut depth = 0;
    let mut at = parent;
    while let Some(head) = at {
        depth += 1;
        let node = store.get(head)?;
        let start = if builtin::is_start(node.type_hash) {
            node
        } else {
            store.get(chain::read_step(&node)?.start)?
        };
        let start = chain::read_start(&start)?;
        at = start.parent;
        // A cycle is impossible (a start node cannot name a step written after it), but a
        // damaged store should not spin forever.
        if depth > 1000 {
            break;
        }
    }
    Ok(depth)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_round_trip_and_children_accumulate() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("cas/tmp")).unwrap();
        let head = Hash::parse("EYHPV6X8XHTCS").unwrap();
        let l = ParentLink {
            thread: "P".into(),
            head,
            role: "developer".into(),
        };
        assert_eq!(parent(root, "C1"), None);
        assert!(children(root, "P").is_empty());
        link(root, "C1", &l).unwrap();
        link(root, "C2", &l).unwrap();
        assert_eq!(parent(root, "C1"), Some(l));
        assert_eq!(children(root, "P"), ["C1", "C2"]);
    }
}
