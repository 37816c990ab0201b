//! The plain types of the tree's requests and answers: attributes, lookups, opened handles,
//! directory entries, reads that may block, `setattr` changes, `rename` flags and cache
//! invalidations.
//!
//! [`super::tree::Tree`] answers in these types and [`super::fuse`] translates them into fuser's;
//! nothing here knows FUSE.
//!
//! Architecture Invariant: every attribute is built by [`Attr::dir`], [`Attr::file`] or
//! [`Attr::symlink`], so a kind always comes with its link count (2 for a directory, 1
//! otherwise) and an entry's three times agree unless the caller says otherwise (scratch files,
//! which keep their own).

use std::time::SystemTime;

use super::error::FsError;
use super::inode::Ino;

/// Longest file name, in bytes.
pub(crate) const NAME_MAX: usize = 255;

/// Who is asking.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caller {
    pub uid: u32,
    pub gid: u32,
}

/// Who owns an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Owner {
    pub uid: u32,
    pub gid: u32,
}

/// Refuses names longer than [`NAME_MAX`] (ENAMETOOLONG).
pub(crate) fn check_name(name: &str) -> Result<(), FsError> {
    if name.len() > NAME_MAX {
        return Err(FsError::NameTooLong);
    }
    Ok(())
}

/// Directory, regular file or symbolic link (the tree has nothing else).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Dir,
    File,
    Symlink,
}

/// How long the kernel may trust what it was told about an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Caching {
    /// Never changes while it exists (nodes, versions): cache for long, keep pages across opens.
    Immutable,
    /// Changes when the store or registry changes: trust for at most a second.
    Mutable,
    /// Changes at most once a second as far as the kernel can tell, and every change moves its
    /// mtime or size (files under `runs/`, `forks/` directories): trust for a second, keep
    /// pages across opens (the kernel drops them when a refreshed mtime or size differs).
    Stamped,
    /// Changes without notice and must be read fresh every time (`error` files, an active
    /// thread's `status`): direct I/O.
    Volatile,
    /// `wait`: a read may block until a step finishes. Direct I/O (a blocked reader can be
    /// interrupted by any signal it catches), attributes never cached.
    Blocking,
}

/// What `stat` reports.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Attr {
    pub ino: Ino,
    pub kind: Kind,
    pub size: u64,
    pub perm: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub atime: SystemTime,
    pub mtime: SystemTime,
    pub ctime: SystemTime,
    pub caching: Caching,
}

impl Attr {
    /// A directory: size 0, two links, all three times `time`.
    pub(crate) fn dir(
        ino: Ino,
        owner: Owner,
        perm: u16,
        time: SystemTime,
        caching: Caching,
    ) -> Attr {
        Attr::new(ino, Kind::Dir, owner, 0, perm, time, caching)
    }

    /// A regular file of `size` bytes: one link, all three times `time`.
    pub(crate) fn file(
        ino: Ino,
        owner: Owner,
        size: u64,
        perm: u16,
        time: SystemTime,
        caching: Caching,
    ) -> Attr {
        Attr::new(ino, Kind::File, owner, size, perm, time, caching)
    }

    /// A symbolic link whose target is `size` bytes long: mode 0777, one link.
    pub(crate) fn symlink(
        ino: Ino,
        owner: Owner,
        size: u64,
        time: SystemTime,
        caching: Caching,
    ) -> Attr {
        Attr::new(ino, Kind::Symlink, owner, size, 0o777, time, caching)
    }

    fn new(
        ino: Ino,
        kind: Kind,
        owner: Owner,
        size: u64,
        perm: u16,
        time: SystemTime,
        caching: Caching,
    ) -> Attr {
        Attr {
            ino,
            kind,
            size,
            perm,
            nlink: if kind == Kind::Dir { 2 } else { 1 },
            uid: owner.uid,
            gid: owner.gid,
            atime: time,
            mtime: time,
            ctime: time,
            caching,
        }
    }
}

/// The answer to a lookup.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Lookup {
    Found(Attr),
    /// No such name; `permanent` when the name can never appear there (cache the miss long).
    Missing {
        permanent: bool,
    },
}

/// An opened file or directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Opened {
    pub fh: u64,
    pub caching: Caching,
    pub writable: bool,
}

