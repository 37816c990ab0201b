//! The on-disk store: immutable node files under `cas/objects/`, and the type index.
//!
//! Layout below the storage root:
//! ```text
//! cas/objects/<2 symbols>/<11 symbols>.json   one node per file, 0444, never rewritten
//! cas/tmp/                                     temp files; renamed into objects/ when complete
//! cas/index/types/<type hash>                  append-only list of node hashes of that type
//! cas/index/lock                               flock: shared for node writes, exclusive for GC
//!                                              and index rewrites
//! cas/index/pins                               byte-range locks: writers' pins (see `pins`)
//! ```
//!
//! Architecture Invariant: a node file appears only by an atomic no-clobber link/rename of a
//! complete, fsynced temp file, so a crash can leave garbage in `cas/tmp/` but never a partial
//! node. An existing node file is never replaced: a second put of the same content is a no-op
//! (it refreshes the file's mtime so GC's grace period protects it again), different content
//! under the same name is a collision.
//!
//! Architecture Invariant: every node write (finding the node, touching or writing its file,
//! its type index line) happens under the shared hold of `cas/index/lock`; GC sweeps under the
//! exclusive hold, so it never sees half of a write, never removes a temp file a put is about
//! to link, and never removes a node between a put finding it and refreshing its mtime.
//!
//! The type index is a cache, written ahead: a node's line is appended before its file is
//! linked into place, so a crash (or a failed link) can leave a line naming a node that never
//! appeared — which readers skip (`list_type` checks the file) and GC prunes — but never a node
//! that is not listed. `reindex` rebuilds it from the objects.

use std::collections::{HashMap, VecDeque};
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::builtin;
use super::canonical::{node_hash, to_canonical_bytes};
use super::error::StoreError;
use super::id::Hash;
use super::remote::RemoteNodes;
use super::schema::CompiledSchema;
use crate::file_util::{AtomicWrite, Created};

mod listing;
mod pins;
mod type_index;
mod write;

pub(crate) use pins::PIN_SLACK;

/// One node as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub hash: Hash,
    pub type_hash: Hash,
    pub payload: Value,
    /// Milliseconds since the epoch of the first write.
    pub timestamp: u64,
}

impl Node {
    /// Whether this is a schema node (its type is the bootstrap meta-schema).
    pub(crate) fn is_schema(&self) -> bool {
        self.type_hash == Hash::META
    }

    /// The node as the JSON object stored on disk.
    pub(crate) fn to_json(&self) -> Value {
        serde_json::json!({
            "payload": self.payload,
            "timestamp": self.timestamp,
            "type": self.type_hash.to_string(),
        })
    }
}

