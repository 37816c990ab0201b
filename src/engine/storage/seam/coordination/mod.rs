//! The queue, step leases, workers and change wake-ups: what lets many processes (and, over
//! PostgreSQL, many machines) work on one store without stepping on each other, and notice
//! each other's changes. The trait, and the choice of its directory ([`dir`]) or PostgreSQL
//! ([`pg`]) implementation when a root's handle is opened.
//!
//! The step lock itself (an open-file-description lock on `runs/<id>.lock`) is every backend's
//! and lives in [`crate::engine::thread::run_files`]; a lease is what a backend shared by many
//! machines adds to it ([`crate::engine::storage::lease`]).

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::cas::Hash;
use crate::engine::storage::lease::LeaseGuard;
use crate::engine::storage::{Backend, StorageError};

mod dir;
mod pg;

/// One worker's report (`uwf worker list`): in a directory store `<root>/workers/<pid>.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct WorkerStatus {
    pub holder: String,
    pub machine: String,
    pub pid: u32,
    #[serde(default)]
    pub workflow: Option<String>,
    pub threads: Vec<String>,
    pub steps: u64,
    pub state: String,
    pub started_at: u64,
    pub seen_at: u64,
}

/// Which changes a [`ChangeListener`] hears.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feed {
    /// Threads started, moved, changed status or archived.
    Threads,
    /// Those, and steps that ended (a lease let go).
    ThreadsAndRuns,
}

/// A connection that hears changes as they are made, from any process or machine.
pub trait ChangeListener: Send {
    /// Waits at most `timeout` for a change: `Some(thread id)` heard, `None` nothing. An error
    /// means the connection is lost; listen anew.
    fn wait(&mut self, timeout: Duration) -> Result<Option<String>, StorageError>;
}

/// A thread claimed by a worker: its id, and the lease held for all its steps where the backend
/// has leases (released when dropped).
pub(crate) type Claimed = (String, Option<LeaseGuard>);

/// The queue, step leases, workers and change wake-ups.
pub trait Coordination: Send + Sync {
    /// Whether changes made by other processes and machines arrive as notifications
    /// ([`Coordination::listen`]), to be read again on hearing one (and on a poll, in case
    /// one was missed); otherwise they are seen in the stamps of the root's files.
    fn notifies_changes(&self) -> bool;

    /// A new connection hearing the changes of `feed`; `Ok(None)` when changes are not
    /// notified (see [`Coordination::notifies_changes`]).
    fn listen(&self, feed: Feed) -> Result<Option<Box<dyn ChangeListener>>, StorageError>;

    /// Whether the store answers now (a step that failed while it does not is not the
    /// thread's fault).
    fn answers(&self) -> bool;

    /// The live lease of a step on thread `id`, in words, where leases are shared between
    /// machines (`None` when there is none, or no such lease exists on this backend).
    fn lease_holder(&self, id: &str) -> Option<String>;

    /// Claims one runnable thread for a worker of this process: queued, active, of `workflow`
    /// if given, not paused, not held by a step. Where the backend claims by itself (taking
    /// the thread's lease in the same statement that picks it) `pick` is not called; otherwise
    /// the claim is what `pick` picks from the queue (and reserves for the caller).
    fn claim(
        &self,
        workflow: Option<Hash>,
        pick: &mut dyn FnMut() -> Option<String>,
    ) -> Result<Option<Claimed>, StorageError>;

    /// Whether any runnable thread of `workflow` (if given) is queued, claimed by some worker
    /// or not. Where the backend cannot tell by itself `scan` looks at the queue.
    fn any_queued(
        &self,
        workflow: Option<Hash>,
        scan: &mut dyn FnMut() -> bool,
    ) -> Result<bool, StorageError>;

    /// Records what a worker of this process does (`uwf worker list`), replacing its last
    /// report.
    fn worker_beat(&self, status: &WorkerStatus) -> Result<(), StorageError>;

    /// Forgets the report of this process's worker (it stopped; best effort).
    fn worker_gone(&self);

    /// The workers at work on this store, oldest first: those still alive (over PostgreSQL
    /// every machine's seen in the last minute).
    fn workers(&self) -> Result<Vec<WorkerStatus>, StorageError>;
}

pub(super) fn open(root: &Path, backend: &Backend) -> Box<dyn Coordination> {
    match backend {
        Backend::Dir => Box::new(dir::Dir::new(root)),
        Backend::Pg(store, lease) => Box::new(pg::Pg::new(root, store.clone(), *lease)),
    }
}
