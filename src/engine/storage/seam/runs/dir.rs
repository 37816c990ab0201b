//! A directory store's run log: the files under `<root>/runs/` are the whole story; a step's
//! failure and a question are also noted in `index.db` for listings (best effort).

use std::fs::File;
use std::time::{Duration, SystemTime};

use super::{RunLog, RunPaths};
use crate::engine::storage::index_db;
use crate::pg::RunFileKind;

/// The run log in this machine's files.
pub(super) struct Dir;

/// Up to `max` bytes of the local log or event feed from `offset` on (none when absent).
pub(super) fn read_local(
    files: &RunPaths,
    file: RunFileKind,
    offset: u64,
    max: usize,
) -> std::io::Result<Vec<u8>> {
    let path = files.text(file);
    let mut f = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    use std::io::{Read, Seek, SeekFrom};
    f.seek(SeekFrom::Start(offset))?;
    let mut out = Vec::new();
    f.take(max as u64).read_to_end(&mut out)?;
    Ok(out)
}

/// The size and modification time of the local log or event feed.
pub(super) fn stat_local(files: &RunPaths, file: RunFileKind) -> (u64, Option<SystemTime>) {
    match std::fs::metadata(files.text(file)) {
        Ok(m) => (m.len(), m.modified().ok()),
        Err(_) => (0, None),
    }
}

impl RunLog for Dir {
    fn append(&self, _files: &RunPaths, _file: RunFileKind, _bytes: &[u8]) {}

    fn share_state(&self, _files: &RunPaths, _last: Option<&str>, _info: Option<&str>) {}

    fn flush(&self, _files: &RunPaths, _timeout: Duration) {}

    fn share_outcome(&self, files: &RunPaths, error: Option<&str>) {
        index_db::note_error(files.root(), files.id(), error);
    }

    fn share_failure(&self, files: &RunPaths, message: &str, _last: &str) {
        index_db::note_error(files.root(), files.id(), Some(message));
    }

    fn last_outcome(&self, files: &RunPaths) -> Option<serde_json::Value> {
        let bytes = std::fs::read(files.last()).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    fn last_failure(&self, files: &RunPaths) -> Option<String> {
        let last = self.last_outcome(files)?;
        if last.get("ok") != Some(&serde_json::Value::Bool(false)) {
            return None;
        }
        Some(
            last.get("error")
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        )
    }

    fn running_info(&self, files: &RunPaths) -> Option<String> {
        std::fs::read_to_string(files.run()).ok()
    }

    fn read_text(
        &self,
        files: &RunPaths,
        file: RunFileKind,
        offset: u64,
        max: usize,
    ) -> std::io::Result<Vec<u8>> {
        read_local(files, file, offset, max)
    }

    fn text_stat(&self, files: &RunPaths, file: RunFileKind) -> (u64, Option<SystemTime>) {
        stat_local(files, file)
    }

    fn error_text(&self, files: &RunPaths) -> Vec<u8> {
        std::fs::read(files.error()).unwrap_or_default()
    }

    fn share_awaiting(&self, files: &RunPaths, question: Option<&str>) {
        index_db::note_awaiting(files.root(), files.id(), question);
    }

    fn awaiting(&self, files: &RunPaths) -> Option<Vec<u8>> {
        std::fs::read(files.awaiting()).ok()
    }
}
