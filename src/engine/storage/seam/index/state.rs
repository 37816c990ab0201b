//! Where a thread stands in the index and what the index answers when a change is refused:
//! the words of [`super::ThreadIndex`] on every backend (re-exported by
//! [`crate::engine::thread::index`]).

use crate::advice::Advice;
use crate::cas::Hash;
use crate::engine::storage::index_files::IndexError;
use crate::pg::ArchivedThread;

/// Errors of the thread index.
#[derive(Debug, thiserror::Error)]
pub enum ThreadIndexError {
    #[error("no thread `{0}`")]
    Unknown(String),
    #[error(
        "thread {id} is archived ({status}{}); it cannot change any more",
        onto.as_ref().map(|o| format!(" onto {o}")).unwrap_or_default()
    )]
    Archived {
        id: String,
        status: String,
        /// The thread it continues as, when it was rebased.
        onto: Option<String>,
    },
    #[error(
        "the head of thread {id} moved from {expected} to {actual} while this step ran; nothing was published"
    )]
    HeadMoved {
        id: String,
        expected: Hash,
        actual: Hash,
    },
    #[error("thread {id} is busy: {holder}")]
    Busy { id: String, holder: String },
    #[error(transparent)]
    Index(#[from] IndexError),
}

impl Advice for ThreadIndexError {
    fn hints(&self) -> Vec<String> {
        match self {
            ThreadIndexError::Unknown(_) => {
                vec!["`uwf thread list --all` shows every thread".to_owned()]
            }
            ThreadIndexError::Archived {
                onto: Some(new), ..
            } => {
                vec![format!(
                    "it goes on as thread {new}: `uwf thread run {new}`"
                )]
            }
            ThreadIndexError::Archived { .. } => {
                vec!["`uwf thread fork <step>` continues from any of its steps".to_owned()]
            }
            ThreadIndexError::Busy { id, .. } => vec![
                format!("wait for it: `uwf thread show {id}` says when the step ends"),
                format!("or stop it: `uwf thread kill {id}`"),
            ],
            ThreadIndexError::Index(e) => e.hints(),
            _ => Vec::new(),
        }
    }
    fn is_busy(&self) -> bool {
        match self {
            ThreadIndexError::Busy { .. } => true,
            ThreadIndexError::Index(e) => e.is_busy(),
            _ => false,
        }
    }
}

/// The status of a thread archived by `uwf thread rebase`.
pub const REBASED: &str = "rebased";

/// Whether `status` is an archived thread's: `done`, `killed` or [`REBASED`].
pub(crate) fn is_archived_status(status: &str) -> bool {
    matches!(status, "done" | "killed" | REBASED)
}

/// Where a thread stands in the index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    Active { head: Hash },
    Archived(ArchivedThread),
}
