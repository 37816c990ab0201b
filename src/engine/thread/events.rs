//! A thread's change feed (`runs/<id>.events`): one JSON line per thing that happened to it —
//! a step `started`, `finished` or `failed`, the thread `killed` or `rebased` — appended by the
//! code that did it, so a reader can follow a thread by reading on at its last offset
//! (`tail -f`), which works where file-change notifications do not (a FUSE mount reports only
//! its own changes).
//!
//! Every line is `{"at": <ms>, "thread": <id>, "event": <kind>, …}` with the kind's fields:
//! `started` (`step`, `role`, `agent`), `finished` (`step`, `role`, `head`, `done`; `role`
//! null when the thread was already at its end), `failed` (`step`, `role`, `error`),
//! `retrying` (`step`, `role`, `attempt` that failed, `attempts` in all, `error`: the role's
//! agent runs again), `killed` (`head`), `rebased` (`head`, and `onto`: the thread it goes on
//! as), `paused`, `resumed`, `rebound` (`agents`: role → agent), `forked` (`from`: the step a
//! fork goes on from, `source`: the thread it came from; a fork's first event). Who did it is
//! `by` (see [`super::author`]) on `started`, `awaiting`, `finished`, `failed`, `paused`,
//! `resumed`, `rebound`, `killed` and `forked`, when known; a `stopped` event's `by` says what
//! stopped the step.
//!
//! Over PostgreSQL every line also goes to the database, for every machine to read.
//!
//! Architecture Invariant: the feed only grows; each line is appended with one `write` on an
//! `O_APPEND` descriptor, so concurrent writers never interleave inside a line. Writing it is
//! best effort: a step never fails because its event could not be written.

use std::io::Write;

use serde_json::{Value, json};

use crate::cas::store::now_ms;
use crate::engine::thread::run_files::RunFiles;

/// Appends one event of `kind` with `fields` (an object) to the thread's feed.
pub fn append(files: &RunFiles, id: &str, kind: &str, fields: Value) {
    let mut line = json!({"at": now_ms(), "thread": id, "event": kind});
    if let (Some(line), Value::Object(fields)) = (line.as_object_mut(), fields) {
        line.extend(fields);
    }
    let mut text = line.to_string();
    text.push('\n');
    let path = files.events();
    let mut options = std::fs::OpenOptions::new();
    options.create(true).append(true);
    if let Ok(mut file) = crate::file_util::open_in_dir(&options, &path) {
        let _ = file.write_all(text.as_bytes());
    }
    if let Some(sink) = crate::engine::storage::run_sink::of(files.root()) {
        sink.append(id, crate::pg::RunFileKind::Events, text.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_appended_as_json_lines() {
        let dir = tempfile::tempdir().unwrap();
        let files = RunFiles::new(dir.path(), "T");
        append(
            &files,
            "T",
            "started",
            json!({"step": 1, "role": "planner"}),
        );
        append(&files, "T", "killed", json!({"head": "H"}));
        let text = std::fs::read_to_string(files.events()).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["event"], "started");
        assert_eq!(lines[0]["role"], "planner");
        assert_eq!(lines[0]["thread"], "T");
        assert_eq!(lines[1]["event"], "killed");
        assert!(lines[1]["at"].as_u64().is_some());
    }
}
