//! A step's lease on a thread over PostgreSQL (`docs/several-machines.md#reference`): the
//! per-thread lock that works across machines. Taken together with the local step lock, renewed by
//! a background thread while the step runs, released when the step ends.
//!
//! Architecture Invariant: a step publishes only while it holds the thread's lease or, if the
//! lease was lost (the machine stalled longer than the lease time and another took over), the
//! head's compare-and-set still refuses a second step on the same head: a lease keeps two
//! machines from working on one thread, the compare-and-set keeps them from both publishing.

use std::collections::HashSet;
use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::pg::{Holder, Lease, PgError, PgStore};

use super::StorageError;

/// A held lease; renewed until dropped, then released.
#[derive(Debug)]
pub struct LeaseGuard {
    pg: Arc<PgStore>,
    lease: Lease,
    stop: Option<mpsc::Sender<()>>,
    renewer: Option<JoinHandle<()>>,
    /// A worker's claim, listed in [`claims`] while held.
    claim: bool,
}

/// Why a lease was not taken.
#[derive(Debug)]
pub(crate) enum TakeError {
    /// Someone else holds it: their holder, machine and how long it still lasts.
    Busy {
        holder: String,
        machine: String,
        expires_in: Duration,
    },
    Storage(StorageError),
}

impl TakeError {
    /// The holder in words, for "thread T is busy: …".
    pub(crate) fn describe(holder: &str, machine: &str, expires_in: Duration) -> String {
        format!(
            "a step of {holder} on machine {machine} holds its lease ({}s left unless renewed)",
            expires_in.as_secs().max(1)
        )
    }
}

/// Takes the lease of thread `id` when `root` is a PostgreSQL store; `None` for a directory
/// store (its file lock is the whole story there).
pub(crate) fn take(root: &Path, id: &str) -> Result<Option<LeaseGuard>, TakeError> {
    let Some(pg) = super::pg(root).map_err(TakeError::Storage)? else {
        return Ok(None);
    };
    if claims().contains(id) {
        // A worker of this process claimed the thread and renews the lease for all its steps.
        return Ok(None);
    }
    let ttl = super::lease_time(root);
    let who = Holder {
        holder: super::holder(),
        machine: super::machine(),
    };
    let lease = match pg.try_acquire(id, who, ttl) {
        Ok(lease) => lease,
        Err(PgError::Busy {
            holder,
            machine,
            expires_in_ms,
            ..
        }) => {
            return Err(TakeError::Busy {
                holder,
                machine,
                expires_in: Duration::from_millis(expires_in_ms.max(0) as u64),
            });
        }
        Err(e) => return Err(TakeError::Storage(e.into())),
    };
    Ok(Some(LeaseGuard::renewed(pg, lease, ttl, false)))
}

/// The threads whose leases a worker of this process holds across steps.
fn claims() -> MutexGuard<'static, HashSet<String>> {
    static CLAIMS: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    CLAIMS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// Keeps a lease a worker claimed (`PgStore::claim`) for as long as the guard lives: renewed,
/// and used by every step this process takes on that thread meanwhile.
pub(crate) fn hold_claim(root: &Path, pg: Arc<PgStore>, lease: Lease) -> LeaseGuard {
    claims().insert(lease.thread.clone());
    LeaseGuard::renewed(pg, lease, super::lease_time(root), true)
}

impl LeaseGuard {
    fn renewed(pg: Arc<PgStore>, lease: Lease, ttl: Duration, claim: bool) -> LeaseGuard {
        let (stop, stopped) = mpsc::channel::<()>();
        let renewer = {
            let (pg, lease) = (pg.clone(), lease.clone());
            std::thread::Builder::new()
                .name("uwf-lease".to_owned())
                .spawn(move || renew_until_stopped(&pg, &lease, ttl, &stopped))
                .ok()
        };
        LeaseGuard {
            pg,
            lease,
            stop: Some(stop),
            renewer,
            claim,
        }
    }
}

/// Renews the lease every third of its time until told to stop (or the lease is lost).
fn renew_until_stopped(pg: &PgStore, lease: &Lease, ttl: Duration, stopped: &mpsc::Receiver<()>) {
    let every = (ttl / 3).max(Duration::from_millis(200));
    while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
        match pg.renew(lease, ttl) {
            Ok(()) => {}
            Err(PgError::LeaseLost { .. }) => return,
            // A failed renewal (server restarting) is tried again at the next turn; the lease
            // still has two thirds of its time.
            Err(_) => {}
        }
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(renewer) = self.renewer.take() {
            let _ = renewer.join();
        }
        // Best effort: a lease not released expires by itself.
        let _ = self.pg.release(&self.lease);
        if self.claim {
            claims().remove(&self.lease.thread);
        }
    }
}
