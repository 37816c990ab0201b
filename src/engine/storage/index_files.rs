//! The small mutable index files beside the CAS: `registry.yaml`, `threads.yaml` and
//! `history.jsonl`. They name the heads that keep nodes alive (GC roots).
//!
//! Formats (all optional; a missing file is empty):
//! ```text
//! registry.yaml   <name>: {hash: <hash>, registeredAt: <ms>, history: [{hash, registeredAt}, …]}
//! threads.yaml    <thread-id>: <head hash>
//! history.jsonl   {"thread", "workflow", "head", "status": "done"|"killed", "completedAt"} per line
//! ```
//! A file that exists but does not parse is an error naming the file, never "no entries": a GC
//! that read a damaged index as empty would delete live threads.

use crate::advice::Advice;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cas::Hash;
use crate::engine::storage::{self, StorageError};
pub(crate) use crate::pg::{ArchivedThread, Entry};
use crate::pg::{PgError, RegistryName, RegistryVersion};

/// Errors reading the index files.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Appending a line to an append-only file (`forks.jsonl`, a parent's children) failed.
    #[error("cannot append to {}: {source}", path.display())]
    Append {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Writing an index file failed; nothing was changed (the old file is intact).
    #[error(transparent)]
    Write(#[from] crate::file_util::FileError),
    #[error("{} is damaged: {reason}", path.display())]
    Damaged { path: PathBuf, reason: String },
    /// The PostgreSQL store (or the choice of backend) failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The directory store's thread index (`index.db`) failed.
    #[error("thread index {}: {action}: {source}", path.display())]
    Db {
        path: PathBuf,
        action: &'static str,
        #[source]
        source: rusqlite::Error,
    },
}

impl From<PgError> for IndexError {
    fn from(e: PgError) -> IndexError {
        IndexError::Storage(StorageError::Pg(e))
    }
}

impl Advice for IndexError {
    fn hints(&self) -> Vec<String> {
        match self {
            IndexError::Damaged { .. } => {
                vec!["fix or restore the file by hand; nothing was changed".to_owned()]
            }
            IndexError::Storage(e) => e.hints(),
            _ => Vec::new(),
        }
    }
    fn is_busy(&self) -> bool {
        match self {
            IndexError::Storage(e) => e.is_busy(),
            IndexError::Db { source, .. } => matches!(
                source.sqlite_error_code(),
                Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
            ),
            _ => false,
        }
    }
}

/// One registered workflow version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Version {
    pub hash: Hash,
    pub registered_at: u64,
    /// The text that was saved for this version (a `text` node), comments and all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Hash>,
}

/// A registry entry: the current version and the earlier ones, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RegistryEntry {
    pub hash: Hash,
    pub registered_at: u64,
    /// The text that was saved for the current version (a `text` node), comments and all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Hash>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Version>,
}

/// `registry.yaml`: workflow name → entry.
pub(crate) type Registry = BTreeMap<String, RegistryEntry>;

/// `threads.yaml`: thread id → head hash.
pub(crate) type Threads = BTreeMap<String, Hash>;

fn read_optional(path: &Path) -> Result<Option<String>, IndexError> {
    let io = |source| IndexError::Io {
        path: path.to_path_buf(),
        source,
    };
    // Settled: `threads.yaml` is rewritten in place as the spare of the next write.
    let Some(bytes) = crate::file_util::read_settled(path).map_err(io)? else {
        return Ok(None);
    };
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|e| io(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))
}

fn read_yaml<T: serde::de::DeserializeOwned + Default>(path: &Path) -> Result<T, IndexError> {
    match read_optional(path)? {
        Some(text) => parse_yaml(path, &text),
        None => Ok(T::default()),
    }
}

