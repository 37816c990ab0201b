//! The `threads/` subtree: `threads/<id>/…` and `threads/<id>/steps/NNN-role/…` — which
//! entries exist, their listings, attributes, bytes and symlink targets, and the `status` line.
//!
//! Caching follows what can change (`docs/mount.md#caching-and-control-files`): everything under
//! `steps/NNN-role/` is immutable; an archived thread never changes again, so all its files are
//! immutable too, except `error` and `wait` (a refused action still explains itself there), which
//! are [`Caching::Stamped`]; an active thread's `head`, `status`, `log` and `transcript.md` are
//! generated fresh at every read ([`Caching::Volatile`]); its `wait` may block
//! ([`Caching::Blocking`]).
//!
//! Architecture Invariant: an entry is listed by [`Tree::thread_listing`] exactly when
//! [`Tree::thread_child`] finds it, and [`Tree::thread_attr`]'s size is the length of
//! [`Tree::thread_content`] (`wait` aside while a step runs: see [`WAIT_PLACEHOLDER`]).

use crate::engine::thread::run_files::RunFiles;
use crate::pg::RunFileKind;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use super::Tree;
use crate::cas::Hash;
use crate::engine::chain::Chain;
use crate::engine::cycle::human;
use crate::engine::thread::family;
use crate::fs::actions::Action;
use crate::fs::attr::{Attr, Caching};
use crate::fs::error::FsError;
use crate::fs::inode::{
    Ino, Key, StepFile, ThreadFile, ThreadKey, is_thread_id, parse_step_dir, step_dir_name,
};
use crate::fs::views::{Listing, Source, ThreadRef, from_ms, versioned};

impl Tree {
    /// Where thread `id` stands; `NotFound` when it is not in the index.
    pub(super) fn thread_ref(&self, id: &str) -> Result<ThreadRef, FsError> {
        self.source.thread(id)?.ok_or(FsError::NotFound)
    }

    /// The chain of thread `id`, checking that step `index` exists.
    fn step_chain(&self, id: &str, index: u32) -> Result<(ThreadRef, Arc<Chain>), FsError> {
        let t = self.thread_ref(id)?;
        let chain = self.source.chain(t.head)?;
        if index as usize >= chain.steps.len() {
            return Err(FsError::NotFound);
        }
        Ok((t, chain))
    }

    /// The entry called `name` in a directory of `threads/`.
    pub(super) fn thread_child(&self, dir: &ThreadKey, name: &str) -> Result<Option<Key>, FsError> {
        let key = match dir {
            ThreadKey::Root => {
                if !is_thread_id(name) || self.source.thread(name)?.is_none() {
                    return Ok(None);
                }
                Some(ThreadKey::Dir(Arc::from(name)))
            }
            ThreadKey::Dir(id) => {
                self.thread_ref(id)?;
                match name {
                    "steps" => Some(ThreadKey::Steps(id.clone())),
                    "forks" => Some(ThreadKey::Forks(id.clone())),
                    "origin" if self.source.origin(id)?.is_none() => None,
                    // `wait` is found by name although it is never listed.
                    _ => ThreadFile::from_name(name).map(|f| ThreadKey::File(id.clone(), f)),
                }
            }
            ThreadKey::Forks(id) => {
                self.thread_ref(id)?;
                let forks = self.source.forks_of(id)?;
                forks
                    .into_iter()
                    .find(|f| &**f == name)
                    .map(|f| ThreadKey::ForkLink(id.clone(), f))
            }
            ThreadKey::Steps(id) => {
                let t = self.thread_ref(id)?;
                let chain = self.source.chain(t.head)?;
                if name == "latest" {
                    (!chain.steps.is_empty()).then(|| ThreadKey::StepsLatest(id.clone()))
                } else {
                    parse_step_dir(name)
                        .filter(|(i, role)| chain.steps.get(*i).is_some_and(|s| s.role == *role))
                        .map(|(i, _)| ThreadKey::StepDir(id.clone(), i as u32))
                }
            }
            ThreadKey::StepDir(id, i) => {
                self.step_chain(id, *i)?;
                StepFile::from_name(name).map(|f| ThreadKey::StepFile(id.clone(), *i, f))
            }
            _ => return Err(FsError::NotDir),
        };
        Ok(key.map(Key::Threads))
    }

