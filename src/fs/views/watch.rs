//! How the views notice changes made outside the mount, for both storage backends, within a
//! second (`docs/mount.md#caching-and-control-files`).
//!
//! Where changes are not notified (a directory store) they are seen in the index files: every
//! change to the thread index is written to `index.db`'s write-ahead log (and checkpointed into
//! `index.db`), and `registry.yaml` is replaced atomically on every change, so their stamps
//! (inode, size, mtime) tell when to read them again (`views.rs`, `views/thread_source.rs`).
//! Where they are notified (PostgreSQL) those files do not exist and nothing local changes when
//! another machine steps a thread, so:
//!
//! - a background thread listens for thread changes
//!   ([`crate::engine::storage::seam::Coordination::listen`]: every start, head move, status change
//!   and archive, from any machine) and counts them; a count that moved makes the next look
//!   re-read the thread index (at most every [`NOTIFIED_RECHECK`]);
//! - the thread index is also re-read when a read is older than [`PG_RECHECK`], which covers
//!   a listener that lost its connection, and the registry (which has no trigger) is re-read
//!   that way only: one query, at most once per [`PG_RECHECK`], and only when someone looks;
//! - a directory's mtime can no longer be a file's, so a read that differs from the last one
//!   gets the time of that read as its version ([`Watch::version`]), and an unchanged read
//!   keeps the old one: the kernel drops a cached listing exactly when the content changed.
//!
//! Architecture Invariant: a store whose changes are not notified never starts a listener or a
//! poll; its views behave (and cost) exactly as before. The listener thread holds only a weak
//! reference to the counter, so it ends within a wait of the [`Source`](super::Source) being
//! dropped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Once, Weak};
use std::time::{Duration, Instant, SystemTime};

use crate::cas::Store;
use crate::engine::storage::seam::{ChangeListener, Feed};
use crate::engine::storage::{self, Storage};

use super::Version;

/// How old a read of the thread index or the registry may get over PostgreSQL before it is read
/// again, notification or not.
pub(super) const PG_RECHECK: Duration = Duration::from_secs(1);

/// How often notifications may make the thread index be read again (a burst of steps on many
/// threads costs one read per period, as file changes do for a directory store).
pub(super) const NOTIFIED_RECHECK: Duration = Duration::from_millis(100);

/// How long one wait for a notification lasts before the listener looks whether its mount is
/// still there.
const LISTEN_SLICE: Duration = Duration::from_secs(1);

/// How long the listener waits before connecting again after losing its connection.
const RECONNECT: Duration = Duration::from_millis(500);

/// Where changes come from: file stamps, or notifications and a poll.
#[derive(Debug)]
pub(super) enum Watch {
    /// Changes are not notified: the index files' stamps.
    Files,
    /// Changes are notified: a listener's count, and a poll.
    Notified(Box<Listening>),
}

/// The notification counter of a mount whose store notifies changes, and its listener.
#[derive(Debug)]
pub(super) struct Listening {
    storage: Arc<Storage>,
    notified: Arc<AtomicU64>,
    listening: Once,
}

impl Watch {
    /// How `store`'s changes are seen, as its storage says.
    pub(super) fn of(store: &Store) -> Watch {
        match storage::handle(store.root()) {
            Ok(storage) if storage.coordination().notifies_changes() => {
                Watch::Notified(Box::new(Listening::new(storage)))
            }
            // The store was opened with this backend already; should it fail now, polling
            // alone (no listener) still shows changes within a second.
            _ => Watch::Files,
        }
    }

    /// Whether changes made elsewhere arrive as notifications (and are read again on a poll),
    /// rather than as new stamps of the root's index files.
    pub(super) fn by_notification(&self) -> bool {
        matches!(self, Watch::Notified(_))
    }

    /// How many notifications arrived so far (0 where changes are not notified). The first
    /// call starts the listener.
    pub(super) fn notified(&self) -> u64 {
        match self {
            Watch::Files => 0,
            Watch::Notified(w) => w.notified(),
        }
    }

    /// The version of a read over PostgreSQL: the previous one while the content is the same,
    /// else the time of this read (`read_at`), which is later than any earlier version.
    pub(super) fn version(previous: Option<Version>, same: bool, read_at: SystemTime) -> Version {
        match previous {
            Some(v) if same => v,
            // A clock that went back: still a version no listing was kept under.
            Some(Version::Settled(t)) if t >= read_at => {
                Version::Settled(t + Duration::from_nanos(1))
            }
            _ => Version::Settled(read_at),
        }
    }
}

