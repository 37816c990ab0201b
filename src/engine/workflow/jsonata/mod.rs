//! The JSONata engine behind one small API: compile an expression once, evaluate it many times,
//! under limits, with errors that carry JSONata's error codes.
//!
//! This folder is the only code that names `jsonata_core` (this file: the API; `worker.rs`: the
//! evaluation thread; `convert.rs`: values in and out); swapping the engine means rewriting it
//! and rerunning `tests/jsonata_conformance.rs`, nothing else.
//!
//! Architecture Invariant: no expression, however hostile, keeps the caller waiting much past its
//! time limit, and none crashes the process through a panic or a native stack overflow.
//! Concretely:
//!
//! - Compilation runs under [`std::panic::catch_unwind`], on at least 1 MiB of stack (moving to a
//!   heap-allocated segment when the caller's thread has less left), and so does dropping a tree
//!   parsed from more than [`SHALLOW_SOURCE`] characters (a shorter text cannot nest deeply
//!   enough to need it). jsonata-core's parser rejects nesting deeper than 1000 levels with
//!   `U1002` and grows its own stack before that, so deep brackets fail cleanly on any thread.
//! - Evaluation runs on a worker thread owned by [`Input`], under `catch_unwind`, with
//!   jsonata-core's own time (`D1012`), depth (`D1011`) and sequence-length (`D2015`) limits. The
//!   engine checks its clock only between expression nodes and loop iterations, so one slow
//!   built-in call (`$string` of a huge shared structure, `$pad("x", 1e9)`) can overrun it. The
//!   caller therefore waits at most `timeout` + [`WATCHDOG_GRACE`]; past that it returns
//!   [`JsonataError::Timeout`], cancels the evaluation (the engine stops at its next check) and
//!   abandons that worker; the next evaluation starts a fresh one.
//! - Converting input never recurses on the native stack without
//!   `jsonata_core::value::with_stack`, and results nested deeper than [`MAX_RESULT_DEPTH`] are
//!   refused, because the caller's `serde_json::Value` drops recursively.
//!
//! - Memory: the worker counts what an evaluation allocates ([`memory`], the process's global
//!   allocator) and cancels it past [`Limits::max_memory`] ([`JsonataError::MemoryLimit`]).
//!   Before the engine builds a large value in one go (a concatenation, `$pad`, `$join`,
//!   `$string`, `$replace`'s growing result, an array flattened in, a result string converted
//!   here), it asks the same budget through our patch of jsonata-core (`budget::set_hook`), and
//!   a value that would not fit is never made: peak RSS stays within the limit plus a few MB
//!   (`tests/integrity.rs`, `jsonata_string_growth_is_bounded_in_memory`: under 300 MB at the
//!   default 256 MiB).
//!
//! What is *not* bounded is one huge allocation inside a built-in call the patch does not ask
//! about (object and array built-ins grow item by item, under the count), nor the CPU an
//! abandoned worker spends finishing its built-in call. `$string` of an object that holds the previous one twice, nested 28 times, returns
//! `Timeout` to the caller after 1.25 s, while the abandoned worker goes on printing 2^28 leaves
//! for a minute and peaks at 2.5 GB; nested 32 times it would exhaust memory. jsonata-js has the
//! same gap. Only a separate process with a memory limit closes it.
//!
//! Values cross this boundary as `serde_json::Value`. `None` stands for JSONata's `undefined`.
//! Functions and regexes have no JSON form; they are converted as JavaScript's `JSON.stringify`
//! converts them (left out of objects, `null` in arrays, `undefined` at the top).

mod calls;
mod convert;
mod memory;
mod worker;

pub(crate) use calls::UnknownCall;

use crate::advice::Advice;
use convert::*;
use worker::*;

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::time::{Duration, Instant};

use indexmap::IndexMap;
use jsonata_core::ast::AstNode;
use jsonata_core::evaluator::{
    CancelToken, Context, Evaluator, EvaluatorError, EvaluatorOptions, error_code_prefix,
};
use jsonata_core::parser::{self, ParserError};
use jsonata_core::value::{JArray, JValue, with_stack};
use serde_json::Value;

/// How long the caller waits past [`Limits::timeout`] before it gives up on an evaluation that is
/// stuck inside one built-in call.
///
/// The engine's own clock normally ends a runaway evaluation right at the limit; the grace only
/// has to cover a last built-in call and the conversion of the result.
pub(crate) const WATCHDOG_GRACE: Duration = Duration::from_millis(250);

/// Results with more nested arrays and objects than this are refused
/// ([`JsonataError::ResultTooDeep`]).
///
/// It is the most serde_json reads back, and little enough to drop (recursively) on a 128 KiB
/// stack. Only an expression that builds deep values on purpose (`$reduce` wrapping an object
/// around itself) gets here.
pub(crate) const MAX_RESULT_DEPTH: usize = 127;

/// Stack that [`compile`] makes sure is left before it parses, and the size of the segment it
/// moves to when there is less.
const COMPILE_RED_ZONE: usize = 1024 * 1024;
const COMPILE_STACK: usize = 4 * 1024 * 1024;

/// Expressions at most this long are dropped without checking the stack first: every level of
/// nesting takes at least one character, so their trees are at most this deep, which a few dozen
/// KiB of stack hold. (The check costs the main thread a read of `/proc/self/maps` the first
/// time, about 0.1 ms, which a one-shot `thread step` would otherwise pay.)
const SHALLOW_SOURCE: usize = 256;

/// Stack size of evaluation worker threads. jsonata-core grows its stack onto the heap when it
/// runs low, so this only sets how much of the recursion stays on the native stack.
const WORKER_STACK: usize = 8 * 1024 * 1024;

/// Bounds for one evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock time for one evaluation (JSONata `D1012` when exceeded).
    pub timeout: Duration,
    /// Maximum evaluation depth, counted like jsonata-js's `stack` option: every nested
    /// expression is a level, a non-tail recursive call costs about three (`D1011`).
    pub max_depth: usize,
    /// Maximum length of a sequence the evaluation builds (ranges, mapped paths, …) (`D2015`),
    /// and the most values the result may hold in all, counting every array item and object
    /// member at any depth.
    pub max_sequence_length: usize,
    /// The most memory one evaluation may hold, in bytes ([`JsonataError::MemoryLimit`]).
    pub max_memory: usize,
}

