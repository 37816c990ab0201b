//! The thread index of a root: thread rows, heads and their compare-and-set, archive, rebase,
//! the run queue's marks, listing, the registry of workflows, and the maintenance that reads
//! them (what GC keeps alive, `cas fsck`, pruning old logs). The trait is here; the directory
//! store's implementation (`index.db` and files under the root) is `dir.rs`, PostgreSQL's is
//! `pg.rs`. Only [`open`] knows which a root uses.

use std::path::Path;

use crate::cas::gc::{GcOptions, GcReport};
use crate::cas::{Hash, Store};
use crate::engine::storage::Backend;
use crate::engine::storage::index_db::Scan;
use crate::engine::storage::index_files::{IndexError, Registry, Threads};
use crate::pg::{
    ArchivedThread, Entry, Exported, IndexRow, Learned, NewThread, Occupancy, SpentChange,
    Successor,
};

use super::nodes::{MaintenanceError, Nodes};
use super::records::ThreadRecords;

mod dir;
mod nodes;
mod pg;
mod state;

pub(crate) use nodes::{GcError, NodeCheck, Pruned};
pub(crate) use state::is_archived_status;
pub use state::{REBASED, State, ThreadIndexError};

/// Thread rows, heads and their compare-and-set, archive, rebase and listing, over one root.
///
/// Every method means the same on every backend; `tests/storage_conformance_index.rs` runs one
/// suite over both.
pub trait ThreadIndex: Send + Sync {
    /// Where thread `id` stands: active at a head, or archived ([`ThreadIndexError::Unknown`]
    /// when there is no such thread).
    fn state(&self, id: &str) -> Result<State, ThreadIndexError>;

    /// Thread ids (active or archived) starting with `prefix`, sorted, at most `limit`.
    fn with_prefix(&self, prefix: &str, limit: usize) -> Result<Vec<String>, ThreadIndexError>;

    /// Active threads whose head is `head`.
    fn active_at(&self, head: Hash) -> Result<Vec<String>, ThreadIndexError>;

