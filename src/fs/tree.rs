//! The protocol-free filesystem: inodes, attributes, directory listings, reads, writes, saves.
//!
//! [`Tree`] implements every operation the mount answers as a plain method returning
//! `Result<_, FsError>`, in the vocabulary of the kernel's requests (lookup, getattr, open, read,
//! write, flush, release, setattr, create, unlink, rename, …) but with no FUSE type in sight, so
//! editors' exact op sequences can be replayed in unit tests. The adapter in [`super::fuse`]
//! only translates types, picks TTLs from [`Caching`] and maps errors to errno.
//!
//! The tree (SPEC §7):
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
//! in the same handle table ([`Open::Control`]). The trigger rule of `step`/`run`/`kill`/`fork`:
//! each write handle fires once, at its first change (a write, a truncate, or a time change —
//! with or without the handle: `echo >` truncates by path, `touch` sets times by path, both
//! while their handle is open, so such a path-only change is the open handle's); a path-only
//! time or size change with no write handle open fires by itself. Opening one for writing
//! already checks that the action can start (EBUSY, EINVAL), so the error reaches the program at
//! `open`, and the change that fires reports any later refusal. A prompt starts its thread at
//! the first `close` (FLUSH) that sees text, at a read on the same descriptor (clone-style), or
//! at the release.
//!
//! The methods are spread over four files: this one (requests), `tree/layout.rs` (what exists
//! where: `child`, `listing`, `attr_of`, `content`), `tree/threads.rs` (the same for the thread
//! views) and `tree/saving.rs` (drafts and saves).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::SystemTime;

use crate::cas::Hash;

use super::actions::{self, Actions, Jobs};
use super::attr::{
    Attr, Caching, Caller, DirEntry, Inval, Kind, Lookup, NAME_MAX, Opened, Owner, RenameFlags,
    SetAttr,
};
use super::error::FsError;
use super::inode::{Ino, InodeTable, Key, ROOT};
use super::registration::{self, Target};
use super::scratch::{Limits, Scratches};
use super::views::{Source, StepFile, ThreadFile, Warmer};

mod control_handles;
mod drafts;
mod layout;
mod readme;
mod threads;

#[cfg(test)]
mod tests;

pub use threads::WAIT_PLACEHOLDER;

use control_handles::read_at;
use drafts::place_path;

/// How many directory entries one `readdir` call returns at most.
const PAGE: usize = 1024;

/// The largest file whose bytes go into the kernel's page cache at its first open.
pub const PREFILL_MAX: usize = 128 << 10;

/// How a mount behaves.
#[derive(Debug, Clone)]
pub struct Options {
    /// `--read-only`: nothing can be written; opens are not tracked at all (see `open`).
    pub read_only: bool,
    /// Owner of every generated entry (the mounting user).
    pub uid: u32,
    pub gid: u32,
    pub limits: Limits,
}

/// The storage seen as a filesystem.
#[derive(Debug)]
pub struct Tree {
    source: Arc<Source>,
    /// Renders a thread's files ahead once a reader starts on it.
    warmer: Warmer,
    opts: Options,
    readme: Arc<[u8]>,
    actions: Actions,
    state: Mutex<State>,
}

/// What a control file's write handle acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
enum CtlTarget {
    /// `threads/<id>/{step,run,kill}`
    Thread(Arc<str>, ThreadFile),
    /// `threads/<id>/steps/NNN-role/fork`
    Fork(Arc<str>, u32),
    /// `workflows/<name>/prompt`
    Prompt(Arc<str>),
}

/// A write handle on a control file.
#[derive(Debug, Clone)]
struct Ctl {
    target: CtlTarget,
    /// This handle's action was attempted (once per handle).
    fired: bool,
    /// Why it was refused, repeated to later writes and the close of this handle.
    failed: Option<FsError>,
    /// The prompt written so far.
    text: Vec<u8>,
    wrote: bool,
    /// The id of the thread this handle started or forked: what a read on it returns.
    answer: Option<Arc<[u8]>>,
    /// How much of `answer` reads have returned.
    delivered: usize,
}

