//! Writing a step: the raw output and body (text nodes), the output node (typed by the role's
//! schema), the detail node, and the step node — in that order, so a step node never names a
//! node that is not stored. Used by `uwf agent submit` and every built-in agent.

use crate::advice::Advice;
use serde_json::{Map, Value, json};

use crate::cas::canonical::node_hash;
use crate::cas::{Hash, Store, StoreError, builtin};

use crate::engine::agent::extract::llm_layer::extract_with_llm;
use crate::engine::agent::extract::{ExtractError, extract};
use crate::engine::config::Config;
use crate::engine::llm::client::{Client, Endpoint};
use crate::engine::thread::index::ThreadIndexError;
use crate::engine::thread::view::{StepTarget, ThreadView};
use crate::engine::workflow::WorkflowError;

/// Errors while preparing or writing a step.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error(transparent)]
    Thread(#[from] ThreadIndexError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Workflow(#[from] WorkflowError),
    #[error(transparent)]
    Chain(#[from] crate::engine::chain::ChainError),
    #[error(transparent)]
    View(#[from] crate::engine::thread::view::ViewError),
    /// The role's prompt cannot be made: one of its `{{ }}` templates failed.
    #[error(transparent)]
    Prompt(#[from] crate::engine::workflow::template::TemplateError),
    #[error(
        "cannot extract the structured output for role `{role}`: {error}{}",
        llm.as_ref().map(|l| format!("\nthe LLM fallback failed too: {l}")).unwrap_or_default()
    )]
    Extract {
        role: String,
        error: ExtractError,
        /// Why layer 3 failed, when a model is configured for it.
        llm: Option<String>,
        raw: Hash,
    },
    #[error("--detail-json must hold a JSON object: {0}")]
    Detail(String),
    #[error(
        "the output for role `{role}` does not match the role's schema ({schema}):\n{violations}"
    )]
    InvalidOutput {
        role: String,
        schema: Hash,
        violations: String,
    },
}

impl Advice for SubmitError {
    fn hints(&self) -> Vec<String> {
        match self {
            SubmitError::Thread(e) => e.hints(),
            SubmitError::Store(e) => e.hints(),
            SubmitError::Workflow(e) => e.hints(),
            SubmitError::Chain(e) => e.hints(),
            SubmitError::View(e) => e.hints(),
            SubmitError::Prompt(e) => e.hints(),
            SubmitError::Extract { raw, .. } => vec![format!(
                "the raw output is kept as text node {raw}: `uwf cas get {raw} --payload`"
            )],
            SubmitError::InvalidOutput { schema, .. } => {
                vec![format!("`uwf cas schema get {schema}` prints the schema")]
            }
            _ => Vec::new(),
        }
    }
    fn is_busy(&self) -> bool {
        match self {
            SubmitError::Thread(e) => e.is_busy(),
            SubmitError::Store(e) => e.is_busy(),
            SubmitError::Workflow(e) => e.is_busy(),
            SubmitError::Chain(e) => e.is_busy(),
            SubmitError::View(e) => e.is_busy(),
            _ => false,
        }
    }
}

/// What an agent produced.
#[derive(Debug, Clone, Default)]
pub(crate) struct Submission {
    pub agent: String,
    pub raw: String,
    pub exit_code: Option<i32>,
    pub duration_ms: u64,
    pub stderr_tail: String,
    /// More detail fields (tool turns, the command, …).
    pub extra: Map<String, Value>,
}

/// Extracts the output from `submission.raw` and writes the step. Returns the step hash.
///
/// The fast paths (frontmatter, JSON) come first and cost nothing; only when both fail and
/// `config` names a model for `extract` is the LLM fallback asked (extraction layer 3). On a
/// failure the raw output is still stored (as a text node) and named in the error, so no agent's
/// work is lost.
pub(crate) fn submit_raw(
    store: &Store,
    view: &ThreadView,
    role: &str,
    submission: Submission,
    config: &Config,
) -> Result<Hash, SubmitError> {
    submit_raw_to(store, &view.target(), role, submission, config)
}

/// [`submit_raw`] for a [`StepTarget`].
pub(crate) fn submit_raw_to(
    store: &Store,
    view: &StepTarget<'_>,
    role: &str,
    submission: Submission,
    config: &Config,
) -> Result<Hash, SubmitError> {
    let schema_hash = view.role_schema(role)?;
    let mut submission = submission;
    match extract_output(store, schema_hash, &submission.raw, config)? {
        Ok(found) => {
            submission.extra.extend(found.detail);
            write_step_to(
                store,
                view,
                role,
                &found.output,
                found.body.as_deref(),
                submission,
            )
        }
        Err((error, llm)) => {
            let raw = store.put(builtin::hash_of("text"), &Value::String(submission.raw))?;
            Err(SubmitError::Extract {
                role: role.to_owned(),
                error,
                llm,
                raw,
            })
        }
    }
}

/// What extraction found in a raw output.
#[derive(Debug, Clone)]
pub(crate) struct Extracted {
    pub output: Value,
    pub body: Option<String>,
    /// Detail fields saying how (`extractedBy`, and the LLM call's `extraction`).
    pub detail: Map<String, Value>,
}

