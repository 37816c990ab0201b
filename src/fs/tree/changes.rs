//! The requests that change the tree: `create`, `write`, `flush` (where saves and prompts
//! happen), `release`, `setattr`, `unlink`, `rename`, and the refusals of `mkdir`, `rmdir`
//! and links.
//!
//! Only `workflows/` and `workflows/<name>/` are writable; everything else refuses with the
//! errno the rule calls for (EROFS for generated directories, EPERM for generated files, EISDIR,
//! EEXIST), never EIO.
//!
//! Architecture Invariant: a change that saves registers before it takes effect, so a refused
//! save (EINVAL) leaves every name, inode and text as it was.

use std::sync::Arc;
use std::time::SystemTime;

use super::Tree;
use super::control_handles::target_of;
use super::drafts::place_path;
use super::state::{CtlTarget, Draft, Handle, Open, State};
use crate::fs::attr::{Attr, Caller, Finish, Inval, Opened, RenameFlags, SetAttr, check_name};
use crate::fs::error::FsError;
use crate::fs::inode::{Ino, Key, StepFile, ThreadFile, ThreadKey, WfKey};
use crate::fs::registration::{self, Target};

impl Tree {
    /// Creates (or, without `O_EXCL`, opens) `name` in a writable directory.
    pub(crate) fn create(
        &self,
        parent: Ino,
        name: &str,
        mode: u32,
        umask: u32,
        flags: i32,
        caller: Caller,
    ) -> Result<(Attr, Opened), FsError> {
        check_name(name)?;
        if self.opts.read_only {
            return Err(FsError::ReadOnlyMount);
        }
        let mut st = self.lock();
        let dir = Self::dir_key(&st, parent)?;
        if let Some(existing) = self.child(&st, &dir, name)? {
            if flags & libc::O_EXCL != 0 {
                return Err(FsError::Exists);
            }
            let ino = st.inodes.ino(&existing);
            let opened = self.open_locked(&mut st, ino, flags, caller)?;
            let attr = self.attr_of(&st, ino, &existing)?;
            st.inodes.remember(ino);
            return Ok((attr, opened));
        }
        if !dir.is_writable_dir() {
            return Err(FsError::ReadOnly(
                "generated directory; create files in workflows/",
            ));
        }
        let key = match &dir {
            Key::Workflows(WfKey::Dir(n)) if name == "workflow.yaml" => {
                let id = st.scratch.create(None, 0o644, caller.uid, caller.gid)?;
                st.drafts.insert(
                    n.clone(),
                    Draft {
                        id,
                        writers: 0,
                        refused: false,
                    },
                );
                Key::Workflows(WfKey::Yaml(n.clone()))
            }
            _ => {
                let perm = (mode & !umask & 0o7777) as u16;
                let id = st.scratch.create(
                    Some((dir.clone(), name.to_owned())),
                    perm,
                    caller.uid,
                    caller.gid,
                )?;
                Key::Scratch(id)
            }
        };
        st.workflows_changed = SystemTime::now();
        let ino = st.inodes.ino(&key);
        let opened = self.open_locked(&mut st, ino, flags, caller)?;
        let attr = self.attr_of(&st, ino, &key)?;
        st.inodes.remember(ino);
        Ok((attr, opened))
    }

    /// Writes to an open file; a `kill` is done when this returns.
    #[cfg(test)]
    pub(crate) fn write(&self, fh: u64, offset: u64, data: &[u8]) -> Result<u32, FsError> {
        let (n, then) = self.write_then(fh, offset, data)?;
        then.map_or(Ok(()), |f| f())?;
        Ok(n)
    }

    /// [`Tree::write`], handing back the work its answer waits for (a `kill`) instead of doing
    /// it, for the adapter to run off the FUSE loop.
    pub(crate) fn write_then(
        &self,
        fh: u64,
        offset: u64,
        data: &[u8],
    ) -> Result<(u32, Option<Finish>), FsError> {
        let mut st = self.lock();
        let result = self.write_in(&mut st, fh, offset, data);
        let then = st.deferred.0.take();
        result.map(|n| (n, then))
    }

    fn write_in(&self, st: &mut State, fh: u64, offset: u64, data: &[u8]) -> Result<u32, FsError> {
        let h = st.handles.get_mut(&fh).ok_or(FsError::BadHandle)?;
        if !h.write {
            return Err(FsError::BadHandle);
        }
        if let Open::Control(_) = &h.open {
            return self.control_write(st, fh, offset, data);
        }
        let (id, draft) = match &h.open {
            Open::Scratch(id) => (*id, None),
            Open::Draft(n) => (
                st.drafts.get(n).ok_or(FsError::BadHandle)?.id,
                Some(n.clone()),
            ),
            _ => return Err(FsError::BadHandle),
        };
        let n = st.scratch.write(id, offset, data)?;
        self.check_written(st, id, draft.as_ref(), data)?;
        Ok(n)
    }

