//! Writing nodes: a validated put, a batch of puts, finding a copy already stored, the
//! no-clobber write of a new file, and nodes copied from another store as they were there.
//!
//! Every write here holds `cas/index/lock` shared and follows the invariants the store's
//! module page states: a node file appears only by linking a complete temp file, and its
//! type index line is appended first.

use std::fs::File;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use serde_json::Value;

use super::{Node, Store, TRUST_BEFORE_PIN_MS, TRUSTED, now_ms, parse_node_file};
use crate::cas::builtin;
use crate::cas::canonical::{node_bytes, node_hash, to_canonical_bytes};
use crate::cas::error::StoreError;
use crate::cas::id::Hash;
use crate::cas::schema::CompiledSchema;
use crate::file_util::{AtomicWrite, Created};

impl Store {
    /// Puts a node after validating it; returns its hash. Idempotent.
    ///
    /// A schema node (type [`Hash::META`]) must be a valid JSON Schema; a data node's type must
    /// be a stored schema node, its payload must validate against it, and every `cas_ref` field
    /// must name an existing node.
    pub fn put(&self, type_hash: Hash, payload: &Value) -> Result<Hash, StoreError> {
        if type_hash == Hash::ZERO {
            if *payload == builtin::bootstrap_payload() {
                return self.write_node(type_hash, payload);
            }
            return Err(StoreError::Reserved);
        }
        if type_hash == Hash::META {
            let compiled = CompiledSchema::compile(payload)
                .map_err(|violations| StoreError::InvalidSchema { violations })?;
            let hash = self.write_node(type_hash, payload)?;
            self.cache_schema(hash, compiled);
            return Ok(hash);
        }
        self.check_data(type_hash, payload, &[])?;
        self.write_node(type_hash, payload)
    }

    /// Checks a data node as [`Store::put`] does before writing it: its payload against its
    /// type, and that every node it refers to exists (or is among `coming`, nodes put with it).
    fn check_data(
        &self,
        type_hash: Hash,
        payload: &Value,
        coming: &[Hash],
    ) -> Result<(), StoreError> {
        let schema = self.schema(type_hash)?;
        schema
            .validate(payload)
            .map_err(|violations| StoreError::InvalidPayload {
                type_hash,
                violations,
            })?;
        for (pointer, target) in schema.located_refs(payload) {
            if !coming.contains(&target) && !self.known(target) && !self.has(target) {
                return Err(StoreError::MissingRef { pointer, target });
            }
        }
        Ok(())
    }

