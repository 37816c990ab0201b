//! Thread rows, heads and their compare-and-set, archive, rebase and listing: the trait and its directory and PostgreSQL implementations.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::engine::storage::Backend;
use crate::pg::PgStore;

/// Thread rows, heads and their compare-and-set, archive, rebase and listing.
pub trait ThreadIndex: Send + Sync {}

/// The directory store's implementation: files and `index.db` under the root.
struct Dir {
    #[allow(dead_code)]
    root: PathBuf,
}

impl ThreadIndex for Dir {}

/// The PostgreSQL implementation.
struct Pg {
    #[allow(dead_code)]
    pg: Arc<PgStore>,
}

impl ThreadIndex for Pg {}

pub(super) fn open(root: &Path, backend: &Backend) -> Box<dyn ThreadIndex> {
    match backend {
        Backend::Dir => Box::new(Dir {
            root: root.to_path_buf(),
        }),
        Backend::Pg(pg, _) => Box::new(Pg { pg: pg.clone() }),
    }
}
