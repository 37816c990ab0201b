//! Translations between the tree's answers and fuser's types: TTLs and open flags from
//! [`Caching`], attributes, errno, and the small reply helpers every callback uses.
//!
//! Architecture Invariant: the TTL and open-flag rules of the caching classes live here and
//! nowhere else, so one [`Caching`] value always means the same thing to the kernel.

use std::ffi::OsStr;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileType, FopenFlags, Generation, INodeNo, ReplyEmpty, ReplyEntry, Request,
};

use crate::fs::attr::{Attr, Caching, Caller, Kind, Opened};
use crate::fs::error::FsError;

/// How long the kernel trusts immutable entries (nodes, versions).
pub(super) const LONG_TTL: Duration = Duration::from_secs(3600);
/// How long the kernel trusts everything that can change: a change made
/// elsewhere shows within a second.
pub(super) const SHORT_TTL: Duration = Duration::from_secs(1);

pub(super) fn ttl(caching: Caching) -> Duration {
    match caching {
        Caching::Immutable => LONG_TTL,
        Caching::Mutable | Caching::Stamped | Caching::Volatile => SHORT_TTL,
        // `wait`: its size is only known once no step runs; ask every time.
        Caching::Blocking => Duration::ZERO,
    }
}

/// How long the kernel trusts an entry's attributes.
///
/// A directory whose listing can change is the exception to [`ttl`]: the kernel keeps every
/// listing (directories are opened with FOPEN_CACHE_DIR) and, at each `readdir` from offset 0,
/// keeps using it unless the directory's mtime changed — but it refreshes that mtime only once
/// the attributes expired. With no attribute caching every `ls` asks for the mtime (one GETATTR
/// instead of a full listing), so a listing is as fresh as the mtime the tree reports, also
/// right after a change made through the mount (a thread started by `prompt`, a step).
///
/// A volatile file's attributes are not cached either: its size changes with its content
/// (an active thread's `status` after a step), and `stat` must agree with `cat` at once, not
/// a second later.
pub(super) fn attr_ttl(a: &Attr) -> Duration {
    match (a.kind, a.caching) {
        (Kind::Dir, Caching::Immutable) => LONG_TTL,
        // `threads/<id>/forks/`: changes only when someone forks; the mount's own forks
        // invalidate it, the CLI's show within the second.
        (Kind::Dir, Caching::Stamped) => SHORT_TTL,
        (Kind::Dir, _) | (_, Caching::Volatile) => Duration::ZERO,
        (_, caching) => ttl(caching),
    }
}

pub(super) fn file_type(kind: Kind) -> FileType {
    match kind {
        Kind::Dir => FileType::Directory,
        Kind::File => FileType::RegularFile,
        Kind::Symlink => FileType::Symlink,
    }
}

pub(super) fn errno(e: &FsError) -> Errno {
    Errno::from_i32(e.errno())
}

pub(super) fn file_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.size.div_ceil(512),
        atime: a.atime,
        mtime: a.mtime,
        ctime: a.ctime,
        crtime: a.mtime,
        kind: file_type(a.kind),
        perm: a.perm,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

/// A negative entry (inode 0): the kernel caches "no such name" for the entry's TTL.
pub(super) fn negative() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: SystemTime::UNIX_EPOCH,
        mtime: SystemTime::UNIX_EPOCH,
        ctime: SystemTime::UNIX_EPOCH,
        crtime: SystemTime::UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