/// One directory entry of a `readdir` page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DirEntry {
    pub ino: Ino,
    /// The offset to continue from after this entry.
    pub offset: u64,
    pub kind: Kind,
    pub name: String,
}

/// A time to set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimeSet {
    Now,
    At(SystemTime),
}

impl TimeSet {
    /// The time this stands for, `Now` read at the call.
    pub(crate) fn resolve(self) -> SystemTime {
        match self {
            TimeSet::Now => SystemTime::now(),
            TimeSet::At(t) => t,
        }
    }
}

/// The changes of a `setattr`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeSet>,
    pub mtime: Option<TimeSet>,
}

impl SetAttr {
    /// Whether nothing is to change (a `setattr` that only asks for the attributes).
    pub(crate) fn is_empty(&self) -> bool {
        self.mode.is_none()
            && self.uid.is_none()
            && self.gid.is_none()
            && self.size.is_none()
            && self.atime.is_none()
            && self.mtime.is_none()
    }
}

/// The flags of a `rename` (`renameat2(2)`), as the kernel sent them.
///
/// Only `RENAME_NOREPLACE` is honoured; any other bit (`RENAME_EXCHANGE`, `RENAME_WHITEOUT`, or
/// one this build does not know) makes the rename fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct RenameFlags(u32);

impl RenameFlags {
    /// No flags: a plain `rename(2)`.
    #[cfg(test)]
    pub(crate) const NONE: RenameFlags = RenameFlags(0);
    /// `RENAME_NOREPLACE`: fail with EEXIST instead of replacing the destination.
    #[cfg(test)]
    pub(crate) const NOREPLACE: RenameFlags = RenameFlags(libc::RENAME_NOREPLACE);
    /// `RENAME_EXCHANGE`: swap the two names (refused here).
    #[cfg(test)]
    pub(crate) const EXCHANGE: RenameFlags = RenameFlags(libc::RENAME_EXCHANGE);

    /// The flags of these `renameat2` bits.
    pub(crate) fn from_bits(bits: u32) -> RenameFlags {
        RenameFlags(bits)
    }

    /// Whether an existing destination makes the rename fail.
    pub(crate) fn noreplace(self) -> bool {
        self.0 & libc::RENAME_NOREPLACE != 0
    }

    /// Whether any flag but `RENAME_NOREPLACE` is set.
    pub(crate) fn unsupported(self) -> bool {
        self.0 & !libc::RENAME_NOREPLACE != 0
    }
}

/// Whether the program whose request is waiting has a signal to handle (asked again and again
/// while a read blocks; a blocked read then ends with EINTR).
pub(crate) type Interrupted<'a> = &'a dyn Fn() -> bool;

/// A read that blocks until it has its bytes, or until [`Interrupted`] says so
/// ([`FsError::Interrupted`]).
pub(crate) type Blocking = Box<dyn FnOnce(Interrupted<'_>) -> Result<Vec<u8>, FsError> + Send>;

/// The answer to a read: the bytes, or (for `wait`) a job that blocks until it has them, for
/// the adapter to run off the FUSE loop.
pub(crate) enum Reading {
    Data(Vec<u8>),
    Later(Blocking),
}

/// Work that a request's answer waits for, for the adapter to run off the FUSE loop: a `kill`
/// returns only once the thread is killed.
pub(crate) type Finish = Box<dyn FnOnce() -> Result<(), FsError> + Send>;

/// What `statfs` reports: the numbers of the filesystem holding the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct StatFs {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub frsize: u32,
}

/// Something the kernel has cached that is now wrong (sent by the adapter from another thread).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Inval {
    /// Attributes and pages of an inode.
    Inode(Ino),
    /// A name in a directory (also clears a cached "no such file").
    Entry(Ino, String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rename_flags_honour_only_noreplace() {
        assert!(!RenameFlags::NONE.noreplace() && !RenameFlags::NONE.unsupported());
        assert!(RenameFlags::NOREPLACE.noreplace() && !RenameFlags::NOREPLACE.unsupported());
        assert!(RenameFlags::EXCHANGE.unsupported());
        let both = RenameFlags::from_bits(libc::RENAME_NOREPLACE | libc::RENAME_WHITEOUT);
        assert!(both.noreplace() && both.unsupported());
    }
}
