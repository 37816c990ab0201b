//! The read side of the tree: what the store and the registry look like as directories and files.
//!
//! [`Source`] answers "which entries does this directory have", "what bytes does this file hold"
//! and "when did it change" for every generated entry, straight from the store and the index
//! files, so changes made by the CLI in another process show as soon as the kernel asks again.
//! It knows nothing about FUSE, handles or scratch files (that is [`super::tree`]).
//!
//! Threads (`threads/<id>/…`) are read the same way, in `views/threads.rs`.
//!
//! Architecture Invariant: caches here are bounded and never stale beyond their rule. Rendered
//! immutable content (nodes, versions, graphs, step files, transcripts — keyed by hash) lives in a
//! byte-bounded FIFO; the registry and the thread index are re-read whenever their files' inode,
//! size or mtime changes (and at every look while that mtime is younger than [`SETTLE`]), or
//! over PostgreSQL after a notification and at least every second (`views/watch.rs`); big
//! listings (`cas/`) are kept for at most [`LISTING_TTL`].
//!
//! Architecture Invariant: a directory's mtime comes from the same snapshot as its listing and
//! changes whenever that listing can have changed. The kernel caches every listing (the mount
//! answers `opendir` with ENOSYS, which makes it use `FOPEN_CACHE_DIR`) and drops a cached
//! listing only when the directory's mtime differs at the next `readdir` from offset 0. Hence
//! the versions: [`Version`] turns a file's mtime into a directory mtime that is safe against
//! coarse timestamps, and `cas/` is listed afresh once per [`LISTING_TTL`], its mtime the start
//! of that period.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::cas::{Hash, Store, StoreError};
use crate::engine::storage::index_files::{self, Registry, RegistryEntry};
use crate::engine::workflow::graph;
use crate::engine::workflow::{Definition, Workflow};

use super::error::FsError;
use super::inode::{CasKey, Key, StepFile};

mod lineage;
mod thread_source;
mod warm;
mod watch;

pub(crate) use thread_source::ThreadRef;
#[cfg(test)]
pub(crate) use warm::Order;
pub(crate) use warm::Warmer;

/// How long a listing of a big directory (`cas/`) is reused.
pub(crate) const LISTING_TTL: Duration = Duration::from_secs(1);

/// How old an index file's mtime must be before it can stand for the file's content.
///
/// File systems stamp mtimes from a coarse clock (a jiffy, up to 10 ms), so two replacements of
/// an index file within one tick can carry the same mtime (and, inode numbers being reused,
/// the same stamp). Until the mtime is older than this, the file is re-read at every look and
/// directories built from it report the current time as their mtime (a new one each time), so
/// the kernel never keeps a listing under an mtime that a later change could repeat.
pub(crate) const SETTLE: Duration = Duration::from_millis(100);

/// The mtime a directory built from files stamped `mtime`, read at `read_at`, reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Version {
    /// Old enough that any later change gets a later mtime.
    Settled(SystemTime),
    /// Too recent to tell changes within one clock tick apart.
    Recent,
}

impl Version {
    /// The version of files with these mtimes (`None`: absent), stamped before `read_at`.
    pub(crate) fn of(
        mtimes: impl IntoIterator<Item = Option<SystemTime>>,
        read_at: SystemTime,
        absent: SystemTime,
    ) -> Version {
        let newest = mtimes
            .into_iter()
            .map(|m| m.unwrap_or(absent))
            .max()
            .unwrap_or(absent);
        match read_at.duration_since(newest) {
            Ok(age) if age >= SETTLE => Version::Settled(newest),
            _ => Version::Recent,
        }
    }

    /// The directory mtime: the file's, or now (different at every call) while recent.
    pub(crate) fn time(self) -> SystemTime {
        match self {
            Version::Settled(t) => t,
            Version::Recent => SystemTime::now(),
        }
    }
}

/// Bytes of rendered immutable content kept in memory.
const RENDER_BUDGET: usize = 32 << 20;

/// What kind of bytes a hash is rendered into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Render {
    /// `cas/<hash>`: the node as pretty JSON.
    Node,
    /// `cas/schemas/<hash>.json`: a schema node's payload as pretty JSON.
    Schema,
    /// A workflow as YAML with its schemas inline.
    Yaml,
    /// A workflow's Mermaid flowchart.
    Graph,
    /// A `text` node's string (a workflow version's saved source).
    Text,
    /// A step's file (keyed by the step hash, which fixes everything before it too).
    Step(StepFile),
    /// A thread's transcript at a head, with a status line (its hash).
    Transcript(u64),
}

/// Rendered bytes of an immutable file and the time of the node they come from.
#[derive(Debug, Clone)]
pub(crate) struct Content {
    pub bytes: Arc<[u8]>,
    pub time: SystemTime,
}

