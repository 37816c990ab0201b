//! Thread operations beyond the step: start, fork, kill, status, and id lookup.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::cas::{Hash, Store, builtin};
use crate::engine::thread::view::ThreadView;

use crate::engine::agent::spawn;
use crate::engine::chain;
use crate::engine::config::Config;
use crate::engine::thread::author;
use crate::engine::thread::context::{self, ThreadContext};
use crate::engine::thread::family::{self, ParentLink};
use crate::engine::thread::forks;
use crate::engine::thread::index::{self, State, ThreadIndexError};
use crate::engine::thread::run_files::RunFiles;
pub(crate) use crate::engine::thread::summary::{
    Summary, ThreadError, descendants, family_json, plural, resolve_id, resolve_step,
};
use crate::engine::workflow::registry;

/// Starts a thread of `workflow` (a name or hash) with `prompt`. Returns `(workflow name, id)`.
/// Records no agent context: its steps run where they are taken, with the agents the
/// configuration names then (see [`start_in`]).
#[cfg(test)]
pub(crate) fn start(
    store: &Store,
    workflow: &str,
    prompt: &str,
) -> Result<(String, String), ThreadError> {
    start_with(store, workflow, prompt, None, None)
}

/// Starts a thread as [`start`] does, recording its agent context: it runs in `workdir` and
/// keeps the agents `config` binds its roles to now (with no configuration — it does not
/// load — each step takes the agent the configuration names then). `by`, who starts it, is
/// recorded in its start node.
pub(crate) fn start_in(
    store: &Store,
    workflow: &str,
    prompt: &str,
    (workdir, config): (&Path, Option<&Config>),
    by: Option<&str>,
) -> Result<(String, String), ThreadError> {
    start_with(store, workflow, prompt, Some((workdir, config)), by)
}

fn start_with(
    store: &Store,
    workflow: &str,
    prompt: &str,
    setting: Option<(&Path, Option<&Config>)>,
    by: Option<&str>,
) -> Result<(String, String), ThreadError> {
    let by = author::checked(by)?;
    if prompt.trim().is_empty() {
        return Err(ThreadError::EmptyPrompt);
    }
    // From the start node until the index names it: GC keeps it (see `cas::gc`).
    let _pin = store.pin()?;
    let (hash, w) = registry::load(store, workflow)?;
    let start = chain::Start {
        workflow: hash,
        prompt: prompt.to_owned(),
        parent: None,
        by,
    };
    let payload = serde_json::to_value(&start).expect("a start node serializes");
    let start = store.put(builtin::hash_of(start.type_name()), &payload)?;
    let id = index::new_id();
    if let Some((workdir, config)) = setting {
        // Before the index names the thread, so no step of it runs without its context.
        let recorded = ThreadContext {
            workdir: Some(workdir.to_path_buf()),
            bindings: config.map(|c| c.bindings(&w)).unwrap_or_default(),
            ..Default::default()
        };
        context::write(store.root(), &id, &recorded)?;
    }
    index::add_at(store.root(), &id, start, hash, None, Some(0), Some(prompt))?;
    Ok((w.name, id))
}

/// Starts a child thread of `workflow` for a sub-workflow: its start node names the
/// parent's head, and the link to the parent thread is recorded before the child's first step.
/// Returns `(workflow name, id)`.
pub(crate) fn start_child(
    store: &Store,
    workflow: &str,
    prompt: &str,
    parent: &ParentLink,
    config: &Config,
) -> Result<(String, String), ThreadError> {
    if prompt.trim().is_empty() {
        return Err(ThreadError::EmptyPrompt);
    }
    let _pin = store.pin()?;
    let (hash, w) = registry::load(store, workflow)?;
    let start = store.put(
        builtin::hash_of("start"),
        &json!({"workflow": hash.to_string(), "prompt": prompt, "parent": parent.head.to_string()}),
    )?;
    let id = index::new_id();
    // A child works where its parent does, with the agents the configuration binds its own
    // workflow's roles to.
    let recorded = ThreadContext {
        workdir: context::read(store.root(), &parent.thread)?.workdir,
        bindings: config.bindings(&w),
        ..Default::default()
    };
    context::write(store.root(), &id, &recorded)?;
    family::link(store.root(), &id, parent)?;
    index::add_at(
        store.root(),
        &id,
        start,
        hash,
        Some(&parent.thread),
        Some(0),
        Some(prompt),
    )?;
    Ok((w.name, id))
}

