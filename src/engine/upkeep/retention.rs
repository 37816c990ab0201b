//! Retention of run text: the logs and event feeds of threads archived longer ago
//! than a configurable time are removed by `uwf cas gc` (`--keep-logs`).
//!
//! A step adds a bounded amount to its thread's log (see [`super::log`]), so a living thread's
//! log is bounded by its steps; this is what bounds the logs of the threads that no longer live.
//! Over PostgreSQL the rows of `run_text` and `run_state` go; in a directory store the
//! `runs/<id>.log` and `runs/<id>.events` files. Nodes, heads and lineage are never touched.

use std::path::Path;
use std::time::Duration;

use crate::cas::store::now_ms;
use crate::engine::storage::index_files::IndexError;

pub(crate) use crate::engine::storage::seam::Pruned;

/// Removes the logs and event feeds of threads archived more than `keep` ago (with `dry_run`,
/// only counts them).
pub(crate) fn prune_logs(root: &Path, keep: Duration, dry_run: bool) -> Result<Pruned, IndexError> {
    let cut = now_ms().saturating_sub(keep.as_millis() as u64);
    crate::engine::storage::handle(root)?
        .index()
        .prune_logs(cut, dry_run)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_logs_of_threads_archived_before_the_cut_go() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::cas::Store::open(dir.path()).unwrap();
        let root = store.root();
        std::fs::create_dir_all(root.join("runs")).unwrap();
        let start = store
            .put(
                crate::cas::builtin::hash_of("text"),
                &serde_json::json!("x"),
            )
            .unwrap();
        let workflow = start;
        for id in ["OLD", "NEW", "LIVE"] {
            let row = crate::pg::NewThread {
                id,
                workflow,
                head: start,
                parent: None,
                queued: false,
                steps: Some(0),
                prompt: None,
                spent: None,
            };
            crate::engine::storage::index_db::insert(root, &row).unwrap();
            std::fs::write(root.join(format!("runs/{id}.log")), "12345").unwrap();
            std::fs::write(root.join(format!("runs/{id}.events")), "{}\n").unwrap();
        }
        crate::engine::storage::index_db::archive(root, "OLD", "done").unwrap();
        crate::engine::storage::index_db::archive(root, "NEW", "done").unwrap();
        // Nothing was archived an hour ago.
        let kept = prune_logs(root, Duration::from_secs(3600), false).unwrap();
        assert_eq!(kept, Pruned::default());
        std::thread::sleep(Duration::from_millis(5));
        let counted = prune_logs(root, Duration::ZERO, true).unwrap();
        assert_eq!(
            counted,
            Pruned {
                threads: 2,
                bytes: 16
            }
        );
        assert!(root.join("runs/OLD.log").exists());
        assert_eq!(prune_logs(root, Duration::ZERO, false).unwrap(), counted);
        assert!(!root.join("runs/OLD.log").exists());
        assert!(!root.join("runs/NEW.events").exists());
        assert!(root.join("runs/LIVE.log").exists());
    }
}
