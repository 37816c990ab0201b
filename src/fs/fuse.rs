//! The thin fuser adapter: the only code that names fuser types (this file and `fuse/`).
//!
//! Each callback (`fuse/adapter.rs`) converts arguments, calls one [`Tree`] method, and converts the
//! answer (`fuse/replies.rs`): TTLs and open flags from [`Caching`](super::attr::Caching), errno from
//! [`FsError::errno`](super::error::FsError::errno). Nothing else happens there. This file
//! mounts: the session, its options, and the thread that sends invalidations.
//!
//! Architecture Invariant: no callback can take the daemon down. Every callback body runs under
//! `catch_unwind`; a panic drops the reply during unwinding, which fuser answers with EIO, and the
//! loop goes on serving. Kernel cache invalidations caused by our own changes are sent from a
//! separate thread, never from inside a callback: a notification about an inode sent from the
//! loop thread while a request for that inode is still unanswered deadlocks, because the kernel
//! holds the inode's lock (or its pages' locks) until that reply comes. The one notification
//! sent from a callback is the page-cache fill at an immutable file's first open
//! ([`Tree::prefill`]), when no request for that inode's pages can exist yet.

use std::ffi::OsStr;
use std::io;
use std::path::Path;
use std::sync::{Arc, OnceLock, mpsc};

use fuser::{Config, INodeNo, MountOption, Session, SessionACL, SessionUnmounter};

use super::attr::Inval;
use super::tree::Tree;

mod adapter;
mod replies;

use adapter::Adapter;

/// How to mount.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MountConfig {
    pub read_only: bool,
    pub allow_other: bool,
}

/// A mounted (INIT done) but not yet serving filesystem.
pub(crate) struct Mounted {
    session: Session<Adapter>,
}

/// Unmounts a [`Mounted`] from another thread (a signal handler thread).
pub(crate) struct Unmounter(SessionUnmounter);

impl Unmounter {
    /// Plain `umount(2)`; fails with EBUSY while files are open.
    pub(crate) fn unmount(&mut self) -> io::Result<()> {
        self.0.unmount()
    }
}

impl Mounted {
    /// A handle that unmounts from another thread.
    pub(crate) fn unmounter(&mut self) -> Unmounter {
        Unmounter(self.session.unmount_callable())
    }

    /// Serves requests until the filesystem is unmounted.
    pub(crate) fn run(self) -> io::Result<()> {
        self.session.run()
    }
}

/// Mounts `tree` at `dir`. Returns once the kernel handshake is done, so the mount is usable.
pub(crate) fn mount(tree: Tree, dir: &Path, cfg: MountConfig) -> io::Result<Mounted> {
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