/// Extracts the output of a role whose schema is `schema_hash` from `raw`: the
/// frontmatter and JSON fast paths, then, when `config` names a model for `extract`, the LLM
/// fallback. The inner `Err` is the fast paths' error and why the fallback failed, if it ran.
pub(crate) fn extract_output(
    store: &Store,
    schema_hash: Hash,
    raw: &str,
    config: &Config,
) -> Result<Result<Extracted, (ExtractError, Option<String>)>, SubmitError> {
    let schema = store.schema(schema_hash)?;
    let error = match extract(raw, &schema) {
        Ok(found) => {
            let mut detail = Map::new();
            detail.insert("extractedBy".into(), found.method.into());
            return Ok(Ok(Extracted {
                output: found.output,
                body: found.body,
                detail,
            }));
        }
        Err(error) => error,
    };
    if config.model_for("extract").is_none() || matches!(error, ExtractError::Empty) {
        return Ok(Err((error, None)));
    }
    let attempt = Endpoint::for_purpose(config, "extract", None)
        .map_err(|e| e.to_string())
        .and_then(|endpoint| {
            let client = Client::new(endpoint);
            extract_with_llm(&client, &schema, raw, &error)
                .map(|found| (found, client.endpoint().alias.clone()))
                .map_err(|e| e.to_string())
        });
    Ok(match attempt {
        Ok((found, model)) => {
            let mut detail = Map::new();
            detail.insert("extractedBy".into(), "llm".into());
            detail.insert(
                "extraction".into(),
                json!({
                    "model": model,
                    "calls": found.calls,
                    "usage": found.usage,
                    "fastPathError": error.to_string(),
                }),
            );
            Ok(Extracted {
                output: found.extracted.output,
                body: found.extracted.body,
                detail,
            })
        }
        Err(e) => Err((error, Some(e))),
    })
}

/// Writes a step whose structured output is already known.
pub(crate) fn write_step(
    store: &Store,
    view: &ThreadView,
    role: &str,
    output: &Value,
    body: Option<&str>,
    submission: Submission,
) -> Result<Hash, SubmitError> {
    write_step_to(store, &view.target(), role, output, body, submission)
}

/// [`write_step`] for a [`StepTarget`].
pub(crate) fn write_step_to(
    store: &Store,
    view: &StepTarget<'_>,
    role: &str,
    output: &Value,
    body: Option<&str>,
    submission: Submission,
) -> Result<Hash, SubmitError> {
    let schema_hash = view.role_schema(role)?;
    let text = builtin::hash_of("text");
    // Each node's hash is known before it is written (it names its content), so the step's
    // nodes go to the store in one `put_all`, their disk writes overlapping.
    let raw = Value::String(submission.raw);
    let raw_hash = node_hash(text, &raw);
    let body = body.map(|b| Value::String(b.to_owned()));
    let body_hash = body.as_ref().map(|b| node_hash(text, b));
    let output_hash = node_hash(schema_hash, output);
    let mut detail = submission.extra;
    detail.insert("raw".into(), raw_hash.to_string().into());
    detail.insert(
        "body".into(),
        body_hash
            .map(|b| Value::String(b.to_string()))
            .unwrap_or(Value::Null),
    );
    detail.insert(
        "exitCode".into(),
        submission.exit_code.map(Value::from).unwrap_or(Value::Null),
    );
    detail.insert("durationMs".into(), submission.duration_ms.into());
    detail.insert("stderrTail".into(), submission.stderr_tail.into());
    let detail = Value::Object(detail);
    let detail_type = builtin::hash_of("detail");
    let detail_hash = node_hash(detail_type, &detail);
    let prev = (view.head != view.start_hash).then_some(view.head);
    let step = json!({
        "start": view.start_hash.to_string(),
        "prev": prev.map(|p| p.to_string()),
        "role": role,
        "output": output_hash.to_string(),
        "detail": detail_hash.to_string(),
        "agent": submission.agent,
    });
    let mut nodes = vec![(text, &raw)];
    if let Some(body) = &body {
        nodes.push((text, body));
    }
    let output_at = nodes.len();
    nodes.push((schema_hash, output));
    nodes.push((detail_type, &detail));
    nodes.push((builtin::hash_of("step"), &step));
    let hashes = store.put_all(&nodes).map_err(|(at, e)| match e {
        StoreError::InvalidPayload { violations, .. } if at == output_at => {
            SubmitError::InvalidOutput {
                role: role.to_owned(),
                schema: schema_hash,
                violations: violations
                    .iter()
                    .map(|v| format!("  - {v}"))
                    .collect::<Vec<_>>()
                    .join("\n"),
            }
        }
        other => other.into(),
    })?;
    Ok(*hashes.last().expect("a hash per node"))
}

/// Milliseconds since the step of `thread` began: from `UWF_STEP_STARTED_MS` when the step set
/// it for this very thread (an agent it spawned), else since `local` (an agent run by hand, or a
/// built-in run inside the step), else 0. With `UWF_REPRODUCIBLE=1` always 0, so that runs with
/// canned agents write byte-identical nodes (tests, demos).
pub(crate) fn step_duration_ms(local: Option<std::time::Instant>, thread: &str) -> u64 {
    if std::env::var_os("UWF_REPRODUCIBLE").is_some_and(|v| v == "1") {
        return 0;
    }
    let ours = std::env::var("UWF_THREAD").is_ok_and(|t| t == thread);
    let started = std::env::var("UWF_STEP_STARTED_MS")
        .ok()
        .filter(|_| ours)
        .and_then(|s| s.parse::<u64>().ok());
    match (started, local) {
        (Some(start), _) => crate::cas::store::now_ms().saturating_sub(start),
        (None, Some(local)) => local.elapsed().as_millis() as u64,
        (None, None) => 0,
    }
}

/// Reads extra detail fields from a JSON file for `agent submit --detail-json`.
pub(crate) fn detail_from_json(text: &str) -> Result<Map<String, Value>, SubmitError> {
    match serde_json::from_str(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(SubmitError::Detail(
            "found a JSON value that is not an object".into(),
        )),
        Err(e) => Err(SubmitError::Detail(e.to_string())),
    }
}
