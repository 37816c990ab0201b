//! Run files, logs and events: appended while a step runs, read back by viewers. The trait,
//! and the choice of its directory ([`dir`]) or PostgreSQL ([`pg`]) implementation when a
//! root's handle is opened.
//!
//! Every backend keeps this machine's run files under `<root>/runs/`
//! ([`crate::engine::thread::run_files`] writes them, and keeps the locks); what a backend adds
//! is how the rest of the world learns of them: not at all for a directory store (its files are
//! the whole story, and its index notes a failure or a question for listings), through the
//! database for PostgreSQL (every machine reads every machine's logs, events and outcomes).
//! Each method takes the thread's [`RunFiles`], which name its local files.

use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::engine::storage::Backend;
use crate::engine::thread::run_files::{RunFiles, RunInfo};
use crate::pg::RunFileKind;

mod dir;
mod pg;

/// Run files, logs and events: appended while a step runs, read back by viewers.
pub trait RunLog: Send + Sync {
    /// Shares `bytes` just appended to the thread's local log or event feed (best effort, never
    /// waits).
    fn append(&self, files: &RunFiles, file: RunFileKind, bytes: &[u8]);

    /// Shares the last outcome (`last`) and/or the running step's record (`info`, `{}` for
    /// none), as JSON (best effort, never waits).
    fn share_state(&self, files: &RunFiles, last: Option<&str>, info: Option<&str>);

    /// Waits at most `timeout` for what was shared to be sent.
    fn flush(&self, files: &RunFiles, timeout: Duration);

    /// Records the outcome of a step attempt for listings and other machines: `Some(error)`
    /// failed, `None` succeeded (best effort).
    fn share_outcome(&self, files: &RunFiles, error: Option<&str>);

    /// Records a failure from before a step could take the lock (best effort): the last
    /// outcome it leaves.
    fn share_failure(&self, files: &RunFiles, message: &str);

    /// The last recorded outcome, if any (over PostgreSQL the one any machine shared last).
    fn last_outcome(&self, files: &RunFiles) -> Option<serde_json::Value>;

    /// The error of the last step attempt, if it failed (whichever machine made it).
    fn last_failure(&self, files: &RunFiles) -> Option<String>;

    /// The record of the step running now, when no process here holds the step lock.
    fn running_info(&self, files: &RunFiles) -> Option<RunInfo>;

    /// Up to `max` bytes of the thread's log or event feed from `offset` on.
    fn read_text(
        &self,
        files: &RunFiles,
        file: RunFileKind,
        offset: u64,
        max: usize,
    ) -> std::io::Result<Vec<u8>>;

    /// The size of the log or event feed and when it last grew (`0, None` before anything was
    /// written to it).
    fn text_stat(&self, files: &RunFiles, file: RunFileKind) -> (u64, Option<SystemTime>);

    /// The text of the mount's `error` file.
    fn error_text(&self, files: &RunFiles) -> Vec<u8>;

    /// Records (`Some`, as JSON) or forgets (`None`) the question the thread waits on, beside
    /// this machine's file (best effort).
    fn share_awaiting(&self, files: &RunFiles, question: Option<&str>);

    /// The question the thread waits on, as JSON, whichever machine asked it.
    fn awaiting(&self, files: &RunFiles) -> Option<Vec<u8>>;
}

/// The run log of this machine's files alone: what readers fall back to when a root's backend
/// cannot be opened.
pub fn local() -> &'static dyn RunLog {
    &dir::Dir
}

pub(super) fn open(_root: &Path, backend: &Backend) -> Box<dyn RunLog> {
    match backend {
        Backend::Dir => Box::new(dir::Dir),
        Backend::Pg(store, _) => Box::new(pg::Pg::new(store.clone())),
    }
}
