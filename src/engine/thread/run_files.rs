//! A thread's run files under `<root>/runs/`: the step lock (`<id>.lock`), the kill lock
//! (`<id>.kill`), the running step's record (`<id>.run.json`), the agent's log, the change feed
//! (`<id>.events`), the last outcome and the last error.
//!
//! Over PostgreSQL the log, the events, the last outcome and the running step's record also go
//! to the database through the root's run log ([`crate::engine::storage::seam::RunLog`]), and
//! the readers here ([`RunFiles::read_text`], [`RunFiles::text_stat`], [`RunFiles::last_outcome`],
//! [`RunFiles::running_info`], [`RunFiles::error_text`]) read them from there, so every machine
//! sees every machine's steps. The locks stay local (with a lease in the database).
//!
//! Architecture Invariant: the step lock is an open-file-description lock held for a whole step
//! and released by the OS when the holder dies; probes test it with `F_OFD_GETLK` and never take
//! it, so looking at a thread never makes a step fail as busy. The kill lock is the same kind of
//! lock, held by a `kill` from before it stops the agent until the thread is archived: a step
//! that takes the step lock while it is held gives up at once, so no step starts in between.
//!
//! The run record, the last outcome and the error file are replaced atomically (a reader, or a
//! full disk, never leaves them torn or empty). Under the lock they are written into the
//! thread's spare (`<id>.spare`) and swapped into place with `renameat2(RENAME_EXCHANGE)`, so a
//! step creates and frees no inode for them ([`crate::file_util::replace_recycling`]).

use std::fs::File;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cas::Hash;
use crate::cas::store::now_ms;
use crate::file_util::{self, AtomicWrite};

use crate::engine::storage;
use crate::engine::storage::index_files::IndexError;
use crate::engine::storage::lease::{self, LeaseGuard, TakeError};
use crate::engine::storage::seam::runs::RunPaths;
use crate::engine::storage::seam::{RunLog, local_run_log};
use crate::engine::thread::index::ThreadIndexError;
use crate::pg::RunFileKind;

/// How long the end of a step waits for its log and events to reach the database.
pub(crate) const SINK_FLUSH: std::time::Duration = std::time::Duration::from_secs(2);

/// The run files of one thread under `<root>/runs/`.
#[derive(Debug, Clone)]
pub struct RunFiles {
    paths: RunPaths,
}

/// What a running step records about itself (`runs/<id>.run.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunInfo {
    pub pid: u32,
    pub started_at: u64,
    #[serde(default)]
    pub role: Option<String>,
    #[serde(default)]
    pub agent: Option<String>,
    /// The agent's process id, which is also its process group id.
    #[serde(default)]
    pub agent_pid: Option<u32>,
    /// The agent's start time (clock ticks after boot, from `/proc/<pid>/stat`): proves that a
    /// process group found later under `agent_pid` is still this agent's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_start: Option<u64>,
}

impl RunFiles {
    pub fn new(root: &Path, id: &str) -> RunFiles {
        RunFiles {
            paths: RunPaths::new(root, id),
        }
    }

    /// The thread these files are of.
    pub(crate) fn id(&self) -> &str {
        self.paths.id()
    }

    /// The storage root these files are under.
    pub(crate) fn root(&self) -> &Path {
        self.paths.root()
    }

    /// Asks the run log of this root (this machine's files alone should its backend not
    /// open: readers fall back to them).
    fn runs<R>(&self, ask: impl FnOnce(&dyn RunLog) -> R) -> R {
        match storage::handle(self.root()) {
            Ok(storage) => ask(storage.runs()),
            Err(_) => ask(local_run_log()),
        }
    }

    /// Tells the run log of this root, if its backend opens (writes are best effort).
    fn tell(&self, tell: impl FnOnce(&dyn RunLog)) {
        if let Ok(storage) = storage::handle(self.root()) {
            tell(storage.runs());
        }
    }

    fn path(&self, suffix: &str) -> PathBuf {
        self.paths.file(suffix)
    }

    /// The agent's stderr of the running or last step.
    pub(crate) fn log(&self) -> PathBuf {
        self.paths.log()
    }

    /// The last failure on this thread, as text.
    pub(crate) fn error(&self) -> PathBuf {
        self.paths.error()
    }

    /// The last step attempt's outcome as JSON.
    pub(crate) fn last(&self) -> PathBuf {
        self.paths.last()
    }

    fn run(&self) -> PathBuf {
        self.paths.run()
    }

