//! Actions files: what writing `step`, `run`, `kill`, `fork` or `workflows/<name>/prompt` does,
//! and what reading `wait` waits for
//! (`docs/mount.md#tour-of-the-mount`).
//!
//! Every action is the engine's own: `engine::step::step` (background, `passthrough: false`, so
//! the agent's stderr goes only to `runs/<id>.log`), `thread::kill`, `thread::fork`,
//! `thread::start`, with the agent resolved from `config.yaml` exactly as `uwf thread step` does
//! without `--agent`. So the mount takes the same per-thread step lock as the CLI, and a step
//! started here and one started by the CLI exclude each other.
//!
//! Steps run on worker threads, never on the FUSE loop. The mount also remembers which threads
//! it has a job in flight for ([`Jobs`]): between the write that starts a step and the moment the
//! worker takes the step lock, the thread already counts as busy, so `touch step; cat wait` and
//! `touch step; touch step` behave the same however the threads are scheduled.
//!
//! Architecture Invariant: a failure is reported twice — as the [`FsError`] returned to the
//! write/close/setattr that caused it, and as text in the thread's `error` file
//! (`runs/<id>.error`, the same file failed CLI steps write).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::advice::{Advice, with_hints};
use crate::cas::{Hash, Store};
use crate::engine::config;
use crate::engine::cycle::human::{self, HumanError};
use crate::engine::cycle::lifecycle::{self, ThreadError};
use crate::engine::cycle::step::{self, StepOptions};
use crate::engine::storage::notify::ThreadWaker;
use crate::engine::thread::context;
use crate::engine::thread::index::ThreadIndexError;
use crate::engine::thread::run_files::RunFiles;

use super::attr::{Finish, Interrupted};
use super::error::FsError;

/// How many steps a `run` takes at most (the default of `uwf thread run`).
pub(crate) const RUN_MAX_STEPS: usize = 100;

/// How often a `wait` looks again at a step lock held by another process, and at its reader's
/// signals.
const WAIT_POLL: Duration = Duration::from_millis(50);

/// How long a `kill` waits for the mount's own worker of the stopped step to wrap up (it has
/// released the step lock already; only its bookkeeping is left).
const KILL_SETTLE: Duration = Duration::from_secs(5);

/// What a write to a thread's control file asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// One step.
    Step,
    /// Steps until the thread is done.
    Run,
    /// Stop the running step and archive the thread as `killed`.
    Kill,
}

/// A step or run in flight, started through the mount.
#[derive(Debug, Clone)]
struct Job {
    /// Set by `kill`: a `run` stops before its next step.
    cancel: Arc<AtomicBool>,
}

/// The mount's background jobs, by thread id.
#[derive(Debug, Default)]
pub(crate) struct Jobs {
    running: Mutex<HashMap<String, Job>>,
    idle: Condvar,
    /// How many step/run jobs were ever started (for tests of the trigger rules).
    started: AtomicU64,
}

impl Jobs {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Job>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a job started through the mount is in flight for `id`.
    pub(crate) fn in_flight(&self, id: &str) -> bool {
        self.lock().contains_key(id)
    }

    /// How many step and run jobs were started so far.
    #[cfg(test)]
    pub(crate) fn started(&self) -> u64 {
        self.started.load(Ordering::SeqCst)
    }

    /// Blocks until no job is in flight (bounded by `limit`); true when idle.
    #[cfg(test)]
    pub(crate) fn wait_idle(&self, limit: Duration) -> bool {
        let guard = self.lock();
        let (guard, _) = self
            .idle
            .wait_timeout_while(guard, limit, |m| !m.is_empty())
            .unwrap_or_else(|p| p.into_inner());
        guard.is_empty()
    }

    /// Blocks until no job is in flight for `id` (bounded by `limit`).
    pub(crate) fn wait_gone(&self, id: &str, limit: Duration) {
        let guard = self.lock();
        let _ = self
            .idle
            .wait_timeout_while(guard, limit, |m| m.contains_key(id))
            .unwrap_or_else(|p| p.into_inner());
    }

    fn finish(&self, id: &str) {
        let mut m = self.lock();
        m.remove(id);
        self.idle.notify_all();
    }
}

