//! What the index's maintenance says on every backend: what stopped a collection, and the
//! logs a prune removed (what a check of the nodes found is [`NodeCheck`], in `nodes/`).

use crate::advice::Advice;
use crate::cas::StoreError;
use crate::engine::storage::index_files::IndexError;

pub(crate) use crate::engine::storage::seam::nodes::{MaintenanceError, NodeCheck};

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
