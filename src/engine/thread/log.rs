//! The thread log (`docs/agents.md#watching-a-thread-live`): `runs/<id>.log`, every step's agent
//! output as it arrives.
//!
//! Each step appends a header line (`── step 4 · reviewer · agent llm · 12:03:07`) and then its
//! agent's stdout and stderr, in the order they arrive. The file only grows while the thread
//! lives, so `tail -f` (and `uwf thread live`) follow a whole run without ever seeing a
//! truncation.
//!
//! Over PostgreSQL the same bytes also go to the database through the store's run sink
//! ([`crate::engine::storage::run_sink`]), so every machine reads the same log.
//!
//! Architecture Invariant: one step adds at most [`HEAD`] + [`TAIL`] bytes of agent output plus
//! a marker line, whatever the agent prints: the first [`HEAD`] bytes are written as they arrive,
//! the last [`TAIL`] are kept in memory and written when the step ends, after a line saying how
//! much was cut between them. Memory is bounded by [`TAIL`] too.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use crate::cas::store::now_ms;
use crate::engine::storage::run_sink::{self, RunSink};
use crate::pg::RunFileKind;

/// Agent output a step writes to the log as it arrives.
pub(crate) const HEAD: usize = 512 << 10;
/// Agent output kept from the end of a step that printed more than [`HEAD`].
pub(crate) const TAIL: usize = 512 << 10;

/// The prefix of every step header line.
pub(crate) const HEADER_PREFIX: &str = "── step ";

/// The log of one thread: `runs/<id>.log`.
pub(crate) fn path(root: &Path, id: &str) -> PathBuf {
    root.join("runs").join(format!("{id}.log"))
}

/// One step's share of the thread log. Shared by the readers of the agent's stdout and stderr.
#[derive(Debug)]
pub(crate) struct StepLog {
    state: Mutex<State>,
    /// The thread, and its store's run sink over PostgreSQL.
    shared: Option<(String, std::sync::Arc<RunSink>)>,
}

#[derive(Debug)]
struct State {
    file: Option<File>,
    /// Bytes of agent output seen this step.
    seen: usize,
    /// The last bytes past [`HEAD`], written at [`StepLog::finish`].
    tail: VecDeque<u8>,
}

impl StepLog {
    /// Appends the header of step `index` (1-based) to the log of thread `id` and returns the
    /// step's writer. A log that cannot be opened makes a writer that writes nothing: the log
    /// is for watching, and never fails a step.
    pub(crate) fn begin(
        root: &Path,
        id: &str,
        (index, role, agent): (usize, &str, &str),
        by: Option<&str>,
    ) -> StepLog {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path(root, id))
            .ok();
        let log = StepLog {
            state: Mutex::new(State {
                file,
                seen: 0,
                tail: VecDeque::new(),
            }),
            shared: run_sink::of(root).map(|sink| (id.to_owned(), sink)),
        };
        log.line(&header(index, role, agent, by, now_ms()));
        log
    }

    /// Writes bytes to the log file and, over PostgreSQL, to the database.
    fn emit(&self, file: &mut Option<File>, bytes: &[u8]) {
        if let Some(f) = file.as_mut() {
            let _ = f.write_all(bytes);
        }
        if let Some((id, sink)) = &self.shared {
            sink.append(id, RunFileKind::Log, bytes);
        }
    }

    /// Appends a line of uwf's own (not agent output, not capped).
    pub(crate) fn line(&self, text: &str) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        self.emit(&mut state.file, format!("{text}\n").as_bytes());
    }

    /// Appends agent output: written at once up to [`HEAD`] bytes per step, kept for the end
    /// past that.
    pub(crate) fn write(&self, chunk: &[u8]) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let room = HEAD.saturating_sub(state.seen);
        let (now, later) = chunk.split_at(room.min(chunk.len()));
        state.seen += chunk.len();
        if !now.is_empty() {
            self.emit(&mut state.file, now);
        }
        for &b in later {
            if state.tail.len() == TAIL {
                state.tail.pop_front();
            }
            state.tail.push_back(b);
        }
    }

    /// Ends the step's output: writes the kept tail after a marker saying what was cut, and
    /// ends the output with a newline.
    pub(crate) fn finish(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let State { file, seen, tail } = &mut *state;
        let mut end = Vec::new();
        let cut = seen.saturating_sub(HEAD + tail.len());
        if cut > 0 {
            end.extend_from_slice(
                format!("\n[… {cut} bytes of agent output cut here …]\n").as_bytes(),
            );
        }
        end.extend(tail.iter());
        let ended_with_newline = match tail.back() {
            Some(&b) => b == b'\n',
            None => *seen == 0 || *seen <= HEAD,
        };
        if !ended_with_newline && *seen > 0 {
            end.push(b'\n');
        }
        tail.clear();
        if !end.is_empty() {
            self.emit(file, &end);
        }
    }
}

