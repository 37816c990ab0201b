//! What exists where, at the top: the root directory and `README.md`, scratch files, and the
//! dispatch of `child`, `listing`, `attr_of`, `content` and `link_target` to the subtree files
//! (`workflows.rs`, `threads.rs`, `cas.rs`), one match per request.
//!
//! Generated entries are computed on every call from [`crate::fs::views::Source`] (cheap: it
//! caches), scratch files and drafts from the state, so what the kernel is told always reflects
//! the store now.
//!
//! Architecture Invariant: an entry is listed by [`Tree::listing`] exactly when [`Tree::child`]
//! finds it, and [`Tree::attr_of`]'s size is the length of [`Tree::content`].

use std::sync::Arc;
use std::time::SystemTime;

use super::Tree;
use super::state::State;
use crate::fs::attr::{Attr, Caching, NAME_MAX, Owner};
use crate::fs::error::FsError;
use crate::fs::inode::{CasKey, Ino, Key, ThreadKey, WfKey};
use crate::fs::views::Listing;

/// The root's entries, in listing order.
fn root_entries() -> [(&'static str, Key); 4] {
    [
        ("README.md", Key::Readme),
        ("workflows", Key::Workflows(WfKey::Root)),
        ("threads", Key::Threads(ThreadKey::Root)),
        ("cas", Key::Cas(CasKey::Root)),
    ]
}

impl Tree {
    /// What `ino` stands for; `NotFound` for an inode that is gone or unknown.
    pub(super) fn key_of(st: &State, ino: Ino) -> Result<Key, FsError> {
        match st.inodes.key(ino) {
            Some(Key::Gone) | None => Err(FsError::NotFound),
            Some(k) => Ok(k.clone()),
        }
    }

    /// What directory `ino` stands for; `NotDir` when it is no directory.
    pub(super) fn dir_key(st: &State, ino: Ino) -> Result<Key, FsError> {
        let key = Self::key_of(st, ino)?;
        if !key.is_dir() {
            return Err(FsError::NotDir);
        }
        Ok(key)
    }

    /// The entry called `name` in `dir`, if there is one.
    pub(super) fn child(&self, st: &State, dir: &Key, name: &str) -> Result<Option<Key>, FsError> {
        match dir {
            Key::Root => Ok(root_entries()
                .into_iter()
                .find(|(n, _)| *n == name)
                .map(|(_, key)| key)),
            Key::Workflows(d) => self.wf_child(st, d, name),
            Key::Threads(d) => self.thread_child(d, name),
            Key::Cas(d) => self.cas_child(d, name),
            Key::Gone => Err(FsError::NotFound),
            Key::Readme | Key::Scratch(_) => Err(FsError::NotDir),
        }
    }

    /// Whether a name missing from `dir` can never appear there.
    pub(super) fn never_appears(&self, dir: &Key, name: &str) -> bool {
        match dir {
            Key::Root => true,
            Key::Workflows(d) => Self::wf_never_appears(d, name),
            Key::Threads(d) => self.thread_never_appears(d, name),
            Key::Cas(d) => Self::cas_never_appears(d, name),
            Key::Readme | Key::Scratch(_) | Key::Gone => false,
        }
    }

    /// The bytes of a generated file or a scratch file.
    pub(super) fn content(&self, st: &State, key: &Key) -> Result<Arc<[u8]>, FsError> {
        if key.is_dir() {
            return Err(FsError::IsDir);
        }
        match key {
            Key::Readme => Ok(self.readme.clone()),
            Key::Workflows(k) => self.wf_content(st, k),
            Key::Threads(k) => self.thread_content(k),
            Key::Cas(k) => self.cas_content(k),
            Key::Scratch(id) => Ok(Arc::from(
                st.scratch
                    .get(*id)
                    .ok_or(FsError::NotFound)?
                    .data
                    .as_slice(),
            )),
            Key::Root | Key::Gone => Err(FsError::NotFound),
        }
    }

    /// The attributes of `key`, which `ino` stands for. On a `--read-only` mount nothing is
    /// writable, and what would need direct I/O gets a fresh mtime at every refresh instead.
    pub(super) fn attr_of(&self, st: &State, ino: Ino, key: &Key) -> Result<Attr, FsError> {
        let t0 = self.source.mounted_at();
        let owner = self.owner();
        let mut attr = match key {
            // Its four entries never change.
            Key::Root => Attr::dir(ino, owner, 0o555, t0, Caching::Immutable),
            Key::Readme => {
                let size = self.readme.len() as u64;
                Attr::file(ino, owner, size, 0o444, t0, Caching::Immutable)
            }
            Key::Workflows(k) => self.wf_attr(st, ino, k)?,
            Key::Threads(k) => self.thread_attr(ino, k)?,
            Key::Cas(k) => self.cas_attr(ino, k)?,
            Key::Scratch(id) => {
                let f = st.scratch.get(*id).ok_or(FsError::NotFound)?;
                let owner = Owner {
                    uid: f.uid,
                    gid: f.gid,
                };
                let size = f.data.len() as u64;
                Attr {
                    // An unlinked scratch file still open has no name left.
                    nlink: u32::from(f.place.is_some()),
                    atime: f.atime,
                    ctime: f.ctime,
                    ..Attr::file(ino, owner, size, f.mode & 0o7777, f.mtime, Caching::Mutable)
                }
            }
            Key::Gone => return Err(FsError::NotFound),
        };
        if self.opts.read_only {
            attr.perm &= !0o222;
            if matches!(attr.caching, Caching::Volatile | Caching::Blocking) {
                // No opens here, so no direct I/O: a new mtime at every refresh (at most once a
                // second, the attribute TTL) makes the kernel drop the pages and read again.
                attr.mtime = SystemTime::now();
                attr.ctime = attr.mtime;
                attr.caching = Caching::Volatile;
            }
        }
        Ok(attr)
    }

    /// The entries of a directory, without `.` and `..`.
    pub(super) fn listing(&self, st: &State, dir: &Key) -> Result<Arc<Listing>, FsError> {
        if let Key::Threads(ThreadKey::Root) = dir {
            return self.threads_root_listing();
        }
        let out = match dir {
            Key::Root => root_entries()
                .into_iter()
                .map(|(name, key)| (name.to_owned(), key))
                .collect(),
            Key::Workflows(d) => self.wf_listing(st, d)?,
            Key::Threads(d) => self.thread_listing(d)?,
            Key::Cas(d) => return self.cas_listing(d),
            Key::Gone => return Err(FsError::NotFound),
            Key::Readme | Key::Scratch(_) => return Err(FsError::NotDir),
        };
        Ok(Arc::new(representable(dir, out)))
    }

    /// The listing of `threads/`, built once per version of the thread index (its mtime).
    fn threads_root_listing(&self) -> Result<Arc<Listing>, FsError> {
        let mtime = self.source.threads_mtime()?;
        let mut cached = self
            .threads_listing
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some((at, listing)) = cached.as_ref()
            && *at == mtime
        {
            return Ok(listing.clone());
        }
        let dir = Key::Threads(ThreadKey::Root);
        let listing = Arc::new(representable(&dir, self.thread_listing(&ThreadKey::Root)?));
        *cached = Some((mtime, listing.clone()));
        Ok(listing)
    }

    /// The target of a symbolic link.
    pub(super) fn link_target(&self, key: &Key) -> Result<String, FsError> {
        match key {
            Key::Workflows(k) => self.wf_link_target(k),
            Key::Threads(k) => self.thread_link_target(k),
            _ => Err(FsError::Invalid("not a symbolic link")),
        }
    }
}

/// The entries of a listing that a directory can hold: a name the kernel would refuse (longer
/// than 255 bytes, empty, or holding `/` or NUL — a workflow registered by hand under such a
/// name) is left out, so the rest of the directory still lists (with such a name in a reply
/// the kernel fails the whole `readdir` with EIO). Each one left out is logged under
/// `UWF_FS_TRACE=1`.
fn representable(dir: &Key, mut listing: Listing) -> Listing {
    listing.retain(|(name, _)| {
        let ok = !name.is_empty() && name.len() <= NAME_MAX && !name.contains(['/', '\0']);
        if !ok && tracing() {
            eprintln!("SKIP {dir:?} {name:?}: not a valid file name, left out of the listing");
        }
        ok
    });
    listing
}

/// Whether `UWF_FS_TRACE=1` asks for every request to be logged (read once).
fn tracing() -> bool {
    static TRACE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TRACE.get_or_init(|| std::env::var_os("UWF_FS_TRACE").is_some_and(|v| v == "1"))
}