    /// Registers a new active thread (on the run queue if it says so).
    fn add(&self, row: &NewThread<'_>) -> Result<(), ThreadIndexError>;

    /// Moves an active thread's head from `expected` to `new` (with the role picked at `new`,
    /// when known, and what the new step spent added to what the row knows), or fails naming
    /// where it is if it moved meanwhile or was archived.
    fn compare_and_set(
        &self,
        id: &str,
        expected: Hash,
        new: Hash,
        moved: (Option<&str>, SpentChange<'_>),
    ) -> Result<(), ThreadIndexError>;

    /// What active thread `id`'s row knows its steps spent ([`IndexRow::spent`]), while the
    /// thread is at `head`; `None` when it is elsewhere or the row does not know.
    fn spent_at(&self, id: &str, head: Hash) -> Result<Option<String>, IndexError>;

    /// Records what active thread `id` spent, worked out from its steps at `head`, in a row
    /// that does not know it, while the thread is still there (best effort: a cache).
    fn note_spent(&self, id: &str, head: Hash, spent: &str);

    /// Archives an active thread at its current head with `status` (`done` or `killed`) and
    /// takes it off the run queue.
    fn archive(&self, id: &str, status: &str) -> Result<ArchivedThread, ThreadIndexError>;

    /// Archives thread `id`, still at `head`, as rebased onto `new`, which enters the index
    /// with `id` as its parent, both or neither; `None` when `id` is no longer active at `head`.
    fn rebase(
        &self,
        id: &str,
        head: Hash,
        new: &Successor<'_>,
    ) -> Result<Option<ArchivedThread>, ThreadIndexError>;

    /// The thread that thread `id` was rebased onto, if it was.
    fn successor(&self, id: &str) -> Result<Option<String>, ThreadIndexError>;

    /// The thread `id` was forked, spawned or rebased from, when the index knows it.
    fn parent(&self, id: &str) -> Option<String>;

    /// Makes an active thread runnable for workers.
    fn queue(&self, id: &str) -> Result<(), ThreadIndexError>;

    /// Takes a thread off the run queue; not queued (or no longer active) is no error.
    fn dequeue(&self, id: &str) -> Result<(), ThreadIndexError>;

    /// The queued active threads, each once, longest waiting first where the backend knows
    /// (else oldest thread first).
    fn queued(&self) -> Result<Vec<String>, ThreadIndexError>;

    /// Every active thread and its head.
    fn active(&self) -> Result<Threads, IndexError>;

    /// Every archived thread, in the order they ended.
    fn archived(&self) -> Result<Vec<ArchivedThread>, IndexError>;

    /// Every thread, active and archived, with its workflow.
    fn entries(&self) -> Result<Vec<Entry>, IndexError>;

    /// The workflow versions threads (active or archived) run.
    fn thread_workflows(&self) -> Result<Vec<Hash>, IndexError>;

    /// The rows `scan` selects, newest first, until `each` returns `false`.
    fn scan(&self, scan: &Scan, each: &mut dyn FnMut(IndexRow) -> bool) -> Result<(), IndexError>;

    /// Writes back steps, next roles and spending learned the slow way (best effort: a cache).
    fn note_derived(&self, learned: &[Learned]);

    /// Rows, active or archived, whose start prompt the index does not keep yet (made before
    /// it did, or copied): `(id, head)`, at most `limit`.
    fn unsearchable(&self, limit: usize) -> Result<Vec<(String, Hash)>, IndexError>;

    /// Records the start prompts of such rows, `(id, prompt)`, so that a search finds them;
    /// a row that knows its prompt already keeps it.
    fn note_prompts(&self, prompts: &[(String, String)]) -> Result<(), IndexError>;

    /// The registry of workflow names.
    fn registry(&self) -> Result<Registry, IndexError>;

    /// Reads the registry, lets `change` edit it and writes it back atomically, unless `change`
    /// returns `false` (then nothing is written).
    fn update_registry(
        &self,
        change: &mut dyn FnMut(&mut Registry) -> bool,
    ) -> Result<(), IndexError>;

    /// Removes (or, `dry_run`, counts) the logs and event feeds of threads archived before
    /// `cut` (ms since the epoch).
    fn prune_logs(&self, cut: u64, dry_run: bool) -> Result<Pruned, IndexError>;

    /// Collects the garbage of `store` (this root's nodes, wherever they are kept), keeping
    /// what [`crate::engine::storage::threads::gc_roots`] names, read once writers are held off.
    fn collect_garbage(&self, store: &Store, options: &GcOptions) -> Result<GcReport, GcError>;

    /// Checks this root's nodes one by one (`cas fsck`): the node files, or the rows of the
    /// table they cache (and then the cache files), with the verdicts the walk from the roots
    /// ([`crate::engine::upkeep::fsck::check_with`]) reads. Written once over the node store
    /// (`nodes/upkeep.rs`), as [`ThreadIndex::collect_garbage`] is.
    fn check_nodes<'a>(&'a self, store: &'a Store) -> Result<NodeCheck<'a>, MaintenanceError>;

    /// How many active threads, archived threads and registered workflows there are (a copy
    /// goes only into an index with none).
    fn occupancy(&self) -> Result<Occupancy, IndexError>;

    /// Every thread as a copy takes it: the active ones with their workflow, start time and
    /// parent, the archived ones, and what rows know beyond heads. `records` and `nodes` are
    /// this store's: an index that does not keep a thread's workflow, start or parent reads
    /// them there.
    fn export_threads(
        &self,
        records: &dyn ThreadRecords,
        nodes: &dyn Nodes,
    ) -> Result<Exported, ExportError>;

    /// Adds copied threads (start and completion times kept, none queued) in one go, only
    /// into an index with no thread at all: otherwise nothing is written and the answer is
    /// what is there (its `workflows` not counted, 0).
    fn import_threads(&self, threads: &Exported) -> Result<Result<(), Occupancy>, IndexError>;

    /// Whether other machines move these heads too (a shared database): a step recorded on
    /// this machine may have been overtaken by one taken elsewhere.
    fn shared(&self) -> bool;
}

/// Why the threads of an index could not be read whole.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// A head that is not a step or start node, or whose start cannot be read.
    #[error("thread {thread}: {reason}")]
    BadThread { thread: String, reason: String },
    #[error(transparent)]
    Index(#[from] IndexError),
    #[error(transparent)]
    Nodes(#[from] MaintenanceError),
}

impl crate::advice::Advice for ExportError {
    fn hints(&self) -> Vec<String> {
        match self {
            ExportError::BadThread { .. } => {
                vec!["run `uwf cas fsck` on the source, and repair it before copying".to_owned()]
            }
            ExportError::Index(e) => e.hints(),
            ExportError::Nodes(e) => e.hints(),
        }
    }
    fn is_busy(&self) -> bool {
        match self {
            ExportError::Index(e) => e.is_busy(),
            ExportError::Nodes(e) => e.is_busy(),
            ExportError::BadThread { .. } => false,
        }
    }
}

pub(super) fn open(root: &Path, backend: &Backend) -> Box<dyn ThreadIndex> {
    match backend {
        Backend::Dir => Box::new(dir::Dir::new(root)),
        Backend::Pg(pg, _) => Box::new(pg::Pg::new(root, pg.clone())),
    }
}
