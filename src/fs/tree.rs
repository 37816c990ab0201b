//! The protocol-free filesystem: inodes, attributes, directory listings, reads, writes, saves.
//!
//! [`Tree`] implements every operation the mount answers as a plain method returning
//! `Result<_, FsError>`, in the vocabulary of the kernel's requests (lookup, getattr, open, read,
//! write, flush, release, setattr, create, unlink, rename, …) but with no FUSE type in sight, so
//! editors' exact op sequences can be replayed in unit tests. The adapter in [`super::fuse`]
//! only translates types, picks TTLs from [`Caching`] and maps errors to errno.
//!
//! The tree:
//! ```text
//! README.md  workflows/{error, <name>/{workflow.yaml, hash, graph.mmd, versions/<hash>.yaml,
//! prompt, latest, threads/<id>}, <anything>.yaml}  threads/<id>/{prompt, head, status, workflow,
//! step, run, wait, kill, log, error, transcript.md, steps/{NNN-role/…, latest}}
//! cas/{<hash>, schemas/<hash>.json}
//! ```
//! Generated entries come from [`super::views::Source`]. In the writable directories
//! (`workflows/`, `workflows/<name>/`) any other name is a scratch file ([`super::scratch`]).
//!
//! How a save works: opening `workflow.yaml` for writing starts a *draft* (a nameless scratch file
//! holding the current text); writes and truncates go to the draft; the `close` (FLUSH) that
//! follows changes registers it once, or fails with EINVAL when the engine refuses it; the
//! release of the last writer saves what no flush saw and drops the draft. A scratch file named
//! `workflows/<anything>.yaml` registers the same way; any scratch file registers when renamed onto
//! a meaningful name. A refused save keeps the text (the draft stays and is what `workflow.yaml`
//! shows; a scratch file stays as it is) and writes the reason to `workflows/error`.
//!
//! Architecture Invariant: every method takes the state lock once and leaves the state
//! consistent whatever it returns; nothing here panics on any input (the adapter still catches
//! panics, as a last line).
//!
//! Control files (`step`, `run`, `kill`, `fork`, `workflows/<name>/prompt`) are write handles
//! in the same handle table (`Open::Control`, `tree/state.rs`). The trigger rule of `step`/`run`/`kill`/`fork`:
//! each write handle fires once, at its first change (a write, a truncate, or a time change —
//! with or without the handle: `echo >` truncates by path, `touch` sets times by path, both
//! while their handle is open, so such a path-only change is the open handle's); a path-only
//! time or size change with no write handle open fires by itself. Opening one for writing
//! already checks that the action can start (EBUSY, EINVAL), so the error reaches the program at
//! `open`, and the change that fires reports any later refusal. A prompt starts its thread at
//! the first `close` (FLUSH) that sees text, at a read on the same descriptor (clone-style), or
//! at the release.
//!
//! The methods are spread over the files of `tree/`: this one (the tree and the requests that
//! read), `changes.rs` (the requests that change something), `state.rs` (the state behind the
//! lock and the handle table), `layout.rs` (what exists where: dispatch by subtree, the root,
//! scratch files), one file per subtree (`workflows.rs`, `threads.rs`, `cas.rs`: child lookup,
//! listing, attributes and bytes of its entries), `control_handles.rs` (write handles on control
//! files), `drafts.rs` (drafts and saves) and `readme.rs` (the README's text).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::SystemTime;

use super::actions::Actions;
use super::attr::{
    Attr, Caching, Caller, DirEntry, Inval, Kind, Lookup, Opened, Owner, Reading, StatFs,
    check_name,
};
use super::error::FsError;
use super::inode::{Ino, InodeTable, Key, StepFile, ThreadFile, ThreadKey, WfKey};
use super::scratch::{Limits, Scratches};
use super::views::{Source, Warmer};

mod cas;
mod changes;
mod control_handles;
mod drafts;
mod layout;
mod readme;
mod state;
mod threads;
mod workflows;

#[cfg(test)]
mod tests;

use state::{Ctl, CtlTarget, Handle, Open, State};
use threads::{growing, read_at};

/// How many directory entries one `readdir` call returns at most.
const PAGE: usize = 1024;

/// The largest file whose bytes go into the kernel's page cache at its first open.
pub(crate) const PREFILL_MAX: usize = 128 << 10;

/// How a mount behaves.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// `--read-only`: nothing can be written; opens are not tracked at all (see `open`).
    pub read_only: bool,
    /// Owner of every generated entry (the mounting user).
    pub uid: u32,
    pub gid: u32,
    pub limits: Limits,
    /// Where the agents of threads started through the mount run (`uwf mount --workdir`).
    pub workdir: std::path::PathBuf,
    /// Who acts through the mount (`uwf mount --by`), already checked; `None` records no name.
    pub by: Option<String>,
}

