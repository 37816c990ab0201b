//! Saving a workflow through the mount: which names register, checking, registering, and the
//! text of `workflows/error`.
//!
//! Two kinds of names are meaningful in `workflows/`: `<name>/workflow.yaml` (a new version of
//! `<name>`; the `name:` inside must agree) and `<anything>.yaml` directly in `workflows/`
//! (registered under the `name:` inside). Hidden names (`.#x.yaml`, emacs' lock file) and backup
//! names (`x.yaml~`) are never meaningful, so editors' side files stay scratch files.
//!
//! Registration goes through the same engine calls as `uwf workflow put` (parse, store, register
//! under the registry lock), so a save through the mount and one through the CLI are the same
//! thing.
//!
//! Architecture Invariant: nothing is stored or registered unless [`check`] accepted the text;
//! a refusal is [`FsError::Refused`] with the engine's reason, never an I/O error.

use std::sync::Arc;
use std::time::SystemTime;

use crate::cas::Hash;
use crate::cas::store::now_ms;
use crate::engine::workflow::registry;
use crate::engine::workflow::{self, Checked, WorkflowError};

use super::error::FsError;
use super::inode::{Key, WfKey};
use super::views::Source;

/// What saving a file at some name means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// `workflows/<name>/workflow.yaml`: a version of this name.
    Workflow(Arc<str>),
    /// `workflows/<anything>.yaml`: registered under the name inside.
    Any,
}

/// The meaning of a file named `name` in directory `dir`, if saving it registers something.
pub(crate) fn target_of(dir: &Key, name: &str) -> Option<Target> {
    match dir {
        Key::Workflows(WfKey::Dir(n)) if name == "workflow.yaml" => {
            Some(Target::Workflow(n.clone()))
        }
        Key::Workflows(WfKey::Root)
            if name.len() > ".yaml".len()
                && name.ends_with(".yaml")
                && !name.starts_with('.')
                && !name.starts_with('#') =>
        {
            Some(Target::Any)
        }
        _ => None,
    }
}

/// A successful registration.
#[derive(Debug, Clone)]
pub(crate) struct Saved {
    pub name: Arc<str>,
    pub hash: Hash,
}

/// Parses and validates `text` for `target` without storing anything.
pub(crate) fn check(text: &[u8], target: &Target) -> Result<Checked, String> {
    let text = std::str::from_utf8(text)
        .map_err(|e| format!("the file is not UTF-8 text ({e}); nothing was registered"))?;
    if text.trim().is_empty() {
        return Err("the file is empty: nothing to register".to_owned());
    }
    // The same file-level checks as `uwf workflow put` (at most 1 MiB, no NUL bytes).
    let checked = workflow::parse_bytes(text.as_bytes())
        .map_err(|problems| WorkflowError::Invalid { problems }.to_string())?;
    if let Target::Workflow(expected) = target {
        let got = &checked.definition.workflow.name;
        if got.as_str() != &**expected {
            return Err(format!(
                "`name: {got}` does not match the directory `{expected}`: a workflow.yaml saves a \
                 new version of its own directory's workflow; to register `{got}`, save the \
                 text as workflows/{got}.yaml"
            ));
        }
    }
    Ok(checked)
}

/// Checks, stores and registers `text`. A refusal is [`FsError::Refused`] with the reason.
pub(crate) fn register(source: &Source, text: &[u8], target: &Target) -> Result<Saved, FsError> {
    let checked = check(text, target).map_err(FsError::Refused)?;
    let name: Arc<str> = Arc::from(checked.definition.workflow.name.as_str());
    // From the first node until the registry names them: GC keeps them (see `cas::gc`).
    let _pin = source.store().pin().map_err(FsError::internal)?;
    let hash = checked
        .definition
        .store(source.store())
        .map_err(|e| match e {
            WorkflowError::Invalid { .. } => FsError::Refused(e.to_string()),
            other => FsError::internal(other),
        })?;
    // The text as saved, comments and all, is what the mount and `workflow show` give back.
    let text = String::from_utf8_lossy(text);
    let kept = registry::store_source(source.store(), &text).map_err(FsError::internal)?;
    registry::register_source(source.root(), &name, hash, Some(kept), now_ms()).map_err(
        |e| match e {
            registry::RegistryError::Index(e) => FsError::internal(e),
            other => FsError::Refused(other.to_string()),
        },
    )?;
    source.registry_changed();
    Ok(Saved { name, hash })
}

/// The text of `workflows/error` after a refused save of `path` (relative to the mount).
pub(crate) fn error_text(path: &str, reason: &str, kept: &str) -> String {
    let when = humantime::format_rfc3339_seconds(SystemTime::now());
    format!(
        "{when} {path}: not registered\n{reason}\n\n{kept}\n",
        reason = reason.trim_end()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meaningful_names() {
        let dir = Key::Workflows(WfKey::Dir("demo".into()));
        assert_eq!(
            target_of(&dir, "workflow.yaml"),
            Some(Target::Workflow("demo".into()))
        );
        assert_eq!(target_of(&dir, "other.yaml"), None);
        assert_eq!(
            target_of(&Key::Workflows(WfKey::Root), "new.yaml"),
            Some(Target::Any)
        );
        for side_file in [
            ".#new.yaml",
            "#new.yaml#",
            "new.yaml~",
            ".new.yaml.swp",
            "4913",
            "sedAbc123",
            ".yaml",
        ] {
            assert_eq!(
                target_of(&Key::Workflows(WfKey::Root), side_file),
                None,
                "{side_file}"
            );
        }
    }

    #[test]
    fn check_explains_refusals() {
        let any = Target::Any;
        assert!(check(b"", &any).unwrap_err().contains("empty"));
        assert!(check(&[0xff, 0xfe], &any).unwrap_err().contains("UTF-8"));
        assert!(
            check(b"name: [unclosed", &any)
                .unwrap_err()
                .contains("YAML does not parse")
        );
        // The CLI's limits hold here too, although a scratch file may grow larger.
        let big = format!("name: big\ndescription: \"{}\"\n", "x".repeat(1 << 20));
        assert!(
            check(big.as_bytes(), &any)
                .unwrap_err()
                .contains("at most 1048576")
        );
        assert!(check(b"name: x\0\n", &any).unwrap_err().contains("NUL"));
    }
}
