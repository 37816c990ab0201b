//! Connections to `index.db` (see [`super`]): one per storage root and process, opened once
//! (made or migrated first when a command writes), checked to be an index this binary
//! understands, reopened when the file was replaced, and released as the process exits in the
//! way that keeps the write-ahead log small ([`at_exit`]).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use super::make::{LEGACY_HISTORY, LEGACY_THREADS, make};
use super::{FILE, db_error, path_of};
use crate::engine::storage::index_files::IndexError;
use crate::engine::storage::index_schema::{self, SCHEMA};

/// How long a statement waits for another process's write transaction before failing.
const BUSY_WAIT: Duration = Duration::from_secs(30);

/// An open database: the connection, and which file it is (a file replaced under the same name
/// is opened again).
struct Open {
    root: PathBuf,
    file: (u64, u64),
    conn: Arc<Mutex<Connection>>,
}

/// Open connections, most recently used last; a few roots at most per process (tests and
/// benches open many, each a few descriptors).
static OPEN: Mutex<Vec<Open>> = Mutex::new(Vec::new());
const KEEP_OPEN: usize = 8;
/// Runs `f` on the root's connection, opening (and, with `create`, making or migrating) the
/// database first. `Ok(None)`: no database, nothing to migrate, and `create` is off — an empty
/// index, left uncreated by a command that only reads.
pub(super) fn with<R>(
    root: &Path,
    create: bool,
    action: &'static str,
    f: impl FnOnce(&mut Connection) -> rusqlite::Result<R>,
) -> Result<Option<R>, IndexError> {
    let Some(conn) = connection(root, create)? else {
        return Ok(None);
    };
    let mut conn = conn.lock().unwrap_or_else(|p| p.into_inner());
    f(&mut conn).map(Some).map_err(db_error(root, action))
}

/// Like [`with`] for writes: the database is made if needed, so there is always an answer.
pub(super) fn write<R>(
    root: &Path,
    action: &'static str,
    f: impl FnOnce(&mut Connection) -> rusqlite::Result<R>,
) -> Result<R, IndexError> {
    Ok(with(root, true, action, f)?.expect("a writer creates the index"))
}

/// The file's identity, or `None` when there is none.
fn identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

fn connection(root: &Path, create: bool) -> Result<Option<Arc<Mutex<Connection>>>, IndexError> {
    let path = path_of(root);
    let mut file = identity(&path);
    {
        let mut open = OPEN.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = open.iter().position(|o| o.root == root) {
            if Some(open[i].file) == file {
                let o = open.remove(i);
                let conn = o.conn.clone();
                open.push(o);
                return Ok(Some(conn));
            }
            open.remove(i);
        }
    }
    if file.is_none() {
        let legacy = root.join(LEGACY_THREADS).exists() || root.join(LEGACY_HISTORY).exists();
        if !create && !legacy {
            return Ok(None);
        }
        // Not under the lock: migrating reads the store, and other roots need not wait.
        make(root)?;
        file = identity(&path);
    }
    let conn = Arc::new(Mutex::new(open_existing(root)?));
    let mut open = OPEN.lock().unwrap_or_else(|p| p.into_inner());
    open.retain(|o| o.root != root);
    if open.len() >= KEEP_OPEN {
        open.remove(0);
    }
    open.push(Open {
        root: root.to_path_buf(),
        file: file.unwrap_or_default(),
        conn: conn.clone(),
    });
    Ok(Some(conn))
}

/// The log's size from which a command folds it into `index.db` as it exits ([`at_exit`]).
const FOLD_LOG_AT: u64 = 256 * 1024;

