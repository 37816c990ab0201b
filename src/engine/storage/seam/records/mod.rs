//! What a thread keeps beside its chain: its context (working directory, agent bindings, the
//! pause flag) and its lineage (forks, parent, children). The trait, and the choice of its
//! directory ([`dir`]) or PostgreSQL ([`pg`]) implementation when a root's handle is opened.
//!
//! The records' types are defined here, beside where they are kept; what they mean to a
//! thread is said by the modules that use them ([`crate::engine::thread::context`],
//! [`crate::engine::thread::forks`], [`crate::engine::thread::family`]), which re-export them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cas::Hash;
use crate::engine::storage::Backend;
use crate::engine::storage::index_files::IndexError;

pub(crate) mod dir;
mod pg;

/// The agent a role is bound to, as resolved when the binding was made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Binding {
    /// The agent's name (a configured one, or a command's readable name).
    pub name: String,
    pub command: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Seconds.
    pub timeout: u64,
    /// Added to the agent's environment; values may name secrets as `${NAME}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

/// What a thread records about how its agents run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadContext {
    /// Where every agent of the thread runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<PathBuf>,
    /// Role → agent.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub bindings: BTreeMap<String, Binding>,
    /// Set by `thread pause`: no step starts until `thread resume`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// The thread's own budget (`thread start --max-cost`, `thread budget`), over the one
    /// `config.yaml` gives its workflow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::engine::config::budget::Budget>,
}

impl ThreadContext {
    /// The context a fork starts with: the source's directory and bindings, not paused.
    pub fn for_fork(&self) -> ThreadContext {
        ThreadContext {
            paused: false,
            ..self.clone()
        }
    }
}

/// One fork.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fork {
    /// The new thread.
    pub thread: String,
    /// The thread whose step was forked, when known.
    pub from: Option<String>,
    /// The step (or start node) the new thread continues from.
    pub step: Hash,
    pub at: u64,
}

/// Where a child thread came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentLink {
    /// The parent thread's id.
    pub thread: String,
    /// The parent's head when the child started.
    pub head: Hash,
    /// The parent's role that the child plays.
    pub role: String,
}

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
