//! Text renderings of a thread for people: the transcript (`thread read`), outputs as YAML/JSON
//! with stable key order, step details and bodies, and diffs of steps. (The agent's prompt, which
//! shares the history rendering, is [`crate::engine::agent::prompt`].)

use std::borrow::Borrow;
use std::fmt::Write;

use serde_json::Value;

use crate::cas::canonical::sorted;
use crate::cas::{Hash, Store, StoreError};
use crate::engine::thread::view::ThreadView;

use crate::engine::chain::{self, Chain, ChainError, Entry};

/// An output as YAML with keys sorted (stable for diffs).
pub(crate) fn output_yaml(output: &Value) -> String {
    serde_yaml::to_string(&sorted(output)).unwrap_or_else(|_| format!("{output}\n"))
}

/// An output as pretty JSON with keys sorted, plus a newline.
pub(crate) fn output_json(output: &Value) -> String {
    let mut text =
        serde_json::to_string_pretty(&sorted(output)).unwrap_or_else(|_| output.to_string());
    text.push('\n');
    text
}

/// One step as a Markdown section; a step recording its role's failure shows the error.
fn step_section(index: usize, step: &Entry, body: Option<&str>) -> String {
    if let Some(error) = step.error() {
        let message = error["message"].as_str().unwrap_or_default().trim_end();
        let attempts = error["attempts"].as_u64().unwrap_or(1);
        let fence = if message.contains("```") {
            "~~~~"
        } else {
            "```"
        };
        return format!(
            "### {}. {} ({}) — failed\n\nThe agent failed {attempts} time{}; the thread went on by the role's `onFailure`. The last error:\n\n{fence}text\n{message}\n{fence}\n",
            index + 1,
            step.role,
            step.agent,
            if attempts == 1 { "" } else { "s" },
        );
    }
    let mut out = format!(
        "### {}. {} ({})\n\n```yaml\n{}```\n",
        index + 1,
        step.role,
        step.agent,
        output_yaml(&step.output())
    );
    if let Some(body) = body.filter(|b| !b.trim().is_empty()) {
        out.push('\n');
        out.push_str(body.trim_end());
        out.push('\n');
    }
    out
}

/// Renders the newest steps that fit in `quota` characters (all when `None`), oldest first,
/// with a note about what was left out.
pub(crate) fn history(
    chain: &Chain,
    upto: usize,
    quota: Option<usize>,
    body_of: &dyn Fn(&Entry) -> Option<String>,
) -> String {
    let mut sections: Vec<String> = Vec::new();
    let mut used = 0;
    let mut omitted = 0;
    for (i, step) in chain.steps[..upto].iter().enumerate().rev() {
        let section = step_section(i, step, body_of(step).as_deref());
        if let Some(q) = quota
            && used + section.len() > q
        {
            omitted = i + 1;
            break;
        }
        used += section.len();
        sections.push(section);
    }
    sections.reverse();
    let mut out = String::new();
    if omitted > 0 {
        let _ = writeln!(
            out,
            "_({omitted} earlier step{} left out to fit the quota.)_\n",
            if omitted == 1 { "" } else { "s" }
        );
    }
    if sections.is_empty() && omitted == 0 {
        out.push_str("_No steps yet._\n");
    }
    out.push_str(&sections.join("\n"));
    out
}

/// The thread as Markdown (`uwf thread read`): the steps before index `upto`, newest first
/// within `quota`.
pub(crate) fn transcript(
    view: &ThreadView,
    status: &str,
    upto: usize,
    quota: Option<usize>,
    body_of: &dyn Fn(&Entry) -> Option<String>,
) -> String {
    let chain = &view.chain;
    let mut out = format!("# Thread {}\n\n", view.id);
    let _ = writeln!(
        out,
        "- workflow: {} ({})",
        view.workflow.name, view.workflow_hash
    );
    let _ = writeln!(out, "- status: {status}");
    let _ = writeln!(out, "- steps: {}\n", chain.steps.len());
    let _ = writeln!(out, "## Task\n\n{}\n", chain.start.prompt.trim_end());
    let _ = writeln!(out, "## Steps\n");
    out.push_str(&history(chain, upto, quota, body_of));
    out
}

/// A unified diff of two texts with git-like headers.
pub(crate) fn unified_diff(a_name: &str, a: &str, b_name: &str, b: &str) -> String {
    similar::TextDiff::from_lines(a, b)
        .unified_diff()
        .context_radius(3)
        .header(a_name, b_name)
        .to_string()
}

