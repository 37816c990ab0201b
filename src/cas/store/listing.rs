//! Reading a store as a whole: a node's references, everything reachable from one, and every
//! node (or every node of one type) the store holds.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use super::{Node, Store};
use crate::cas::error::StoreError;
use crate::cas::id::Hash;

impl Store {
    /// The direct references of a node: its type (unless it is the reserved zero hash) and every
    /// `cas_ref` field of its payload.
    pub(crate) fn refs(&self, hash: Hash) -> Result<Vec<Hash>, StoreError> {
        let node = self.get(hash)?;
        self.node_refs(&node)
    }

    /// The direct references of a node already read.
    pub(crate) fn node_refs(&self, node: &Node) -> Result<Vec<Hash>, StoreError> {
        if node.type_hash == Hash::ZERO {
            return Ok(Vec::new()); // the bootstrap node: its type names no node
        }
        if node.is_schema() {
            return Ok(vec![Hash::META]);
        }
        let mut out = vec![node.type_hash];
        for r in self.schema(node.type_hash)?.refs(&node.payload) {
            if r != node.type_hash {
                out.push(r);
            }
        }
        Ok(out)
    }

    /// Every hash reachable from `start` (itself included), each once, breadth first.
    pub(crate) fn walk(&self, start: Hash) -> Result<Vec<Hash>, StoreError> {
        let mut seen = std::collections::HashSet::from([start]);
        let mut order = vec![start];
        let mut i = 0;
        while i < order.len() {
            for r in self.refs(order[i])? {
                if seen.insert(r) {
                    order.push(r);
                }
            }
            i += 1;
        }
        Ok(order)
    }

    /// Every node's hash (sorted): the remote's, or by scanning `cas/objects/`.
    pub(crate) fn list_all(&self) -> Result<Vec<Hash>, StoreError> {
        if let Some(remote) = &self.remote {
            return Ok(remote.list_all()?);
        }
        Ok(self
            .scan_objects()?
            .into_iter()
            .filter_map(|(_, hash)| hash)
            .collect())
    }

    /// Every file under `cas/objects/`, with its hash when the name is a valid node name.
    pub(crate) fn scan_objects(&self) -> Result<Vec<(PathBuf, Option<Hash>)>, StoreError> {
        let mut out = Vec::new();
        let mut fanouts: Vec<_> = read_dir_names(&self.objects)?;
        fanouts.sort();
        for fanout in fanouts {
            let dir = self.objects.join(&fanout);
            if !dir.is_dir() {
                out.push((dir, None));
                continue;
            }
            let mut names = read_dir_names(&dir)?;
            names.sort();
            for name in names {
                let hash = name
                    .strip_suffix(".json")
                    .filter(|_| fanout.len() == 2)
                    .and_then(|rest| Hash::parse(&format!("{fanout}{rest}")).ok())
                    .filter(|h| h.fanout() == fanout);
                out.push((dir.join(&name), hash));
            }
        }
        out.sort_by_key(|(_, h)| *h);
        Ok(out)
    }

    /// Nodes of one type: the remote's, or from the type index (only those whose files still
    /// exist).
    pub fn list_type(&self, type_hash: Hash) -> Result<Vec<Hash>, StoreError> {
        if let Some(remote) = &self.remote {
            return Ok(remote.list_type(type_hash)?);
        }
        let path = self.types.join(type_hash.to_string());
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(StoreError::io("cannot read type index", path)(e)),
        };
        let mut seen = std::collections::HashSet::new();
        Ok(text
            .lines()
            .filter_map(|l| Hash::parse(l.trim()).ok())
            .filter(|h| seen.insert(*h) && self.has(*h))
            .collect())
    }
}

/// The names in `dir`; none when it does not exist.
pub(super) fn read_dir_names(dir: &Path) -> Result<Vec<String>, StoreError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(StoreError::io("cannot list", dir)(e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(StoreError::io("cannot list", dir))?;
        if let Ok(name) = entry.file_name().into_string() {
            names.push(name);
        }
    }
    Ok(names)
}
