//! PostgreSQL's run log: logs, events and run state go to the database through the store's run
//! sink ([`crate::engine::storage::run_sink`], which never makes a writer wait), outcomes and
//! questions to the thread's row; readers read them from there, so every machine sees every
//! machine's steps. A thread whose steps ran before the database kept logs is read from its
//! local files.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::dir::{Dir, read_local, stat_local};
use super::{RunLog, RunPaths};
use crate::engine::storage::run_sink;
use crate::pg::{PgStore, RunFileKind};

/// The run log in the database.
pub(super) struct Pg {
    pg: Arc<PgStore>,
}

impl Pg {
    pub(super) fn new(pg: Arc<PgStore>) -> Pg {
        Pg { pg }
    }
}

impl RunLog for Pg {
    fn append(&self, files: &RunPaths, file: RunFileKind, bytes: &[u8]) {
        if let Some(sink) = run_sink::of(files.root()) {
            sink.append(files.id(), file, bytes);
        }
    }

    fn share_state(&self, files: &RunPaths, last: Option<&str>, info: Option<&str>) {
        if let Some(sink) = run_sink::of(files.root()) {
            sink.set_state(files.id(), last, info);
        }
    }

    fn flush(&self, files: &RunPaths, timeout: Duration) {
        if let Some(sink) = run_sink::of(files.root()) {
            sink.flush(timeout);
        }
    }

    fn share_outcome(&self, files: &RunPaths, error: Option<&str>) {
        drop(self.pg.set_outcome(files.id(), error));
    }

    fn share_failure(&self, files: &RunPaths, _message: &str, last: &str) {
        self.share_state(files, Some(last), None);
    }

    fn last_outcome(&self, files: &RunPaths) -> Option<serde_json::Value> {
        let (last, _, _) = self.pg.run_state(files.id()).ok()?;
        serde_json::from_str(&last?).ok()
    }

    /// From the thread's row: the attempt may have been any machine's, and a later step on
    /// another machine clears it.
    fn last_failure(&self, files: &RunPaths) -> Option<String> {
        self.pg.failure_of(files.id()).ok()?
    }

    /// The record the running step's machine shared.
    fn running_info(&self, files: &RunPaths) -> Option<String> {
        let (_, info, _) = self.pg.run_state(files.id()).ok()?;
        info
    }

    fn read_text(
        &self,
        files: &RunPaths,
        file: RunFileKind,
        offset: u64,
        max: usize,
    ) -> std::io::Result<Vec<u8>> {
        let bytes = self
            .pg
            .read_run_text(files.id(), file, offset, max)
            .map_err(std::io::Error::other)?;
        // A thread whose steps ran before the database kept logs has only its local file.
        let local_only = bytes.is_empty()
            && self
                .pg
                .run_text_size(files.id(), file)
                .map_err(std::io::Error::other)?
                .is_none();
        if !local_only {
            return Ok(bytes);
        }
        read_local(files, file, offset, max)
    }

    fn text_stat(&self, files: &RunPaths, file: RunFileKind) -> (u64, Option<SystemTime>) {
        match self.pg.run_text_size(files.id(), file) {
            Ok(Some((size, at))) => (size, Some(UNIX_EPOCH + Duration::from_millis(at))),
            // Nothing in the database: the local file, if any (see `read_text`).
            Ok(None) => stat_local(files, file),
            Err(_) => (0, None),
        }
    }

    /// The `error` file here (which also keeps what this machine refused, e.g. a step while
    /// another runs), unless a step ran anywhere since it was written: then the thread's last
    /// failure as any machine recorded it.
    fn error_text(&self, files: &RunPaths) -> Vec<u8> {
        let written = std::fs::metadata(files.error())
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map(|d| d.as_millis() as u64);
        let shared_at = self
            .pg
            .run_state(files.id())
            .map(|(_, _, at)| at)
            .unwrap_or(0);
        if written.is_some_and(|w| w >= shared_at) {
            return Dir.error_text(files);
        }
        match self.pg.failure_of(files.id()) {
            Ok(Some(e)) if !e.is_empty() => format!("{}\n", e.trim_end()).into_bytes(),
            _ => Vec::new(),
        }
    }

    fn share_awaiting(&self, files: &RunPaths, question: Option<&str>) {
        drop(self.pg.set_awaiting(files.id(), question));
    }

    fn awaiting(&self, files: &RunPaths) -> Option<Vec<u8>> {
        Some(self.pg.awaiting_of(files.id()).ok()??.into_bytes())
    }
}
