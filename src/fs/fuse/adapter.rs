//! The `fuser::Filesystem` over a [`Tree`]: one callback per request, each converting its
//! arguments, calling one [`Tree`] method and answering with the converted result.
//!
//! Architecture Invariant: every callback body runs under [`guarded`] (`catch_unwind`), and
//! every one that can change something hands the tree's pending invalidations to the notifier
//! thread before replying; none blocks the loop (`wait` replies from its own thread).

use std::ffi::OsStr;
use std::io;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::{Arc, OnceLock, mpsc};
use std::time::SystemTime;

use fuser::{
    AccessFlags, BsdFileFlags, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    IoctlFlags, KernelConfig, LockOwner, Notifier, OpenFlags, PollEvents, PollFlags, PollNotifier,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry,
    ReplyIoctl, ReplyOpen, ReplyPoll, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow,
    WriteFlags,
};

use super::replies::{
    LONG_TTL, SHORT_TTL, attr_ttl, caller, errno, file_attr, file_type, found, guarded, name_str,
    negative, open_flags, reply_empty, reply_entry, signal_pending, ttl,
};
use crate::fs::attr::{Inval, Lookup, NAME_MAX, Reading, RenameFlags as Flags, SetAttr, TimeSet};
use crate::fs::error::FsError;
use crate::fs::tree::Tree;

/// The `fuser::Filesystem` over a [`Tree`].
pub(super) struct Adapter {
    pub(super) tree: Tree,
    pub(super) invalidations: mpsc::Sender<Inval>,
    /// Set once the session exists (the adapter is built before it): fills page caches.
    pub(super) notifier: Arc<OnceLock<Notifier>>,
    /// `UWF_FS_TRACE=1`: log every request and its outcome to stderr (debugging op sequences).
    pub(super) trace: bool,
}

macro_rules! trace {
    ($self:ident, $($arg:tt)*) => {
        if $self.trace {
            eprintln!($($arg)*);
        }
    };
}

impl Adapter {
    /// Hands the tree's pending invalidations to the notifier thread.
    fn send_invalidations(&self) {
        for inval in self.tree.take_invalidations() {
            let _ = self.invalidations.send(inval);
        }
    }
}

/// Answers a request from a worker thread once `answer` has done the work it waits for (a
/// `kill`), so the loop keeps serving meanwhile. If no thread can start, the dropped reply
/// answers EIO.
fn later(name: &str, answer: impl FnOnce() + Send + 'static) {
    let _ = std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let _ = catch_unwind(AssertUnwindSafe(answer));
        });
}

