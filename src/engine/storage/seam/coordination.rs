//! The queue, step leases, workers and change wake-ups: the trait and its directory and PostgreSQL implementations.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::engine::storage::Backend;
use crate::pg::PgStore;

/// The queue, step leases, workers and change wake-ups.
pub trait Coordination: Send + Sync {}

/// The directory store's implementation: files and `index.db` under the root.
struct Dir {
    #[allow(dead_code)]
    root: PathBuf,
}

impl Coordination for Dir {}

/// The PostgreSQL implementation.
struct Pg {
    #[allow(dead_code)]
    pg: Arc<PgStore>,
}

impl Coordination for Pg {}

pub(super) fn open(root: &Path, backend: &Backend) -> Box<dyn Coordination> {
    match backend {
        Backend::Dir => Box::new(Dir {
            root: root.to_path_buf(),
        }),
        Backend::Pg(pg, _) => Box::new(Pg { pg: pg.clone() }),
    }
}