    /// The file whose inode the next write of a run file under the lock reuses.
    fn spare(&self) -> PathBuf {
        self.path("spare")
    }

    fn lock_path(&self) -> PathBuf {
        self.path("lock")
    }

    /// The thread's change feed: one JSON line per step event (`engine::thread::events`).
    pub(crate) fn events(&self) -> PathBuf {
        self.paths.events()
    }

    fn kill_path(&self) -> PathBuf {
        self.path("kill")
    }

    /// Takes the thread's step lock without waiting. `Err(Busy)` names the holder.
    ///
    /// The lock is an open-file-description lock (`F_OFD_SETLK`): held by this descriptor,
    /// released when the [`StepLock`] drops (explicitly, see its `Drop`) or the process dies,
    /// and testable without taking it ([`RunFiles::check_idle`]).
    pub fn try_lock(&self) -> Result<StepLock, ThreadIndexError> {
        match self.take(&self.lock_path())? {
            Some(file) => {
                let mut lock = StepLock {
                    file,
                    files: self.clone(),
                    recorded: std::cell::Cell::new(false),
                    lease: None,
                };
                // Over PostgreSQL the lease is the lock other machines see; taken after the
                // local lock, so of this machine's processes only the lock holder asks.
                lock.lease = match lease::take(self.root(), self.id()) {
                    Ok(lease) => lease,
                    Err(TakeError::Busy {
                        holder,
                        machine,
                        expires_in,
                    }) => {
                        return Err(ThreadIndexError::Busy {
                            id: self.id().to_owned(),
                            holder: TakeError::describe(&holder, &machine, expires_in),
                        });
                    }
                    Err(TakeError::Storage(e)) => return Err(IndexError::from(e).into()),
                };
                lock.reap_abandoned();
                Ok(lock)
            }
            None => Err(self.busy()),
        }
    }

    /// The live lease of another machine's step on this thread, in words (PostgreSQL stores
    /// only; `None` when there is none or the store is a directory).
    fn remote_holder(&self) -> Option<String> {
        storage::handle(self.root())
            .ok()?
            .coordination()
            .lease_holder(self.id())
    }

    /// Takes the thread's kill lock without waiting (`Err(Busy)` while another kill holds it).
    /// While it is held, [`RunFiles::check_idle`] reports the thread busy and
    /// [`RunFiles::check_not_killing`] refuses a step that already took the step lock.
    pub(crate) fn try_kill_lock(&self) -> Result<KillLock, ThreadIndexError> {
        match self.take(&self.kill_path())? {
            Some(file) => Ok(KillLock { file }),
            None => Err(self.being_killed()),
        }
    }

    /// `Err(Busy)` while a kill of this thread is under way.
    pub(crate) fn check_not_killing(&self) -> Result<(), ThreadIndexError> {
        if self.held(&self.kill_path())? {
            return Err(self.being_killed());
        }
        Ok(())
    }