    /// `close()` of a descriptor: a meaningful file changed since its last save is registered
    /// here, so the closing program learns of a refusal (EINVAL) and, once `close` returned,
    /// everyone sees the new version. The kernel sends RELEASE asynchronously, after `close`
    /// has returned, so registering only there would let a `cp … && uwf workflow history` race
    /// it. A flush with nothing new (several per open with `dup`, or `echo > f` flushing between
    /// its truncate and its write) registers nothing.
    pub(crate) fn flush(&self, fh: u64) -> Result<(), FsError> {
        if self.opts.read_only {
            return Err(FsError::Unsupported);
        }
        let mut st = self.lock();
        let Some(h) = st.handles.get(&fh) else {
            return Ok(());
        };
        if !h.write {
            return Ok(());
        }
        match h.open.clone() {
            Open::Draft(n) => {
                let blank = st
                    .drafts
                    .get(&n)
                    .and_then(|d| st.scratch.get(d.id))
                    .is_none_or(|f| f.data.iter().all(u8::is_ascii_whitespace));
                if blank {
                    return Ok(()); // a truncate before the writes
                }
                self.save_draft(&mut st, &n)
            }
            Open::Scratch(id) => self.save_scratch(&mut st, id),
            Open::Control(ctl) => match ctl.target {
                CtlTarget::Prompt(_) | CtlTarget::Answer(_) => {
                    self.start_prompt(&mut st, fh).map(drop)
                }
                // The change that fired reported its outcome; repeat a refusal at close.
                _ => ctl.failed.map_or(Ok(()), Err),
            },
            _ => Ok(()),
        }
    }

    /// The last reference to an open file went away. A draft whose last writer leaves is saved
    /// if it still holds changes no flush saw (an empty text is refused here), then dropped
    /// unless its text was refused.
    pub(crate) fn release(&self, fh: u64) {
        let mut st = self.lock();
        let Some(h) = st.handles.remove(&fh) else {
            return;
        };
        match h.open {
            Open::Scratch(id) => {
                let Some(f) = st.scratch.get_mut(id) else {
                    return;
                };
                f.handles = f.handles.saturating_sub(1);
                if h.write {
                    f.writers = f.writers.saturating_sub(1);
                }
                if h.write && f.writers == 0 {
                    // A refusal is in workflows/error; release cannot report it to anyone.
                    let _ = self.save_scratch(&mut st, id);
                }
                self.collect(&mut st, id);
            }
            Open::Draft(n) => {
                let last = match st.drafts.get_mut(&n) {
                    Some(d) => {
                        d.writers = d.writers.saturating_sub(1);
                        d.writers == 0
                    }
                    None => false,
                };
                if last {
                    let _ = self.finish_draft(&mut st, &n);
                }
            }
            Open::Control(ctl) => {
                // The kernel grew its idea of the size with the writes; our control files are
                // always empty. Refresh its attributes (immutable ones would stay wrong).
                let key = match &ctl.target {
                    CtlTarget::Thread(id, f) => Key::Threads(ThreadKey::File(id.clone(), *f)),
                    CtlTarget::Fork(id, i) => {
                        Key::Threads(ThreadKey::StepFile(id.clone(), *i, StepFile::Fork))
                    }
                    CtlTarget::Prompt(n) => Key::Workflows(WfKey::Prompt(n.clone())),
                    CtlTarget::Answer(id) => {
                        Key::Threads(ThreadKey::File(id.clone(), ThreadFile::Answer))
                    }
                };
                if let Some(ino) = st.inodes.existing(&key) {
                    st.inval.push(Inval::Inode(ino));
                }
                if ctl.target.collects_text()
                    && ctl.wrote
                    && ctl.answer.is_none()
                    && ctl.failed.is_none()
                {
                    // Put back for the start, which reports into workflows/error.
                    st.handles.insert(
                        fh,
                        Handle {
                            open: Open::Control(ctl),
                            write: true,
                        },
                    );
                    let _ = self.start_prompt(&mut st, fh);
                    st.handles.remove(&fh);
                }
            }
            _ => {}
        }
    }

    pub(crate) fn fsync(&self, fh: u64) -> Result<(), FsError> {
        // Scratch data lives in memory and saves are durable when they return: nothing to do.
        let _ = fh;
        Ok(())
    }

