//! The `workflow` agent kind: a role played by a whole workflow.
//!
//! `uwf agent workflow --name W <thread> <role>` starts a child thread of `W` whose prompt is the
//! task it is given: the parent role's text, the parent's task and history, and the fields the
//! parent role returns (not an agent's output-format rules, which the child's own roles have),
//! steps the child to
//! `$END` with the same agent resolution as any thread (config, overrides, `defaultAgent`), then
//! writes the parent's step: the output is the child's last output when it validates against the
//! parent role's schema, else what extraction finds in the child's transcript; the detail is a
//! `subthread` node naming the child and its terminal head (which keeps the child's whole chain
//! reachable for GC). A child that fails or is killed fails this agent with the child's reason,
//! so the parent's head does not move. A child waiting for a person is waited for.
//!
//! Architecture Invariant: a child ends with the parent's step that started it. When this agent
//! fails (the child failed, ran out of steps, or a stop signal came: the parent's step was
//! stopped or died), it kills the child before it exits — archived as `killed`, its agents'
//! groups stopped. If this process is killed outright, the parent's step, or the next step or
//! `thread show` of the parent, does it (`lifecycle::end_children`).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::advice::Advice;
use crate::cas::{Hash, Store, StoreError, builtin};
use crate::engine::agent::interrupt;
use crate::engine::agent::prompt::{PromptParts, prompt_parts};
use crate::engine::agent::submit::{SubmitError, extract_output};
use crate::engine::chain::{ChainError, Entry};
use crate::engine::config::{Config, DEFAULT_MAX_DEPTH, Loaded};
use crate::engine::cycle::lifecycle::{self, ThreadError};
use crate::engine::cycle::step::{self, StepError, StepOptions};
use crate::engine::storage::notify::ThreadWaker;
use crate::engine::thread::family::{self, ParentLink};
use crate::engine::thread::index::{self, State, ThreadIndexError};
use crate::engine::thread::render::{history, stored_body, transcript};
use crate::engine::thread::run_files::RunFiles;
use crate::engine::thread::view::{ThreadView, ViewError};
use crate::engine::workflow::registry;

/// How often a child waiting for a person, or busy with a step someone else started, is
/// looked at again.
const POLL: Duration = Duration::from_millis(200);