/// A step's detail node as YAML (`uwf thread step-details`, the mount's `detail.yaml`), with
/// the texts its `raw` and `body` fields name shown inline as `rawText` and `bodyText`.
pub(crate) fn detail_yaml(store: &Store, detail: Hash) -> Result<String, StoreError> {
    Ok(detail_yaml_of(store.get_payload(detail)?, |h| {
        store.get_payload(h).ok()
    }))
}

/// [`detail_yaml`] of a detail payload, reading the nodes it names with `payload` (the mount
/// reads them through its cache).
pub(crate) fn detail_yaml_of<V: Borrow<Value>>(
    mut detail: Value,
    payload: impl Fn(Hash) -> Option<V>,
) -> String {
    for key in ["raw", "body"] {
        if let Some(text) = named_node(&detail, key, &payload) {
            detail[format!("{key}Text")] = text.borrow().clone();
        }
    }
    output_yaml(&detail)
}

/// The text body of a step's detail, if it has one (transcripts, `body.md`), with `payload`
/// reading nodes.
pub(crate) fn body_of<V: Borrow<Value>>(
    detail: Hash,
    payload: impl Fn(Hash) -> Option<V>,
) -> Option<String> {
    let detail = payload(detail)?;
    named_node(detail.borrow(), "body", &payload)?
        .borrow()
        .as_str()
        .map(str::to_owned)
}

/// The payload of the node a detail field (`raw`, `body`) names, if it is one.
fn named_node<V>(detail: &Value, key: &str, payload: &impl Fn(Hash) -> Option<V>) -> Option<V> {
    payload(Hash::parse(detail.get(key)?.as_str()?).ok()?)
}

/// The text body of a cached step's detail, for a reader that must not render a step whose
/// nodes are gone: its step, output and detail nodes are checked ([`chain::check_entry`]),
/// and the detail and its body read; the first that fails is named.
pub(crate) fn checked_body(store: &Store, entry: &Entry) -> Result<Option<String>, ChainError> {
    chain::check_entry(store, entry)?;
    let read = |kind: &'static str, hash: Hash| {
        store.get_payload(hash).map_err(|e| ChainError::Damaged {
            kind,
            hash,
            step: Some(entry.hash),
            reason: match e {
                StoreError::NotFound(_) => "missing".to_owned(),
                other => format!("unreadable: {other}"),
            },
        })
    };
    let detail = read("detail", entry.detail)?;
    let Some(body) = detail.get("body").and_then(Value::as_str) else {
        return Ok(None);
    };
    let Ok(body) = Hash::parse(body) else {
        return Ok(None);
    };
    Ok(read("body", body)?.as_str().map(str::to_owned))
}

/// The text body of a stored step's detail, if it has one (transcripts, prompts).
pub(crate) fn stored_body(store: &Store, detail: Hash) -> Option<String> {
    body_of(detail, |h| store.get_payload(h).ok())
}

/// A step as `uwf thread diff` compares it: its role, its output as YAML (or `error:` for a step
/// recording its role's failure), and the body of its detail (what the agent wrote) after a
/// `---` line.
pub(crate) fn step_text(store: &Store, hash: Hash) -> Result<String, ChainError> {
    let node = store.get(hash)?;
    if node.type_hash != crate::cas::builtin::hash_of("step") {
        let kind = crate::cas::builtin::name_of(node.type_hash)
            .unwrap_or("other")
            .to_owned();
        return Err(ChainError::NotAStepOrStart { hash, kind });
    }
    let step = crate::engine::chain::read_step(&node)?;
    let mut text = format!("# role: {}\n", step.role);
    let output = store.get(step.output)?;
    if output.type_hash == crate::cas::builtin::hash_of("failure") {
        // A step recording its role's failure has no output: its error is what it says.
        text.push_str(&output_yaml(
            &serde_json::json!({ "error": output.payload }),
        ));
    } else {
        text.push_str(&output_yaml(&output.payload));
    }
    if let Some(body) = stored_body(store, step.detail) {
        text.push_str("---\n");
        text.push_str(&body);
        if !body.ends_with('\n') {
            text.push('\n');
        }
    }
    Ok(text)
}

/// The unified diff of two steps (any threads, any forks), as `uwf thread diff` prints it.
pub(crate) fn step_diff(store: &Store, a: Hash, b: Hash) -> Result<String, ChainError> {
    let (ta, tb) = (step_text(store, a)?, step_text(store, b)?);
    Ok(unified_diff(&format!("a/{a}"), &ta, &format!("b/{b}"), &tb))
}
