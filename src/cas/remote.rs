//! The seam between a [`super::Store`] and a shared node table on another machine (PostgreSQL).
//!
//! With a remote, the directory under the storage root is a local cache of nodes: a put goes to
//! the remote first and then into a local file; a get reads the local file and, when there is
//! none, fetches the node from the remote (verified by its hash there) and leaves a file behind.
//! Listing asks the remote, which holds every node.
//!
//! Architecture Invariant: with a remote, a local node file exists only for a node the remote
//! holds (it was put there first, or fetched from there), so nothing the local cache shows can
//! be missing for another machine.

use serde_json::Value;

use super::{Hash, Node};

/// What went wrong talking to the remote, in words (the remote's own error, already redacted).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct RemoteError {
    pub message: String,
    /// A collision: the remote holds other content under this hash.
    pub collision: bool,
}

/// A shared, write-once node table.
pub(crate) trait RemoteNodes: Send + Sync + std::fmt::Debug {
    /// Stores a node (write-once; the same content again is success, other content under the
    /// same hash is an error with `collision` set).
    fn put(&self, type_hash: Hash, payload: &Value) -> Result<(), RemoteError>;
    /// A node, verified against its hash, or `None` when the remote has none.
    fn get(&self, hash: Hash) -> Result<Option<Node>, RemoteError>;
    /// Whether the remote holds a node (no verification).
    fn has(&self, hash: Hash) -> Result<bool, RemoteError>;
    /// Every node's hash, sorted.
    fn list_all(&self) -> Result<Vec<Hash>, RemoteError>;
    /// The hashes of one type's nodes, sorted.
    fn list_type(&self, type_hash: Hash) -> Result<Vec<Hash>, RemoteError>;
}
