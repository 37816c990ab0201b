//! The one error type of the PostgreSQL backend, and the mapping of client errors onto it.
//!
//! Architecture Invariant: no message of [`PgError`] ever contains a password. Connection errors
//! name the target (`host:port` or the Unix socket) and the user, never the URL as given: URLs
//! are shown only through [`super::config::redact`].

use crate::advice::Advice;
use crate::cas::Hash;

/// Everything that can go wrong talking to the PostgreSQL store.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    #[error("invalid storage URL `{url}`: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("cannot connect to PostgreSQL at {target}: {reason}")]
    ServerDown { target: String, reason: String },
    #[error("cannot connect to PostgreSQL at {target}: {reason}")]
    Connect { target: String, reason: String },
    /// TLS failed or was refused by the server; `hint` says what to change.
    #[error("cannot connect to PostgreSQL at {target} over TLS: {reason}")]
    Tls {
        target: String,
        reason: String,
        hint: &'static str,
    },
    #[error("PostgreSQL at {target} refused the password of user `{user}`")]
    WrongPassword { target: String, user: String },
    #[error("PostgreSQL at {target} asks for a password for user `{user}`, and none was given")]
    PasswordMissing { target: String, user: String },
    #[error("lost the connection to PostgreSQL at {target} during {action}: {reason}")]
    ConnectionLost {
        target: String,
        action: &'static str,
        reason: String,
    },
    #[error("PostgreSQL {action} failed: {reason}")]
    Query {
        action: &'static str,
        reason: String,
    },
    #[error(
        "the database's uwf schema is version {found}, newer than this uwf understands (up to version {supported})"
    )]
    SchemaTooNew { found: i32, supported: i32 },
    #[error("no node {0} in the store")]
    NotFound(Hash),
    #[error("hash mismatch: the row of node {hash} holds content that hashes to {actual}")]
    HashMismatch { hash: Hash, actual: Hash },
    #[error("the row of node {hash} is corrupt: {reason}")]
    Corrupt { hash: Hash, reason: String },
    #[error("hash collision: {hash} already names different content")]
    Collision { hash: Hash },
    #[error("no thread {0}")]
    UnknownThread(String),
    #[error("thread {0} already exists")]
    ThreadExists(String),
    #[error("thread {id} is archived ({status})")]
    Archived { id: String, status: String },
    #[error("`{0}` is not an archive status (done or killed)")]
    BadStatus(String),
    #[error(
        "thread {thread} is busy: {holder} on {machine} holds its step lease (for {expires_in_ms} ms more)"
    )]
    Busy {
        thread: String,
        holder: String,
        machine: String,
        expires_in_ms: i64,
    },
    #[error("the step lease of thread {thread} held by {holder} expired or was taken over")]
    LeaseLost { thread: String, holder: String },
    #[error("no workflow named `{0}` in the registry")]
    UnknownName(String),
}

impl Advice for PgError {
    fn hints(&self) -> Vec<String> {
        match self {
            PgError::BadUrl { .. } => vec![
                "write it as postgres://USER@HOST:PORT/DB (the password in PGPASSWORD, e.g. in <root>/.env)".to_owned(),
            ],
            PgError::ServerDown { .. } => {
                vec!["start the server, or check the host and port of the storage URL".to_owned()]
            }
            PgError::Tls { hint, .. } => vec![(*hint).to_owned()],
            PgError::WrongPassword { .. } | PgError::PasswordMissing { .. } => vec![
                "put the password in PGPASSWORD (e.g. in <root>/.env) or in the storage URL".to_owned(),
            ],
            PgError::ConnectionLost { .. } => {
                vec!["retry when the server is back; the next call reconnects".to_owned()]
            }
            PgError::SchemaTooNew { .. } => {
                vec!["upgrade uwf to the version that last migrated this database".to_owned()]
            }
            PgError::Busy { .. } => vec![
                "wait for that step to finish; a lease of a dead machine expires by itself".to_owned(),
            ],
            _ => Vec::new(),
        }
    }

    fn is_busy(&self) -> bool {
        matches!(self, PgError::Busy { .. })
    }
}

/// The most specific text of a client error: the server's message for database errors, else the
/// error and its causes.
pub(crate) fn describe(error: &postgres::Error) -> String {
    if let Some(db) = error.as_db_error() {
        return format!("{} ({})", db.message(), db.code().code());
    }
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Whether a client error means the connection is gone (server down or restarting).
pub(crate) fn is_connection_loss(error: &postgres::Error) -> bool {
    use postgres::error::SqlState;
    if error.is_closed() {
        return true;
    }
    if let Some(code) = error.code()
        && (*code == SqlState::ADMIN_SHUTDOWN
            || *code == SqlState::CRASH_SHUTDOWN
            || *code == SqlState::CANNOT_CONNECT_NOW)
    {
        return true;
    }
    io_kind(error).is_some()
}

/// The kind of the I/O error underneath a client error, if there is one.
pub(crate) fn io_kind(error: &postgres::Error) -> Option<std::io::ErrorKind> {
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        source = cause.source();
    }
    None
}