/// Errors of the workflow agent.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SubworkflowError {
    #[error(
        "thread {thread} is {depth} levels deep; a sub-workflow would nest past maxDepth {max}"
    )]
    TooDeep {
        thread: String,
        depth: usize,
        max: usize,
    },
    #[error("no workflow named `{name}` to run as role `{role}` (registered: {known})")]
    UnknownWorkflow {
        name: String,
        role: String,
        known: String,
    },
    #[error("child thread {child} ({workflow}) failed: {reason}")]
    ChildFailed {
        child: String,
        workflow: String,
        reason: String,
    },
    #[error("child thread {child} ({workflow}) was killed")]
    ChildKilled { child: String, workflow: String },
    #[error(
        "child thread {child} ({workflow}) was stopped: this agent was interrupted by {}",
        interrupt::name(*signal)
    )]
    Interrupted {
        child: String,
        workflow: String,
        signal: i32,
    },
    #[error("child thread {child} ({workflow}) did not finish within {steps} steps")]
    TooManySteps {
        child: String,
        workflow: String,
        steps: usize,
    },
    #[error(
        "child thread {child} ended, but neither its last output nor its transcript gives role `{role}`'s output: {reason}"
    )]
    NoOutput {
        child: String,
        role: String,
        reason: String,
    },
    #[error(transparent)]
    Thread(#[from] ThreadError),
    #[error(transparent)]
    Index(#[from] ThreadIndexError),
    #[error(transparent)]
    View(#[from] ViewError),
    #[error(transparent)]
    Chain(#[from] ChainError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Submit(#[from] SubmitError),
}

impl Advice for SubworkflowError {
    fn hints(&self) -> Vec<String> {
        match self {
            SubworkflowError::TooDeep { .. } => {
                vec!["raise `maxDepth` in config.yaml, or let a plain agent play this role".into()]
            }
            SubworkflowError::UnknownWorkflow { name, .. } => vec![format!(
                "register it: `uwf workflow put {name}.yaml`, or fix `--name` in the agent's command"
            )],
            SubworkflowError::ChildFailed { child, .. } => vec![format!(
                "`uwf thread show {child}` and `uwf thread read {child}` show how far it got"
            )],
            SubworkflowError::TooManySteps { .. } => {
                vec!["raise --max-steps in the agent's command".into()]
            }
            SubworkflowError::Thread(e) => e.hints(),
            SubworkflowError::Index(e) => e.hints(),
            SubworkflowError::View(e) => e.hints(),
            SubworkflowError::Chain(e) => e.hints(),
            SubworkflowError::Store(e) => e.hints(),
            SubworkflowError::Submit(e) => e.hints(),
            _ => Vec::new(),
        }
    }
}

/// What the workflow agent is asked to do.
#[derive(Debug, Clone)]
pub(crate) struct Delegation<'a> {
    /// The parent thread and the role the child plays.
    pub thread: &'a str,
    pub role: &'a str,
    /// The child's workflow (a registered name or a hash).
    pub workflow: &'a str,
    pub max_steps: usize,
}

/// Runs role `role` of thread `thread` as a child thread of `workflow` and writes the parent's
/// step. Returns the step hash (printed by `uwf agent workflow`); the calling step publishes it.
pub(crate) fn run(
    store: &Store,
    config: &Loaded,
    job: &Delegation<'_>,
) -> Result<Hash, SubworkflowError> {
    let started = Instant::now();
    let root = store.root();
    let view = ThreadView::load(store, job.thread)?;
    let depth = family::depth(store, view.chain.start.parent)?;
    let max = config.config.max_depth.unwrap_or(DEFAULT_MAX_DEPTH);
    if depth + 1 > max {
        return Err(SubworkflowError::TooDeep {
            thread: job.thread.to_owned(),
            depth,
            max,
        });
    }
    if let Err(registry::RegistryError::Unresolved { .. }) = registry::resolve(store, job.workflow)
    {
        let known = registry::list(root)
            .map(|r| r.keys().cloned().collect::<Vec<_>>().join(", "))
            .unwrap_or_default();
        return Err(SubworkflowError::UnknownWorkflow {
            name: job.workflow.to_owned(),
            role: job.role.to_owned(),
            known: if known.is_empty() {
                "none".into()
            } else {
                known
            },
        });
    }
    let schema_hash = view.role_schema(job.role)?;
    let schema = store.get_payload(schema_hash)?;
    let body_of = |e: &Entry| stored_body(store, e.detail);
    let parts = prompt_parts(
        job.thread,
        &view.workflow,
        job.role,
        &schema,
        &view.chain,
        None,
        &body_of,
    )
    .map_err(SubmitError::from)?;
    let prompt = child_task(job.thread, job.role, &parts, &schema);
    let link = ParentLink {
        thread: job.thread.to_owned(),
        head: view.head,
        role: job.role.to_owned(),
    };
    let (workflow, child) =
        lifecycle::start_child(store, job.workflow, &prompt, &link, &config.config)?;
    let head = match run_child(store, config, &child, &workflow, job.max_steps) {
        Ok(head) => head,
        Err(e) => {
            // The child does not outlive this attempt: a retry of the parent's step starts a
            // child of its own. (Best effort: if it cannot be killed now, the parent's step
            // ends it when this agent has exited.)
            let _ = lifecycle::kill(store, &child, None);
            return Err(e);
        }
    };

    // The parent's output: the child's last output if it already fits, else extraction over
    // the child's transcript (frontmatter/JSON in the last body, then the LLM fallback).
    let child_view = ThreadView::at(store, &child, head)?;
    let compiled = store.schema(schema_hash)?;
    let last_output = child_view.chain.steps.last().map(Entry::output);
    let mut extraction = serde_json::Map::new();
    let (output, body, raw) = match last_output {
        Some(output) if compiled.validate(&output).is_ok() => (output, None, None),
        _ => {
            // The transcript ends with the child's last step: its frontmatter, or a JSON object
            // in its body, or the LLM fallback over the whole text.
            let text = transcript(
                &child_view,
                "done",
                child_view.chain.steps.len(),
                None,
                &|e| stored_body(store, e.detail),
            );
            let last_body = child_view
                .chain
                .steps
                .last()
                .and_then(|e| stored_body(store, e.detail));
            let from_body = match last_body.as_deref() {
                Some(b) => extract_output(store, schema_hash, b, &Config::default())?.ok(),
                None => None,
            };
            let steps_text = history(
                &child_view.chain,
                child_view.chain.steps.len(),
                None,
                &|e| stored_body(store, e.detail),
            );
            let raw = store.put(builtin::hash_of("text"), &Value::String(text))?;
            let found = match from_body {
                Some(found) => found,
                // Only the steps: the task repeats the parent's prompt, schema and all.
                None => match extract_output(store, schema_hash, &steps_text, &config.config)? {
                    Ok(found) => found,
                    Err((error, llm)) => {
                        return Err(SubworkflowError::NoOutput {
                            child: child.clone(),
                            role: job.role.to_owned(),
                            reason: format!(
                                "{error}{}; the transcript is kept as text node {raw} (`uwf cas get {raw} --payload`)",
                                llm.map(|l| format!("; the LLM fallback failed too: {l}"))
                                    .unwrap_or_default()
                            ),
                        });
                    }
                },
            };
            extraction = found.detail;
            (found.output, found.body, Some(raw))
        }
    };
    let mut detail = json!({
        "thread": child,
        "head": head.to_string(),
        "status": "done",
        "workflow": workflow,
        "durationMs": started.elapsed().as_millis() as u64,
    });
    if let Some(raw) = raw {
        detail["raw"] = Value::String(raw.to_string());
    }
    for (key, value) in extraction {
        detail[key] = value;
    }
    if let Some(body) = body {
        let body = store.put(builtin::hash_of("text"), &Value::String(body))?;
        detail["body"] = Value::String(body.to_string());
    }
    let detail = store.put(builtin::hash_of("subthread"), &detail)?;
    let output = store.put(schema_hash, &output)?;
    let target = view.target();
    let prev = (target.head != target.start_hash).then_some(target.head);
    let step = json!({
        "start": target.start_hash.to_string(),
        "prev": prev.map(|p| p.to_string()),
        "role": job.role,
        "output": output.to_string(),
        "detail": detail.to_string(),
        "agent": format!("workflow:{workflow}"),
    });
    Ok(store.put(builtin::hash_of("step"), &step)?)
}

/// Steps child thread `id` to its end; returns its terminal head.
fn run_child(
    store: &Store,
    config: &Loaded,
    id: &str,
    workflow: &str,
    max_steps: usize,
) -> Result<Hash, SubworkflowError> {
    let options = StepOptions {
        agent: None,
        passthrough: true,
        from_queue: false,
        by: None,
    };
    let files = RunFiles::new(store.root(), id);
    let mut steps = 0;
    let mut warm = step::Warm::default();
    // Waiting for a person or another stepper: over PostgreSQL woken by the thread's change.
    let mut waker: Option<ThreadWaker> = None;
    let mut wait = || {
        waker
            .get_or_insert_with(|| ThreadWaker::new(store.root(), id, POLL))
            .wait()
    };
    loop {
        if let Some(signal) = interrupt::caught() {
            return Err(SubworkflowError::Interrupted {
                child: id.to_owned(),
                workflow: workflow.to_owned(),
                signal,
            });
        }
        match index::state(store.root(), id)? {
            State::Archived(a) if a.status == "done" => return Ok(a.head),
            State::Archived(_) => {
                return Err(SubworkflowError::ChildKilled {
                    child: id.to_owned(),
                    workflow: workflow.to_owned(),
                });
            }
            State::Active { head } if files.awaiting(head).is_some() => {
                // A person answers; `uwf thread answer` publishes and the loop goes on.
                wait();
                continue;
            }
            State::Active { .. } => {}
        }
        if steps == max_steps {
            return Err(SubworkflowError::TooManySteps {
                child: id.to_owned(),
                workflow: workflow.to_owned(),
                steps,
            });
        }
        match step::step_warm(store, config, id, &options, &mut warm) {
            Ok(s) if s.awaiting => {}
            Ok(_) => steps += 1,
            // Someone else (the mount, a person's `thread step`) is stepping it: wait.
            Err(e) if e.is_busy() => wait(),
            // Archived under us (killed): the next look says so.
            Err(StepError::Thread(ThreadIndexError::Archived { .. })) => {}
            Err(e) => {
                return Err(SubworkflowError::ChildFailed {
                    child: id.to_owned(),
                    workflow: workflow.to_owned(),
                    reason: e.to_string(),
                });
            }
        }
    }
}

/// The prompt of a child started for `role` of thread `parent`: the role's text, the task and
/// history, then what the parent expects back.
fn child_task(parent: &str, role: &str, parts: &PromptParts, schema: &Value) -> String {
    let mut out = String::new();
    out.push_str(parts.role.trim_start());
    out.push_str(&parts.task);
    if !out.ends_with("\n\n") {
        out.push('\n');
    }
    out.push_str(&format!(
        "## What this sub-workflow returns\n\nIts last output becomes the `{role}` step of \
         thread {parent}"
    ));
    let fields = crate::engine::agent::question::fields(schema, &[]);
    if fields.is_empty() {
        out.push_str(".\n");
    } else {
        out.push_str(", with these fields:\n\n");
        for line in fields {
            out.push_str(&format!("- {line}\n"));
        }
    }
    out
}