/// A directory listing: names and what they are, in display order.
pub(crate) type Listing = Vec<(String, Key)>;

/// The store seen as files.
pub(crate) struct Source {
    store: Arc<Store>,
    root: PathBuf,
    mounted_at: SystemTime,
    registry: Mutex<Option<(Stamp, Version, Arc<Registry>)>>,
    /// The registry over PostgreSQL, polled (see [`watch`]).
    pg_registry: Mutex<Option<watch::PgRead<Registry>>>,
    /// Bumped by every registration through the mount, so the next look reads the registry.
    registry_generation: AtomicU64,
    /// How changes made elsewhere are noticed.
    watch: watch::Watch,
    rendered: Mutex<ByteCache>,
    /// `cas/` and `cas/schemas/`: the period each listing was made in (its mtime), the listing.
    listings: Mutex<HashMap<CasKey, (SystemTime, Arc<Listing>)>>,
    threads: thread_source::Threads,
    lineage: lineage::Lineage,
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Source").field("root", &self.root).finish()
    }
}

/// Identifies one version of a file on disk (an atomic replace changes the inode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub ino: u64,
    pub len: u64,
    pub mtime: SystemTime,
}

pub(crate) fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    Some(Stamp {
        ino: meta.ino(),
        len: meta.len(),
        mtime: meta.modified().ok()?,
    })
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned cache only means a panic (caught by the adapter) interrupted an update of a
    // cache, whose entries are always complete values.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A millisecond time stamped with what it is the time of: plus sub-millisecond nanoseconds
