//! `uwf worker` (`docs/several-machines.md#reference`): claims runnable threads and steps them, on
//! either backend, with any number of workers on any number of machines.
//!
//! A thread is runnable from `thread start --queue` or `thread queue` until it is done, killed,
//! failed or awaiting a person. Each of a worker's slots claims one runnable thread at a time
//! and steps it, warm, until it stops being runnable or `max_steps` were taken (then it goes
//! back to the queue for whoever comes next).
//!
//! - Over PostgreSQL a claim takes the thread's lease in the same statement that picks it
//!   (`for update skip locked`), and the worker renews that lease for all its steps on the
//!   thread; a worker that dies stops renewing and the thread is claimable again after the
//!   lease time.
//! - Over a directory store a claim is a queued thread whose step lock nobody holds; the step
//!   lock itself decides a race (the loser's step is refused as busy and it moves on).
//!
//! Architecture Invariant: a worker publishes only through [`step::step_warm`], so every step
//! it takes holds the thread's step lock (and lease) and moves the head by compare-and-set: no
//! claim mistake can publish a step twice or lose one.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::advice::Advice;
use crate::cas::store::now_ms;
use crate::cas::{Hash, Store, builtin};
use crate::engine::config::Loaded;
use crate::engine::cycle::step::{self, StepError, StepOptions, Stepped, Warm};
use crate::engine::storage::{self, lease};
use crate::engine::thread::context;
use crate::engine::thread::index::{self, ThreadIndexError};
use crate::engine::thread::run_files::RunFiles;
use crate::engine::workflow::registry::{self, RegistryError};

pub use crate::engine::storage::seam::coordination::WorkerStatus;

/// How long an idle slot waits before looking for work again.
const POLL: Duration = Duration::from_millis(100);
/// How long a slot waits after the store did not answer.
const BACK_OFF: Duration = Duration::from_secs(1);
/// How often a worker reports what it does (`uwf worker list`).
const BEAT: Duration = Duration::from_secs(2);

/// What a worker does.
#[derive(Debug, Clone)]
pub(crate) struct WorkerOptions {
    /// Threads stepped at once (slots).
    pub concurrency: usize,
    /// Only threads of this workflow (a name or hash).
    pub workflow: Option<String>,
    /// Steps on one claimed thread before it goes back to the queue.
    pub max_steps: usize,
    /// Stop when no thread is queued any more (instead of waiting for more).
    pub until_idle: bool,
    /// `--agent`: an agent for every step (else the configured one).
    pub agent: Option<String>,
    /// Who runs the steps (`--by`, else the person running the worker), already checked.
    pub by: Option<String>,
}

/// What a worker did.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    pub steps: u64,
    /// Threads it took to their end.
    pub finished: u64,
    /// Steps that failed (their threads left the queue).
    pub failed: u64,
}

/// Errors that stop a worker (a failing step does not: it is reported and its thread leaves
/// the queue).
#[derive(Debug, thiserror::Error)]
pub(crate) enum WorkerError {
    #[error(transparent)]
    Index(#[from] ThreadIndexError),
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Storage(#[from] storage::StorageError),
    #[error(transparent)]
    Pg(#[from] crate::pg::PgError),
    #[error("--concurrency must be at least 1")]
    NoSlots,
}

impl Advice for WorkerError {
    fn hints(&self) -> Vec<String> {
        match self {
            WorkerError::Index(e) => e.hints(),
            WorkerError::Registry(e) => e.hints(),
            WorkerError::Storage(e) => e.hints(),
            WorkerError::Pg(e) => e.hints(),
            WorkerError::NoSlots => Vec::new(),
        }
    }
}

/// What happened at one step, for the caller to print.
#[derive(Debug)]
pub(crate) enum Event<'a> {
    Stepped(&'a Stepped),
    /// A step failed; its thread left the queue.
    Failed {
        thread: &'a str,
        error: &'a StepError,
    },
    /// The thread reached its budget: it waits for a person to raise it, and stays queued.
    OverBudget {
        thread: &'a str,
        error: &'a StepError,
    },
    /// A step failed while the store did not answer; its thread stays queued.
    Interrupted {
        thread: &'a str,
        error: &'a StepError,
    },
    /// The store did not answer a claim (or a dequeue); the slot tries again shortly.
    Trouble {
        error: &'a WorkerError,
    },
}

/// The state shared by a worker's slots.
struct Shared<'a> {
    store: &'a Store,
    config: LiveConfig,
    options: &'a WorkerOptions,
    workflow: Option<Hash>,
    stop: &'a AtomicBool,
    on_event: &'a (dyn Fn(Event<'_>) + Sync),
    /// Threads a slot of this process is stepping (a directory store's claims).
    current: Mutex<HashSet<String>>,
    busy_slots: AtomicU64,
    steps: AtomicU64,
    finished: AtomicU64,
    failed: AtomicU64,
}

