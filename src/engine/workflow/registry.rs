//! The workflow registry (`registry.yaml`): names → current hash, with earlier versions.
//!
//! Every change is a read-modify-write under the registry lock with an atomic replace, so
//! concurrent `workflow put`s never lose an entry. Threads refer to workflow hashes, not names,
//! so removing or rolling back a name never breaks a running thread.

use crate::advice::Advice;
use std::path::Path;

use crate::cas::{Hash, Store, builtin};

use crate::engine::storage::index_files::{self, IndexError, Registry, RegistryEntry, Version};
use crate::engine::workflow::{Workflow, WorkflowError};

/// Errors of registry operations.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RegistryError {
    #[error("no workflow named `{0}` in the registry")]
    UnknownName(String),
    #[error("`{name}` is neither a registered workflow name nor the hash of a stored workflow{}",
        guess.as_ref().map(|g| format!("; did you mean `{g}`?")).unwrap_or_default())]
    Unresolved { name: String, guess: Option<String> },
    #[error("{hash} is not a version of `{name}`")]
    NotAVersion { name: String, hash: Hash },
    #[error("`{0}` has no earlier version to roll back to")]
    NoEarlierVersion(String),
    #[error(transparent)]
    Index(#[from] IndexError),
    #[error(transparent)]
    Workflow(#[from] WorkflowError),
}

impl Advice for RegistryError {
    fn hints(&self) -> Vec<String> {
        match self {
            RegistryError::UnknownName(_) | RegistryError::Unresolved { .. } => vec![
                "`uwf workflow list` shows the registered names".to_owned(),
                "`uwf workflow put FILE` registers one (examples/ has some)".to_owned(),
            ],
            RegistryError::NotAVersion { name, .. } => {
                vec![format!("`uwf workflow history {name}` lists its versions")]
            }
            RegistryError::Index(e) => e.hints(),
            RegistryError::Workflow(e) => e.hints(),
            _ => Vec::new(),
        }
    }
    fn is_busy(&self) -> bool {
        match self {
            RegistryError::Index(e) => e.is_busy(),
            RegistryError::Workflow(e) => e.is_busy(),
            _ => false,
        }
    }
}

/// What `register` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Registered {
    /// The name was new.
    New,
    /// The name already pointed at this hash: nothing changed.
    Unchanged,
    /// A new version replaced `previous`, which moved to the history.
    Updated { previous: Hash },
}

/// Makes `hash` the current version of `name`.
#[cfg(test)]
pub(crate) fn register(
    root: &Path,
    name: &str,
    hash: Hash,
    now: u64,
) -> Result<Registered, RegistryError> {
    register_source(root, name, hash, None, now)
}

/// [`register`], remembering `source` (a `text` node: the YAML as it was saved, comments and all)
/// as the text of that version. The definition's hash does not depend on it (a comment is not part
/// of a definition); saving the same definition with other comments keeps the hash and replaces the
/// text.
pub(crate) fn register_source(
    root: &Path,
    name: &str,
    hash: Hash,
    source: Option<Hash>,
    now: u64,
) -> Result<Registered, RegistryError> {
    index_files::update_registry(root, |reg: &mut Registry| {
        let outcome = match reg.get_mut(name) {
            None => {
                reg.insert(
                    name.to_owned(),
                    RegistryEntry {
                        hash,
                        registered_at: now,
                        source,
                        history: Vec::new(),
                    },
                );
                Registered::New
            }
            Some(entry) if entry.hash == hash => {
                if source.is_some() {
                    entry.source = source;
                }
                Registered::Unchanged
            }
            Some(entry) => {
                let previous = entry.hash;
                entry.history.retain(|v| v.hash != hash);
                entry.history.push(Version {
                    hash: previous,
                    registered_at: entry.registered_at,
                    source: entry.source,
                });
                entry.hash = hash;
                entry.registered_at = now;
                entry.source = source;
                Registered::Updated { previous }
            }
        };
        Ok::<_, RegistryError>(outcome)
    })
}

