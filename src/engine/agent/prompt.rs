//! The prompt an agent gets for a role (`uwf agent prompt`): the output-format
//! instruction derived from the role's schema, a scope line, the role's own text, the task and
//! the history of prior steps (newest kept within a quota).
//!
//! The role's `goal`, `procedure` and `output` may hold `{{ expr }}` templates
//! ([`crate::engine::workflow::template`]); they are rendered here against the thread's
//! moderator context, so a prompt that cannot be made fails with the role, field and template.
//!
//! When a step runs a role's agent again after a failed attempt (the role's `retry`),
//! the prompt ends with `## Previous attempt failed` and that attempt's error. The step tells
//! its agent through the environment ([`PREVIOUS_FAILURE_ENV`] with the thread and role it runs
//! for), so an agent program that calls `uwf agent prompt "$1" "$2"` and the built-in agents
//! that build their prompt in the agent's process get it alike; a prompt for another thread or
//! role (a sub-workflow's child, a person's question) does not.

use std::fmt::Write;

use serde_json::Value;

use crate::cas::canonical::sorted;
use crate::engine::agent::minimal::minimal;
use crate::engine::chain::{Chain, Entry};
use crate::engine::thread::render::{history, output_yaml};
use crate::engine::workflow::Workflow;
use crate::engine::workflow::template::{self, TemplateError};

/// The attempt a step's agent runs as, 1 for the first (set for every agent a step spawns).
pub(crate) const ATTEMPT_ENV: &str = "UWF_ATTEMPT";
/// How many attempts the role allows in all (1 + its `retry`).
pub(crate) const MAX_ATTEMPTS_ENV: &str = "UWF_MAX_ATTEMPTS";
/// The error of the previous attempt (empty on the first).
pub(crate) const PREVIOUS_FAILURE_ENV: &str = "UWF_PREVIOUS_FAILURE";

/// The previous attempt of a step that runs its agent again, as the environment says.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Retried {
    /// The attempt running now (2 or more).
    pub attempt: u32,
    pub most: u32,
    /// What made the previous attempt fail.
    pub error: String,
}

impl Retried {
    /// The retry the step that spawned this process is on, when it runs thread `id`'s role
    /// `role` again after a failure.
    pub(crate) fn from_env(id: &str, role: &str) -> Option<Retried> {
        let var = |name| std::env::var(name).ok();
        if var("UWF_THREAD")? != id || var("UWF_ROLE")? != role {
            return None;
        }
        let error = var(PREVIOUS_FAILURE_ENV).filter(|e| !e.trim().is_empty())?;
        let number = |name| var(name).and_then(|n| n.parse().ok());
        let attempt = number(ATTEMPT_ENV).unwrap_or(2);
        Some(Retried {
            attempt,
            most: number(MAX_ATTEMPTS_ENV).unwrap_or(attempt).max(attempt),
            error,
        })
    }

    /// The prompt's section about it.
    pub(crate) fn section(&self) -> String {
        let fence = if self.error.contains("```") {
            "~~~~"
        } else {
            "```"
        };
        format!(
            "\n## Previous attempt failed\n\nThis is attempt {} of {} at this step. The previous attempt failed:\n\n{fence}text\n{}\n{fence}\n\nAvoid what made it fail, and answer in the output format above.\n",
            self.attempt,
            self.most,
            self.error.trim_end()
        )
    }
}

/// The instruction that tells an agent how to format its answer for `role`'s schema.
pub(crate) fn format_instruction(schema: &Value) -> String {
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
pub(crate) struct PromptParts {
    /// The output-format instruction (from the role's schema).
    pub format: String,
    /// The scope line and the role's description, goal, capabilities, procedure and output.
    pub role: String,
    /// `## Task` (the thread's prompt) and `## History` (prior steps).
    pub task: String,
}

impl PromptParts {
    /// The whole prompt, as `uwf agent prompt` prints it.
    pub(crate) fn joined(&self) -> String {
        format!("{}{}{}", self.format, self.role, self.task)
    }
}

/// The prompt for an agent playing `role`; `quota` bounds the whole prompt's length by leaving
/// out the oldest history. Fails when one of the role's templates cannot be rendered.
pub(crate) fn prompt_parts(
    id: &str,
    workflow: &Workflow,
    role: &str,
    schema: &Value,
    chain: &Chain,
    quota: Option<usize>,
    body_of: &dyn Fn(&Entry) -> Option<String>,
) -> Result<PromptParts, TemplateError> {
    let format = format_instruction(schema);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nYou are the `{role}` role of the `{}` workflow (thread {id}, step {}). Do this role's part only; the workflow routes the rest.\n",
        workflow.name,
        chain.steps.len() + 1
    );
    if let Some(r) = workflow.roles.get(role) {
        let text = template::render_role(role, r, || chain.context_json())?;
        let _ = writeln!(out, "## Role: {role}\n");
        let mut line = |label: &str, text: &Option<String>| {
            if let Some(t) = text.as_deref().filter(|t| !t.trim().is_empty()) {
                let _ = writeln!(out, "**{label}:** {}\n", t.trim_end());
            }
        };
        line("Description", &r.description);
        line("Goal", &text.goal);
        line(
            "Capabilities",
            &r.capabilities.as_ref().map(|c| c.join(", ")),
        );
        line("Procedure", &text.procedure);
        line("Output", &text.output);
    }
    let mut task = String::new();
    let _ = writeln!(task, "## Task\n\n{}\n", chain.start.prompt.trim_end());
    let _ = writeln!(task, "## History\n");
    let retried = Retried::from_env(id, role).map(|r| r.section());
    let retried = retried.unwrap_or_default();
    let used = format.len() + out.len() + task.len() + retried.len();
    let budget = quota.map(|q| q.saturating_sub(used));
    task.push_str(&history(chain, chain.steps.len(), budget, body_of));
    task.push_str(&retried);
    Ok(PromptParts {
        format,
        role: out,
        task,
    })
}

/// The full prompt for an agent playing `role` (`uwf agent prompt`).
pub(crate) fn agent_prompt(
    id: &str,
    workflow: &Workflow,
    role: &str,
    schema: &Value,
    chain: &Chain,
    quota: Option<usize>,
    body_of: &dyn Fn(&Entry) -> Option<String>,
) -> Result<String, TemplateError> {
    prompt_parts(id, workflow, role, schema, chain, quota, body_of).map(|p| p.joined())
}
