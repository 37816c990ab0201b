//! A thread's agent context: the working directory its agents run in and the agents its roles
//! are bound to, both recorded when it starts, and whether it is paused.
//!
//! Running threads keep the bindings they started with: an edit of `config.yaml` changes the
//! agents of threads started after it, and `thread rebind` changes a thread's on purpose. A
//! binding keeps an agent's `env` as written (`${NAME}` unexpanded), so no secret is stored.
//!
//! Stored as `runs/<id>.context.json` in a directory store and as a `thread_context` row over
//! PostgreSQL (every machine's workers read it). A thread without a record (started before
//! contexts existed) runs in the caller's directory with the agents the configuration names.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::engine::storage::{self, index_files::IndexError};

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

/// Where a directory store keeps the context of thread `id`.
pub(crate) fn path(root: &Path, id: &str) -> PathBuf {
    root.join("runs").join(format!("{id}.context.json"))
}

/// The recorded context of thread `id`; the default (no directory, no bindings, not paused)
/// when none was recorded.
pub fn read(root: &Path, id: &str) -> Result<ThreadContext, IndexError> {
    storage::handle(root)?.records().context(id)
}

/// A context record's text as a context; `place` names where it was read, for the error.
pub(crate) fn parse(text: &str, place: impl Fn() -> PathBuf) -> Result<ThreadContext, IndexError> {
    serde_json::from_str(text).map_err(|e| IndexError::Damaged {
        path: place(),
        reason: format!("it is not a thread context: {e}"),
    })
}

/// Records the context of thread `id` (replacing any), keeping whether it is paused over
/// PostgreSQL (where that is its own column).
pub fn write(root: &Path, id: &str, context: &ThreadContext) -> Result<(), IndexError> {
    storage::handle(root)?.records().set_context(id, context)
}

/// Pauses or resumes thread `id`.
pub fn set_paused(root: &Path, id: &str, paused: bool) -> Result<(), IndexError> {
    storage::handle(root)?.records().set_paused(id, paused)
}

/// Whether thread `id` is paused.
pub fn is_paused(root: &Path, id: &str) -> Result<bool, IndexError> {
    Ok(read(root, id)?.paused)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_context_round_trips_and_a_missing_one_is_the_default() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        assert_eq!(read(root, "T1").unwrap(), ThreadContext::default());
        let context = ThreadContext {
            workdir: Some("/work/project".into()),
            bindings: BTreeMap::from([(
                "coder".to_owned(),
                Binding {
                    name: "claude".into(),
                    command: "claude-agent".into(),
                    args: vec!["--fast".into()],
                    timeout: 600,
                    env: BTreeMap::from([("TOKEN".into(), "${CLAUDE_TOKEN}".into())]),
                },
            )]),
            paused: false,
        };
        write(root, "T1", &context).unwrap();
        assert_eq!(read(root, "T1").unwrap(), context);
        set_paused(root, "T1", true).unwrap();
        assert!(is_paused(root, "T1").unwrap());
        assert_eq!(read(root, "T1").unwrap().for_fork(), context);
        set_paused(root, "T1", false).unwrap();
        assert_eq!(read(root, "T1").unwrap(), context);
    }

    #[test]
    fn a_damaged_record_is_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("runs")).unwrap();
        std::fs::write(path(dir.path(), "T2"), "{not json").unwrap();
        let err = read(dir.path(), "T2").unwrap_err().to_string();
        assert!(err.contains("T2.context.json"), "{err}");
    }
}