/// A draft of `workflows/<name>/workflow.yaml`: a nameless scratch file and its writers.
#[derive(Debug, Clone, Copy)]
struct Draft {
    id: u64,
    writers: u32,
    /// The last save of this text was refused (the draft stays until saved or deleted).
    refused: bool,
}

#[derive(Debug, Clone)]
enum Open {
    /// Read-only view of generated bytes, fixed at open.
    Snapshot(Arc<[u8]>),
    /// Read-only view of immutable bytes, rendered at the first read (a warm open of a file
    /// whose pages the kernel keeps never reads).
    Immutable(Key),
    Scratch(u64),
    Draft(Arc<str>),
    /// A file under `runs/` read where it lies (a log grows while its step runs).
    Disk(PathBuf),
    /// `wait` of a thread: the answer is fixed by the first read that finds no step running.
    Wait(Arc<str>, Arc<OnceLock<Arc<[u8]>>>),
    /// A write handle on a control file.
    Control(Box<Ctl>),
}

/// The answer to a read: the bytes, or (for `wait`) a job that blocks until it has them, for
/// the adapter to run off the FUSE loop.
pub enum Reading {
    Data(Vec<u8>),
    Later(Box<dyn FnOnce() -> Result<Vec<u8>, FsError> + Send>),
}

#[derive(Debug, Clone)]
struct Handle {
    open: Open,
    write: bool,
}

#[derive(Debug)]
struct State {
    inodes: InodeTable,
    scratch: Scratches,
    drafts: HashMap<Arc<str>, Draft>,
    /// The text last saved through the mount for a name, shown while it is still current.
    saved: HashMap<Arc<str>, (Hash, Arc<[u8]>)>,
    handles: HashMap<u64, Handle>,
    next_fh: u64,
    error: Arc<[u8]>,
    error_time: SystemTime,
    /// Last change of `workflows/` made through the mount.
    workflows_changed: SystemTime,
    inval: Vec<Inval>,
}

fn is_dir(key: &Key) -> bool {
    matches!(
        key,
        Key::Root
            | Key::Workflows
            | Key::WfDir(_)
            | Key::WfVersions(_)
            | Key::WfThreads(_)
            | Key::Cas
            | Key::CasSchemas
            | Key::Threads
            | Key::Thread(_)
            | Key::Steps(_)
            | Key::StepDir(..)
    )
}

fn is_link(key: &Key) -> bool {
    matches!(
        key,
        Key::WfLatest(_)
            | Key::WfThreadLink(..)
            | Key::StepsLatest(_)
            | Key::ThreadFile(_, ThreadFile::Workflow)
    )
}

fn writable_dir(key: &Key) -> bool {
    matches!(key, Key::Workflows | Key::WfDir(_))
}

fn kind(key: &Key) -> Kind {
    if is_dir(key) {
        Kind::Dir
    } else if is_link(key) {
        Kind::Symlink
    } else {
        Kind::File
    }
}

fn parent_of(key: &Key) -> Key {
    match key {
        Key::WfDir(_) => Key::Workflows,
        Key::WfVersions(n) | Key::WfThreads(n) => Key::WfDir(n.clone()),
        Key::CasSchemas => Key::Cas,
        Key::Thread(_) => Key::Threads,
        Key::Steps(id) => Key::Thread(id.clone()),
        Key::StepDir(id, _) => Key::Steps(id.clone()),
        _ => Key::Root,
    }
}

fn check_name(name: &str) -> Result<(), FsError> {
    if name.len() > NAME_MAX {
        return Err(FsError::NameTooLong);
    }
    Ok(())
}

/// `<13 symbols><suffix>` → the hash.
fn hash_name(name: &str, suffix: &str) -> Option<Hash> {
    Hash::parse(name.strip_suffix(suffix)?).ok()
}

