//! The thread index: where each thread stands (active at a head, or archived), over either
//! backend — the directory store's `index.db` ([`crate::engine::storage::index_db`]) or PostgreSQL's
//! `threads` table. The per-thread run files and step lock are [`super::run_files`].
//!
//! Architecture Invariant: the head of a thread only moves by compare-and-set (one synced
//! `update … where head = <expected>`), so a crash leaves the old or the new head; archiving is
//! one statement too, so a thread is active or archived, never both or neither.

use crate::advice::Advice;
use std::path::Path;

use crate::cas::Hash;

use crate::engine::storage::index_db;
use crate::engine::storage::index_files::{self, Archived, IndexError};
use crate::engine::storage::{self, StorageError};
use crate::pg::{NewThread, PgError, ThreadState};

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
pub fn is_archived_status(status: &str) -> bool {
    matches!(status, "done" | "killed" | REBASED)
}

/// Where a thread stands in the index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    Active { head: Hash },
    Archived(Archived),
}

/// Looks a thread up: active first, then archived.
pub fn state(root: &Path, id: &str) -> Result<State, ThreadIndexError> {
    if let Some(pg) = storage::pg(root).map_err(IndexError::from)? {
        return match pg.thread(id).map_err(IndexError::from) {
            Ok(ThreadState::Active(t)) => Ok(State::Active { head: t.head }),
            Ok(ThreadState::Archived(a)) => Ok(State::Archived(index_files::archived_of(a))),
            Err(IndexError::Storage(StorageError::Pg(PgError::UnknownThread(_)))) => {
                Err(ThreadIndexError::Unknown(id.to_owned()))
            }
            Err(e) => Err(e.into()),
        };
    }
    match index_db::get(root, id)? {
        Some(row) if row.is_active() => Ok(State::Active { head: row.head }),
        Some(row) => Ok(State::Archived(row.archived())),
        None => Err(ThreadIndexError::Unknown(id.to_owned())),
    }
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
pub fn with_prefix(
    root: &Path,
    prefix: &str,
    limit: usize,
) -> Result<Vec<String>, ThreadIndexError> {
    if let Some(pg) = storage::pg(root).map_err(IndexError::from)? {
        return pg
            .ids_with_prefix(prefix, limit)
            .map_err(|e| IndexError::from(e).into());
    }
    Ok(index_db::with_prefix(root, prefix, limit)?)
}

/// Active threads whose head is `head` (forks share heads).
pub fn active_at(root: &Path, head: Hash) -> Result<Vec<String>, ThreadIndexError> {
    if storage::pg(root).map_err(IndexError::from)?.is_some() {
        return Ok(crate::engine::storage::threads::read_threads(root)?
            .into_iter()
            .filter(|(_, h)| *h == head)
            .map(|(id, _)| id)
            .collect());
    }
    Ok(index_db::active_at(root, head)?)
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

/// Registers a new active thread of `workflow` at `head`; `parent` is the thread it was
/// forked or spawned from, when known.
pub fn add(
    root: &Path,
    id: &str,
    head: Hash,
    workflow: Hash,
    parent: Option<&str>,
) -> Result<(), ThreadIndexError> {
    add_at(root, id, head, workflow, parent, None)
}

/// [`add`], knowing how many steps lead to `head` (kept for listings).
pub fn add_at(
    root: &Path,
    id: &str,
    head: Hash,
    workflow: Hash,
    parent: Option<&str>,
    steps: Option<u64>,
) -> Result<(), ThreadIndexError> {
    if let Some(pg) = storage::pg(root).map_err(IndexError::from)? {
        let thread = NewThread {
            id,
            workflow,
            head,
            parent,
            queued: false,
            steps,
        };
        return pg
            .add_thread(&thread)
            .map_err(|e| IndexError::from(e).into());
    }
    index_db::insert(
        root,
        &index_db::NewRow {
            id,
            workflow,
            head,
            parent,
            steps,
        },
    )?;
    Ok(())
}

/// Moves an active thread's head from `expected` to `new`, or fails if it moved meanwhile.
pub fn compare_and_set(
    root: &Path,
    id: &str,
    expected: Hash,
    new: Hash,
) -> Result<(), ThreadIndexError> {
    compare_and_set_next(root, id, expected, new, None)
}

/// [`compare_and_set`] to a step continuing `expected`, with the role the moderator picks at
/// `new` when known (listings show it).
pub fn compare_and_set_next(
    root: &Path,
    id: &str,
    expected: Hash,
    new: Hash,
    next: Option<&str>,
) -> Result<(), ThreadIndexError> {
    if let Some(pg) = storage::pg(root).map_err(IndexError::from)? {
        if pg
            .compare_and_set_next(id, expected, new, next)
            .map_err(IndexError::from)?
        {
            return Ok(());
        }
        return Err(match state(root, id)? {
            State::Active { head } => ThreadIndexError::HeadMoved {
                id: id.to_owned(),
                expected,
                actual: head,
            },
            State::Archived(a) => ThreadIndexError::Archived {
                id: id.to_owned(),
                status: a.status,
                onto: None,
            },
        });
    }
    match index_db::compare_and_set(root, id, expected, new, next)? {
        index_db::Cas::Moved => Ok(()),
        index_db::Cas::Refused(row) if row.is_active() => Err(ThreadIndexError::HeadMoved {
            id: id.to_owned(),
            expected,
            actual: row.head,
        }),
        index_db::Cas::Refused(row) => Err(ThreadIndexError::Archived {
            id: id.to_owned(),
            status: row.status,
            onto: None,
        }),
        index_db::Cas::Unknown => Err(ThreadIndexError::Unknown(id.to_owned())),
    }
}

/// Archives an active thread at its current head with `status` (`done` or `killed`; a rebase
/// is [`rebase`]).
pub fn archive(
    root: &Path,
    id: &str,
    workflow: Hash,
    status: &str,
) -> Result<Archived, ThreadIndexError> {
    if let Some(pg) = storage::pg(root).map_err(IndexError::from)? {
        return match pg.archive(id, status).map_err(IndexError::from) {
            Ok(a) => Ok(index_files::archived_of(a)),
            Err(IndexError::Storage(StorageError::Pg(PgError::Archived { id, status }))) => {
                Err(ThreadIndexError::Archived {
                    id,
                    status,
                    onto: None,
                })
            }
            Err(IndexError::Storage(StorageError::Pg(PgError::UnknownThread(id)))) => {
                Err(ThreadIndexError::Unknown(id))
            }
            Err(e) => Err(e.into()),
        };
    }
    let _ = workflow;
    match index_db::archive(root, id, status)? {
        Some(archived) => {
            let _ = std::fs::remove_file(queue_dir(root).join(id));
            Ok(archived)
        }
        None => Err(match state(root, id)? {
            State::Archived(a) => ThreadIndexError::Archived {
                id: id.to_owned(),
                status: a.status,
                onto: None,
            },
            State::Active { .. } => ThreadIndexError::Unknown(id.to_owned()),
        }),
    }
}

/// A thread that takes the place of a rebased one: its id, workflow version, head
/// and number of steps.
#[derive(Debug, Clone, Copy)]
pub struct Successor<'a> {
    pub id: &'a str,
    pub workflow: Hash,
    pub head: Hash,
    pub steps: u64,
}

/// Archives active thread `id`, still at `head`, as [`REBASED`] onto `new`, which enters the
/// index with `id` as its parent in the same transaction (one statement over PostgreSQL): both
/// happen or neither, so a crash leaves the old thread active and no new one.
pub fn rebase(
    root: &Path,
    id: &str,
    head: Hash,
    new: &Successor<'_>,
) -> Result<Archived, ThreadIndexError> {
    let done = if let Some(pg) = storage::pg(root).map_err(IndexError::from)? {
        let thread = NewThread {
            id: new.id,
            workflow: new.workflow,
            head: new.head,
            parent: Some(id),
            queued: false,
            steps: Some(new.steps),
        };
        pg.rebase(id, head, &thread)
            .map_err(|e| pg_thread_error(id, e))?
            .map(index_files::archived_of)
    } else {
        let row = index_db::NewRow {
            id: new.id,
            workflow: new.workflow,
            head: new.head,
            parent: Some(id),
            steps: Some(new.steps),
        };
        let done = index_db::rebase(root, id, head, &row)?;
        if done.is_some() {
            let _ = std::fs::remove_file(queue_dir(root).join(id));
        }
        done
    };
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
pub fn successor(root: &Path, id: &str) -> Result<Option<String>, ThreadIndexError> {
    if let Some(pg) = storage::pg(root).map_err(IndexError::from)? {
        return pg.successor_of(id).map_err(|e| IndexError::from(e).into());
    }
    Ok(index_db::successor(root, id)?)
}

/// The thread that thread `id` took the place of by a rebase, if it did: its parent in the
/// index, when that one was rebased onto `id`.
pub fn rebased_from(root: &Path, id: &str) -> Option<String> {
    let parent = match storage::pg(root).ok()? {
        Some(pg) => match pg.thread(id).ok()? {
            ThreadState::Active(t) => t.parent,
            ThreadState::Archived(a) => a.parent,
        },
        None => index_db::get(root, id).ok()??.parent,
    }?;
    (successor(root, &parent).ok()?? == id).then_some(parent)
}

/// Where a directory store marks runnable threads: one empty file per queued thread.
fn queue_dir(root: &Path) -> std::path::PathBuf {
    root.join("queue")
}

/// Makes an active thread runnable for workers (`thread start --queue`, `thread
/// queue`) until it is done, killed, failed or awaiting a person.
pub fn queue(root: &Path, id: &str) -> Result<(), ThreadIndexError> {
    if let Some(pg) = storage::pg(root).map_err(IndexError::from)? {
        return pg.queue(id).map_err(|e| pg_thread_error(id, e));
    }
    active_head(root, id)?;
    let path = queue_dir(root).join(id);
    let mut options = std::fs::OpenOptions::new();
    options.create(true).truncate(false).write(true);
    crate::file_util::open_in_dir(&options, &path)
        .map(drop)
        .map_err(|source| IndexError::Io { path, source }.into())
}

/// Takes a thread off the run queue (it finished, failed or awaits a person). Not queued is
/// no error.
pub fn dequeue(root: &Path, id: &str) -> Result<(), ThreadIndexError> {
    if let Some(pg) = storage::pg(root).map_err(IndexError::from)? {
        return match pg.dequeue(id) {
            Ok(()) | Err(PgError::Archived { .. } | PgError::UnknownThread(_)) => Ok(()),
            Err(e) => Err(IndexError::from(e).into()),
        };
    }
    let path = queue_dir(root).join(id);
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(IndexError::Io { path, source }.into()),
    }
}

/// The queued threads of a directory store, longest waiting first (markers of threads no
/// longer active are removed).
pub fn queued(root: &Path) -> Result<Vec<String>, ThreadIndexError> {
    let dir = queue_dir(root);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(IndexError::Io { path: dir, source }.into()),
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let Some(id) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if !index_db::get(root, &id)?.is_some_and(|row| row.is_active()) {
            let _ = std::fs::remove_file(entry.path());
            continue;
        }
        let since = entry
            .metadata()
            .and_then(|m| m.modified())
            .unwrap_or(std::time::SystemTime::UNIX_EPOCH);
        found.push((since, id));
    }
    found.sort();
    Ok(found.into_iter().map(|(_, id)| id).collect())
}

/// A PostgreSQL error about one thread in the index's words.
fn pg_thread_error(id: &str, e: PgError) -> ThreadIndexError {
    match e {
        PgError::Archived { status, .. } => ThreadIndexError::Archived {
            id: id.to_owned(),
            status,
            onto: None,
        },
        PgError::UnknownThread(_) => ThreadIndexError::Unknown(id.to_owned()),
        e => IndexError::from(e).into(),
    }
}