    /// Puts data nodes (not schemas) as [`Store::put`] would one after another, in order — a
    /// node may refer to one before it — but with the disk writes of the new ones overlapping:
    /// each is staged (written and its writeback started), then each synced, then each linked
    /// in place, in order. A node file still appears only complete and synced, and only after the
    /// nodes before it. On an invalid node, those before it are written and the error comes
    /// with the failing node's index.
    pub(crate) fn put_all(
        &self,
        nodes: &[(Hash, &Value)],
    ) -> Result<Vec<Hash>, (usize, StoreError)> {
        let schemas = nodes
            .iter()
            .any(|(t, _)| *t == Hash::ZERO || *t == Hash::META);
        // With a remote (node files are an unsynced cache) or without durability there is no
        // sync to overlap; schema nodes take `put`'s own path.
        if schemas || self.remote.is_some() || !self.durable {
            return nodes
                .iter()
                .enumerate()
                .map(|(i, (t, p))| self.put(*t, p).map_err(|e| (i, e)))
                .collect();
        }
        // Held until every node is in place: GC waits (see the module doc).
        let _hold = self.lock_index(false).map_err(|e| (0, e))?;
        let mut hashes = Vec::with_capacity(nodes.len());
        let mut new = Vec::new();
        let mut failed = None;
        for (i, (type_hash, payload)) in nodes.iter().enumerate() {
            let found = self
                .check_data(*type_hash, payload, &hashes)
                .and_then(|()| self.find(*type_hash, payload));
            match found {
                Ok(Found::Present(hash)) => hashes.push(hash),
                Ok(Found::Absent { hash, path }) => {
                    if !hashes.contains(&hash) {
                        new.push((i, hash, path, new_file_bytes(*type_hash, payload)));
                    }
                    hashes.push(hash);
                }
                Err(e) => {
                    failed = Some((i, e));
                    break;
                }
            }
        }
        // All staged first, so that their writes go to disk together; then all synced before
        // any is linked (see `Staged::sync`).
        let mut staged = Vec::with_capacity(new.len());
        for (i, _, path, bytes) in &new {
            let write = AtomicWrite::new(path).temp_in(&self.tmp).mode(0o444);
            staged.push(write.stage(bytes).map_err(|e| (*i, e.into()))?);
        }
        for ((i, ..), write) in new.iter().zip(&mut staged) {
            write.sync().map_err(|e| (*i, e.into()))?;
        }
        // The type index lines of all of them in one append, before any is linked: a crash
        // from here on leaves lines for nodes that may not be there (readers check), never a
        // node that is not listed.
        let lines: Vec<(Hash, Hash)> = new
            .iter()
            .map(|(i, hash, ..)| (nodes[*i].0, *hash))
            .collect();
        if let Err(e) = self.write_index_lines(&lines) {
            let at = new.first().map_or(0, |(i, ..)| *i);
            return Err((at, e));
        }
        // Then linked in order.
        for ((i, hash, path, bytes), write) in new.iter().zip(staged) {
            let (type_hash, payload) = nodes[*i];
            let done = match write.create_new() {
                Ok(Created::New) => {
                    self.remember_file(*hash, path, bytes);
                    Ok(())
                }
                // Another writer won the race.
                Ok(Created::Existed) => self
                    .confirm_existing(*hash, type_hash, payload, path)
                    .map(drop),
                Err(e) => Err(e.into()),
            };
            if let Err(e) = done {
                failed = Some((*i, e));
                break;
            }
        }
        match failed {
            Some(failure) => Err(failure),
            None => Ok(hashes),
        }
    }

    /// Whether node `(type_hash, payload)` is stored already (confirmed as a put of it would be:
    /// same content, mtime refreshed), or where its file goes.
    fn find(&self, type_hash: Hash, payload: &Value) -> Result<Found, StoreError> {
        let hash = node_hash(type_hash, payload);
        let path = self.object_path(hash);
        // Written or touched by this handle moments ago (a step's raw output or output that
        // repeats the last one): its file is there and young; only the content is compared.
        if let Some((existing, at_ms)) = self.recent(hash, TRUSTED) {
            same_content(&existing, type_hash, payload, &path)?;
            if at_ms + TRUST_BEFORE_PIN_MS >= self.latest_pin() {
                return Ok(Found::Present(hash));
            }
            // Before the pin this writer holds now: unless it is reachable, a GC may have
            // taken it since, or may take it before the head naming it is published. Touched
            // (one call), it is young for the pin; gone, it is written again.
            return match touch(&path) {
                Ok(()) => {
                    self.refreshed(hash);
                    Ok(Found::Present(hash))
                }
                Err(e) if e.kind() == ErrorKind::NotFound => Ok(Found::Absent { hash, path }),
                Err(e) => Err(StoreError::io("cannot touch node file", path)(e)),
            };
        }
        Ok(
            match self.confirm_if_present(hash, type_hash, payload, &path)? {
                Some(hash) => Found::Present(hash),
                None => Found::Absent { hash, path },
            },
        )
    }

    /// Makes node `hash`'s file young (touches it) under the store's shared lock, as a put of
    /// it would: a writer holding a pin that is about to publish a head naming a node it did
    /// not put (a fork of a step no head reaches) keeps it from GC this way. With a remote,
    /// a node with no local file is in the table, whose GC this does not reach.
    pub(crate) fn keep(&self, hash: Hash) -> Result<(), StoreError> {
        let _hold = self.lock_index(false)?;
        let path = self.object_path(hash);
        match touch(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => {
                if self.remote.is_some() && self.has(hash) {
                    return Ok(());
                }
                Err(StoreError::NotFound(hash))
            }
            Err(e) => Err(StoreError::io("cannot touch node file", path)(e)),
        }
    }