/// Starts a new thread whose head is `from` (a step or start node), forked by `by` (recorded
/// in the new thread's change feed). Returns `(workflow name, id, head)`.
pub(crate) fn fork(
    store: &Store,
    from: Hash,
    by: Option<&str>,
) -> Result<(String, String, Hash), ThreadError> {
    fork_from(store, from, None, by)
}

/// [`fork`], naming the thread `from` belongs to (found in the index when not given); the
/// lineage is recorded in `forks.jsonl` before the new thread enters the index.
pub(crate) fn fork_from(
    store: &Store,
    from: Hash,
    thread: Option<&str>,
    by: Option<&str>,
) -> Result<(String, String, Hash), ThreadError> {
    let by = author::checked(by)?;
    // `from` may be a step no head reaches (a step that was never published): pinned and
    // touched with the nodes it names, GC keeps them until the new thread's head names them.
    let _pin = store.pin()?;
    let node = store.get(from)?;
    if node.type_hash != builtin::hash_of("step") && !builtin::is_start(node.type_hash) {
        return Err(ThreadError::NotForkable { hash: from });
    }
    store.keep(from)?;
    for named in store.node_refs(&node)? {
        store.keep(named)?;
    }
    let id = index::new_id();
    let view = ThreadView::at(store, &id, from)?;
    let source = match thread {
        Some(t) => Some(t.to_owned()),
        None => forks::source_of(store, from),
    };
    forks::record(store.root(), &id, source.as_deref(), from)?;
    if let Some(source) = &source {
        let inherited = context::read(store.root(), source)?;
        if inherited != ThreadContext::default() {
            context::write(store.root(), &id, &inherited.for_fork())?;
        }
    }
    index::add_at(
        store.root(),
        &id,
        from,
        view.workflow_hash,
        source.as_deref(),
        Some(view.chain.steps.len() as u64),
        Some(&view.chain.start.prompt),
    )?;
    let fields = json!({"from": from.to_string(), "source": source});
    author::record(
        &RunFiles::new(store.root(), &id),
        &id,
        "forked",
        by.as_deref(),
        fields,
    );
    Ok((view.workflow.name, id, from))
}

/// A thread's summary ([`crate::engine::thread::summary::summary`]), after ending the children
/// its parent step left behind: a parent whose step died mid-child (`kill -9`) left the child
/// active, and looking at the parent ends it.
pub(crate) fn summary(store: &Store, id: &str) -> Result<Summary, ThreadError> {
    end_orphaned_children(store, id, &RunFiles::new(store.root(), id));
    crate::engine::thread::summary::summary(store, id)
}

/// [`summary`] for a thread whose place in the index is already known.
pub(crate) fn summary_at(
    store: &Store,
    id: &str,
    head: Hash,
    archived: Option<String>,
) -> Result<Summary, ThreadError> {
    if archived.is_none() {
        end_orphaned_children(store, id, &RunFiles::new(store.root(), id));
    }
    crate::engine::thread::summary::summary_at(store, id, head, archived)
}

/// Archives thread `id` at its head with `status` and drops its spare cache files.
pub(crate) fn archive(
    store: &Store,
    id: &str,
    workflow: Hash,
    status: &str,
) -> Result<crate::pg::ArchivedThread, ThreadIndexError> {
    let archived = index::archive(store.root(), id, workflow, status)?;
    chain::drop_spare(store, id);
    crate::engine::workflow::decisions::drop_spare(store, id);
    Ok(archived)
}