/// One read over PostgreSQL (the thread index, the registry): what it said, its version, and
/// when and at which counts it was made.
#[derive(Debug)]
pub(super) struct PgRead<T> {
    pub value: Arc<T>,
    pub version: Version,
    checked: Instant,
    /// The mount's own change counter when read.
    generation: u64,
    /// The notification count when read.
    notified: u64,
}

impl<T: PartialEq> PgRead<T> {
    /// Whether this read still stands: nothing changed through the mount since, it is younger
    /// than [`PG_RECHECK`], and no notification arrived (or one did, but the read is younger
    /// than [`NOTIFIED_RECHECK`]).
    pub(super) fn fresh(&self, generation: u64, notified: u64) -> bool {
        let age = self.checked.elapsed();
        self.generation == generation
            && age < PG_RECHECK
            && (self.notified == notified || age < NOTIFIED_RECHECK)
    }

    /// The read after `previous`: `value`, read at `read_at` with the counts loaded before
    /// reading (so a change during the read is seen at the next look). An unchanged value keeps
    /// the previous read's version and shared value.
    pub(super) fn next(
        previous: Option<&PgRead<T>>,
        value: T,
        read_at: SystemTime,
        (generation, notified): (u64, u64),
    ) -> PgRead<T> {
        let same = previous.filter(|p| *p.value == value);
        let version = Watch::version(previous.map(|p| p.version), same.is_some(), read_at);
        PgRead {
            value: same.map_or_else(|| Arc::new(value), |p| p.value.clone()),
            version,
            checked: Instant::now(),
            generation,
            notified,
        }
    }
}

impl Listening {
    fn new(storage: Arc<Storage>) -> Listening {
        Listening {
            storage,
            notified: Arc::new(AtomicU64::new(0)),
            listening: Once::new(),
        }
    }

    fn notified(&self) -> u64 {
        self.listening.call_once(|| {
            let storage = self.storage.clone();
            let counter = Arc::downgrade(&self.notified);
            // Without a listener the poll still shows changes within a second.
            let _ = std::thread::Builder::new()
                .name("uwf-listen".to_owned())
                .spawn(move || listen(&storage, &counter));
        });
        self.notified.load(Ordering::SeqCst)
    }
}

/// The listener thread: counts notifications until the counter is dropped. After (re)connecting
/// it counts one too, as notifications sent while it was not listening are lost.
fn listen(storage: &Storage, counter: &Weak<AtomicU64>) {
    let mut listener: Option<Box<dyn ChangeListener>> = None;
    loop {
        let Some(alive) = counter.upgrade() else {
            return;
        };
        drop(alive);
        let heard = match listener.as_mut() {
            None => match storage.coordination().listen(Feed::Threads) {
                Ok(Some(l)) => {
                    listener = Some(l);
                    true
                }
                Ok(None) => return,
                Err(_) => {
                    std::thread::sleep(RECONNECT);
                    false
                }
            },
            Some(l) => match l.wait(LISTEN_SLICE) {
                Ok(found) => found.is_some(),
                Err(_) => {
                    listener = None;
                    false
                }
            },
        };
        if heard && let Some(counter) = counter.upgrade() {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn a_changed_read_gets_a_new_version_and_an_unchanged_one_keeps_it() {
        let t0 = UNIX_EPOCH + Duration::from_secs(100);
        let t1 = t0 + Duration::from_millis(5);
        let first = Watch::version(None, false, t0);
        assert_eq!(first, Version::Settled(t0));
        assert_eq!(Watch::version(Some(first), true, t1), first);
        assert_eq!(Watch::version(Some(first), false, t1), Version::Settled(t1));
        // The clock went back: the new version is still a new one, later than the old.
        let back = Watch::version(Some(first), false, t0 - Duration::from_secs(1));
        assert_eq!(back, Version::Settled(t0 + Duration::from_nanos(1)));
    }

    #[test]
    fn a_directory_store_has_no_listener() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let watch = Watch::of(&store);
        assert!(!watch.by_notification());
        assert_eq!(watch.notified(), 0);
    }
}
