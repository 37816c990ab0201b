//! The evaluation worker: a thread that owns one input document in the engine's own values
//! (which are bound to one thread), converts it once, and evaluates every expression handed to
//! it under `catch_unwind` and the engine's limits. It also compiles expressions for its input's
//! owner ([`Input::compile_later`]).
//!
//! A short-lived process starts one worker early, before it has an input ([`super::prewarm`]):
//! that thread first warms the engine up, then waits as the process's spare, and the first
//! [`Input`] that needs a worker after that adopts it instead of starting another thread.

use super::*;

pub(super) fn worker_died() -> JsonataError {
    JsonataError::Panicked {
        phase: Phase::Evaluate,
        message: "the evaluation thread ended unexpectedly".to_string(),
    }
}

/// One evaluation request for a worker.
pub(super) struct Job {
    pub(super) ast: Arc<Ast>,
    pub(super) bindings: Vec<(String, Value)>,
    pub(super) limits: Limits,
    pub(super) cancel: CancelToken,
    pub(super) reply: mpsc::SyncSender<Result<Option<Value>, JsonataError>>,
}

/// What a worker is asked to do, in queue order.
pub(super) enum Work {
    /// Serve this input, with these items appended: a spare worker's first message.
    Adopt(Arc<Data>, Vec<Arc<Appended>>),
    /// Compile an expression on this thread.
    Compile(String, mpsc::SyncSender<Result<Expr, JsonataError>>),
    /// Convert the input now (see [`Input::prepare`]).
    Convert,
    /// Add an item to the converted input (see [`Input::append`]).
    Append(Arc<Appended>),
    Evaluate(Job),
}

/// The caller's end of a worker thread's queue.
pub(super) struct Worker {
    pub(super) jobs: mpsc::Sender<Work>,
}

impl Worker {
    pub(super) fn spawn(data: Arc<Data>, replay: Vec<Arc<Appended>>) -> Result<Self, JsonataError> {
        let (jobs, queue) = mpsc::channel::<Work>();
        silence_worker_panics();
        std::thread::Builder::new()
            .name(WORKER_NAME.to_string())
            .stack_size(WORKER_STACK)
            .spawn(move || serve(&data, replay, &queue))
            .map_err(|error| JsonataError::Worker {
                message: error.to_string(),
            })?;
        Ok(Worker { jobs })
    }

    /// Starts a worker with no input yet: it runs `warm`, then waits as the process's spare
    /// until [`Worker::adopt_or_spawn`] gives it an input. It offers itself only once warm: an
    /// input needed sooner gets a worker of its own rather than waiting for the warm-up (a step
    /// on a long thread starts converting its context at once).
    pub(super) fn spawn_spare(warm: impl FnOnce() + Send + 'static) {
        Worker::spawn_spare_into(&SPARE, warm);
    }

    /// [`Worker::spawn_spare`], offering the worker in `slot`.
    fn spawn_spare_into(slot: &'static Spare, warm: impl FnOnce() + Send + 'static) {
        silence_worker_panics();
        let _ = std::thread::Builder::new()
            .name(WORKER_NAME.to_string())
            .stack_size(WORKER_STACK)
            .spawn(move || {
                let _ = catch_unwind(AssertUnwindSafe(warm));
                let (jobs, queue) = mpsc::channel::<Work>();
                *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(Worker { jobs });
                // Nothing else is sent before the input: `adopt_or_spawn` sends it first.
                if let Ok(Work::Adopt(data, replay)) = queue.recv() {
                    serve(&data, replay, &queue);
                }
            });
    }

    /// The spare worker, if there is one, given `data` to serve; else a new worker.
    pub(super) fn adopt_or_spawn(
        data: Arc<Data>,
        replay: Vec<Arc<Appended>>,
    ) -> Result<Self, JsonataError> {
        Worker::adopt_from(&SPARE, data, replay)
    }

    /// [`Worker::adopt_or_spawn`], taking the spare from `slot`.
    fn adopt_from(
        slot: &Spare,
        data: Arc<Data>,
        replay: Vec<Arc<Appended>>,
    ) -> Result<Self, JsonataError> {
        let spare = slot.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(worker) = spare
            && worker
                .jobs
                .send(Work::Adopt(Arc::clone(&data), replay.clone()))
                .is_ok()
        {
            return Ok(worker);
        }
        Worker::spawn(data, replay)
    }
}