    /// An OFD write lock on the whole file at `path`; `None` when someone else holds it.
    fn take(&self, path: &Path) -> Result<Option<File>, ThreadIndexError> {
        let io = |source| lock_error(path, source);
        let mut options = std::fs::OpenOptions::new();
        options.create(true).truncate(false).write(true);
        let file = file_util::open_in_dir(&options, path).map_err(io)?;
        let lock = whole_file(libc::F_WRLCK);
        match nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_OFD_SETLK(&lock)) {
            Ok(_) => Ok(Some(file)),
            Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EACCES) => Ok(None),
            Err(e) => Err(io(e.into()).into()),
        }
    }

    /// Whether someone holds the lock at `path`, without taking it (`F_OFD_GETLK`).
    fn held(&self, path: &Path) -> Result<bool, ThreadIndexError> {
        let io = |source| lock_error(path, source);
        let file = match std::fs::File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(io(e).into()),
        };
        let mut lock = whole_file(libc::F_WRLCK);
        nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_OFD_GETLK(&mut lock))
            .map_err(|e| io(e.into()))?;
        Ok(lock.l_type != libc::F_UNLCK as libc::c_short)
    }

    /// `Err(Busy)` (naming the holder) when a step holds the lock or a kill is under way,
    /// without taking either: a probe that took the lock, however briefly, made a concurrent
    /// probe report a running step and a step starting at that moment fail as busy.
    pub fn check_idle(&self) -> Result<(), ThreadIndexError> {
        if self.held(&self.lock_path())? {
            return Err(self.busy());
        }
        if let Some(holder) = self.remote_holder() {
            return Err(ThreadIndexError::Busy {
                id: self.id().to_owned(),
                holder,
            });
        }
        self.check_not_killing()
    }

    /// The error for a step refused while a kill is under way.
    fn being_killed(&self) -> ThreadIndexError {
        ThreadIndexError::Busy {
            id: self.id().to_owned(),
            holder: "it is being killed".to_owned(),
        }
    }

    /// The error for a held lock, naming its holder.
    fn busy(&self) -> ThreadIndexError {
        ThreadIndexError::Busy {
            id: self.id().to_owned(),
            holder: self.describe_holder(),
        }
    }

    /// Cleans up after a step that died holding the lock (its run record still names an
    /// agent while nobody holds the lock): takes the lock, which kills what is left of that
    /// agent's process group, and lets it go. For status probes; a step or `kill` does this by
    /// taking the lock anyway. Does nothing while a step runs or when there is nothing to do.
    pub(crate) fn reap_abandoned(&self) {
        let abandoned = self.run_info().is_some_and(|i| i.agent_pid.is_some());
        if abandoned && !self.is_running() {
            drop(self.try_lock());
        }
    }

    /// Over PostgreSQL, the outcome of the last step attempt in the thread's row (best effort:
    /// the local files say it too).
    fn share_outcome(&self, error: Option<&str>) {
        self.tell(|runs| runs.share_outcome(&self.paths, error));
    }

    /// The error of the last step attempt, if it failed: over PostgreSQL from the thread's row
    /// (the attempt may have been any machine's, and a later step on another machine clears
    /// it), else from the last outcome here.
    pub(crate) fn last_failure(&self) -> Option<String> {
        self.runs(|runs| runs.last_failure(&self.paths))
    }

    /// Whether another machine's step holds the thread (its lease, over PostgreSQL) while no
    /// process here does.
    pub(crate) fn stepped_elsewhere(&self) -> bool {
        !matches!(self.held(&self.lock_path()), Ok(true)) && self.remote_holder().is_some()
    }

    /// Whether a step holds the lock right now (here, or over PostgreSQL on any machine).
    pub(crate) fn is_running(&self) -> bool {
        matches!(self.held(&self.lock_path()), Ok(true)) || self.remote_holder().is_some()
    }

    /// The run info of the step in progress (may be stale if no step holds the lock).
    pub(crate) fn run_info(&self) -> Option<RunInfo> {
        let bytes = std::fs::read(self.run()).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// The record of the step running now, wherever it runs: this machine's run file while a
    /// process here holds the step lock, else over PostgreSQL the record the running step's
    /// machine shared.
    pub(crate) fn running_info(&self) -> Option<RunInfo> {
        if matches!(self.held(&self.lock_path()), Ok(true)) {
            return self.run_info();
        }
        let json = self.runs(|runs| runs.running_info(&self.paths))?;
        serde_json::from_str(&json).ok()
    }

    fn describe_holder(&self) -> String {
        match self.run_info() {
            Some(info) => {
                let mut text = format!("a step is running in process {}", info.pid);
                if let Some(role) = &info.role {
                    text.push_str(&format!(" (role {role}"));
                    if let Some(agent) = &info.agent {
                        text.push_str(&format!(", agent {agent}"));
                    }
                    text.push(')');
                }
                let secs = now_ms().saturating_sub(info.started_at) / 1000;
                text.push_str(&format!(" for {secs}s"));
                text
            }
            None => "another process holds its step lock".to_owned(),
        }
    }

    /// Records a failure (`error` file) and the last outcome, without holding the step lock
    /// (a failure before a step could take it). Each file is replaced atomically.
    pub(crate) fn record_failure(&self, message: &str) {
        for (path, text) in failure_texts(self, message) {
            let _ = AtomicWrite::new(&path)
                .without_fsync()
                .replace(text.as_bytes());
        }
        let last = failed(message).to_string();
        self.tell(|runs| runs.share_failure(&self.paths, message, &last));
    }

    /// The last recorded outcome, if any: over PostgreSQL the one any machine shared last.
    pub(crate) fn last_outcome(&self) -> Option<serde_json::Value> {
        self.runs(|runs| runs.last_outcome(&self.paths))
    }

    /// Up to `max` bytes of the thread's log or event feed from `offset` on: over PostgreSQL
    /// from the database (every machine's steps), else from the file under `runs/`; also over
    /// PostgreSQL when the database has nothing of that file (steps run before it kept logs).
    pub fn read_text(
        &self,
        file: RunFileKind,
        offset: u64,
        max: usize,
    ) -> std::io::Result<Vec<u8>> {
        self.runs(|runs| runs.read_text(&self.paths, file, offset, max))
    }

    /// The whole log or event feed (see [`RunFiles::read_text`]).
    pub fn read_text_all(&self, file: RunFileKind) -> std::io::Result<Vec<u8>> {
        self.read_text(file, 0, usize::MAX >> 1)
    }

    /// The size of the log or event feed and when it last grew (`0, None` before anything
    /// was written to it).
    pub fn text_stat(&self, file: RunFileKind) -> (u64, Option<std::time::SystemTime>) {
        self.runs(|runs| runs.text_stat(&self.paths, file))
    }

    /// The text of the mount's `error` file: the `error` file here (which also keeps what
    /// this machine refused, e.g. a step while another runs); over PostgreSQL the thread's last
    /// failure as any machine recorded it instead, when a step ran anywhere since this
    /// machine's file was written.
    pub(crate) fn error_text(&self) -> Vec<u8> {
        self.runs(|runs| runs.error_text(&self.paths))
    }

    /// Writes `message` to the `error` file only, leaving the last outcome as it is (a refused
    /// answer to a question leaves the thread awaiting).
    pub(crate) fn record_error(&self, message: &str) {
        let _ = AtomicWrite::new(&self.error())
            .without_fsync()
            .replace(format!("{message}\n").as_bytes());
    }

    /// Records that the thread waits for a person to answer `role` at `head`.
    /// `queued`: the thread was on the run queue when it asked, and its answer puts it back.
    pub(crate) fn set_awaiting(
        &self,
        role: &str,
        head: Hash,
        queued: bool,
    ) -> Result<(), file_util::FileError> {
        let question = Awaiting {
            role: role.to_owned(),
            head,
            asked_at: now_ms(),
            queued,
        };
        let text = serde_json::to_vec(&question).expect("a question serializes");
        AtomicWrite::new(&self.paths.awaiting())
            .without_fsync()
            .replace(&text)?;
        // Over PostgreSQL the question is in the thread's row too, for every machine to see
        // and answer (best effort: this machine's file says it as well).
        let json = String::from_utf8(text).expect("JSON is UTF-8");
        self.tell(|runs| runs.share_awaiting(&self.paths, Some(&json)));
        Ok(())
    }

    /// The question the thread waits on, if it was asked at `head` (a question asked at an
    /// older head was answered or overtaken, and no longer counts). Over PostgreSQL from the
    /// thread's row, whichever machine asked it.
    pub(crate) fn awaiting(&self, head: Hash) -> Option<Awaiting> {
        let bytes = self.runs(|runs| runs.awaiting(&self.paths))?;
        let question: Awaiting = serde_json::from_slice(&bytes).ok()?;
        (question.head == head).then_some(question)
    }

    /// Forgets the question (answered, or the thread ended).
    pub(crate) fn clear_awaiting(&self) {
        let _ = std::fs::remove_file(self.paths.awaiting());
        self.tell(|runs| runs.share_awaiting(&self.paths, None));
    }
}

