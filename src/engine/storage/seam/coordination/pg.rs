//! PostgreSQL's coordination, shared by every machine: a claim takes the thread's lease in the
//! statement that picks it (`for update skip locked`), leases live in the `leases` table,
//! workers report in the `workers` table, and every change to a thread is a notification on
//! [`crate::pg::CHANNEL`] (a step's end also on [`crate::pg::RUNS_CHANNEL`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::{ChangeListener, Claimed, Coordination, Feed, WorkerStatus};
use crate::cas::Hash;
use crate::engine::storage::lease::{self, TakeError};
use crate::engine::storage::{self as storage, StorageError};
use crate::pg::{CHANNEL, Holder, Listener, PgStore, RUNS_CHANNEL, WorkerRow};

/// Coordination through the database.
pub(super) struct Pg {
    root: PathBuf,
    pg: Arc<PgStore>,
    /// How long this root's leases last without renewal.
    lease: Duration,
}

impl Pg {
    pub(super) fn new(root: &Path, pg: Arc<PgStore>, lease: Duration) -> Pg {
        Pg {
            root: root.to_path_buf(),
            pg,
            lease,
        }
    }
}

impl ChangeListener for Listener {
    fn wait(&mut self, timeout: Duration) -> Result<Option<String>, StorageError> {
        Ok(Listener::wait(self, timeout)?)
    }
}

impl Coordination for Pg {
    fn notifies_changes(&self) -> bool {
        true
    }

    fn listen(&self, feed: Feed) -> Result<Option<Box<dyn ChangeListener>>, StorageError> {
        let channels: &[&str] = match feed {
            Feed::Threads => &[CHANNEL],
            Feed::ThreadsAndRuns => &[CHANNEL, RUNS_CHANNEL],
        };
        Ok(Some(Box::new(Listener::open_on(
            self.pg.config(),
            channels,
        )?)))
    }

    fn answers(&self) -> bool {
        self.pg.ping().is_ok()
    }

    fn lease_holder(&self, id: &str) -> Option<String> {
        let (holder, machine, ms) = self.pg.lease_of(id).ok()??;
        Some(TakeError::describe(
            &holder,
            &machine,
            Duration::from_millis(ms as u64),
        ))
    }

    /// The database applies the rules (and takes the lease) itself; `pick` is not called.
    fn claim(
        &self,
        workflow: Option<Hash>,
        _pick: &mut dyn FnMut() -> Option<String>,
    ) -> Result<Option<Claimed>, StorageError> {
        let who = Holder {
            holder: storage::holder(),
            machine: storage::machine(),
        };
        let Some(claimed) = self.pg.claim(workflow, who, self.lease)? else {
            return Ok(None);
        };
        let id = claimed.thread.clone();
        Ok(Some((
            id,
            Some(lease::hold_claim(&self.root, self.pg.clone(), claimed)),
        )))
    }

    fn any_queued(
        &self,
        workflow: Option<Hash>,
        _scan: &mut dyn FnMut() -> bool,
    ) -> Result<bool, StorageError> {
        Ok(self.pg.any_queued(workflow)?)
    }

    fn worker_beat(&self, status: &WorkerStatus) -> Result<(), StorageError> {
        self.pg.worker_beat(&WorkerRow {
            holder: status.holder.clone(),
            machine: status.machine.clone(),
            pid: status.pid as i32,
            workflow: status.workflow.clone(),
            threads: status.threads.clone(),
            steps: status.steps as i64,
            state: status.state.clone(),
            started_ms: status.started_at as i64,
            seen_ms: status.seen_at as i64,
        })?;
        Ok(())
    }

    fn worker_gone(&self) {
        let _ = self.pg.worker_gone(storage::holder());
    }

    /// Every machine's, seen in the last minute.
    fn workers(&self) -> Result<Vec<WorkerStatus>, StorageError> {
        Ok(self
            .pg
            .workers()?
            .into_iter()
            .map(|w| WorkerStatus {
                holder: w.holder,
                machine: w.machine,
                pid: w.pid as u32,
                workflow: w.workflow,
                threads: w.threads,
                steps: w.steps as u64,
                state: w.state,
                started_at: w.started_ms as u64,
                seen_at: w.seen_ms as u64,
            })
            .collect())
    }
}