/// The memory limit of an evaluation unless told otherwise: [`MAX_MEMORY_ENV`] if set, else
/// 256 MiB.
pub(crate) fn default_max_memory() -> usize {
    std::env::var(MAX_MEMORY_ENV)
        .ok()
        .and_then(|v| parse_size(&v))
        .unwrap_or(DEFAULT_MAX_MEMORY)
}

/// 256 MiB: routing conditions use kilobytes.
pub(crate) const DEFAULT_MAX_MEMORY: usize = 256 << 20;

/// The environment variable that sets the memory limit of every evaluation (the moderator's
/// too), e.g. `UWF_JSONATA_MAX_MEMORY=1GiB`.
pub(crate) const MAX_MEMORY_ENV: &str = "UWF_JSONATA_MAX_MEMORY";

pub(crate) use crate::byte_size::{parse_size, show_size};

impl Default for Limits {
    /// One second, depth 200, a million items. Ample for routing conditions: measured over a
    /// 1000-step context they evaluate in microseconds and need at most 7 levels, however many
    /// steps there are.
    fn default() -> Self {
        Limits {
            timeout: Duration::from_secs(1),
            max_depth: 200,
            max_sequence_length: 1_000_000,
            max_memory: default_max_memory(),
        }
    }
}

/// What the engine was doing when it panicked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Compile,
    Evaluate,
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Phase::Compile => "compiling",
            Phase::Evaluate => "evaluating",
        })
    }
}

/// Why an expression could not be compiled or evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonataError {
    /// The text is not a valid expression (JSONata `S0xxx` codes, `U1002` for nesting).
    #[error("{}", coded(code.as_deref(), message))]
    Compile {
        code: Option<String>,
        message: String,
        /// Character offset of the offending token. jsonata-core 2.2.13 reports none.
        position: Option<usize>,
    },
    /// The expression failed against this input (`T`, `D` codes).
    #[error("{}", coded(code.as_deref(), message))]
    Evaluate {
        code: Option<String>,
        message: String,
    },
    /// The evaluation ran longer than [`Limits::timeout`].
    #[error(
        "D1012: Evaluation timeout after {} milliseconds. Check for infinite loop",
        limit.as_millis()
    )]
    Timeout { limit: Duration },
    /// The evaluation nested deeper than [`Limits::max_depth`].
    #[error(
        "D1011: Stack overflow (deeper than {limit} levels). Check for non-terminating recursive function. Consider rewriting as tail-recursive"
    )]
    DepthExceeded { limit: usize },
    /// The evaluation held more than [`Limits::max_memory`] and was stopped.
    #[error(
        "the evaluation needed more than {} of memory (its limit); raise it with --max-memory (uwf eval, uwf thread eval) or {MAX_MEMORY_ENV}=SIZE (every evaluation, the moderator's too)",
        show_size(*limit)
    )]
    MemoryLimit { limit: usize },
    /// The result nests deeper than [`MAX_RESULT_DEPTH`] and is not handed out.
    #[error("the result nests deeper than {limit} levels")]
    ResultTooDeep { limit: usize },
    /// The result holds more than [`Limits::max_sequence_length`] values in all.
    #[error("the result holds more than {limit} values")]
    ResultTooLarge { limit: usize },
    /// The engine panicked; the panic was caught and nothing else is affected.
    #[error("JSONata engine panicked while {phase}: {message}")]
    Panicked { phase: Phase, message: String },
    /// The evaluation thread could not be started.
    #[error("cannot start a JSONata evaluation thread: {message}")]
    Worker { message: String },
}

impl Advice for JsonataError {}

impl JsonataError {
    /// The JSONata error code (`T2006`, `S0201`, `D1012`, …), when there is one.
    pub fn code(&self) -> Option<&str> {
        match self {
            JsonataError::Compile { code, .. } | JsonataError::Evaluate { code, .. } => {
                code.as_deref()
            }
            JsonataError::Timeout { .. } => Some("D1012"),
            JsonataError::DepthExceeded { .. } => Some("D1011"),
            JsonataError::ResultTooDeep { .. }
            | JsonataError::MemoryLimit { .. }
            | JsonataError::ResultTooLarge { .. }
            | JsonataError::Panicked { .. }
            | JsonataError::Worker { .. } => None,
        }
    }

    /// The message without its code.
    #[cfg(test)]
    pub(crate) fn message(&self) -> String {
        match self {
            JsonataError::Compile { message, .. } | JsonataError::Evaluate { message, .. } => {
                message.clone()
            }
            other => {
                let text = other.to_string();
                match split_code(&text) {
                    Some((_, rest)) => rest.to_string(),
                    None => text,
                }
            }
        }
    }

    fn from_parser(error: &ParserError) -> Self {
        if let ParserError::UnclosedComment = error {
            // jsonata-core has no code for this one; S0106 is jsonata-js's.
            return JsonataError::Compile {
                code: Some("S0106".to_string()),
                message: "Comment has no closing tag".to_string(),
                position: None,
            };
        }
        let text = error.to_string();
        let (code, message) = match split_code(&text) {
            Some((code, rest)) => (Some(code.to_string()), rest.to_string()),
            None => (None, text.clone()),
        };
        JsonataError::Compile {
            code,
            message,
            position: None,
        }
    }

    fn from_evaluator(error: &EvaluatorError, limits: &Limits) -> Self {
        let text = error.message();
        match split_code(text) {
            Some(("D1012" | "U1003", _)) => JsonataError::Timeout {
                limit: limits.timeout,
            },
            Some(("D1011", _)) => JsonataError::DepthExceeded {
                limit: limits.max_depth,
            },
            Some((code, message)) => JsonataError::Evaluate {
                code: Some(code.to_string()),
                message: message.to_string(),
            },
            None => JsonataError::Evaluate {
                code: None,
                message: text.to_string(),
            },
        }
    }
}

/// `CODE: message`, or the bare message when there is no code.
fn coded(code: Option<&str>, message: &str) -> String {
    match code {
        Some(code) => format!("{code}: {message}"),
        None => message.to_string(),
    }
}

/// Finds a JSONata code (`S0201:`) at the start of `text` or right after a `": "` prefix such as
/// jsonata-core's `Invalid syntax: S0209: …`, and splits it from the rest of the message.
fn split_code(text: &str) -> Option<(&str, &str)> {
    let starts = std::iter::once(0).chain(text.match_indices(": ").map(|(i, _)| i + 2));
    for start in starts {
        if let Some(code) = error_code_prefix(&text[start..]) {
            return Some((code, text[start + code.len() + 1..].trim_start()));
        }
    }
    None
}

