//! The offline built-in agents (`docs/agents.md#built-in-agents`): `dry`, `script` and `exec`
//! (whose raw outputs may still reach the LLM extraction fallback when one is configured). Each
//! writes one step for the thread's current head and returns its hash; the CLI prints it, as every
//! agent must.

use crate::advice::Advice;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use serde_json::Value;

use crate::cas::{Hash, Store};
use crate::engine::chain::History;
use crate::engine::thread::view::{self, ThreadView};
use crate::engine::workflow::{Workflow, template};

use crate::engine::config::Config;

use crate::engine::agent::minimal::minimal;
use crate::engine::agent::submit::{self, Submission, SubmitError};
use crate::engine::thread::render;
use crate::engine::workflow::yaml_to_json;

/// Errors of the built-in agents.
#[derive(Debug, thiserror::Error)]
pub enum BuiltinError {
    #[error(transparent)]
    View(#[from] crate::engine::thread::view::ViewError),
    #[error(transparent)]
    Submit(#[from] SubmitError),
    #[error("the dry agent cannot fabricate a valid output for role `{role}`: {reason}")]
    Dry { role: String, reason: String },
    #[error("cannot read script {path}: {reason}")]
    Script { path: String, reason: String },
    #[error("script {path} has no outputs for role `{role}`")]
    ScriptRole { path: String, role: String },
    #[error("command failed to start: {0}")]
    Spawn(std::io::Error),
    #[error(
        "`{cmd}` exited with {status}; its output is kept as text node {raw}{}",
        stderr_note(stderr_tail)
    )]
    ExecFailed {
        cmd: String,
        status: String,
        raw: Hash,
        stderr_tail: String,
    },
    #[error("cannot write the prompt file: {0}")]
    PromptFile(std::io::Error),
    #[error(
        "`{cmd}` was stopped by {}: nothing was written",
        crate::engine::agent::interrupt::name(*signal)
    )]
    Stopped { cmd: String, signal: i32 },
}

impl Advice for BuiltinError {
    fn hints(&self) -> Vec<String> {
        match self {
            BuiltinError::View(e) => e.hints(),
            BuiltinError::Submit(e) => e.hints(),
            BuiltinError::ScriptRole { role, .. } => {
                vec![format!("add `{role}:` with a list of outputs")]
            }
            _ => Vec::new(),
        }
    }
    fn is_busy(&self) -> bool {
        match self {
            BuiltinError::View(e) => e.is_busy(),
            BuiltinError::Submit(e) => e.is_busy(),
            _ => false,
        }
    }
}

fn stderr_note(tail: &str) -> String {
    if tail.trim().is_empty() {
        String::new()
    } else {
        format!(
            "\nits stderr ended with:\n  {}",
            tail.trim_end().lines().collect::<Vec<_>>().join("\n  ")
        )
    }
}

/// `uwf agent dry`: the smallest schema-valid output.
pub(crate) fn dry(store: &Store, thread: &str, role: &str) -> Result<Hash, BuiltinError> {
    let (history, workflow) = view::load_light(store, thread)?;
    dry_at(store, thread, role, &history, &workflow)
}

/// [`dry`] for a thread whose history and workflow the caller has loaded (a step running it
/// in process).
pub(crate) fn dry_at(
    store: &Store,
    thread: &str,
    role: &str,
    history: &History,
    workflow: &Workflow,
) -> Result<Hash, BuiltinError> {
    let t = Instant::now();
    let target = history.target(workflow);
    let schema_hash = target.role_schema(role)?;
    check_templates(history, workflow, role)?;
    let schema = store.schema(schema_hash).map_err(SubmitError::from)?;
    let output = minimal(schema.schema());
    if let Err(violations) = schema.validate(&output) {
        return Err(BuiltinError::Dry {
            role: role.to_owned(),
            reason: violations
                .iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join("; "),
        });
    }
    let raw = format!("---\n{}---\n", render::output_yaml(&output));
    let submission = Submission {
        agent: "dry".into(),
        raw,
        exit_code: Some(0),
        duration_ms: submit::step_duration_ms(Some(t), thread),
        ..Default::default()
    };
    Ok(submit::write_step_to(
        store, &target, role, &output, None, submission,
    )?)
}