/// Where a warm spare worker waits for an input.
type Spare = Mutex<Option<Worker>>;

/// The worker [`Worker::spawn_spare`] started, once warm, until an input adopts it.
static SPARE: Spare = Mutex::new(None);

/// The worker thread: converts the input once, then evaluates jobs until its queue closes.
/// An input document in one of the forms it can be given.
pub(super) enum Data {
    Undefined,
    Value(Value),
    Text(String),
}

pub(super) fn serve(data: &Data, mut replay: Vec<Arc<Appended>>, queue: &mpsc::Receiver<Work>) {
    let mut input: Option<Result<JValue, String>> = None;
    let convert = |input: &mut Option<Result<JValue, String>>, replay: &[Arc<Appended>]| {
        if input.is_none() {
            let mut converted = match data {
                Data::Value(value) => Ok(to_jvalue(value)),
                Data::Undefined => Ok(JValue::Undefined),
                // serde_json's recursion limit (128) bounds the nesting of what it reads.
                Data::Text(text) => JValue::from_json_str(text)
                    .map_err(|e| format!("the input is not valid JSON: {e}")),
            };
            for item in replay {
                append_to(&mut converted, item);
            }
            *input = Some(converted);
        }
    };
    for work in queue {
        let job = match work {
            Work::Convert => {
                if catch_unwind(AssertUnwindSafe(|| convert(&mut input, &replay))).is_err() {
                    input = Some(Err("the input could not be converted".to_string()));
                }
                continue;
            }
            Work::Append(item) => {
                match input.as_mut() {
                    // Not converted yet (the worker was only asked to compile so far): it joins
                    // the items to apply at conversion. An item appended before this worker
                    // started is in `replay` already and is never sent to it.
                    None => replay.push(item),
                    Some(converted) => {
                        if catch_unwind(AssertUnwindSafe(|| append_to(converted, &item))).is_err() {
                            input =
                                Some(Err("an appended item could not be converted".to_string()));
                        }
                    }
                }
                continue;
            }
            Work::Evaluate(job) => job,
            Work::Compile(text, reply) => {
                // `compile` catches the parser's panics itself.
                let _ = reply.send(compile(&text));
                continue;
            }
            // Only a spare's first message, handled before serving.
            Work::Adopt(..) => continue,
        };
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            convert(&mut input, &replay);
            let input = input.as_mut().expect("converted above");
            match input {
                Ok(input) => evaluate_on_worker(input, &job),
                Err(reason) => Err(JsonataError::Evaluate {
                    code: None,
                    message: reason.clone(),
                }),
            }
        }))
        .unwrap_or_else(|payload| {
            Err(JsonataError::Panicked {
                phase: Phase::Evaluate,
                message: panic_message(payload.as_ref()),
            })
        });
        // The caller may have given up waiting; then nobody needs the answer.
        let _ = job.reply.send(outcome);
    }
}

/// Adds `item` to the input's array member, or turns the input into the reason it cannot.
pub(super) fn append_to(input: &mut Result<JValue, String>, item: &Appended) {
    let Ok(value) = input else {
        return;
    };
    let parsed = JValue::from_json_str(&item.json).map_err(|e| e.to_string());
    let outcome = match (parsed, value) {
        (Err(reason), _) => Err(format!("an appended item is not valid JSON: {reason}")),
        (Ok(parsed), JValue::Object(map)) => match std::rc::Rc::make_mut(map).get_mut(&item.key) {
            Some(JValue::Array(items)) => {
                items.make_mut().push(parsed);
                Ok(())
            }
            _ => Err(format!(
                "the input has no array `{}` to append to",
                item.key
            )),
        },
        (Ok(_), _) => Err(format!(
            "the input is not an object with an array `{}`",
            item.key
        )),
    };
    if let Err(reason) = outcome {
        *input = Err(reason);
    }
}