    /// Changes attributes; a `kill` (`echo > kill` truncates it) is done when this returns.
    #[cfg(test)]
    pub(crate) fn setattr(
        &self,
        ino: Ino,
        fh: Option<u64>,
        set: SetAttr,
        caller: Caller,
    ) -> Result<Attr, FsError> {
        let (attr, then) = self.setattr_then(ino, fh, set, caller)?;
        then.map_or(Ok(()), |f| f())?;
        Ok(attr)
    }

    /// [`Tree::setattr`], handing back the work its answer waits for (see [`Tree::write_then`]).
    pub(crate) fn setattr_then(
        &self,
        ino: Ino,
        fh: Option<u64>,
        set: SetAttr,
        caller: Caller,
    ) -> Result<(Attr, Option<Finish>), FsError> {
        let mut st = self.lock();
        let result = self.setattr_in(&mut st, ino, fh, set, caller);
        let then = st.deferred.0.take();
        result.map(|a| (a, then))
    }

    fn setattr_in(
        &self,
        st: &mut State,
        ino: Ino,
        fh: Option<u64>,
        set: SetAttr,
        caller: Caller,
    ) -> Result<Attr, FsError> {
        let key = match (Self::key_of(st, ino), fh.and_then(|f| st.handles.get(&f))) {
            (Ok(key), _) => key,
            (
                Err(_),
                Some(Handle {
                    open: Open::Scratch(id),
                    ..
                }),
            ) => Key::Scratch(*id),
            (Err(e), _) => return Err(e),
        };
        if set.is_empty() {
            return self.attr_of(st, ino, &key);
        }
        if self.opts.read_only {
            return Err(FsError::ReadOnlyMount);
        }
        let before = self.attr_of(st, ino, &key)?;
        if set.uid.is_some_and(|u| u != before.uid) || set.gid.is_some_and(|g| g != before.gid) {
            return Err(FsError::NotPermitted("files here cannot change owner"));
        }
        let same_mode = set
            .mode
            .is_none_or(|m| (m & 0o7777) as u16 == before.perm & 0o7777);
        match &key {
            Key::Scratch(id) => {
                let id = *id;
                if let Some(size) = set.size {
                    st.scratch.truncate(id, size)?;
                }
                let f = st.scratch.get_mut(id).ok_or(FsError::NotFound)?;
                if let Some(m) = set.mode {
                    f.mode = (m & 0o7777) as u16;
                }
                if let Some(t) = set.atime {
                    f.atime = t.resolve();
                }
                if let Some(t) = set.mtime {
                    f.mtime = t.resolve();
                }
                f.ctime = SystemTime::now();
            }
            Key::Workflows(WfKey::Yaml(n)) => {
                if !same_mode {
                    return Err(FsError::NotPermitted("the mode of workflow.yaml is fixed"));
                }
                if let Some(size) = set.size {
                    let open_writer = st.drafts.get(n).is_some_and(|d| d.writers > 0);
                    let id = self.ensure_draft(st, n, caller)?;
                    st.scratch.truncate(id, size)?;
                    if !open_writer {
                        // `truncate(path)` with nothing open: the change is a save by itself.
                        self.finish_draft(st, n)?;
                    }
                }
            }
            k if k.is_dir() => {
                if set.size.is_some() {
                    return Err(FsError::IsDir);
                }
                if !same_mode {
                    return Err(FsError::NotPermitted("directory modes are fixed"));
                }
            }
            k if target_of(k).is_some() => {
                if !same_mode {
                    return Err(FsError::NotPermitted("control files keep their mode"));
                }
                self.control_setattr(st, k, fh, &set)?;
            }
            _ => {
                if set.size.is_some() || set.atime.is_some() || set.mtime.is_some() {
                    return Err(FsError::ReadOnly("generated files cannot be changed"));
                }
                if !same_mode {
                    return Err(FsError::NotPermitted("generated files keep their mode"));
                }
            }
        }
        self.attr_of(st, ino, &key)
    }