pub(super) fn open_flags(o: &Opened) -> FopenFlags {
    if o.writable {
        // A prompt or fork handle answers a read with the new thread's id, at whatever offset
        // the writes left the descriptor: only direct I/O brings such a read to us.
        return match o.caching {
            Caching::Volatile => FopenFlags::FOPEN_DIRECT_IO,
            _ => FopenFlags::empty(),
        };
    }
    // A read-only handle's close has nothing to check or save: skip FLUSH round trips.
    let flags = FopenFlags::FOPEN_NOFLUSH;
    match o.caching {
        // Stamped content changes its mtime or size with every change, and
        // FUSE_AUTO_INVAL_DATA drops the pages when a refreshed attribute differs.
        Caching::Immutable | Caching::Stamped => flags | FopenFlags::FOPEN_KEEP_CACHE,
        // Pages are dropped at open, so a changed view is read fresh.
        Caching::Mutable => flags,
        Caching::Volatile => flags | FopenFlags::FOPEN_DIRECT_IO,
        // A read that blocks: direct I/O, so it reaches us whatever size `stat` said, and the
        // reader waits in the kernel's request wait, which our EINTR reply ends when the
        // reader has a signal to handle (see `signal_pending`). In page-cache mode it would
        // wait for a page lock, which only a fatal signal ends.
        Caching::Blocking => flags | FopenFlags::FOPEN_DIRECT_IO,
    }
}

pub(super) fn caller(req: &Request) -> Caller {
    Caller {
        uid: req.uid(),
        gid: req.gid(),
    }
}

pub(super) fn name_str(name: &OsStr) -> Result<&str, FsError> {
    // Every name the tree can hold is UTF-8; anything else can only be missing or refused.
    name.to_str().ok_or(FsError::NotFound)
}

/// Answers an entry request: the attributes with their TTLs, or the errno.
pub(super) fn reply_entry(reply: ReplyEntry, result: Result<Attr, FsError>) {
    match result {
        Ok(a) => found(reply, &a),
        Err(e) => reply.error(errno(&e)),
    }
}

/// Answers a request that returns nothing but success or an errno.
pub(super) fn reply_empty(reply: ReplyEmpty, result: Result<(), FsError>) {
    match result {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(&e)),
    }
}

/// A found entry: the name for [`ttl`], the attributes for [`attr_ttl`].
pub(super) fn found(reply: ReplyEntry, a: &Attr) {
    reply.entry_with_ttls(&attr_ttl(a), &ttl(a.caching), &file_attr(a), Generation(0))
}

/// Runs a callback body; a panic inside drops its reply, which fuser answers with EIO.
pub(super) fn guarded(body: impl FnOnce()) {
    let _ = catch_unwind(AssertUnwindSafe(body));
}

/// Whether the thread `pid` (the caller of a request) has a signal pending that it does not
/// block, so a read blocked for it should end with EINTR.
///
/// fuser answers the kernel's `FUSE_INTERRUPT` with ENOSYS and passes it to no callback, after
/// which the kernel sends none for the connection and waits for our reply whatever the signal
/// (in `request_wait_answer`: killable only once the request is with the daemon). The signal
/// stays pending on the blocked caller meanwhile, which `/proc/<pid>/status` shows (`SigPnd` for
/// the thread, `ShdPnd` for its process; `SigBlk` what it blocks; ignored signals are never
/// queued). A caller that is gone has nobody to wait for: also true.
pub(super) fn signal_pending(pid: u32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return true;
    };
    pending_unblocked(&status)
}

fn pending_unblocked(status: &str) -> bool {
    let mask = |field: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0)
    };
    (mask("SigPnd:") | mask("ShdPnd:")) & !mask("SigBlk:") != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pending_signal_counts_unless_blocked() {
        let status = |pnd: &str, shd: &str, blk: &str| {
            format!("Name:\tcat\nSigQ:\t0/1\nSigPnd:\t{pnd}\nShdPnd:\t{shd}\nSigBlk:\t{blk}\n")
        };
        let none = "0000000000000000";
        assert!(!pending_unblocked(&status(none, none, none)));
        // SIGALRM (14) sent to the process, as `read -t` and `signal.alarm` do.
        assert!(pending_unblocked(&status(none, "0000000000002000", none)));
        // SIGINT (2) sent to the thread, but blocked.
        assert!(!pending_unblocked(&status(
            "0000000000000002",
            none,
            "0000000000000002"
        )));
        assert!(!pending_unblocked("garbage"));
        assert!(signal_pending(u32::MAX), "a caller that is gone");
        assert!(
            !signal_pending(std::process::id()),
            "this test has nothing pending"
        );
    }
}
