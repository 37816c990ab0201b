//! What a thread keeps beside its chain: its context (working directory, agent bindings, the
//! pause flag) and its lineage (forks, parent, children). The trait, and the choice of its
//! directory ([`dir`]) or PostgreSQL ([`pg`]) implementation when a root's handle is opened.
//!
//! The records' types and their meaning belong to the thread modules that use them
//! ([`crate::engine::thread::context`], [`crate::engine::thread::forks`],
//! [`crate::engine::thread::family`]); this is only where they are kept.

use std::path::Path;

use crate::engine::storage::Backend;
use crate::engine::storage::index_files::IndexError;
use crate::engine::thread::context::ThreadContext;
use crate::engine::thread::family::ParentLink;
use crate::engine::thread::forks::Fork;

mod dir;
mod pg;

/// What a thread keeps beside its chain: its context and its lineage (forks, parent, children).
pub trait ThreadRecords: Send + Sync {
    /// The recorded context of thread `id`; the default (no directory, no bindings, not
    /// paused) when none was recorded.
    fn context(&self, id: &str) -> Result<ThreadContext, IndexError>;

    /// Records the context of thread `id` (replacing any), pause flag included.
    fn set_context(&self, id: &str, context: &ThreadContext) -> Result<(), IndexError>;

    /// Pauses or resumes thread `id`, leaving the rest of its context as it is.
    fn set_paused(&self, id: &str, paused: bool) -> Result<(), IndexError>;

    /// Appends the record of a fork (only ever appended, never rewritten).
    fn record_fork(&self, fork: &Fork) -> Result<(), IndexError>;

    /// Every fork, oldest first (records that cannot be read are skipped).
    fn forks(&self) -> Result<Vec<Fork>, IndexError>;

    /// The fork record of thread `id`, if it is a fork.
    fn origin_of(&self, id: &str) -> Result<Option<Fork>, IndexError>;

    /// Records that `child` was started by `link.thread` (a sub-workflow).
    fn link_parent(&self, child: &str, link: &ParentLink) -> Result<(), IndexError>;

    /// The parent of thread `child`, if a sub-workflow started it (`None` too when it cannot
    /// be read: links are informational).
    fn parent(&self, child: &str) -> Option<ParentLink>;

    /// The threads that sub-workflows of thread `parent` started, oldest first (none when they
    /// cannot be read).
    fn children(&self, parent: &str) -> Vec<String>;
}

pub(super) fn open(root: &Path, backend: &Backend) -> Box<dyn ThreadRecords> {
    match backend {
        Backend::Dir => Box::new(dir::Dir::new(root)),
        Backend::Pg(store, _) => Box::new(pg::Pg::new(store.clone())),
    }
}