    /// Whether a name missing from a directory of `threads/` can never appear there.
    pub(super) fn thread_never_appears(&self, dir: &ThreadKey, name: &str) -> bool {
        match dir {
            ThreadKey::Root => !is_thread_id(name),
            ThreadKey::Dir(_) | ThreadKey::StepDir(..) => true,
            ThreadKey::Forks(_) => !is_thread_id(name),
            ThreadKey::Steps(id) => {
                let Ok(t) = self.thread_ref(id) else {
                    return false;
                };
                if t.finished() {
                    return true;
                }
                match (name, parse_step_dir(name)) {
                    ("latest", _) => false,
                    (_, None) => true,
                    // A step that exists under another role: this name is taken for good.
                    (_, Some((i, _))) => self.source.chain(t.head).is_ok_and(|c| i < c.steps.len()),
                }
            }
            _ => false,
        }
    }

    /// The entries of a directory of `threads/`.
    pub(super) fn thread_listing(&self, dir: &ThreadKey) -> Result<Listing, FsError> {
        let mut out: Vec<(String, ThreadKey)> = Vec::new();
        match dir {
            ThreadKey::Root => {
                for id in self.source.thread_ids()? {
                    out.push((id.to_string(), ThreadKey::Dir(id)));
                }
            }
            ThreadKey::Dir(id) => {
                self.thread_ref(id)?;
                let forked = self.source.origin(id)?.is_some();
                let child = family::parent(self.source.store().root(), id).is_some();
                for f in ThreadFile::ALL {
                    // Walking never blocks: `wait` is left out of the listing, so
                    // `grep -r`, `cp -a`, `tar` and `rsync` never open it.
                    if f == ThreadFile::Wait
                        || (f == ThreadFile::Origin && !forked)
                        || (f == ThreadFile::Parent && !child)
                    {
                        continue;
                    }
                    out.push((f.name().to_owned(), ThreadKey::File(id.clone(), f)));
                }
                out.push(("steps".to_owned(), ThreadKey::Steps(id.clone())));
                out.push(("forks".to_owned(), ThreadKey::Forks(id.clone())));
            }
            ThreadKey::Forks(id) => {
                self.thread_ref(id)?;
                for f in self.source.forks_of(id)? {
                    out.push((f.to_string(), ThreadKey::ForkLink(id.clone(), f)));
                }
            }
            ThreadKey::Steps(id) => {
                let t = self.thread_ref(id)?;
                let chain = self.source.chain(t.head)?;
                for (i, s) in chain.steps.iter().enumerate() {
                    out.push((
                        step_dir_name(i, &s.role),
                        ThreadKey::StepDir(id.clone(), i as u32),
                    ));
                }
                if !chain.steps.is_empty() {
                    out.push(("latest".to_owned(), ThreadKey::StepsLatest(id.clone())));
                }
            }
            ThreadKey::StepDir(id, i) => {
                let (_, chain) = self.step_chain(id, *i)?;
                let subthread = self.child_of(&chain.steps[*i as usize]).is_some();
                for f in StepFile::ALL {
                    if f == StepFile::Child && !subthread {
                        continue;
                    }
                    out.push((f.name().to_owned(), ThreadKey::StepFile(id.clone(), *i, f)));
                }
            }
            _ => return Err(FsError::NotDir),
        }
        Ok(out
            .into_iter()
            .map(|(name, key)| (name, Key::Threads(key)))
            .collect())
    }