/// Runs a worker until `stop` is set (a slot finishes the step it is in, then lets its thread
/// go) or, with `until_idle`, until no thread is queued. `on_event` is called from the slots'
/// threads after every step.
pub(crate) fn run(
    store: &Store,
    config: &Loaded,
    options: &WorkerOptions,
    stop: &AtomicBool,
    on_event: &(dyn Fn(Event<'_>) + Sync),
) -> Result<Report, WorkerError> {
    if options.concurrency == 0 {
        return Err(WorkerError::NoSlots);
    }
    let workflow = match &options.workflow {
        Some(w) => Some(registry::resolve(store, w)?),
        None => None,
    };
    let shared = Shared {
        store,
        config: LiveConfig::new(store.root(), config),
        options,
        workflow,
        stop,
        on_event,
        current: Mutex::new(HashSet::new()),
        busy_slots: AtomicU64::new(0),
        steps: AtomicU64::new(0),
        finished: AtomicU64::new(0),
        failed: AtomicU64::new(0),
    };
    let slots_done = AtomicBool::new(false);
    let results: Vec<Result<(), WorkerError>> = std::thread::scope(|scope| {
        let beat = scope.spawn(|| beat_until(&shared, &slots_done));
        let slots: Vec<_> = (0..options.concurrency)
            .map(|_| scope.spawn(|| slot(&shared)))
            .collect();
        let results = slots
            .into_iter()
            .map(|s| s.join().unwrap_or(Ok(())))
            .collect();
        slots_done.store(true, Ordering::SeqCst);
        let _ = beat.join();
        results
    });
    forget_worker(store);
    for result in results {
        result?;
    }
    Ok(Report {
        steps: shared.steps.load(Ordering::SeqCst),
        finished: shared.finished.load(Ordering::SeqCst),
        failed: shared.failed.load(Ordering::SeqCst),
    })
}

/// One slot: claim, step, let go, again.
fn slot(shared: &Shared<'_>) -> Result<(), WorkerError> {
    while !shared.stop.load(Ordering::SeqCst) {
        shared.busy_slots.fetch_add(1, Ordering::SeqCst);
        let claimed = claim(shared);
        let (id, guard) = match claimed {
            Ok(Some(found)) => found,
            Ok(None) => {
                shared.busy_slots.fetch_sub(1, Ordering::SeqCst);
                // A store that does not answer is not idle: look again later.
                if shared.options.until_idle && idle(shared).unwrap_or(false) {
                    return Ok(());
                }
                std::thread::sleep(POLL);
                continue;
            }
            Err(e) => {
                shared.busy_slots.fetch_sub(1, Ordering::SeqCst);
                // The store is out of reach (a database restarting): say so and try again;
                // a worker outlives its database's restarts.
                (shared.on_event)(Event::Trouble { error: &e });
                std::thread::sleep(BACK_OFF);
                continue;
            }
        };
        let outcome = step_claimed(shared, &id);
        drop(guard);
        shared
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        shared.busy_slots.fetch_sub(1, Ordering::SeqCst);
        if let Err(e) = outcome {
            (shared.on_event)(Event::Trouble { error: &e });
            std::thread::sleep(BACK_OFF);
        }
    }
    Ok(())
}

/// Whether the store answers: a step that failed while it does not is not the thread's fault
/// and must not take it off the queue.
fn store_answers(shared: &Shared<'_>) -> bool {
    storage::handle(shared.store.root()).is_ok_and(|s| s.coordination().answers())
}

/// Steps a claimed thread until it stops being runnable, `max_steps` were taken, or the
/// worker is told to stop.
fn step_claimed(shared: &Shared<'_>, id: &str) -> Result<(), WorkerError> {
    let options = StepOptions {
        agent: shared.options.agent.clone(),
        passthrough: false,
        from_queue: true,
        by: shared.options.by.clone(),
    };
    let mut warm = Warm::default();
    // As `config.yaml` is now: an edit reaches the next thread a slot claims, no restart needed.
    let config = shared.config.current();
    for _ in 0..shared.options.max_steps {
        if shared.stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        match step::step_warm(shared.store, &config, id, &options, &mut warm) {
            Ok(stepped) => {
                if stepped.role.is_some() && !stepped.awaiting {
                    shared.steps.fetch_add(1, Ordering::SeqCst);
                }
                if stepped.done {
                    shared.finished.fetch_add(1, Ordering::SeqCst);
                }
                (shared.on_event)(Event::Stepped(&stepped));
                // A question took the thread off the queue under its step lock (see
                // `StepOptions::from_queue`): dequeuing it here, after the lock, could undo the
                // requeue of an answer given meanwhile.
                if stepped.awaiting {
                    return Ok(());
                }
                if stepped.done {
                    index::dequeue(shared.store.root(), id)?;
                    return Ok(());
                }
            }
            // Another process stepped it meanwhile (a `thread step` by hand, a worker whose
            // claim raced ours): theirs to finish; ours is simply over.
            Err(e) if e.is_busy() || e.lost_race() => return Ok(()),
            // Paused (since it was claimed): it keeps its place in the queue, and claims skip
            // it until it is resumed.
            Err(step::StepError::Paused { .. }) => return Ok(()),
            // At its budget: it waits for a person, keeping its place in the queue; claims
            // pass it by until a raise clears the refusal (`cost::resume_under_budget`).
            Err(e @ step::StepError::Budget(_)) => {
                (shared.on_event)(Event::OverBudget {
                    thread: id,
                    error: &e,
                });
                return Ok(());
            }
            // The database went away mid-step: the thread keeps its place in the queue.
            Err(e) if !store_answers(shared) => {
                (shared.on_event)(Event::Interrupted {
                    thread: id,
                    error: &e,
                });
                return Ok(());
            }
            Err(e) => {
                shared.failed.fetch_add(1, Ordering::SeqCst);
                (shared.on_event)(Event::Failed {
                    thread: id,
                    error: &e,
                });
                index::dequeue(shared.store.root(), id)?;
                return Ok(());
            }
        }
    }
    Ok(())
}

/// Claims one runnable thread: its id, and over PostgreSQL the held lease.
fn claim(shared: &Shared<'_>) -> Result<Option<(String, Option<lease::LeaseGuard>)>, WorkerError> {
    let root = shared.store.root();
    // Where the backend cannot claim by itself: the first queued thread that is of the wanted
    // workflow, not paused and idle, reserved in `current` as it is picked (this worker's
    // slots take a thread one at a time).
    let mut failed = None;
    let mut pick = || {
        let queued = index::queued(root).map_err(|e| failed = Some(e)).ok()?;
        queued.into_iter().find(|id| {
            if let Some(wanted) = shared.workflow
                && workflow_of(shared.store, id) != Some(wanted)
            {
                return false;
            }
            if is_paused(root, id)
                || over_budget(root, id)
                || RunFiles::new(root, id).check_idle().is_err()
            {
                return false;
            }
            let mut current = shared.current.lock().unwrap_or_else(|p| p.into_inner());
            current.insert(id.clone())
        })
    };
    let claimed = storage::handle(root)?
        .coordination()
        .claim(shared.workflow, &mut pick)?;
    if let Some(e) = failed {
        return Err(e.into());
    }
    let Some((id, guard)) = claimed else {
        return Ok(None);
    };
    // A claim the backend made by itself is reserved here (inserting it again is harmless).
    shared
        .current
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(id.clone());
    Ok(Some((id, guard)))
}

/// Whether a directory store's queued thread is paused (claims pass it by, and it does not
/// keep a worker from being idle). Asked of a candidate only, not of the whole queue.
fn is_paused(root: &std::path::Path, id: &str) -> bool {
    context::is_paused(root, id).unwrap_or(false)
}

/// Whether a directory store's queued thread waits at its budget (its last step was refused
/// there): claims pass it by until a raise clears the refusal. PostgreSQL's claims pass it by
/// as they pass every thread whose row says it failed.
fn over_budget(root: &std::path::Path, id: &str) -> bool {
    RunFiles::new(root, id)
        .last_failure()
        .is_some_and(|e| crate::engine::thread::cost::is_budget_stop(&e))
}

/// A worker's configuration, read again when `config.yaml` changes (its modification time
/// or size); a file that no longer loads leaves the last good one in force.
struct LiveConfig {
    path: std::path::PathBuf,
    state: Mutex<(Option<Stamp>, Arc<Loaded>)>,
}

/// A file's modification time and size.
type Stamp = (std::time::SystemTime, u64);

impl LiveConfig {
    fn new(root: &std::path::Path, loaded: &Loaded) -> LiveConfig {
        let path = root.join("config.yaml");
        let stamp = Self::stamp(&path);
        LiveConfig {
            path,
            state: Mutex::new((stamp, Arc::new(loaded.clone()))),
        }
    }

    fn stamp(path: &std::path::Path) -> Option<Stamp> {
        let meta = std::fs::metadata(path).ok()?;
        Some((meta.modified().ok()?, meta.len()))
    }

    fn current(&self) -> Arc<Loaded> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let stamp = Self::stamp(&self.path);
        if stamp != state.0 {
            state.0 = stamp;
            let root = self.path.parent().unwrap_or(std::path::Path::new("."));
            if let Ok(loaded) = crate::engine::config::load(root) {
                state.1 = Arc::new(loaded);
            }
        }
        state.1.clone()
    }
}

/// The workflow of an active thread (from its start node), if it can be read.
fn workflow_of(store: &Store, id: &str) -> Option<Hash> {
    let head = index::active_head(store.root(), id).ok()?;
    let mut node = store.get(head).ok()?;
    if !builtin::is_start(node.type_hash) {
        let start = Hash::parse(node.payload.get("start")?.as_str()?).ok()?;
        node = store.get(start).ok()?;
    }
    Hash::parse(node.payload.get("workflow")?.as_str()?).ok()
}

/// Whether nothing is left to do: no thread queued (leased by another worker or not) and no
/// slot of this worker busy.
fn idle(shared: &Shared<'_>) -> Result<bool, WorkerError> {
    if shared.busy_slots.load(Ordering::SeqCst) > 0 {
        return Ok(false);
    }
    let root = shared.store.root();
    // Where the backend cannot tell by itself: whether a queued thread of the wanted workflow
    // is not paused.
    let mut failed = None;
    let mut scan = || match index::queued(root) {
        Ok(queued) => queued.iter().any(|id| {
            shared
                .workflow
                .is_none_or(|w| workflow_of(shared.store, id) == Some(w))
                && !is_paused(root, id)
                && !over_budget(root, id)
        }),
        Err(e) => {
            failed = Some(e);
            false
        }
    };
    let any = storage::handle(root)?
        .coordination()
        .any_queued(shared.workflow, &mut scan)?;
    if let Some(e) = failed {
        return Err(e.into());
    }
    Ok(!any)
}

/// Reports what this worker does every [`BEAT`] until its slots are done.
fn beat_until(shared: &Shared<'_>, done: &AtomicBool) {
    let started_at = now_ms();
    let mut last = None::<Instant>;
    while !done.load(Ordering::SeqCst) {
        if last.is_none_or(|t| t.elapsed() >= BEAT) {
            last = Some(Instant::now());
            let mut threads: Vec<String> = shared
                .current
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .cloned()
                .collect();
            threads.sort();
            let state = if shared.stop.load(Ordering::SeqCst) {
                "stopping"
            } else if threads.is_empty() {
                "idle"
            } else {
                "running"
            };
            let status = WorkerStatus {
                holder: storage::holder().to_owned(),
                machine: storage::machine().to_owned(),
                pid: std::process::id(),
                workflow: shared.options.workflow.clone(),
                threads,
                steps: shared.steps.load(Ordering::SeqCst),
                state: state.to_owned(),
                started_at,
                seen_at: now_ms(),
            };
            let _ = record(shared.store, &status);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn record(store: &Store, status: &WorkerStatus) -> Result<(), WorkerError> {
    storage::handle(store.root())?
        .coordination()
        .worker_beat(status)?;
    Ok(())
}

fn forget_worker(store: &Store) {
    if let Ok(storage) = storage::handle(store.root()) {
        storage.coordination().worker_gone();
    }
}

/// The workers at work on this store: over PostgreSQL every machine's (seen in the last
/// minute), else this machine's whose processes are alive.
pub(crate) fn list(store: &Store) -> Result<Vec<WorkerStatus>, WorkerError> {
    Ok(storage::handle(store.root())?.coordination().workers()?)
}
