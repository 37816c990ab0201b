//! When a role fails (`docs/workflows.md#when-a-role-fails`): a role's `retry: N` runs its agent
//! again, at most N times, with the failure fed back in the prompt; after the last attempt its
//! `onFailure: <role|$END>` publishes a step recording the failure, which moves the thread there.
//! Without `onFailure` the step fails as it always did and the head stays.
//!
//! A role fails when its agent fails at its task: the process exits non-zero, times out or
//! prints no step hash, or what it returns is refused (a step the thread cannot take, an output
//! that does not fit the role's schema: extraction happens inside the agent, so there it shows
//! as a non-zero exit). Not a role failure, and never retried: an agent that cannot start (a
//! configuration to fix), the store or the thread index failing, the step being interrupted
//! (SIGINT, SIGTERM, SIGHUP), another step holding the thread, a person's step. An agent that
//! `uwf thread kill` stopped fails the step as it always did: no attempt follows a kill.
//!
//! Architecture Invariant: every attempt runs inside the one step, under its lock and pin: a
//! new header in the thread log, the run record's agent pid, a watchdog per agent process; the
//! `started` event once, a `retrying` event per attempt run again, then `finished` or `failed`
//! as for any step. The failure step is written and published by the step itself, after the
//! same interrupt check as any publication; its output is a `failure` node (`{message,
//! attempts}`), and its detail carries the same `error`.

use std::sync::OnceLock;
use std::time::Instant;

use serde_json::{Value, json};

use crate::cas::canonical::node_hash;
use crate::cas::{Hash, Store, StoreError, builtin};
use crate::engine::agent::builtin::BuiltinError;
use crate::engine::agent::prompt::{ATTEMPT_ENV, MAX_ATTEMPTS_ENV, PREVIOUS_FAILURE_ENV};
use crate::engine::agent::spawn::AgentError;
use crate::engine::agent::submit::{SubmitError, step_duration_ms};
use crate::engine::thread::events;
use crate::engine::thread::run_files::RunFiles;
use crate::engine::thread::view::StepTarget;
use crate::engine::workflow::Workflow;

/// The most characters of an error that a failure records and feeds back to the agent: the
/// start (what failed) and the end (the agent's last stderr lines) are kept.
pub(crate) const MAX_MESSAGE: usize = 4000;

/// The attempts of one step at its role: which one runs, how many the role allows, and what
/// made the last one fail.
#[derive(Debug)]
pub(crate) struct Attempts {
    /// The attempt running now, 1-based.
    number: u32,
    /// 1 + the role's `retry`.
    most: u32,
    on_failure: Option<String>,
    /// The previous attempt's error (bounded), fed back to the next.
    previous: Option<String>,
    started: Instant,
}

/// What follows a failed attempt.
#[derive(Debug)]
pub(crate) enum After {
    /// Run the agent again ([`Attempts`] counts the next attempt).
    Retry,
    /// Publish `failure` as the role's step: the moderator then takes the role's `onFailure`.
    Route(Failure),
    /// Fail the step (the role has no `onFailure`).
    GiveUp,
}

impl Attempts {
    /// The first attempt at `role` of `workflow`.
    pub(crate) fn of(workflow: &Workflow, role: &str) -> Attempts {
        let role = workflow.roles.get(role);
        Attempts {
            number: 1,
            most: 1 + role.and_then(|r| r.retry).unwrap_or(0),
            on_failure: role.and_then(|r| r.on_failure.clone()),
            previous: None,
            started: Instant::now(),
        }
    }

    /// The attempt running now, 1-based.
    pub(crate) fn number(&self) -> u32 {
        self.number
    }

    /// What the agent's environment says of this attempt (all three are set on every attempt,
    /// so a value inherited from an enclosing step never passes for this one).
    pub(crate) fn env(&self) -> [(String, String); 3] {
        [
            (ATTEMPT_ENV.into(), self.number.to_string()),
            (MAX_ATTEMPTS_ENV.into(), self.most.to_string()),
            (
                PREVIOUS_FAILURE_ENV.into(),
                self.previous.clone().unwrap_or_default(),
            ),
        ]
    }

    /// How the thread log's header names the agent: with the attempt after the first.
    pub(crate) fn agent_label(&self, agent: &str) -> String {
        if self.number == 1 {
            agent.to_owned()
        } else {
            format!("{agent} (attempt {} of {})", self.number, self.most)
        }
    }

    /// The line the thread log gets after the header of an attempt run again.
    pub(crate) fn log_line(&self) -> Option<String> {
        let previous = self.previous.as_deref()?;
        Some(format!(
            "uwf: attempt {} failed: {}",
            self.number - 1,
            first_line(previous)
        ))
    }

