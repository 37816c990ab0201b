//! The thread index: where each thread stands (active at a head, or archived), over either
//! backend — the functions here ask the root's storage handle
//! ([`crate::engine::storage::seam::ThreadIndex`]), whose directory implementation keeps `index.db`
//! ([`crate::engine::storage::index_db`]) and PostgreSQL's the `threads` table. The per-thread
//! run files and step lock are [`super::run_files`].
//!
//! Architecture Invariant: the head of a thread only moves by compare-and-set (one synced
//! `update … where head = <expected>`), so a crash leaves the old or the new head; archiving is
//! one statement too, so a thread is active or archived, never both or neither.

use std::path::Path;
use std::sync::Arc;

use crate::cas::Hash;

use crate::engine::storage::index_files::IndexError;
use crate::engine::storage::{self, Storage};

pub(crate) use crate::engine::storage::seam::{ArchivedThread, is_archived_status};
pub use crate::engine::storage::seam::{REBASED, State, Successor, ThreadIndexError};
use crate::pg::{NOTHING_SPENT, NewThread, SpentChange};

/// The thread index of `root` (its storage handle's).
fn storage_of(root: &Path) -> Result<Arc<Storage>, ThreadIndexError> {
    Ok(storage::handle(root).map_err(IndexError::from)?)
}

/// Looks a thread up: active first, then archived.
pub(crate) fn state(root: &Path, id: &str) -> Result<State, ThreadIndexError> {
    storage_of(root)?.index().state(id)
}

/// Whether thread `id` exists (active or archived).
pub fn exists(root: &Path, id: &str) -> Result<bool, ThreadIndexError> {
    match state(root, id) {
        Ok(_) => Ok(true),
        Err(ThreadIndexError::Unknown(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Thread ids (active or archived) starting with `prefix`, sorted, at most `limit`.
pub(crate) fn with_prefix(
    root: &Path,
    prefix: &str,
    limit: usize,
) -> Result<Vec<String>, ThreadIndexError> {
    storage_of(root)?.index().with_prefix(prefix, limit)
}

/// Active threads whose head is `head` (forks share heads).
pub(crate) fn active_at(root: &Path, head: Hash) -> Result<Vec<String>, ThreadIndexError> {
    storage_of(root)?.index().active_at(head)
}

/// The head of an active thread (an error naming the status for an archived one).
pub fn active_head(root: &Path, id: &str) -> Result<Hash, ThreadIndexError> {
    match state(root, id)? {
        State::Active { head } => Ok(head),
        State::Archived(a) => Err(ThreadIndexError::Archived {
            id: id.to_owned(),
            onto: (a.status == REBASED)
                .then(|| successor(root, id).ok().flatten())
                .flatten(),
            status: a.status,
        }),
    }
}

/// A new thread id (a ULID).
pub fn new_id() -> String {
    ulid::Ulid::new().to_string()
}

/// [`add`], knowing how many steps lead to `head` (kept for listings) and the start prompt
/// (kept for search; a row without it is filled by the first search).
pub(crate) fn add_at(
    root: &Path,
    id: &str,
    head: Hash,
    workflow: Hash,
    parent: Option<&str>,
    steps: Option<u64>,
    prompt: Option<&str>,
) -> Result<(), ThreadIndexError> {
    storage_of(root)?.index().add(&NewThread {
        id,
        workflow,
        head,
        parent,
        queued: false,
        steps,
        prompt,
        // A thread with no step spent nothing; a fork's spending is worked out when listed.
        spent: (steps == Some(0)).then_some(NOTHING_SPENT),
    })
}

/// Moves an active thread's head from `expected` to `new`, or fails if it moved meanwhile.
#[cfg(test)]
pub(crate) fn compare_and_set(
    root: &Path,
    id: &str,
    expected: Hash,
    new: Hash,
) -> Result<(), ThreadIndexError> {
    compare_and_set_next(root, id, expected, new, (None, SpentChange::Forget))
}

/// [`compare_and_set`] to a step continuing `expected`, with the role the moderator picks at
/// `new` when known (listings show it) and what the step spent ([`SpentChange`]).
pub(crate) fn compare_and_set_next(
    root: &Path,
    id: &str,
    expected: Hash,
    new: Hash,
    moved: (Option<&str>, SpentChange<'_>),
) -> Result<(), ThreadIndexError> {
    storage_of(root)?
        .index()
        .compare_and_set(id, expected, new, moved)
}

/// What thread `id`'s row knows its steps spent while it is at `head` (`None`: it does not
/// know, or the thread is elsewhere).
pub(crate) fn spent_at(
    root: &Path,
    id: &str,
    head: Hash,
) -> Result<Option<String>, ThreadIndexError> {
    Ok(storage_of(root)?.index().spent_at(id, head)?)
}

/// Records what thread `id` spent, worked out at `head`, in its row if the row does not know.
pub(crate) fn note_spent(root: &Path, id: &str, head: Hash, spent: &str) {
    if let Ok(storage) = storage_of(root) {
        storage.index().note_spent(id, head, spent);
    }
}

/// Archives an active thread at its current head with `status` (`done` or `killed`; a rebase
/// is [`rebase`]).
pub(crate) fn archive(
    root: &Path,
    id: &str,
    workflow: Hash,
    status: &str,
) -> Result<ArchivedThread, ThreadIndexError> {
    let _ = workflow;
    storage_of(root)?.index().archive(id, status)
}

/// Archives active thread `id`, still at `head`, as [`REBASED`] onto `new`, which enters the
/// index with `id` as its parent in the same transaction (one statement over PostgreSQL): both
/// happen or neither, so a crash leaves the old thread active and no new one.
pub fn rebase(
    root: &Path,
    id: &str,
    head: Hash,
    new: &Successor<'_>,
) -> Result<ArchivedThread, ThreadIndexError> {
    let done = storage_of(root)?.index().rebase(id, head, new)?;
    match done {
        Some(archived) => Ok(archived),
        None => Err(match state(root, id)? {
            State::Active { head: actual } => ThreadIndexError::HeadMoved {
                id: id.to_owned(),
                expected: head,
                actual,
            },
            State::Archived(a) => ThreadIndexError::Archived {
                id: id.to_owned(),
                status: a.status,
                onto: None,
            },
        }),
    }
}

/// The thread that thread `id` was rebased onto, if it was.
pub(crate) fn successor(root: &Path, id: &str) -> Result<Option<String>, ThreadIndexError> {
    storage_of(root)?.index().successor(id)
}

/// The thread that thread `id` took the place of by a rebase, if it did: its parent in the
/// index, when that one was rebased onto `id`.
pub fn rebased_from(root: &Path, id: &str) -> Option<String> {
    let parent = storage_of(root).ok()?.index().parent(id)?;
    (successor(root, &parent).ok()?? == id).then_some(parent)
}

/// Makes an active thread runnable for workers (`thread start --queue`, `thread
/// queue`) until it is done, killed, failed or awaiting a person.
pub(crate) fn queue(root: &Path, id: &str) -> Result<(), ThreadIndexError> {
    storage_of(root)?.index().queue(id)
}

/// Takes a thread off the run queue (it finished, failed or awaits a person). Not queued is
/// no error.
pub(crate) fn dequeue(root: &Path, id: &str) -> Result<(), ThreadIndexError> {
    storage_of(root)?.index().dequeue(id)
}

/// The queued active threads, each once, longest waiting first.
pub(crate) fn queued(root: &Path) -> Result<Vec<String>, ThreadIndexError> {
    storage_of(root)?.index().queued()
}