/// A question waiting for a person (`runs/<id>.awaiting.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Awaiting {
    /// The role the person plays.
    pub role: String,
    /// The head the question was asked at.
    pub head: Hash,
    pub asked_at: u64,
    /// The thread was on the run queue when it asked: a worker took it off, and the answer puts
    /// it back (questions written before this field was added were not requeued).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub queued: bool,
}

/// The last outcome of a failed step attempt.
fn failed(message: &str) -> serde_json::Value {
    serde_json::json!({"ok": false, "error": message})
}

/// The `error` and last-outcome files of a failure, with their texts.
fn failure_texts(files: &RunFiles, message: &str) -> [(PathBuf, String); 2] {
    let last = failed(message);
    [
        (files.error(), format!("{message}\n")),
        (files.last(), format!("{last}\n")),
    ]
}

/// A lock request for a whole file.
fn whole_file(kind: libc::c_int) -> libc::flock {
    libc::flock {
        l_type: kind as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: 0,
        l_len: 0,
        l_pid: 0,
    }
}

/// The held step lock of a thread; released on drop (or by the OS if the process dies).
#[derive(Debug)]
pub struct StepLock {
    file: File,
    files: RunFiles,
    /// Whether this step wrote a run record, which it clears when it lets go.
    recorded: std::cell::Cell<bool>,
    /// The thread's lease over PostgreSQL (released after the file lock, when dropped).
    lease: Option<LeaseGuard>,
}

