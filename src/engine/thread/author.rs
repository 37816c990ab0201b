//! Who did what to a thread (`docs/cli.md#who-did-what`): the names `--by` gives (or the
//! person running the command), checked in one place, and where they are recorded and read back.
//!
//! A thread's start records its starter in the start node (a `start-v2` node's `by`); every
//! other act — a step taken, an answer, a pause, a resume, a rebind, a kill, a fork — records
//! its author as the `by` field of its event in the thread's change feed ([`events`]), and as a
//! line in the thread log (`── paused by alice · 12:03:07`), so `thread log` tells the story in
//! order. Both go through the storage seam, so both backends keep them.
//!
//! Architecture Invariant: a name is 1 to [`MAX_CHARS`] printable characters on one line, so a
//! name read back cannot forge a heading, a log line, colours or reordered text.

use serde_json::{Value, json};

use crate::advice::Advice;
use crate::cas::{Hash, Store};
use crate::engine::chain;
use crate::engine::thread::events;
use crate::engine::thread::log;
use crate::engine::thread::run_files::RunFiles;
use crate::pg::RunFileKind;

/// The longest name `--by` accepts.
pub(crate) const MAX_CHARS: usize = 64;

/// A name `--by` (or the dashboard's `by`) gave that cannot be recorded.
#[derive(Debug, thiserror::Error)]
#[error("--by {shown}: {problem}")]
pub(crate) struct BadName {
    pub shown: String,
    pub problem: String,
}

impl Advice for BadName {
    fn hints(&self) -> Vec<String> {
        vec![format!(
            "a name is 1 to {MAX_CHARS} printable characters on one line, e.g. `--by alice` or `--by \"Alice Smith\"`"
        )]
    }
}

/// Checks the name of a person acting on a thread: 1 to [`MAX_CHARS`] characters after
/// trimming, none of them a control character (newlines, tabs, ESC of ANSI escapes) or an
/// invisible formatting character (bidirectional overrides, zero-width characters). The error
/// points at the first bad character.
pub(crate) fn check(name: &str) -> Result<(), BadName> {
    let shown = |name: &str| {
        let short: String = name.chars().take(MAX_CHARS).collect();
        let more = if short.len() < name.len() { "…" } else { "" };
        format!("{short:?}{more}")
    };
    let name = name.trim();
    if name.is_empty() {
        return Err(BadName {
            shown: "\"\"".to_owned(),
            problem: "the name is empty".to_owned(),
        });
    }
    for (i, c) in name.chars().enumerate() {
        let kind = if c.is_control() {
            "a control character"
        } else if invisible(c) {
            "an invisible formatting character"
        } else {
            continue;
        };
        return Err(BadName {
            shown: shown(name),
            problem: format!(
                "character {} is U+{:04X}, {kind}; a name is printable text on one line",
                i + 1,
                c as u32
            ),
        });
    }
    let count = name.chars().count();
    if count > MAX_CHARS {
        return Err(BadName {
            shown: shown(name),
            problem: format!("the name has {count} characters; at most {MAX_CHARS}"),
        });
    }
    Ok(())
}

/// `name` checked and trimmed, as it is recorded.
pub(crate) fn checked(name: Option<&str>) -> Result<Option<String>, BadName> {
    match name {
        Some(name) => {
            check(name)?;
            Ok(Some(name.trim().to_owned()))
        }
        None => Ok(None),
    }
}

/// Unicode format characters that change how text around them is shown without being seen:
/// bidirectional marks, embeddings, overrides and isolates, zero-width characters, the BOM.
fn invisible(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{061C}' | '\u{180E}'
        | '\u{200B}'..='\u{200F}'
        | '\u{2028}'..='\u{202E}'
        | '\u{2060}'..='\u{206F}'
        | '\u{FEFF}'
        | '\u{FFF9}'..='\u{FFFB}')
}

/// Records an act of `by` on thread `id`: the event `kind` with `fields` (and `by`, when
/// known) in its change feed, and a line saying so in its log. Best effort, as every event.
pub(crate) fn record(files: &RunFiles, id: &str, kind: &str, by: Option<&str>, fields: Value) {
    events::append(files, id, kind, tagged(fields, by));
    let line = match by {
        Some(by) => format!("{kind} by {by}"),
        None => kind.to_owned(),
    };
    log::note(files.root(), id, &line);
}

