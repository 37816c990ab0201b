//! The thread index: `threads.yaml` (active thread → head) and `history.jsonl` (archived
//! threads). The per-thread run files and step lock are [`super::run_files`].
//!
//! Architecture Invariant: the head of a thread only moves by compare-and-set under the
//! `threads` lock with an atomic replace of `threads.yaml`, so a crash leaves the old or the new
//! head, never a broken file. Archiving writes `history.jsonl` first and `threads.yaml` second:
//! a crash in between leaves the thread listed in both (still active), never in neither.

use crate::advice::Advice;
use std::path::Path;

use crate::cas::Hash;
use crate::cas::store::now_ms;

use crate::engine::index_files::{self, Archived, IndexError, Threads};

/// Errors of the thread index.
#[derive(Debug, thiserror::Error)]
pub enum ThreadIndexError {
    #[error("no thread `{0}`")]
    Unknown(String),
    #[error("thread {id} is archived ({status}); it cannot change any more")]
    Archived { id: String, status: String },
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

/// Where a thread stands in the index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    Active { head: Hash },
    Archived(Archived),
}

const THREADS: &str = "threads.yaml";

/// Looks a thread up: active first, then archived.
pub fn state(root: &Path, id: &str) -> Result<State, ThreadIndexError> {
    if let Some(head) = index_files::read_threads(root)?.get(id) {
        return Ok(State::Active { head: *head });
    }
    match index_files::read_history(root)?
        .into_iter()
        .rev()
        .find(|a| a.thread == id)
    {
        Some(archived) => Ok(State::Archived(archived)),
        None => Err(ThreadIndexError::Unknown(id.to_owned())),
    }
}

/// The head of an active thread (an error naming the status for an archived one).
pub fn active_head(root: &Path, id: &str) -> Result<Hash, ThreadIndexError> {
    match state(root, id)? {
        State::Active { head } => Ok(head),
        State::Archived(a) => Err(ThreadIndexError::Archived {
            id: id.to_owned(),
            status: a.status,
        }),
    }
}

/// A new thread id (a ULID).
pub fn new_id() -> String {
    ulid::Ulid::new().to_string()
}

/// Registers a new active thread at `head`.
pub fn add(root: &Path, id: &str, head: Hash) -> Result<(), ThreadIndexError> {
    index_files::update_yaml(root, THREADS, |threads: &mut Threads| {
        threads.insert(id.to_owned(), head);
        Ok::<_, ThreadIndexError>(())
    })
}

/// Moves an active thread's head from `expected` to `new`, or fails if it moved meanwhile.
pub fn compare_and_set(
    root: &Path,
    id: &str,
    expected: Hash,
    new: Hash,
) -> Result<(), ThreadIndexError> {
    index_files::update_yaml(root, THREADS, |threads: &mut Threads| {
        match threads.get_mut(id) {
            Some(head) if *head == expected => {
                *head = new;
                Ok(())
            }
            Some(head) => Err(ThreadIndexError::HeadMoved {
                id: id.to_owned(),
                expected,
                actual: *head,
            }),
            None => Err(ThreadIndexError::Unknown(id.to_owned())),
        }
    })
}

/// Archives an active thread at its current head with `status` (`done` or `killed`).
pub fn archive(
    root: &Path,
    id: &str,
    workflow: Hash,
    status: &str,
) -> Result<Archived, ThreadIndexError> {
    let _guard = index_files::lock(root, THREADS)?;
    let mut threads = index_files::read_threads(root)?;
    let Some(head) = threads.get(id).copied() else {
        return Err(match state(root, id)? {
            State::Archived(a) => ThreadIndexError::Archived {
                id: id.to_owned(),
                status: a.status,
            },
            State::Active { .. } => ThreadIndexError::Unknown(id.to_owned()),
        });
    };
    let archived = Archived {
        thread: id.to_owned(),
        workflow,
        head,
        status: status.to_owned(),
        completed_at: now_ms(),
    };
    let history_path = root.join("history.jsonl");
    let mut history = match std::fs::read(&history_path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(source) => {
            return Err(IndexError::Io {
                path: history_path,
                source,
            }
            .into());
        }
    };
    if !history.is_empty() && !history.ends_with(b"\n") {
        history.push(b'\n');
    }
    history.extend_from_slice(
        serde_json::to_string(&archived)
            .expect("archived entry serializes")
            .as_bytes(),
    );
    history.push(b'\n');
    index_files::write_file(root, &history_path, &history)?;
    threads.remove(id);
    let text = serde_yaml::to_string(&threads).expect("threads serialize");
    index_files::write_locked(root, THREADS, text.as_bytes())?;
    Ok(archived)
}