    /// The target of a symbolic link of `threads/`.
    pub(super) fn thread_link_target(&self, key: &ThreadKey) -> Result<String, FsError> {
        match key {
            ThreadKey::File(id, ThreadFile::Workflow) => {
                let t = self.thread_ref(id)?;
                let (_, name) = self.source.thread_workflow(id, &t)?;
                Ok(format!("../../workflows/{name}"))
            }
            ThreadKey::StepsLatest(id) => {
                let t = self.thread_ref(id)?;
                let chain = self.source.chain(t.head)?;
                let last = chain.steps.len().checked_sub(1).ok_or(FsError::NotFound)?;
                Ok(step_dir_name(last, &chain.steps[last].role))
            }
            ThreadKey::File(id, ThreadFile::Origin) => {
                let fork = self.source.origin(id)?.ok_or(FsError::NotFound)?;
                let from = fork.from.as_deref().ok_or(FsError::NotFound)?;
                let t = self.thread_ref(from)?;
                let chain = self.source.chain(t.head)?;
                match chain.steps.iter().position(|s| s.hash == fork.step) {
                    Some(i) => Ok(format!(
                        "../{from}/steps/{}",
                        step_dir_name(i, &chain.steps[i].role)
                    )),
                    // Forked from the start node: the thread itself.
                    None => Ok(format!("../{from}")),
                }
            }
            ThreadKey::ForkLink(_, fork) => Ok(format!("../../{fork}")),
            ThreadKey::File(id, ThreadFile::Parent) => {
                let parent =
                    family::parent(self.source.store().root(), id).ok_or(FsError::NotFound)?;
                Ok(format!("../{}", parent.thread))
            }
            ThreadKey::StepFile(id, i, StepFile::Child) => {
                let (_, chain) = self.step_chain(id, *i)?;
                let child = self
                    .child_of(&chain.steps[*i as usize])
                    .ok_or(FsError::NotFound)?;
                Ok(format!("../../../{child}"))
            }
            _ => Err(FsError::Invalid("not a symbolic link")),
        }
    }

    /// The `status` line of a thread. A job this mount started counts as running from the
    /// moment it was triggered (the worker may not hold the step lock yet).
    fn status_line(&self, id: &str, t: &ThreadRef) -> Result<String, FsError> {
        let mut summary = self.source.summary(id, t)?;
        if !summary.done() && summary.status != "running" && self.actions.jobs().in_flight(id) {
            summary.status = "running".into();
        }
        if summary.status == "running" && summary.running_role.is_none() {
            // The step has not recorded its role yet: it is the one the moderator picks.
            summary.running_role = summary.next.clone();
        }
        Ok(summary.status_line(&self.source.run_files(id)))
    }

    /// The `cost` file of a thread: what it spent, its sub-workflows' and its budget.
    fn cost_text(&self, id: &str, t: &ThreadRef) -> Result<String, FsError> {
        let summary = self.source.summary(id, t)?;
        let store = self.source.store();
        let config = crate::engine::config::load(store.root())
            .map(|l| l.config)
            .unwrap_or_default();
        crate::engine::thread::cost::text(store, id, t.head, &summary.workflow, &config)
            .map_err(|e| FsError::internal(format!("thread {id} cost: {e}")))
    }

    /// The bytes of a file of `threads/`.
    pub(super) fn thread_content(&self, key: &ThreadKey) -> Result<Arc<[u8]>, FsError> {
        let text = |s: String| -> Arc<[u8]> { Arc::from(s.into_bytes()) };
        Ok(match key {
            ThreadKey::File(id, f) => {
                let t = self.thread_ref(id)?;
                let files = self.source.run_files(id);
                match f {
                    ThreadFile::Prompt => text(self.source.chain(t.head)?.start.prompt.clone()),
                    ThreadFile::Head => text(format!("{}\n", t.head)),
                    ThreadFile::Status => text(format!("{}\n", self.status_line(id, &t)?)),
                    ThreadFile::Step | ThreadFile::Run | ThreadFile::Kill => Arc::from(Vec::new()),
                    ThreadFile::Wait => self.actions.answer(id),
                    ThreadFile::Log | ThreadFile::Events => {
                        let kind = growing(*f);
                        Arc::from(files.read_text_all(kind).map_err(|e| {
                            FsError::internal(format!("thread {id} {}: {e}", kind.as_str()))
                        })?)
                    }
                    ThreadFile::Error => Arc::from(files.error_text()),
                    ThreadFile::Transcript => {
                        let status = self.status_line(id, &t)?;
                        self.source.transcript(id, &t, &status)?.bytes
                    }
                    ThreadFile::Question => text(self.question(id, &t)),
                    ThreadFile::Cost => text(self.cost_text(id, &t)?),
                    ThreadFile::Answer => Arc::from(Vec::new()),
                    ThreadFile::Workflow | ThreadFile::Origin | ThreadFile::Parent => {
                        return Err(FsError::Invalid("a symbolic link"));
                    }
                }
            }
            ThreadKey::StepFile(_, _, StepFile::Child) => {
                return Err(FsError::Invalid("a symbolic link"));
            }
            ThreadKey::StepFile(id, i, f) => {
                let (_, chain) = self.step_chain(id, *i)?;
                self.source.step_content(&chain, *i as usize, *f)?.bytes
            }
            _ => return Err(FsError::NotFound),
        })
    }