    pub(crate) fn unlink(&self, parent: Ino, name: &str) -> Result<(), FsError> {
        check_name(name)?;
        if self.opts.read_only {
            return Err(FsError::ReadOnlyMount);
        }
        let mut st = self.lock();
        let dir = Self::dir_key(&st, parent)?;
        let key = self.child(&st, &dir, name)?.ok_or(FsError::NotFound)?;
        if !dir.is_writable_dir() {
            return Err(FsError::ReadOnly("generated directory"));
        }
        match &key {
            Key::Scratch(id) => {
                st.scratch.unlink(*id);
                self.collect(&mut st, *id);
                self.reverted(&mut st, &place_path(&dir, name));
            }
            Key::Workflows(WfKey::Yaml(n)) => {
                self.reverted(&mut st, &format!("workflows/{n}/workflow.yaml"));
                let draft = st.drafts.remove(n).ok_or(FsError::NotPermitted(
                    "workflow.yaml shows the registered definition; `uwf workflow rm` removes a \
                     workflow",
                ))?;
                self.drop_draft(&mut st, n, draft);
                if let Some(ino) = st.inodes.existing(&key) {
                    st.inodes.retire(ino);
                }
                self.invalidate_workflow(&mut st, n);
            }
            k if k.is_dir() => return Err(FsError::IsDir),
            _ => return Err(FsError::NotPermitted("generated files cannot be deleted")),
        }
        st.workflows_changed = SystemTime::now();
        Ok(())
    }

    /// Renames within the writable directories. Renaming onto a meaningful name saves the text
    /// first; if the engine refuses it the rename does not happen (EINVAL) and the text stays
    /// where it was.
    pub(crate) fn rename(
        &self,
        parent: Ino,
        name: &str,
        new_parent: Ino,
        new_name: &str,
        flags: RenameFlags,
        caller: Caller,
    ) -> Result<(), FsError> {
        if flags.unsupported() {
            return Err(FsError::Invalid(
                "only RENAME_NOREPLACE is supported (not RENAME_EXCHANGE or RENAME_WHITEOUT)",
            ));
        }
        check_name(name)?;
        check_name(new_name)?;
        if self.opts.read_only {
            return Err(FsError::ReadOnlyMount);
        }
        let mut st = self.lock();
        let src_dir = Self::dir_key(&st, parent)?;
        let dst_dir = Self::dir_key(&st, new_parent)?;
        let src = self.child(&st, &src_dir, name)?.ok_or(FsError::NotFound)?;
        if !src_dir.is_writable_dir() || !dst_dir.is_writable_dir() {
            return Err(FsError::ReadOnly("generated directory"));
        }
        let dst = self.child(&st, &dst_dir, new_name)?;
        if dst.as_ref() == Some(&src) {
            return Ok(());
        }
        if flags.noreplace() && dst.is_some() {
            return Err(FsError::Exists);
        }
        match &src {
            Key::Scratch(_) | Key::Workflows(WfKey::Yaml(_)) => {}
            k if k.is_dir() => return Err(FsError::NotPermitted("directories cannot be renamed")),
            _ => return Err(FsError::NotPermitted("generated files cannot be renamed")),
        }
        match &dst {
            None | Some(Key::Scratch(_)) | Some(Key::Workflows(WfKey::Yaml(_))) => {}
            Some(k) if k.is_dir() => return Err(FsError::IsDir),
            Some(_) => return Err(FsError::NotPermitted("generated files cannot be replaced")),
        }
        let text: Arc<[u8]> = match &src {
            Key::Scratch(id) => Arc::from(
                st.scratch
                    .get(*id)
                    .ok_or(FsError::NotFound)?
                    .data
                    .as_slice(),
            ),
            Key::Workflows(WfKey::Yaml(n)) => self.yaml_text(&st, n)?.0,
            _ => return Err(FsError::NotFound),
        };
        let src_path = match &src {
            Key::Workflows(WfKey::Yaml(n)) => format!("workflows/{n}/workflow.yaml"),
            _ => place_path(&src_dir, name),
        };
        let to_view = match &dst_dir {
            Key::Workflows(WfKey::Dir(n)) if new_name == "workflow.yaml" => Some(n.clone()),
            _ => None,
        };
        let target = match &to_view {
            Some(n) => Some(Target::Workflow(n.clone())),
            None => registration::target_of(&dst_dir, new_name),
        };
        // Save first: a refusal leaves everything as it was.
        let saved = match &target {
            Some(t) => match registration::register(&self.source, &text, t) {
                Ok(saved) => Some(saved),
                Err(e) => {
                    let reason = e.to_string();
                    // The source may be a temp file its program deletes when the rename fails
                    // (`sed -i`): the text is also kept beside the target, under a name that
                    // survives, and that is the name given.
                    let kept_path = match &src {
                        Key::Scratch(_) => self
                            .keep_refused(&mut st, &dst_dir, new_name, &text, caller)
                            .unwrap_or(src_path),
                        _ => src_path,
                    };
                    let kept = format!(
                        "Your text is in {kept_path}: the rename did not happen. Fix the text \
                         and save it again (or delete {kept_path} to leave things as they are)."
                    );
                    self.record_error(&mut st, &kept_path, &reason, &kept);
                    return Err(e);
                }
            },
            None => None,
        };
        let src_ino = st.inodes.ino(&src);
        // Take the source's data out of its old role.
        let id = match &src {
            Key::Scratch(id) => *id,
            Key::Workflows(WfKey::Yaml(n)) => match st.drafts.remove(n) {
                Some(d) => {
                    self.detach_draft(&mut st, n, d);
                    d.id
                }
                None => st
                    .scratch
                    .create_with(None, &text, 0o644, caller.uid, caller.gid)?,
            },
            _ => return Err(FsError::NotFound),
        };
        // Remove what the destination replaces.
        match &dst {
            Some(Key::Scratch(old)) => {
                st.scratch.unlink(*old);
                self.collect(&mut st, *old);
            }
            Some(Key::Workflows(WfKey::Yaml(n))) => {
                if let Some(d) = st.drafts.remove(n) {
                    self.drop_draft(&mut st, n, d);
                }
            }
            _ => {}
        }
        match &to_view {
            Some(n) => {
                // The source inode *is* the view now; its text is what was just registered.
                self.adopt_as_draft_if_open(&mut st, n, id);
                st.inodes
                    .rebind(src_ino, Key::Workflows(WfKey::Yaml(n.clone())));
            }
            None => {
                st.scratch
                    .rename(id, (dst_dir.clone(), new_name.to_owned()));
                if saved.is_some()
                    && let Some(f) = st.scratch.get_mut(id)
                {
                    f.dirty = false;
                }
                st.inodes.rebind(src_ino, Key::Scratch(id));
            }
        }
        if let Key::Workflows(WfKey::Yaml(n)) = &src {
            self.invalidate_workflow(&mut st, n);
        }
        if let Some(saved) = saved {
            self.saved_ok(&mut st, saved, text);
        }
        st.workflows_changed = SystemTime::now();
        Ok(())
    }