impl Tree {
    pub fn new(source: Source, opts: Options) -> Tree {
        let source = Arc::new(source);
        let warmer = Warmer::start(source.clone());
        let readme = Arc::from(readme::text(source.root(), opts.read_only).into_bytes());
        let now = SystemTime::now();
        let actions = Actions::new(source.shared_store(), source.index_generation());
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
                workflows_changed: now,
                inval: Vec::new(),
            }),
            source,
            warmer,
            opts,
            readme,
        }
    }

    pub fn options(&self) -> &Options {
        &self.opts
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
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// The background jobs started through control files.
    pub fn jobs(&self) -> &Arc<Jobs> {
        self.actions.jobs()
    }

    /// Kernel caches that this tree's own changes made stale, to be sent from another thread.
    pub fn take_invalidations(&self) -> Vec<Inval> {
        std::mem::take(&mut self.lock().inval)
    }

    // ---------------------------------------------------------------- reading

    /// Looks `name` up in directory `parent`; a found entry counts one kernel reference.
    pub fn lookup(&self, parent: Ino, name: &str) -> Result<Lookup, FsError> {
        check_name(name)?;
        let mut st = self.lock();
        let dir = Self::dir_key(&st, parent)?;
        let key = match name {
            "." => dir.clone(),
            ".." => parent_of(&dir),
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
        if let Key::ThreadFile(id, ThreadFile::Transcript) | Key::StepFile(id, ..) = &key {
            // Someone reads what this thread renders: render the rest of it, and the next
            // thread, on the other CPU meanwhile.
            self.warmer.thread(id);
        }
        Ok(Lookup::Found(attr))
    }

    /// The kernel dropped `n` references to `ino`.
    pub fn forget(&self, ino: Ino, n: u64) {
        self.lock().inodes.forget(ino, n);
    }

    pub fn getattr(&self, ino: Ino, fh: Option<u64>) -> Result<Attr, FsError> {
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
    pub fn access(&self, ino: Ino, mask: i32) -> Result<(), FsError> {
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
    /// (see `fuse-notes.md`, "no-open"), which only a mount where nothing is written can afford.
    pub fn open(&self, ino: Ino, flags: i32, caller: Caller) -> Result<Opened, FsError> {
        if self.opts.read_only {
            return Err(FsError::Unsupported);
        }
        let mut st = self.lock();
        self.open_locked(&mut st, ino, flags, caller)
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
            k if is_dir(k) => return Err(FsError::IsDir),
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
            Key::WfYaml(n) if write => {
                let id = self.ensure_draft(st, n, caller)?;
                if let Some(d) = st.drafts.get_mut(n) {
                    d.writers += 1;
                }
                if truncate {
                    st.scratch.truncate(id, 0)?;
                }
                (Open::Draft(n.clone()), Caching::Mutable)
            }
            Key::ThreadFile(id, f) if write && f.is_control() => {
                let t = self.thread_ref(id)?;
                let action = Self::action_of(*f).ok_or(FsError::NotFound)?;
                self.actions.check(id, t.archived.as_deref(), action)?;
                let ctl = Ctl::new(CtlTarget::Thread(id.clone(), *f));
                (Open::Control(Box::new(ctl)), Caching::Immutable)
            }
            Key::StepFile(id, i, StepFile::Fork) if write => {
                self.step_hash(id, *i)?;
                let ctl = Ctl::new(CtlTarget::Fork(id.clone(), *i));
                (Open::Control(Box::new(ctl)), Caching::Volatile)
            }
            Key::WfPrompt(n) if write => {
                self.current(n)?;
                let ctl = Ctl::new(CtlTarget::Prompt(n.clone()));
                (Open::Control(Box::new(ctl)), Caching::Volatile)
            }
            _ if write => return Err(FsError::ReadOnly("generated files cannot be written")),
            Key::ThreadFile(id, ThreadFile::Wait) => {
                let caching = self.attr_of(st, ino, &key)?.caching;
                (Open::Wait(id.clone(), Arc::new(OnceLock::new())), caching)
            }
            Key::ThreadFile(id, ThreadFile::Log) => {
                let caching = self.attr_of(st, ino, &key)?.caching;
                (Open::Disk(self.source.run_files(id).log()), caching)
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
    /// Safe to push from inside the OPEN callback (`fuse-notes.md` §1.4 forbids notifying an
    /// inode from a callback that holds an unanswered request for it): before its first open no
    /// file can be open on the inode, so no READ of it can be waiting on a page lock.
    pub fn prefill(&self, ino: Ino, fh: u64) -> Option<Arc<[u8]>> {
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
    pub fn read(&self, ino: Ino, fh: u64, offset: u64, size: u32) -> Result<Vec<u8>, FsError> {
        match self.read_or_wait(ino, fh, offset, size)? {
            Reading::Data(bytes) => Ok(bytes),
            Reading::Later(job) => job(),
        }
    }

    /// Reads from an open file; `fh` 0 (no-open mode) reads the generated content directly.
    /// A read of `wait` while a step runs comes back as [`Reading::Later`].
    pub fn read_or_wait(
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
            Some(Open::Disk(path)) => return Ok(Reading::Data(read_at(&path, offset, size)?)),
            Some(Open::Wait(id, answer)) => {
                if let Some(bytes) = answer.get() {
                    return Ok(Reading::Data(slice(bytes)));
                }
                if !self.actions.busy(&id) {
                    let files = self.source.run_files(&id);
                    let bytes = answer.get_or_init(|| actions::last_outcome(&files));
                    return Ok(Reading::Data(slice(bytes)));
                }
                let wait = self.actions.waiter(&id);
                return Ok(Reading::Later(Box::new(move || {
                    let bytes = answer.get_or_init(wait);
                    Ok(slice(bytes))
                })));
            }
            Some(Open::Control(_)) => {
                return Ok(Reading::Data(self.control_read(&mut st, fh, size)?));
            }
            None => {
                if let Ok(Key::ThreadFile(id, ThreadFile::Log)) = Self::key_of(&st, ino) {
                    let path = self.source.run_files(&id).log();
                    return Ok(Reading::Data(read_at(&path, offset, size)?));
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
            Some(Open::Disk(_) | Open::Wait(..) | Open::Control(_)) => {
                return Err(FsError::BadHandle);
            }
            None => {
                let key = Self::key_of(&st, ino)?;
                self.content(&st, &key)?
            }
        };
        Ok(Reading::Data(slice(&bytes)))
    }

    /// The target of a symbolic link.
    pub fn readlink(&self, ino: Ino) -> Result<String, FsError> {
        let st = self.lock();
        let key = Self::key_of(&st, ino)?;
        self.link_target(&key)
    }

    /// Opening a directory is not a request this tree answers, on any mount: the kernel then
    /// stops sending `opendir`/`releasedir` for the connection, reads listings without a
    /// handle, and caches each listing (`FOPEN_CACHE_DIR`) until the directory's mtime changes
    /// (checked at every `readdir` from offset 0; see `fuse-notes.md` §3). That is exact here
    /// because every directory's mtime moves with its listing (`views.rs`, "Architecture
    /// Invariant"), and the attributes of a directory that can change are never cached.
    pub fn opendir(&self, ino: Ino) -> Result<Opened, FsError> {
        let _ = ino;
        Err(FsError::Unsupported)
    }

    /// One page of a directory from `offset` (0 = start), `.` and `..` first. Directories are
    /// never opened (see [`Tree::opendir`]): each page is cut from the listing as it is now.
    pub fn readdir(&self, ino: Ino, offset: u64) -> Result<Vec<DirEntry>, FsError> {
        let mut st = self.lock();
        let key = Self::dir_key(&st, ino)?;
        let listing = self.listing(&st, &key)?;
        let parent = parent_of(&key);
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
                    (st.inodes.ino(key), self::kind(key), name.clone())
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

    // ---------------------------------------------------------------- writing

    /// Creates (or, without `O_EXCL`, opens) `name` in a writable directory.
    pub fn create(
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
        if !writable_dir(&dir) {
            return Err(FsError::ReadOnly(
                "generated directory; create files in workflows/",
            ));
        }
        let key = match &dir {
            Key::WfDir(n) if name == "workflow.yaml" => {
                let id = st.scratch.create(None, 0o644, caller.uid, caller.gid)?;
                st.drafts.insert(
                    n.clone(),
                    Draft {
                        id,
                        writers: 0,
                        refused: false,
                    },
                );
                Key::WfYaml(n.clone())
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

    pub fn write(&self, fh: u64, offset: u64, data: &[u8]) -> Result<u32, FsError> {
        let mut st = self.lock();
        let st = &mut *st;
        let h = st.handles.get_mut(&fh).ok_or(FsError::BadHandle)?;
        if !h.write {
            return Err(FsError::BadHandle);
        }
        if let Open::Control(_) = &h.open {
            return self.control_write(st, fh, offset, data);
        }
        let id = match &h.open {
            Open::Scratch(id) => *id,
            Open::Draft(n) => st.drafts.get(n).ok_or(FsError::BadHandle)?.id,
            _ => return Err(FsError::BadHandle),
        };
        st.scratch.write(id, offset, data)
    }

    /// `close()` of a descriptor: a meaningful file changed since its last save is registered
    /// here, so the closing program learns of a refusal (EINVAL) and, once `close` returned,
    /// everyone sees the new version. The kernel sends RELEASE asynchronously, after `close`
    /// has returned, so registering only there would let a `cp … && uwf workflow history` race
    /// it. A flush with nothing new (several per open with `dup`, or `echo > f` flushing between
    /// its truncate and its write) registers nothing.
    pub fn flush(&self, fh: u64) -> Result<(), FsError> {
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
                CtlTarget::Prompt(_) => self.start_prompt(&mut st, fh).map(drop),
                // The change that fired reported its outcome; repeat a refusal at close.
                _ => ctl.failed.map_or(Ok(()), Err),
            },
            _ => Ok(()),
        }
    }

    /// The last reference to an open file went away. A draft whose last writer leaves is saved
    /// if it still holds changes no flush saw (an empty text is refused here), then dropped
    /// unless its text was refused.
    pub fn release(&self, fh: u64) {
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
                    CtlTarget::Thread(id, f) => Key::ThreadFile(id.clone(), *f),
                    CtlTarget::Fork(id, i) => Key::StepFile(id.clone(), *i, StepFile::Fork),
                    CtlTarget::Prompt(n) => Key::WfPrompt(n.clone()),
                };
                if let Some(ino) = st.inodes.existing(&key) {
                    st.inval.push(Inval::Inode(ino));
                }
                if let CtlTarget::Prompt(_) = ctl.target
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

    pub fn fsync(&self, fh: u64) -> Result<(), FsError> {
        // Scratch data lives in memory and saves are durable when they return: nothing to do.
        let _ = fh;
        Ok(())
    }

    pub fn setattr(
        &self,
        ino: Ino,
        fh: Option<u64>,
        set: SetAttr,
        caller: Caller,
    ) -> Result<Attr, FsError> {
        let mut st = self.lock();
        let key = match (Self::key_of(&st, ino), fh.and_then(|f| st.handles.get(&f))) {
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
            return self.attr_of(&st, ino, &key);
        }
        if self.opts.read_only {
            return Err(FsError::ReadOnlyMount);
        }
        let before = self.attr_of(&st, ino, &key)?;
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
            Key::WfYaml(n) => {
                if !same_mode {
                    return Err(FsError::NotPermitted("the mode of workflow.yaml is fixed"));
                }
                if let Some(size) = set.size {
                    let open_writer = st.drafts.get(n).is_some_and(|d| d.writers > 0);
                    let id = self.ensure_draft(&mut st, n, caller)?;
                    st.scratch.truncate(id, size)?;
                    if !open_writer {
                        // `truncate(path)` with nothing open: the change is a save by itself.
                        self.finish_draft(&mut st, n)?;
                    }
                }
            }
            k if is_dir(k) => {
                if set.size.is_some() {
                    return Err(FsError::IsDir);
                }
                if !same_mode {
                    return Err(FsError::NotPermitted("directory modes are fixed"));
                }
            }
            k if control_handles::target_of(k).is_some() => {
                if !same_mode {
                    return Err(FsError::NotPermitted("control files keep their mode"));
                }
                self.control_setattr(&mut st, k, fh, &set)?;
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
        self.attr_of(&st, ino, &key)
    }

    pub fn unlink(&self, parent: Ino, name: &str) -> Result<(), FsError> {
        check_name(name)?;
        if self.opts.read_only {
            return Err(FsError::ReadOnlyMount);
        }
        let mut st = self.lock();
        let dir = Self::dir_key(&st, parent)?;
        let key = self.child(&st, &dir, name)?.ok_or(FsError::NotFound)?;
        if !writable_dir(&dir) {
            return Err(FsError::ReadOnly("generated directory"));
        }
        match &key {
            Key::Scratch(id) => {
                st.scratch.unlink(*id);
                self.collect(&mut st, *id);
            }
            Key::WfYaml(n) => {
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
            k if is_dir(k) => return Err(FsError::IsDir),
            _ => return Err(FsError::NotPermitted("generated files cannot be deleted")),
        }
        st.workflows_changed = SystemTime::now();
        Ok(())
    }

    /// Renames within the writable directories. Renaming onto a meaningful name saves the text
    /// first; if the engine refuses it the rename does not happen (EINVAL) and the text stays
    /// where it was.
    pub fn rename(
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
        if !writable_dir(&src_dir) || !writable_dir(&dst_dir) {
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
            Key::Scratch(_) | Key::WfYaml(_) => {}
            k if is_dir(k) => return Err(FsError::NotPermitted("directories cannot be renamed")),
            _ => return Err(FsError::NotPermitted("generated files cannot be renamed")),
        }
        match &dst {
            None | Some(Key::Scratch(_)) | Some(Key::WfYaml(_)) => {}
            Some(k) if is_dir(k) => return Err(FsError::IsDir),
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
            Key::WfYaml(n) => self.yaml_text(&st, n)?.0,
            _ => return Err(FsError::NotFound),
        };
        let src_path = match &src {
            Key::WfYaml(n) => format!("workflows/{n}/workflow.yaml"),
            _ => place_path(&src_dir, name),
        };
        let to_view = match &dst_dir {
            Key::WfDir(n) if new_name == "workflow.yaml" => Some(n.clone()),
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
                    let kept = format!(
                        "Your text is still in {src_path}: the rename did not happen. Fix the \
                         text and rename again."
                    );
                    self.record_error(&mut st, &src_path, &reason, &kept);
                    return Err(e);
                }
            },
            None => None,
        };
        let src_ino = st.inodes.ino(&src);
        // Take the source's data out of its old role.
        let id = match &src {
            Key::Scratch(id) => *id,
            Key::WfYaml(n) => match st.drafts.remove(n) {
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
            Some(Key::WfYaml(n)) => {
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
                st.inodes.rebind(src_ino, Key::WfYaml(n.clone()));
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
        if let Key::WfYaml(n) = &src {
            self.invalidate_workflow(&mut st, n);
        }
        if let Some(saved) = saved {
            self.saved_ok(&mut st, saved, text);
        }
        st.workflows_changed = SystemTime::now();
        Ok(())
    }

    pub fn mkdir(&self, parent: Ino, name: &str) -> Result<Attr, FsError> {
        self.refuse_new(
            parent,
            name,
            "directories appear when a workflow is registered",
        )
    }

    pub fn rmdir(&self, parent: Ino, name: &str) -> Result<(), FsError> {
        check_name(name)?;
        if self.opts.read_only {
            return Err(FsError::ReadOnlyMount);
        }
        let st = self.lock();
        let dir = Self::dir_key(&st, parent)?;
        match self.child(&st, &dir, name)? {
            None => Err(FsError::NotFound),
            Some(k) if !is_dir(&k) => Err(FsError::NotDir),
            Some(_) => Err(FsError::NotPermitted(
                "directories are generated; `uwf workflow rm` removes a workflow",
            )),
        }
    }

    /// Symlinks, hard links and device nodes do not exist here (emacs then locks with a file).
    pub fn link_like(&self, parent: Ino, name: &str) -> Result<Attr, FsError> {
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

    /// The bytes the scratch files hold (for tests and the memory bound).
    pub fn scratch_bytes(&self) -> u64 {
        self.lock().scratch.bytes()
    }

    /// The root inode (for completeness of the API).
    pub fn root(&self) -> Ino {
        ROOT
    }
}
