//! Run files, logs and events: appended while a step runs, read back by viewers. The trait,
//! and the choice of its directory ([`dir`]) or PostgreSQL ([`pg`]) implementation when a
//! root's handle is opened.
//!
//! Every backend keeps this machine's run files under `<root>/runs/`
//! ([`crate::engine::thread::run_files`] writes them, and keeps the locks); what a backend adds
//! is how the rest of the world learns of them: not at all for a directory store (its files are
//! the whole story, and its index notes a failure or a question for listings), through the
//! database for PostgreSQL (every machine reads every machine's logs, events and outcomes).
//! Each method takes the thread's [`RunPaths`], which name its local files.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::engine::storage::Backend;
use crate::pg::RunFileKind;

/// Where the run files of one thread are, under `<root>/runs/`.
#[derive(Debug, Clone)]
pub struct RunPaths {
    root: PathBuf,
    dir: PathBuf,
    id: String,
}

impl RunPaths {
    pub fn new(root: &Path, id: &str) -> RunPaths {
        RunPaths {
            root: root.to_path_buf(),
            dir: root.join("runs"),
            id: id.to_owned(),
        }
    }

    /// The thread these files are of.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// The storage root these files are under.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// The thread's run file with `suffix` (`runs/<id>.<suffix>`).
    pub(crate) fn file(&self, suffix: &str) -> PathBuf {
        self.dir.join(format!("{}.{suffix}", self.id))
    }

    /// The agent's stderr of the running or last step.
    pub(crate) fn log(&self) -> PathBuf {
        self.file("log")
    }

    /// The thread's change feed: one JSON line per step event.
    pub(crate) fn events(&self) -> PathBuf {
        self.file("events")
    }

    /// The log or the event feed.
    pub(crate) fn text(&self, file: RunFileKind) -> PathBuf {
        match file {
            RunFileKind::Log => self.log(),
            RunFileKind::Events => self.events(),
        }
    }

    /// The last failure on this thread, as text.
    pub(crate) fn error(&self) -> PathBuf {
        self.file("error")
    }

    /// The last step attempt's outcome as JSON.
    pub(crate) fn last(&self) -> PathBuf {
        self.file("last.json")
    }

    /// The running step's record.
    pub(crate) fn run(&self) -> PathBuf {
        self.file("run.json")
    }

    /// The question the thread waits on.
    pub(crate) fn awaiting(&self) -> PathBuf {
        self.file("awaiting.json")
    }
}

mod dir;
mod pg;

/// Run files, logs and events: appended while a step runs, read back by viewers.
pub trait RunLog: Send + Sync {
    /// Shares `bytes` just appended to the thread's local log or event feed (best effort, never
    /// waits).
    fn append(&self, files: &RunPaths, file: RunFileKind, bytes: &[u8]);

    /// Shares the last outcome (`last`) and/or the running step's record (`info`, `{}` for
    /// none), as JSON (best effort, never waits).
    fn share_state(&self, files: &RunPaths, last: Option<&str>, info: Option<&str>);

    /// Waits at most `timeout` for what was shared to be sent.
    fn flush(&self, files: &RunPaths, timeout: Duration);

    /// Records the outcome of a step attempt for listings and other machines: `Some(error)`
    /// failed, `None` succeeded (best effort).
    fn share_outcome(&self, files: &RunPaths, error: Option<&str>);

    /// Records a failure from before a step could take the lock (best effort): `message`, and
    /// `last`, the last outcome it leaves (JSON).
    fn share_failure(&self, files: &RunPaths, message: &str, last: &str);

    /// The last recorded outcome, if any (over PostgreSQL the one any machine shared last).
    fn last_outcome(&self, files: &RunPaths) -> Option<serde_json::Value>;

    /// The error of the last step attempt, if it failed (whichever machine made it).
    fn last_failure(&self, files: &RunPaths) -> Option<String>;

    /// The record of the step running now (JSON), when no process here holds the step lock.
    fn running_info(&self, files: &RunPaths) -> Option<String>;

    /// Up to `max` bytes of the thread's log or event feed from `offset` on.
    fn read_text(
        &self,
        files: &RunPaths,
        file: RunFileKind,
        offset: u64,
        max: usize,
    ) -> std::io::Result<Vec<u8>>;

    /// The size of the log or event feed and when it last grew (`0, None` before anything was
    /// written to it).
    fn text_stat(&self, files: &RunPaths, file: RunFileKind) -> (u64, Option<SystemTime>);

    /// The text of the mount's `error` file.
    fn error_text(&self, files: &RunPaths) -> Vec<u8>;

    /// Records (`Some`, as JSON) or forgets (`None`) the question the thread waits on, beside
    /// this machine's file (best effort).
    fn share_awaiting(&self, files: &RunPaths, question: Option<&str>);

    /// The question the thread waits on, as JSON, whichever machine asked it.
    fn awaiting(&self, files: &RunPaths) -> Option<Vec<u8>>;
}

/// The run log of this machine's files alone: what readers fall back to when a root's backend
/// cannot be opened.
pub(crate) fn local() -> &'static dyn RunLog {
    &dir::Dir
}

pub(super) fn open(_root: &Path, backend: &Backend) -> Box<dyn RunLog> {
    match backend {
        Backend::Dir => Box::new(dir::Dir),
        Backend::Pg(store, _) => Box::new(pg::Pg::new(store.clone())),
    }
}