    /// Counts the failure of the attempt running now, whose error said `message` (and whose
    /// agent's stderr ended with `stderr_tail`), and says what follows.
    pub(crate) fn failed(&mut self, message: &str, stderr_tail: &str) -> After {
        let message = bounded(message);
        if self.number < self.most {
            self.number += 1;
            self.previous = Some(message);
            return After::Retry;
        }
        match &self.on_failure {
            Some(to) => After::Route(Failure {
                message,
                attempts: self.number,
                to: to.clone(),
                stderr_tail: stderr_tail.to_owned(),
                started: self.started,
            }),
            None => After::GiveUp,
        }
    }

    /// Records that the agent runs again: a `retrying` event, and a notice for the CLI.
    pub(crate) fn retrying(&self, files: &RunFiles, thread: &str, step: usize, role: &str) {
        let error = self.previous.as_deref().unwrap_or_default();
        let failed = self.number - 1;
        let fields = json!({"step": step, "role": role, "attempt": failed,
            "attempts": self.most, "error": error});
        events::append(files, thread, "retrying", fields);
        report(&Notice::Retrying {
            thread,
            role,
            failed,
            most: self.most,
            error,
        });
    }
}

/// A role's failure after its last attempt, to be published as its step.
#[derive(Debug)]
pub(crate) struct Failure {
    /// The last attempt's error (bounded).
    pub message: String,
    pub attempts: u32,
    /// The role's `onFailure`.
    pub to: String,
    stderr_tail: String,
    started: Instant,
}

impl Failure {
    /// The `error` of the step's context and detail.
    fn error(&self) -> Value {
        json!({"message": self.message, "attempts": self.attempts})
    }

    /// Writes the step recording this failure of `role` (played by `agent`) after `target`'s
    /// head: its raw text is the error, its output a `failure` node, its detail the usual
    /// fields with `error`. Returns the step's hash.
    pub(crate) fn write_step(
        &self,
        store: &Store,
        target: &StepTarget<'_>,
        thread: &str,
        role: &str,
        agent: &str,
    ) -> Result<Hash, StoreError> {
        let text = builtin::hash_of("text");
        let raw = Value::String(self.message.clone());
        let output = self.error();
        let output_type = builtin::hash_of("failure");
        let detail = json!({
            "raw": node_hash(text, &raw).to_string(),
            "body": null,
            "exitCode": null,
            "durationMs": step_duration_ms(Some(self.started), thread),
            "stderrTail": self.stderr_tail,
            "error": output,
        });
        let detail_type = builtin::hash_of("detail");
        let prev = (target.head != target.start_hash).then_some(target.head);
        let step = json!({
            "start": target.start_hash.to_string(),
            "prev": prev.map(|p| p.to_string()),
            "role": role,
            "output": node_hash(output_type, &output).to_string(),
            "detail": node_hash(detail_type, &detail).to_string(),
            "agent": agent,
        });
        let nodes = [
            (text, &raw),
            (output_type, &output),
            (detail_type, &detail),
            (builtin::hash_of("step"), &step),
        ];
        let hashes = store.put_all(&nodes).map_err(|(_, e)| e)?;
        Ok(*hashes.last().expect("a hash per node"))
    }

    /// Says that the published failure moved the thread on (a notice for the CLI).
    pub(crate) fn routed(&self, thread: &str, role: &str) {
        report(&Notice::Routed {
            thread,
            role,
            attempts: self.attempts,
            to: &self.to,
            error: &self.message,
        });
    }
}

/// Whether an agent error is the role's agent failing at its task; then the tail of its stderr.
pub(crate) fn agent_failed(e: &AgentError) -> Option<&str> {
    match e {
        AgentError::Timeout { stderr_tail, .. }
        | AgentError::Failed { stderr_tail, .. }
        | AgentError::NoHash { stderr_tail, .. } => Some(stderr_tail),
        // Set-up, not the agent's work: running it again would fail the same way.
        AgentError::Spawn { .. }
        | AgentError::Interrupted { .. }
        | AgentError::MissingSecret { .. }
        | AgentError::Workdir { .. } => None,
    }
}

/// Whether an in-process built-in's error is the agent failing at its task (no output that
/// fits the role, or none for it at all); then the tail of a command's stderr, if any.
pub(crate) fn builtin_failed(e: &BuiltinError) -> Option<&str> {
    match e {
        BuiltinError::ExecFailed { stderr_tail, .. } => Some(stderr_tail),
        BuiltinError::Dry { .. }
        | BuiltinError::ScriptRole { .. }
        | BuiltinError::Submit(SubmitError::Extract { .. } | SubmitError::InvalidOutput { .. }) => {
            Some("")
        }
        _ => None,
    }
}