/// Directory, symbolic link or file, as `readdir` reports it.
fn kind(key: &Key) -> Kind {
    if key.is_dir() {
        Kind::Dir
    } else if key.is_link() {
        Kind::Symlink
    } else {
        Kind::File
    }
}

/// The storage seen as a filesystem.
#[derive(Debug)]
pub(crate) struct Tree {
    source: Arc<Source>,
    /// Renders a thread's files ahead once a reader starts on it.
    warmer: Warmer,
    opts: Options,
    readme: Arc<[u8]>,
    actions: Actions,
    state: Mutex<State>,
    /// The listing of `threads/` and the mtime it was built at. A readdir is answered a page
    /// (~100 names) at a time, and every directory's mtime moves with its listing, so the pages
    /// of one listing share one build instead of each making all 100,000 names again.
    threads_listing: Mutex<Option<(std::time::SystemTime, Arc<crate::fs::views::Listing>)>>,
}

impl Tree {
    pub(crate) fn new(source: Source, opts: Options) -> Tree {
        let source = Arc::new(source);
        let warmer = Warmer::start(source.clone());
        let readme = Arc::from(readme::text(source.root(), opts.read_only).into_bytes());
        let now = SystemTime::now();
        let actions = Actions::new(
            source.shared_store(),
            source.index_generation(),
            (opts.workdir.clone(), opts.by.clone()),
        );
        Tree {
            actions,
            state: Mutex::new(State {
                inodes: InodeTable::new(),
                scratch: Scratches::new(opts.limits),
                drafts: HashMap::new(),
                saved: HashMap::new(),
                handles: HashMap::new(),
                next_fh: 1,
                error: Arc::from(Vec::new()),
                error_time: now,
                error_about: None,
                workflows_changed: now,
                inval: Vec::new(),
                deferred: Default::default(),
            }),
            source,
            warmer,
            opts,
            readme,
            threads_listing: Mutex::new(None),
        }
    }