    /// Attributes of an entry of `threads/`.
    pub(super) fn thread_attr(&self, ino: Ino, key: &ThreadKey) -> Result<Attr, FsError> {
        let owner = self.owner();
        let dir = |time: SystemTime, caching: Caching| Attr::dir(ino, owner, 0o555, time, caching);
        let file = |size: u64, perm: u16, time: SystemTime, caching: Caching| {
            Attr::file(ino, owner, size, perm, time, caching)
        };
        let live = |t: &ThreadRef, when_active: Caching| {
            if t.finished() {
                Caching::Immutable
            } else {
                when_active
            }
        };
        let link = |time: SystemTime, caching: Caching| -> Result<Attr, FsError> {
            let target = self.thread_link_target(key)?;
            Ok(Attr::symlink(
                ino,
                owner,
                target.len() as u64,
                time,
                caching,
            ))
        };
        Ok(match key {
            ThreadKey::Root => dir(self.source.threads_mtime()?, Caching::Mutable),
            ThreadKey::Dir(id) => {
                let t = self.thread_ref(id)?;
                let chain = self.source.chain(t.head)?;
                // A new fork's head is its source's step: the fork is newer than that.
                let time = Source::head_time(&chain).max(started_at(id));
                dir(time, live(&t, Caching::Mutable))
            }
            ThreadKey::Steps(id) => {
                let t = self.thread_ref(id)?;
                let chain = self.source.chain(t.head)?;
                // Its listing changes with the head, even two heads within a millisecond.
                let time = versioned(Source::head_time(&chain), t.head);
                dir(time, live(&t, Caching::Mutable))
            }
            ThreadKey::StepsLatest(id) => {
                let t = self.thread_ref(id)?;
                let chain = self.source.chain(t.head)?;
                let time = Source::head_time(&chain);
                link(time, live(&t, Caching::Mutable))?
            }
            ThreadKey::StepDir(id, i) => {
                let (_, chain) = self.step_chain(id, *i)?;
                let time = from_ms(chain.steps[*i as usize].timestamp);
                dir(time, Caching::Immutable)
            }
            // Forks of finished threads appear too: never immutable, but rare enough to cache
            // for a second (a fork through the mount invalidates it at once).
            // Dated by the newest fork anywhere, and no older than the thread (not 1970 before
            // any fork exists).
            ThreadKey::Forks(id) => {
                self.thread_ref(id)?;
                let time = self.source.forks_mtime()?.max(started_at(id));
                dir(time, Caching::Stamped)
            }
            ThreadKey::ForkLink(_, fork) => link(started_at(fork), Caching::Immutable)?,
            ThreadKey::StepFile(id, i, StepFile::Child) => {
                let (_, chain) = self.step_chain(id, *i)?;
                link(
                    from_ms(chain.steps[*i as usize].timestamp),
                    Caching::Immutable,
                )?
            }
            ThreadKey::StepFile(id, i, f) => {
                let (_, chain) = self.step_chain(id, *i)?;
                let c = self.source.step_content(&chain, *i as usize, *f)?;
                let perm = if *f == StepFile::Fork { 0o644 } else { 0o444 };
                file(c.bytes.len() as u64, perm, c.time, Caching::Immutable)
            }
            ThreadKey::File(id, f) => {
                let t = self.thread_ref(id)?;
                let chain = self.source.chain(t.head)?;
                let started = from_ms(chain.start_timestamp);
                let head_time = Source::head_time(&chain);
                let files = self.source.run_files(id);
                let on_disk = |path: &Path| {
                    let (size, time) = Source::run_file_stat(path);
                    (size, time.unwrap_or(head_time))
                };
                match f {
                    ThreadFile::Workflow | ThreadFile::Origin | ThreadFile::Parent => {
                        link(started, Caching::Immutable)?
                    }
                    ThreadFile::Question => {
                        let len = self.question(id, &t).len() as u64;
                        file(len, 0o444, head_time, live(&t, Caching::Volatile))
                    }
                    ThreadFile::Answer => file(0, 0o644, started, live(&t, Caching::Volatile)),
                    ThreadFile::Cost => {
                        let len = self.cost_text(id, &t)?.len() as u64;
                        file(len, 0o444, head_time, live(&t, Caching::Volatile))
                    }
                    ThreadFile::Prompt => file(
                        chain.start.prompt.len() as u64,
                        0o444,
                        started,
                        Caching::Immutable,
                    ),
                    ThreadFile::Head => file(14, 0o444, head_time, live(&t, Caching::Volatile)),
                    ThreadFile::Status => {
                        let len = self.status_line(id, &t)?.len() as u64 + 1;
                        file(len, 0o444, head_time, live(&t, Caching::Volatile))
                    }
                    ThreadFile::Step | ThreadFile::Run | ThreadFile::Kill => {
                        file(0, 0o644, started, Caching::Immutable)
                    }
                    ThreadFile::Wait => {
                        // While a step runs this is the previous answer's size: reads are
                        // direct I/O and go on to the end of the answer they wait for.
                        let (_, time) = on_disk(&files.last());
                        let len = self.actions.answer(id).len() as u64;
                        let caching = if t.finished() {
                            Caching::Stamped
                        } else {
                            Caching::Blocking
                        };
                        file(len, 0o444, time, caching)
                    }
                    ThreadFile::Log | ThreadFile::Events => {
                        let (size, time) = files.text_stat(growing(*f));
                        let time = time.unwrap_or(head_time);
                        file(size, 0o444, time, live(&t, Caching::Volatile))
                    }
                    ThreadFile::Error => {
                        let (_, time) = on_disk(&files.error());
                        let size = files.error_text().len() as u64;
                        file(size, 0o444, time, Caching::Stamped)
                    }
                    ThreadFile::Transcript => {
                        let status = self.status_line(id, &t)?;
                        let c = self.source.transcript(id, &t, &status)?;
                        let size = c.bytes.len() as u64;
                        file(size, 0o444, head_time, live(&t, Caching::Volatile))
                    }
                }
            }
        })
    }

