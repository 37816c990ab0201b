//! `thread show` for a person at a terminal: the thread's facts as aligned lines (lists and
//! maps in words, nothing as a dash), then the next thing to do with it — answer it, resume
//! it, see why it failed, step it, or read it. Scripts get the same facts as one JSON object.

use serde_json::Value;

use crate::cas::Store;
use crate::cli::Out;
use crate::cli::error::CliResult;
use crate::cli::terminal::output::Mode;
use crate::engine::chain;
use crate::engine::config;
use crate::engine::cycle::lifecycle;
use crate::engine::thread::cost;
use crate::engine::thread::run_files::RunFiles;

/// `uwf thread show`: the head with `-q`, else the thread's facts (JSON, or lines on a terminal).
pub(super) fn show(store: &Store, thread: &str, out: &mut Out) -> CliResult<()> {
    let root = store.root();
    let id = lifecycle::resolve_id(root, thread)?;
    let summary = lifecycle::summary(store, &id)?;
    if out.quiet() {
        out.line(summary.head)?;
        return Ok(());
    }
    let mut json = summary.to_json();
    // The head records its role's failure: the thread went on by its `onFailure`.
    if let Some((role, mut error)) = chain::recorded_failure(store, summary.head)? {
        error["role"] = role.into();
        json["failure"] = error;
    }
    let (parent, children) = lifecycle::family_json(root, &id);
    json["parent"] = parent;
    json["children"] = children;
    crate::engine::cycle::rebase::show(root, &summary, &mut json);
    crate::engine::thread::author::show(store, &id, summary.head, &mut json);
    // What it spent and its budget (`docs/LLM.md#tokens-cost-and-budgets`).
    let config = config::load(root).map(|l| l.config).unwrap_or_default();
    let cost = cost::show_json(store, &id, summary.head, &summary.workflow, &config);
    if let (Ok(Value::Object(cost)), Some(json)) = (cost, json.as_object_mut()) {
        json.extend(cost);
    }
    // A step someone stopped (Ctrl-C, a signal, a kill) left it as it was.
    if !summary.done()
        && summary.status != "failed"
        && let Some(last) = RunFiles::new(root, &id).last_outcome()
        && let Some(stopped) = last.get("stopped").filter(|s| s.is_string())
    {
        json["stopped"] = stopped.clone();
        json["stoppedBy"] = last["by"].clone();
    }
    if out.mode == Mode::Table {
        out.text(&text(&json))?;
    } else {
        out.object(&json)?;
    }
    Ok(())
}

/// The lines `thread show` prints on a terminal for the thread `json` describes.
pub(super) fn text(json: &Value) -> String {
    let Some(fields) = json.as_object() else {
        return format!("{json}\n");
    };
    let shown: Vec<(&str, String)> = fields
        .iter()
        .map(|(key, value)| {
            let said = match key.as_str() {
                "lastAction" => last_action(value),
                "cost" | "childrenCost" => cost::line_of(value),
                "budget" => Some(cost::budget_words(value)),
                _ => words(value),
            };
            (key.as_str(), said.unwrap_or_else(|| "—".to_owned()))
        })
        .collect();
    let width = shown
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for (key, value) in &shown {
        let value = value.replace('\n', &format!("\n{}", " ".repeat(width + 2)));
        out.push_str(&format!("{key:<width$}  {value}\n"));
    }
    if let Some(next) = next_thing(json) {
        out.push_str(&format!("\n{next}\n"));
    }
    out
}

/// The last act naming its author (`{"event", "by", "at"}`) as `paused by alice, 3m ago`.
fn last_action(value: &Value) -> Option<String> {
    let (event, by) = (value["event"].as_str()?, value["by"].as_str()?);
    let when = value["at"].as_u64().map(|at| {
        let now = crate::cas::store::now_ms();
        format!(", {}", crate::cli::terminal::output::ago(at, now))
    });
    Some(format!("{event} by {by}{}", when.unwrap_or_default()))
}

