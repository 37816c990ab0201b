//! The `human` agent kind (`docs/agents.md#workflows-as-agents-and-steps-a-person-answers`):
//! steps a person answers.
//!
//! No process waits for the person. Stepping a thread whose next agent is `human` records a
//! question (`runs/<id>.awaiting.json`, see [`RunFiles::set_awaiting`]) and releases the
//! thread; [`question`] shows what the person is asked (the prompt any agent of that role
//! gets), and [`answer`] completes the step: the answer goes through the same extraction as an
//! agent's raw output, and the step node through the same verification and compare-and-set
//! ([`step::publish`]). A refused answer keeps the thread awaiting and the answer's text (as a
//! text node named in the error). An accepted answer appends the same `finished` event to the
//! thread's feed as a step an agent played.

use std::time::Instant;

use serde_json::json;

use crate::advice::Advice;
use crate::cas::Hash;
use crate::cas::Store;
use crate::cas::schema::Violation;
use crate::cas::store::now_ms;
use crate::engine::agent::extract::{self, ExtractError};
use crate::engine::agent::prompt::prompt_parts;
use crate::engine::agent::question;
use crate::engine::agent::submit::{self, Submission, SubmitError};
use crate::engine::config::Config;
use crate::engine::cycle::lifecycle;
use crate::engine::cycle::step::{self, Current, StepError, Stepped};
use crate::engine::thread::author::{self, BadName};
use crate::engine::thread::events;
use crate::engine::thread::index::{self, State, ThreadIndexError};
use crate::engine::thread::log;
use crate::engine::thread::render::stored_body;
use crate::engine::thread::run_files::RunFiles;
use crate::engine::thread::view::{ThreadView, ViewError};
use crate::engine::workflow::END;

