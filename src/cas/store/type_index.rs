//! The type index of a directory store: `cas/index/types/<type>`, the hashes of that type's
//! nodes one per line, so "all nodes of type T" needs no scan of every node.
//!
//! Appends are one short `O_APPEND` write under the store's shared lock (which a put holds from
//! finding its nodes until they are linked), so concurrent writers' lines stay whole; rewrites
//! (`reindex`, GC's pruning) hold the lock exclusively and replace each file atomically.
//!
//! Architecture Invariant: every node file is listed under its type. Lines are written ahead
//! of the node files they name (see `place` and `put_all`), so a line may name a node that
//! never appeared (a writer killed between the two): [`Store::list_type`] checks the file,
//! [`Store::check_index`] does not count such a line as a disagreement, and GC prunes it.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;

use super::listing::read_dir_names;
use super::{Store, parse_node_file};
use crate::cas::error::StoreError;
use crate::cas::id::Hash;
use crate::file_util::AtomicWrite;

impl Store {
    /// Rebuilds the type index from the node files. Returns how many nodes were indexed.
    pub(crate) fn reindex(&self) -> Result<usize, StoreError> {
        let _guard = self.lock_index(true)?;
        let mut by_type: HashMap<Hash, Vec<Hash>> = HashMap::new();
        let mut count = 0;
        for (path, hash) in self.scan_objects()? {
            let Some(hash) = hash else { continue };
            let Ok(bytes) = fs::read(&path) else { continue };
            // Unreadable or corrupt nodes are fsck's business; they are simply not indexed.
            if let Ok(node) = parse_node_file(hash, &path, &bytes) {
                by_type.entry(node.type_hash).or_default().push(hash);
                count += 1;
            }
        }
        self.write_index(&by_type)?;
        Ok(count)
    }

    /// Compares the type index with the node files: every intact node listed under its type,
    /// and nothing else listed. Returns the disagreements in words (empty when none).
    pub(crate) fn check_index(&self) -> Result<Vec<String>, StoreError> {
        let mut actual: HashMap<Hash, std::collections::BTreeSet<Hash>> = HashMap::new();
        for (path, hash) in self.scan_objects()? {
            let Some(hash) = hash else { continue };
            let Ok(bytes) = fs::read(&path) else { continue };
            if let Ok(node) = parse_node_file(hash, &path, &bytes) {
                actual.entry(node.type_hash).or_default().insert(hash);
            }
        }
        // Files present, whatever their state: a line naming no file is a write that never
        // finished (see the module doc), not a disagreement.
        let present: std::collections::HashSet<Hash> = self
            .scan_objects()?
            .into_iter()
            .filter_map(|(_, hash)| hash)
            .collect();
        let mut listed: HashMap<Hash, std::collections::BTreeSet<Hash>> = HashMap::new();
        for name in read_dir_names(&self.types)? {
            let Ok(type_hash) = Hash::parse(&name) else {
                continue;
            };
            let path = self.types.join(&name);
            let text = fs::read_to_string(&path)
                .map_err(StoreError::io("cannot read type index", &path))?;
            let entries = listed.entry(type_hash).or_default();
            entries.extend(text.lines().filter_map(|l| Hash::parse(l.trim()).ok()));
        }
        let empty = std::collections::BTreeSet::new();
        let mut types: Vec<Hash> = actual.keys().chain(listed.keys()).copied().collect();
        types.sort();
        types.dedup();
        let mut problems = Vec::new();
        for t in types {
            let (have, named) = (
                actual.get(&t).unwrap_or(&empty),
                listed.get(&t).unwrap_or(&empty),
            );
            let unlisted = have.difference(named).count();
            let extra = named
                .difference(have)
                .filter(|h| present.contains(h))
                .count();
            if unlisted > 0 {
                problems.push(format!(
                    "type index {t}: {unlisted} node(s) of that type are not listed"
                ));
            }
            if extra > 0 {
                problems.push(format!(
                    "type index {t}: lists {extra} node(s) that are damaged or of another type"
                ));
            }
        }
        Ok(problems)
    }

