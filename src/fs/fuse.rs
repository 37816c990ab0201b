//! The thin fuser adapter: the only file that names fuser types.
//!
//! Each callback converts arguments, calls one [`Tree`] method, and converts the answer: TTLs and
//! open flags from [`Caching`], errno from [`FsError::errno`]. Nothing else happens here.
//!
//! Architecture Invariant: no callback can take the daemon down. Every callback body runs under
//! `catch_unwind`; a panic drops the reply during unwinding, which fuser answers with EIO, and the
//! loop goes on serving. Kernel cache invalidations caused by our own changes are sent from a
//! separate thread, never from inside a callback (`fuse-notes.md` §1.4: notifying the inode of a
//! pending request from the loop thread deadlocks). The one notification sent from a callback is
//! the page-cache fill at an immutable file's first open ([`Tree::prefill`]), when no request
//! for that inode's pages can exist yet.

use std::ffi::OsStr;
use std::io;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::{Arc, OnceLock, mpsc};
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, BsdFileFlags, Config, Errno, FileAttr, FileHandle, FileType, Filesystem,
    FopenFlags, Generation, INodeNo, InitFlags, IoctlFlags, KernelConfig, LockOwner, MountOption,
    Notifier, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request,
    Session, SessionACL, SessionUnmounter, TimeOrNow, WriteFlags,
};

use super::attr::{
    Attr, Caching, Caller, Inval, Kind, Lookup, NAME_MAX, Opened, Reading, RenameFlags as Flags,
    SetAttr, TimeSet,
};
use super::error::FsError;
use super::tree::Tree;

/// How long the kernel trusts immutable entries (nodes, versions).
const LONG_TTL: Duration = Duration::from_secs(3600);
/// How long the kernel trusts everything that can change (SPEC §7: at most a second).
const SHORT_TTL: Duration = Duration::from_secs(1);

