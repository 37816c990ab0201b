//! The `cas/` subtree: `cas/<hash>` (every node as pretty JSON) and `cas/schemas/<hash>.json`
//! (every schema's payload) — which entries exist, their listings, attributes and bytes.
//!
//! Nodes are immutable, so their files are [`Caching::Immutable`]; the two directories change
//! when nodes are written or collected, which no index file records, so their listings are made
//! afresh once per second and carry the start of that second as their mtime
//! ([`crate::fs::views::Source::cas_mtime`]).
//!
//! Architecture Invariant: an entry is listed exactly when [`Tree::cas_child`] finds it (both
//! ask the store), and [`Tree::cas_attr`]'s size is the length of [`Tree::cas_content`].

use std::sync::Arc;

use super::Tree;
use crate::cas::Hash;
use crate::fs::attr::{Attr, Caching};
use crate::fs::error::FsError;
use crate::fs::inode::{CasKey, Ino, Key, hash_name};
use crate::fs::views::Listing;

impl Tree {
    /// The entry called `name` in a directory of `cas/`.
    pub(super) fn cas_child(&self, dir: &CasKey, name: &str) -> Result<Option<Key>, FsError> {
        let key = match dir {
            CasKey::Root => {
                if name == "schemas" {
                    Some(CasKey::Schemas)
                } else {
                    Hash::parse(name)
                        .ok()
                        .filter(|h| self.source.has(*h))
                        .map(CasKey::Node)
                }
            }
            CasKey::Schemas => hash_name(name, ".json")
                .filter(|h| self.source.schema_json(*h).is_ok())
                .map(CasKey::Schema),
            _ => return Err(FsError::NotDir),
        };
        Ok(key.map(Key::Cas))
    }

    /// Whether a name missing from a directory of `cas/` can never appear there: only names
    /// that are no hash.
    pub(super) fn cas_never_appears(dir: &CasKey, name: &str) -> bool {
        match dir {
            CasKey::Root => Hash::parse(name).is_err(),
            CasKey::Schemas => hash_name(name, ".json").is_none(),
            _ => false,
        }
    }

    /// The entries of a directory of `cas/` (made by the store's listing, reused for a second).
    pub(super) fn cas_listing(&self, dir: &CasKey) -> Result<Arc<Listing>, FsError> {
        self.source.cas_listing(dir)
    }

    /// Attributes of an entry of `cas/`.
    pub(super) fn cas_attr(&self, ino: Ino, key: &CasKey) -> Result<Attr, FsError> {
        let owner = self.owner();
        Ok(match key {
            CasKey::Root | CasKey::Schemas => {
                Attr::dir(ino, owner, 0o555, self.source.cas_mtime(), Caching::Mutable)
            }
            CasKey::Node(h) => {
                let c = self.source.node_json(*h)?;
                let size = c.bytes.len() as u64;
                Attr::file(ino, owner, size, 0o444, c.time, Caching::Immutable)
            }
            CasKey::Schema(h) => {
                let c = self.source.schema_json(*h)?;
                let size = c.bytes.len() as u64;
                Attr::file(ino, owner, size, 0o444, c.time, Caching::Immutable)
            }
        })
    }

    /// The bytes of a file of `cas/`.
    pub(super) fn cas_content(&self, key: &CasKey) -> Result<Arc<[u8]>, FsError> {
        Ok(match key {
            CasKey::Node(h) => self.source.node_json(*h)?.bytes,
            CasKey::Schema(h) => self.source.schema_json(*h)?.bytes,
            CasKey::Root | CasKey::Schemas => return Err(FsError::IsDir),
        })
    }
}
