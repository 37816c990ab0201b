//! The layout of the thread views: `threads/<id>/…`, `threads/<id>/steps/NNN-role/…`, and the
//! thread entries of `workflows/<name>/` (`prompt`, `latest`, `threads/`).
//!
//! Caching follows what can change (SPEC §7): everything under `steps/NNN-role/` is immutable; an
//! archived thread never changes again, so all its files are immutable too, except `error` and
//! `wait` (a refused action still explains itself there), which are [`Caching::Stamped`]; an
//! active thread's `head`, `status`, `log` and `transcript.md` are generated fresh at every read
//! ([`Caching::Volatile`]); its `wait` may block ([`Caching::Blocking`]).

use std::sync::Arc;
use std::time::SystemTime;

use super::{Attr, Caching, State, Tree};
use crate::cas::Hash;
use crate::engine::chain::Chain;
use crate::fs::actions::{self, Action};
use crate::fs::error::FsError;
use crate::fs::inode::{Ino, Key};
use crate::fs::views::{
    Listing, Source, StepFile, ThreadFile, ThreadRef, parse_step_dir, step_dir_name, versioned,
};

/// The size `wait` reports while a step runs: more than any answer, so the kernel asks us (the
/// short reply then fixes the size).
pub const WAIT_PLACEHOLDER: u64 = 1 << 20;