fn ttl(caching: Caching) -> Duration {
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
fn attr_ttl(a: &Attr) -> Duration {
    match (a.kind, a.caching) {
        (Kind::Dir, Caching::Immutable) => LONG_TTL,
        (Kind::Dir, _) => Duration::ZERO,
        (_, caching) => ttl(caching),
    }
}

fn file_type(kind: Kind) -> FileType {
    match kind {
        Kind::Dir => FileType::Directory,
        Kind::File => FileType::RegularFile,
        Kind::Symlink => FileType::Symlink,
    }
}

fn errno(e: &FsError) -> Errno {
    Errno::from_i32(e.errno())
}

fn file_attr(a: &Attr) -> FileAttr {
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
fn negative() -> FileAttr {
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

fn open_flags(o: &Opened) -> FopenFlags {
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
        // Page-cache mode: a reader blocked in `wait` can be interrupted (with direct I/O not
        // even SIGKILL would end it before the reply).
        Caching::Blocking => flags,
    }
}

fn caller(req: &Request) -> Caller {
    Caller {
        uid: req.uid(),
        gid: req.gid(),
    }
}

fn name_str(name: &OsStr) -> Result<&str, FsError> {
    // Every name the tree can hold is UTF-8; anything else can only be missing or refused.
    name.to_str().ok_or(FsError::NotFound)
}

/// Answers an entry request: the attributes with their TTLs, or the errno.
fn reply_entry(reply: ReplyEntry, result: Result<Attr, FsError>) {
    match result {
        Ok(a) => found(reply, &a),
        Err(e) => reply.error(errno(&e)),
    }
}

/// Answers a request that returns nothing but success or an errno.
fn reply_empty(reply: ReplyEmpty, result: Result<(), FsError>) {
    match result {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(&e)),
    }
}

/// A found entry: the name for [`ttl`], the attributes for [`attr_ttl`].
fn found(reply: ReplyEntry, a: &Attr) {
    reply.entry_with_ttls(&attr_ttl(a), &ttl(a.caching), &file_attr(a), Generation(0))
}

/// Runs a callback body; a panic inside drops its reply, which fuser answers with EIO.
fn guarded(body: impl FnOnce()) {
    let _ = catch_unwind(AssertUnwindSafe(body));
}

/// The `fuser::Filesystem` over a [`Tree`].
struct Adapter {
    tree: Tree,
    invalidations: mpsc::Sender<Inval>,
    /// Set once the session exists (the adapter is built before it): fills page caches.
    notifier: Arc<OnceLock<Notifier>>,
    /// `UWF_FS_TRACE=1`: log every request and its outcome to stderr (debugging op sequences).
    trace: bool,
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
            let result = self.tree.setattr(ino.0, fh.map(|f| f.0), set, caller(req));
            trace!(
                self,
                "SETATTR {} fh={fh:?} {set:?} -> {:?}",
                ino.0,
                result.as_ref().map(|a| a.size)
            );
            self.send_invalidations();
            match result {
                Ok(a) => reply.attr(&attr_ttl(&a), &file_attr(&a)),
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
        _req: &Request,
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
                    // `wait`: answer from a worker, so the loop keeps serving. If the thread
                    // cannot start, the dropped reply answers EIO.
                    let _ = std::thread::Builder::new()
                        .name("uwf-wait".to_owned())
                        .spawn(move || {
                            let _ = catch_unwind(AssertUnwindSafe(move || match job() {
                                Ok(bytes) => reply.data(&bytes),
                                Err(e) => reply.error(errno(&e)),
                            }));
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
            let result = self.tree.write(fh.0, offset, data);
            trace!(
                self,
                "WRITE fh={} off={offset} len={} -> {result:?}",
                fh.0,
                data.len()
            );
            match result {
                Ok(n) => reply.written(n),
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
        guarded(|| reply.statfs(0, 0, 0, 0, 0, 4096, NAME_MAX as u32, 4096))
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

/// How to mount.
#[derive(Debug, Clone, Copy)]
pub struct MountConfig {
    pub read_only: bool,
    pub allow_other: bool,
}

/// A mounted (INIT done) but not yet serving filesystem.
pub struct Mounted {
    session: Session<Adapter>,
}

/// Unmounts a [`Mounted`] from another thread (a signal handler thread).
pub struct Unmounter(SessionUnmounter);

impl Unmounter {
    /// Plain `umount(2)`; fails with EBUSY while files are open.
    pub fn unmount(&mut self) -> io::Result<()> {
        self.0.unmount()
    }
}

impl Mounted {
    /// A handle that unmounts from another thread.
    pub fn unmounter(&mut self) -> Unmounter {
        Unmounter(self.session.unmount_callable())
    }

    /// Serves requests until the filesystem is unmounted.
    pub fn run(self) -> io::Result<()> {
        self.session.run()
    }
}

/// Mounts `tree` at `dir`. Returns once the kernel handshake is done, so the mount is usable.
pub fn mount(tree: Tree, dir: &Path, cfg: MountConfig) -> io::Result<Mounted> {
    let (tx, rx) = mpsc::channel::<Inval>();
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName("uwf".to_owned()),
        MountOption::Subtype("uwf".to_owned()),
        MountOption::NoDev,
        MountOption::NoSuid,
    ];
    if cfg.read_only {
        config.mount_options.push(MountOption::RO);
    }
    config.acl = if cfg.allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    config.n_threads = Some(1);
    let notifier = Arc::new(OnceLock::new());
    let adapter = Adapter {
        tree,
        invalidations: tx,
        notifier: notifier.clone(),
        trace: std::env::var_os("UWF_FS_TRACE").is_some_and(|v| v == "1"),
    };
    let session = Session::new(adapter, dir, &config)?;
    let _ = notifier.set(session.notifier());
    let notifier = session.notifier();
    // Ends when the adapter (holding the sender) is dropped with the session.
    std::thread::Builder::new()
        .name("uwf-invalidate".to_owned())
        .spawn(move || {
            for inval in rx {
                // ENOENT (nothing cached) and ENODEV (unmounted) are both fine to ignore.
                let _ = match inval {
                    Inval::Inode(ino) => notifier.inval_inode(INodeNo(ino), 0, 0),
                    Inval::Entry(parent, name) => {
                        notifier.inval_entry(INodeNo(parent), OsStr::new(&name))
                    }
                };
            }
        })?;
    Ok(Mounted { session })
}
