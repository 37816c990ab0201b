//! Text renderings of a thread for people and agents: the transcript (`thread read`), the agent
//! prompt (`agent prompt`), outputs as YAML/JSON with stable key order, and diffs of steps.

use std::borrow::Borrow;
use std::fmt::Write;

use serde_json::Value;

use crate::cas::canonical::sorted;
use crate::cas::{Hash, Store, StoreError};

use crate::engine::agent::minimal::minimal;
use crate::engine::agent::submit::ThreadView;
use crate::engine::thread::chain::{Chain, Entry};
use crate::engine::workflow::Workflow;

/// An output as YAML with keys sorted (stable for diffs).
pub fn output_yaml(output: &Value) -> String {
    serde_yaml::to_string(&sorted(output)).unwrap_or_else(|_| format!("{output}\n"))
}

/// An output as pretty JSON with keys sorted, plus a newline.
pub fn output_json(output: &Value) -> String {
    let mut text =
        serde_json::to_string_pretty(&sorted(output)).unwrap_or_else(|_| output.to_string());
    text.push('\n');
    text
}

/// One step as a Markdown section.
fn step_section(index: usize, step: &Entry, body: Option<&str>) -> String {
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
fn history(
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
pub fn transcript(
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

/// The instruction that tells an agent how to format its answer for `role`'s schema.
pub fn format_instruction(schema: &Value) -> String {
    let example = output_yaml(&minimal(schema));
    let schema_text = serde_json::to_string_pretty(&sorted(schema)).unwrap_or_default();
    format!(
        "## Output format\n\n\
Answer with a YAML frontmatter block first: a line `---`, the fields below as YAML, and another `---` line. \
Write any explanation as Markdown after it. The fields must validate against this JSON Schema:\n\n\
```json\n{schema_text}\n```\n\n\
For example (the smallest valid answer):\n\n---\n{example}---\n"
    )
}

/// The prompt of an agent playing `role`, in three parts that LLM agents place in different
/// messages.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptParts {
    /// The output-format instruction (from the role's schema).
    pub format: String,
    /// The scope line and the role's description, goal, capabilities, procedure and output.
    pub role: String,
    /// `## Task` (the thread's prompt) and `## History` (prior steps).
    pub task: String,
}

impl PromptParts {
    /// The whole prompt, as `uwf agent prompt` prints it.
    pub fn joined(&self) -> String {
        format!("{}{}{}", self.format, self.role, self.task)
    }
}

/// The prompt for an agent playing `role`; `quota` bounds the whole prompt's length by leaving
/// out the oldest history.
pub fn prompt_parts(
    id: &str,
    workflow: &Workflow,
    role: &str,
    schema: &Value,
    chain: &Chain,
    quota: Option<usize>,
    body_of: &dyn Fn(&Entry) -> Option<String>,
) -> PromptParts {
    let format = format_instruction(schema);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nYou are the `{role}` role of the `{}` workflow (thread {id}, step {}). Do this role's part only; the workflow routes the rest.\n",
        workflow.name,
        chain.steps.len() + 1
    );
    if let Some(r) = workflow.roles.get(role) {
        let _ = writeln!(out, "## Role: {role}\n");
        let mut line = |label: &str, text: &Option<String>| {
            if let Some(t) = text.as_deref().filter(|t| !t.trim().is_empty()) {
                let _ = writeln!(out, "**{label}:** {}\n", t.trim_end());
            }
        };
        line("Description", &r.description);
        line("Goal", &r.goal);
        line(
            "Capabilities",
            &r.capabilities.as_ref().map(|c| c.join(", ")),
        );
        line("Procedure", &r.procedure);
        line("Output", &r.output);
    }
    let mut task = String::new();
    let _ = writeln!(task, "## Task\n\n{}\n", chain.start.prompt.trim_end());
    let _ = writeln!(task, "## History\n");
    let budget = quota.map(|q| q.saturating_sub(format.len() + out.len() + task.len()));
    task.push_str(&history(chain, chain.steps.len(), budget, body_of));
    PromptParts {
        format,
        role: out,
        task,
    }
}

/// The full prompt for an agent playing `role` (`uwf agent prompt`).
pub fn agent_prompt(
    id: &str,
    workflow: &Workflow,
    role: &str,
    schema: &Value,
    chain: &Chain,
    quota: Option<usize>,
    body_of: &dyn Fn(&Entry) -> Option<String>,
) -> String {
    prompt_parts(id, workflow, role, schema, chain, quota, body_of).joined()
}

/// A unified diff of two texts with git-like headers.
pub fn unified_diff(a_name: &str, a: &str, b_name: &str, b: &str) -> String {
    similar::TextDiff::from_lines(a, b)
        .unified_diff()
        .context_radius(3)
        .header(a_name, b_name)
        .to_string()
}

/// A step's detail node as YAML (`uwf thread step-details`, the mount's `detail.yaml`), with
/// the texts its `raw` and `body` fields name shown inline as `rawText` and `bodyText`.
pub fn detail_yaml(store: &Store, detail: Hash) -> Result<String, StoreError> {
    Ok(detail_yaml_of(store.get_payload(detail)?, |h| {
        store.get_payload(h).ok()
    }))
}

/// [`detail_yaml`] of a detail payload, reading the nodes it names with `payload` (the mount
/// reads them through its cache).
pub fn detail_yaml_of<V: Borrow<Value>>(
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
pub fn body_of<V: Borrow<Value>>(
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