/// Stores `text` as the source of a version about to be registered (a `text` node).
pub(crate) fn store_source(store: &Store, text: &str) -> Result<Hash, RegistryError> {
    store
        .put(builtin::hash_of("text"), &serde_json::Value::from(text))
        .map_err(|e| RegistryError::from(WorkflowError::from(e)))
}

/// The text saved for workflow version `hash` under any name, if one was kept.
pub(crate) fn source_text(store: &Store, hash: Hash) -> Option<String> {
    let registry = list(store.root()).ok()?;
    let source = registry.values().find_map(|e| {
        if e.hash == hash {
            return e.source;
        }
        e.history
            .iter()
            .find(|v| v.hash == hash)
            .and_then(|v| v.source)
    })?;
    let node = store.get(source).ok()?;
    node.payload.as_str().map(str::to_owned)
}

/// All registered workflows by name.
pub(crate) fn list(root: &Path) -> Result<Registry, RegistryError> {
    Ok(index_files::read_registry(root)?)
}

/// The entry of one name.
pub(crate) fn entry(root: &Path, name: &str) -> Result<RegistryEntry, RegistryError> {
    list(root)?
        .remove(name)
        .ok_or_else(|| RegistryError::UnknownName(name.to_owned()))
}

/// Makes an earlier version current again: `target`, or the most recent earlier one.
/// Returns `(from, to)`.
pub(crate) fn rollback(
    root: &Path,
    name: &str,
    target: Option<Hash>,
    now: u64,
) -> Result<(Hash, Hash), RegistryError> {
    index_files::update_registry(root, |reg: &mut Registry| {
        let entry = reg
            .get_mut(name)
            .ok_or_else(|| RegistryError::UnknownName(name.to_owned()))?;
        let to = match target {
            Some(h) if h == entry.hash => return Ok((h, h)),
            Some(h) if entry.history.iter().any(|v| v.hash == h) => h,
            Some(h) => {
                return Err(RegistryError::NotAVersion {
                    name: name.to_owned(),
                    hash: h,
                });
            }
            None => {
                entry
                    .history
                    .last()
                    .ok_or_else(|| RegistryError::NoEarlierVersion(name.to_owned()))?
                    .hash
            }
        };
        let from = entry.hash;
        let to_source = entry
            .history
            .iter()
            .find(|v| v.hash == to)
            .and_then(|v| v.source);
        entry.history.retain(|v| v.hash != to);
        entry.history.push(Version {
            hash: from,
            registered_at: entry.registered_at,
            source: entry.source,
        });
        entry.hash = to;
        entry.registered_at = now;
        entry.source = to_source;
        Ok((from, to))
    })
}

/// Removes a name (its versions stay in the store while threads use them).
pub(crate) fn remove(root: &Path, name: &str) -> Result<RegistryEntry, RegistryError> {
    index_files::update_registry(root, |reg: &mut Registry| {
        reg.remove(name)
            .ok_or_else(|| RegistryError::UnknownName(name.to_owned()))
    })
}

/// Resolves a registered name, or the hash of a stored workflow node.
pub(crate) fn resolve(store: &Store, name_or_hash: &str) -> Result<Hash, RegistryError> {
    let registry = list(store.root())?;
    if let Some(entry) = registry.get(name_or_hash) {
        return Ok(entry.hash);
    }
    if let Ok(hash) = Hash::parse(name_or_hash) {
        match store.get(hash) {
            Ok(node) if builtin::is_workflow(node.type_hash) => return Ok(hash),
            Ok(_) => return Err(WorkflowError::NotAWorkflow(hash).into()),
            Err(crate::cas::StoreError::NotFound(_)) => {}
            Err(e) => return Err(WorkflowError::from(e).into()),
        }
    }
    let guess = crate::engine::suggest::closest(name_or_hash, registry.keys().map(String::as_str))
        .map(str::to_owned);
    Err(RegistryError::Unresolved {
        name: name_or_hash.to_owned(),
        guess,
    })
}

/// Resolves and loads a workflow.
pub(crate) fn load(store: &Store, name_or_hash: &str) -> Result<(Hash, Workflow), RegistryError> {
    let hash = resolve(store, name_or_hash)?;
    Ok((hash, Workflow::load(store, hash)?))
}
