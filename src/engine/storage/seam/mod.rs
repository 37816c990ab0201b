//! The storage seam: one [`Storage`] handle per root, opened once per process, through which
//! the engine, the mount, the dashboard and the CLI reach everything a backend keeps besides
//! nodes (those go through [`crate::cas::Store`]). Each concern is a trait of its own, chosen on
//! its own when the handle is opened:
//!
//! - [`ThreadIndex`] (`index/`): thread rows, heads and their compare-and-set, archive, rebase,
//!   listing;
//! - [`ThreadRecords`] (`records/`): what a thread keeps beside its chain: context, lineage
//!   (forks, parent and children);
//! - [`RunLog`] (`runs/`): run files, logs and events, appended and read back;
//! - [`Coordination`] (`coordination/`): the queue, step leases, workers and change wake-ups;
//!
//! and beside them [`Nodes`] (`nodes/`), a store's nodes in bulk, for copies and maintenance,
//! and [`Endpoint`], a whole store named on a command line (`uwf store copy`).
//!
//! Each trait has a directory implementation (files and `index.db` under the root) and a
//! PostgreSQL one; only this module and the two implementations know which a root uses.
//!
//! Architecture Invariant: code outside `engine/storage/` and `pg/` never asks which backend a
//! root uses (`tests/tidy.rs` checks); it asks the handle, and the handle answers the same way
//! on every backend (`tests/storage_conformance*.rs` run one suite on both).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use super::{Backend, StorageError, backend};

pub(crate) mod coordination;
mod endpoint;
mod index;
pub(crate) mod nodes;
pub(crate) mod records;
pub mod runs;

pub use crate::pg::Successor;
pub(crate) use crate::pg::{
    ActiveThread, ArchivedThread, Exported, IndexRow, Learned, Occupancy, RowFacts,
};
pub(crate) use coordination::Coordination;
pub(crate) use coordination::{ChangeListener, Feed};
pub(crate) use endpoint::{Endpoint, EndpointError, Opened};
pub(crate) use index::{ExportError, GcError, Pruned, is_archived_status};
pub use index::{REBASED, State, ThreadIndex, ThreadIndexError};
pub(crate) use nodes::MaintenanceError;
pub(crate) use records::ThreadRecords;
pub(crate) use runs::RunLog;
pub(crate) use runs::local as local_run_log;

/// Everything a root's backend keeps besides nodes, one trait object per concern.
pub struct Storage {
    root: PathBuf,
    index: Box<dyn ThreadIndex>,
    records: Box<dyn ThreadRecords>,
    runs: Box<dyn RunLog>,
    coordination: Box<dyn Coordination>,
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Storage")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

impl Storage {
    /// Builds the handle of `root` over `backend`, each concern's implementation chosen here.
    fn over(root: &Path, backend: &Backend) -> Storage {
        Storage {
            root: root.to_path_buf(),
            index: index::open(root, backend),
            records: records::open(root, backend),
            runs: runs::open(root, backend),
            coordination: coordination::open(root, backend),
        }
    }

    /// Thread rows and heads.
    pub fn index(&self) -> &dyn ThreadIndex {
        self.index.as_ref()
    }

    /// Contexts and lineage.
    pub fn records(&self) -> &dyn ThreadRecords {
        self.records.as_ref()
    }

    /// Run files, logs and events.
    pub fn runs(&self) -> &dyn RunLog {
        self.runs.as_ref()
    }

    /// Queue, leases, workers and wake-ups.
    pub fn coordination(&self) -> &dyn Coordination {
        self.coordination.as_ref()
    }
}

fn handles() -> &'static Mutex<HashMap<PathBuf, Arc<Storage>>> {
    static HANDLES: OnceLock<Mutex<HashMap<PathBuf, Arc<Storage>>>> = OnceLock::new();
    HANDLES.get_or_init(Default::default)
}

/// The storage handle of `root`, opened (connecting to its database, if any) on first use in
/// this process.
pub fn open(root: &Path) -> Result<Arc<Storage>, StorageError> {
    if let Some(found) = handles()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(root)
    {
        return Ok(found.clone());
    }
    let made = Arc::new(Storage::over(root, &backend(root)?));
    let mut handles = handles().lock().unwrap_or_else(|p| p.into_inner());
    Ok(handles.entry(root.to_path_buf()).or_insert(made).clone())
}

/// Forgets the handle of `root` (after [`super::pin_directory`] changed its backend).
pub(super) fn forget(root: &Path) {
    handles()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(root);
}