impl StepLock {
    /// Publishes what this step is doing for `status`, `kill` and busy messages.
    pub(crate) fn set_info(&self, info: &RunInfo) {
        let text = serde_json::to_vec(info).expect("run info serializes");
        self.replace(&self.files.run(), &text);
        self.recorded.set(true);
        let json = String::from_utf8(text).expect("JSON is UTF-8");
        self.files
            .tell(|runs| runs.share_state(&self.files.paths, None, Some(&json)));
    }

    /// Records a failure (`error` file) and the last outcome; with `shared`, over PostgreSQL
    /// also in the thread's row, so every machine sees it failed (not for a step that only
    /// lost a race: the thread is fine).
    pub(crate) fn record_failure(&self, message: &str, shared: bool) {
        for (path, text) in failure_texts(&self.files, message) {
            self.replace(&path, text.as_bytes());
        }
        if shared {
            self.files.share_outcome(Some(message));
            let last = failed(message).to_string();
            self.files
                .tell(|runs| runs.share_state(&self.files.paths, Some(&last), None));
        }
    }

    /// Writes `message` to the `error` file only, leaving the last outcome as it is.
    pub(crate) fn record_error(&self, message: &str) {
        self.replace(&self.files.error(), format!("{message}\n").as_bytes());
    }

    /// Records a successful step's JSON as the last outcome (and over PostgreSQL, that the
    /// thread is no longer failed).
    pub(crate) fn record_success(&self, result: &serde_json::Value) {
        self.replace(&self.files.last(), format!("{result}\n").as_bytes());
        self.files.share_outcome(None);
        let last = result.to_string();
        self.files
            .tell(|runs| runs.share_state(&self.files.paths, Some(&last), None));
    }

    /// Just locked: if the run record still names an agent, the previous holder died mid-step
    /// (a step clears it before it unlocks); kill what is left of that agent's process group
    /// and clear the record.
    fn reap_abandoned(&self) {
        let Some(info) = self.files.run_info() else {
            return;
        };
        let Some(pgid) = info.agent_pid else {
            return;
        };
        if let Some(start) = info.agent_start {
            crate::process_group::kill_leftover_group(pgid, start);
        }
        self.replace(&self.files.run(), b"{}");
    }

    /// Replaces one of the thread's run files through its spare (best effort: run files are
    /// informational, and a failed write leaves the old file whole).
    fn replace(&self, path: &Path, bytes: &[u8]) {
        let _ = file_util::replace_recycling(&self.files.spare(), path, bytes);
    }
}

impl Drop for StepLock {
    /// Clears the run info this step wrote (`{}` parses as none) rather than removing the
    /// file: see [`reset`] for why a step should not free inodes.
    ///
    /// Then unlocks explicitly instead of leaving it to the close: an OFD lock belongs to the
    /// open file description and a close frees it only when no descriptor of that description
    /// is left. A child forked by another thread of this process (an agent or `sh` spawned by
    /// a step on another FUSE worker, another test) holds copies of all our descriptors until
    /// its exec closes them, `O_CLOEXEC` or not; closing ours in that window left the lock
    /// held by the child, and the thread's next step was refused as busy. `F_UNLCK` on any
    /// descriptor of the description frees it whoever else still has it open.
    ///
    /// Over PostgreSQL, what the step queued for the database (its log, events and state) is
    /// sent before the lock and lease are let go, waiting at most [`SINK_FLUSH`]: whoever sees
    /// the thread idle sees the step's whole log, and a one-shot process does not exit with it
    /// unsent.
    fn drop(&mut self) {
        let files = &self.files;
        if self.recorded.get() {
            self.replace(&files.run(), b"{}");
            files.tell(|runs| runs.share_state(&files.paths, None, Some("{}")));
        }
        files.tell(|runs| runs.flush(&files.paths, SINK_FLUSH));
        let unlock = whole_file(libc::F_UNLCK);
        let _ = nix::fcntl::fcntl(&self.file, nix::fcntl::FcntlArg::F_OFD_SETLK(&unlock));
    }
}

fn lock_error(path: &Path, source: std::io::Error) -> IndexError {
    IndexError::Io {
        path: path.to_owned(),
        source,
    }
}

/// The held kill lock of a thread; released on drop (or by the OS if the process dies).
#[derive(Debug)]
pub(crate) struct KillLock {
    file: File,
}

