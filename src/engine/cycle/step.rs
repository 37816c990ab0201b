//! One step of a thread: moderator → agent → verify → publish (`docs/ARCHITECTURE.md#one-step`).
//!
//! Architecture Invariant: the per-thread step lock is held for the whole step, so at most one
//! step runs per thread; the head moves only by compare-and-set after the agent's step node is
//! verified, so a failed or killed step leaves the old head.

use serde_json::{Value, json};
use std::sync::Arc;

use crate::cas::store::now_ms;
use crate::cas::{Hash, Store};
pub(crate) use crate::engine::thread::view::Current;
use crate::engine::thread::view::{role_schema, verify};

use crate::engine::agent::resolve::AgentSpec;
use crate::engine::agent::spawn::{self, AgentError, Invocation};
use crate::engine::chain;
use crate::engine::config::Loaded;
use crate::engine::cycle::failure::{self, After};
use crate::engine::cycle::lifecycle;
pub use crate::engine::cycle::session::Warm;
use crate::engine::cycle::session::{Kept, Saved};
pub use crate::engine::cycle::step_error::StepError;
use crate::engine::thread::author::tagged;
use crate::engine::thread::context::{self, ThreadContext};
use crate::engine::thread::cost;
use crate::engine::thread::events;
use crate::engine::thread::index::{self, ThreadIndexError};
use crate::engine::thread::log::StepLog;
use crate::engine::thread::run_files::{self, RunFiles, RunInfo};
use crate::engine::workflow::END;
use crate::engine::workflow::decisions;
use crate::engine::workflow::jsonata::Input;
use crate::engine::workflow::moderator::{Moderator, ModeratorError};

/// What a step did; printed as `{"workflow","thread","head","role","done"}`.
#[derive(Debug, Clone, PartialEq)]
pub struct Stepped {
    pub workflow: String,
    pub thread: String,
    pub head: Hash,
    /// The role that ran, or `None` when the thread was already at its end.
    pub role: Option<String>,
    pub done: bool,
    /// The role's agent is `human`: a question was recorded and the head did not move.
    pub awaiting: bool,
}

impl Stepped {
    pub(crate) fn to_json(&self) -> Value {
        let mut json = json!({
            "workflow": self.workflow,
            "thread": self.thread,
            "head": self.head.to_string(),
            "role": self.role,
            "done": self.done,
        });
        if self.awaiting {
            json["awaiting"] = Value::Bool(true);
        }
        json
    }
}

/// Options of one step.
#[derive(Debug, Clone, Default)]
pub struct StepOptions {
    /// `--agent`: a configured agent name or a command line.
    pub agent: Option<String>,
    /// Pass the agent's stderr through to ours.
    pub passthrough: bool,
    /// The step was claimed from the run queue (a worker's). A question it asks takes the
    /// thread off the queue while the step still holds the thread's lock, and records that the
    /// thread was queued, so that its answer puts it back (issue #27 item 7).
    pub from_queue: bool,
    /// Who runs the step (`--by`, else the person running the command), named in its log
    /// header and its events; already checked ([`crate::engine::thread::author::check`]).
    pub by: Option<String>,
}

/// Runs one step of thread `id`. A process taking several steps calls [`step_warm`] instead,
/// with one [`Warm`] that keeps what one step learned for the next.
pub(crate) fn step(
    store: &Store,
    config: &Loaded,
    id: &str,
    options: &StepOptions,
) -> Result<Stepped, StepError> {
    step_warm(store, config, id, options, &mut Warm::lone())
}