    /// Notes that the file of node `hash`, in the recently written list, was touched now.
    fn refreshed(&self, hash: Hash) {
        let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(w) = written.iter_mut().rev().find(|w| w.node.hash == hash) {
            w.at = Instant::now();
            w.at_ms = now_ms();
        }
    }

    /// Keeps a node just written in memory, as a read of its file would return it (canonical
    /// key order and numbers), which is what the chain cache and the moderator context are
    /// made from.
    fn remember_file(&self, hash: Hash, path: &Path, file_bytes: &[u8]) {
        if let Ok(node) = parse_node_file(hash, path, file_bytes) {
            self.remember_written(node, file_bytes.len() as u64);
        }
    }

    pub(super) fn write_node(&self, type_hash: Hash, payload: &Value) -> Result<Hash, StoreError> {
        // Held until the node is in place: GC waits (see the module doc).
        let _hold = self.lock_index(false)?;
        let (hash, path) = match self.find(type_hash, payload)? {
            Found::Present(hash) => return Ok(hash),
            Found::Absent { hash, path } => (hash, path),
        };
        // The shared table first: a local file then always stands for a node every machine
        // can read (see `cas::remote`).
        if let Some(remote) = &self.remote {
            remote.put(type_hash, payload).map_err(|e| {
                if e.collision {
                    StoreError::Collision {
                        hash,
                        path: path.clone(),
                    }
                } else {
                    StoreError::Remote(e)
                }
            })?;
        }
        let file_bytes = new_file_bytes(type_hash, payload);
        // With a remote the node is already durable there; the file is a cache (see `get`).
        let durable = self.durable && self.remote.is_none();
        if self.place(&path, &file_bytes, (type_hash, hash), durable)? == Created::Existed {
            // Another writer won the race.
            return self.confirm_existing(hash, type_hash, payload, &path);
        }
        self.remember_file(hash, &path, &file_bytes);
        Ok(hash)
    }