pub(super) fn evaluate_on_worker(input: &JValue, job: &Job) -> Result<Option<Value>, JsonataError> {
    let mut context = Context::new();
    for (name, value) in &job.bindings {
        let name = name.strip_prefix('$').unwrap_or(name);
        context.bind(name.to_string(), to_jvalue(value));
    }
    let options = EvaluatorOptions {
        timeout_ms: Some(millis_rounded_up(job.limits.timeout)),
        cancel: Some(job.cancel.clone()),
        max_stack_depth: Some(job.limits.max_depth),
        max_sequence_length: Some(job.limits.max_sequence_length),
    };
    let mut evaluator = Evaluator::with_options(context, options);
    let memory = memory::Scope::enter(job.limits.max_memory, &job.cancel);
    let outcome = evaluator
        .evaluate(&job.ast.node, input)
        .map_err(|error| JsonataError::from_evaluator(&error, &job.limits))
        .and_then(|result| {
            let mut budget = ConvertBudget {
                cancel: &job.cancel,
                limits: &job.limits,
                visited: 0,
            };
            let json = to_json(&result, 0, &mut budget);
            drop(result);
            json
        });
    // Stopped for memory: whatever the engine made of the cancellation, say why.
    if memory.exceeded() {
        drop(outcome);
        return Err(JsonataError::MemoryLimit {
            limit: job.limits.max_memory,
        });
    }
    outcome
}

pub(super) fn millis_rounded_up(duration: Duration) -> u64 {
    let millis = duration.as_nanos().div_ceil(1_000_000);
    u64::try_from(millis).unwrap_or(u64::MAX).max(1)
}

pub(super) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "(no message)".to_string()
    }
}

/// The name of every worker thread.
const WORKER_NAME: &str = "uwf-jsonata";

/// A panic on a worker is caught and reported as [`JsonataError::Panicked`], so the default
/// hook's message is noise — and with `RUST_BACKTRACE` set, capturing the backtrace of a debug
/// build can take longer than the evaluation's whole time limit, turning a clean panic report
/// into a timeout. Installed once; panics on other threads still reach the previous hook.
fn silence_worker_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current().name() != Some(WORKER_NAME) {
                previous(info);
            }
        }));
    });
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use serde_json::json;

    use super::*;

    fn compile_on(worker: &Worker, text: &str) -> Result<Expr, JsonataError> {
        let (reply, answer) = mpsc::sync_channel(1);
        worker
            .jobs
            .send(Work::Compile(text.to_owned(), reply))
            .expect("the worker listens");
        answer.recv().expect("the worker answers")
    }

    fn evaluate_on(worker: &Worker, expr: &Expr) -> Result<Option<Value>, JsonataError> {
        let (reply, answer) = mpsc::sync_channel(1);
        let job = Job {
            ast: Arc::clone(&expr.ast),
            bindings: Vec::new(),
            limits: Limits::default(),
            cancel: CancelToken::new(),
            reply,
        };
        worker
            .jobs
            .send(Work::Evaluate(job))
            .expect("the worker listens");
        answer.recv().expect("the worker answers")
    }

    #[test]
    fn a_spare_is_offered_once_warm_and_then_serves_the_input_that_adopts_it() {
        // A slot of this test's own, so that no other test's input can take the spare.
        static SLOT: Spare = Mutex::new(None);
        let (end_warm_up, warming) = mpsc::channel::<()>();
        Worker::spawn_spare_into(&SLOT, move || {
            let _ = warming.recv();
        });
        let data = Arc::new(Data::Value(json!({"n": 2})));
        // While it warms up, an input gets a worker of its own.
        let own = Worker::adopt_from(&SLOT, Arc::clone(&data), Vec::new()).expect("a worker");
        let expr = compile_on(&own, "n * 21").expect("compiles");
        assert_eq!(evaluate_on(&own, &expr), Ok(Some(json!(42))));
        assert!(SLOT.lock().unwrap().is_none(), "offered before it was warm");
        end_warm_up.send(()).expect("the spare waits");
        let started = Instant::now();
        while SLOT.lock().unwrap().is_none() {
            assert!(started.elapsed() < Duration::from_secs(10), "never offered");
            std::thread::sleep(Duration::from_millis(1));
        }
        let data = Arc::new(Data::Value(json!({"n": 3})));
        let adopted = Worker::adopt_from(&SLOT, data, Vec::new()).expect("a worker");
        assert!(SLOT.lock().unwrap().is_none(), "adopted");
        let expr = compile_on(&adopted, "n * 14").expect("compiles");
        assert_eq!(evaluate_on(&adopted, &expr), Ok(Some(json!(42))));
    }
}