/// What a step says while it handles a role's failure, for a front end to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Notice<'a> {
    /// Attempt `failed` of `most` failed; the agent runs again.
    Retrying {
        thread: &'a str,
        role: &'a str,
        failed: u32,
        most: u32,
        error: &'a str,
    },
    /// The role failed every attempt; a step recording it moved the thread to `to`.
    Routed {
        thread: &'a str,
        role: &'a str,
        attempts: u32,
        to: &'a str,
        error: &'a str,
    },
}

static REPORTER: OnceLock<fn(&Notice<'_>)> = OnceLock::new();

/// Has this process's steps tell `reporter` when a role's agent runs again or a failure moves
/// a thread on (the CLI prints a line for each; set once, first call wins).
pub(crate) fn report_to(reporter: fn(&Notice<'_>)) {
    let _ = REPORTER.set(reporter);
}

fn report(notice: &Notice<'_>) {
    if let Some(reporter) = REPORTER.get() {
        reporter(notice);
    }
}

/// The first non-empty line of an error.
pub(crate) fn first_line(error: &str) -> &str {
    error
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_default()
        .trim_end()
}

/// `message` within [`MAX_MESSAGE`] characters: its start and its end, with a mark between.
fn bounded(message: &str) -> String {
    let message = message.trim_end();
    let count = message.chars().count();
    if count <= MAX_MESSAGE {
        return message.to_owned();
    }
    let head: String = message.chars().take(MAX_MESSAGE / 4).collect();
    let tail: String = message.chars().skip(count - MAX_MESSAGE / 2).collect();
    format!(
        "{head}\n[… {} characters cut …]\n{tail}",
        count - MAX_MESSAGE / 4 - MAX_MESSAGE / 2
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workflow(role: &str) -> Workflow {
        let yaml = format!(
            "name: w\nroles:\n  a: {{ {role} meta: {{ type: object }} }}\n  b: {{ meta: {{ type: object }} }}\n\
graph:\n  $START: [ {{ role: a, condition: null }} ]\n  a: [ {{ role: $END, condition: null }} ]\n  \
b: [ {{ role: $END, condition: null }} ]\n"
        );
        crate::engine::workflow::parse(&yaml)
            .unwrap_or_else(|p| panic!("{p:?}"))
            .definition
            .workflow
    }

    #[test]
    fn a_role_runs_its_agent_again_retry_times_then_routes_or_gives_up() {
        let mut attempts = Attempts::of(&workflow("retry: 2, onFailure: b,"), "a");
        assert_eq!(attempts.env()[0].1, "1");
        assert_eq!(
            attempts.env()[2].1,
            "",
            "no failure fed to the first attempt"
        );
        assert_eq!(attempts.agent_label("x"), "x");
        assert!(matches!(
            attempts.failed("boom 1\ntail", "tail"),
            After::Retry
        ));
        assert_eq!(attempts.number(), 2);
        assert_eq!(attempts.env()[1].1, "3");
        assert_eq!(attempts.env()[2].1, "boom 1\ntail");
        assert_eq!(attempts.agent_label("x"), "x (attempt 2 of 3)");
        assert_eq!(
            attempts.log_line().unwrap(),
            "uwf: attempt 1 failed: boom 1"
        );
        assert!(matches!(attempts.failed("boom 2", ""), After::Retry));
        match attempts.failed("boom 3", "t") {
            After::Route(f) => {
                assert_eq!(
                    (f.message.as_str(), f.attempts, f.to.as_str()),
                    ("boom 3", 3, "b")
                );
                assert_eq!(f.error(), json!({"message": "boom 3", "attempts": 3}));
            }
            other => panic!("{other:?}"),
        }
        let mut once = Attempts::of(&workflow(""), "a");
        assert!(matches!(once.failed("boom", ""), After::GiveUp));
        let mut end = Attempts::of(&workflow("onFailure: $END,"), "a");
        assert!(
            matches!(end.failed("boom", ""), After::Route(f) if f.to == "$END" && f.attempts == 1)
        );
    }

    #[test]
    fn long_errors_keep_their_start_and_end() {
        let long = format!("first line\n{}\nlast line", "x".repeat(10 * MAX_MESSAGE));
        let kept = bounded(&long);
        assert!(kept.chars().count() < MAX_MESSAGE);
        assert!(kept.starts_with("first line") && kept.ends_with("last line"));
        assert!(kept.contains("characters cut"));
        assert_eq!(bounded("short\n"), "short");
    }
}
