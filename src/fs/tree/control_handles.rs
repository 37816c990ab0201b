//! Write handles on control files: when a change fires its action, what a prompt handle
//! collects, and what a read on the same descriptor returns (the started thread's id).
//!
//! The rule (`docs/mount.md#caching-and-control-files`): one action per write handle that wrote,
//! truncated or set times, and one for a path-only change with no write handle open. Both `touch
//! step` (OPEN, SETATTR times without a handle, FLUSH, RELEASE) and `echo > step` (OPEN, SETATTR
//! size=0 without a handle, WRITE, FLUSH, RELEASE) change the file by path while their handle is
//! open; such a change is counted as the newest open handle's that has not fired yet, so each
//! starts exactly one step.
//!
//! Architecture Invariant: a handle fires at most once ([`super::state::Ctl::fired`]); later
//! changes through it only repeat its refusal, and a prompt handle starts at most one thread.

use std::sync::Arc;
use std::time::SystemTime;

use super::Tree;
use super::state::{Ctl, CtlTarget, Open, State};
use crate::engine::cycle::lifecycle::ThreadError;
use crate::fs::attr::{Inval, SetAttr};
use crate::fs::error::FsError;
use crate::fs::inode::{Key, StepFile, ThreadFile, ThreadKey, WfKey};

/// The control target a key stands for, if it is a control file.
pub(super) fn target_of(key: &Key) -> Option<CtlTarget> {
    match key {
        Key::Threads(ThreadKey::File(id, f)) if f.is_control() => {
            Some(CtlTarget::Thread(id.clone(), *f))
        }
        Key::Threads(ThreadKey::StepFile(id, i, StepFile::Fork)) => {
            Some(CtlTarget::Fork(id.clone(), *i))
        }
        Key::Workflows(WfKey::Prompt(n)) => Some(CtlTarget::Prompt(n.clone())),
        Key::Threads(ThreadKey::File(id, ThreadFile::Answer)) => {
            Some(CtlTarget::Answer(id.clone()))
        }
        _ => None,
    }
}

/// The mount wrote thread `id`'s `error` (a refused answer): drop what the kernel caches of it,
/// which it would otherwise trust for a second.
pub(super) fn error_written(st: &mut State, id: &str) {
    let key = Key::Threads(ThreadKey::File(Arc::from(id), ThreadFile::Error));
    if let Some(ino) = st.inodes.existing(&key) {
        st.inval.push(Inval::Inode(ino));
    }
}

fn ctl_mut(st: &mut State, fh: u64) -> Result<&mut Ctl, FsError> {
    match st.handles.get_mut(&fh).map(|h| &mut h.open) {
        Some(Open::Control(ctl)) => Ok(ctl),
        _ => Err(FsError::BadHandle),
    }
}

impl Tree {
    /// A change through write handle `fh` (a write, a truncate, a time change): the first one
    /// fires the handle's action; later ones repeat its refusal, if it was refused.
    pub(super) fn change(&self, st: &mut State, fh: u64) -> Result<(), FsError> {
        let ctl = ctl_mut(st, fh)?;
        if ctl.fired {
            return ctl.failed.clone().map_or(Ok(()), Err);
        }
        ctl.fired = true;
        let target = ctl.target.clone();
        let result = self.fire(st, &target);
        let ctl = ctl_mut(st, fh)?;
        match result {
            Ok(answer) => {
                ctl.answer = answer;
                Ok(())
            }
            Err(e) => {
                ctl.failed = Some(e.clone());
                Err(e)
            }
        }
    }

    /// Runs the action of a control file; returns what a read on the handle then shows.
    fn fire(&self, st: &mut State, target: &CtlTarget) -> Result<Option<Arc<[u8]>>, FsError> {
        match target {
            CtlTarget::Thread(id, f) => {
                let t = self.thread_ref(id)?;
                let action = Self::action_of(*f).ok_or(FsError::NotFound)?;
                if let Some(finish) = self.actions.fire(id, t.archived.as_deref(), action)? {
                    st.deferred.0 = Some(finish);
                }
                Ok(None)
            }
            CtlTarget::Fork(id, i) => {
                let hash = self.step_hash(id, *i)?;
                let new = self.actions.fork(id, hash)?;
                self.thread_started(st, &new);
                if let Some(ino) = st
                    .inodes
                    .existing(&Key::Threads(ThreadKey::Forks(id.clone())))
                {
                    st.inval.push(Inval::Inode(ino));
                }
                Ok(Some(Arc::from(format!("{new}\n").into_bytes())))
            }
            // A prompt starts (an answer completes its step) at close, read or release, once
            // its text is complete.
            CtlTarget::Prompt(_) | CtlTarget::Answer(_) => Ok(None),
        }
    }