    /// The owner of every generated entry: the mounting user.
    fn owner(&self) -> Owner {
        Owner {
            uid: self.opts.uid,
            gid: self.opts.gid,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every method leaves the state consistent before it can fail, so a poisoned lock (a
        // panic caught by the adapter) still guards a usable state.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The storage seen through this tree.
    #[cfg(test)]
    pub(crate) fn source(&self) -> &Source {
        &self.source
    }

    /// The background jobs started through control files.
    #[cfg(test)]
    pub(crate) fn jobs(&self) -> &Arc<super::actions::Jobs> {
        self.actions.jobs()
    }

    /// Kernel caches that this tree's own changes made stale, to be sent from another thread.
    pub(crate) fn take_invalidations(&self) -> Vec<Inval> {
        std::mem::take(&mut self.lock().inval)
    }

    // ---------------------------------------------------------------- reading

    /// Looks `name` up in directory `parent`; a found entry counts one kernel reference.
    pub(crate) fn lookup(&self, parent: Ino, name: &str) -> Result<Lookup, FsError> {
        check_name(name)?;
        let mut st = self.lock();
        let dir = Self::dir_key(&st, parent)?;
        let key = match name {
            "." => dir.clone(),
            ".." => dir.parent(),
            _ => match self.child(&st, &dir, name)? {
                Some(key) => key,
                None => {
                    return Ok(Lookup::Missing {
                        permanent: self.never_appears(&dir, name),
                    });
                }
            },
        };
        let ino = st.inodes.ino(&key);
        let attr = self.attr_of(&st, ino, &key)?;
        st.inodes.remember(ino);
        if let Key::Threads(ThreadKey::File(id, ThreadFile::Transcript))
        | Key::Threads(ThreadKey::StepFile(id, ..)) = &key
        {
            // Someone reads what this thread renders: render the rest of it, and the next
            // thread, on the other CPU meanwhile.
            self.warmer.thread(id);
        }
        Ok(Lookup::Found(attr))
    }

    /// The kernel dropped `n` references to `ino`.
    pub(crate) fn forget(&self, ino: Ino, n: u64) {
        self.lock().inodes.forget(ino, n);
    }

    pub(crate) fn getattr(&self, ino: Ino, fh: Option<u64>) -> Result<Attr, FsError> {
        let st = self.lock();
        match st.inodes.key(ino) {
            Some(Key::Gone) | None => {
                // An unlinked or replaced file that is still open answers through its handle.
                if let Some(Open::Scratch(id)) =
                    fh.and_then(|f| st.handles.get(&f)).map(|h| &h.open)
                {
                    return self.attr_of(&st, ino, &Key::Scratch(*id));
                }
                Err(FsError::NotFound)
            }
            Some(key) => self.attr_of(&st, ino, &key.clone()),
        }
    }

    /// `access(2)`: write access only where something can be saved, execute only on directories.
    pub(crate) fn access(&self, ino: Ino, mask: i32) -> Result<(), FsError> {
        let st = self.lock();
        let key = Self::key_of(&st, ino)?;
        let attr = self.attr_of(&st, ino, &key)?;
        if mask & libc::W_OK != 0 {
            if self.opts.read_only {
                return Err(FsError::ReadOnlyMount);
            }
            if attr.perm & 0o200 == 0 {
                return Err(FsError::ReadOnly("not writable"));
            }
        }
        if mask & libc::X_OK != 0 && attr.perm & 0o100 == 0 {
            return Err(FsError::ReadOnly("not executable"));
        }
        Ok(())
    }

    /// Opens a file. On a `--read-only` mount this answers [`FsError::Unsupported`]: the kernel
    /// then stops sending opens for the whole connection and keeps every file's pages cached
    /// (the kernel's no-open mode, which it enters at the first ENOSYS to OPEN), which only a
    /// mount where nothing is written can afford.
    pub(crate) fn open(&self, ino: Ino, flags: i32, caller: Caller) -> Result<Opened, FsError> {
        if self.opts.read_only {
            return Err(FsError::Unsupported);
        }
        let mut st = self.lock();
        let opened = self.open_locked(&mut st, ino, flags, caller)?;
        // A truncating open of `kill` (only with FUSE_ATOMIC_O_TRUNC, not asked for) kills
        // before it returns, like `echo > kill`'s truncate does.
        if let Some(then) = st.deferred.0.take() {
            drop(st);
            then()?;
        }
        Ok(opened)
    }

    fn open_locked(
        &self,
        st: &mut State,
        ino: Ino,
        flags: i32,
        caller: Caller,
    ) -> Result<Opened, FsError> {
        let key = Self::key_of(st, ino)?;
        let write = flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0;
        let truncate = flags & libc::O_TRUNC != 0;
        let (open, caching) = match &key {
            k if k.is_dir() => return Err(FsError::IsDir),
            Key::Scratch(id) => {
                let f = st.scratch.get_mut(*id).ok_or(FsError::NotFound)?;
                f.handles += 1;
                if write {
                    f.writers += 1;
                }
                if truncate {
                    st.scratch.truncate(*id, 0)?;
                }
                (Open::Scratch(*id), Caching::Mutable)
            }
            Key::Workflows(WfKey::Yaml(n)) if write => {
                let id = self.ensure_draft(st, n, caller)?;
                if let Some(d) = st.drafts.get_mut(n) {
                    d.writers += 1;
                }
                if truncate {
                    st.scratch.truncate(id, 0)?;
                }
                (Open::Draft(n.clone()), Caching::Mutable)
            }
            Key::Threads(ThreadKey::File(id, f)) if write && f.is_control() => {
                let t = self.thread_ref(id)?;
                let action = Self::action_of(*f).ok_or(FsError::NotFound)?;
                self.actions.check(id, t.archived.as_deref(), action)?;
                let ctl = Ctl::new(CtlTarget::Thread(id.clone(), *f));
                (Open::Control(Box::new(ctl)), Caching::Immutable)
            }
            Key::Threads(ThreadKey::StepFile(id, i, StepFile::Fork)) if write => {
                self.step_hash(id, *i)?;
                let ctl = Ctl::new(CtlTarget::Fork(id.clone(), *i));
                (Open::Control(Box::new(ctl)), Caching::Volatile)
            }
            Key::Threads(ThreadKey::File(id, ThreadFile::Answer)) if write => {
                let t = self.thread_ref(id)?;
                if t.finished() || self.source.run_files(id).awaiting(t.head).is_none() {
                    self.actions.check_answerable(id).inspect_err(|_| {
                        control_handles::error_written(st, id);
                    })?;
                }
                let ctl = Ctl::new(CtlTarget::Answer(id.clone()));
                (Open::Control(Box::new(ctl)), Caching::Volatile)
            }
            Key::Workflows(WfKey::Prompt(n)) if write => {
                self.current(n)?;
                let ctl = Ctl::new(CtlTarget::Prompt(n.clone()));
                (Open::Control(Box::new(ctl)), Caching::Volatile)
            }
            _ if write => return Err(FsError::ReadOnly("generated files cannot be written")),
            Key::Threads(ThreadKey::File(id, ThreadFile::Wait)) => {
                let caching = self.attr_of(st, ino, &key)?.caching;
                (Open::Wait(id.clone(), Arc::new(OnceLock::new())), caching)
            }
            Key::Threads(ThreadKey::File(id, f @ (ThreadFile::Log | ThreadFile::Events))) => {
                let caching = self.attr_of(st, ino, &key)?.caching;
                (
                    Open::Growing(self.source.run_files(id), growing(*f)),
                    caching,
                )
            }
            k => {
                let caching = self.attr_of(st, ino, k)?.caching;
                if caching == Caching::Immutable {
                    (Open::Immutable(k.clone()), caching)
                } else {
                    (Open::Snapshot(self.content(st, k)?), caching)
                }
            }
        };
        let fh = st.next_fh;
        st.next_fh += 1;
        let control = matches!(open, Open::Control(_));
        st.handles.insert(fh, Handle { open, write });
        if control
            && truncate
            && let Err(e) = self.change(st, fh)
        {
            st.handles.remove(&fh);
            return Err(e);
        }
        Ok(Opened {
            fh,
            caching,
            writable: write,
        })
    }

    /// The bytes to put into the kernel's page cache as `fh` (just opened) is answered: those
    /// of an immutable file of at most [`PREFILL_MAX`] bytes at its first open since the kernel
    /// learned its inode, so the reader's first `read` finds its pages and sends no READ.
    ///
    /// Safe to push from inside the OPEN callback, although notifying the kernel about an inode
    /// while a request for it is unanswered can deadlock (the kernel holds the pages' locks
    /// until the reply): before its first open no file can be open on the inode, so no READ of
    /// it can be waiting on a page lock.
    pub(crate) fn prefill(&self, ino: Ino, fh: u64) -> Option<Arc<[u8]>> {
        let mut st = self.lock();
        let key = match st.handles.get(&fh) {
            Some(Handle {
                open: Open::Immutable(key),
                write: false,
            }) => key.clone(),
            _ => return None,
        };
        if !st.inodes.first_fill(ino) {
            return None;
        }
        let bytes = self.content(&st, &key).ok()?;
        (!bytes.is_empty() && bytes.len() <= PREFILL_MAX).then_some(bytes)
    }

    /// Reads from an open file, blocking while a `wait` waits (tests, export).
    pub(crate) fn read(
        &self,
        ino: Ino,
        fh: u64,
        offset: u64,
        size: u32,
    ) -> Result<Vec<u8>, FsError> {
        match self.read_or_wait(ino, fh, offset, size)? {
            Reading::Data(bytes) => Ok(bytes),
            Reading::Later(job) => job(&|| false),
        }
    }

    /// Reads from an open file; `fh` 0 (no-open mode) reads the generated content directly.
    /// A read of `wait` while a step runs comes back as [`Reading::Later`].
    pub(crate) fn read_or_wait(
        &self,
        ino: Ino,
        fh: u64,
        offset: u64,
        size: u32,
    ) -> Result<Reading, FsError> {
        let mut st = self.lock();
        let slice = move |bytes: &[u8]| {
            let start = (offset as usize).min(bytes.len());
            let end = start.saturating_add(size as usize).min(bytes.len());
            bytes[start..end].to_vec()
        };
        match st.handles.get(&fh).map(|h| h.open.clone()) {
            Some(Open::Growing(files, kind)) => {
                drop(st);
                return Ok(Reading::Data(read_at(&files, kind, offset, size)?));
            }
            Some(Open::Wait(id, answer)) => {
                if let Some(bytes) = answer.get() {
                    return Ok(Reading::Data(slice(bytes)));
                }
                if !self.actions.busy(&id) {
                    let bytes = answer.get_or_init(|| self.actions.answer(&id));
                    return Ok(Reading::Data(slice(bytes)));
                }
                let wait = self.actions.waiter(&id);
                return Ok(Reading::Later(Box::new(move |interrupted| {
                    let bytes = wait(interrupted)?;
                    Ok(slice(answer.get_or_init(|| bytes)))
                })));
            }
            Some(Open::Control(_)) => {
                return Ok(Reading::Data(self.control_read(&mut st, fh, size)?));
            }
            None => {
                if let Ok(Key::Threads(ThreadKey::File(
                    id,
                    f @ (ThreadFile::Log | ThreadFile::Events),
                ))) = Self::key_of(&st, ino)
                {
                    drop(st);
                    let files = self.source.run_files(&id);
                    return Ok(Reading::Data(read_at(&files, growing(f), offset, size)?));
                }
            }
            _ => {}
        }
        let bytes: Arc<[u8]> = match st.handles.get(&fh).map(|h| &h.open) {
            Some(Open::Snapshot(b)) => b.clone(),
            Some(Open::Immutable(key)) => self.content(&st, key)?,
            Some(Open::Scratch(id)) => Arc::from(
                st.scratch
                    .get(*id)
                    .ok_or(FsError::BadHandle)?
                    .data
                    .as_slice(),
            ),
            Some(Open::Draft(n)) => self.yaml_text(&st, n)?.0,
            Some(Open::Growing(..) | Open::Wait(..) | Open::Control(_)) => {
                return Err(FsError::BadHandle);
            }
            None => {
                let key = Self::key_of(&st, ino)?;
                self.content(&st, &key)?
            }
        };
        Ok(Reading::Data(slice(&bytes)))
    }

    /// `poll(2)`/`select(2)` on an open file: `None` when a read would not block (every file
    /// but a `wait` whose step still runs), else a job that returns once it would not.
    /// `read -t` in bash waits in `select` for a regular file too, so this is what ends it.
    pub(crate) fn poll(&self, fh: u64) -> Option<Box<dyn FnOnce() + Send>> {
        let st = self.lock();
        match st.handles.get(&fh).map(|h| &h.open) {
            Some(Open::Wait(id, answer)) if answer.get().is_none() && self.actions.busy(id) => {
                let wait = self.actions.waiter(id);
                Some(Box::new(move || drop(wait(&|| false))))
            }
            _ => None,
        }
    }

    /// The target of a symbolic link.
    pub(crate) fn readlink(&self, ino: Ino) -> Result<String, FsError> {
        let st = self.lock();
        let key = Self::key_of(&st, ino)?;
        self.link_target(&key)
    }

    /// Opening a directory is not a request this tree answers, on any mount: the kernel then
    /// stops sending `opendir`/`releasedir` for the connection, reads listings without a
    /// handle, and caches each listing (`FOPEN_CACHE_DIR`) until the directory's mtime changes
    /// (checked at every `readdir` from offset 0, with `FUSE_AUTO_INVAL_DATA`). That is exact here
    /// because every directory's mtime moves with its listing (`views.rs`, "Architecture
    /// Invariant"), and the attributes of a directory that can change are never cached.
    pub(crate) fn opendir(&self, ino: Ino) -> Result<Opened, FsError> {
        let _ = ino;
        Err(FsError::Unsupported)
    }

    /// One page of a directory from `offset` (0 = start), `.` and `..` first. Directories are
    /// never opened (see [`Tree::opendir`]): each page is cut from the listing as it is now.
    pub(crate) fn readdir(&self, ino: Ino, offset: u64) -> Result<Vec<DirEntry>, FsError> {
        let mut st = self.lock();
        let key = Self::dir_key(&st, ino)?;
        let listing = self.listing(&st, &key)?;
        let parent = key.parent();
        let parent_ino = st.inodes.ino(&parent);
        let mut out = Vec::new();
        let total = listing.len() + 2;
        let mut i = offset as usize;
        while i < total && out.len() < PAGE {
            let (ino, kind, name) = match i {
                0 => (ino, Kind::Dir, ".".to_owned()),
                1 => (parent_ino, Kind::Dir, "..".to_owned()),
                _ => {
                    let (name, key) = &listing[i - 2];
                    (st.inodes.ino(key), kind(key), name.clone())
                }
            };
            out.push(DirEntry {
                ino,
                offset: i as u64 + 1,
                kind,
                name,
            });
            i += 1;
        }
        Ok(out)
    }

    /// `statfs(2)`: the numbers of the filesystem holding the store (what the mount's files
    /// are made of), so `df` shows something true.
    pub(crate) fn statfs(&self) -> Result<StatFs, FsError> {
        let root = self.source.root();
        let v = nix::sys::statvfs::statvfs(root)
            .map_err(|e| FsError::internal(format!("{}: {e}", root.display())))?;
        let size = |n: u32| if n == 0 { 4096 } else { n };
        Ok(StatFs {
            blocks: v.blocks(),
            bfree: v.blocks_free(),
            bavail: v.blocks_available(),
            files: v.files(),
            ffree: v.files_free(),
            bsize: size(v.block_size() as u32),
            frsize: size(v.fragment_size() as u32),
        })
    }

    /// The bytes the scratch files hold (for tests and the memory bound).
    #[cfg(test)]
    pub(crate) fn scratch_bytes(&self) -> u64 {
        self.lock().scratch.bytes()
    }
}