/// [`step`], reusing and refilling what `warm` keeps from this process's earlier steps.
pub fn step_warm(
    store: &Store,
    config: &Loaded,
    id: &str,
    options: &StepOptions,
    warm: &mut Warm,
) -> Result<Stepped, StepError> {
    let files = RunFiles::new(store.root(), id);
    let by = options.by.as_deref();
    let lock = files.try_lock()?;
    // A kill under way waits for this lock to archive the thread: start nothing.
    files.check_not_killing()?;
    // Read under the lock: a pause lets the step that holds it finish and stops the next one.
    // A refusal here is not a failure of the thread, so nothing is recorded.
    let thread_context = context::read(store.root(), id).map_err(ThreadIndexError::from)?;
    if thread_context.paused {
        return Err(StepError::Paused {
            thread: id.to_owned(),
        });
    }
    // Before the agent (here or in its own process) writes or touches the nodes the new head
    // will name, until that head is published: GC keeps them (see `cas::gc`).
    let pin = store.pin()?;
    // Children that an earlier step's sub-workflow left active (that step died) end now.
    lifecycle::end_children(store, id);
    crate::profile::mark("step: locked");
    let mut started = None;
    let run = (&files, &lock, &mut started);
    let result = step_locked(store, config, (id, &thread_context), options, run, warm);
    if result.is_err() {
        // However this step ended, a child its agent started ends with it.
        lifecycle::end_children(store, id);
    }
    match &result {
        Ok(stepped) => lock.record_success(&stepped.to_json()),
        // A stop someone asked for is not a failure: the thread stays as it was (active, or
        // killed), and the last outcome says who stopped the step.
        Err(e) if e.is_stop() => lock.record_success(&json!({
            "thread": id, "stopped": e.to_string(), "by": e.stopped_by(),
        })),
        Err(e) => lock.record_failure(&crate::advice::with_hints(e), !e.lost_race()),
    }
    match &result {
        // Awaiting a person: the `awaiting` event was written when the question was recorded.
        Ok(stepped) if stepped.awaiting => {}
        Ok(stepped) => {
            let fields = json!({"step": started.as_ref().map(|s: &Started| s.step),
                "role": stepped.role, "head": stepped.head.to_string(), "done": stepped.done});
            events::append(&files, id, "finished", tagged(fields, by));
        }
        Err(e) => {
            if let Some(s) = &started {
                let error = crate::advice::with_hints(e);
                let mut fields = json!({"step": s.step, "role": s.role, "error": error});
                let kind = if e.is_stop() {
                    fields["by"] = e.stopped_by().into();
                    "stopped"
                } else {
                    fields = tagged(fields, by);
                    "failed"
                };
                events::append(&files, id, kind, fields);
            }
        }
    }
    drop(pin);
    drop(lock);
    crate::profile::mark("step: recorded, unlocked");
    // The run file keeps the agent's last stderr lines with the error; a caller that passed
    // that stderr through has shown them already, and saying them twice buries the reason.
    result.map_err(|e| {
        if options.passthrough {
            e.without_stderr_tail()
        } else {
            e
        }
    })
}

/// The step an agent was started for (for the change feed).
struct Started {
    /// 1-based, as in `steps/NNN-role`.
    step: usize,
    role: String,
}

