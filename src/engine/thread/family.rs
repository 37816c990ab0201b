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

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cas::{Hash, Store, builtin};
use crate::engine::chain::{self, ChainError};
use crate::engine::storage::index_files::{self, IndexError};

/// Where a child thread came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentLink {
    /// The parent thread's id.
    pub thread: String,
    /// The parent's head when the child started.
    pub head: Hash,
    /// The parent's role that the child plays.
    pub role: String,
}

fn parent_file(root: &Path, child: &str) -> PathBuf {
    root.join("runs").join(format!("{child}.parent.json"))
}

fn children_file(root: &Path, parent: &str) -> PathBuf {
    root.join("runs").join(format!("{parent}.children"))
}

/// Records that `child` was started by `link.thread`.
pub fn link(root: &Path, child: &str, link: &ParentLink) -> Result<(), IndexError> {
    if let Some(pg) = crate::engine::storage::pg(root)? {
        pg.add_lineage(&crate::pg::LineageRow {
            thread: child.to_owned(),
            kind: "child".to_owned(),
            source: Some(link.thread.clone()),
            step: link.head.to_string(),
            role: Some(link.role.clone()),
            at_ms: crate::cas::store::now_ms(),
        })?;
        return Ok(());
    }
    let dir = root.join("runs");
    let io = |path: &Path, source: std::io::Error| IndexError::Append {
        path: path.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
    let text = serde_json::to_vec(link).expect("a parent link serializes");
    index_files::write_file(root, &parent_file(root, child), &text)?;
    let path = children_file(root, &link.thread);
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| io(&path, e))?;
    // One short line in one `write` on an O_APPEND file: concurrent children never interleave.
    file.write_all(format!("{child}\n").as_bytes())
        .map_err(|e| io(&path, e))
}

/// The parent of thread `child`, if a sub-workflow started it.
pub fn parent(root: &Path, child: &str) -> Option<ParentLink> {
    if let Ok(Some(pg)) = crate::engine::storage::pg(root) {
        let row = pg.lineage_of(child).ok()??;
        return (row.kind == "child").then_some(ParentLink {
            thread: row.source?,
            head: row.step.parse().ok()?,
            role: row.role.unwrap_or_default(),
        });
    }
    parent_file_link(root, child)
}

/// The parent link in `runs/<child>.parent.json` under `root`, whatever the backend.
pub fn parent_file_link(root: &Path, child: &str) -> Option<ParentLink> {
    let bytes = std::fs::read(parent_file(root, child)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The threads that sub-workflows of thread `parent` started, oldest first.
pub fn children(root: &Path, parent: &str) -> Vec<String> {
    if let Ok(Some(pg)) = crate::engine::storage::pg(root) {
        return pg
            .lineage_from(parent, "child")
            .map(|rows| rows.into_iter().map(|r| r.thread).collect())
            .unwrap_or_default();
    }
    std::fs::read_to_string(children_file(root, parent))
        .map(|text| {
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// How many ancestors a thread whose start node names `parent` has: 0 for a top-level thread.
/// Walks parent heads to their start nodes, one node read per level and two per step head.
pub fn depth(store: &Store, parent: Option<Hash>) -> Result<usize, ChainError> {
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