/// A compiled expression.
///
/// Cheap to clone, `Send` and `Sync`: it holds the parsed syntax tree behind an `Arc`. (The
/// engine's own compiled form, `jsonata_core::Expression`, is neither.)
#[derive(Clone)]
pub struct Expr {
    source: Arc<str>,
    ast: Arc<Ast>,
}

/// A parsed tree, dropped with the same stack guarantee as it was parsed with: jsonata-core's
/// drop glue recurses once per nesting level, which for 1000 levels is more than a small thread
/// has. `deep` is false for a tree parsed from at most [`SHALLOW_SOURCE`] characters.
struct Ast {
    node: AstNode,
    deep: bool,
}

impl Drop for Ast {
    fn drop(&mut self) {
        let node = std::mem::replace(&mut self.node, AstNode::Null);
        if self.deep {
            stacker::maybe_grow(COMPILE_RED_ZONE, COMPILE_STACK, move || drop(node));
        }
    }
}

impl std::fmt::Debug for Expr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Expr").field(&self.source).finish()
    }
}

/// Starts, in the background, the engine's first-use costs that the first evaluation would
/// otherwise pay for on the step's critical path: the engine's code paged in, the regex
/// engine's set-up, and the signature of `$count` (jsonata-core compiles each built-in's
/// signature into a regex on its first call; our patched copy in `vendor/jsonata-core` does it
/// per built-in instead of all 61 at once, which took about 2 ms of CPU per process). Measured
/// on a one-shot `thread step`: 0.1 ms less wall time with it than without. Call it early in a
/// short-lived process that will evaluate conditions, so the work overlaps with reading the
/// store. The thread that does it is an evaluation worker: once warm it waits as the process's
/// spare, and the next [`Input`] to need a worker adopts it instead of starting a thread (an
/// input needed before that gets its own worker rather than waiting: in a one-shot step the
/// warm-up usually ends just after the step's context is made).
/// Only the first call does anything.
pub(crate) fn prewarm() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| Worker::spawn_spare(warm));
}

/// The warm-up itself, on the spare worker.
fn warm() {
    if let Ok(expr) = compile("$count([])") {
        let (reply, _) = mpsc::sync_channel(1);
        let job = Job {
            ast: expr.ast,
            bindings: Vec::new(),
            limits: Limits::default(),
            cancel: CancelToken::new(),
            reply,
        };
        let _ = evaluate_on_worker(&JValue::Undefined, &job);
    }
}

/// Compiles `text` into an [`Expr`].
pub fn compile(text: &str) -> Result<Expr, JsonataError> {
    // The parser grows its own stack once it is deep, but needs room for its first levels: on a
    // thread with 128 KiB left, a 990-level expression overflowed before that.
    let parsed = stacker::maybe_grow(COMPILE_RED_ZONE, COMPILE_STACK, || {
        catch_unwind(|| parser::parse(text))
    });
    match parsed {
        Ok(Ok(ast)) => Ok(Expr {
            source: Arc::from(text),
            ast: Arc::new(Ast {
                node: ast,
                deep: text.len() > SHALLOW_SOURCE,
            }),
        }),
        Ok(Err(error)) => Err(JsonataError::from_parser(&error)),
        Err(payload) => Err(JsonataError::Panicked {
            phase: Phase::Compile,
            message: panic_message(payload.as_ref()),
        }),
    }
}

impl Expr {
    /// The text this expression was compiled from.
    #[cfg(test)]
    pub(crate) fn source(&self) -> &str {
        &self.source
    }

    /// Evaluates against `input` with `bindings` (`$name` variables; the name is given with or
    /// without its `$`).
    ///
    /// Converts `input` for the engine on every call; to evaluate several expressions against one
    /// input, prepare it once as an [`Input`] and use [`Expr::evaluate_prepared`].
    pub fn evaluate(
        &self,
        input: &Value,
        bindings: &[(String, Value)],
        limits: &Limits,
    ) -> Result<Option<Value>, JsonataError> {
        self.evaluate_prepared(&Input::new(input.clone()), bindings, limits)
    }

    /// Evaluates against an input prepared once with [`Input::new`].
    pub fn evaluate_prepared(
        &self,
        input: &Input,
        bindings: &[(String, Value)],
        limits: &Limits,
    ) -> Result<Option<Value>, JsonataError> {
        input.run(&self.ast, bindings, limits)
    }
}

/// An expression being compiled on an [`Input`]'s worker ([`Input::compile_later`]).
#[derive(Debug)]
pub(crate) struct Compiling {
    text: String,
    answer: Option<mpsc::Receiver<Result<Expr, JsonataError>>>,
}

impl Compiling {
    /// [`Compiling::finish_by`] with a deadline [`COMPILE_WAIT`] from now.
    #[cfg(test)]
    fn finish(self) -> Result<Expr, JsonataError> {
        self.finish_by(Instant::now() + COMPILE_WAIT)
    }

    /// Waits for the compiled expression until `deadline` at the latest (one deadline for
    /// several expressions: each is compiled here once it has passed). Compiles it on this
    /// thread if the worker could not (it failed to start, or ended), or has not answered by
    /// then: the worker works through its queue in order, so a compilation asked for after the
    /// conversion of a huge input waits for that conversion.
    pub(crate) fn finish_by(self, deadline: Instant) -> Result<Expr, JsonataError> {
        let wait = deadline.saturating_duration_since(Instant::now());
        match self
            .answer
            .and_then(|answer| answer.recv_timeout(wait).ok())
        {
            Some(compiled) => compiled,
            None => compile(&self.text),
        }
    }
}

/// How long a moderator waits for the worker's compilations before compiling on its own thread.
pub(crate) const COMPILE_WAIT: Duration = Duration::from_secs(1);

/// An input document prepared once for many evaluations.
///
/// The engine's values are reference-counted and bound to one thread, so an `Input` owns a worker
/// thread that converts the document once, on first use, and evaluates every expression handed to
/// it. `Input` itself is `Send` and `Sync`; evaluations against one `Input` run one at a time.
pub struct Input {
    data: Arc<Data>,
    /// Items added with [`Input::append`], oldest first; a fresh worker replays them.
    appended: Mutex<Vec<Arc<Appended>>>,
    worker: Mutex<Option<Worker>>,
}