fn step_locked(
    store: &Store,
    config: &Loaded,
    (id, context): (&str, &ThreadContext),
    options: &StepOptions,
    (files, lock, started): (&RunFiles, &run_files::StepLock, &mut Option<Started>),
    warm: &mut Warm,
) -> Result<Stepped, StepError> {
    let root = store.root();
    let mut info = RunInfo {
        pid: std::process::id(),
        started_at: now_ms(),
        role: None,
        agent: None,
        agent_pid: None,
        agent_start: None,
    };
    let head = index::active_head(root, id)?;
    // This process published `head` itself in its last step: it knows the history, workflow,
    // moderator, context and decision there, and verified the nodes they stand for.
    let (view, mut prepared, known_next) = match warm.take(id, head) {
        Some(kept) => (kept.view, Some(Ok(kept.prepared)), kept.next),
        None => {
            // The run record (for `status`, `kill` and busy messages) is written before
            // anything that can take long: reading the thread cold and running the moderator
            // here, or a spawned agent below. A warm step with an in-process agent is over
            // sooner than the record would take to write.
            lock.set_info(&info);
            let view = Current::load_at(store, head)?;
            view.verify_base(store, id)?;
            (view, None, None)
        }
    };
    crate::profile::mark("step: view loaded, base verified");
    // The moderator and its context (converted on the evaluation worker from the moment this
    // runs): the decision after this step needs the context with one more step, appended once
    // the agent has written it. The previous step usually decided this step's role already (see
    // `decisions`); then this is done while the agent starts.
    let prepare = || -> Result<(Moderator, Input), ModeratorError> {
        let context = Input::from_json_text(view.history.context_json());
        let moderator = Moderator::new_on(view.workflow.clone(), &context);
        context.prepare();
        Ok((moderator, context))
    };
    let cached = || {
        known_next
            .clone()
            .or_else(|| decisions::cached_next(store, view.workflow_hash(), &view.workflow, head))
    };
    let next = match cached() {
        Some(next) => next,
        None => {
            let (moderator, context) = match prepared.take() {
                Some(p) => p?,
                None => prepare()?,
            };
            let next = moderator.decide_prepared(view.history.at(), &context)?.next;
            prepared = Some(Ok((moderator, context)));
            next
        }
    };
    if next == END {
        // The archive drops the thread's spare cache files: the pending ones are written first.
        warm.flush();
        lifecycle::archive(store, id, view.workflow_hash(), "done")?;
        return Ok(Stepped {
            workflow: view.workflow.name.clone(),
            thread: id.to_owned(),
            head: view.head(),
            role: None,
            done: true,
            awaiting: false,
        });
    }
    // The budget is checked against what the published steps spent, before the agent runs.
    if let Some(reached) = cost::check(
        store,
        (id, context.budget),
        head,
        &view.workflow.name,
        &config.config,
    )? {
        return Err(StepError::Budget(reached));
    }
    let role = next;
    view.verify_schema(store, id, &role, warm)?;
    crate::profile::mark("step: role decided, schema verified");
    let spec = config.config.resolve_bound(
        options.agent.as_deref(),
        context.bindings.get(&role),
        &view.workflow.name,
        &role,
    )?;
    info.role = Some(role.clone());
    info.agent = Some(spec.name.clone());
    let step = view.history.len() + 1;
    if spec.is_human() {
        // No process plays a person: record the question and let go of the thread. A second
        // step asks again, which changes nothing.
        if files.awaiting(view.head()).is_none() {
            let header = (view.history.len() + 1, role.as_str(), spec.name.as_str());
            let log = StepLog::begin(root, id, header, options.by.as_deref());
            log.line(&format!(
                "waiting for a person: `uwf thread question {id}`, then `uwf thread answer {id}`"
            ));
            let fields = json!({"step": step, "role": role, "agent": spec.name});
            events::append(files, id, "awaiting", tagged(fields, options.by.as_deref()));
        }
        // A question asked again keeps the queue membership it was first asked with.
        let queued = options.from_queue
            || files
                .awaiting(view.head())
                .is_some_and(|asked| asked.queued);
        files
            .set_awaiting(&role, view.head(), queued)
            .map_err(|error| StepError::Awaiting {
                id: id.to_owned(),
                error,
            })?;
        if options.from_queue {
            // Under the lock, so an answer (which takes it) comes strictly after and requeues.
            index::dequeue(root, id)?;
        }
        return Ok(Stepped {
            workflow: view.workflow.name.clone(),
            thread: id.to_owned(),
            head: view.head(),
            role: Some(role),
            done: false,
            awaiting: true,
        });
    }
    let fields = json!({"step": step, "role": role, "agent": spec.name});
    events::append(files, id, "started", tagged(fields, options.by.as_deref()));
    *started = Some(Started {
        step,
        role: role.clone(),
    });
    crate::profile::mark("step: agent resolved, started event");

    let mut attempts = failure::Attempts::of(&view.workflow, &role);
    let hash = loop {
        let agent = (&view, role.as_str(), &spec, step);
        let run = (lock, &mut info, &mut prepared);
        let error = match run_agent(
            store,
            config,
            id,
            options,
            agent,
            run,
            &prepare,
            warm,
            &attempts,
            context.workdir.as_deref(),
        ) {
            Ok(hash) => break hash,
            Err(error) => error,
        };
        let Some(stderr_tail) = error.role_failure() else {
            return Err(error);
        };
        if let Some(signal) = crate::engine::agent::interrupt::caught() {
            let thread = id.to_owned();
            return Err(StepError::Interrupted { thread, signal });
        }
        // A kill stopped the agent (and waits for this lock): the step ends, without retry,
        // as stopped rather than failed.
        if files.check_not_killing().is_err() {
            return Err(StepError::Killed {
                thread: id.to_owned(),
            });
        }
        match attempts.failed(&error.to_string(), stderr_tail) {
            After::Retry => attempts.retrying(files, id, step, &role),
            After::GiveUp if attempts.number() == 1 => return Err(error),
            After::GiveUp => {
                let (attempts, last) = (attempts.number(), Box::new(error));
                return Err(StepError::Attempts { attempts, last });
            }
            After::Route(failure) => {
                let target = view.history.target(&view.workflow);
                let hash = failure.write_step(store, &target, id, &role, &spec.name)?;
                let prepared = Some(prepared.take().unwrap_or_else(prepare)?);
                let stepped = publish_checked(store, id, view, &role, hash, prepared, Some(warm))?;
                failure.routed(id, &role);
                return Ok(stepped);
            }
        }
    };
    let prepared = prepared.take().unwrap_or_else(prepare)?;
    publish_checked(store, id, view, &role, hash, Some(prepared), Some(warm))
}

