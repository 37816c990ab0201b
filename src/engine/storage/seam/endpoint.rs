//! A whole store named on a command line (`uwf store copy FROM TO`,
//! `docs/several-machines.md#reference`): a directory store's root or a PostgreSQL URL, opened
//! as a [`Storage`] handle and its [`Nodes`], whatever `UWF_STORAGE_URL` or a root's config say.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::advice::Advice;
use crate::cas::{Store, StoreError};
use crate::engine::storage::{Backend, DEFAULT_LEASE, StorageError, pin_directory};
use crate::pg::{PgConfig, PgError, PgStore};

use super::Storage;
use super::nodes::{DirNodes, Nodes, PgNodes};

/// One store named on a command line: a directory store's root, or a PostgreSQL database.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint(Place);

#[derive(Debug, Clone)]
enum Place {
    Dir(PathBuf),
    Pg(Box<PgConfig>),
}

/// Why a store named on a command line cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EndpointError {
    #[error("`{0}` is neither a directory nor a postgres:// or file:// URL")]
    UnknownScheme(String),
    #[error("`{0}` names another machine; a file:// URL here is a directory on this one")]
    FileHost(String),
    #[error("no uwf store at {}", .0.display())]
    NoStore(PathBuf),
    #[error("cannot open {endpoint}")]
    OpenPg {
        endpoint: String,
        #[source]
        source: PgError,
    },
    #[error("cannot open {endpoint}")]
    OpenDir {
        endpoint: String,
        #[source]
        source: StoreError,
    },
    #[error(transparent)]
    Pg(#[from] PgError),
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl Advice for EndpointError {
    fn hints(&self) -> Vec<String> {
        match self {
            EndpointError::UnknownScheme(_) => vec![
                "give a directory (a storage root), file:///ABSOLUTE/PATH or postgres://USER@HOST:PORT/DB".to_owned(),
            ],
            EndpointError::FileHost(_) => vec![
                "write file:///ABSOLUTE/PATH (three slashes), or mount the other machine's directory and give its path".to_owned(),
            ],
            EndpointError::NoStore(_) => {
                vec!["give the storage root to copy from, e.g. ~/.uwf".to_owned()]
            }
            EndpointError::OpenPg { source, .. } | EndpointError::Pg(source) => source.hints(),
            EndpointError::OpenDir { source, .. } => source.hints(),
            EndpointError::Storage(source) => source.hints(),
        }
    }

    fn is_busy(&self) -> bool {
        match self {
            EndpointError::OpenPg { source, .. } | EndpointError::Pg(source) => source.is_busy(),
            EndpointError::Storage(source) => source.is_busy(),
            _ => false,
        }
    }
}

/// A store opened whole: its handle and its nodes.
pub(crate) struct Opened {
    pub storage: Arc<Storage>,
    pub nodes: Box<dyn Nodes>,
}

impl Endpoint {
    /// `postgres://…` and `postgresql://…` are databases; any other `scheme://` is refused;
    /// anything else is a directory.
    pub(crate) fn parse(text: &str) -> Result<Endpoint, EndpointError> {
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return Ok(Endpoint(Place::Pg(Box::new(PgConfig::parse(text)?))));
        }
        if let Some(rest) = text.strip_prefix("file://") {
            // RFC 8089: file:///abs/path, or file://localhost/abs/path; another host is not here.
            let path = rest.strip_prefix("localhost").unwrap_or(rest);
            if !path.starts_with('/') {
                return Err(EndpointError::FileHost(text.to_owned()));
            }
            return Ok(Endpoint(Place::Dir(PathBuf::from(percent_decode(path)))));
        }
        if let Some((scheme, _)) = text.split_once("://")
            && !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        {
            return Err(EndpointError::UnknownScheme(crate::pg::redact(text)));
        }
        Ok(Endpoint(Place::Dir(PathBuf::from(text))))
    }

    /// The directory this endpoint names, if it names one.
    #[cfg(test)]
    pub(crate) fn directory(&self) -> Option<&Path> {
        match &self.0 {
            Place::Dir(path) => Some(path),
            Place::Pg(_) => None,
        }
    }

    /// Whether both name the same store (the same directory, or the same database).
    pub(crate) fn same_as(&self, other: &Endpoint) -> bool {
        match (&self.0, &other.0) {
            (Place::Dir(a), Place::Dir(b)) => match (a.canonicalize(), b.canonicalize()) {
                (Ok(a), Ok(b)) => a == b,
                _ => false,
            },
            (Place::Pg(a), Place::Pg(b)) => a.redacted() == b.redacted(),
            _ => false,
        }
    }

    /// Opens the store to copy from; a directory must already be a store.
    pub(crate) fn open_source(&self) -> Result<Opened, EndpointError> {
        if let Place::Dir(path) = &self.0
            && !path.join("cas").join("objects").is_dir()
        {
            return Err(EndpointError::NoStore(path.clone()));
        }
        self.open(true)
    }

    /// Opens (creating a directory store if need be) the store to copy into. A directory's
    /// node files are written without a per-file fsync: [`Nodes::sync`] makes them durable.
    pub(crate) fn open_destination(&self) -> Result<Opened, EndpointError> {
        self.open(false)
    }

    fn open(&self, durable: bool) -> Result<Opened, EndpointError> {
        let name = || self.to_string();
        match &self.0 {
            Place::Dir(path) => {
                // Its index files are this directory's, whatever the environment names.
                pin_directory(path);
                let mut store = Store::open(path).map_err(|source| EndpointError::OpenDir {
                    endpoint: name(),
                    source,
                })?;
                store.set_durable(durable);
                Ok(Opened {
                    storage: super::open(path)?,
                    nodes: Box::new(DirNodes(store)),
                })
            }
            Place::Pg(config) => {
                let pg =
                    Arc::new(
                        PgStore::open(config).map_err(|source| EndpointError::OpenPg {
                            endpoint: name(),
                            source,
                        })?,
                    );
                // A database named alone has no root here: its handle reads no local file.
                let backend = Backend::Pg(pg.clone(), DEFAULT_LEASE);
                Ok(Opened {
                    storage: Arc::new(Storage::over(Path::new(""), &backend)),
                    nodes: Box::new(PgNodes { pg, cache: None }),
                })
            }
        }
    }
}