/// Stops a running step's agent (SIGTERM, then SIGKILL) and archives the thread as `killed`.
///
/// Synchronous: returns once the agent's process group is gone and the thread is archived, its
/// last outcome (what `wait` shows) and its change feed saying `killed`. The kill lock is taken
/// first and held to the end, so no step can start between the one stopped here and the
/// archive (a step that takes the step lock meanwhile gives up at once, see `step::step`).
/// Threads that sub-workflows of this one started and that are still active are killed first
/// too, children before parents. `by`, who kills it, is recorded in the change feed and log.
pub(crate) fn kill(store: &Store, id: &str, by: Option<&str>) -> Result<Hash, ThreadError> {
    let by = author::checked(by)?;
    let by = by.as_deref();
    let root = store.root();
    index::active_head(root, id)?;
    for child in family::children(root, id) {
        if let Ok(State::Active { .. }) = index::state(root, &child) {
            match kill(store, &child, by) {
                // Ended meanwhile (done, or killed by someone else): nothing left to stop.
                Ok(_) | Err(ThreadError::Index(ThreadIndexError::Archived { .. })) => {}
                Err(e) => return Err(e),
            }
        }
    }
    let files = RunFiles::new(root, id);
    let _killing = files.try_kill_lock()?;
    // Another kill may have archived it between the check above and the lock.
    let head = index::active_head(root, id)?;
    // A step may be anywhere in its cycle: poll until its agent is known (then stop it) and the
    // step process, which fails once its agent is gone, releases the lock.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut stopped = None;
    let lock = loop {
        match files.try_lock() {
            Ok(lock) => break Some(lock),
            // Over PostgreSQL, a step on another machine: its agent is out of reach, but the
            // archive (one statement, which also drops the lease) makes its publication fail,
            // so nothing more lands on the thread. No lock, so no outcome recorded here.
            Err(ThreadIndexError::Busy { .. }) if files.stepped_elsewhere() => break None,
            Err(ThreadIndexError::Busy { .. }) if Instant::now() < deadline => {
                if let Some(pgid) = files.run_info().and_then(|i| i.agent_pid)
                    && stopped != Some(pgid)
                {
                    crate::process_group::stop_group(pgid, spawn::KILL_GRACE);
                    stopped = Some(pgid);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(ThreadIndexError::Busy { .. }) => {
                return Err(ThreadError::KillTimeout(id.to_owned()));
            }
            Err(e) => return Err(e.into()),
        }
    };
    // The step has let go; what is left of the agent's group (SIGKILLed, or children that
    // outlived it) is gone before this returns.
    if let Some(pgid) = stopped {
        let gone_by = Instant::now() + Duration::from_secs(2);
        while crate::process_group::group_alive(pgid) && Instant::now() < gone_by {
            crate::process_group::signal_group(pgid, nix::sys::signal::Signal::SIGKILL);
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let view = ThreadView::at(store, id, head)?;
    let archived = archive(store, id, view.workflow_hash, "killed")?;
    files.clear_awaiting();
    let outcome = json!({
        "workflow": view.workflow.name,
        "thread": id,
        "head": archived.head.to_string(),
        "status": "killed",
        "done": true,
    });
    if let Some(lock) = &lock {
        lock.record_success(&outcome);
    }
    let head_text = archived.head.to_string();
    author::record(&files, id, "killed", by, json!({ "head": head_text }));
    drop(lock);
    Ok(archived.head)
}

/// Ends the children of thread `id` that are still active: a child lives only as
/// long as the parent's step that started it, so the caller, holding `id`'s step lock (no step
/// of `id` runs), finds any active child orphaned — its step failed, was stopped, or died — and
/// kills it like `thread kill`: its agents' groups are stopped and it is archived as `killed`,
/// its own children first. Best effort: a child that cannot be killed now (busy with a kill of
/// its own, or its step lock still held) is left for the next sweep. Returns the children
/// killed. Costs one failed `open` for a thread that never had a child.
pub(crate) fn end_children(store: &Store, id: &str) -> Vec<String> {
    let root = store.root();
    active_children(root, id)
        .into_iter()
        .filter(|child| kill(store, child, None).is_ok())
        .collect()
}

/// The children of `id` that are active.
fn active_children(root: &Path, id: &str) -> Vec<String> {
    family::children(root, id)
        .into_iter()
        .filter(|child| matches!(index::state(root, child), Ok(State::Active { .. })))
        .collect()
}

/// [`end_children`] for a reader (`thread show`): only when `id` has an active child while no
/// step of `id` runs, under `id`'s step lock taken for that moment (a step starting then is
/// told the thread is busy, as with any holder).
fn end_orphaned_children(store: &Store, id: &str, files: &RunFiles) {
    if active_children(store.root(), id).is_empty() || files.is_running() {
        return;
    }
    if let Ok(_lock) = files.try_lock() {
        end_children(store, id);
    }
}