    /// Keeps `text`, refused as `dir/name`, as the scratch file `dir/name.refused` (replacing
    /// an earlier one). Returns its mount-relative path; `None` when it cannot be kept.
    fn keep_refused(
        &self,
        st: &mut State,
        dir: &Key,
        name: &str,
        text: &[u8],
        caller: Caller,
    ) -> Option<String> {
        let kept = format!("{name}.refused");
        check_name(&kept).ok()?;
        if let Some(old) = st.scratch.find(dir, &kept) {
            st.scratch.unlink(old);
            self.collect(st, old);
        }
        let place = Some((dir.clone(), kept.clone()));
        st.scratch
            .create_with(place, text, 0o644, caller.uid, caller.gid)
            .ok()?;
        st.workflows_changed = SystemTime::now();
        Some(place_path(dir, &kept))
    }

    pub(crate) fn mkdir(&self, parent: Ino, name: &str) -> Result<Attr, FsError> {
        self.refuse_new(
            parent,
            name,
            "directories appear when a workflow is registered",
        )
    }

    pub(crate) fn rmdir(&self, parent: Ino, name: &str) -> Result<(), FsError> {
        check_name(name)?;
        if self.opts.read_only {
            return Err(FsError::ReadOnlyMount);
        }
        let st = self.lock();
        let dir = Self::dir_key(&st, parent)?;
        match self.child(&st, &dir, name)? {
            None => Err(FsError::NotFound),
            Some(k) if !k.is_dir() => Err(FsError::NotDir),
            Some(_) => Err(FsError::NotPermitted(
                "directories are generated; `uwf workflow rm` removes a workflow",
            )),
        }
    }

    /// Symlinks, hard links and device nodes do not exist here (emacs then locks with a file).
    pub(crate) fn link_like(&self, parent: Ino, name: &str) -> Result<Attr, FsError> {
        self.refuse_new(parent, name, "only regular files can be created here")
    }

    /// Refuses to create `name` in `parent`: EEXIST when it is there, else `why`.
    fn refuse_new(&self, parent: Ino, name: &str, why: &'static str) -> Result<Attr, FsError> {
        check_name(name)?;
        if self.opts.read_only {
            return Err(FsError::ReadOnlyMount);
        }
        let st = self.lock();
        let dir = Self::dir_key(&st, parent)?;
        if self.child(&st, &dir, name)?.is_some() {
            return Err(FsError::Exists);
        }
        Err(FsError::NotPermitted(why))
    }
}