impl Filesystem for Adapter {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        // Re-check mtime/size on reads and drop pages when they changed: mutable views then
        // refresh without explicit notifications, also in no-open (--read-only) mode.
        let _ = config.add_capabilities(InitFlags::FUSE_AUTO_INVAL_DATA);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        guarded(|| {
            let result = name_str(name).and_then(|n| self.tree.lookup(parent.0, n));
            trace!(self, "LOOKUP {} {name:?} -> {result:?}", parent.0);
            match result {
                Ok(Lookup::Found(a)) => found(reply, &a),
                Ok(Lookup::Missing { permanent }) => {
                    let t = if permanent { LONG_TTL } else { SHORT_TTL };
                    reply.entry(&t, &negative(), Generation(0))
                }
                Err(FsError::NotFound) => reply.entry(&SHORT_TTL, &negative(), Generation(0)),
                Err(e) => reply.error(errno(&e)),
            }
        })
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        guarded(|| self.tree.forget(ino.0, nlookup))
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        guarded(|| {
            let result = self.tree.getattr(ino.0, fh.map(|f| f.0));
            trace!(
                self,
                "GETATTR {} -> {:?}",
                ino.0,
                result.as_ref().map(|a| a.size)
            );
            match result {
                Ok(a) => reply.attr(&attr_ttl(&a), &file_attr(&a)),
                Err(e) => reply.error(errno(&e)),
            }
        })
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        guarded(|| {
            let time = |t: TimeOrNow| match t {
                TimeOrNow::Now => TimeSet::Now,
                TimeOrNow::SpecificTime(t) => TimeSet::At(t),
            };
            let set = SetAttr {
                mode,
                uid,
                gid,
                size,
                atime: atime.map(time),
                mtime: mtime.map(time),
            };
            let result = self
                .tree
                .setattr_then(ino.0, fh.map(|f| f.0), set, caller(req));
            trace!(
                self,
                "SETATTR {} fh={fh:?} {set:?} -> {:?}",
                ino.0,
                result.as_ref().map(|(a, then)| (a.size, then.is_some()))
            );
            self.send_invalidations();
            match result {
                Ok((a, None)) => reply.attr(&attr_ttl(&a), &file_attr(&a)),
                Ok((a, Some(then))) => later("uwf-setattr", move || match then() {
                    Ok(()) => reply.attr(&attr_ttl(&a), &file_attr(&a)),
                    Err(e) => reply.error(errno(&e)),
                }),
                Err(e) => reply.error(errno(&e)),
            }
        })
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        guarded(|| match self.tree.readlink(ino.0) {
            Ok(target) => reply.data(target.as_bytes()),
            Err(e) => reply.error(errno(&e)),
        })
    }

    fn mknod(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        guarded(|| {
            reply_entry(
                reply,
                name_str(name).and_then(|n| self.tree.link_like(parent.0, n)),
            )
        })
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        guarded(|| {
            reply_entry(
                reply,
                name_str(name).and_then(|n| self.tree.mkdir(parent.0, n)),
            )
        })
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        guarded(|| {
            let result = name_str(name).and_then(|n| self.tree.unlink(parent.0, n));
            trace!(self, "UNLINK {} {name:?} -> {result:?}", parent.0);
            self.send_invalidations();
            reply_empty(reply, result)
        })
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        guarded(|| {
            reply_empty(
                reply,
                name_str(name).and_then(|n| self.tree.rmdir(parent.0, n)),
            )
        })
    }

    fn symlink(
        &self,
        _req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        _target: &Path,
        reply: ReplyEntry,
    ) {
        guarded(|| {
            reply_entry(
                reply,
                name_str(link_name).and_then(|n| self.tree.link_like(parent.0, n)),
            )
        })
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        guarded(|| {
            let how = Flags::from_bits(flags.bits());
            let result = name_str(name).and_then(|n| {
                let new = name_str(newname)?;
                self.tree
                    .rename(parent.0, n, newparent.0, new, how, caller(req))
            });
            trace!(
                self,
                "RENAME {} {name:?} -> {} {newname:?} {flags:?} -> {result:?}",
                parent.0,
                newparent.0
            );
            self.send_invalidations();
            reply_empty(reply, result)
        })
    }

    fn link(
        &self,
        _req: &Request,
        _ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        guarded(|| {
            reply_entry(
                reply,
                name_str(newname).and_then(|n| self.tree.link_like(newparent.0, n)),
            )
        })
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        guarded(|| {
            let result = self.tree.open(ino.0, flags.0, caller(req));
            trace!(self, "OPEN {} {:#o} -> {result:?}", ino.0, flags.0);
            match result {
                Ok(o) => {
                    // An immutable file's first open: its bytes go into the page cache before
                    // the open returns, which saves the READ round trip of a cold read. A
                    // failed store only means that read asks us.
                    if let Some(bytes) = self.tree.prefill(ino.0, o.fh)
                        && let Some(notifier) = self.notifier.get()
                    {
                        let stored = notifier.store(ino, 0, &bytes);
                        trace!(self, "STORE {} {} -> {stored:?}", ino.0, bytes.len());
                    }
                    reply.opened(FileHandle(o.fh), open_flags(&o))
                }
                Err(e) => reply.error(errno(&e)),
            }
        })
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        guarded(|| {
            let result = self.tree.read_or_wait(ino.0, fh.0, offset, size);
            match result {
                Ok(Reading::Data(bytes)) => {
                    trace!(
                        self,
                        "READ {} fh={} off={offset} -> {}",
                        ino.0,
                        fh.0,
                        bytes.len()
                    );
                    reply.data(&bytes)
                }
                Ok(Reading::Later(job)) => {
                    trace!(self, "READ {} fh={} off={offset} -> later", ino.0, fh.0);
                    // `wait`: answer from a worker, so the loop keeps serving; EINTR as soon as
                    // the reader has a signal to handle. If the thread cannot start, the
                    // dropped reply answers EIO.
                    let reader = req.pid();
                    later("uwf-wait", move || match job(&|| signal_pending(reader)) {
                        Ok(bytes) => reply.data(&bytes),
                        Err(e) => reply.error(errno(&e)),
                    });
                }
                Err(e) => {
                    trace!(self, "READ {} fh={} off={offset} -> {e:?}", ino.0, fh.0);
                    reply.error(errno(&e))
                }
            }
        })
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        guarded(|| {
            let result = self.tree.write_then(fh.0, offset, data);
            trace!(
                self,
                "WRITE fh={} off={offset} len={} -> {:?}",
                fh.0,
                data.len(),
                result.as_ref().map(|(n, then)| (n, then.is_some()))
            );
            match result {
                Ok((n, None)) => reply.written(n),
                Ok((n, Some(then))) => later("uwf-write", move || match then() {
                    Ok(()) => reply.written(n),
                    Err(e) => reply.error(errno(&e)),
                }),
                Err(e) => reply.error(errno(&e)),
            }
        })
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        guarded(|| {
            let result = self.tree.flush(fh.0);
            trace!(self, "FLUSH fh={} -> {result:?}", fh.0);
            self.send_invalidations();
            reply_empty(reply, result)
        })
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        guarded(|| {
            self.tree.release(fh.0);
            trace!(self, "RELEASE fh={}", fh.0);
            self.send_invalidations();
            reply.ok()
        })
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        guarded(|| reply_empty(reply, self.tree.fsync(fh.0)))
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // ENOSYS, once per connection: from then on the kernel opens directories itself, with
        // FOPEN_CACHE_DIR (see `Tree::opendir`). No `releasedir` ever comes.
        guarded(|| match self.tree.opendir(ino.0) {
            Ok(o) => reply.opened(FileHandle(o.fh), FopenFlags::FOPEN_CACHE_DIR),
            Err(e) => reply.error(errno(&e)),
        })
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        guarded(|| match self.tree.readdir(ino.0, offset) {
            Ok(entries) => {
                trace!(self, "READDIR {} off={offset} -> {}", ino.0, entries.len());
                for e in entries {
                    if reply.add(INodeNo(e.ino), e.offset, file_type(e.kind), &e.name) {
                        break;
                    }
                }
                reply.ok()
            }
            Err(e) => {
                trace!(self, "READDIR {} off={offset} -> {e:?}", ino.0);
                reply.error(errno(&e))
            }
        })
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        guarded(|| reply.ok())
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        guarded(|| match self.tree.statfs() {
            Ok(s) => reply.statfs(
                s.blocks,
                s.bfree,
                s.bavail,
                s.files,
                s.ffree,
                s.bsize,
                NAME_MAX as u32,
                s.frsize,
            ),
            Err(e) => reply.error(errno(&e)),
        })
    }

    fn setxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        // Never fake-store xattrs: `sed -i` copies permissions through
        // `system.posix_acl_access` and falls back to chmod only when that fails.
        guarded(|| reply.error(errno(&FsError::Unsupported)))
    }

    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: ReplyXattr,
    ) {
        guarded(|| reply.error(errno(&FsError::Unsupported)))
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: ReplyXattr) {
        guarded(|| reply.error(errno(&FsError::Unsupported)))
    }

    fn removexattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        guarded(|| reply.error(errno(&FsError::Unsupported)))
    }

    fn access(&self, _req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        guarded(|| reply_empty(reply, self.tree.access(ino.0, mask.bits())))
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        guarded(|| {
            let result = name_str(name).and_then(|n| {
                self.tree
                    .create(parent.0, n, mode, umask, flags, caller(req))
            });
            self.send_invalidations();
            match result {
                Ok((a, o)) => reply.created(
                    &ttl(a.caching),
                    &file_attr(&a),
                    Generation(0),
                    FileHandle(o.fh),
                    open_flags(&o),
                ),
                Err(e) => reply.error(errno(&e)),
            }
        })
    }

    fn poll(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        ph: PollNotifier,
        events: PollEvents,
        _flags: PollFlags,
        reply: ReplyPoll,
    ) {
        guarded(|| {
            let ready = PollEvents::POLLIN
                | PollEvents::POLLOUT
                | PollEvents::POLLRDNORM
                | PollEvents::POLLWRNORM;
            match self.tree.poll(fh.0) {
                None => reply.poll(events & ready),
                Some(until_ready) => {
                    trace!(self, "POLL fh={} -> not ready", fh.0);
                    reply.poll(PollEvents::empty());
                    // The kernel asks again when told; a poller that gave up meanwhile (its
                    // timeout passed) makes the notification a no-op.
                    later("uwf-poll", move || {
                        until_ready();
                        let _ = ph.notify();
                    });
                }
            }
        })
    }

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        // isatty() probes (sed, python) must learn "not a terminal", not "not implemented".
        guarded(|| reply.error(errno(&FsError::NotATty)))
    }
}