/// Runs `spec`, the agent of `role`, once (one of the step's [`failure::Attempts`]) and checks
/// the step node it returns. `prepared` gets the moderator and context at `view` meanwhile.
#[allow(clippy::too_many_arguments)]
fn run_agent(
    store: &Store,
    config: &Loaded,
    id: &str,
    options: &StepOptions,
    (view, role, spec, step): (&Current, &str, &AgentSpec, usize),
    (lock, info, prepared): (&run_files::StepLock, &mut RunInfo, &mut Option<Prepared>),
    prepare: &dyn Fn() -> Prepared,
    warm: &mut Warm,
    attempts: &failure::Attempts,
    workdir: Option<&std::path::Path>,
) -> Result<Hash, StepError> {
    let root = store.root();
    // The thread log only grows: a header, then the agent's output as it arrives.
    let label = attempts.agent_label(&spec.name);
    let header = (step, role, label.as_str());
    let log = Arc::new(StepLog::begin(root, id, header, options.by.as_deref()));
    if let Some(line) = attempts.log_line() {
        log.line(&line);
    }
    if let Some(builtin) = warm.in_process(spec) {
        // A relative path it is given (`script --file demo.yaml`) is the thread's, as for a
        // spawned agent.
        let builtin = builtin.in_dir(workdir);
        // This binary's own `agent dry`/`agent script`: the same function, without a process.
        prepared.get_or_insert_with(prepare);
        crate::profile::mark("step: moderator prepared");
        let (history, workflow) = (&view.history, &view.workflow);
        let hash = builtin.run(store, &config.config, (id, role), history, workflow);
        crate::profile::mark("step: built-in agent ran");
        if let Err(e) = &hash {
            log.line(&format!("error: {}", crate::advice::with_hints(e)));
        }
        log.finish();
        let hash = hash.map_err(|source| StepError::Builtin {
            agent: spec.name.clone(),
            source: Box::new(source),
        })?;
        return check(store, view, role, &spec.name, hash);
    }
    let mut invocation = Invocation {
        spec,
        thread: id,
        role,
        env: vec![
            ("UWF_STORAGE_ROOT".into(), root.display().to_string()),
            ("UWF_THREAD".into(), id.to_owned()),
            ("UWF_ROLE".into(), role.to_owned()),
            ("UWF_WORKFLOW".into(), view.workflow.name.clone()),
            ("UWF_WORKFLOW_HASH".into(), view.workflow_hash().to_string()),
            ("UWF_STEP_STARTED_MS".into(), info.started_at.to_string()),
        ],
        log: Some(Arc::clone(&log)),
        passthrough: options.passthrough,
        workdir,
    };
    invocation.env.extend(attempts.env());
    let finished = spawn::run(&invocation, |pid| {
        info.agent_pid = Some(pid);
        info.agent_start = crate::process_group::proc_stat(pid).map(|p| p.start);
        lock.set_info(info);
        prepared.get_or_insert_with(prepare);
    });
    log.finish();
    let finished = finished?;
    let line = spawn::last_line(&finished.stdout).unwrap_or("").to_owned();
    let hash = Hash::parse(&line).map_err(|_| AgentError::NoHash {
        name: spec.name.clone(),
        got: if line.is_empty() {
            "nothing".into()
        } else {
            format!("`{}`", truncate(&line, 80))
        },
        stderr_tail: finished.stderr_tail.clone(),
    })?;
    check(store, view, role, &spec.name, hash)
}