/// Where the store lives: `$UWF_STORAGE_ROOT`, else `$WORKFLOW_STORAGE_ROOT`, else `~/.uwf`.
pub(crate) fn default_root() -> Result<PathBuf, StoreError> {
    for var in ["UWF_STORAGE_ROOT", "WORKFLOW_STORAGE_ROOT"] {
        if let Some(value) = std::env::var_os(var)
            && !value.is_empty()
        {
            return Ok(PathBuf::from(value));
        }
    }
    match std::env::home_dir() {
        Some(home) if !home.as_os_str().is_empty() => Ok(home.join(".uwf")),
        _ => Err(StoreError::Root {
            path: PathBuf::from("~/.uwf"),
            reason: "no home directory; set UWF_STORAGE_ROOT".into(),
        }),
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A content-addressed store rooted at a directory. Cheap to share between threads.
#[derive(Debug)]
pub struct Store {
    root: PathBuf,
    objects: PathBuf,
    tmp: PathBuf,
    types: PathBuf,
    lock: PathBuf,
    pins_path: PathBuf,
    pins: Mutex<pins::Pins>,
    schemas: RwLock<HashMap<Hash, Arc<CompiledSchema>>>,
    /// The last nodes this handle wrote (or found already written by a put), newest last, each
    /// with when its file was last written or touched: what [`Store::get_written`] answers from
    /// memory, and what a put of the same node, or of a node referring to it, need not look for
    /// on disk while the file is young. Node files are immutable, so an entry never goes stale;
    /// the list is short, so memory stays bounded.
    written: Mutex<VecDeque<Written>>,
    durable: bool,
    /// The shared node table this directory caches, if the root is configured for one.
    remote: Option<Arc<dyn RemoteNodes>>,
}

/// A node this handle wrote or found written (see [`Store::get_written`]).
#[derive(Debug)]
struct Written {
    node: Node,
    /// When its file was last written or touched, by the monotonic clock and in ms since
    /// the epoch (to compare with a pin's start).
    at: Instant,
    at_ms: u64,
    /// The length of its file.
    size: u64,
}

/// How many recently written nodes a [`Store`] keeps in memory (a step writes at most five).
const WRITTEN: usize = 16;

/// How long after writing (or touching) a node file a put trusts it to be there without
/// looking. GC spares nodes younger than its grace period (a day by default), so a file this
/// young is not swept by a GC that keeps the grace period above this.
const TRUSTED: Duration = Duration::from_secs(10);

/// A node this handle wrote or touched at most this long before the start of its latest pin is
/// still protected by that pin (GC spares [`PIN_SLACK`] before the earliest pin, which is more);
/// an older one is touched again before it is trusted (see [`Store::find`]).
const TRUST_BEFORE_PIN_MS: u64 = 1000;

impl Store {
    /// Opens (creating on first use) the store at `root` and registers the built-in schemas.
    pub fn open(root: &Path) -> Result<Store, StoreError> {
        let cas = root.join("cas");
        let store = Store {
            root: root.to_path_buf(),
            objects: cas.join("objects"),
            tmp: cas.join("tmp"),
            types: cas.join("index").join("types"),
            lock: cas.join("index").join("lock"),
            pins_path: cas.join("index").join("pins"),
            pins: Mutex::new(pins::Pins::default()),
            schemas: RwLock::new(HashMap::new()),
            written: Mutex::new(VecDeque::with_capacity(WRITTEN)),
            durable: true,
            remote: None,
        };
        // Looked at before made: an existing directory costs one lookup instead of a refused
        // `mkdir` and a lookup.
        for dir in [&store.objects, &store.tmp, &store.types] {
            if dir.is_dir() {
                continue;
            }
            fs::create_dir_all(dir).map_err(|e| StoreError::Root {
                path: root.to_path_buf(),
                reason: format!("cannot create {}: {e}", dir.display()),
            })?;
        }
        if !store.has(Hash::META) {
            store.write_node(Hash::ZERO, &builtin::bootstrap_payload())?;
        }
        for b in builtin::all() {
            if !store.has(b.hash) {
                store.put(Hash::META, b.schema())?;
            }
        }
        Ok(store)
    }

    /// Makes this directory a local cache of `remote` (a PostgreSQL store): puts go there first,
    /// gets fetch from there what is not cached, listings come from there.
    pub(crate) fn with_remote(mut self, remote: Arc<dyn RemoteNodes>) -> Store {
        self.remote = Some(remote);
        self
    }

    /// Whether the node files under the root are a cache of a shared node table (the table
    /// holds the nodes, verified on the way in; a file may be missing, partial or rebuilt).
    pub fn files_are_cache(&self) -> bool {
        self.remote.is_some()
    }

    /// Turns off fsync of node files (for benchmarks and throwaway stores only).
    pub fn set_durable(&mut self, durable: bool) {
        self.durable = durable;
    }

    /// The storage root this store lives in.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// The path of a node's file.
    pub fn object_path(&self, hash: Hash) -> PathBuf {
        let symbols = hash.to_symbols();
        let text = std::str::from_utf8(&symbols).expect("alphabet is ASCII");
        let mut path = self.objects.join(&text[..2]);
        path.push(format!("{}.json", &text[2..]));
        path
    }

    /// Whether a node with this hash exists (no verification): a node file, or with a remote,
    /// a row there (a remote that cannot be reached counts as "no").
    pub(crate) fn has(&self, hash: Hash) -> bool {
        self.object_path(hash).is_file()
            || self
                .remote
                .as_ref()
                .is_some_and(|r| r.has(hash).unwrap_or(false))
    }

    /// Reads a node, verifying that its content still hashes to its name.
    pub fn get(&self, hash: Hash) -> Result<Node, StoreError> {
        self.get_sized(hash).map(|(node, _)| node)
    }

    /// [`Store::get`], with the length of the node's file.
    pub(crate) fn get_sized(&self, hash: Hash) -> Result<(Node, u64), StoreError> {
        let path = self.object_path(hash);
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == ErrorKind::NotFound => return self.fetch(hash),
            Err(e) => return Err(StoreError::io("cannot read node file", path)(e)),
        };
        match parse_node_file(hash, &path, &bytes) {
            // With a remote the file is a cache, written without fsync: one torn by a crash (or
            // damaged since) is replaced by the remote's verified node.
            Err(_) if self.remote.is_some() => {
                let _ = fs::remove_file(&path);
                self.fetch(hash)
            }
            result => result.map(|node| (node, bytes.len() as u64)),
        }
    }

    /// The length of node `hash`'s file: from memory for a node this handle wrote, else one
    /// `stat` (with a remote, a node with no local file is fetched first). Says nothing of
    /// its content: for readers that rely on a cache and check only that the nodes it stands
    /// for are still there, whole.
    pub(crate) fn size_of(&self, hash: Hash) -> Result<u64, StoreError> {
        match self.recent_size(hash) {
            Some(size) => Ok(size),
            None => self.file_len(hash),
        }
    }

    /// The length of node `hash`'s file as it is now (one `stat`; with a remote, a node with
    /// no local file is fetched first), whatever this handle remembers writing.
    pub(crate) fn file_len(&self, hash: Hash) -> Result<u64, StoreError> {
        let path = self.object_path(hash);
        match fs::metadata(&path) {
            Ok(meta) => Ok(meta.len()),
            Err(e) if e.kind() == ErrorKind::NotFound => self.fetch(hash).map(|(_, size)| size),
            Err(e) => Err(StoreError::io("cannot stat node file", path)(e)),
        }
    }

    /// A node with no local file: from the remote (verified there), leaving a file behind.
    fn fetch(&self, hash: Hash) -> Result<(Node, u64), StoreError> {
        let Some(remote) = &self.remote else {
            return Err(StoreError::NotFound(hash));
        };
        let node = remote.get(hash)?.ok_or(StoreError::NotFound(hash))?;
        let file_bytes = to_canonical_bytes(&serde_json::json!({
            "payload": node.payload,
            "timestamp": node.timestamp,
            "type": node.type_hash.to_string(),
        }));
        // A cache file: no fsync (a torn one fails its hash check and is fetched again). Only
        // while no GC holds the store (GC itself fetches while it marks): it is only a cache.
        let path = self.object_path(hash);
        if let Some(_hold) = self.try_lock_shared() {
            let _ = self.place(&path, &file_bytes, (node.type_hash, hash), false);
        }
        let node = parse_node_file(hash, &path, &file_bytes)?;
        Ok((node, file_bytes.len() as u64))
    }

    /// Links a new node file into place (the caller holds the store's shared lock): the temp
    /// file is written (and synced, when `durable`), the node's type index line appended, and
    /// only then the file linked, so a crash leaves at worst an index line for a node that
    /// never appeared, never a node the index does not list.
    fn place(
        &self,
        path: &Path,
        file_bytes: &[u8],
        (type_hash, hash): (Hash, Hash),
        durable: bool,
    ) -> Result<Created, StoreError> {
        let mut write = AtomicWrite::new(path).temp_in(&self.tmp).mode(0o444);
        if !durable {
            write = write.without_fsync();
        }
        let mut staged = write.stage(file_bytes)?;
        staged.sync()?;
        self.write_index_lines(&[(type_hash, hash)])?;
        Ok(staged.create_new()?)
    }

    /// A node this handle has just written (a step verifying and publishing what its own
    /// in-process agent wrote), from memory without reading and re-hashing its file; any other
    /// node as [`Store::get`] reads it.
    pub(crate) fn get_written(&self, hash: Hash) -> Result<Node, StoreError> {
        self.get_written_sized(hash).map(|(node, _)| node)
    }

    /// [`Store::get_written`], with the length of the node's file.
    pub(crate) fn get_written_sized(&self, hash: Hash) -> Result<(Node, u64), StoreError> {
        let found = {
            let written = self.written.lock().unwrap_or_else(|p| p.into_inner());
            let found = written.iter().rev().find(|w| w.node.hash == hash);
            found.map(|w| (w.node.clone(), w.size))
        };
        match found {
            Some(found) => Ok(found),
            None => self.get_sized(hash),
        }
    }

    /// The node `hash` from the recently written list, if its file was written or touched
    /// less than `young` ago, with when that was (ms since the epoch).
    fn recent(&self, hash: Hash, young: Duration) -> Option<(Node, u64)> {
        let written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        written
            .iter()
            .rev()
            .find(|w| w.node.hash == hash && w.at.elapsed() < young)
            .map(|w| (w.node.clone(), w.at_ms))
    }

    fn recent_size(&self, hash: Hash) -> Option<u64> {
        let written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        written
            .iter()
            .rev()
            .find(|w| w.node.hash == hash)
            .map(|w| w.size)
    }

    /// Whether node `hash` was written or touched by this handle moments ago.
    fn known(&self, hash: Hash) -> bool {
        let written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        written
            .iter()
            .any(|w| w.node.hash == hash && w.at.elapsed() < TRUSTED)
    }

    fn remember_written(&self, node: Node, size: u64) {
        let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        if written.len() == WRITTEN {
            written.pop_front();
        }
        written.push_back(Written {
            node,
            at: Instant::now(),
            at_ms: now_ms(),
            size,
        });
    }

    /// Reads only a node's payload.
    pub(crate) fn get_payload(&self, hash: Hash) -> Result<Value, StoreError> {
        self.get(hash).map(|n| n.payload)
    }

    /// The compiled schema of a schema node (cached).
    pub(crate) fn schema(&self, hash: Hash) -> Result<Arc<CompiledSchema>, StoreError> {
        if let Some(found) = self.read_cache().get(&hash) {
            return Ok(found.clone());
        }
        // A built-in schema is this binary's own payload (its hash names that content): no
        // need to read its node, and most have a native check instead of a compiled validator.
        if let Some(b) = builtin::by_hash(hash) {
            let compiled = match builtin::accepts(b.name) {
                Some(accepts) => CompiledSchema::builtin(b.schema(), accepts),
                None => CompiledSchema::compile_stored(b.schema())
                    .map_err(|violations| StoreError::InvalidSchema { violations })?,
            };
            return Ok(self.cache_schema(hash, compiled));
        }
        let node = match self.get(hash) {
            Ok(node) => node,
            Err(StoreError::NotFound(_)) => return Err(StoreError::UnknownType(hash)),
            Err(e) => return Err(e),
        };
        if !node.is_schema() {
            return Err(StoreError::NotASchema(hash));
        }
        let compiled = CompiledSchema::compile_stored(&node.payload)
            .map_err(|violations| StoreError::InvalidSchema { violations })?;
        Ok(self.cache_schema(hash, compiled))
    }

    fn read_cache(&self) -> std::sync::RwLockReadGuard<'_, HashMap<Hash, Arc<CompiledSchema>>> {
        // A poisoned cache only means another thread panicked mid-insert of a complete value.
        self.schemas.read().unwrap_or_else(|p| p.into_inner())
    }

    fn cache_schema(&self, hash: Hash, compiled: CompiledSchema) -> Arc<CompiledSchema> {
        let compiled = Arc::new(compiled);
        let mut cache = self.schemas.write().unwrap_or_else(|p| p.into_inner());
        cache.entry(hash).or_insert(compiled).clone()
    }

    /// The temp directory (for GC's clean-up of abandoned temp files).
    pub(crate) fn tmp_dir(&self) -> &Path {
        &self.tmp
    }
}