/// An event's `fields` with `by` added, when known.
pub(crate) fn tagged(mut fields: Value, by: Option<&str>) -> Value {
    if let (Some(by), Some(map)) = (by, fields.as_object_mut()) {
        map.insert("by".to_owned(), json!(by));
    }
    fields
}

/// The last act on a thread that names its author.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Act {
    /// The event: `started`, `finished`, `paused`, `killed`, …
    pub event: String,
    pub by: String,
    /// When, in ms since the epoch.
    pub at: u64,
}

impl Act {
    pub(crate) fn to_json(&self) -> Value {
        json!({"event": self.event, "by": self.by, "at": self.at})
    }
}

/// Sets `by` (who started thread `id`, or forked it, for a fork; null when unknown) and
/// `lastAction` (`{"event", "by", "at"}` of the last act naming its author, or null) on `json`,
/// a thread's summary at `head`: what `thread show`, the dashboard and the mount show.
pub(crate) fn show(store: &Store, id: &str, head: Hash, json: &mut Value) {
    let (forked_by, last) = from_feed(&RunFiles::new(store.root(), id));
    let by = forked_by.or_else(|| chain::load(store, head).ok()?.start.by.clone());
    json["by"] = by.map_or(Value::Null, Value::String);
    json["lastAction"] = last.map_or(Value::Null, |act| act.to_json());
}

/// What the change feed of a thread says of its authors: who forked it (when it is a fork)
/// and the last act that names its author. Nothing when the feed cannot be read (it is
/// removed with old logs, see `uwf cas gc --keep-logs`).
pub(crate) fn from_feed(files: &RunFiles) -> (Option<String>, Option<Act>) {
    let acts = acts(files);
    let forked_by = acts
        .iter()
        .find(|a| a.event == "forked")
        .map(|a| a.by.clone());
    (forked_by, acts.into_iter().last())
}

/// Every act on a thread that names its author, oldest first, as its change feed has them
/// (the dashboard's "who did what"). A stopped step's `by` says what stopped it (a signal, a
/// kill), not who, so it is left out.
pub(crate) fn acts(files: &RunFiles) -> Vec<Act> {
    let Ok(bytes) = files.read_text_all(RunFileKind::Events) else {
        return Vec::new();
    };
    String::from_utf8_lossy(&bytes)
        .lines()
        .filter_map(|line| {
            let event = serde_json::from_str::<Value>(line).ok()?;
            let (kind, by) = (event["event"].as_str()?, event["by"].as_str()?);
            (kind != "stopped").then(|| Act {
                event: kind.to_owned(),
                by: by.to_owned(),
                at: event["at"].as_u64().unwrap_or(0),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_and_trimmed() {
        assert_eq!(
            checked(Some("  Alice Smith ")).unwrap().unwrap(),
            "Alice Smith"
        );
        assert_eq!(checked(None).unwrap(), None);
        for bad in ["", "  ", "a\nb", "\u{1b}[31mred", "a\u{202E}b"] {
            assert!(check(bad).is_err(), "{bad:?}");
        }
        let long = "x".repeat(MAX_CHARS + 1);
        let err = check(&long).unwrap_err().to_string();
        assert!(err.contains("65 characters; at most 64"), "{err}");
    }

    #[test]
    fn the_feed_names_the_forker_and_the_last_author() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("runs")).unwrap();
        let files = RunFiles::new(dir.path(), "T");
        assert_eq!(from_feed(&files), (None, None));
        record(&files, "T", "forked", Some("ann"), json!({"from": "H"}));
        events::append(&files, "T", "finished", json!({"step": 1}));
        record(&files, "T", "paused", Some("bob"), json!({}));
        let (forked, last) = from_feed(&files);
        assert_eq!(forked.as_deref(), Some("ann"));
        let last = last.unwrap();
        assert_eq!((last.event.as_str(), last.by.as_str()), ("paused", "bob"));
        let log = std::fs::read_to_string(log::path(dir.path(), "T")).unwrap();
        assert!(log.starts_with("── forked by ann · "), "{log}");
        assert!(log.contains("\n── paused by bob · "), "{log}");
    }
}
