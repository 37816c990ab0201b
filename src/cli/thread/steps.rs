//! `uwf thread steps`: a thread's steps as a table on a terminal, JSON lines otherwise, hashes
//! with `-q`.

use super::super::Out;
use super::super::terminal::output::{Mode, ago, shorten};
use crate::cas::Store;
use crate::cli::error::CliResult;
use crate::engine::thread::view::ThreadView;
use serde_json::json;

/// `thread steps`: a table on a terminal, JSON lines otherwise, hashes with `-q`.
pub(super) fn steps(store: &Store, view: &ThreadView, out: &mut Out) -> CliResult<()> {
    let now = crate::cas::store::now_ms();
    let mut rows = Vec::new();
    for (i, s) in view.chain.steps.iter().enumerate() {
        let output = s.output();
        let child = if s.agent.starts_with("workflow:")
            && let Ok(detail) = store.get_payload(s.detail)
            && let Some(child) = detail.get("thread")
        {
            Some(child.clone())
        } else {
            None
        };
        match out.mode {
            Mode::Quiet => out.line(s.hash)?,
            Mode::Json => {
                let mut line = json!({
                    "index": i + 1,
                    "hash": s.hash.to_string(),
                    "role": s.role,
                    "agent": s.agent,
                    "at": s.timestamp,
                    "summary": s.failure_line().unwrap_or_else(|| summarize(&output)),
                    "output": output,
                });
                if let Some(child) = child {
                    line["child"] = child;
                }
                if let Some(error) = s.error() {
                    line["error"] = error;
                }
                out.line(line)?;
            }
            Mode::Table => rows.push(vec![
                (i + 1).to_string(),
                s.hash.to_string(),
                s.role.clone(),
                s.agent.clone(),
                ago(s.timestamp, now),
                shorten(
                    &s.failure_line().unwrap_or_else(|| output_line(&output)),
                    60,
                ),
            ]),
        }
    }
    out.table(&["#", "STEP", "ROLE", "AGENT", "WHEN", "OUTPUT"], &rows)?;
    Ok(())
}

/// An output as one line for people: `key: value, …` with strings unquoted.
fn output_line(output: &serde_json::Value) -> String {
    match output {
        serde_json::Value::Object(map) => map
            .iter()
            .map(|(k, v)| match v {
                serde_json::Value::String(text) => format!("{k}: {}", text.replace('\n', " ")),
                other => format!("{k}: {other}"),
            })
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
}

/// A one-line summary of an output: its fields, shortened.
fn summarize(output: &serde_json::Value) -> String {
    let text = output.to_string();
    if text.chars().count() > 120 {
        format!("{}…", text.chars().take(119).collect::<String>())
    } else {
        text
    }
}
