//! A thread's row, in each shape the thread index takes it, defined once for both backends: the
//! directory store's `index.db` and PostgreSQL's `threads` and `history` read and write these
//! types directly, and the storage seam (`engine::storage::seam`) hands them on unchanged.
//! They live here, in the lowest layer both sides may import (`pg` knows only `cas`).
//!
//! Where the two stores differ, it is decided here once: times are milliseconds since the
//! epoch as `u64` (PostgreSQL's `bigint` is converted where it is read and written), and
//! whether a step holds a thread is `Option<bool>` (only PostgreSQL's leases know it).

use serde::{Deserialize, Serialize};

use crate::cas::Hash;

/// The characters of a start prompt a search looks at: long enough for what a person types to
/// find a thread, short enough that a pass over 100,000 rows stays well under the dashboard's
/// 200 ms.
pub(crate) const SEARCH_CHARS: usize = 1000;

/// What a search reads of a start prompt: its first [`SEARCH_CHARS`] characters, lowercase
/// (both stores keep this in their `prompt` column).
pub fn search_text(prompt: &str) -> String {
    let cut = match prompt.char_indices().nth(SEARCH_CHARS) {
        Some((at, _)) => &prompt[..at],
        None => prompt,
    };
    cut.to_lowercase()
}

/// What a thread with no step spent, as its row keeps it ([`IndexRow::spent`]): nothing, in
/// the engine's shape (an empty JSON object).
pub const NOTHING_SPENT: &str = "{}";

/// What moving a thread's head one step does to what its row knows it spent
/// ([`IndexRow::spent`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpentChange<'a> {
    /// Unknown again: a reader works it out from the steps.
    Forget,
    /// The new step spent nothing: what the row knew still holds.
    Keep,
    /// What the new step spent, one line (the engine's JSON) to add after what the row knows,
    /// after a newline; a row that did not know stays unknown, and one past
    /// [`SPENT_LINES_LIMIT`] forgets.
    Add(&'a str),
}

/// The longest spending text (in characters) a head move adds a line to; past it the row
/// forgets, and the next reader writes the sum back as one line. Keeps rows small on a thread
/// nobody lists.
pub const SPENT_LINES_LIMIT: usize = 4096;

/// A new active thread to register.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewThread<'a> {
    pub id: &'a str,
    pub workflow: Hash,
    pub head: Hash,
    /// The thread this one was forked or spawned from.
    pub parent: Option<&'a str>,
    /// Whether workers may claim it at once (`thread start --queue`).
    pub queued: bool,
    /// Steps from the start to `head`, when known.
    pub steps: Option<u64>,
    /// The start prompt, when the caller knows (else the first search reads it); the store
    /// keeps its [`search_text`].
    pub prompt: Option<&'a str>,
    /// What its steps spent (see [`IndexRow::spent`]), when known.
    pub spent: Option<&'a str>,
}

/// A thread that takes the place of a rebased one (its parent): its id, workflow version,
/// head and number of steps.
#[derive(Debug, Clone, Copy)]
pub struct Successor<'a> {
    pub id: &'a str,
    pub workflow: Hash,
    pub head: Hash,
    pub steps: u64,
    /// Its start prompt (the store keeps its [`search_text`]).
    pub prompt: &'a str,
}

/// One row of the index, active or archived, as a listing needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexRow {
    pub id: String,
    pub workflow: Hash,
    pub head: Hash,
    /// `active` (PostgreSQL's `failed` and `awaiting` too: the error and question columns tell
    /// them), `done`, `killed` or `rebased`.
    pub status: String,
    /// Steps from the start to the head, when known.
    pub steps: Option<u64>,
    /// The role the moderator picks at the head, when known.
    pub next: Option<String>,
    /// The last step attempt's error, while it stands.
    pub error: Option<String>,
    /// The question waited on (JSON).
    pub awaiting: Option<String>,
    /// Whether a step holds it, when the index knows (PostgreSQL's leases).
    pub running: Option<bool>,
    /// Its last change: when it was archived, for an archived thread.
    pub updated_ms: u64,
    /// The thread it was forked or spawned from, when known.
    pub parent: Option<String>,
    /// What the steps up to the head spent, when known: tokens and reported dollars as the
    /// engine writes them (lines of JSON, whose meaning and sum are the engine's; see
    /// `docs/LLM.md`). A step adds its own line as it moves the head ([`SpentChange`]); a row
    /// that does not know stays unknown until a reader works it out and writes it back.
    pub spent: Option<String>,
}

impl IndexRow {
    pub(crate) fn is_active(&self) -> bool {
        self.status == "active"
    }

    /// The row of an archived thread as [`ArchivedThread`].
    pub(crate) fn archived(&self) -> ArchivedThread {
        ArchivedThread {
            thread: self.id.clone(),
            workflow: self.workflow,
            head: self.head,
            status: self.status.clone(),
            parent: self.parent.clone(),
            completed_ms: self.updated_ms,
        }
    }
}

/// An active thread's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveThread {
    pub id: String,
    pub workflow: Hash,
    pub head: Hash,
    /// The thread it was forked or spawned from, when known.
    pub parent: Option<String>,
    /// When it started, when known (its start node's timestamp, or its row's creation).
    pub started_ms: Option<u64>,
    /// Whether workers may claim it (a copy does not carry it: copied threads are not queued).
    pub queued: bool,
}

/// An archived thread's row. Its serde form is a line of the first layout's `history.jsonl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArchivedThread {
    pub thread: String,
    pub workflow: Hash,
    pub head: Hash,
    /// `done`, `killed` or `rebased`.
    pub status: String,
    /// The thread it was forked or spawned from, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    #[serde(rename = "completedAt")]
    pub completed_ms: u64,
}

/// Every thread, active or archived, with its workflow (the mount's `threads/`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub id: String,
    pub workflow: Hash,
    pub head: Hash,
    /// `done`, `killed` or `rebased` once archived.
    pub archived: Option<String>,
}

/// What a thread's row knows beyond its head, which lists show without reading the thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowFacts {
    /// Steps from the start to the head.
    pub steps: u64,
    /// The role the moderator picks at the head (active threads).
    pub next: Option<String>,
    /// What the steps spent ([`IndexRow::spent`]), when known.
    pub spent: Option<String>,
}

/// What a reader worked out from the nodes for a row that did not know it all, written back
/// only while the thread is still at `head` (a cache: lost, it is worked out again). Of its
/// facts, the next role is kept for active threads only, and a spending of `None` keeps the
/// row's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Learned {
    pub id: String,
    pub head: Hash,
    pub facts: RowFacts,
}

/// Every thread of a store, in the form both backends read and write whole (what
/// `uwf store copy` moves).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exported {
    pub active: Vec<ActiveThread>,
    pub archived: Vec<ArchivedThread>,
    /// What rows know beyond heads (steps, an active thread's next role), by thread.
    pub known: std::collections::HashMap<String, RowFacts>,
}

/// A count or milliseconds as PostgreSQL's `bigint` (saturating).
pub(crate) fn to_bigint(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// A count or milliseconds from PostgreSQL's `bigint` (below zero is zero).
pub(crate) fn from_bigint(ms: i64) -> u64 {
    u64::try_from(ms).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_archived_row_reads_as_a_history_line() {
        let line = format!(
            r#"{{"thread":"T","workflow":"{w}","head":"{w}","status":"done","completedAt":5}}"#,
            w = Hash::from_u64(1)
        );
        let a: ArchivedThread = serde_json::from_str(&line).unwrap();
        assert_eq!((a.parent, a.completed_ms), (None, 5));
    }
}