impl Drop for KillLock {
    /// Unlocks explicitly, for the reason given at [`StepLock`]'s `Drop`.
    fn drop(&mut self) {
        let unlock = whole_file(libc::F_UNLCK);
        let _ = nix::fcntl::fcntl(&self.file, nix::fcntl::FcntlArg::F_OFD_SETLK(&unlock));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probing_the_step_lock_never_takes_it() {
        let dir = tempfile::tempdir().unwrap();
        let files = RunFiles::new(dir.path(), "T");
        assert!(!files.is_running(), "no lock file yet");
        let held = files.try_lock().unwrap();
        // Held by another descriptor of this very process: still a running step.
        assert!(files.is_running());
        assert!(matches!(
            files.check_idle(),
            Err(ThreadIndexError::Busy { .. })
        ));
        assert!(matches!(
            files.try_lock(),
            Err(ThreadIndexError::Busy { .. })
        ));
        drop(held);
        assert!(!files.is_running());

        // Probes racing with steps: a step is never refused because someone looked.
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = AtomicBool::new(false);
        let refused = std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        let _ = files.is_running();
                    }
                });
            }
            let refused = (0..5000).filter(|_| files.try_lock().is_err()).count();
            stop.store(true, Ordering::Relaxed);
            refused
        });
        assert_eq!(refused, 0, "steps refused as busy while only probes ran");
    }

    #[test]
    fn a_step_clears_the_run_record_it_wrote_and_writes_none_otherwise() {
        let dir = tempfile::tempdir().unwrap();
        let files = RunFiles::new(dir.path(), "T");
        // A step that wrote no record (a warm step with an in-process agent) leaves none.
        drop(files.try_lock().unwrap());
        assert!(!files.run().exists());
        let lock = files.try_lock().unwrap();
        let info = RunInfo {
            pid: 7,
            started_at: 1,
            role: Some("r".into()),
            agent: None,
            agent_pid: None,
            agent_start: None,
        };
        lock.set_info(&info);
        assert_eq!(files.run_info(), Some(info));
        drop(lock);
        assert_eq!(std::fs::read(files.run()).unwrap(), b"{}");
        assert_eq!(files.run_info(), None);
    }

    /// A child forked by another thread holds copies of all descriptors until it execs: a
    /// dropped step lock must be free even then (the cause of the flaky test above, when tests
    /// spawning `sh` ran beside it). The child is kept between fork and exec by its pre-exec hook.
    #[test]
    fn a_dropped_step_lock_is_free_while_a_forked_child_has_not_exec_yet() {
        use std::io::{Read, Write};
        use std::os::fd::AsRawFd;
        let dir = tempfile::tempdir().unwrap();
        let files = RunFiles::new(dir.path(), "T");
        let held = files.try_lock().unwrap();
        let (mut ready_r, ready_w) = std::io::pipe().unwrap();
        let (go_r, mut go_w) = std::io::pipe().unwrap();
        let (ready_fd, go_fd) = (ready_w.as_raw_fd(), go_r.as_raw_fd());
        let mut cmd = std::process::Command::new("true");
        // SAFETY: getpid, write and read are async-signal-safe; the closure only reads two
        // integers it captured.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                let pid = libc::getpid().to_ne_bytes();
                libc::write(ready_fd, pid.as_ptr().cast(), pid.len());
                let mut byte = 0u8;
                libc::read(go_fd, (&raw mut byte).cast(), 1);
                Ok(())
            });
        }
        std::thread::scope(|s| {
            // `spawn` returns only once the child has exec'd: run it on another thread.
            let spawner = s.spawn(move || cmd.spawn().unwrap().wait().unwrap());
            let mut pid = [0u8; 4];
            ready_r.read_exact(&mut pid).unwrap();
            let pid = i32::from_ne_bytes(pid);
            // The premise: the child, not exec'd yet, has the lock file open.
            let lock_path = std::fs::canonicalize(files.lock_path()).unwrap();
            let child_has_it = std::fs::read_dir(format!("/proc/{pid}/fd"))
                .unwrap()
                .flatten()
                .any(|fd| std::fs::read_link(fd.path()).ok() == Some(lock_path.clone()));
            drop(held);
            let running = files.is_running();
            let relocked = files.try_lock().is_ok();
            // Let the child exec before asserting, so a failure does not hang the scope.
            go_w.write_all(b"x").unwrap();
            assert!(spawner.join().unwrap().success());
            assert!(child_has_it, "the child inherited the lock descriptor");
            assert!(
                !running,
                "a dropped lock is free while the child still has it open"
            );
            assert!(relocked, "the next step takes the lock");
        });
    }
}