/// One item added to an array member of the input document.
struct Appended {
    key: String,
    json: String,
}

impl std::fmt::Debug for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Input").finish_non_exhaustive()
    }
}

impl Input {
    /// Prepares `value` as the input (`$` and the root of every path).
    pub fn new(value: Value) -> Self {
        Input::with_data(Data::Value(value))
    }

    /// An absent input: JSONata's `undefined`, as when no input document is given.
    pub fn undefined() -> Self {
        Input::with_data(Data::Undefined)
    }

    /// Prepares a document given as JSON text. The engine reads the text directly into its own
    /// values, skipping `serde_json::Value` (cheaper for large contexts built from raw JSON).
    /// Text that is not valid JSON makes every evaluation fail with an input error.
    pub(crate) fn from_json_text(text: String) -> Self {
        Input::with_data(Data::Text(text))
    }

    fn with_data(data: Data) -> Self {
        Input {
            data: Arc::new(data),
            appended: Mutex::new(Vec::new()),
            worker: Mutex::new(None),
        }
    }

    /// Starts converting the document on the worker now and returns at once, so the conversion
    /// overlaps with whatever the caller does next (a step converts the thread's context while
    /// its agent runs).
    pub(crate) fn prepare(&self) {
        let mut slot = self.worker.lock().unwrap_or_else(PoisonError::into_inner);
        if let Ok(worker) = self.worker_in(&mut slot) {
            let _ = worker.jobs.send(Work::Convert);
        }
    }

    /// Appends `json` (one JSON value as text) to the array member `key` of the document, as if
    /// the document had been given with it. Cheaper than preparing the grown document again: the
    /// rest is not converted twice. A text that is not JSON, or a document without that array,
    /// makes later evaluations fail with an input error.
    pub(crate) fn append(&self, key: &str, json: String) {
        let item = Arc::new(Appended {
            key: key.to_owned(),
            json,
        });
        // Under the worker lock, so a worker spawned meanwhile cannot miss or repeat the item.
        let slot = self.worker.lock().unwrap_or_else(PoisonError::into_inner);
        self.appended
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::clone(&item));
        if let Some(worker) = slot.as_ref() {
            let _ = worker.jobs.send(Work::Append(item));
        }
    }

    /// Starts compiling `text` on this input's worker (started now if need be) and returns at
    /// once, unless another thread is evaluating against this input (that evaluation is waited
    /// for, as by [`Expr::evaluate_prepared`]); [`Compiling::finish_by`] gives the same [`Expr`] as
    /// [`compile`]. Two things are saved on the calling thread: the compilation itself, which
    /// overlaps with what the caller does next, and on the main thread the parser's first look
    /// at how much stack is left, which reads `/proc/self/maps` (0.1 ms of a one-shot `thread
    /// step`); a worker knows its stack without that.
    pub(crate) fn compile_later(&self, text: &str) -> Compiling {
        let mut slot = self.worker.lock().unwrap_or_else(PoisonError::into_inner);
        let answer = self.worker_in(&mut slot).ok().and_then(|worker| {
            let (reply, answer) = mpsc::sync_channel(1);
            let sent = worker.jobs.send(Work::Compile(text.to_owned(), reply));
            sent.is_ok().then_some(answer)
        });
        Compiling {
            text: text.to_owned(),
            answer,
        }
    }

    /// The worker in `slot`, spawned or adopted (with every appended item to replay) if there
    /// is none.
    fn worker_in<'a>(&self, slot: &'a mut Option<Worker>) -> Result<&'a Worker, JsonataError> {
        if slot.is_none() {
            let replay = self
                .appended
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            *slot = Some(Worker::adopt_or_spawn(Arc::clone(&self.data), replay)?);
        }
        Ok(slot.as_ref().expect("just spawned"))
    }

    /// Runs one evaluation on this input's worker, starting one if needed, and waits at most the
    /// timeout plus [`WATCHDOG_GRACE`].
    fn run(
        &self,
        ast: &Arc<Ast>,
        bindings: &[(String, Value)],
        limits: &Limits,
    ) -> Result<Option<Value>, JsonataError> {
        // Holding the lock for the whole evaluation serialises callers, so one caller's deadline
        // never includes another caller's evaluation.
        let mut slot = self.worker.lock().unwrap_or_else(PoisonError::into_inner);
        self.worker_in(&mut slot)?;
        let worker = slot.take().expect("a worker is in the slot");
        let cancel = CancelToken::new();
        let (reply, answer) = mpsc::sync_channel(1);
        let job = Job {
            ast: Arc::clone(ast),
            bindings: bindings.to_vec(),
            limits: *limits,
            cancel: cancel.clone(),
            reply,
        };
        if worker.jobs.send(Work::Evaluate(job)).is_err() {
            return Err(worker_died());
        }
        match answer.recv_timeout(limits.timeout.saturating_add(WATCHDOG_GRACE)) {
            Ok(outcome) => {
                *slot = Some(worker);
                outcome
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                // Stuck inside one built-in call. Ask the engine to stop at its next check and
                // leave the worker behind: dropping it closes its queue, so it exits after that.
                cancel.cancel();
                Err(JsonataError::Timeout {
                    limit: limits.timeout,
                })
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(worker_died()),
        }
    }
}