    /// A new thread exists: drop what the kernel may have cached about its absence.
    fn thread_started(&self, st: &mut State, id: &str) {
        if let Some(ino) = st.inodes.existing(&Key::Threads(ThreadKey::Root)) {
            st.inval.push(Inval::Entry(ino, id.to_owned()));
            st.inval.push(Inval::Inode(ino));
        }
    }

    pub(super) fn control_write(
        &self,
        st: &mut State,
        fh: u64,
        offset: u64,
        data: &[u8],
    ) -> Result<u32, FsError> {
        let limit = self.opts.limits.file;
        let ctl = ctl_mut(st, fh)?;
        if ctl.target.collects_text() {
            if ctl.answer.is_some() {
                // One thread per handle: text written after it started goes nowhere.
                return Ok(data.len() as u32);
            }
            let end = offset.saturating_add(data.len() as u64);
            if end > limit {
                return Err(FsError::TooBig { limit });
            }
            let (start, end) = (offset as usize, end as usize);
            if ctl.text.len() < end {
                ctl.text.resize(end, 0);
            }
            ctl.text[start..end].copy_from_slice(data);
            ctl.wrote = true;
            if ctl.text.iter().all(u8::is_ascii_whitespace) {
                // `echo "" > prompt` (or `> answer`): refused by the write itself, which the
                // shell reports (it does not look at what `close` returns).
                if let Some(e) = &ctl.failed {
                    return Err(e.clone());
                }
                let e = match ctl.target.clone() {
                    CtlTarget::Prompt(name) => {
                        let e = FsError::Refused(ThreadError::EmptyPrompt.to_string());
                        self.prompt_refused(st, &name, &e);
                        e
                    }
                    CtlTarget::Answer(id) => {
                        error_written(st, &id);
                        self.actions.empty_answer(&id)
                    }
                    _ => return Ok(data.len() as u32),
                };
                ctl_mut(st, fh)?.failed = Some(e.clone());
                return Err(e);
            }
            // A whole answer the role refuses fails the write itself, which the shell reports;
            // an answer still being written waits for the close.
            if let CtlTarget::Answer(id) = ctl.target.clone() {
                let text = String::from_utf8_lossy(&ctl.text).into_owned();
                if let Err(e) = self.actions.check_answer(&id, &text) {
                    error_written(st, &id);
                    ctl_mut(st, fh)?.failed = Some(e.clone());
                    return Err(e);
                }
            }
            return Ok(data.len() as u32);
        }
        self.change(st, fh)?;
        Ok(data.len() as u32)
    }

    /// A read on a control file's write handle: the id of the thread it started (a prompt with
    /// text starts its thread now), each byte once; nothing otherwise.
    pub(super) fn control_read(
        &self,
        st: &mut State,
        fh: u64,
        size: u32,
    ) -> Result<Vec<u8>, FsError> {
        let ctl = ctl_mut(st, fh)?;
        if ctl.target.collects_text() && ctl.answer.is_none() && ctl.wrote {
            self.start_prompt(st, fh)?;
        }
        let ctl = ctl_mut(st, fh)?;
        let Some(answer) = ctl.answer.clone() else {
            return Ok(Vec::new());
        };
        let start = ctl.delivered.min(answer.len());
        let end = start.saturating_add(size as usize).min(answer.len());
        ctl.delivered = end;
        Ok(answer[start..end].to_vec())
    }

    /// `setattr` on a control file: a size or time change is a change of the newest open write
    /// handle that has not fired (or of `fh`, when the kernel names it), else fires by itself.
    pub(super) fn control_setattr(
        &self,
        st: &mut State,
        key: &Key,
        fh: Option<u64>,
        set: &SetAttr,
    ) -> Result<(), FsError> {
        if set.size.is_none() && set.atime.is_none() && set.mtime.is_none() {
            return Ok(());
        }
        let target = target_of(key).ok_or(FsError::NotFound)?;
        let is_prompt = target.collects_text();
        let named = fh.filter(|f| {
            matches!(st.handles.get(f).map(|h| &h.open),
                Some(Open::Control(c)) if c.target == target)
        });
        let handle = named.or_else(|| {
            st.handles
                .iter()
                .filter_map(|(f, h)| match &h.open {
                    Open::Control(c) if c.target == target && (is_prompt || !c.fired) => Some(*f),
                    _ => None,
                })
                .max()
        });
        match (handle, is_prompt) {
            (Some(h), true) => {
                let ctl = ctl_mut(st, h)?;
                if let Some(size) = set.size
                    && ctl.answer.is_none()
                {
                    ctl.text.resize((size as usize).min(ctl.text.len()), 0);
                }
                Ok(())
            }
            (Some(h), false) => self.change(st, h),
            // `touch prompt` with nothing open writes no prompt.
            (None, true) => Ok(()),
            (None, false) => self.fire(st, &target).map(drop),
        }
    }

