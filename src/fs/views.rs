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
//! size or mtime changes; big listings (`cas/`) are kept for at most [`LISTING_TTL`].

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::cas::{Hash, Store, StoreError};
use crate::engine::graph;
use crate::engine::index_files::{self, Registry, RegistryEntry};
use crate::engine::workflow::{Definition, Workflow};

use super::error::FsError;
use super::inode::Key;

mod threads;

pub use threads::{StepFile, ThreadFile, ThreadRef, parse_step_dir, step_dir_name};

/// How long a listing of a big directory (`cas/`) is reused.
pub const LISTING_TTL: Duration = Duration::from_secs(1);

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
    /// A step's file (keyed by the step hash, which fixes everything before it too).
    Step(StepFile),
    /// A thread's transcript at a head, with a status line (its hash).
    Transcript(u64),
}

/// Rendered bytes of an immutable file and the time of the node they come from.
#[derive(Debug, Clone)]
pub struct Content {
    pub bytes: Arc<[u8]>,
    pub time: SystemTime,
}

/// A directory listing: names and what they are, in display order.
pub type Listing = Vec<(String, Key)>;

/// The store seen as files.
pub struct Source {
    store: Arc<Store>,
    root: PathBuf,
    mounted_at: SystemTime,
    registry: Mutex<Option<(Stamp, Arc<Registry>)>>,
    rendered: Mutex<ByteCache>,
    listings: Mutex<HashMap<Key, (Instant, Arc<Listing>)>>,
    cas_mtime: Mutex<Option<(Instant, SystemTime)>>,
    threads: threads::Threads,
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

/// Milliseconds since the epoch as a time.
pub fn from_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

fn store_error(e: StoreError) -> FsError {
    match e {
        StoreError::NotFound(_) => FsError::NotFound,
        other => FsError::internal(other),
    }
}

impl Source {
    pub fn new(store: Store) -> Source {
        Source {
            root: store.root().to_path_buf(),
            store: Arc::new(store),
            mounted_at: SystemTime::now(),
            registry: Mutex::new(None),
            rendered: Mutex::new(ByteCache::default()),
            listings: Mutex::new(HashMap::new()),
            cas_mtime: Mutex::new(None),
            threads: threads::Threads::default(),
        }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The store, shared with background steps.
    pub fn shared_store(&self) -> Arc<Store> {
        self.store.clone()
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// When the mount started: the time of entries that have no better one.
    pub fn mounted_at(&self) -> SystemTime {
        self.mounted_at
    }

    /// The registry, re-read only when `registry.yaml` changed on disk.
    pub fn registry(&self) -> Result<Arc<Registry>, FsError> {
        let path = self.root.join("registry.yaml");
        let now = stamp(&path);
        let mut cached = lock(&self.registry);
        if let Some((s, reg)) = cached.as_ref()
            && Some(*s) == now
        {
            return Ok(reg.clone());
        }
        let reg = Arc::new(index_files::read_registry(&self.root).map_err(FsError::internal)?);
        if let Some(s) = now {
            *cached = Some((s, reg.clone()));
        }
        Ok(reg)
    }

    /// The registry entry of `name`, if registered.
    pub fn entry(&self, name: &str) -> Result<Option<RegistryEntry>, FsError> {
        Ok(self.registry()?.get(name).cloned())
    }

    /// When the registry last changed (the time of `workflows/`).
    pub fn registry_mtime(&self) -> SystemTime {
        stamp(&self.root.join("registry.yaml"))
            .map(|s| s.mtime)
            .unwrap_or(self.mounted_at)
    }

    /// When a node was last added to the store, as far as the type index tells (cached 1 s).
    pub fn cas_mtime(&self) -> SystemTime {
        let mut cached = lock(&self.cas_mtime);
        if let Some((at, t)) = *cached
            && at.elapsed() < LISTING_TTL
        {
            return t;
        }
        let dir = self.root.join("cas").join("index").join("types");
        let newest = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok()?.metadata().ok()?.modified().ok())
            .max()
            .unwrap_or(self.mounted_at);
        *cached = Some((Instant::now(), newest));
        newest
    }

    /// Whether a node exists.
    pub fn has(&self, hash: Hash) -> bool {
        self.store.has(hash)
    }

    /// `cas/<hash>`: the node as pretty JSON.
    pub fn node_json(&self, hash: Hash) -> Result<Content, FsError> {
        self.rendered(Render::Node, hash, || {
            let node = self.store.get(hash).map_err(store_error)?;
            Ok((pretty(&node.to_json())?, node.timestamp))
        })
    }

    /// `cas/schemas/<hash>.json`: a schema node's payload; `NotFound` for other nodes.
    pub fn schema_json(&self, hash: Hash) -> Result<Content, FsError> {
        self.rendered(Render::Schema, hash, || {
            let node = self.store.get(hash).map_err(store_error)?;
            if !node.is_schema() && hash != Hash::META {
                return Err(FsError::NotFound);
            }
            Ok((pretty(&node.payload)?, node.timestamp))
        })
    }

    /// A workflow version as YAML with its schemas inline.
    pub fn workflow_yaml(&self, hash: Hash) -> Result<Content, FsError> {
        self.rendered(Render::Yaml, hash, || {
            let node = self.store.get(hash).map_err(store_error)?;
            let def = Definition::load(&self.store, hash).map_err(FsError::internal)?;
            Ok((def.to_yaml().into_bytes(), node.timestamp))
        })
    }

    /// A workflow version's Mermaid flowchart.
    pub fn workflow_graph(&self, hash: Hash) -> Result<Content, FsError> {
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

    /// The entries of `cas/` (every node) or `cas/schemas/`, reused for [`LISTING_TTL`].
    pub fn cas_listing(&self, dir: &Key) -> Result<Arc<Listing>, FsError> {
        let mut cache = lock(&self.listings);
        if let Some((at, listing)) = cache.get(dir)
            && at.elapsed() < LISTING_TTL
        {
            return Ok(listing.clone());
        }
        let listing: Listing = match dir {
            Key::Cas => {
                let mut out = vec![("schemas".to_owned(), Key::CasSchemas)];
                for h in self.store.list_all().map_err(FsError::internal)? {
                    out.push((h.to_string(), Key::CasNode(h)));
                }
                out
            }
            Key::CasSchemas => {
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
                    .map(|h| (format!("{h}.json"), Key::CasSchema(h)))
                    .collect()
            }
            _ => return Err(FsError::NotDir),
        };
        let listing = Arc::new(listing);
        cache.insert(dir.clone(), (Instant::now(), listing.clone()));
        Ok(listing)
    }
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