    /// Drops index entries whose node files are gone (after GC removed them, or a writer died
    /// before linking them). With a remote the index lists only this cache's files, so only
    /// files are looked for. The caller holds the store's exclusive lock.
    pub(crate) fn prune_index_locked(&self) -> Result<(), StoreError> {
        let mut by_type = HashMap::new();
        for name in read_dir_names(&self.types)? {
            if let Ok(t) = Hash::parse(&name) {
                let path = self.types.join(&name);
                let text = fs::read_to_string(&path)
                    .map_err(StoreError::io("cannot read type index", &path))?;
                let mut seen = std::collections::HashSet::new();
                let kept: Vec<Hash> = text
                    .lines()
                    .filter_map(|l| Hash::parse(l.trim()).ok())
                    .filter(|h| seen.insert(*h) && self.object_path(*h).is_file())
                    .collect();
                by_type.insert(t, kept);
            }
        }
        self.write_index(&by_type)
    }

    /// Replaces the whole index with `by_type` (caller holds the exclusive lock).
    fn write_index(&self, by_type: &HashMap<Hash, Vec<Hash>>) -> Result<(), StoreError> {
        for (type_hash, hashes) in by_type {
            let mut text = String::with_capacity(hashes.len() * 14);
            for h in hashes {
                text.push_str(&h.to_string());
                text.push('\n');
            }
            AtomicWrite::new(&self.types.join(type_hash.to_string()))
                .temp_in(&self.tmp)
                .without_fsync()
                .replace(text.as_bytes())?;
        }
        for name in read_dir_names(&self.types)? {
            let stale = Hash::parse(&name)
                .map(|t| !by_type.contains_key(&t))
                .unwrap_or(false);
            if stale {
                let path = self.types.join(&name);
                fs::remove_file(&path)
                    .map_err(StoreError::io("cannot remove type index", &path))?;
            }
        }
        Ok(())
    }

    /// Holds the store exclusively, as GC does while it marks and sweeps: no node is written,
    /// touched or indexed meanwhile. Released when the returned file is dropped.
    pub(crate) fn lock_exclusive(&self) -> Result<File, StoreError> {
        self.lock_index(true)
    }

    /// The store's shared hold without waiting: `None` while someone holds it exclusively
    /// (GC; and GC itself, fetching while it marks, must not wait for itself).
    pub(super) fn try_lock_shared(&self) -> Option<File> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.lock)
            .ok()?;
        file.try_lock_shared().ok()?;
        Some(file)
    }

    /// Takes the store lock (`cas/index/lock`), shared for node writes or exclusive for GC and
    /// index rewrites.
    pub(super) fn lock_index(&self, exclusive: bool) -> Result<File, StoreError> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.lock)
            .map_err(StoreError::io("cannot open index lock", &self.lock))?;
        let locked = if exclusive {
            file.lock()
        } else {
            file.lock_shared()
        };
        locked.map_err(StoreError::io("cannot lock", &self.lock))?;
        Ok(file)
    }

    /// Appends `(type, node)` entries, with one write per type. The caller holds the store's
    /// shared lock.
    pub(super) fn write_index_lines(&self, entries: &[(Hash, Hash)]) -> Result<(), StoreError> {
        if entries.is_empty() {
            return Ok(());
        }
        let mut types: Vec<Hash> = entries.iter().map(|(t, _)| *t).collect();
        types.sort();
        types.dedup();
        for type_hash in types {
            let path = self.types.join(type_hash.to_string());
            let lines: String = entries
                .iter()
                .filter(|(t, _)| *t == type_hash)
                .map(|(_, hash)| format!("{hash}\n"))
                .collect();
            let mut file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(StoreError::io("cannot open type index", &path))?;
            // One write of a few short lines: O_APPEND keeps concurrent writers' lines whole.
            file.write_all(lines.as_bytes())
                .map_err(StoreError::io("cannot append to type index", &path))?;
        }
        Ok(())
    }
}