/// Parses the text of index file `path`; empty text is the empty index.
fn parse_yaml<T: serde::de::DeserializeOwned + Default>(
    path: &Path,
    text: &str,
) -> Result<T, IndexError> {
    if text.trim().is_empty() {
        return Ok(T::default());
    }
    serde_yaml::from_str(text).map_err(|e| IndexError::Damaged {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// Reads the registry of `root`: `registry.yaml`, or the registry tables over PostgreSQL.
pub fn read_registry(root: &Path) -> Result<Registry, IndexError> {
    storage::handle(root)?.index().registry()
}

/// Reads `registry.yaml` under `root` (the directory store's registry).
pub(crate) fn read_registry_file(root: &Path) -> Result<Registry, IndexError> {
    read_yaml(&root.join("registry.yaml"))
}

/// Reads the registry, lets `change` edit it, and writes it back atomically (under the file's
/// lock, or in one locked transaction over PostgreSQL). Nothing is written when `change` fails.
pub(crate) fn update_registry<R, E>(
    root: &Path,
    change: impl FnOnce(&mut Registry) -> Result<R, E>,
) -> Result<R, E>
where
    E: From<IndexError>,
{
    let handle = storage::handle(root).map_err(IndexError::from)?;
    let mut change = Some(change);
    let mut outcome = None;
    handle.index().update_registry(&mut |registry| {
        let change = change.take().expect("the registry is changed once");
        let result = change(registry);
        let keep = result.is_ok();
        outcome = Some(result);
        keep
    })?;
    outcome.expect("the registry was changed")
}

fn version_of(v: RegistryVersion) -> Version {
    Version {
        hash: v.hash,
        registered_at: u64::try_from(v.registered_ms).unwrap_or(0),
        source: v.source,
    }
}

pub(crate) fn registry_from_rows(rows: Vec<RegistryName>) -> Registry {
    rows.into_iter()
        .map(|row| {
            let current = version_of(row.current);
            let entry = RegistryEntry {
                hash: current.hash,
                registered_at: current.registered_at,
                source: current.source,
                history: row.history.into_iter().map(version_of).collect(),
            };
            (row.name, entry)
        })
        .collect()
}

pub(crate) fn registry_to_rows(registry: Registry) -> Vec<RegistryName> {
    let row = |hash, registered_at: u64, source| RegistryVersion {
        hash,
        registered_ms: i64::try_from(registered_at).unwrap_or(i64::MAX),
        source,
    };
    registry
        .into_iter()
        .map(|(name, e)| RegistryName {
            name,
            current: row(e.hash, e.registered_at, e.source),
            history: e
                .history
                .into_iter()
                .map(|v| row(v.hash, v.registered_at, v.source))
                .collect(),
        })
        .collect()
}

/// Reads the first layout's `threads.yaml` under `root` (to migrate it).
///
/// The form this program wrote (`ID: HEAD` lines) is read directly; anything else — hand
/// edits, damage — goes through the YAML parser, which also words the errors. A file that is
/// there but empty is damaged (uwf wrote `{}` for no threads): migrating it as "no threads"
/// would lose them all.
pub(crate) fn read_legacy_threads(root: &Path) -> Result<Threads, IndexError> {
    let path = root.join("threads.yaml");
    let Some(text) = read_optional(&path)? else {
        return Ok(Threads::default());
    };
    if text.trim().is_empty() {
        return Err(IndexError::Damaged {
            path,
            reason: "it is empty (uwf writes `{}` for no threads)".to_owned(),
        });
    }
    match parse_threads_plain(&text) {
        Some(threads) => Ok(threads),
        None => parse_yaml(&path, &text),
    }
}

/// `threads.yaml` in the exact form `serde_yaml` writes for a [`Threads`] map, or `None`.
fn parse_threads_plain(text: &str) -> Option<Threads> {
    if text.is_empty() || !text.ends_with('\n') {
        return None;
    }
    let mut threads = Threads::new();
    for line in text.lines() {
        let (id, head) = line.split_once(": ")?;
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return None;
        }
        let head = Hash::parse(head).ok()?;
        if threads.insert(id.to_owned(), head).is_some() {
            return None;
        }
    }
    Some(threads)
}

/// Reads the first layout's `history.jsonl` under `root` (to migrate it).
pub(crate) fn read_legacy_history(root: &Path) -> Result<Vec<ArchivedThread>, IndexError> {
    let path = root.join("history.jsonl");
    let Some(text) = read_optional(&path)? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let entry = serde_json::from_str(line).map_err(|e| IndexError::Damaged {
            path: path.clone(),
            reason: format!("line {}: {e}", i + 1),
        })?;
        out.push(entry);
    }
    Ok(out)
}

/// Where the lock files of the index files live.
pub(crate) fn locks_dir(root: &Path) -> PathBuf {
    root.join("locks")
}

/// Holds an exclusive lock on `<root>/locks/<name>.lock` until dropped (released by the OS if
/// the process dies).
pub(crate) fn lock(root: &Path, name: &str) -> Result<std::fs::File, IndexError> {
    let dir = locks_dir(root);
    let path = dir.join(format!("{name}.lock"));
    let io = |source| IndexError::Io {
        path: path.clone(),
        source,
    };
    let mut options = std::fs::OpenOptions::new();
    options.create(true).truncate(false).write(true);
    let file = crate::file_util::open_in_dir(&options, &path).map_err(io)?;
    file.lock().map_err(io)?;
    Ok(file)
}

/// Reads a YAML index file, lets `change` edit it, and writes it back atomically, all under the
/// file's lock. Nothing is written when `change` fails.
pub(crate) fn update_yaml<T, R, E>(
    root: &Path,
    file: &str,
    change: impl FnOnce(&mut T) -> Result<R, E>,
) -> Result<R, E>
where
    T: Serialize + serde::de::DeserializeOwned + Default,
    E: From<IndexError>,
{
    let _guard = lock(root, file)?;
    let path = root.join(file);
    let mut value: T = read_yaml(&path)?;
    let result = change(&mut value)?;
    let text = serde_yaml::to_string(&value).expect("index files serialize to YAML");
    write_locked(root, file, text.as_bytes())?;
    Ok(result)
}

/// Replaces index file `name` (`threads.yaml`) durably, as [`write_file`] does, but without
/// allocating or freeing an inode: the bytes go into `locks/<name>.spare`, which is synced and
/// then swaps names with the file (`file_util::replace_recycling_durable`). The caller holds
/// [`lock`]`(root, name)`, which serialises the writers of the spare; readers read the file
/// with `file_util::read_settled` (see [`read_threads`]).
pub(crate) fn write_locked(root: &Path, name: &str, bytes: &[u8]) -> Result<(), IndexError> {
    let spare = locks_dir(root).join(format!("{name}.spare"));
    crate::file_util::replace_recycling_durable(&spare, &root.join(name), bytes)?;
    Ok(())
}

/// Replaces a file under the storage root atomically (temp file in `cas/tmp`, fsync, rename).
pub(crate) fn write_file(root: &Path, path: &Path, bytes: &[u8]) -> Result<(), IndexError> {
    let tmp = root.join("cas").join("tmp");
    crate::file_util::AtomicWrite::new(path)
        .temp_in(&tmp)
        .replace(bytes)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::storage::threads::gc_roots;

    #[test]
    fn the_plain_reader_agrees_with_the_yaml_parser() {
        let mut threads = Threads::new();
        for id in ["01M80TYDWHR6HA8DFSNJYVRW0Q", "01M80V5AAEAY8SF2CH4JXT7DFB"] {
            threads.insert(id.to_owned(), Hash::of_bytes(id.as_bytes()));
            let text = serde_yaml::to_string(&threads).unwrap();
            assert_eq!(parse_threads_plain(&text), Some(threads.clone()), "{text}");
            assert_eq!(serde_yaml::from_str::<Threads>(&text).unwrap(), threads);
        }
        // YAML quotes what would read as a number; the plain reader leaves that to the parser,
        // which reads the same map.
        threads.insert("7".to_owned(), Hash::from_u64(1));
        let text = serde_yaml::to_string(&threads).unwrap();
        assert_eq!(parse_threads_plain(&text), None, "{text}");
        assert_eq!(serde_yaml::from_str::<Threads>(&text).unwrap(), threads);
        // Not the plain form: left to the YAML parser.
        for text in [
            "{}\n",
            "a: 0GV52V1A47SMQ",
            "a: 0GV52V1A47SMQ\na: 0GV52V1A47SMQ\n",
            "a: not-a-hash\n",
            "'a b': 0GV52V1A47SMQ\n",
            "# note\na: 0GV52V1A47SMQ\n",
        ] {
            assert_eq!(parse_threads_plain(text), None, "{text:?}");
        }
    }

    #[test]
    fn missing_files_are_empty_and_damaged_ones_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        assert!(gc_roots(dir.path()).unwrap().is_empty());
        std::fs::write(dir.path().join("threads.yaml"), "{ not: [yaml").unwrap();
        let err = gc_roots(dir.path()).unwrap_err().to_string();
        assert!(err.contains("threads.yaml is damaged"), "{err}");
    }

    #[test]
    fn roots_come_from_all_three_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("registry.yaml"),
            "demo:\n  hash: EYHPV6X8XHTCS\n  registeredAt: 1\n  history:\n    - hash: 2DHW2FP49YVD3\n      registeredAt: 0\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("threads.yaml"),
            "01JAAAAAAAAAAAAAAAAAAAAAAA: F5VV55NBKX1R5\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("history.jsonl"),
            "{\"thread\":\"x\",\"workflow\":\"EYHPV6X8XHTCS\",\"head\":\"827F196W26J4M\",\"status\":\"done\",\"completedAt\":5}\n",
        )
        .unwrap();
        let roots: Vec<String> = gc_roots(dir.path())
            .unwrap()
            .iter()
            .map(|h| h.to_string())
            .collect();
        assert_eq!(
            roots,
            [
                "EYHPV6X8XHTCS",
                "2DHW2FP49YVD3",
                "F5VV55NBKX1R5",
                "827F196W26J4M"
            ]
        );
    }
}
