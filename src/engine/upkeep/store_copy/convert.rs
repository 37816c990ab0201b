//! The plain conversions of a copy: a directory store's index files read into the form the
//! copy writes, thread index rows, registry entries to and from PostgreSQL rows, and
//! `syncfs` of a directory destination.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;

use crate::cas::{Hash, Node};
use crate::engine::storage::index_files::{self, RegistryEntry, Version};
use crate::engine::thread::{family, forks};
use crate::pg::{ArchivedThread, CopiedThread, RegistryName, RegistryVersion, RowFacts};

use super::{CopyError, Endpoint, Indexes, Side};

/// The index files of the directory store at `root`, with each active thread's workflow and
/// start time from its start node, and its parent from the sub-workflow link or the fork record.
pub(super) fn read_dir_indexes(
    side: &Side,
    root: &Path,
    endpoint: &Endpoint,
) -> Result<Indexes, CopyError> {
    let forked_from: HashMap<String, String> = forks::read(root)?
        .into_iter()
        .filter_map(|f| f.from.map(|from| (f.thread, from)))
        .collect();
    let parent = |id: &str| {
        family::parent(root, id)
            .map(|link| link.thread)
            .or_else(|| forked_from.get(id).cloned())
    };
    let mut active = Vec::new();
    for (id, head) in crate::engine::storage::threads::read_threads(root)? {
        let (workflow, started) = side.start_of(head).map_err(|reason| CopyError::BadThread {
            endpoint: endpoint.to_string(),
            thread: id.clone(),
            reason,
        })?;
        active.push(CopiedThread {
            parent: parent(&id),
            id,
            workflow,
            head,
            started_ms: Some(started),
        });
    }
    let archived = crate::engine::storage::threads::read_history(root)?
        .into_iter()
        .map(|a| ArchivedThread {
            parent: parent(&a.thread),
            thread: a.thread,
            workflow: a.workflow,
            head: a.head,
            status: a.status,
            completed_ms: i64::try_from(a.completed_at).unwrap_or(i64::MAX),
        })
        .collect();
    // What the rows know beyond heads (an archived thread's next role follows from its
    // status, so only active threads' is kept).
    let mut known = HashMap::new();
    let all = crate::engine::storage::index_db::Scan {
        all: true,
        ..Default::default()
    };
    crate::engine::storage::index_db::scan(root, &all, |row| {
        if let Some(steps) = row.steps {
            let next = row.next.filter(|_| row.status == "active");
            known.insert(row.id, RowFacts { steps, next });
        }
        true
    })?;
    Ok(Indexes {
        registry: index_files::read_registry(root)?,
        active,
        archived,
        known,
    })
}

/// A `cas_ref` field of a node's payload.
pub(super) fn ref_field(node: &Node, field: &str) -> Result<Hash, String> {
    node.payload
        .get(field)
        .and_then(Value::as_str)
        .and_then(|t| Hash::parse(t).ok())
        .ok_or_else(|| format!("node {} has no valid `{field}` reference", node.hash))
}

pub(super) fn entry_of(name: &RegistryName) -> RegistryEntry {
    let ms = |v: &RegistryVersion| u64::try_from(v.registered_ms).unwrap_or(0);
    RegistryEntry {
        hash: name.current.hash,
        registered_at: ms(&name.current),
        source: name.current.source,
        history: name
            .history
            .iter()
            .map(|v| Version {
                hash: v.hash,
                registered_at: ms(v),
                source: v.source,
            })
            .collect(),
    }
}

pub(super) fn name_of(name: &str, entry: &RegistryEntry) -> RegistryName {
    let ms = |at: u64| i64::try_from(at).unwrap_or(i64::MAX);
    RegistryName {
        name: name.to_owned(),
        current: RegistryVersion {
            hash: entry.hash,
            registered_ms: ms(entry.registered_at),
            source: entry.source,
        },
        history: entry
            .history
            .iter()
            .map(|v| RegistryVersion {
                hash: v.hash,
                registered_ms: ms(v.registered_at),
                source: v.source,
            })
            .collect(),
    }
}

/// Flushes the filesystem holding `root` to disk (`syncfs(2)`).
pub(super) fn syncfs(root: &Path) -> Result<(), CopyError> {
    use std::os::fd::AsRawFd;
    let sync_error = |source| CopyError::Sync {
        path: root.to_path_buf(),
        source,
    };
    let dir = std::fs::File::open(root).map_err(sync_error)?;
    // SAFETY: `dir` is an open descriptor for the duration of the call; syncfs only reads it.
    let rc = unsafe { libc::syncfs(dir.as_raw_fd()) };
    if rc != 0 {
        return Err(sync_error(std::io::Error::last_os_error()));
    }
    Ok(())
}