/// Ends this process's use of every index it opened; every command calls it before it exits.
///
/// Architecture Invariant: the write-ahead log stays small only because commands fold it in.
/// A connection that closes last checkpoints the log into `index.db` and truncates it to
/// nothing. A process that exits with its connection open leaves the log whole, and the next
/// process to open the index (its shared-memory index reset, since no one else holds it)
/// rebuilds the log's index by reading every frame; that rebuild counts no frame as copied
/// back, so the log is never restarted and grows by every command's writes, forever (298 MB
/// at 10,000 threads). Folding at every exit would cost three more device flushes a command
/// (the log before the copy, the file after it, and the next writer's new log header), so a
/// command closes only once the log has reached [`FOLD_LOG_AT`] (a few dozen commands'
/// writes) and otherwise leaves its connection to the process's end.
/// A process killed with `kill -9` leaves its frames, which a later command folds in.
pub(crate) fn at_exit() {
    release(|log| log >= FOLD_LOG_AT);
}

/// Closes every index this process opened (a process that goes on, as a benchmark that made
/// rows itself before it times commands): the last connection to close folds the log in.
pub fn close_all() {
    release(|_| true);
}

fn release(close: impl Fn(u64) -> bool) {
    let open = std::mem::take(&mut *OPEN.lock().unwrap_or_else(|p| p.into_inner()));
    for o in open {
        let log = std::fs::metadata(o.root.join(format!("{FILE}-wal"))).map_or(0, |m| m.len());
        // A connection another thread still holds (a server's request in flight) is left to
        // the process's end; a later command folds in what it wrote.
        match Arc::try_unwrap(o.conn) {
            Ok(conn) if close(log) => {
                let conn = conn.into_inner().unwrap_or_else(|p| p.into_inner());
                let _ = conn.close();
            }
            // Left open for the process's end, which comes next.
            Ok(conn) => std::mem::forget(conn),
            Err(_) => {}
        }
    }
}

/// Opens `index.db` (never creating it) and checks it is an index this binary understands.
fn open_existing(root: &Path) -> Result<Connection, IndexError> {
    let path = path_of(root);
    let err = db_error(root, "opening");
    let log = root.join(format!("{FILE}-wal"));
    let log_before = identity(&log);
    let mut conn = Connection::open_with_flags(
        &path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(&err)?;
    conn.busy_timeout(BUSY_WAIT).map_err(&err)?;
    index_schema::set_up(&conn).map_err(&err)?;
    let version = index_schema::version(&conn).map_err(&err)?;
    // That first read opened the log, making it if it was not there.
    sync_new_log(root, log_before, identity(&log))?;
    match version {
        Some(SCHEMA) => Ok(conn),
        // An index of an earlier version: upgraded in place (`index_schema`).
        Some(1..=3) => index_schema::upgrade(&mut conn).map(|()| conn).map_err(err),
        Some(v) if v > SCHEMA => Err(IndexError::Damaged {
            path,
            reason: format!(
                "it is a thread index of version {v}, newer than this uwf (version {SCHEMA}); \
                 upgrade uwf"
            ),
        }),
        Some(v) => Err(IndexError::Damaged {
            path,
            reason: format!("unknown thread index version {v}"),
        }),
        None => Err(IndexError::Damaged {
            path,
            reason: "it has no thread index schema (an empty or overwritten file)".to_owned(),
        }),
    }
}

/// Syncs the store's folder when the write-ahead log this connection opened is not the file
/// that was there before it opened (it was made just now, by it or by a process racing it), so
/// that the log's name is on the disk before any commit in it is reported done.
///
/// Architecture Invariant: SQLite is built without its own folder sync
/// (`SQLITE_DISABLE_DIRSYNC`, `.cargo/config.toml`), which it did on every connection's first
/// commit whether or not the log was new: one device flush per command. The log is kept for
/// the store's life (`index_schema::set_up` makes it persistent), so it is made once, when the
/// index is, or again only after someone deleted it; this sync covers both.
fn sync_new_log(
    root: &Path,
    before: Option<(u64, u64)>,
    after: Option<(u64, u64)>,
) -> Result<(), IndexError> {
    if before.is_some() && before == after {
        return Ok(());
    }
    std::fs::File::open(root)
        .and_then(|dir| dir.sync_all())
        .map_err(|source| IndexError::Io {
            path: root.to_path_buf(),
            source,
        })
}