/// Runs the actions of control files against one storage root.
#[derive(Debug, Clone)]
pub(crate) struct Actions {
    store: Arc<Store>,
    jobs: Arc<Jobs>,
    /// Bumped after every change of the thread index, so the views look at it again at once.
    changed: Arc<AtomicU64>,
    /// Where the agents of threads started here run.
    workdir: std::path::PathBuf,
    /// Who acts through the mount (`uwf mount --by`): named by what it starts, steps, answers,
    /// forks and kills.
    by: Option<String>,
}

fn record(files: &RunFiles, message: &str) {
    if let Some(dir) = files.error().parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    // Swapped in whole, so a reader of `error` never sees it half written.
    files.record_error(message);
}

impl Actions {
    pub(crate) fn new(
        store: Arc<Store>,
        changed: Arc<AtomicU64>,
        (workdir, by): (std::path::PathBuf, Option<String>),
    ) -> Actions {
        Actions {
            store,
            jobs: Arc::new(Jobs::default()),
            changed,
            workdir,
            by,
        }
    }

    pub(crate) fn jobs(&self) -> &Arc<Jobs> {
        &self.jobs
    }

    fn files(&self, id: &str) -> RunFiles {
        RunFiles::new(self.store.root(), id)
    }

    /// Whether a step is running on `id`: one started here, or one holding the step lock.
    pub(crate) fn busy(&self, id: &str) -> bool {
        busy(&self.jobs, &self.files(id), id)
    }

    /// Whether `action` may start on `id` now (checked when a control file is opened for
    /// writing, so `touch step` on a busy thread fails at once, and again when it fires). A
    /// refusal is also written to the thread's `error` file.
    pub(crate) fn check(
        &self,
        id: &str,
        finished: Option<&str>,
        action: Action,
    ) -> Result<(), FsError> {
        let files = self.files(id);
        let refuse = |text: String, e: FsError| {
            record(&files, &text);
            e
        };
        if let Some(status) = finished {
            let e = ArchivedHere {
                id: id.to_owned(),
                status: status.to_owned(),
            };
            let text = format!("{}: {}", verb(action), with_hints(&e));
            return Err(refuse(text.clone(), FsError::Refused(text)));
        }
        if action == Action::Kill {
            return Ok(());
        }
        if self.jobs.in_flight(id) {
            let text = format!(
                "{}: thread {id} is busy: a step started through the mount is running \
                 (`cat wait` blocks until it is done; `echo > kill` stops it)",
                verb(action)
            );
            return Err(refuse(text.clone(), FsError::Busy(text)));
        }
        match files.check_idle() {
            Ok(()) => {}
            Err(e @ ThreadIndexError::Busy { .. }) => {
                let text = format!("{}: {}", verb(action), with_hints(&e));
                return Err(refuse(text.clone(), FsError::Busy(text)));
            }
            Err(e) => return Err(FsError::internal(e)),
        }
        // A step that could not even start its agent is refused here, where the writer sees it.
        if let Err(reason) = self.can_start(id) {
            let text = format!("{}: {reason}", verb(action));
            return Err(refuse(text.clone(), FsError::Refused(text)));
        }
        Ok(())
    }

    /// Whether the next step of `id` would find its agent: the configuration loads and names an
    /// agent for the role the moderator picks. A thread whose next role cannot be decided is let
    /// through (its step records why it failed, like the CLI's).
    fn can_start(&self, id: &str) -> Result<(), String> {
        let loaded = config::load(self.store.root()).map_err(|e| with_hints(&e))?;
        let Ok(summary) = lifecycle::summary(&self.store, id) else {
            return Ok(());
        };
        if summary.paused {
            return Err(format!(
                "thread {id} is paused; `uwf thread resume {id}` lets it go on"
            ));
        }
        let recorded = context::read(self.store.root(), id).unwrap_or_default();
        match summary.next.as_deref() {
            None | Some(crate::engine::workflow::END) => Ok(()),
            Some(role) => loaded
                .config
                .resolve_bound(None, recorded.bindings.get(role), &summary.workflow, role)
                .map(drop)
                .map_err(|e| with_hints(&e)),
        }
    }