impl From<Value> for Input {
    fn from(value: Value) -> Self {
        Input::new(value)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use serde_json::json;

    use super::*;

    /// A moderator-style context: five steps, the last a review that did not approve.
    fn context() -> Value {
        json!({
            "start": {"workflow": "EYHPV6X8XHTCS", "prompt": "add a flag"},
            "steps": [
                {"role": "planner", "output": {"plan": ["a", "b"]}, "detail": "2DHW2FP49YVD3", "agent": "dry"},
                {"role": "coder", "output": {"diff": "+x"}, "detail": "2DHW2FP49YVD3", "agent": "dry"},
                {"role": "coder", "output": {"diff": "+y"}, "detail": "2DHW2FP49YVD3", "agent": "dry"},
                {"role": "coder", "output": {"diff": "+z"}, "detail": "2DHW2FP49YVD3", "agent": "dry"},
                {"role": "reviewer", "output": {
                    "approved": false,
                    "verdict": "Approve once the nits are fixed",
                    "issues": ["naming", "tests"]
                }, "detail": "2DHW2FP49YVD3", "agent": "dry"}
            ]
        })
    }

    fn eval_with(
        text: &str,
        input: &Value,
        bindings: &[(String, Value)],
    ) -> Result<Option<Value>, JsonataError> {
        compile(text)?.evaluate(input, bindings, &Limits::default())
    }

    /// Evaluates `text` against [`context`] with default limits.
    fn eval(text: &str) -> Result<Option<Value>, JsonataError> {
        eval_with(text, &context(), &[])
    }

    /// Evaluates `text`, which must fail, and returns the error with the time it took.
    fn eval_err(text: &str, input: &Value) -> (JsonataError, Duration) {
        let started = Instant::now();
        let outcome = eval_with(text, input, &[]);
        let took = started.elapsed();
        match outcome {
            Err(error) => (error, took),
            Ok(value) => panic!("{text} should fail, gave {value:?} after {took:?}"),
        }
    }

    fn check(text: &str, expected: Option<Value>) {
        assert_eq!(eval(text), Ok(expected), "{text}");
    }

    #[test]
    fn routing_conditions() {
        check("steps[-1].output.approved = false", Some(json!(true)));
        check("$count(steps[role='coder']) >= 3", Some(json!(true)));
        check("$count(steps[role='coder']) >= 4", Some(json!(false)));
        check("\"x\" in steps.role", Some(json!(false)));
        check("\"coder\" in steps.role", Some(json!(true)));
        check(
            "$exists(steps[-1].output.issues) and $count(steps[-1].output.issues) > 0",
            Some(json!(true)),
        );
        check("steps[-1].role", Some(json!("reviewer")));
        check("$count(steps)", Some(json!(5)));
        check("start.prompt", Some(json!("add a flag")));
    }

    /// `string ~> /regex/` applies the regex as a function: the result is a match object (or
    /// undefined), never a boolean, so as a condition it never matches. `$contains` gives one.
    #[test]
    fn regex_application_returns_a_match_object() {
        check(
            "steps[-1].output.verdict ~> /^approve/i",
            Some(json!({"match": "Approve", "start": 0, "end": 7, "groups": []})),
        );
        check("steps[-1].output.verdict ~> /^reject/i", None);
        check(
            "$contains(steps[-1].output.verdict, /^approve/i)",
            Some(json!(true)),
        );
        check(
            "$exists(steps[-1].output.verdict ~> /^approve/i)",
            Some(json!(true)),
        );
    }

    #[test]
    fn undefined_is_none() {
        check("steps[-1].output.nothing", None);
        check("steps[99].role", None);
        check("nosuchfield", None);
        // A missing field is undefined, and undefined is not false.
        check("steps[-1].output.nothing = false", Some(json!(false)));
        assert_eq!(
            eval_with("steps[-1].role", &json!({"steps": []}), &[]),
            Ok(None)
        );
        assert_eq!(
            compile("$").and_then(|e| e.evaluate_prepared(
                &Input::undefined(),
                &[],
                &Limits::default()
            )),
            Ok(None)
        );
    }

    #[test]
    fn bindings_with_or_without_dollar() {
        let with = [("max_rounds".to_string(), json!(3))];
        assert_eq!(
            eval_with(
                "$count(steps[role='coder']) >= $max_rounds",
                &context(),
                &with
            ),
            Ok(Some(json!(true)))
        );
        let dollar = [("$max_rounds".to_string(), json!(4))];
        assert_eq!(
            eval_with(
                "$count(steps[role='coder']) >= $max_rounds",
                &context(),
                &dollar
            ),
            Ok(Some(json!(false)))
        );
        assert_eq!(eval_with("$max_rounds", &context(), &[]), Ok(None));
    }

    #[test]
    fn results_convert_like_json_stringify() {
        check("1 + 2", Some(json!(3)));
        check("7 / 2", Some(json!(3.5)));
        check("1e21", Some(json!(1e21)));
        check("-0", Some(json!(0)));
        check("[1, 'a', null, true]", Some(json!([1, "a", null, true])));
        // Keys keep the order the expression built them in.
        let object = eval("{'z': 1, 'a': 2}")
            .expect("evaluates")
            .expect("defined");
        assert_eq!(
            serde_json::to_string(&object).expect("serialises"),
            r#"{"z":1,"a":2}"#
        );
        // Functions and regexes have no JSON form.
        check("function($x){$x}", None);
        check(
            "{'f': function($x){$x}, 'r': /re/, 'n': 1}",
            Some(json!({"n": 1})),
        );
        check("[function($x){$x}, 1]", Some(json!([null, 1])));
    }

    #[test]
    fn errors_carry_codes() {
        let error = eval("1 ~> 2").expect_err("2 is not a function");
        assert_eq!(error.code(), Some("T2006"));
        assert_eq!(
            error.to_string(),
            "T2006: The right side of the function application operator ~> must be a function"
        );
        assert_eq!(
            error.message(),
            "The right side of the function application operator ~> must be a function"
        );
        assert_eq!(
            eval("1 + 'a'").expect_err("type error").code(),
            Some("T2002")
        );
        assert_eq!(
            eval("$nope()").expect_err("no such function").code(),
            Some("T1006")
        );
        // The code sits behind a prefix in jsonata-core's message here.
        assert_eq!(
            eval("$substring()")
                .expect_err("missing argument")
                .code()
                .map(|c| &c[..1]),
            Some("T")
        );
        assert_eq!(
            eval("$error('stop')").expect_err("raised").code(),
            Some("D3137")
        );
    }

    #[test]
    fn compile_errors_carry_codes() {
        let cases = [
            ("steps[", "S0207"),
            (")", "S0211"),
            ("'open", "S0101"),
            ("steps /* open", "S0106"),
            ("1e999", "S0102"),
        ];
        for (text, code) in cases {
            match compile(text) {
                Err(error @ JsonataError::Compile { .. }) => {
                    assert_eq!(error.code(), Some(code), "{text}: {error}");
                    assert!(
                        error.to_string().starts_with(&format!("{code}: ")),
                        "{error}"
                    );
                }
                other => panic!("{text}: expected a compile error, got {other:?}"),
            }
        }
    }

    #[test]
    fn one_input_many_expressions() {
        let input = Input::new(context());
        let limits = Limits::default();
        let conditions = [
            "steps[-1].output.approved = false",
            "$count(steps) > 4",
            "steps[0].role = 'x'",
        ];
        let results: Vec<_> = conditions
            .iter()
            .map(|text| compile(text).and_then(|expr| expr.evaluate_prepared(&input, &[], &limits)))
            .collect();
        assert_eq!(
            results,
            [
                Ok(Some(json!(true))),
                Ok(Some(json!(true))),
                Ok(Some(json!(false)))
            ]
        );
    }

    #[test]
    fn compiled_expressions_and_inputs_cross_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Expr>();
        send_sync::<Input>();
        send_sync::<JsonataError>();

        let expr = compile("$count(steps)").expect("compiles");
        let input = Arc::new(Input::new(context()));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (expr, input) = (expr.clone(), Arc::clone(&input));
                std::thread::spawn(move || expr.evaluate_prepared(&input, &[], &Limits::default()))
            })
            .collect();
        for handle in handles {
            assert_eq!(handle.join().expect("no panic"), Ok(Some(json!(5))));
        }
    }

    // Hostile expressions. Each must fail (or finish) cleanly and quickly, on a test thread's
    // 2 MiB stack. The limit asserted is generous for a loaded CI machine; the report of the
    // times measured is in the commit that added these.

    const QUICK: Duration = Duration::from_secs(2);

    #[test]
    fn hostile_infinite_recursion_times_out() {
        let (error, took) = eval_err("($f := function($x){$f($x)}; $f(1))", &Value::Null);
        assert_eq!(
            error,
            JsonataError::Timeout {
                limit: Duration::from_secs(1)
            }
        );
        assert_eq!(error.code(), Some("D1012"));
        assert!(took < QUICK, "{took:?}");
    }

    #[test]
    fn hostile_deep_recursion_hits_the_depth_limit() {
        let (error, took) = eval_err("($f := function($x){1 + $f($x)}; $f(1))", &Value::Null);
        assert_eq!(error, JsonataError::DepthExceeded { limit: 200 });
        assert!(took < QUICK, "{took:?}");
    }

    #[test]
    fn hostile_nesting_is_rejected_by_the_parser() {
        for (open, close) in [("[", "]"), ("(", ")"), ("{'a':", "}"), ("-", "")] {
            let text = format!("{}1{}", open.repeat(5000), close.repeat(5000));
            let started = Instant::now();
            let error = compile(&text).expect_err("too deep");
            assert_eq!(error.code(), Some("U1002"), "{open}: {error}");
            assert!(started.elapsed() < QUICK, "{open}: {:?}", started.elapsed());
        }
        // Unclosed, and a long flat chain (which the parser nests as it loops).
        assert_eq!(
            compile(&"[".repeat(100_000)).expect_err("unclosed").code(),
            Some("U1002")
        );
        let chain = vec!["1"; 5000].join("+");
        assert_eq!(compile(&chain).expect_err("too deep").code(), Some("U1002"));
    }

    #[test]
    fn nesting_just_under_the_parser_limits_works() {
        // The parser allows 1000 levels; its post-processing counts an array constructor as
        // two, so arrays stop just under 500.
        let roomy = Limits {
            max_depth: 5000,
            ..Limits::default()
        };
        let parens = format!("{}1{}", "(".repeat(990), ")".repeat(990));
        let expr = compile(&parens).expect("990 parentheses parse");
        assert_eq!(expr.evaluate(&Value::Null, &[], &roomy), Ok(Some(json!(1))));

        let brackets = format!("{}1{}", "[".repeat(490), "]".repeat(490));
        let expr = compile(&brackets).expect("490 brackets parse");
        // Too deep to hand out as JSON, but the engine builds and prints it fine.
        assert_eq!(
            expr.evaluate(&Value::Null, &[], &roomy),
            Err(JsonataError::ResultTooDeep {
                limit: MAX_RESULT_DEPTH
            })
        );
        let printed = compile(&format!("$length($string({brackets}))")).expect("parses");
        assert_eq!(
            printed.evaluate(&Value::Null, &[], &roomy),
            Ok(Some(json!(981)))
        );
        // With default limits the same expression is too deep to evaluate.
        assert_eq!(
            expr.evaluate(&Value::Null, &[], &Limits::default()),
            Err(JsonataError::DepthExceeded { limit: 200 })
        );
    }

    #[test]
    fn compiles_and_drops_deep_expressions_on_a_tiny_stack() {
        let on_64_kib = std::thread::Builder::new().stack_size(64 * 1024).spawn(|| {
            let too_deep = compile(&format!("{}1{}", "(".repeat(5000), ")".repeat(5000)));
            let deep = compile(&format!("{}1{}", "(".repeat(990), ")".repeat(990)));
            let nested = compile(&format!("{}1{}", "[".repeat(490), "]".repeat(490)));
            (too_deep.is_err(), deep.is_ok(), nested.is_ok())
            // `deep` and `nested` are dropped here, 1000 levels each.
        });
        let outcome = on_64_kib
            .expect("spawns")
            .join()
            .expect("no stack overflow, no panic");
        assert_eq!(outcome, (true, true, true));
    }

    #[test]
    fn the_deepest_short_expressions_drop_without_a_stack_check_on_a_tiny_stack() {
        // What `SHALLOW_SOURCE` relies on: a text that short cannot make a tree deep enough to
        // overflow 64 KiB while it drops, whatever nests (brackets, arrays, objects, unary
        // minus, calls, conditionals).
        let n = SHALLOW_SOURCE;
        let texts = [
            format!("{}1{}", "(".repeat((n - 1) / 2), ")".repeat((n - 1) / 2)),
            format!("{}1{}", "[".repeat((n - 1) / 2), "]".repeat((n - 1) / 2)),
            format!("{}1", "-".repeat(n - 1)),
            format!(
                "{}1{}",
                "{'a':".repeat((n - 1) / 6),
                "}".repeat((n - 1) / 6)
            ),
            format!(
                "{}true{}",
                "$not(".repeat((n - 4) / 6),
                ")".repeat((n - 4) / 6)
            ),
            format!("{}1", "true?".repeat((n - 1) / 5)),
            format!("{}1{}", "$[".repeat((n - 1) / 3), "]".repeat((n - 1) / 3)),
            format!("{}b{}", "a.(".repeat((n - 1) / 4), ")".repeat((n - 1) / 4)),
            format!("$f{}", "()".repeat((n - 2) / 2)),
        ];
        let mut exprs = Vec::new();
        for text in &texts {
            assert!(text.len() <= SHALLOW_SOURCE, "{text}");
            let expr = compile(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert!(!expr.ast.deep, "{text}");
            exprs.push(expr);
        }
        let on_64_kib = std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(move || drop(exprs));
        on_64_kib
            .expect("spawns")
            .join()
            .expect("no stack overflow");
    }

    #[test]
    fn compiling_on_the_worker_gives_the_same_expression() {
        let input = Input::new(context());
        let later = input.compile_later("$count(steps[role='coder'])");
        let broken = input.compile_later("steps[");
        assert!(
            later.answer.is_some() && broken.answer.is_some(),
            "sent to the worker"
        );
        let expr = later.finish().expect("compiles");
        assert_eq!(expr.source(), "$count(steps[role='coder'])");
        assert_eq!(
            expr.evaluate_prepared(&input, &[], &Limits::default()),
            Ok(Some(json!(3)))
        );
        assert_eq!(broken.finish().map(drop), compile("steps[").map(drop));
    }

    #[test]
    fn without_an_answer_from_the_worker_the_caller_compiles() {
        let gone = Compiling {
            text: "1 + 1".to_owned(),
            answer: None,
        };
        let (_never, silent) = mpsc::sync_channel(1);
        let late = Compiling {
            text: "steps[".to_owned(),
            answer: Some(silent),
        };
        let started = Instant::now();
        assert_eq!(
            gone.finish().map(|e| e.source().to_owned()),
            Ok("1 + 1".into())
        );
        assert_eq!(
            late.finish_by(Instant::now()).map(drop),
            compile("steps[").map(drop)
        );
        assert!(started.elapsed() < QUICK, "{:?}", started.elapsed());
    }

    #[test]
    fn an_item_appended_before_the_worker_converts_the_input_is_kept() {
        // A worker started for a compilation alone has not converted the input yet.
        let input = Input::new(json!({"steps": []}));
        let later = input.compile_later("$count(steps)");
        input.append("steps", r#"{"role": "a"}"#.to_owned());
        let expr = later.finish().expect("compiles");
        assert_eq!(
            expr.evaluate_prepared(&input, &[], &Limits::default()),
            Ok(Some(json!(1)))
        );
    }

    #[test]
    fn the_deepest_result_drops_on_a_small_stack() {
        let text = format!(
            "{}1{}",
            "[".repeat(MAX_RESULT_DEPTH),
            "]".repeat(MAX_RESULT_DEPTH)
        );
        let roomy = Limits {
            max_depth: 5000,
            ..Limits::default()
        };
        let expr = compile(&text).expect("parses");
        let on_small_stack = {
            let expr = expr.clone();
            std::thread::Builder::new()
                .stack_size(128 * 1024)
                .spawn(move || {
                    expr.evaluate(&Value::Null, &[], &roomy)
                        .map(|value| value.is_some())
                    // The value is dropped here.
                })
        };
        assert_eq!(
            on_small_stack
                .expect("spawns")
                .join()
                .expect("no stack overflow"),
            Ok(true)
        );
        // serde_json reads it back: its own nesting limit is the same.
        let value = expr.evaluate(&Value::Null, &[], &roomy).expect("evaluates");
        let printed = value.expect("defined").to_string();
        assert!(serde_json::from_str::<Value>(&printed).is_ok());
        let one_more = format!("[{printed}]");
        assert!(serde_json::from_str::<Value>(&one_more).is_err());
    }

    #[test]
    fn hostile_regex_runs_in_linear_time() {
        // A backtracking engine takes minutes on this; the `regex` crate has no backtracking.
        let started = Instant::now();
        let result = eval_with(
            r#"$match("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!", /(a+)+$/)"#,
            &Value::Null,
            &[],
        );
        assert_eq!(result, Ok(None), "no match");
        assert!(started.elapsed() < QUICK, "{:?}", started.elapsed());
    }

    #[test]
    fn hostile_huge_range_hits_the_sequence_limit() {
        let (error, took) = eval_err("[1..10000000]", &Value::Null);
        assert_eq!(error.code(), Some("D2015"), "{error}");
        assert!(took < QUICK, "{took:?}");
        // Past the engine's own range cap it is D2014 whatever the limits.
        let (error, _) = eval_err("[1..100000000]", &Value::Null);
        assert_eq!(error.code(), Some("D2014"), "{error}");
    }

    #[test]
    fn hostile_string_of_shared_structure_is_abandoned_by_the_watchdog() {
        // An object holding the previous one twice, 24 times over: every level is shared, so it
        // costs nothing to build and 2^24 leaves to print, and `$string` never looks at the clock
        // while it prints. It asks the memory budget as its text grows, so whichever limit it
        // reaches first — the watchdog's second or the 256 MiB budget — ends it, quickly.
        let (error, took) = eval_err(
            "$string($reduce([1..24], function($o, $i){{'l': $o, 'r': $o}}, 1))",
            &Value::Null,
        );
        assert!(
            matches!(
                error,
                JsonataError::Timeout { limit } if limit == Duration::from_secs(1)
            ) || matches!(error, JsonataError::MemoryLimit { .. }),
            "{error:?}"
        );
        assert!(took < QUICK, "{took:?}");
    }

    #[test]
    fn hostile_expanded_result_is_refused() {
        // The same kind of structure, 2^40 leaves, returned as the result: converting it is the
        // expensive part. An unoptimised build may reach the time limit before the size limit.
        let text = "$reduce([1..40], function($o, $i){{'l': $o, 'r': $o}}, 1)";
        let (error, took) = eval_err(text, &Value::Null);
        assert!(
            matches!(
                error,
                JsonataError::ResultTooLarge { limit: 1_000_000 } | JsonataError::Timeout { .. }
            ),
            "{error:?}"
        );
        assert!(took < QUICK, "{took:?}");
        let small = Limits {
            max_sequence_length: 10_000,
            ..Limits::default()
        };
        let outcome = compile(text).and_then(|expr| expr.evaluate(&Value::Null, &[], &small));
        assert_eq!(outcome, Err(JsonataError::ResultTooLarge { limit: 10_000 }));
        // A result of exactly the limit is fine.
        let limit = compile("[1..10000]").and_then(|expr| expr.evaluate(&Value::Null, &[], &small));
        assert_eq!(
            limit.map(|v| v.and_then(|v| v.as_array().map(Vec::len))),
            Ok(Some(10_000))
        );
    }

    #[test]
    fn hostile_deep_result_is_refused() {
        let text = "$reduce([1..5000], function($o, $i){{'a': $o}}, 1)";
        let (error, took) = eval_err(text, &Value::Null);
        assert_eq!(
            error,
            JsonataError::ResultTooDeep {
                limit: MAX_RESULT_DEPTH
            }
        );
        assert!(took < QUICK, "{took:?}");
    }

    #[test]
    fn engine_panics_are_caught() {
        // jsonata-core 2.2.13 overflows in picture-string formatting (a multiply in debug
        // builds, a division by zero in release).
        let (error, _) = eval_err("$fromMillis(0, '[Y,99]')", &Value::Null);
        assert!(
            matches!(
                error,
                JsonataError::Panicked {
                    phase: Phase::Evaluate,
                    ..
                }
            ),
            "{error:?}"
        );
        // The input and its worker survive a panic.
        let input = Input::new(json!({"a": 1}));
        let panics = compile("$fromMillis(0, '[Y,99]')").expect("compiles");
        let fine = compile("a").expect("compiles");
        let limits = Limits::default();
        assert!(panics.evaluate_prepared(&input, &[], &limits).is_err());
        assert_eq!(
            fine.evaluate_prepared(&input, &[], &limits),
            Ok(Some(json!(1)))
        );
    }

    fn short_limits() -> Limits {
        Limits {
            timeout: Duration::from_millis(100),
            ..Limits::default()
        }
    }

    /// Runs an evaluation on `input` that times out, so its worker is abandoned.
    fn time_out(input: &Input, limits: &Limits) {
        let stuck = compile("$string($reduce([1..24], function($o, $i){{'l': $o, 'r': $o}}, 1))")
            .expect("compiles");
        assert!(matches!(
            stuck.evaluate_prepared(input, &[], limits),
            Err(JsonataError::Timeout { .. })
        ));
    }

    #[test]
    fn an_input_recovers_after_a_timeout() {
        let input = Input::new(context());
        let limits = short_limits();
        time_out(&input, &limits);
        let fine = compile("$count(steps)").expect("compiles");
        assert_eq!(
            fine.evaluate_prepared(&input, &[], &limits),
            Ok(Some(json!(5)))
        );
    }

    #[test]
    fn appended_items_read_like_part_of_the_document() {
        let eval = |input: &Input, text: &str| {
            compile(text)
                .and_then(|e| e.evaluate_prepared(input, &[], &Limits::default()))
                .expect("evaluates")
        };
        let item = r#"{"role": "tester", "output": {"ok": true}, "detail": "2DHW2FP49YVD3", "agent": "dry"}"#;
        let mut whole = context();
        whole["steps"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::from_str(item).unwrap());
        let whole = Input::new(whole);
        let probes = [
            "$count(steps)",
            "steps[-1].role",
            "steps[-1].output.ok",
            "steps.role",
            "$",
        ];
        // Appended before the first use, after preparing, and after an evaluation.
        let before = Input::from_json_text(context().to_string());
        before.append("steps", item.to_owned());
        let prepared = Input::from_json_text(context().to_string());
        prepared.prepare();
        prepared.append("steps", item.to_owned());
        let after = Input::from_json_text(context().to_string());
        assert_eq!(eval(&after, "$count(steps)"), Some(json!(5)));
        after.append("steps", item.to_owned());
        for probe in probes {
            let expected = eval(&whole, probe);
            for input in [&before, &prepared, &after] {
                assert_eq!(eval(input, probe), expected, "{probe}");
            }
        }
    }

    #[test]
    fn appended_items_survive_a_new_worker() {
        let input = Input::new(context());
        input.append("steps", r#"{"role": "tester"}"#.to_owned());
        let limits = short_limits();
        time_out(&input, &limits);
        // The abandoned worker held the grown document; its successor rebuilds it.
        let last = compile("[$count(steps), steps[-1].role]").expect("compiles");
        assert_eq!(
            last.evaluate_prepared(&input, &[], &limits),
            Ok(Some(json!([6, "tester"])))
        );
    }

    #[test]
    fn a_bad_append_fails_evaluations_with_the_reason() {
        let count = compile("$count(steps)").expect("compiles");
        let limits = Limits::default();
        let not_json = Input::new(context());
        not_json.append("steps", "{oops".to_owned());
        let no_array = Input::new(context());
        no_array.append("start", "1".to_owned());
        for (input, reason) in [
            (not_json, "an appended item is not valid JSON"),
            (no_array, "the input has no array `start`"),
        ] {
            match count.evaluate_prepared(&input, &[], &limits) {
                Err(JsonataError::Evaluate { message, .. }) => {
                    assert!(message.contains(reason), "{message}")
                }
                other => panic!("expected an input error, got {other:?}"),
            }
        }
    }

    #[test]
    fn split_code_finds_codes_behind_prefixes() {
        assert_eq!(
            split_code("S0201: Syntax error"),
            Some(("S0201", "Syntax error"))
        );
        assert_eq!(
            split_code("Invalid syntax: S0209: A predicate"),
            Some(("S0209", "A predicate"))
        );
        assert_eq!(split_code("Unclosed comment"), None);
        assert_eq!(split_code("x: y"), None);
    }

    #[test]
    fn millis_round_up() {
        assert_eq!(millis_rounded_up(Duration::ZERO), 1);
        assert_eq!(millis_rounded_up(Duration::from_micros(1500)), 2);
        assert_eq!(millis_rounded_up(Duration::from_secs(1)), 1000);
        assert_eq!(millis_rounded_up(Duration::MAX), u64::MAX);
    }

    #[test]
    fn input_from_json_text() {
        let expr = compile("steps[-1].output.approved = false").unwrap();
        let input = Input::from_json_text(r#"{"steps":[{"output":{"approved":false}}]}"#.into());
        assert_eq!(
            expr.evaluate_prepared(&input, &[], &Limits::default())
                .unwrap(),
            Some(json!(true))
        );
        let broken = Input::from_json_text("{nope".into());
        let err = expr
            .evaluate_prepared(&broken, &[], &Limits::default())
            .unwrap_err();
        assert!(err.to_string().contains("not valid JSON"), "{err}");
    }
}
