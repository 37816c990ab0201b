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

use std::path::Path;

use crate::engine::storage::{self, index_files::IndexError};

pub use crate::engine::storage::seam::records::{Binding, ThreadContext};

/// The recorded context of thread `id`; the default (no directory, no bindings, not paused)
/// when none was recorded.
pub fn read(root: &Path, id: &str) -> Result<ThreadContext, IndexError> {
    storage::handle(root)?.records().context(id)
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
    use crate::engine::storage::seam::records::dir::context_path as path;
    use std::collections::BTreeMap;

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
            budget: None,
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
