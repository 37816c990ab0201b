//! The LLM built-in agents (`docs/LLM.md#the-llm-agent`): `llm`, one chat completion through
//! extraction, and `react`, a tool-calling loop over the working directory that ends when the model
//! calls `resolve` with the role's output.
//!
//! Both write one step for the thread's current head and return its hash, like every agent.
//! `react` records every turn (the assistant's text, its tool calls with their arguments, the
//! tools' results, cut short) in the detail node; when the loop fails, the turns so far are kept
//! as a text node named in the error, so no work is lost silently.

use crate::advice::Advice;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use crate::cas::schema::CompiledSchema;
use crate::cas::{Hash, Store, builtin};
use crate::engine::thread::cost::Tokens;
use crate::engine::thread::view::ThreadView;

use crate::engine::agent::knowledge_tool::KnowledgeTool;
use crate::engine::agent::prompt::PromptParts;
use crate::engine::agent::submit::{self, Submission, SubmitError};
use crate::engine::agent::workdir::{ToolError, Workdir};
use crate::engine::chain::Entry;
use crate::engine::config::Config;
use crate::engine::llm::client::{
    self, ChatRequest, ChatResponse, Client, Endpoint, LlmError, Message,
};

/// The default number of rounds of `react`.
pub(crate) const DEFAULT_MAX_ROUNDS: usize = 20;
/// The default time one `run_command` may take.
pub(crate) const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// How much of a tool result goes back to the model.
const RESULT_TO_MODEL: usize = 16_000;
/// How much of a tool result (or an assistant's text) the detail node keeps.
const RESULT_IN_DETAIL: usize = 2_000;

/// The message that answers a reply without a tool call.
pub(crate) const CORRECTION: &str = "Call a tool, or call `resolve` with your output when your part is \
done. A reply without a tool call is not accepted.";

/// Errors of the LLM agents.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LlmAgentError {
    #[error(transparent)]
    View(#[from] crate::engine::thread::view::ViewError),
    #[error(transparent)]
    Submit(#[from] SubmitError),
    #[error(transparent)]
    Llm(#[from] LlmError),
    #[error("cannot use the working directory {path}: {source}")]
    Workdir {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "react: no `resolve` after {rounds} rounds; the turns are kept as text node {transcript}: `uwf cas get {transcript} --payload`"
    )]
    MaxRounds { rounds: usize, transcript: Hash },
    #[error(
        "react stopped in round {round}: {error}\nthe turns so far are kept as text node {transcript}"
    )]
    Interrupted {
        round: usize,
        error: LlmError,
        transcript: Hash,
    },
}

impl Advice for LlmAgentError {
    fn hints(&self) -> Vec<String> {
        match self {
            LlmAgentError::View(e) => e.hints(),
            LlmAgentError::Submit(e) => e.hints(),
            LlmAgentError::Llm(e) => e.hints(),
            LlmAgentError::MaxRounds { .. } => vec!["raise --max-rounds (or react.maxRounds in config.yaml), or make the role's task smaller".to_owned()],
            _ => Vec::new(),
        }
    }
    fn is_busy(&self) -> bool {
        match self {
            LlmAgentError::View(e) => e.is_busy(),
            LlmAgentError::Submit(e) => e.is_busy(),
            LlmAgentError::Llm(e) => e.is_busy(),
            _ => false,
        }
    }
}

fn prompt(
    store: &Store,
    view: &ThreadView,
    role: &str,
) -> Result<(PromptParts, Hash), SubmitError> {
    let schema_hash = view.role_schema(role)?;
    let schema = store.get_payload(schema_hash)?;
    let body_of = |e: &Entry| crate::engine::thread::render::stored_body(store, e.detail);
    let parts = crate::engine::agent::prompt::prompt_parts(
        &view.id,
        &view.workflow,
        role,
        &schema,
        &view.chain,
        None,
        &body_of,
    )?;
    Ok((parts, schema_hash))
}

/// The detail fields every LLM agent records about its model.
fn model_detail(endpoint: &Endpoint, extra: &mut Map<String, Value>) {
    extra.insert("model".into(), endpoint.alias.clone().into());
    extra.insert("modelName".into(), endpoint.model.clone().into());
    extra.insert("provider".into(), endpoint.provider.clone().into());
}