/// A value in words, or `None` when there is nothing to say (null, empty list or map).
fn words(value: &Value) -> Option<String> {
    Some(match value {
        Value::Null => return None,
        Value::String(s) => s.clone(),
        Value::Array(items) if items.is_empty() => return None,
        Value::Array(items) => items
            .iter()
            .filter_map(words)
            .collect::<Vec<_>>()
            .join(", "),
        Value::Object(map) if map.is_empty() => return None,
        Value::Object(map) => map
            .iter()
            .filter_map(|(k, v)| Some(format!("{k}={}", words(v)?)))
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    })
}

/// What a person would do next with the thread, as a sentence naming the command.
pub(super) fn next_thing(json: &Value) -> Option<String> {
    let id = json["thread"].as_str()?;
    let status = json["status"].as_str().unwrap_or_default();
    let paused = json["paused"].as_bool().unwrap_or(false);
    Some(match status {
        "awaiting" => {
            let role = json["awaiting"].as_str().unwrap_or("a role");
            format!(
                "Next: it waits for a person to answer as `{role}`. Read the question with \
                 `uwf thread question {id}`, then answer with `uwf thread answer {id}`."
            )
        }
        _ if paused => format!("Next: it is paused. Resume it with `uwf thread resume {id}`."),
        "over-budget" => format!(
            "Next: it reached its budget (the reason above) and waits for a person: raise it with \
             `uwf thread budget {id} --max-cost X` (or `--max-tokens N`) and it goes on (a worker \
             takes it again if it is queued), or end it with `uwf thread kill {id}`."
        ),
        "failed" => format!(
            "Next: its last step failed (the error above). Try the step again with \
             `uwf thread step {id}`, or read what happened with `uwf thread log {id}`."
        ),
        "running" => format!("Next: a step is running. Watch it with `uwf live {id}`."),
        "active" if json["stopped"].is_string() => format!(
            "Its last step was stopped (by {}) before it finished; nothing failed. Go on with \
             `uwf thread step {id}`, or run it to its end with `uwf thread run {id}`.",
            json["stoppedBy"].as_str().unwrap_or("a stop signal")
        ),
        "active" => format!(
            "Next: take one step with `uwf thread step {id}`, or run it to its end with \
             `uwf thread run {id}`."
        ),
        "done" => format!("Done. Read it with `uwf thread read {id}`."),
        "killed" => format!(
            "It was killed. Read it with `uwf thread read {id}`, or go on from a step with \
             `uwf thread fork`."
        ),
        "rebased" => match json["rebasedOnto"].as_str() {
            Some(next) => format!("It was rebased: it goes on as thread {next}."),
            None => "It was rebased onto another workflow version.".to_owned(),
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lists_and_maps_read_as_words_and_nothing_as_a_dash() {
        let shown = text(&json!({
            "thread": "T1", "status": "active", "agents": { "dev": "dry", "review": "human" },
            "children": [], "parent": null, "steps": 2
        }));
        let line = |key: &str| {
            let line = shown
                .lines()
                .find(|l| l.starts_with(key))
                .unwrap_or_default();
            line.split_whitespace().collect::<Vec<_>>().join(" ")
        };
        assert_eq!(line("agents"), "agents dev=dry, review=human", "{shown}");
        assert_eq!(line("children"), "children —", "{shown}");
        assert_eq!(line("parent"), "parent —", "{shown}");
        assert!(shown.contains("uwf thread step T1"), "{shown}");
    }

    #[test]
    fn the_next_thing_follows_the_status() {
        let next = |v: Value| next_thing(&v).unwrap();
        assert!(
            next(json!({"thread": "T", "status": "awaiting", "awaiting": "approver"}))
                .contains("uwf thread answer T")
        );
        assert!(
            next(json!({"thread": "T", "status": "active", "paused": true}))
                .contains("uwf thread resume T")
        );
        assert!(next(json!({"thread": "T", "status": "failed"})).contains("failed"));
        let over = next(json!({"thread": "T", "status": "over-budget"}));
        assert!(over.contains("uwf thread budget T"), "{over}");
        assert!(next(json!({"thread": "T", "status": "done"})).starts_with("Done."));
    }
}
