//! A directory store's coordination, all on this machine: the queue is `queue/` under the root
//! and a claim is a queued thread whose step lock nobody holds (the step lock decides a race);
//! workers report in `workers/<pid>.json`; nothing notifies a change (the mount and the
//! dashboard watch the index files' stamps).

use std::path::{Path, PathBuf};

use super::{ChangeListener, Claimed, Coordination, Feed, WorkerStatus};
use crate::cas::Hash;
use crate::engine::storage::StorageError;

/// Coordination through files under the root.
pub(super) struct Dir {
    root: PathBuf,
}

impl Dir {
    pub(super) fn new(root: &Path) -> Dir {
        Dir {
            root: root.to_path_buf(),
        }
    }

    /// The report of the worker in process `pid`.
    fn status_path(&self, pid: u32) -> PathBuf {
        self.root.join("workers").join(format!("{pid}.json"))
    }
}

impl Coordination for Dir {
    fn notifies_changes(&self) -> bool {
        false
    }

    fn listen(&self, _feed: Feed) -> Result<Option<Box<dyn ChangeListener>>, StorageError> {
        Ok(None)
    }

    fn answers(&self) -> bool {
        true
    }

    /// The step lock is the whole story here.
    fn lease_holder(&self, _id: &str) -> Option<String> {
        None
    }

    /// The caller picks from the queue (`queue/` under the root); the step lock it then takes
    /// decides a race with another process.
    fn claim(
        &self,
        _workflow: Option<Hash>,
        pick: &mut dyn FnMut() -> Option<String>,
    ) -> Result<Option<Claimed>, StorageError> {
        Ok(pick().map(|id| (id, None)))
    }

    fn any_queued(
        &self,
        _workflow: Option<Hash>,
        scan: &mut dyn FnMut() -> bool,
    ) -> Result<bool, StorageError> {
        Ok(scan())
    }

    fn worker_beat(&self, status: &WorkerStatus) -> Result<(), StorageError> {
        let text = serde_json::to_vec(status).expect("status serializes");
        let _ = crate::file_util::AtomicWrite::new(&self.status_path(status.pid))
            .without_fsync()
            .replace(&text);
        Ok(())
    }

    fn worker_gone(&self) {
        let _ = std::fs::remove_file(self.status_path(std::process::id()));
    }

    /// This machine's workers whose processes are alive (the reports of dead ones are removed).
    fn workers(&self) -> Result<Vec<WorkerStatus>, StorageError> {
        let mut out = Vec::new();
        let Ok(entries) = std::fs::read_dir(self.root.join("workers")) else {
            return Ok(out);
        };
        for entry in entries.flatten() {
            let Ok(bytes) = std::fs::read(entry.path()) else {
                continue;
            };
            let Ok(status) = serde_json::from_slice::<WorkerStatus>(&bytes) else {
                continue;
            };
            if Path::new(&format!("/proc/{}", status.pid)).exists() {
                out.push(status);
            } else {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        out.sort_by_key(|s| (s.started_at, s.pid));
        Ok(out)
    }
}