/// Whether `name` is spelled like a thread id (an uppercase ULID).
fn is_thread_id(name: &str) -> bool {
    ulid::Ulid::from_string(name).is_ok_and(|u| u.to_string() == name)
}

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

    /// The threads of workflow `name`, oldest first.
    fn workflow_threads(&self, name: &str) -> Result<Vec<Arc<str>>, FsError> {
        let mut out = Vec::new();
        for id in self.source.thread_ids()? {
            let Some(t) = self.source.thread(&id)? else {
                continue;
            };
            // A damaged thread is left out of its workflow's list, not fatal to the listing.
            if let Ok((_, w)) = self.source.thread_workflow(&id, &t)
                && *w == *name
            {
                out.push(id);
            }
        }
        Ok(out)
    }

    /// When the newest thread of workflow `name` started (the epoch when it has none).
    pub(super) fn newest_thread_time(&self, name: &str) -> Result<SystemTime, FsError> {
        Ok(match self.workflow_threads(name)?.last() {
            Some(id) => ulid::Ulid::from_string(id)
                .map(|u| crate::fs::views::from_ms(u.timestamp_ms()))
                .unwrap_or(SystemTime::UNIX_EPOCH),
            None => SystemTime::UNIX_EPOCH,
        })
    }

    /// The entry called `name` in a thread directory (`None` for other directories' names).
    pub(super) fn thread_child(&self, dir: &Key, name: &str) -> Result<Option<Key>, FsError> {
        Ok(match dir {
            Key::Threads => {
                if !is_thread_id(name) || self.source.thread(name)?.is_none() {
                    return Ok(None);
                }
                Some(Key::Thread(Arc::from(name)))
            }
            Key::Thread(id) => {
                self.thread_ref(id)?;
                if name == "steps" {
                    Some(Key::Steps(id.clone()))
                } else {
                    ThreadFile::from_name(name).map(|f| Key::ThreadFile(id.clone(), f))
                }
            }
            Key::Steps(id) => {
                let t = self.thread_ref(id)?;
                let chain = self.source.chain(t.head)?;
                if name == "latest" {
                    return Ok((!chain.steps.is_empty()).then(|| Key::StepsLatest(id.clone())));
                }
                parse_step_dir(name)
                    .filter(|(i, role)| chain.steps.get(*i).is_some_and(|s| s.role == *role))
                    .map(|(i, _)| Key::StepDir(id.clone(), i as u32))
            }
            Key::StepDir(id, i) => {
                self.step_chain(id, *i)?;
                StepFile::from_name(name).map(|f| Key::StepFile(id.clone(), *i, f))
            }
            Key::WfThreads(n) => {
                if !is_thread_id(name) {
                    return Ok(None);
                }
                let Some(t) = self.source.thread(name)? else {
                    return Ok(None);
                };
                let (_, w) = self.source.thread_workflow(name, &t)?;
                (*w == **n).then(|| Key::WfThreadLink(n.clone(), Arc::from(name)))
            }
            _ => return Err(FsError::NotDir),
        })
    }

    /// Whether a name missing from a thread directory can never appear there.
    pub(super) fn thread_never_appears(&self, dir: &Key, name: &str) -> bool {
        match dir {
            Key::Threads | Key::WfThreads(_) => !is_thread_id(name),
            Key::Thread(_) | Key::StepDir(..) => true,
            Key::Steps(id) => {
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

    /// The entries of a thread directory.
    pub(super) fn thread_listing(&self, dir: &Key) -> Result<Listing, FsError> {
        let mut out: Listing = Vec::new();
        match dir {
            Key::Threads => {
                for id in self.source.thread_ids()? {
                    out.push((id.to_string(), Key::Thread(id)));
                }
            }
            Key::Thread(id) => {
                self.thread_ref(id)?;
                for f in ThreadFile::ALL {
                    out.push((f.name().to_owned(), Key::ThreadFile(id.clone(), f)));
                }
                out.push(("steps".to_owned(), Key::Steps(id.clone())));
            }
            Key::Steps(id) => {
                let t = self.thread_ref(id)?;
                let chain = self.source.chain(t.head)?;
                for (i, s) in chain.steps.iter().enumerate() {
                    out.push((
                        step_dir_name(i, &s.role),
                        Key::StepDir(id.clone(), i as u32),
                    ));
                }
                if !chain.steps.is_empty() {
                    out.push(("latest".to_owned(), Key::StepsLatest(id.clone())));
                }
            }
            Key::StepDir(id, i) => {
                self.step_chain(id, *i)?;
                for f in StepFile::ALL {
                    out.push((f.name().to_owned(), Key::StepFile(id.clone(), *i, f)));
                }
            }
            Key::WfThreads(n) => {
                for id in self.workflow_threads(n)? {
                    out.push((id.to_string(), Key::WfThreadLink(n.clone(), id)));
                }
            }
            _ => return Err(FsError::NotDir),
        }
        Ok(out)
    }

    /// The target of a symbolic link.
    pub(super) fn link_target(&self, key: &Key) -> Result<String, FsError> {
        match key {
            Key::ThreadFile(id, ThreadFile::Workflow) => {
                let t = self.thread_ref(id)?;
                let (_, name) = self.source.thread_workflow(id, &t)?;
                Ok(format!("../../workflows/{name}"))
            }
            Key::StepsLatest(id) => {
                let t = self.thread_ref(id)?;
                let chain = self.source.chain(t.head)?;
                let last = chain.steps.len().checked_sub(1).ok_or(FsError::NotFound)?;
                Ok(step_dir_name(last, &chain.steps[last].role))
            }
            Key::WfLatest(n) => {
                let newest = self.workflow_threads(n)?.pop().ok_or(FsError::NotFound)?;
                Ok(format!("../../threads/{newest}"))
            }
            Key::WfThreadLink(_, id) => Ok(format!("../../../threads/{id}")),
            _ => Err(FsError::Invalid("not a symbolic link")),
        }
    }

    /// The `status` line of a thread. A job this mount started counts as running from the
    /// moment it was triggered (the worker may not hold the step lock yet).
    pub(super) fn status_line(&self, id: &str, t: &ThreadRef) -> Result<String, FsError> {
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

    /// The bytes of a thread file.
    pub(super) fn thread_content(&self, key: &Key) -> Result<Arc<[u8]>, FsError> {
        let text = |s: String| -> Arc<[u8]> { Arc::from(s.into_bytes()) };
        Ok(match key {
            Key::ThreadFile(id, f) => {
                let t = self.thread_ref(id)?;
                let files = self.source.run_files(id);
                match f {
                    ThreadFile::Prompt => text(self.source.chain(t.head)?.start.prompt.clone()),
                    ThreadFile::Head => text(format!("{}\n", t.head)),
                    ThreadFile::Status => text(format!("{}\n", self.status_line(id, &t)?)),
                    ThreadFile::Step | ThreadFile::Run | ThreadFile::Kill => Arc::from(Vec::new()),
                    ThreadFile::Wait => actions::last_outcome(&files),
                    ThreadFile::Log => read_optional(&files.log())?,
                    ThreadFile::Error => read_optional(&files.error())?,
                    ThreadFile::Transcript => {
                        let status = self.status_line(id, &t)?;
                        self.source.transcript(id, &t, &status)?.bytes
                    }
                    ThreadFile::Workflow => return Err(FsError::Invalid("a symbolic link")),
                }
            }
            Key::StepFile(id, i, f) => {
                let (_, chain) = self.step_chain(id, *i)?;
                self.source.step_content(&chain, *i as usize, *f)?.bytes
            }
            Key::WfPrompt(_) => Arc::from(Vec::new()),
            _ => return Err(FsError::NotFound),
        })
    }

    /// Attributes of a thread entry.
    pub(super) fn thread_attr(&self, st: &State, ino: Ino, key: &Key) -> Result<Attr, FsError> {
        let _ = st;
        let owner = self.owner();
        let dir = |perm: u16, time: SystemTime, caching: Caching| {
            Attr::dir(ino, owner, perm, time, caching)
        };
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
            let target = self.link_target(key)?;
            Ok(Attr::symlink(
                ino,
                owner,
                target.len() as u64,
                time,
                caching,
            ))
        };
        Ok(match key {
            Key::Threads => dir(0o555, self.source.threads_mtime()?, Caching::Mutable),
            Key::Thread(id) => {
                let t = self.thread_ref(id)?;
                let chain = self.source.chain(t.head)?;
                let time = Source::head_time(&chain);
                dir(0o555, time, live(&t, Caching::Mutable))
            }
            Key::Steps(id) => {
                let t = self.thread_ref(id)?;
                let chain = self.source.chain(t.head)?;
                // Its listing changes with the head, even two heads within a millisecond.
                let time = versioned(Source::head_time(&chain), t.head);
                dir(0o555, time, live(&t, Caching::Mutable))
            }
            Key::StepsLatest(id) => {
                let t = self.thread_ref(id)?;
                let chain = self.source.chain(t.head)?;
                let time = Source::head_time(&chain);
                link(time, live(&t, Caching::Mutable))?
            }
            Key::StepDir(id, i) => {
                let (_, chain) = self.step_chain(id, *i)?;
                let time = crate::fs::views::from_ms(chain.steps[*i as usize].timestamp);
                dir(0o555, time, Caching::Immutable)
            }
            Key::StepFile(id, i, f) => {
                let (_, chain) = self.step_chain(id, *i)?;
                let c = self.source.step_content(&chain, *i as usize, *f)?;
                let perm = if *f == StepFile::Fork { 0o644 } else { 0o444 };
                file(c.bytes.len() as u64, perm, c.time, Caching::Immutable)
            }
            Key::ThreadFile(id, f) => {
                let t = self.thread_ref(id)?;
                let chain = self.source.chain(t.head)?;
                let started = crate::fs::views::from_ms(chain.start_timestamp);
                let head_time = Source::head_time(&chain);
                let files = self.source.run_files(id);
                let on_disk = |path: &std::path::Path| {
                    let (size, time) = Source::run_file_stat(path);
                    (size, time.unwrap_or(head_time))
                };
                match f {
                    ThreadFile::Workflow => link(started, Caching::Immutable)?,
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
                        let (_, time) = on_disk(&files.last());
                        if t.finished() {
                            let len = actions::last_outcome(&files).len() as u64;
                            file(len, 0o444, time, Caching::Stamped)
                        } else if self.actions.busy(id) {
                            file(WAIT_PLACEHOLDER, 0o444, time, Caching::Blocking)
                        } else {
                            let len = actions::last_outcome(&files).len() as u64;
                            file(len, 0o444, time, Caching::Blocking)
                        }
                    }
                    ThreadFile::Log => {
                        let (size, time) = on_disk(&files.log());
                        file(size, 0o444, time, live(&t, Caching::Volatile))
                    }
                    ThreadFile::Error => {
                        let (size, time) = on_disk(&files.error());
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
            Key::WfPrompt(n) => {
                let (_, time) = self.current(n)?;
                file(0, 0o644, time, Caching::Volatile)
            }
            Key::WfLatest(n) => {
                let (_, time) = self.current(n)?;
                link(time, Caching::Mutable)?
            }
            Key::WfThreads(n) => {
                let (_, time) = self.current(n)?;
                let time = time.max(self.source.threads_mtime()?);
                dir(0o555, time, Caching::Mutable)
            }
            Key::WfThreadLink(_, id) => {
                let t = self.thread_ref(id)?;
                let started = crate::fs::views::from_ms(self.source.chain(t.head)?.start_timestamp);
                link(started, Caching::Immutable)?
            }
            _ => return Err(FsError::NotFound),
        })
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
fn read_optional(path: &std::path::Path) -> Result<Arc<[u8]>, FsError> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Arc::from(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Arc::from(Vec::new())),
        Err(e) => Err(FsError::internal(format!("{}: {e}", path.display()))),
    }
}