/// `uwf agent llm [--model M]`: one completion (system: the output format and the role; user:
/// the task and the history) through extraction.
pub(crate) fn llm(
    store: &Store,
    config: &Config,
    thread: &str,
    role: &str,
    model: Option<&str>,
) -> Result<Hash, LlmAgentError> {
    let t = Instant::now();
    let view = ThreadView::load(store, thread)?;
    let (parts, _) = prompt(store, &view, role)?;
    let client = Client::new(Endpoint::for_purpose(config, "llm", model)?);
    // Tokens go to stderr as they arrive: the step appends them to the thread's log, where
    // `uwf thread live` and the mount's `log` show them while the completion runs.
    let mut stderr = std::io::stderr();
    let mut show = |piece: &str| {
        let _ = stderr.write_all(piece.as_bytes());
        let _ = stderr.flush();
    };
    let response = client.chat_stream(
        &ChatRequest {
            messages: vec![
                Message::system(format!("{}{}", parts.format, parts.role)),
                Message::user(parts.task),
            ],
            ..Default::default()
        },
        &mut show,
    )?;
    if response
        .message
        .content
        .as_deref()
        .is_some_and(|t| !t.is_empty())
    {
        let _ = writeln!(stderr);
    }
    let mut submission = Submission {
        agent: "llm".into(),
        raw: response.message.content.clone().unwrap_or_default(),
        exit_code: Some(0),
        ..Default::default()
    };
    model_detail(client.endpoint(), &mut submission.extra);
    let usage = response.usage.clone().unwrap_or(Value::Null);
    if let Some(tokens) = Tokens::from_usage(&usage, Some(&client.endpoint().model)) {
        submission.extra.insert("tokens".into(), tokens.to_json());
    }
    submission.extra.insert("usage".into(), usage);
    submission.extra.insert(
        "finishReason".into(),
        response
            .finish_reason
            .clone()
            .map(Value::from)
            .unwrap_or(Value::Null),
    );
    submission
        .extra
        .insert("attempts".into(), response.attempts.into());
    submission.duration_ms = submit::step_duration_ms(Some(t), thread);
    Ok(submit::submit_raw(store, &view, role, submission, config)?)
}

/// Options of `react`.
#[derive(Debug, Clone, Default)]
pub(crate) struct ReactOptions<'a> {
    pub model: Option<&'a str>,
    pub max_rounds: Option<usize>,
}

/// `text` on one line, cut to `max` characters.
fn one_line(text: &str, max: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > max {
        format!("{}…", flat.chars().take(max).collect::<String>())
    } else {
        flat
    }
}

/// The `resolve` tool: its parameters are the role's schema, wrapped in `{output}` when the
/// schema is not an object schema (function parameters must be one).
struct Resolve {
    schema: Arc<CompiledSchema>,
    wrapped: bool,
}

impl Resolve {
    fn parameters(&self) -> Value {
        if self.wrapped {
            json!({
                "type": "object",
                "properties": {"output": self.schema.schema()},
                "required": ["output"],
            })
        } else {
            self.schema.schema().clone()
        }
    }

    /// The output in a call's arguments, or what is wrong with them.
    fn output(&self, arguments: &Value) -> Result<Value, String> {
        let output = if self.wrapped {
            arguments.get("output").cloned().unwrap_or(Value::Null)
        } else {
            arguments.clone()
        };
        self.schema.validate(&output).map_err(|violations| {
            format!(
                "error: the output does not match the role's schema:{}\nCall `resolve` again with a corrected output.",
                violations
                    .iter()
                    .map(|v| format!("\n  - {v}"))
                    .collect::<String>()
            )
        })?;
        Ok(output)
    }
}

