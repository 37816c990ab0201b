//! What a thread keeps beside its chain: its context and its lineage (forks, parent, children): the trait and its directory and PostgreSQL implementations.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::engine::storage::Backend;
use crate::pg::PgStore;

/// What a thread keeps beside its chain: its context and its lineage (forks, parent, children).
pub trait ThreadRecords: Send + Sync {}

/// The directory store's implementation: files and `index.db` under the root.
struct Dir {
    #[allow(dead_code)]
    root: PathBuf,
}

impl ThreadRecords for Dir {}

/// The PostgreSQL implementation.
struct Pg {
    #[allow(dead_code)]
    pg: Arc<PgStore>,
}

impl ThreadRecords for Pg {}

pub(super) fn open(root: &Path, backend: &Backend) -> Box<dyn ThreadRecords> {
    match backend {
        Backend::Dir => Box::new(Dir {
            root: root.to_path_buf(),
        }),
        Backend::Pg(pg, _) => Box::new(Pg { pg: pg.clone() }),
    }
}