    /// What thread `id` asks a person, when it awaits a human step; empty otherwise.
    fn question(&self, id: &str, t: &ThreadRef) -> String {
        if t.finished() || self.source.run_files(id).awaiting(t.head).is_none() {
            return String::new();
        }
        human::question(self.source.store(), id)
            .map(|q| q.prompt)
            .unwrap_or_default()
    }

    /// The child thread that played a step, when a sub-workflow took it (its detail is a
    /// `subthread` node).
    fn child_of(&self, step: &crate::engine::chain::Entry) -> Option<String> {
        if !step.agent.starts_with("workflow:") {
            return None;
        }
        let detail = self.source.store().get_payload(step.detail).ok()?;
        detail.get("thread")?.as_str().map(str::to_owned)
    }

    /// The hash of step `index` of thread `id` (for `fork`).
    pub(super) fn step_hash(&self, id: &str, index: u32) -> Result<Hash, FsError> {
        let (_, chain) = self.step_chain(id, index)?;
        Ok(chain.steps[index as usize].hash)
    }

    /// The action a thread's control file stands for.
    pub(super) fn action_of(file: ThreadFile) -> Option<Action> {
        match file {
            ThreadFile::Step => Some(Action::Step),
            ThreadFile::Run => Some(Action::Run),
            ThreadFile::Kill => Some(Action::Kill),
            _ => None,
        }
    }
}

/// A file under `runs/`, empty when it does not exist.
/// The run file behind a thread file that grows while steps run (`log`, `events`).
pub(super) fn growing(file: ThreadFile) -> RunFileKind {
    match file {
        ThreadFile::Events => RunFileKind::Events,
        _ => RunFileKind::Log,
    }
}

/// Reads `size` bytes at `offset` of a thread's log or event feed (empty when there is none),
/// read where it lies because it grows while its step runs.
pub(super) fn read_at(
    files: &RunFiles,
    file: RunFileKind,
    offset: u64,
    size: u32,
) -> Result<Vec<u8>, FsError> {
    files
        .read_text(file, offset, size as usize)
        .map_err(|e| FsError::internal(format!("thread {} {}: {e}", files.id(), file.as_str())))
}

/// When thread `id` was started (made, forked, or run as a child): the time in its ULID.
fn started_at(id: &str) -> SystemTime {
    ulid::Ulid::from_string(id)
        .map(|u| from_ms(u.timestamp_ms()))
        .unwrap_or(SystemTime::UNIX_EPOCH)
}