fn tools(resolve: &Resolve, run_command: bool, knowledge: bool) -> Vec<Value> {
    let path_only = |what: &str| json!({"type": "object", "properties": {"path": {"type": "string", "description": what}}, "required": ["path"]});
    let mut tools = vec![
        client::function_tool(
            "read_file",
            "Read a text file of the working directory.",
            &path_only("File path, relative to the working directory"),
        ),
        client::function_tool(
            "write_file",
            "Create or replace a file (and its directories) with the given content.",
            &json!({"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}, "required": ["path", "content"]}),
        ),
        client::function_tool(
            "edit_file",
            "Replace the one occurrence of `old` in a file with `new` (fails when `old` occurs zero or several times).",
            &json!({"type": "object", "properties": {"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}}, "required": ["path", "old", "new"]}),
        ),
        client::function_tool(
            "list_dir",
            "List a directory: directories end with `/`, symlinks with `@`.",
            &path_only("Directory path, relative to the working directory (`.` for itself)"),
        ),
        client::function_tool(
            "grep",
            "Search the files under a path for lines matching a regular expression (Rust regex syntax); prints `file:line: text`.",
            &json!({"type": "object", "properties": {"pattern": {"type": "string"}, "path": {"type": "string", "description": "File or directory; default `.`"}}, "required": ["pattern"]}),
        ),
    ];
    if knowledge {
        tools.push(KnowledgeTool::definition());
    }
    if run_command {
        tools.push(client::function_tool(
            "run_command",
            "Run a shell command (`sh -c`) in the working directory; returns its exit code, stdout and stderr.",
            &json!({"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}),
        ));
    }
    tools.push(client::function_tool(
        "resolve",
        "Finish your part: call this once with your structured output (the role's output fields). It ends your turn.",
        &resolve.parameters(),
    ));
    tools
}

fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        format!(
            "{}\n[… cut: {} characters in all]",
            text.chars().take(max).collect::<String>(),
            text.chars().count()
        )
    }
}

/// Runs one non-`resolve` tool; errors become text for the model.
fn run_tool(
    workdir: &Workdir,
    name: &str,
    args: &Value,
    command_timeout: Option<Duration>,
    knowledge: Option<&KnowledgeTool>,
) -> (bool, String) {
    let arg = |key: &str| -> Result<&str, ToolError> {
        args.get(key)
            .and_then(Value::as_str)
            .ok_or_else(|| ToolError::Invalid(format!("missing string argument `{key}`")))
    };
    let result = match name {
        "read_file" => arg("path").and_then(|p| workdir.read_file(p)),
        "write_file" => arg("path")
            .and_then(|p| Ok((p, arg("content")?)))
            .and_then(|(p, c)| workdir.write_file(p, c)),
        "edit_file" => arg("path")
            .and_then(|p| Ok((p, arg("old")?, arg("new")?)))
            .and_then(|(p, o, n)| workdir.edit_file(p, o, n)),
        "list_dir" => workdir.list_dir(args.get("path").and_then(Value::as_str).unwrap_or(".")),
        "grep" => arg("pattern").and_then(|pat| {
            workdir.grep(pat, args.get("path").and_then(Value::as_str).unwrap_or("."))
        }),
        "knowledge" => match knowledge {
            Some(tool) => tool.call(args),
            None => Err(ToolError::Invalid(
                "knowledge is not available: the working directory's repository is not indexed (uwf knowledge sync)".into(),
            )),
        },
        "run_command" => match command_timeout {
            Some(timeout) => arg("command").and_then(|c| workdir.run_command(c, timeout)),
            None => Err(ToolError::Invalid(
                "run_command is not enabled (react.runCommand in config.yaml)".into(),
            )),
        },
        other => Err(ToolError::Invalid(format!(
            "no tool `{other}`; the tools are read_file, write_file, edit_file, list_dir, grep{}{} and resolve",
            if knowledge.is_some() { ", knowledge" } else { "" },
            if command_timeout.is_some() {
                ", run_command"
            } else {
                ""
            }
        ))),
    };
    match result {
        Ok(text) => (true, text),
        Err(e) => (false, format!("error: {e}")),
    }
}

/// Adds a response's token counts to the running totals: the provider's own `usage` keys and
/// the step's `tokens`.
fn add_usage(total: &mut Map<String, Value>, tokens: &mut Option<Tokens>, response: &ChatResponse) {
    let Some(Value::Object(usage)) = &response.usage else {
        return;
    };
    if let Some(more) = response
        .usage
        .as_ref()
        .and_then(|u| Tokens::from_usage(u, None))
    {
        *tokens.get_or_insert_with(Tokens::default) += &more;
    }
    for key in ["prompt_tokens", "completion_tokens", "total_tokens"] {
        if let Some(n) = usage.get(key).and_then(Value::as_u64) {
            let sum = total.get(key).and_then(Value::as_u64).unwrap_or(0) + n;
            total.insert(key.into(), sum.into());
        }
    }
}

/// `uwf agent react [--model M] [--max-rounds N]`: the tool loop in `workdir`.
pub(crate) fn react(
    store: &Store,
    config: &Config,
    thread: &str,
    role: &str,
    workdir: &Path,
    options: &ReactOptions,
) -> Result<Hash, LlmAgentError> {
    let t = Instant::now();
    let workdir = Workdir::new(workdir).map_err(|source| LlmAgentError::Workdir {
        path: workdir.display().to_string(),
        source,
    })?;
    let view = ThreadView::load(store, thread)?;
    let (parts, schema_hash) = prompt(store, &view, role)?;
    let schema = store.schema(schema_hash).map_err(SubmitError::from)?;
    let resolve = Resolve {
        wrapped: schema.schema().get("type").and_then(Value::as_str) != Some("object"),
        schema,
    };
    let command_timeout = config.react.run_command.then(|| {
        config
            .react
            .command_timeout
            .map(Duration::from_secs)
            .unwrap_or(DEFAULT_COMMAND_TIMEOUT)
    });
    let max_rounds = options
        .max_rounds
        .or(config.react.max_rounds)
        .unwrap_or(DEFAULT_MAX_ROUNDS)
        .max(1);
    let client = Client::new(Endpoint::for_purpose(config, "react", options.model)?);
    let knowledge = KnowledgeTool::for_workdir(store.root(), workdir.root(), config);
    let tools = tools(&resolve, command_timeout.is_some(), knowledge.is_some());
    let schema_text = serde_json::to_string_pretty(&resolve.parameters()).unwrap_or_default();
    let intro = format!(
        "## How to work\n\n\
You work through tools on the files of the working directory; paths are relative to it and \
cannot leave it. When your part is done, call `resolve` once with your structured output: its \
parameters are the output's fields, which must validate against this JSON Schema:\n\n\
```json\n{schema_text}\n```\n\n\
Calling `resolve` ends your turn. A reply without a tool call is not accepted.\n"
    );
    let mut messages = vec![
        Message::system(format!("{intro}{}", parts.role)),
        Message::user(parts.task),
    ];
    let mut turns: Vec<Value> = Vec::new();
    let mut usage = Map::new();
    let mut tokens: Option<Tokens> = None;
    let keep = |turns: &[Value]| -> Result<Hash, SubmitError> {
        let text = serde_json::to_string_pretty(turns).unwrap_or_default();
        Ok(store.put(builtin::hash_of("text"), &Value::String(text))?)
    };
    for round in 1..=max_rounds {
        let response = match client.chat(&ChatRequest {
            messages: messages.clone(),
            tools: tools.clone(),
            json_mode: false,
        }) {
            Ok(r) => r,
            Err(error) => {
                return Err(LlmAgentError::Interrupted {
                    round,
                    error,
                    transcript: keep(&turns)?,
                });
            }
        };
        add_usage(&mut usage, &mut tokens, &response);
        let content = response.message.content.clone().unwrap_or_default();
        let calls = response.message.tool_calls.clone();
        let mut echoed = response.message.clone();
        if echoed.tool_calls.is_empty() && echoed.content.is_none() {
            // Providers refuse an assistant message with neither content nor tool calls.
            echoed.content = Some(String::new());
        }
        messages.push(echoed);
        let mut turn = json!({
            "round": round,
            "assistant": cut(&content, RESULT_IN_DETAIL),
            "toolCalls": [],
        });
        if calls.is_empty() {
            messages.push(Message::user(CORRECTION));
            turn["correction"] = CORRECTION.into();
            turns.push(turn);
            continue;
        }
        let mut resolved = None;
        let mut recorded = Vec::new();
        for call in &calls {
            let parsed: Result<Value, String> = serde_json::from_str(&call.function.arguments)
                .map_err(|e| format!("error: the arguments are not valid JSON: {e}"));
            let (ok, result) = match (&parsed, call.function.name.as_str()) {
                (Err(e), _) => (false, e.clone()),
                (Ok(args), "resolve") => match resolve.output(args) {
                    Ok(output) => {
                        resolved = Some((output, call.function.arguments.clone()));
                        (true, "resolved".to_owned())
                    }
                    Err(e) => (false, e),
                },
                (Ok(args), name) => {
                    run_tool(&workdir, name, args, command_timeout, knowledge.as_ref())
                }
            };
            // One line per tool call on stderr, which the step appends to the thread's log:
            // what `uwf thread live` and the mount's `log` show while the agent works.
            eprintln!(
                "react: {} {} → {}{}",
                call.function.name,
                one_line(&call.function.arguments, 80),
                if ok { "" } else { "error: " },
                one_line(&result, 100)
            );
            recorded.push(json!({
                "id": call.id,
                "name": call.function.name,
                "arguments": parsed.clone().unwrap_or_else(|_| Value::String(cut(&call.function.arguments, RESULT_IN_DETAIL))),
                "ok": ok,
                "result": cut(&result, RESULT_IN_DETAIL),
            }));
            if resolved.is_some() {
                break;
            }
            messages.push(Message::tool(&call.id, cut(&result, RESULT_TO_MODEL)));
        }
        turn["toolCalls"] = Value::Array(recorded);
        turns.push(turn);
        if let Some((output, raw)) = resolved {
            let mut submission = Submission {
                agent: "react".into(),
                raw,
                exit_code: Some(0),
                ..Default::default()
            };
            model_detail(client.endpoint(), &mut submission.extra);
            let extra = &mut submission.extra;
            extra.insert("extractedBy".into(), "resolve".into());
            extra.insert("rounds".into(), round.into());
            extra.insert("usage".into(), Value::Object(usage));
            if let Some(mut tokens) = tokens {
                tokens.model = Some(client.endpoint().model.clone());
                extra.insert("tokens".into(), tokens.to_json());
            }
            extra.insert(
                "workdir".into(),
                workdir.root().display().to_string().into(),
            );
            extra.insert("turns".into(), Value::Array(turns));
            submission.duration_ms = submit::step_duration_ms(Some(t), thread);
            let body = (!content.trim().is_empty()).then_some(content.as_str());
            return Ok(submit::write_step(
                store, &view, role, &output, body, submission,
            )?);
        }
    }
    Err(LlmAgentError::MaxRounds {
        rounds: max_rounds,
        transcript: keep(&turns)?,
    })
}
