//! What the index's maintenance of nodes says on every backend: what stopped a collection or
//! a check, the damage a check found, the logs a prune removed, and the table a check walks
//! when the node files are only a cache ([`NodeTable`]).

use std::path::PathBuf;

use crate::advice::Advice;
use crate::cas::fsck::FsckReport;
use crate::cas::{Hash, StoreError};
use crate::engine::storage::index_files::IndexError;
use crate::pg::PgError;

/// Errors that stop a collection or a check (damage is reported, not returned).
#[derive(Debug, thiserror::Error)]
pub enum MaintenanceError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Pg(#[from] PgError),
}

impl Advice for MaintenanceError {
    fn hints(&self) -> Vec<String> {
        match self {
            MaintenanceError::Store(e) => e.hints(),
            MaintenanceError::Pg(e) => e.hints(),
        }
    }
    fn is_busy(&self) -> bool {
        match self {
            MaintenanceError::Store(e) => e.is_busy(),
            MaintenanceError::Pg(e) => e.is_busy(),
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

/// Where the nodes really live when the store's files are only a cache of them (PostgreSQL):
/// the walk asks it, so a node missing or damaged there is reported even when this machine
/// still holds a good copy, and a damaged cache file is not mistaken for a damaged node.
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
    /// Where the walk reads nodes when the files are only a cache.
    pub table: Option<Box<dyn NodeTable + 'a>>,
}

/// Why a collection stopped before removing anything it should not.
#[derive(Debug, thiserror::Error)]
pub enum GcError {
    /// The roots could not be read; nothing was removed.
    #[error(transparent)]
    Roots(IndexError),
    #[error(transparent)]
    Nodes(#[from] MaintenanceError),
}

impl From<StoreError> for GcError {
    fn from(e: StoreError) -> GcError {
        GcError::Nodes(e.into())
    }
}

impl Advice for GcError {
    fn hints(&self) -> Vec<String> {
        match self {
            GcError::Roots(e) => e.hints(),
            GcError::Nodes(e) => e.hints(),
        }
    }
    fn is_busy(&self) -> bool {
        match self {
            GcError::Roots(e) => e.is_busy(),
            GcError::Nodes(e) => e.is_busy(),
        }
    }
}

/// What a prune of old logs removed (or, dry, would remove).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Threads whose logs went.
    pub threads: u64,
    pub bytes: u64,
}