/// Renders `role`'s `{{ }}` templates, which `dry` and `script` do not read: a template that
/// cannot be evaluated fails every agent that reads its prompt, so an offline run finds it too.
/// Costs nothing for a role without templates (no context is made).
fn check_templates(history: &History, workflow: &Workflow, role: &str) -> Result<(), BuiltinError> {
    if let Some(r) = workflow.roles.get(role) {
        template::render_role(role, r, || history.context_json()).map_err(SubmitError::from)?;
    }
    Ok(())
}

/// `uwf agent script --file F`: the n-th visit of a role takes the n-th entry (the last repeats).
/// A mapping entry is the structured output itself; a string entry is raw output and goes
/// through extraction like any agent's.
pub(crate) fn script(
    store: &Store,
    config: &Config,
    file: &Path,
    thread: &str,
    role: &str,
) -> Result<Hash, BuiltinError> {
    let (history, workflow) = view::load_light(store, thread)?;
    script_at(store, config, file, (thread, role), &history, &workflow)
}

/// [`script`] for a thread whose history and workflow the caller has loaded (a step running it
/// in process).
pub(crate) fn script_at(
    store: &Store,
    config: &Config,
    file: &Path,
    (thread, role): (&str, &str),
    history: &History,
    workflow: &Workflow,
) -> Result<Hash, BuiltinError> {
    let t = Instant::now();
    let path = file.display().to_string();
    let text = std::fs::read_to_string(file).map_err(|e| BuiltinError::Script {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    let script: BTreeMap<String, Vec<serde_yaml::Value>> =
        serde_yaml::from_str(&text).map_err(|e| BuiltinError::Script {
            path: path.clone(),
            reason: format!("expected `role: [outputs…]`: {e}"),
        })?;
    let entries =
        script
            .get(role)
            .filter(|e| !e.is_empty())
            .ok_or_else(|| BuiltinError::ScriptRole {
                path: path.clone(),
                role: role.to_owned(),
            })?;
    let target = history.target(workflow);
    check_templates(history, workflow, role)?;
    let visit = history.visits(role);
    let entry = &entries[visit.min(entries.len() - 1)];
    let mut submission = Submission {
        agent: "script".into(),
        exit_code: Some(0),
        ..Default::default()
    };
    submission
        .extra
        .insert("script".into(), path.clone().into());
    submission
        .extra
        .insert("entry".into(), visit.min(entries.len() - 1).into());
    let hash = match entry {
        serde_yaml::Value::String(raw) => {
            submission.raw = raw.clone();
            submission.duration_ms = submit::step_duration_ms(Some(t), thread);
            submit::submit_raw_to(store, &target, role, submission, config)?
        }
        other => {
            let output =
                yaml_to_json(other).map_err(|reason| BuiltinError::Script { path, reason })?;
            submission.raw = format!("---\n{}---\n", render::output_yaml(&output));
            submission.duration_ms = submit::step_duration_ms(Some(t), thread);
            submit::write_step_to(store, &target, role, &output, None, submission)?
        }
    };
    Ok(hash)
}

/// `uwf agent exec --cmd TEMPLATE`: runs a command built from the template (placeholders
/// `{prompt}`, `{prompt_file}`, `{task}`, `{thread}`, `{role}`, `{workdir}`, each shell-quoted)
/// with `sh -c`; its stdout goes through extraction. `{task}` is the thread's own prompt, for
/// deterministic CLIs that want the task rather than the whole role prompt.
pub(crate) fn exec(
    store: &Store,
    config: &Config,
    template: &str,
    thread: &str,
    role: &str,
) -> Result<Hash, BuiltinError> {
    let t = Instant::now();
    let view = ThreadView::load(store, thread)?;
    let prompt = role_prompt(store, &view, thread, role)?;
    let mut prompt_file = tempfile::Builder::new()
        .prefix("uwf-prompt-")
        .suffix(".md")
        .tempfile()
        .map_err(BuiltinError::PromptFile)?;
    std::io::Write::write_all(&mut prompt_file, prompt.as_bytes())
        .map_err(BuiltinError::PromptFile)?;
    let workdir = std::env::current_dir()
        .map(|d| d.display().to_string())
        .unwrap_or_else(|_| ".".into());
    let cmd = fill_template(
        template,
        &[
            ("prompt", prompt.as_str()),
            ("prompt_file", &prompt_file.path().display().to_string()),
            ("task", view.chain.start.prompt.as_str()),
            ("thread", thread),
            ("role", role),
            ("workdir", &workdir),
        ],
    );
    let mut sh = Command::new("sh");
    sh.arg("-c")
        .arg(&cmd)
        .env_remove(crate::engine::agent::spawn::DIE_WITH_ENV)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // If this agent is stopped (its step was killed), the command goes with it.
    crate::engine::agent::spawn::die_with_parent(&mut sh);
    let output = match crate::engine::agent::interrupt::output_unless_stopped(&mut sh) {
        Ok(Ok(output)) => output,
        // The prompt file goes with `prompt_file`, dropped on the way out.
        Ok(Err(signal)) => {
            return Err(BuiltinError::Stopped {
                cmd: template.to_owned(),
                signal,
            });
        }
        Err(e) => return Err(BuiltinError::Spawn(e)),
    };
    drop(prompt_file);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    // The agent's stderr is ours: pass it on so the step's log shows it.
    eprint!("{stderr}");
    let tail: String = {
        let chars: Vec<char> = stderr.chars().collect();
        chars[chars.len().saturating_sub(4096)..].iter().collect()
    };
    let raw = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        let raw_hash = store
            .put(crate::cas::builtin::hash_of("text"), &Value::String(raw))
            .map_err(SubmitError::from)?;
        return Err(BuiltinError::ExecFailed {
            cmd: template.to_owned(),
            status: output.status.to_string(),
            raw: raw_hash,
            stderr_tail: tail,
        });
    }
    let mut submission = Submission {
        agent: "exec".into(),
        raw,
        exit_code: output.status.code(),
        duration_ms: submit::step_duration_ms(Some(t), thread),
        stderr_tail: tail,
        ..Default::default()
    };
    submission.extra.insert("command".into(), template.into());
    Ok(submit::submit_raw(store, &view, role, submission, config)?)
}

/// The whole prompt for `role` of `thread` (what `uwf agent prompt` prints): what `exec` and
/// the agent programs (`claude`, `codex`) are given.
pub(crate) fn role_prompt(
    store: &Store,
    view: &ThreadView,
    thread: &str,
    role: &str,
) -> Result<String, BuiltinError> {
    let schema = store
        .get_payload(view.role_schema(role)?)
        .map_err(SubmitError::from)?;
    let body_of = |e: &crate::engine::chain::Entry| {
        crate::engine::thread::render::stored_body(store, e.detail)
    };
    Ok(crate::engine::agent::prompt::agent_prompt(
        thread,
        &view.workflow,
        role,
        &schema,
        &view.chain,
        None,
        &body_of,
    )
    .map_err(SubmitError::from)?)
}

/// Replaces `{name}` placeholders with shell-quoted values; other braces are left alone.
pub(crate) fn fill_template(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find('}').map(|close| (&after[..close], close)) {
            Some((name, close)) if values.iter().any(|(n, _)| *n == name) => {
                let value = values
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| *v)
                    .unwrap_or("");
                out.push_str(&shell_words::quote(value));
                rest = &after[close + 1..];
            }
            _ => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_quote_values_and_keep_other_braces() {
        let cmd = fill_template(
            "claude -p {prompt} --cwd {workdir} | jq '{a: 1}' {unknown}",
            &[("prompt", "it's \"quoted\"; rm -rf /"), ("workdir", "/w d")],
        );
        assert_eq!(
            cmd,
            "claude -p 'it'\\''s \"quoted\"; rm -rf /' --cwd '/w d' | jq '{a: 1}' {unknown}"
        );
    }
}