    /// Starts `action` on `id` in the background (after [`Actions::check`] passed again). A
    /// `kill` comes back as the work its writer's answer waits for: it returns once the thread
    /// is killed.
    pub(crate) fn fire(
        &self,
        id: &str,
        finished: Option<&str>,
        action: Action,
    ) -> Result<Option<Finish>, FsError> {
        self.check(id, finished, action)?;
        let store = self.store.clone();
        let jobs = self.jobs.clone();
        let id = id.to_owned();
        let by = self.by.clone();
        if action == Action::Kill {
            // Stop a run of ours before its next step; the engine stops the agent.
            if let Some(job) = jobs.lock().get(&id) {
                job.cancel.store(true, Ordering::SeqCst);
            }
            let changed = self.changed.clone();
            return Ok(Some(Box::new(move || {
                let result = lifecycle::kill(&store, &id, by.as_deref());
                changed.fetch_add(1, Ordering::SeqCst);
                // Our worker of the stopped step has recorded its end: nothing is in flight.
                jobs.wait_gone(&id, KILL_SETTLE);
                changed.fetch_add(1, Ordering::SeqCst);
                result.map(drop).map_err(|e| {
                    let text = format!("kill: {}", with_hints(&e));
                    record(&RunFiles::new(store.root(), &id), &text);
                    thread_error(e, text)
                })
            })));
        }
        let cancel = Arc::new(AtomicBool::new(false));
        {
            let mut m = jobs.lock();
            if m.contains_key(&id) {
                // Lost a race with another trigger between check and here.
                drop(m);
                return self.check(&id, finished, action).map(|()| None);
            }
            m.insert(
                id.clone(),
                Job {
                    cancel: cancel.clone(),
                },
            );
        }
        jobs.started.fetch_add(1, Ordering::SeqCst);
        let worker_jobs = jobs.clone();
        let worker_id = id.clone();
        let changed = self.changed.clone();
        let spawned = std::thread::Builder::new()
            .name("uwf-step".to_owned())
            .spawn(move || {
                let job = (action, by);
                run_steps(&store, &worker_id, job, &cancel, &changed);
                worker_jobs.finish(&worker_id);
            });
        if let Err(e) = spawned {
            jobs.finish(&id);
            return Err(FsError::internal(e));
        }
        Ok(None)
    }

    /// `fork`: a new thread whose head is `step`. Returns its id.
    pub(crate) fn fork(&self, thread: &str, step: Hash) -> Result<String, FsError> {
        match lifecycle::fork_from(&self.store, step, Some(thread), self.by.as_deref()) {
            Ok((_, id, _)) => {
                self.changed.fetch_add(1, Ordering::SeqCst);
                Ok(id)
            }
            Err(e) => {
                let text = format!("fork: {}", with_hints(&e));
                record(&self.files(thread), &text);
                Err(thread_error(e, text))
            }
        }
    }

    /// `workflows/<name>/prompt`: starts a thread. Returns its id; the caller reports errors.
    /// Its agents run in the mount's working directory, bound as `config.yaml` says now.
    pub(crate) fn start(&self, workflow: &str, prompt: &str) -> Result<String, FsError> {
        // A broken config.yaml: the thread keeps no agents of its own (its steps say why).
        let loaded = config::load(self.store.root()).ok();
        let config = loaded.as_ref().map(|l| &l.config);
        match lifecycle::start_in(
            &self.store,
            workflow,
            prompt,
            (&self.workdir, config),
            self.by.as_deref(),
        ) {
            Ok((_, id)) => {
                self.changed.fetch_add(1, Ordering::SeqCst);
                Ok(id)
            }
            Err(e) => {
                let text = with_hints(&e);
                Err(thread_error(e, text))
            }
        }
    }

    /// Completes the human step thread `id` awaits with `text` (`threads/<id>/answer`),
    /// through the same engine call as `uwf thread answer`. Returns the published step's
    /// JSON. Busy while a step or another answer holds the thread; any other refusal is EINVAL,
    /// its reason (and the kept answer) in the thread's `error`.
    pub(crate) fn answer_question(
        &self,
        id: &str,
        text: &str,
    ) -> Result<serde_json::Value, FsError> {
        let loaded = config::load(self.store.root()).map_err(|e| {
            let text = with_hints(&e);
            self.files(id).record_error(&text);
            FsError::Refused(text)
        })?;
        match human::answer(&self.store, &loaded.config, id, text, self.by.as_deref()) {
            Ok(stepped) => {
                self.changed.fetch_add(1, Ordering::SeqCst);
                Ok(stepped.to_json())
            }
            Err(e) => Err(self.answer_refused(id, &e)),
        }
    }

