//! A store's nodes as a whole, as copies and maintenance see them: listed, read and written in
//! bulk, made durable. The directory store's are the node files under its root (`dir.rs`);
//! PostgreSQL's are the `nodes` table (`pg.rs`). Single nodes on the hot path go through
//! [`crate::cas::Store`] instead, which caches the table when there is one.

use std::collections::HashSet;
use std::path::PathBuf;

use crate::advice::Advice;
use crate::cas::fsck::FsckReport;
use crate::cas::gc::Cutoff;
use crate::cas::{Hash, Node, Store, StoreError};
use crate::pg::PgError;

mod dir;
mod pg;
pub(super) mod upkeep;

pub(super) use dir::DirNodes;
pub(super) use pg::PgNodes;

/// Every node of one store, in bulk. Each read re-hashes the node; each write is write-once
/// (the same bytes again are a no-op, other bytes under the same hash a collision).
pub trait Nodes: Send + Sync {
    /// Every node's hash, sorted.
    fn list_all(&self) -> Result<Vec<Hash>, MaintenanceError>;

    /// Node `hash`, verified.
    fn read(&self, hash: Hash) -> Result<Node, MaintenanceError>;

    /// The nodes `hashes`, verified, in the order asked.
    fn read_many(&self, hashes: &[Hash]) -> Result<Vec<Node>, MaintenanceError>;

    /// Writes nodes copied from another store, each keeping its timestamp; returns how many
    /// were new.
    fn write_copied(&self, nodes: &[Node]) -> Result<usize, MaintenanceError>;

    /// Makes the nodes written so far durable (a database commits each batch already).
    fn sync(&self) -> Result<(), MaintenanceError>;

    /// The directory store these nodes are the files of, when they are: what reads whole
    /// threads from their nodes (a copy working out what an old index did not keep).
    fn local(&self) -> Option<&Store>;

    /// Calls `each` with every stored node's hash, in hash order, and whether it was written
    /// (or last re-put) before `cutoff`; stops at `each`'s first error.
    fn each_age(
        &self,
        cutoff: &Cutoff,
        each: &mut dyn FnMut(Hash, bool) -> Result<(), MaintenanceError>,
    ) -> Result<(), MaintenanceError>;

    /// Deletes those of `hashes` still written before `cutoff` (the caller holds this
    /// machine's writers off); returns the ones it deleted, a node already gone among them.
    fn delete(&self, hashes: &[Hash], cutoff: &Cutoff) -> Result<Vec<Hash>, MaintenanceError>;

    /// Calls `each` with every stored node as read back, re-hashed (`cas fsck`), strays too.
    fn each_stored(&self, each: &mut dyn FnMut(Stored)) -> Result<(), MaintenanceError>;

    /// Whether node `hash` is stored (no verification).
    fn has(&self, hash: Hash) -> Result<bool, MaintenanceError>;

    /// Node `hash` for the walk from the roots: the node, or what is wrong with it.
    fn read_checked(&self, hash: Hash) -> Result<Node, Condition>;

    /// The local files that only cache these nodes and disagree with them (none when the
    /// files are the nodes): `present` is every stored node's hash.
    fn check_cache(&self, present: &HashSet<Hash>) -> Result<Vec<Derived>, MaintenanceError>;
}

/// A stored node as a check reads it back.
pub struct Stored {
    /// `None` for a stray file whose name is not a hash.
    pub hash: Option<Hash>,
    /// Its file, or empty for a row.
    pub path: PathBuf,
    /// The node, re-hashed, or why it is damaged.
    pub node: Result<Node, String>,
}

/// Errors that stop a collection or a check (damage is reported, not returned).
#[derive(Debug, thiserror::Error)]
pub enum MaintenanceError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Pg(#[from] PgError),
    #[error("cannot sync {}: {source}", path.display())]
    Sync {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl Advice for MaintenanceError {
    fn hints(&self) -> Vec<String> {
        match self {
            MaintenanceError::Store(e) => e.hints(),
            MaintenanceError::Pg(e) => e.hints(),
            MaintenanceError::Sync { .. } => Vec::new(),
        }
    }
    fn is_busy(&self) -> bool {
        match self {
            MaintenanceError::Store(e) => e.is_busy(),
            MaintenanceError::Pg(e) => e.is_busy(),
            MaintenanceError::Sync { .. } => false,
        }
    }
}

/// What is wrong with a reachable node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// No node file.
    Missing,
    /// The file does not hold the node (hash mismatch, not JSON, …): the reason.
    Corrupt(String),
}

/// A derived file that disagrees with the store.
#[derive(Debug, Clone)]
pub struct Derived {
    /// The file (or `cas/index/types` for the type index as a whole).
    pub path: PathBuf,
    pub problem: String,
}

/// What a check of the stored nodes found, for the walk from the roots: when the store's files
/// are only a cache (PostgreSQL), a node missing or damaged in the table is reported even when
/// this machine still holds a good copy, and a damaged cache file is not mistaken for a
/// damaged node.
pub trait NodeTable {
    /// The node, or what is wrong with it in the table.
    fn read(&self, hash: Hash) -> Result<crate::cas::Node, Condition>;
}

/// What [`super::ThreadIndex::check_nodes`] found before the walk from the roots.
pub struct NodeCheck<'a> {
    /// Every node file or row checked on its own (hash, schema, dangling refs).
    pub nodes: FsckReport,
    /// The derived files of the node cache that disagree with the table (none in a directory
    /// store, whose files are the nodes).
    pub cache: Vec<Derived>,
    /// Where the walk reads nodes (every store gives one; `None` reads the files).
    pub table: Option<Box<dyn NodeTable + 'a>>,
}