/// The moderator and its context at a step's head, or why the conditions do not compile.
type Prepared = Result<(Moderator, Input), ModeratorError>;

/// Checks the step node `hash` that `agent` returned for `role`: that it is a step
/// of this thread, on its head, for that role, with an output its schema accepts.
fn check(
    store: &Store,
    view: &Current,
    role: &str,
    agent: &str,
    hash: Hash,
) -> Result<Hash, StepError> {
    verify(store, view, role, hash).map_err(|reason| StepError::Rejected {
        agent: agent.to_owned(),
        hash: hash.to_string(),
        reason,
    })?;
    Ok(hash)
}

/// Publishes step node `hash` as the next step of thread `id` after `view`, whose role the
/// moderator chose as `role`: verifies the node, moves the head by
/// compare-and-set (the commit point), extends the chain cache, decides again and archives the
/// thread if it is at `$END`. The caller holds the step lock. `prepared` is the moderator and
/// its context at `view`, when the caller has them; `warm`, when given, keeps the state at the
/// new head for this process's next step.
#[allow(clippy::too_many_arguments)]
pub(crate) fn publish(
    store: &Store,
    id: &str,
    view: Current,
    role: &str,
    agent: &str,
    hash: Hash,
    prepared: Option<(Moderator, Input)>,
    warm: Option<&mut Warm>,
) -> Result<Stepped, StepError> {
    check(store, &view, role, agent, hash)?;
    publish_checked(store, id, view, role, hash, prepared, warm)
}