    /// Whether thread `id`, which the mount saw ask nothing, takes an answer after all (checked
    /// when `answer` is opened for writing, so `echo garbage > answer` fails at once). A
    /// refusal is `uwf thread answer`'s, also in the thread's `error`.
    pub(crate) fn check_answerable(&self, id: &str) -> Result<(), FsError> {
        let loaded = config::load(self.store.root()).map_err(|e| {
            let text = with_hints(&e);
            self.files(id).record_error(&text);
            FsError::Refused(text)
        })?;
        // The engine looks at an answer's text only once the thread is known to ask: an empty
        // one is refused as empty exactly when the thread awaits an answer, with nothing written.
        match human::answer(&self.store, &loaded.config, id, "", self.by.as_deref()) {
            Ok(_) | Err(HumanError::Empty) => Ok(()),
            Err(e) if e.is_busy() => Err(FsError::Busy(with_hints(&e))),
            // Refused before the engine records anything.
            Err(e) => {
                let text = with_hints(&e);
                self.files(id).record_error(&format!("answer: {text}"));
                Err(FsError::Refused(text))
            }
        }
    }

    /// Checks the text written so far to `threads/<id>/answer` without publishing anything: a
    /// whole answer the role refuses is EINVAL, its reason (and the kept answer) in the thread's
    /// `error`. Anything else (a text not whole yet, a thread busy or no longer asking) is for
    /// the close to decide, as before.
    pub(crate) fn check_answer(&self, id: &str, text: &str) -> Result<(), FsError> {
        match human::check_answer(&self.store, id, text) {
            Err(e @ HumanError::Refused { .. }) => {
                let text = with_hints(&e);
                self.files(id)
                    .record_error(&format!("answer refused: {text}"));
                Err(FsError::Refused(text))
            }
            _ => Ok(()),
        }
    }

    /// An empty answer (`echo "" > answer`), refused at the write as the engine refuses it.
    pub(crate) fn empty_answer(&self, id: &str) -> FsError {
        self.answer_refused(id, &HumanError::Empty)
    }

    /// The error for a refused answer; the reason goes to the thread's `error` too.
    fn answer_refused(&self, id: &str, e: &HumanError) -> FsError {
        let text = with_hints(e);
        if e.is_busy() {
            return FsError::Busy(text);
        }
        // `human::answer` recorded a refused answer; a thread that asked nothing (or an empty
        // answer) did not get that far.
        if matches!(e, HumanError::NotAwaiting { .. } | HumanError::Empty) {
            self.files(id).record_error(&format!("answer: {text}"));
        }
        FsError::Refused(text)
    }

    /// What `wait` shows when no step runs: the last step attempt's JSON, or the thread's
    /// state as JSON (`uwf thread show`'s) before any step.
    pub(crate) fn answer(&self, id: &str) -> Arc<[u8]> {
        answer(&self.store, &self.files(id), id)
    }