/// Errors of questions and answers.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HumanError {
    #[error("thread {id} is not waiting for an answer: it is {doing}")]
    NotAwaiting { id: String, doing: String },
    #[error("the answer is empty")]
    Empty,
    #[error(transparent)]
    BadName(#[from] BadName),
    #[error(transparent)]
    Index(#[from] ThreadIndexError),
    #[error(transparent)]
    View(#[from] ViewError),
    /// An answer the role's format refuses, said in a person's words first, then as the
    /// extraction says it.
    #[error("the answer was not taken: {}\n{error}", words.join("; "))]
    Refused {
        words: Vec<String>,
        error: Box<SubmitError>,
    },
    #[error(transparent)]
    Submit(#[from] SubmitError),
    #[error(transparent)]
    Step(#[from] StepError),
}

impl Advice for HumanError {
    fn hints(&self) -> Vec<String> {
        match self {
            HumanError::NotAwaiting { id, .. } => vec![format!(
                "`uwf thread show {id}` says what it is doing; a thread asks when its next role's agent is `human`"
            )],
            HumanError::Empty => vec![
                "write the answer in the role's format: `uwf thread question <id>` shows it".into(),
            ],
            HumanError::BadName(e) => e.hints(),
            HumanError::Index(e) => e.hints(),
            HumanError::View(e) => e.hints(),
            HumanError::Submit(e) => e.hints(),
            HumanError::Refused { error, .. } => {
                let mut hints = error.hints();
                hints.push(
                    "an answer is the role's fields as YAML (`approved: true`), as a JSON object \
                     (`{\"approved\": true}`), or as YAML between two `---` lines followed by \
                     Markdown; `uwf thread question <id>` shows them"
                        .into(),
                );
                hints
            }
            HumanError::Step(e) => e.hints(),
        }
    }

    fn is_busy(&self) -> bool {
        match self {
            HumanError::Index(e) => e.is_busy(),
            HumanError::View(e) => e.is_busy(),
            HumanError::Submit(e) => e.is_busy(),
            HumanError::Step(e) => e.is_busy(),
            _ => false,
        }
    }
}

/// What a person waiting on thread `id` is asked.
#[derive(Debug, Clone)]
pub(crate) struct Question {
    pub role: String,
    /// The role and the task, then how to answer (`engine::agent::question`).
    pub prompt: String,
    /// The role's output schema, which an answer must fit.
    pub schema: serde_json::Value,
    /// The thread's task (its prompt).
    pub task: String,
    /// The schema's top-level fields in the order the workflow's author wrote them.
    pub fields: Vec<String>,
}

/// The question thread `id` waits on.
pub(crate) fn question(store: &Store, id: &str) -> Result<Question, HumanError> {
    let view = ThreadView::load(store, id)?;
    let files = RunFiles::new(store.root(), id);
    let Some(asked) = files.awaiting(view.head) else {
        return Err(not_awaiting(store, id));
    };
    let schema = store
        .get_payload(view.role_schema(&asked.role)?)
        .map_err(SubmitError::from)?;
    let body_of = |e: &crate::engine::chain::Entry| stored_body(store, e.detail);
    let parts = prompt_parts(
        id,
        &view.workflow,
        &asked.role,
        &schema,
        &view.chain,
        None,
        &body_of,
    )
    .map_err(SubmitError::from)?;
    let fields = crate::engine::workflow::field_order::of_role(
        store,
        view.workflow_hash,
        &asked.role,
        &schema,
    );
    Ok(Question {
        prompt: question::for_person(id, &parts, &schema, &fields),
        role: asked.role,
        task: view.chain.start.prompt.clone(),
        schema,
        fields,
    })
}

/// Completes the step thread `id` waits on with `text`, answered by `by` (recorded as agent
/// `human:<by>`, or `human`). Holds the thread's step lock throughout, so of two answers at
/// once one wins and the other is busy.
pub(crate) fn answer(
    store: &Store,
    config: &Config,
    id: &str,
    text: &str,
    by: Option<&str>,
) -> Result<Stepped, HumanError> {
    if let Some(by) = by {
        author::check(by)?;
    }
    let started = Instant::now();
    let files = RunFiles::new(store.root(), id);
    let lock = files.try_lock()?;
    // Before the answer's nodes are written, until the head names them (see `cas::gc`).
    let _pin = store.pin().map_err(ViewError::from)?;
    let view = Current::load(store, id)?;
    let Some(asked) = files.awaiting(view.head()) else {
        // The lock this answer holds is what `not_awaiting` would see as a running step.
        drop(lock);
        return Err(idle(store, config, id));
    };
    if text.trim().is_empty() {
        return Err(HumanError::Empty);
    }
    let agent = match by.map(str::trim) {
        Some(name) => format!("human:{name}"),
        None => "human".to_owned(),
    };
    let submission = Submission {
        agent: agent.clone(),
        // Plain YAML fields read as a frontmatter block; anything else as it was written.
        raw: extract::answer_text(text).into_owned(),
        exit_code: None,
        duration_ms: now_ms().saturating_sub(asked.asked_at),
        stderr_tail: String::new(),
        extra: Default::default(),
    };
    let target = view.history.target(&view.workflow);
    let schema_hash = target.role_schema(&asked.role)?;
    // 1-based, as in `steps/NNN-role` and the `awaiting` event.
    let step = view.history.len() + 1;
    let outcome = submit::submit_raw_to(store, &target, &asked.role, submission, config)
        .map_err(|e| refused(store, schema_hash, text, e))
        .and_then(|hash| {
            Ok(step::publish(
                store,
                id,
                view,
                &asked.role,
                &agent,
                hash,
                None,
                None,
            )?)
        });
    match &outcome {
        Ok(stepped) => {
            files.clear_awaiting();
            lock.record_success(&stepped.to_json());
            // As a step an agent played writes it, so a reader of the feed sees the thread move.
            let fields = json!({"step": step, "role": stepped.role,
                "head": stepped.head.to_string(), "done": stepped.done});
            let by = by.map(str::trim);
            events::append(&files, id, "finished", author::tagged(fields, by));
            let who = by.map(|by| format!(" by {by}")).unwrap_or_default();
            log::note(store.root(), id, &format!("step {step} answered{who}"));
        }
        Err(e) => lock.record_error(&format!(
            "answer refused ({} ms): {}",
            started.elapsed().as_millis(),
            crate::advice::with_hints(e)
        )),
    }
    // A thread a worker took off the run queue when it asked goes back on it, for the next
    // role (still under the step lock, so no worker claims it before the answer is recorded).
    if let Ok(stepped) = &outcome
        && asked.queued
        && !stepped.done
    {
        index::queue(store.root(), id)?;
    }
    outcome
}

/// Whether `text`, a whole or partial answer to the question thread `id` awaits, is refused by
/// the role's format already: `Ok(false)` while it is no complete answer yet (a JSON object or a
/// `---` block not closed, or a YAML mapping still missing a required field, which more lines may
/// add), `Ok(true)` when it is a complete answer the role takes. The thread is left as it is;
/// a refused text is kept as a text node, as [`answer`] keeps one, so the error can name it.
pub(crate) fn check_answer(store: &Store, id: &str, text: &str) -> Result<bool, HumanError> {
    let view = ThreadView::load(store, id)?;
    let files = RunFiles::new(store.root(), id);
    let Some(asked) = files.awaiting(view.head) else {
        return Err(not_awaiting(store, id));
    };
    if !extract::answer_is_complete(text) {
        return Ok(false);
    }
    let schema_hash = view.role_schema(&asked.role)?;
    let schema = store.schema(schema_hash).map_err(SubmitError::from)?;
    let plain = extract::answer_text(text);
    match extract::extract(&plain, &schema) {
        Ok(_) => Ok(true),
        // A plain YAML answer may still get its missing fields from the next lines written.
        Err(ExtractError::Schema { violations, .. })
            if matches!(plain, std::borrow::Cow::Owned(_))
                && violations.iter().all(|v| required_name(v).is_some()) =>
        {
            Ok(false)
        }
        Err(error) => {
            // Kept as `answer` keeps a refused answer, so the error can name it.
            let raw = store
                .put(
                    crate::cas::builtin::hash_of("text"),
                    &serde_json::Value::String(text.to_owned()),
                )
                .map_err(SubmitError::from)?;
            let role = asked.role;
            let llm = None;
            Err(refused(
                store,
                schema_hash,
                text,
                SubmitError::Extract {
                    role,
                    error,
                    llm,
                    raw,
                },
            ))
        }
    }
}

/// A refused answer in a person's words: which field is wrong and what it must be, from the
/// role's schema. Errors other than the answer's own are passed on as they are.
fn refused(store: &Store, schema_hash: Hash, text: &str, error: SubmitError) -> HumanError {
    let SubmitError::Extract { error: why, .. } = &error else {
        return HumanError::Submit(error);
    };
    let schema = store.get_payload(schema_hash).unwrap_or_default();
    let words = match why {
        ExtractError::Schema { violations, .. } => {
            let given = extract::parse(&extract::answer_text(text))
                .map(|e| e.output)
                .unwrap_or_default();
            violations
                .iter()
                .map(|v| in_words(&schema, &given, v))
                .collect()
        }
        ExtractError::Empty => return HumanError::Empty,
        _ => vec![format!(
            "it is not a set of fields; write them as YAML, e.g. `{}`",
            example(&schema)
        )],
    };
    HumanError::Refused {
        words,
        error: Box::new(error),
    }
}

/// The field a "required property" violation names.
fn required_name(v: &Violation) -> Option<&str> {
    let rest = v.message.strip_suffix(" is a required property")?;
    rest.strip_prefix('"')?.strip_suffix('"')
}

/// One violation in a person's words.
fn in_words(schema: &serde_json::Value, given: &serde_json::Value, v: &Violation) -> String {
    let mut path: Vec<String> = v
        .pointer
        .split('/')
        .skip(1)
        .map(|p| p.replace("~1", "/").replace("~0", "~"))
        .collect();
    let missing = required_name(v).map(str::to_owned);
    if let Some(name) = &missing {
        path.push(name.clone());
    }
    if path.is_empty() {
        return v.message.clone();
    }
    let field = path.join(".");
    let mut sub = schema;
    for p in &path {
        sub = match sub.get("properties").and_then(|ps| ps.get(p)) {
            Some(s) => s,
            None => match sub.get("items") {
                Some(items) if p.parse::<usize>().is_ok() => items,
                _ => &serde_json::Value::Null,
            },
        };
    }
    let must = must_be(sub);
    if missing.is_some() {
        return match must {
            Some(must) => format!("the field `{field}` is missing: it must be {must}"),
            None => format!("the field `{field}` is missing"),
        };
    }
    if sub.is_null() && v.message.contains("dditional properties") {
        return format!("`{}` is not a field of this answer", path[path.len() - 1]);
    }
    let got = path
        .iter()
        .try_fold(given, |g, p| {
            g.get(p.as_str())
                .or_else(|| p.parse::<usize>().ok().and_then(|i| g.get(i)))
        })
        .map(|g| format!(", not {g}"))
        .unwrap_or_default();
    match must {
        Some(must) => format!("the field `{field}` must be {must}{got}"),
        None => format!("the field `{field}`: {}", v.message),
    }
}

/// What a value of `schema` is, in words: `true or false`, `a text`, `one of "a", "b"`.
fn must_be(schema: &serde_json::Value) -> Option<String> {
    if let Some(options) = schema.get("enum").and_then(|e| e.as_array()) {
        let list: Vec<String> = options.iter().map(|o| o.to_string()).collect();
        return Some(format!("one of {}", list.join(", ")));
    }
    if let Some(value) = schema.get("const") {
        return Some(format!("exactly {value}"));
    }
    let words = |t: &str| match t {
        "boolean" => "true or false",
        "string" => "a text",
        "integer" => "a whole number",
        "number" => "a number",
        "array" => "a list",
        "object" => "a set of fields",
        "null" => "null",
        _ => "a value",
    };
    match schema.get("type")? {
        serde_json::Value::String(t) => Some(words(t).to_owned()),
        serde_json::Value::Array(ts) => Some(
            ts.iter()
                .filter_map(|t| t.as_str())
                .map(words)
                .collect::<Vec<_>>()
                .join(" or "),
        ),
        _ => None,
    }
}

/// An example answer line for a role's schema: its first required field (else its first
/// field) with a value of its type.
fn example(schema: &serde_json::Value) -> String {
    let first = schema
        .get("required")
        .and_then(|r| r.get(0))
        .and_then(|r| r.as_str())
        .or_else(|| {
            schema
                .get("properties")
                .and_then(|p| p.as_object())
                .and_then(|p| p.keys().next())
                .map(String::as_str)
        });
    let Some(name) = first else {
        return "field: value".into();
    };
    let value = match schema
        .pointer(&format!("/properties/{name}/type"))
        .and_then(|t| t.as_str())
    {
        Some("boolean") => "true",
        Some("integer") | Some("number") => "1",
        Some("array") => "[first, second]",
        _ => "some text",
    };
    format!("{name}: {value}")
}

/// The error for an answer to an active thread that asks nothing while no step runs (the answer
/// holds the step lock): names the role the moderator picks next and why no person is asked.
fn idle(store: &Store, config: &Config, id: &str) -> HumanError {
    let summary = match lifecycle::summary(store, id) {
        Ok(summary) => summary,
        Err(_) => return not_awaiting(store, id),
    };
    if summary.done() {
        return not_awaiting(store, id);
    }
    let doing = match summary.next.as_deref() {
        None => "idle: no step has asked a person anything".to_owned(),
        Some(END) => "idle: its next role is $END, nothing is left to answer".to_owned(),
        Some(role) => match config.resolve_bound(
            None,
            crate::engine::thread::context::read(store.root(), id)
                .unwrap_or_default()
                .bindings
                .get(role),
            &summary.workflow,
            role,
        ) {
            Ok(agent) if agent.is_human() => format!(
                "idle: its next role `{role}` is a person's, but no step has asked yet \
                 (`uwf thread step {id}` asks)"
            ),
            Ok(agent) => format!(
                "idle: its next role `{role}` is not a person's (its agent is `{}`)",
                agent.name
            ),
            Err(_) => format!("idle: its next role `{role}` is not a person's"),
        },
    };
    HumanError::NotAwaiting {
        id: id.to_owned(),
        doing,
    }
}

/// The error for a thread that asks nothing, saying what it does instead.
fn not_awaiting(store: &Store, id: &str) -> HumanError {
    let doing = match index::state(store.root(), id) {
        Ok(State::Archived(a)) => format!("archived ({})", a.status),
        Ok(State::Active { .. }) => {
            let files = RunFiles::new(store.root(), id);
            if files.is_running() {
                match files.run_info().and_then(|i| i.role) {
                    Some(role) => format!("running a step (role {role})"),
                    None => "running a step".to_owned(),
                }
            } else {
                "active: its next step is not a person's".to_owned()
            }
        }
        Err(e) => return HumanError::Index(e),
    };
    HumanError::NotAwaiting {
        id: id.to_owned(),
        doing,
    }
}
