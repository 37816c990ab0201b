//! Making the directory store's thread index, `index.db` (see [`super`]): the
//! database is built under a temp name — with the entries of the first layout,
//! `threads.yaml` (active id → head) and `history.jsonl` (archived threads), when they exist —
//! synced, then hard-linked into place, never replacing one that exists; only then are the old
//! files renamed to `*.migrated`. A `kill -9` at any point leaves either no `index.db` (the
//! next command makes it again from the untouched old files) or a complete one.

use std::path::Path;

use rusqlite::{Connection, params};

use super::{Bulk, FILE, db_error, insert_rows, path_of};
use crate::cas::Hash;
use crate::engine::storage::index_files::IndexError;
use crate::engine::storage::index_schema::{self, SCHEMA};

/// The first layout's files, read once to migrate them.
pub(super) const LEGACY_THREADS: &str = "threads.yaml";
pub(super) const LEGACY_HISTORY: &str = "history.jsonl";

/// Makes `index.db`: built under a temp name (with the first layout's entries, if any), synced,
/// then hard-linked into place — a concurrent maker's file is never replaced, and a crash leaves
/// only the temp file (removed by the next maker once its process is gone).
pub(super) fn make(root: &Path) -> Result<(), IndexError> {
    std::fs::create_dir_all(root).map_err(|source| IndexError::Io {
        path: root.to_path_buf(),
        source,
    })?;
    remove_abandoned_temps(root);
    let path = path_of(root);
    let tmp = root.join(format!(
        "{FILE}.tmp-{}-{}",
        std::process::id(),
        ulid::Ulid::new()
    ));
    let result = build(root, &tmp).and_then(|()| match std::fs::hard_link(&tmp, &path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(source) => Err(IndexError::Io {
            path: path.clone(),
            source,
        }),
    });
    let _ = std::fs::remove_file(&tmp);
    let linked = result?;
    std::fs::File::open(root)
        .and_then(|dir| dir.sync_all())
        .map_err(|source| IndexError::Io {
            path: root.to_path_buf(),
            source,
        })?;
    if linked {
        // The old files are kept for the record, under names nothing reads.
        for name in [LEGACY_THREADS, LEGACY_HISTORY] {
            let from = root.join(name);
            if from.exists() {
                let _ = std::fs::rename(&from, root.join(format!("{name}.migrated")));
            }
        }
    }
    Ok(())
}

/// Temp databases left by makers that died (their pid is gone).
fn remove_abandoned_temps(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    let prefix = format!("{FILE}.tmp-");
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(&prefix)) else {
            continue;
        };
        let alive = rest
            .split('-')
            .next()
            .and_then(|p| p.parse::<i32>().ok())
            .is_some_and(|pid| {
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
            });
        if !alive {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Writes a complete index at `tmp`: schema, then the first layout's entries.
fn build(root: &Path, tmp: &Path) -> Result<(), IndexError> {
    let err = db_error(root, "creating");
    let mut conn = Connection::open(tmp).map_err(&err)?;
    conn.execute_batch("pragma journal_mode = wal; pragma synchronous = full;")
        .map_err(&err)?;
    let tx = conn.transaction().map_err(&err)?;
    index_schema::create(&tx).map_err(&err)?;
    tx.execute(
        "insert into meta (key, value) values ('schema', ?1)",
        params![SCHEMA],
    )
    .map_err(&err)?;
    // Archived first: an entry in both files (a crash between archiving's two writes) is
    // still active, the later row replacing the earlier.
    insert_rows(&tx, &legacy_rows(root)?, None, true).map_err(&err)?;
    tx.commit().map_err(&err)?;
    // Closing checkpoints the log into the file and removes it: the file alone is the index.
    conn.close().map_err(|(_, e)| err(e))?;
    let file = std::fs::File::open(tmp).map_err(|source| IndexError::Io {
        path: tmp.to_path_buf(),
        source,
    })?;
    file.sync_all().map_err(|source| IndexError::Io {
        path: tmp.to_path_buf(),
        source,
    })?;
    Ok(())
}

/// The workflow and step count of an active thread of the first layout (which recorded only
/// its head), from the head's cached history (walked and cached if need be; forks share
/// heads, so each is read once); `None` when its nodes cannot be read (fsck reports it).
fn facts_of(
    store: Option<&crate::cas::Store>,
    known: &mut std::collections::HashMap<Hash, Option<(Hash, u64)>>,
    head: Hash,
) -> Option<(Hash, u64)> {
    *known.entry(head).or_insert_with(|| {
        let history = crate::engine::chain::history(store?, head).ok()?;
        Some((history.start().workflow, history.len() as u64))
    })
}

/// The first layout's entries as rows: archived threads, then active ones (whose workflow and
/// step count come from their heads).
fn legacy_rows(root: &Path) -> Result<Vec<Bulk>, IndexError> {
    let archived = crate::engine::storage::index_files::read_legacy_history(root)?;
    let active = crate::engine::storage::index_files::read_legacy_threads(root)?;
    let store = crate::cas::Store::open(root).ok();
    let mut known = std::collections::HashMap::new();
    let mut rows: Vec<Bulk> = archived
        .into_iter()
        .map(|a| Bulk {
            id: a.thread,
            workflow: a.workflow,
            head: a.head,
            parent: None,
            archived: Some((a.status, a.completed_ms)),
            steps: None,
            next: None,
            prompt: None,
            spent: None,
        })
        .collect();
    rows.extend(active.into_iter().map(|(id, head)| {
        let facts = facts_of(store.as_ref(), &mut known, head);
        Bulk {
            id,
            workflow: facts.map_or(head, |f| f.0),
            head,
            parent: None,
            archived: None,
            steps: facts.map(|f| f.1),
            next: None,
            prompt: None,
            spent: None,
        }
    }));
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::storage::index_db::{active, archived};

    #[test]
    fn the_first_layout_is_migrated_once_and_kept_aside() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(
            root.join(LEGACY_THREADS),
            "01JAAAAAAAAAAAAAAAAAAAAAAA: F5VV55NBKX1R5\n",
        )
        .unwrap();
        std::fs::write(
            root.join(LEGACY_HISTORY),
            "{\"thread\":\"01JBBBBBBBBBBBBBBBBBBBBBBB\",\"workflow\":\"EYHPV6X8XHTCS\",\"head\":\"827F196W26J4M\",\"status\":\"done\",\"completedAt\":5}\n",
        )
        .unwrap();
        // A reader migrates too: the old files must not be ignored.
        let found = active(root).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(archived(root).unwrap().len(), 1);
        assert!(!root.join(LEGACY_THREADS).exists());
        assert!(root.join("threads.yaml.migrated").exists());
        // A leftover temp of a dead maker is removed by the next maker.
        let stale = root.join(format!("{FILE}.tmp-999999999-x"));
        std::fs::write(&stale, b"").unwrap();
        let other = tempfile::tempdir().unwrap();
        std::fs::copy(&stale, other.path().join(stale.file_name().unwrap())).unwrap();
        make(other.path()).unwrap();
        assert!(!other.path().join(stale.file_name().unwrap()).exists());
    }
}