    /// A blocking wait for `id` to have no step running, returning [`Actions::answer`]; it
    /// gives up with [`FsError::Interrupted`] as soon as `interrupted` says so.
    pub(crate) fn waiter(
        &self,
        id: &str,
    ) -> impl FnOnce(Interrupted<'_>) -> Result<Arc<[u8]>, FsError> + Send + 'static {
        let jobs = self.jobs.clone();
        let store = self.store.clone();
        let files = self.files(id);
        let id = id.to_owned();
        move |interrupted| {
            // Another process's step, over PostgreSQL maybe another machine's: woken by a
            // notification when it ends (made before the first look, so none is missed).
            let mut waker: Option<ThreadWaker> = None;
            while busy(&jobs, &files, &id) {
                if interrupted() {
                    return Err(FsError::Interrupted);
                }
                let guard = jobs.lock();
                if guard.contains_key(&id) {
                    // Our own job: woken when it finishes (or after a poll interval).
                    let _ = jobs.idle.wait_timeout(guard, WAIT_POLL);
                } else {
                    drop(guard);
                    match waker.as_mut() {
                        Some(w) => w.wait(),
                        None => {
                            waker = Some(ThreadWaker::new(files.root(), &id, WAIT_POLL));
                        }
                    }
                }
            }
            Ok(answer(&store, &files, &id))
        }
    }
}

/// The last step attempt's JSON, or before any step the thread's state as JSON.
///
/// Over PostgreSQL a step taken on another machine leaves no outcome here: a recorded success
/// whose head is no longer the thread's was overtaken, and the thread's state answers instead.
fn answer(store: &Store, files: &RunFiles, id: &str) -> Arc<[u8]> {
    let overtaken = |last: &serde_json::Value| {
        crate::engine::storage::handle(store.root()).is_ok_and(|s| s.index().shared())
            && last.get("head").and_then(|h| h.as_str()).is_some_and(|h| {
                lifecycle::summary(store, id).is_ok_and(|s| s.head.to_string() != h)
            })
    };
    let value = match files.last_outcome().filter(|last| !overtaken(last)) {
        Some(v) => v,
        None => match lifecycle::summary(store, id) {
            Ok(s) => s.to_json(),
            Err(_) => return Arc::from(Vec::new()),
        },
    };
    Arc::from(format!("{value}\n").into_bytes())
}

/// An archived thread, refused an action through the mount: the hints name the files.
#[derive(Debug)]
struct ArchivedHere {
    id: String,
    status: String,
}

impl std::fmt::Display for ArchivedHere {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let e = ThreadIndexError::Archived {
            id: self.id.clone(),
            status: self.status.clone(),
            onto: None,
        };
        write!(f, "{e}")
    }
}

impl Advice for ArchivedHere {
    fn hints(&self) -> Vec<String> {
        vec![format!(
            "continue from any of its steps: `echo > threads/{}/steps/NNN-role/fork` starts a \
             new thread there (`ls threads/{}/steps` lists them)",
            self.id, self.id
        )]
    }
}

fn busy(jobs: &Jobs, files: &RunFiles, id: &str) -> bool {
    jobs.in_flight(id) || files.is_running()
}

fn verb(action: Action) -> &'static str {
    match action {
        Action::Step => "step",
        Action::Run => "run",
        Action::Kill => "kill",
    }
}

/// A user mistake is EINVAL (or EBUSY); only a storage failure is EIO.
fn thread_error(e: ThreadError, text: String) -> FsError {
    match e {
        ThreadError::Index(ThreadIndexError::Busy { .. }) => FsError::Busy(text),
        ThreadError::Store(_) | ThreadError::Files(_) => FsError::Internal(text),
        ThreadError::Index(ThreadIndexError::Index(_)) => FsError::Internal(text),
        _ => FsError::Refused(text),
    }
}

/// The worker of a `step` or `run` job. Failures are recorded by the engine in the run files
/// (`error`, and the last outcome that `status` and `wait` show), except those that happen
/// before it takes the lock, which are recorded here.
fn run_steps(
    store: &Store,
    id: &str,
    (action, by): (Action, Option<String>),
    cancel: &AtomicBool,
    changed: &AtomicU64,
) {
    let files = RunFiles::new(store.root(), id);
    let config = match config::load(store.root()) {
        Ok(c) => c,
        Err(e) => {
            files.record_failure(&with_hints(&e));
            return;
        }
    };
    let options = StepOptions {
        agent: None,
        passthrough: false,
        from_queue: false,
        by,
    };
    let max = if action == Action::Run {
        RUN_MAX_STEPS
    } else {
        1
    };
    // The views show the new head after every step: its cache files are written as it goes.
    let mut warm = step::Warm::watched();
    for _ in 0..max {
        if cancel.load(Ordering::SeqCst) {
            return;
        }
        let result = step::step_warm(store, &config, id, &options, &mut warm);
        // Before the job ends (and `wait` returns): the views must see the new head.
        changed.fetch_add(1, Ordering::SeqCst);
        match result {
            Ok(s) if s.done => return,
            Ok(_) => {}
            Err(e) => {
                if e.is_busy() {
                    record(&files, &format!("{}: {}", verb(action), with_hints(&e)));
                }
                return;
            }
        }
    }
}