/// The text of `pending` up to its last whole character, leaving in `pending` the first bytes
/// of a character that a read cut (they wait for the rest). Followers of a growing log read it
/// in chunks that may end inside a character.
pub(crate) fn whole_chars(pending: &mut Vec<u8>) -> String {
    let keep = match std::str::from_utf8(pending) {
        Err(e) if e.error_len().is_none() => pending.len() - e.valid_up_to(),
        _ => 0,
    };
    let rest = pending.split_off(pending.len() - keep);
    let text = String::from_utf8_lossy(pending).into_owned();
    *pending = rest;
    text
}

/// A step's header line, naming who ran the step when known.
fn header(index: usize, role: &str, agent: &str, by: Option<&str>, ms: u64) -> String {
    let by = by.map(|by| format!(" · by {by}")).unwrap_or_default();
    format!(
        "{HEADER_PREFIX}{index} · {role} · agent {agent}{by} · {}",
        clock(ms)
    )
}

/// The time of day (UTC) of `ms` as `12:03:07`.
fn clock(ms: u64) -> String {
    let secs = ms / 1000;
    let (h, m, s) = ((secs / 3600) % 24, (secs / 60) % 60, secs % 60);
    format!("{h:02}:{m:02}:{s:02}")
}

/// Appends a line of something that happened to thread `id` outside a step (`── paused by
/// alice · 12:03:07`) to its log. Best effort: the log is for watching.
pub(crate) fn note(root: &Path, id: &str, what: &str) {
    let text = format!("── {what} · {}\n", clock(now_ms()));
    let mut options = OpenOptions::new();
    options.create(true).append(true);
    if let Ok(mut file) = crate::file_util::open_in_dir(&options, &path(root, id)) {
        let _ = file.write_all(text.as_bytes());
    }
    if let Some(sink) = run_sink::of(root) {
        sink.append(id, RunFileKind::Log, text.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(root: &Path) -> String {
        std::fs::read_to_string(path(root, "T")).unwrap()
    }

    #[test]
    fn steps_append_with_headers_and_never_truncate() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("runs")).unwrap();
        let one = StepLog::begin(dir.path(), "T", (1, "writer", "llm"), None);
        one.write(b"first line\n");
        one.finish();
        let two = StepLog::begin(dir.path(), "T", (2, "reviewer", "dry"), Some("alice"));
        two.write(b"no newline");
        two.finish();
        let text = read(dir.path());
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].starts_with("── step 1 · writer · agent llm · "),
            "{text}"
        );
        assert_eq!(lines[1], "first line");
        assert!(lines[2].starts_with("── step 2 · reviewer · agent dry · by alice · "));
        assert_eq!(lines[3], "no newline");
        assert_eq!(
            header(4, "r", "a", None, 12 * 3_600_000 + 3 * 60_000 + 7_000),
            "── step 4 · r · agent a · 12:03:07"
        );
    }

    #[test]
    fn a_cut_character_waits_for_its_other_bytes() {
        let mut pending = "ab·".as_bytes().to_vec();
        let last = pending.pop().unwrap();
        assert_eq!(whole_chars(&mut pending), "ab");
        assert_eq!(pending.len(), 1);
        pending.push(last);
        assert_eq!(whole_chars(&mut pending), "·");
        assert!(pending.is_empty());
    }

    #[test]
    fn a_flood_keeps_head_and_tail_and_marks_the_cut() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("runs")).unwrap();
        let log = StepLog::begin(dir.path(), "T", (1, "r", "a"), None);
        let chunk = vec![b'x'; 64 << 10];
        let total = 100 * chunk.len();
        for _ in 0..100 {
            log.write(&chunk);
        }
        log.write(b"\nTHE END\n");
        log.finish();
        let text = read(dir.path());
        assert!(text.len() < HEAD + TAIL + 200, "{}", text.len());
        let cut = total + 9 - HEAD - TAIL;
        assert!(text.contains(&format!("[… {cut} bytes of agent output cut here …]")));
        assert!(text.ends_with("THE END\n"));
    }
}
