//! Which backend a storage root uses (`docs/several-machines.md#reference`), and the handles of the
//! PostgreSQL one.
//!
//! A root is either a directory store (the default: everything in files under it,
//! `docs/store.md#the-storage-root`) or
//! the local half of a PostgreSQL store, named by `UWF_STORAGE_URL` or `storage:` in the root's
//! `config.yaml`. Over PostgreSQL, nodes, thread heads, the history, the registry and step
//! leases live in the database; the root keeps `config.yaml`, `.env`, a cache of nodes by hash,
//! derived caches (chains, decisions) and this machine's run files (logs, outcomes).
//!
//! The engine's index functions ([`crate::engine::thread::index`],
//! [`crate::engine::storage::index_files`], the registry) ask [`backend`] and take one of two paths; the
//! node store gets the database as its remote ([`open_store`]).
//!
//! Architecture Invariant: one process opens one connection per root (cached here), so every
//! part of a command sees the same backend, and the choice is made once, before anything is
//! read or written.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::advice::Advice;
use crate::cas::{Store, StoreError};
use crate::pg::{PgConfig, PgError, PgStore};

use super::config::{self, ConfigError};

pub mod index_db;
pub mod index_files;
mod index_schema;
pub(crate) mod lease;
pub(crate) mod notify;
pub(crate) mod run_sink;
pub mod seam;
pub mod threads;

pub use seam::{Storage, open as handle};

/// The variable naming a PostgreSQL store; it wins over `storage:` in `config.yaml`.
pub(crate) const URL_VAR: &str = "UWF_STORAGE_URL";

/// How long a step lease lasts without renewal unless `leaseSeconds` says otherwise.
pub(crate) const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// Where a root's nodes, heads and registry live.
#[derive(Debug, Clone)]
pub(crate) enum Backend {
    /// Files under the root (`docs/store.md#the-storage-root`).
    Dir,
    /// A PostgreSQL database shared by many machines, and how long this root's step leases
    /// last (`leaseSeconds`, read once with the URL).
    Pg(Arc<PgStore>, Duration),
}

/// Errors choosing or opening a backend.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Pg(#[from] PgError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Advice for StorageError {
    fn hints(&self) -> Vec<String> {
        match self {
            StorageError::Config(e) => e.hints(),
            StorageError::Pg(e) => e.hints(),
            StorageError::Store(e) => e.hints(),
        }
    }
    fn is_busy(&self) -> bool {
        match self {
            StorageError::Pg(e) => e.is_busy(),
            _ => false,
        }
    }
}

/// The storage URL of `root`: `UWF_STORAGE_URL`, else `storage:` in its `config.yaml`, else
/// none (a directory store).
pub(crate) fn url(root: &Path) -> Result<Option<String>, StorageError> {
    if let Ok(url) = std::env::var(URL_VAR)
        && !url.trim().is_empty()
    {
        return Ok(Some(url.trim().to_owned()));
    }
    Ok(setting(root, "storage")?
        .and_then(|v| v.as_str().map(|u| u.trim().to_owned()))
        .filter(|u| !u.is_empty()))
}

/// One top-level field of `<root>/config.yaml`, read on its own: a mistake elsewhere in the
/// file is the business of the commands that use that part (a step reports it, located),
/// and must not stop `workflow put` or `thread show`. A file that is not YAML at all is an
/// error here only if it seems to name this field, so a broken file never silently sends
/// writes to the wrong store.
fn setting(root: &Path, key: &str) -> Result<Option<serde_yaml::Value>, StorageError> {
    let path = root.join("config.yaml");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => return Ok(None),
        Err(source) => return Err(ConfigError::Io { path, source }.into()),
    };
    match serde_yaml::from_str::<serde_yaml::Value>(&text) {
        Ok(value) => Ok(value.get(key).cloned()),
        Err(_) if !text.contains(&format!("{key}:")) => Ok(None),
        // The located message comes from the full parser.
        Err(_) => match config::load(root) {
            Err(e) => Err(e.into()),
            Ok(loaded) => Ok(match key {
                "storage" => loaded.config.storage.map(serde_yaml::Value::from),
                _ => None,
            }),
        },
    }
}

fn cache() -> &'static Mutex<HashMap<PathBuf, Backend>> {
    static CACHE: OnceLock<Mutex<HashMap<PathBuf, Backend>>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// The backend of `root`, connecting (and migrating the schema) on first use in this process.
pub(crate) fn backend(root: &Path) -> Result<Backend, StorageError> {
    let mut cache = cache().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(found) = cache.get(root) {
        return Ok(found.clone());
    }
    let backend = match url(root)? {
        None => Backend::Dir,
        Some(url) => Backend::Pg(
            Arc::new(PgStore::open(&PgConfig::parse(&url)?)?),
            configured_lease(root),
        ),
    };
    cache.insert(root.to_path_buf(), backend.clone());
    Ok(backend)
}

/// Makes `root` a directory store for the rest of this process, whatever `UWF_STORAGE_URL` or
/// its config say: `uwf store copy` reads and writes a directory named on its command line as
/// files, even with a database named in the environment.
pub(crate) fn pin_directory(root: &Path) {
    let mut cache = cache().lock().unwrap_or_else(|p| p.into_inner());
    cache.insert(root.to_path_buf(), Backend::Dir);
    drop(cache);
    seam::forget(root);
}

/// The PostgreSQL store of `root`, or `None` for a directory store.
pub(crate) fn pg(root: &Path) -> Result<Option<Arc<PgStore>>, StorageError> {
    Ok(match backend(root)? {
        Backend::Dir => None,
        Backend::Pg(pg, _) => Some(pg),
    })
}

/// Opens the node store of `root`: its directory, with the database as remote when the root
/// is configured for PostgreSQL.
pub fn open_store(root: &Path) -> Result<Store, StorageError> {
    let store = Store::open(root)?;
    let backend = backend(root)?;
    Ok(match backend {
        Backend::Dir => store,
        Backend::Pg(pg, _) => store.with_remote(pg),
    })
}

/// How long a step lease lasts without renewal for `root` (`leaseSeconds`, default 30 s).
pub(crate) fn lease_time(root: &Path) -> Duration {
    match backend(root) {
        Ok(Backend::Pg(_, lease)) => lease,
        _ => configured_lease(root),
    }
}

fn configured_lease(root: &Path) -> Duration {
    setting(root, "leaseSeconds")
        .ok()
        .flatten()
        .and_then(|v| v.as_u64())
        .filter(|s| *s > 0)
        .map(Duration::from_secs)
        .unwrap_or(DEFAULT_LEASE)
}

/// This machine's name (the kernel's host name), as leases and `uwf worker list` show it.
pub fn machine() -> &'static str {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "localhost".to_owned())
    })
}

/// This process as a lease holder: `pid <pid>` plus a random tag, unique across machines.
pub fn holder() -> &'static str {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| {
        let tag = ulid::Ulid::new().to_string();
        format!("pid {} ({})", std::process::id(), &tag[tag.len() - 6..])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_without_a_url_is_a_directory_store() {
        if std::env::var_os(URL_VAR).is_some() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(backend(dir.path()).unwrap(), Backend::Dir));
        assert!(pg(dir.path()).unwrap().is_none());
    }

    #[test]
    fn a_bad_url_in_config_is_refused_without_its_password() {
        if std::env::var_os(URL_VAR).is_some() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("config.yaml"),
            "storage: mysql://me:hunter2@db/uwf\n",
        )
        .unwrap();
        let err = backend(dir.path()).expect_err("not postgres");
        let text = err.to_string();
        assert!(text.contains("postgres://"), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
    }
}