    /// A put of a node whose file may be there already (a step whose output repeats an earlier
    /// one, a copy into a store that has the node): `None` when there is no file, for the
    /// caller to write it; else [`Store::confirm_existing`]'s answer, through one descriptor
    /// that both reads the file and refreshes its mtime (half the path lookups and a third of
    /// the system calls of looking, reading and touching by path).
    pub(super) fn confirm_if_present(
        &self,
        hash: Hash,
        type_hash: Hash,
        payload: &Value,
        path: &Path,
    ) -> Result<Option<Hash>, StoreError> {
        use std::io::Read;
        let mut file = match File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StoreError::io("cannot read node file", path)(e)),
        };
        // Node files are small: a buffer of a page reads most in one call, and `read_to_end`
        // grows it for the rest (without the size lookup `File`'s own `read_to_end` makes).
        let mut bytes = Vec::with_capacity(4096);
        (&mut file)
            .take(u64::MAX)
            .read_to_end(&mut bytes)
            .map_err(StoreError::io("cannot read node file", path))?;
        let existing = match parse_node_file(hash, path, &bytes) {
            Ok(node) => node,
            // With a remote the file is a cache: a damaged one is replaced from there, as
            // `get` does.
            Err(_) if self.remote.is_some() => {
                drop(file);
                return self
                    .confirm_existing(hash, type_hash, payload, path)
                    .map(Some);
            }
            Err(e) => return Err(e),
        };
        same_content(&existing, type_hash, payload, path)?;
        // Refresh the mtime so a GC running now sees this node as young and keeps it.
        let _ = file.set_modified(SystemTime::now());
        drop(file);
        let size = bytes.len() as u64;
        self.confirmed(type_hash, payload, existing, size).map(Some)
    }

    /// A put found the file already there: same content is success, anything else a collision.
    pub(super) fn confirm_existing(
        &self,
        hash: Hash,
        type_hash: Hash,
        payload: &Value,
        path: &Path,
    ) -> Result<Hash, StoreError> {
        let (existing, size) = self.get_sized(hash)?;
        same_content(&existing, type_hash, payload, path)?;
        // Refresh the mtime so a GC running now sees this node as young and keeps it.
        if let Ok(file) = File::open(path) {
            let _ = file.set_modified(SystemTime::now());
        }
        self.confirmed(type_hash, payload, existing, size)
    }

    /// The end of a put that found its node already there, with the same content.
    fn confirmed(
        &self,
        type_hash: Hash,
        payload: &Value,
        existing: Node,
        size: u64,
    ) -> Result<Hash, StoreError> {
        let hash = existing.hash;
        // With a remote, put it there as well (write-once: the same content is a no-op), so
        // the remote's GC spares it the same way (`PgStore::put_node` marks a row over an hour
        // old as written now).
        if let Some(remote) = &self.remote {
            remote.put(type_hash, payload)?;
        }
        self.remember_written(existing, size);
        Ok(hash)
    }

    // ── `uwf store copy` (engine/upkeep/store_copy/) ────────────────────────────────────────

    /// Writes a node copied from another store as it was there, its timestamp included, without
    /// schema validation (the copy verifies hashes, and `cas fsck` the rest): nodes arrive in
    /// hash order, not in the order their references need. Returns whether the file was
    /// created; a file already there with the same content is kept (and is success), different
    /// content is a collision, and a node whose content does not hash to its `hash` is refused.
    pub(crate) fn put_copied(&self, node: &Node) -> Result<bool, StoreError> {
        let path = self.object_path(node.hash);
        let actual = node_hash(node.type_hash, &node.payload);
        if actual != node.hash {
            return Err(StoreError::HashMismatch {
                hash: node.hash,
                actual,
                path,
            });
        }
        let _hold = self.lock_index(false)?;
        if self
            .confirm_if_present(node.hash, node.type_hash, &node.payload, &path)?
            .is_some()
        {
            return Ok(false);
        }
        let file_bytes = to_canonical_bytes(&serde_json::json!({
            "payload": node.payload,
            "timestamp": node.timestamp,
            "type": node.type_hash.to_string(),
        }));
        let placed = self.place(
            &path,
            &file_bytes,
            (node.type_hash, node.hash),
            self.durable,
        )?;
        if placed == Created::Existed {
            self.confirm_existing(node.hash, node.type_hash, &node.payload, &path)?;
            return Ok(false);
        }
        Ok(true)
    }
}

/// Sets a file's access and modification times to now, by path (one `utimensat`).
fn touch(path: &Path) -> std::io::Result<()> {
    use nix::sys::stat::{UtimensatFlags, utimensat};
    use nix::sys::time::TimeSpec;
    utimensat(
        nix::fcntl::AT_FDCWD,
        path,
        &TimeSpec::UTIME_NOW,
        &TimeSpec::UTIME_NOW,
        UtimensatFlags::FollowSymlink,
    )
    .map_err(std::io::Error::from)
}

/// What [`Store::find`] found.
enum Found {
    /// Stored (this handle's put of it is done).
    Present(Hash),
    /// Not stored: its file goes at `path`.
    Absent { hash: Hash, path: PathBuf },
}

/// A put of `(type_hash, payload)` found `existing` under its name: the same content is that
/// node, different content a hash collision.
fn same_content(
    existing: &Node,
    type_hash: Hash,
    payload: &Value,
    path: &Path,
) -> Result<(), StoreError> {
    if node_bytes(existing.type_hash, &existing.payload) != node_bytes(type_hash, payload) {
        return Err(StoreError::Collision {
            hash: existing.hash,
            path: path.to_path_buf(),
        });
    }
    Ok(())
}

/// The bytes of a new node file: the node, and now as the time of its first write.
fn new_file_bytes(type_hash: Hash, payload: &Value) -> Vec<u8> {
    to_canonical_bytes(&serde_json::json!({
        "payload": payload,
        "timestamp": now_ms(),
        "type": type_hash.to_string(),
    }))
}