    /// Starts the thread of a prompt handle once something was written: at a close (FLUSH), at
    /// a read on the handle, or at its release. An empty prompt fails that close with EINVAL.
    pub(super) fn start_prompt(
        &self,
        st: &mut State,
        fh: u64,
    ) -> Result<Option<Arc<[u8]>>, FsError> {
        let ctl = ctl_mut(st, fh)?;
        if let Some(answer) = &ctl.answer {
            return Ok(Some(answer.clone()));
        }
        if let Some(e) = &ctl.failed {
            return Err(e.clone());
        }
        let text = String::from_utf8_lossy(&ctl.text).into_owned();
        // Nothing written yet: a close before the write (bash's dup2), or a truncate.
        if !ctl.wrote {
            return Ok(None);
        }
        let name = match ctl.target.clone() {
            CtlTarget::Prompt(name) => name,
            CtlTarget::Answer(id) => return self.answer_question(st, fh, &id, &text),
            _ => return Ok(None),
        };
        match self.actions.start(&name, &text) {
            Ok(id) => {
                let answer: Arc<[u8]> = Arc::from(format!("{id}\n").into_bytes());
                ctl_mut(st, fh)?.answer = Some(answer.clone());
                self.thread_started(st, &id);
                for key in [
                    Key::Workflows(WfKey::Latest(name.clone())),
                    Key::Workflows(WfKey::Threads(name.clone())),
                ] {
                    if let Some(ino) = st.inodes.existing(&key) {
                        st.inval.push(Inval::Inode(ino));
                    }
                }
                Ok(Some(answer))
            }
            Err(e) => {
                ctl_mut(st, fh)?.failed = Some(e.clone());
                self.prompt_refused(st, &name, &e);
                Err(e)
            }
        }
    }

    /// The text written to `threads/<id>/answer` completes the human step the thread awaits (`uwf
    /// thread answer` by file). A refusal fails the close (EINVAL); the engine keeps the answer's
    /// text and writes the reason to the thread's `error`.
    fn answer_question(
        &self,
        st: &mut State,
        fh: u64,
        id: &str,
        text: &str,
    ) -> Result<Option<Arc<[u8]>>, FsError> {
        match self.actions.answer_question(id, text) {
            Ok(json) => {
                let answer: Arc<[u8]> = Arc::from(format!("{json}\n").into_bytes());
                ctl_mut(st, fh)?.answer = Some(answer.clone());
                for f in [ThreadFile::Status, ThreadFile::Question, ThreadFile::Head] {
                    if let Some(ino) = st
                        .inodes
                        .existing(&Key::Threads(ThreadKey::File(Arc::from(id), f)))
                    {
                        st.inval.push(Inval::Inode(ino));
                    }
                }
                Ok(Some(answer))
            }
            Err(e) => {
                ctl_mut(st, fh)?.failed = Some(e.clone());
                error_written(st, id);
                Err(e)
            }
        }
    }

    /// A prompt of workflow `name` started no thread: the reason goes to `workflows/error`.
    fn prompt_refused(&self, st: &mut State, name: &str, e: &FsError) {
        let when = humantime::format_rfc3339_seconds(SystemTime::now());
        let text = format!(
            "{when} workflows/{name}/prompt: no thread started\n{}\n\nWrite the prompt \
             again: echo 'what to do' > workflows/{name}/prompt\n",
            e.to_string().trim_end()
        );
        st.error = Arc::from(text.into_bytes());
        st.error_time = SystemTime::now();
        if let Some(ino) = st.inodes.existing(&Key::Workflows(WfKey::Error)) {
            st.inval.push(Inval::Inode(ino));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::inode::ThreadFile;

    #[test]
    fn only_control_files_have_targets() {
        let id: Arc<str> = Arc::from("01J");
        assert!(target_of(&Key::Threads(ThreadKey::File(id.clone(), ThreadFile::Step))).is_some());
        assert!(target_of(&Key::Threads(ThreadKey::File(id.clone(), ThreadFile::Kill))).is_some());
        assert!(target_of(&Key::Threads(ThreadKey::File(id.clone(), ThreadFile::Wait))).is_none());
        assert!(
            target_of(&Key::Threads(ThreadKey::StepFile(
                id.clone(),
                0,
                StepFile::Fork
            )))
            .is_some()
        );
        assert!(target_of(&Key::Threads(ThreadKey::StepFile(id, 0, StepFile::Hash))).is_none());
        assert!(target_of(&Key::Workflows(WfKey::Prompt(Arc::from("w")))).is_some());
    }
}
