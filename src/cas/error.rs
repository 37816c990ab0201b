//! The one error type of the store. Every I/O error carries its path; every node error its hash.

use crate::advice::Advice;
use std::path::PathBuf;

use super::id::{Hash, HashParseError};
use super::schema::Violation;

/// Everything that can go wrong in [`crate::cas`].
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    File(#[from] crate::file_util::FileError),
    #[error("storage root {} is not usable: {reason}", path.display())]
    Root { path: PathBuf, reason: String },
    #[error(transparent)]
    BadHash(#[from] HashParseError),
    #[error("no node {0} in the store")]
    NotFound(Hash),
    #[error("hash mismatch: node file {} holds content that hashes to {actual}, not {hash}", path.display())]
    HashMismatch {
        hash: Hash,
        actual: Hash,
        path: PathBuf,
    },
    #[error("node file {} for {hash} is corrupt: {reason}", path.display())]
    Corrupt {
        hash: Hash,
        path: PathBuf,
        reason: String,
    },
    #[error("hash collision: {hash} already names different content (node file {})", path.display())]
    Collision { hash: Hash, path: PathBuf },
    #[error("unknown type {0}: no schema node with that hash")]
    UnknownType(Hash),
    #[error("{0} is not a schema node, so it cannot be a type")]
    NotASchema(Hash),
    #[error("payload does not match schema {type_hash}:\n{}", list(violations))]
    InvalidPayload {
        type_hash: Hash,
        violations: Vec<Violation>,
    },
    #[error("not a valid JSON Schema (draft 2020-12):\n{}", list(violations))]
    InvalidSchema { violations: Vec<Violation> },
    #[error("type 0000000000000 is reserved for the bootstrap meta-schema node")]
    Reserved,
    #[error("field {pointer} refers to {target}, which is not in the store (put that node first)")]
    MissingRef { pointer: String, target: Hash },
    /// The shared node table (PostgreSQL) failed or refused.
    #[error(transparent)]
    Remote(#[from] super::remote::RemoteError),
}

impl Advice for StoreError {
    fn hints(&self) -> Vec<String> {
        match self {
            StoreError::BadHash(e) => e.hints(),
            StoreError::Reserved => {
                vec!["store a schema with type F5VV55NBKX1R5 (`uwf cas schema put`)".to_owned()]
            }
            _ => Vec::new(),
        }
    }
    fn is_busy(&self) -> bool {
        match self {
            StoreError::BadHash(e) => e.is_busy(),
            _ => false,
        }
    }
}

fn list(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(|v| format!("  - {v}"))
        .collect::<Vec<_>>()
        .join("\n")
}

impl StoreError {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> StoreError {
        let path = path.into();
        move |source| StoreError::Io {
            action,
            path,
            source,
        }
    }
}