/// derived from `hash`. Node and registration times have millisecond resolution, so two
/// versions (of a thread's head, of a workflow) within one millisecond would share a time; as a
/// directory's mtime this one differs for every hash, so the kernel never keeps a listing of
/// one version under the mtime of another.
pub(crate) fn versioned(time: SystemTime, hash: Hash) -> SystemTime {
    use std::hash::{Hash as _, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    hash.hash(&mut h);
    time + Duration::from_nanos(h.finish() % 1_000_000)
}

/// Milliseconds since the epoch as a time.
pub(crate) fn from_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

fn store_error(e: StoreError) -> FsError {
    match e {
        StoreError::NotFound(_) => FsError::NotFound,
        other => FsError::internal(other),
    }
}

impl Source {
    pub(crate) fn new(store: Store) -> Source {
        Source {
            root: store.root().to_path_buf(),
            watch: watch::Watch::of(&store),
            store: Arc::new(store),
            mounted_at: SystemTime::now(),
            registry: Mutex::new(None),
            pg_registry: Mutex::new(None),
            registry_generation: AtomicU64::new(0),
            rendered: Mutex::new(ByteCache::default()),
            listings: Mutex::new(HashMap::new()),
            threads: thread_source::Threads::default(),
            lineage: lineage::Lineage::default(),
        }
    }

    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// The store, shared with background steps.
    pub(crate) fn shared_store(&self) -> Arc<Store> {
        self.store.clone()
    }

    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// When the mount started: the time of entries that have no better one.
    pub(crate) fn mounted_at(&self) -> SystemTime {
        self.mounted_at
    }

    /// The registry, re-read only when `registry.yaml` changed on disk.
    pub(crate) fn registry(&self) -> Result<Arc<Registry>, FsError> {
        Ok(self.registry_version()?.0)
    }

    /// A workflow was registered through the mount: read the registry at the next look.
    pub(crate) fn registry_changed(&self) {
        self.registry_generation.fetch_add(1, Ordering::SeqCst);
    }

    /// The registry and the version of `registry.yaml` it was read from (over PostgreSQL, of
    /// the read that last found it changed).
    fn registry_version(&self) -> Result<(Arc<Registry>, Version), FsError> {
        if self.watch.by_notification() {
            return self.pg_registry_version();
        }
        let path = self.root.join("registry.yaml");
        let read_at = SystemTime::now();
        let now = stamp(&path);
        let mut cached = lock(&self.registry);
        if let Some((s, v @ Version::Settled(_), reg)) = cached.as_ref()
            && Some(*s) == now
        {
            return Ok((reg.clone(), *v));
        }
        let reg = Arc::new(index_files::read_registry(&self.root).map_err(FsError::internal)?);
        let version = Version::of([now.map(|s| s.mtime)], read_at, self.mounted_at);
        if let Some(s) = now {
            *cached = Some((s, version, reg.clone()));
        }
        Ok((reg, version))
    }

    /// The registry over PostgreSQL: read again at most every [`watch::PG_RECHECK`] (it sends
    /// no notifications), and at once after a registration through the mount.
    fn pg_registry_version(&self) -> Result<(Arc<Registry>, Version), FsError> {
        let counts = (self.registry_generation.load(Ordering::SeqCst), 0);
        let mut cached = lock(&self.pg_registry);
        if let Some(c) = cached.as_ref()
            && c.fresh(counts.0, counts.1)
        {
            return Ok((c.value.clone(), c.version));
        }
        let read_at = SystemTime::now();
        let reg = index_files::read_registry(&self.root).map_err(FsError::internal)?;
        let read = watch::PgRead::next(cached.as_ref(), reg, read_at, counts);
        let found = (read.value.clone(), read.version);
        *cached = Some(read);
        Ok(found)
    }

    /// The registry entry of `name`, if registered.
    pub(crate) fn entry(&self, name: &str) -> Result<Option<RegistryEntry>, FsError> {
        Ok(self.registry()?.get(name).cloned())
    }

    /// The mtime of `workflows/`: the version of `registry.yaml` (see [`Version`]).
    pub(crate) fn registry_mtime(&self) -> Result<SystemTime, FsError> {
        Ok(self.registry_version()?.1.time())
    }

    /// The mtime of `cas/` and `cas/schemas/`: the start of the current [`LISTING_TTL`]
    /// period. Node files appear (a write) and disappear (`uwf cas gc`) without any index file
    /// changing, so these listings are made afresh once per period, and the period is their
    /// version: the kernel reads them again in the next one.
    pub(crate) fn cas_mtime(&self) -> SystemTime {
        listing_period(SystemTime::now())
    }

    /// Whether a node exists.
    pub(crate) fn has(&self, hash: Hash) -> bool {
        self.store.has(hash)
    }

    /// `cas/<hash>`: the node as pretty JSON.
    pub(crate) fn node_json(&self, hash: Hash) -> Result<Content, FsError> {
        self.rendered(Render::Node, hash, || {
            let node = self.store.get(hash).map_err(store_error)?;
            Ok((pretty(&node.to_json())?, node.timestamp))
        })
    }

    /// `cas/schemas/<hash>.json`: a schema node's payload; `NotFound` for other nodes.
    pub(crate) fn schema_json(&self, hash: Hash) -> Result<Content, FsError> {
        self.rendered(Render::Schema, hash, || {
            let node = self.store.get(hash).map_err(store_error)?;
            if !node.is_schema() && hash != Hash::META {
                return Err(FsError::NotFound);
            }
            Ok((pretty(&node.payload)?, node.timestamp))
        })
    }

    /// A workflow version as YAML with its schemas inline.
    pub(crate) fn workflow_yaml(&self, hash: Hash) -> Result<Content, FsError> {
        self.rendered(Render::Yaml, hash, || {
            let node = self.store.get(hash).map_err(store_error)?;
            let def = Definition::load(&self.store, hash).map_err(FsError::internal)?;
            Ok((def.to_yaml().into_bytes(), node.timestamp))
        })
    }

    /// A `text` node's string: the saved source of a workflow version.
    pub(crate) fn text(&self, hash: Hash) -> Result<Content, FsError> {
        self.rendered(Render::Text, hash, || {
            let node = self.store.get(hash).map_err(store_error)?;
            let text = node.payload.as_str().ok_or(FsError::NotFound)?;
            Ok((text.as_bytes().to_vec(), node.timestamp))
        })
    }

    /// A workflow version's Mermaid flowchart.
    pub(crate) fn workflow_graph(&self, hash: Hash) -> Result<Content, FsError> {
        self.rendered(Render::Graph, hash, || {
            let node = self.store.get(hash).map_err(store_error)?;
            let w = Workflow::load(&self.store, hash).map_err(FsError::internal)?;
            Ok((graph::mermaid(&w).into_bytes(), node.timestamp))
        })
    }

    fn rendered(
        &self,
        kind: Render,
        hash: Hash,
        make: impl FnOnce() -> Result<(Vec<u8>, u64), FsError>,
    ) -> Result<Content, FsError> {
        if let Some(content) = lock(&self.rendered).get(&(kind, hash)) {
            return Ok(content);
        }
        let (bytes, ms) = make()?;
        let content = Content {
            bytes: Arc::from(bytes),
            time: from_ms(ms),
        };
        lock(&self.rendered).insert((kind, hash), content.clone());
        Ok(content)
    }

    /// How many rendered files are cached (tests).
    #[cfg(test)]
    pub(crate) fn rendered_count(&self) -> usize {
        lock(&self.rendered).map.len()
    }

    /// The entries of `cas/` (every node) or `cas/schemas/`, reused for [`LISTING_TTL`].
    pub(crate) fn cas_listing(&self, dir: &CasKey) -> Result<Arc<Listing>, FsError> {
        let period = self.cas_mtime();
        let mut cache = lock(&self.listings);
        if let Some((made, listing)) = cache.get(dir)
            && *made == period
        {
            return Ok(listing.clone());
        }
        let listing: Listing = match dir {
            CasKey::Root => {
                let mut out = vec![("schemas".to_owned(), Key::Cas(CasKey::Schemas))];
                for h in self.store.list_all().map_err(FsError::internal)? {
                    out.push((h.to_string(), Key::Cas(CasKey::Node(h))));
                }
                out
            }
            CasKey::Schemas => {
                let mut hashes = self
                    .store
                    .list_type(Hash::META)
                    .map_err(FsError::internal)?;
                // The bootstrap meta-schema is a schema node too, though not of type META.
                hashes.push(Hash::META);
                hashes.sort();
                hashes.dedup();
                hashes
                    .into_iter()
                    .map(|h| (format!("{h}.json"), Key::Cas(CasKey::Schema(h))))
                    .collect()
            }
            _ => return Err(FsError::NotDir),
        };
        let listing = Arc::new(listing);
        cache.insert(dir.clone(), (period, listing.clone()));
        Ok(listing)
    }
}

/// The start of the [`LISTING_TTL`] period `t` falls in.
fn listing_period(t: SystemTime) -> SystemTime {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let period = LISTING_TTL.as_nanos();
    let start = since.as_nanos() - since.as_nanos() % period;
    UNIX_EPOCH + Duration::from_nanos(u64::try_from(start).unwrap_or(u64::MAX))
}

/// Pretty JSON plus a final newline.
fn pretty(value: &serde_json::Value) -> Result<Vec<u8>, FsError> {
    let mut out = serde_json::to_vec_pretty(value).map_err(FsError::internal)?;
    out.push(b'\n');
    Ok(out)
}

/// A FIFO of rendered content bounded by total bytes. Rendered content is immutable (keyed by
/// hash), so eviction only costs a re-render.
#[derive(Default)]
struct ByteCache {
    map: HashMap<(Render, Hash), Content>,
    order: VecDeque<(Render, Hash)>,
    bytes: usize,
}

impl ByteCache {
    fn get(&self, key: &(Render, Hash)) -> Option<Content> {
        self.map.get(key).cloned()
    }

    fn insert(&mut self, key: (Render, Hash), value: Content) {
        if value.bytes.len() > RENDER_BUDGET / 4 || self.map.contains_key(&key) {
            return;
        }
        self.bytes += value.bytes.len();
        self.map.insert(key, value);
        self.order.push_back(key);
        while self.bytes > RENDER_BUDGET {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(v) = self.map.remove(&old) {
                self.bytes -= v.bytes.len();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recent_mtime_is_no_version_until_it_settles() {
        let now = SystemTime::now();
        let absent = UNIX_EPOCH;
        let young = Some(now - SETTLE / 2);
        let old = Some(now - SETTLE * 2);
        assert_eq!(Version::of([young, old], now, absent), Version::Recent);
        assert_eq!(
            Version::of([old, None], now, absent),
            Version::Settled(now - SETTLE * 2)
        );
        assert_eq!(Version::of([None], now, absent), Version::Settled(absent));
        // A recent version reports a new time at every look.
        let a = Version::Recent.time();
        std::thread::sleep(Duration::from_millis(1));
        assert_ne!(a, Version::Recent.time());
        // A clock that went back makes a file from the future: not settled either.
        assert_eq!(
            Version::of([Some(now + SETTLE)], now, absent),
            Version::Recent
        );
    }

    #[test]
    fn listing_periods_start_on_whole_periods() {
        let t = UNIX_EPOCH + Duration::from_millis(5_432);
        assert_eq!(listing_period(t), UNIX_EPOCH + Duration::from_secs(5));
        assert_eq!(
            listing_period(t + Duration::from_millis(500)),
            listing_period(t)
        );
        assert_ne!(listing_period(t + LISTING_TTL), listing_period(t));
    }

    #[test]
    fn byte_cache_stays_within_budget() {
        let mut c = ByteCache::default();
        let chunk = Content {
            bytes: Arc::from(vec![0u8; RENDER_BUDGET / 5]),
            time: UNIX_EPOCH,
        };
        for i in 0..20 {
            c.insert((Render::Node, Hash::from_u64(i)), chunk.clone());
        }
        assert!(c.bytes <= RENDER_BUDGET);
        assert!(c.get(&(Render::Node, Hash::from_u64(19))).is_some());
        assert!(c.get(&(Render::Node, Hash::from_u64(0))).is_none());
    }
}