/// [`publish`] of a step node already checked ([`check`]), or written by the step itself.
fn publish_checked(
    store: &Store,
    id: &str,
    view: Current,
    role: &str,
    hash: Hash,
    prepared: Option<(Moderator, Input)>,
    warm: Option<&mut Warm>,
) -> Result<Stepped, StepError> {
    // Asked to stop (Ctrl-C, SIGTERM, SIGHUP): the head stays where the step found it
    // (the last look before the compare-and-set below).
    if let Some(signal) = crate::engine::agent::interrupt::caught() {
        return Err(StepError::Interrupted {
            thread: id.to_owned(),
            signal,
        });
    }
    let (moderator, context) = match prepared {
        Some(p) => p,
        None => {
            let moderator = Moderator::new(view.workflow.clone())?;
            let context = Input::from_json_text(view.history.context_json());
            (moderator, context)
        }
    };
    // Conditions compiled while the agent ran: one that does not compile fails the step here,
    // before anything is published, as it would have before the agent ran.
    moderator.compiled()?;
    crate::profile::mark("publish: verified");

    // Evaluate at the new step before publishing it, so the index learns the next role with
    // the head (listings show it without reading the thread). A thread whose next position is
    // `$END` is archived once published. If routing cannot decide now, the step still
    // succeeds and the next step reports why.
    let (history, added) = chain::extend_in_memory(store, &view.history, hash)?;
    context.append("steps", added.context_json());
    crate::profile::mark("publish: chain extended");
    let next = moderator.decide_prepared(added.at(), &context).ok();
    let next = next.map(|d| d.next);
    let done = next.as_deref() == Some(END);
    crate::profile::mark("publish: next decided");
    // What the step spent goes into the thread's row with the head, so that listings of costs
    // and the next step's budget check read the row instead of every step.
    let spent = cost::StepSpending::of(store, added.detail);
    index::compare_and_set_next(
        store.root(),
        id,
        view.head(),
        hash,
        (next.as_deref(), spent.change()),
    )?;
    crate::profile::mark("publish: head moved");
    // The previous head's cache files are taken over by the new head's (no inode freed).
    // The cache files of the new head (its history and decision): a session writes them when
    // it lets go of the thread, a lone step now.
    let decision = next
        .clone()
        .filter(|_| decisions::cacheable(&view.workflow))
        .map(|next| (view.workflow_hash(), next));
    let mut warm = warm;
    let saved = Saved {
        thread: id,
        retired: view.head(),
        history: &history,
        decision,
    };
    match warm.as_deref_mut() {
        Some(warm) => {
            warm.defer(store, saved);
            if done {
                warm.flush();
            }
        }
        None => saved.write(store.root()),
    }
    if done {
        lifecycle::archive(store, id, view.workflow_hash(), "done")?;
    }
    let stepped = Stepped {
        workflow: view.workflow.name.clone(),
        thread: id.to_owned(),
        head: hash,
        role: Some(role.to_owned()),
        done,
        awaiting: false,
    };
    if let Some(warm) = warm
        && !done
    {
        let view = Current {
            history,
            workflow: view.workflow,
        };
        let (id, prepared) = (id.to_owned(), (moderator, context));
        warm.keep(Kept {
            id,
            view,
            prepared,
            next,
        });
    }
    Ok(stepped)
}

fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        format!("{}…", text.chars().take(max).collect::<String>())
    }
}

/// The checks a step makes of what it builds on (here, beside [`StepError`], so that `view`
/// does not depend on `step`).
impl Current {
    /// Checks, by reading and re-hashing them, the nodes this step builds on that the cached
    /// history stands in for: the start node, the head step and its output (the moderator's
    /// context). The workflow node was read (and so verified) by [`Current::load`]. A constant
    /// number of reads whatever the chain's length; older steps are `uwf cas fsck`'s to check.
    pub(crate) fn verify_base(&self, store: &Store, id: &str) -> Result<(), StepError> {
        let damaged = |what, hash| {
            move |error| StepError::Damaged {
                thread: id.to_owned(),
                what,
                hash,
                error,
            }
        };
        let start = self.history.start_hash();
        store.get(start).map_err(damaged("start node", start))?;
        let head = self.head();
        if head != start {
            let node = store.get(head).map_err(damaged("head step", head))?;
            let step = chain::read_step(&node)?;
            store
                .get(step.output)
                .map_err(damaged("head step's output", step.output))?;
        }
        Ok(())
    }

    /// Checks that `role`'s output schema node is there and intact before an agent is asked to
    /// write an output of that type (once per process).
    pub(crate) fn verify_schema(
        &self,
        store: &Store,
        id: &str,
        role: &str,
        warm: &mut Warm,
    ) -> Result<(), StepError> {
        let schema = role_schema(&self.workflow, role)?;
        if warm.schema_checked(schema) {
            return Ok(());
        }
        store.get(schema).map_err(|error| StepError::Damaged {
            thread: id.to_owned(),
            what: "role schema",
            hash: schema,
            error,
        })?;
        warm.schema_ok(schema);
        Ok(())
    }
}