/// Parses and verifies the bytes of a node file.
pub(crate) fn parse_node_file(hash: Hash, path: &Path, bytes: &[u8]) -> Result<Node, StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt {
        hash,
        path: path.to_path_buf(),
        reason,
    };
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| corrupt(format!("not JSON: {e}")))?;
    let Value::Object(mut fields) = value else {
        return Err(corrupt("not a JSON object".into()));
    };
    let type_hash = fields
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| corrupt("no `type` string".into()))
        .and_then(|t| Hash::parse(t).map_err(|e| corrupt(e.to_string())))?;
    let payload = fields
        .remove("payload")
        .ok_or_else(|| corrupt("no `payload`".into()))?;
    let timestamp = fields.get("timestamp").and_then(Value::as_u64).unwrap_or(0);
    let actual = node_hash(type_hash, &payload);
    if actual != hash {
        return Err(StoreError::HashMismatch {
            hash,
            actual,
            path: path.to_path_buf(),
        });
    }
    Ok(Node {
        hash,
        type_hash,
        payload,
        timestamp,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use serde_json::json;
    use std::fs::File;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        (dir, store)
    }

    #[test]
    fn built_in_schemas_come_from_the_binary_not_their_node_files() {
        let (dir, _) = store();
        // A handle that found the built-ins on disk (one that wrote them keeps them compiled).
        let store = Store::open(dir.path()).unwrap();
        let text = builtin::hash_of("text");
        std::fs::remove_file(store.object_path(text)).unwrap();
        // Validated by the binary's own copy of the schema: its node file is not needed.
        let hello = store.put(text, &json!("hello")).unwrap();
        assert_eq!(store.get_payload(hello).unwrap(), json!("hello"));
        // What the native check turns down still gets the validator's verdict.
        match store.put(text, &json!(7)) {
            Err(StoreError::InvalidPayload { violations, .. }) => {
                assert!(!violations.is_empty())
            }
            other => panic!("a number is not a text node: {other:?}"),
        }
    }

    #[test]
    fn a_node_just_written_is_served_from_memory_as_its_file_reads() {
        let (_dir, store) = store();
        let schema = store.put(Hash::META, &json!({"type": "object"})).unwrap();
        // Keys out of order and an integral float: the file holds them canonically.
        let payload: Value = serde_json::from_str(r#"{"z": 1.0, "a": [2.0, "x"]}"#).unwrap();
        let hash = store.put(schema, &payload).unwrap();
        let from_file = store.get(hash).unwrap();
        // Removing the file shows the answer comes from memory.
        std::fs::remove_file(store.object_path(hash)).unwrap();
        let kept = store.get_written(hash).unwrap();
        assert_eq!(kept, from_file);
        assert_eq!(
            serde_json::to_string(&kept.payload).unwrap(),
            serde_json::to_string(&from_file.payload).unwrap()
        );
        // A node this handle did not write is read from its file.
        let other = Store::open(_dir.path()).unwrap();
        assert!(matches!(
            other.get_written(hash),
            Err(StoreError::NotFound(h)) if h == hash
        ));
    }

    #[test]
    fn a_put_trusts_a_node_this_handle_wrote_moments_ago_without_looking() {
        let (dir, store) = store();
        let text = builtin::hash_of("text");
        let a = store.put(text, &json!("a")).unwrap();
        // The file is gone behind the handle's back (nothing does this but a GC with no grace
        // period): a put of the same node, or of one referring to it, does not look for it.
        std::fs::remove_file(store.object_path(a)).unwrap();
        assert_eq!(store.put(text, &json!("a")).unwrap(), a);
        assert!(!store.has(a));
        let detail = json!({"raw": a.to_string(), "body": null, "exitCode": 0,
            "durationMs": 0, "stderrTail": ""});
        store.put(builtin::hash_of("detail"), &detail).unwrap();
        // Another handle looks, and finds the reference missing.
        let other = Store::open(dir.path()).unwrap();
        assert!(matches!(
            other.put(builtin::hash_of("detail"), &json!({"raw": a.to_string(), "body": null,
                "exitCode": 1, "durationMs": 0, "stderrTail": ""})),
            Err(StoreError::MissingRef { target, .. }) if target == a
        ));
    }

    #[test]
    fn a_different_payload_under_an_existing_name_is_a_collision() {
        // A real XXH64 collision is out of reach in a test, so present the check with one: the
        // node file for `a` exists, and a put claims that name for other content.
        let (_dir, store) = store();
        let text = builtin::hash_of("text");
        let a = store.put(text, &json!("a")).unwrap();
        let err = store
            .confirm_existing(a, text, &json!("b"), &store.object_path(a))
            .unwrap_err();
        assert!(
            matches!(err, StoreError::Collision { hash, .. } if hash == a),
            "{err}"
        );
        assert!(err.to_string().contains("hash collision"));
        // The same through the one-descriptor path a put takes for a file it finds.
        let err = store
            .confirm_if_present(a, text, &json!("b"), &store.object_path(a))
            .unwrap_err();
        assert!(matches!(err, StoreError::Collision { hash, .. } if hash == a));
        // The original is untouched.
        assert_eq!(store.get(a).unwrap().payload, json!("a"));
    }

    #[test]
    fn a_put_of_a_node_already_on_disk_reads_it_once_refreshes_it_and_remembers_it() {
        let (dir, store) = store();
        let text = builtin::hash_of("text");
        let a = store.put(text, &json!("a")).unwrap();
        let path = store.object_path(a);
        let old = SystemTime::now() - Duration::from_secs(3 * 86_400);
        File::open(&path).unwrap().set_modified(old).unwrap();
        // Another handle (another process) puts the same node: the file is kept, made young
        // for GC's grace period, and served from memory from then on.
        let other = Store::open(dir.path()).unwrap();
        assert_eq!(other.put(text, &json!("a")).unwrap(), a);
        let touched = fs::metadata(&path).unwrap().modified().unwrap();
        assert!(
            touched > old + Duration::from_secs(86_400),
            "mtime not refreshed"
        );
        fs::remove_file(&path).unwrap();
        assert_eq!(other.get_written(a).unwrap().payload, json!("a"));
        // A file under that name whose content hashes to something else (damage), found on
        // disk by a third handle: refused, not taken for the node.
        let b = store.put(text, &json!("b")).unwrap();
        fs::remove_file(store.object_path(b)).unwrap();
        let bytes = fs::read(store.object_path(store.put(text, &json!("c")).unwrap())).unwrap();
        fs::write(store.object_path(b), bytes).unwrap();
        let third = Store::open(dir.path()).unwrap();
        let err = third.put(text, &json!("b")).unwrap_err();
        assert!(
            matches!(err, StoreError::HashMismatch { hash, .. } if hash == b),
            "{err}"
        );
        // A missing file is written again.
        assert_eq!(third.put(text, &json!("a")).unwrap(), a);
        assert_eq!(third.get(a).unwrap().payload, json!("a"));
    }

    /// A detail node's payload naming `raw` as its raw output.
    fn detail_of(raw: Hash) -> Value {
        json!({"raw": raw.to_string(), "body": null, "exitCode": 0, "durationMs": 0,
            "stderrTail": ""})
    }

    #[test]
    fn put_all_writes_what_puts_one_by_one_would_in_order() {
        let (dir, store) = store();
        let text = builtin::hash_of("text");
        let detail_type = builtin::hash_of("detail");
        let (raw, other) = (json!("raw output"), json!("other"));
        let detail = detail_of(node_hash(text, &raw));
        // `detail` refers to `raw`, which is put with it; `raw` comes twice.
        let nodes = [
            (text, &raw),
            (detail_type, &detail),
            (text, &raw),
            (text, &other),
        ];
        let hashes = store.put_all(&nodes).unwrap();
        let alone = tempfile::tempdir().unwrap();
        let one_by_one = Store::open(alone.path()).unwrap();
        let expected: Vec<Hash> = nodes
            .iter()
            .map(|(t, p)| one_by_one.put(*t, p).unwrap())
            .collect();
        assert_eq!(hashes, expected);
        // On disk, read by another handle, and listed in the type index.
        let reader = Store::open(dir.path()).unwrap();
        for ((_, payload), hash) in nodes.iter().zip(&hashes) {
            assert_eq!(&reader.get(*hash).unwrap().payload, *payload);
        }
        assert!(reader.list_type(detail_type).unwrap().contains(&hashes[1]));
        let texts = reader.list_type(text).unwrap();
        assert!(texts.contains(&hashes[0]) && texts.contains(&hashes[3]));
        assert_eq!(reader.check_index().unwrap(), Vec::<String>::new());
        // No temp file left behind.
        assert_eq!(fs::read_dir(store.tmp_dir()).unwrap().count(), 0);
        // Put again, all are found: the same hashes.
        assert_eq!(reader.put_all(&nodes).unwrap(), hashes);
    }

    #[test]
    fn put_all_stops_at_an_invalid_node_keeping_those_before_it() {
        let (_dir, store) = store();
        let text = builtin::hash_of("text");
        let detail_type = builtin::hash_of("detail");
        let (a, c) = (json!("a"), json!("c"));
        let missing = node_hash(text, &json!("never put"));
        let dangling = detail_of(missing);
        let not_text = json!(7);
        for (bad, expect_missing) in [(&dangling, true), (&not_text, false)] {
            let bad_type = if expect_missing { detail_type } else { text };
            let (at, err) = store
                .put_all(&[(text, &a), (bad_type, bad), (text, &c)])
                .unwrap_err();
            assert_eq!(at, 1, "{err}");
            if expect_missing {
                assert!(matches!(err, StoreError::MissingRef { target, .. } if target == missing));
            } else {
                assert!(matches!(err, StoreError::InvalidPayload { .. }), "{err}");
            }
            assert!(store.has(node_hash(text, &a)));
            assert!(!store.has(node_hash(text, &c)));
        }
    }

    #[test]
    fn concurrent_puts_of_the_same_node_agree() {
        let (_dir, store) = store();
        let text = builtin::hash_of("text");
        let hashes: Vec<Hash> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| s.spawn(|| store.put(text, &json!("same")).unwrap()))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(hashes.windows(2).all(|w| w[0] == w[1]));
        assert_eq!(store.list_type(text).unwrap(), vec![hashes[0]]);
        assert_eq!(
            std::fs::read_dir(&store.tmp).unwrap().count(),
            0,
            "temp files left behind"
        );
    }

    #[test]
    fn reopening_keeps_builtins_stable() {
        let (dir, store) = store();
        let before = store.list_all().unwrap();
        drop(store);
        let again = Store::open(dir.path()).unwrap();
        assert_eq!(again.list_all().unwrap(), before);
        assert_eq!(before.len(), builtin::all().len() + 1);
    }
}
