//! Changing how a thread's steps run without stepping it: `thread pause` and `thread resume`
//! (a paused thread lets its running step finish, then takes no step, from any command, the
//! mount or a worker), and `thread rebind` (its roles bound to other agents on purpose).

use std::collections::BTreeMap;

use serde_json::json;

use crate::advice::Advice;
use crate::cas::Store;
use crate::engine::config::{Config, ConfigError};
use crate::engine::storage::index_files::IndexError;
use crate::engine::thread::author::{self, BadName};
use crate::engine::thread::context::{self, Binding};
use crate::engine::thread::index::{self, ThreadIndexError};
use crate::engine::thread::run_files::RunFiles;
use crate::engine::thread::view::{ThreadView, ViewError};

/// Why a pause, resume or rebind was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ControlError {
    #[error("workflow `{workflow}` has no role `{role}` (its roles: {known})")]
    UnknownRole {
        workflow: String,
        role: String,
        known: String,
    },
    #[error("`{0}` is not ROLE=AGENT")]
    NotAssignment(String),
    #[error(transparent)]
    Index(#[from] ThreadIndexError),
    #[error(transparent)]
    Files(#[from] IndexError),
    #[error(transparent)]
    View(#[from] ViewError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    BadName(#[from] BadName),
}

impl Advice for ControlError {
    fn hints(&self) -> Vec<String> {
        match self {
            ControlError::NotAssignment(_) => vec![
                "name a role and an agent: `uwf thread rebind T coder=claude` (no pairs: every role from config.yaml as it is now)".into(),
            ],
            ControlError::Index(e) => e.hints(),
            ControlError::Files(e) => e.hints(),
            ControlError::View(e) => e.hints(),
            ControlError::Config(e) => e.hints(),
            ControlError::BadName(e) => e.hints(),
            ControlError::UnknownRole { .. } => Vec::new(),
        }
    }
    fn is_busy(&self) -> bool {
        match self {
            ControlError::Index(e) => e.is_busy(),
            ControlError::Files(e) => e.is_busy(),
            ControlError::View(e) => e.is_busy(),
            _ => false,
        }
    }
}

/// Pauses (`true`) or resumes (`false`) active thread `id`, as `by`. Returns whether it was
/// paused before. Recorded, with `by`, in the thread's change feed and log.
pub(crate) fn set_paused(
    store: &Store,
    id: &str,
    paused: bool,
    by: Option<&str>,
) -> Result<bool, ControlError> {
    let by = author::checked(by)?;
    let root = store.root();
    index::active_head(root, id)?;
    let was = context::is_paused(root, id)?;
    if was != paused {
        context::set_paused(root, id, paused)?;
        let kind = if paused { "paused" } else { "resumed" };
        let files = RunFiles::new(root, id);
        author::record(&files, id, kind, by.as_deref(), json!({}));
    }
    Ok(was)
}

/// Binds roles of active thread `id` to agents: each `ROLE=AGENT` of `changes` (a configured
/// agent's name or a command line, as `--agent` takes), or, with no changes, every role to
/// the agent `config` names for it now, as `by`. Returns the thread's bindings after the change.
pub(crate) fn rebind(
    store: &Store,
    config: &Config,
    id: &str,
    changes: &[String],
    by: Option<&str>,
) -> Result<BTreeMap<String, Binding>, ControlError> {
    let by = author::checked(by)?;
    let root = store.root();
    let view = ThreadView::load(store, id)?;
    let workflow = &view.workflow;
    let mut recorded = context::read(root, id)?;
    if changes.is_empty() {
        recorded.bindings = config.bindings(workflow);
    }
    for change in changes {
        let Some((role, agent)) = change.split_once('=') else {
            return Err(ControlError::NotAssignment(change.clone()));
        };
        let (role, agent) = (role.trim(), agent.trim());
        if role.is_empty() || agent.is_empty() {
            return Err(ControlError::NotAssignment(change.clone()));
        }
        if !workflow.roles.contains_key(role) {
            return Err(ControlError::UnknownRole {
                workflow: workflow.name.clone(),
                role: role.to_owned(),
                known: workflow.role_order().join(", "),
            });
        }
        let spec = config.resolve_agent(Some(agent), &workflow.name, role)?;
        recorded
            .bindings
            .insert(role.to_owned(), Binding::from(&spec));
    }
    context::write(root, id, &recorded)?;
    let names: BTreeMap<&str, &str> = recorded
        .bindings
        .iter()
        .map(|(role, b)| (role.as_str(), b.name.as_str()))
        .collect();
    author::record(
        &RunFiles::new(root, id),
        id,
        "rebound",
        by.as_deref(),
        json!({ "agents": names }),
    );
    Ok(recorded.bindings)
}