/// `path` with its `%XX` escapes decoded (a `%` not followed by two hex digits stays).
fn percent_decode(path: &str) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStringExt;
    std::ffi::OsString::from_vec(percent_encoding::percent_decode_str(path).collect())
}

/// The endpoint as it may be shown: a path, or the URL without its password.
impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Place::Dir(path) => write!(f, "{}", path.display()),
            Place::Pg(config) => f.write_str(config.redacted()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_directories_or_postgres_urls() {
        assert!(
            Endpoint::parse("/tmp/x")
                .expect("path")
                .directory()
                .is_some()
        );
        assert!(
            Endpoint::parse("relative/dir")
                .expect("path")
                .directory()
                .is_some()
        );
        let pg = Endpoint::parse("postgresql://u:s3cret@db:5432/x").expect("url");
        assert!(pg.directory().is_none());
        assert_eq!(pg.to_string(), "postgresql://u:***@db:5432/x");
        for bad in ["mysql://u:s3cret@db/x", "postgres://u:s3cret@db:port/x"] {
            let err = Endpoint::parse(bad).expect_err(bad).to_string();
            assert!(!err.contains("s3cret"), "{err}");
            assert!(err.contains("db"), "{err}");
        }
    }

    #[test]
    fn file_urls_are_directories_on_this_machine() {
        let dir = |text: &str| {
            Endpoint::parse(text)
                .expect(text)
                .directory()
                .expect("a directory")
                .to_path_buf()
        };
        assert_eq!(dir("file:///srv/uwf"), PathBuf::from("/srv/uwf"));
        assert_eq!(dir("file://localhost/srv/uwf"), PathBuf::from("/srv/uwf"));
        assert_eq!(
            dir("file:///srv/my%20store/"),
            PathBuf::from("/srv/my store/")
        );
        assert_eq!(dir("file:///a%zz"), PathBuf::from("/a%zz"));
        for other in ["file://server/srv/uwf", "file://relative", "file://"] {
            let err = Endpoint::parse(other).expect_err(other);
            assert!(matches!(err, EndpointError::FileHost(_)), "{other}: {err}");
            assert!(err.hints()[0].contains("file:///"), "{other}");
        }
    }
}
