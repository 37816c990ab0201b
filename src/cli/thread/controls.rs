//! `uwf thread pause`, `resume`, `rebind` and `budget`, and the working directory a new thread records.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::super::Out;
use crate::cas::Store;
use crate::cli::error::{CliResult, bail};
use crate::engine::config::{self, budget::Budget};
use crate::engine::cycle::{controls, lifecycle};
use crate::engine::thread::cost;

/// The working directory a thread started now records: `given`, or this process's directory,
/// made absolute (it is used from other directories and machines later).
pub(crate) fn workdir(given: Option<&Path>) -> CliResult<PathBuf> {
    let dir = match given {
        Some(dir) => dir.to_path_buf(),
        None => std::env::current_dir().map_err(|e| {
            crate::cli::error::user_error!("cannot read the current directory: {e}")
        })?,
    };
    match std::fs::canonicalize(&dir) {
        Ok(dir) if dir.is_dir() => Ok(dir),
        Ok(_) => bail!("--workdir {}: not a directory", dir.display()),
        Err(e) => bail!("--workdir {}: {e}", dir.display()),
    }
}

/// `thread pause` (`paused`) and `thread resume`.
pub(super) fn pause(
    store: &Store,
    thread: &str,
    (paused, by): (bool, Option<&str>),
    out: &mut Out,
) -> CliResult<()> {
    let id = lifecycle::resolve_id(store.root(), thread)?;
    let was = controls::set_paused(store, &id, paused, by)?;
    if was == paused {
        let state = if paused { "paused" } else { "not paused" };
        eprintln!("uwf: thread {id} was {state} already");
    } else if paused
        && crate::engine::thread::run_files::RunFiles::new(store.root(), &id).is_running()
    {
        eprintln!("uwf: thread {id} is paused; the step it runs now finishes first");
    }
    let text = if paused {
        format!("Thread {id} is paused: no step starts until `uwf thread resume {id}`.")
    } else {
        format!("Thread {id} is not paused: its steps may run.")
    };
    out.said(&text, &id, &json!({"thread": id, "paused": paused}))?;
    Ok(())
}

/// `thread rebind`: prints the thread's bindings after the change.
pub(super) fn rebind(
    store: &Store,
    thread: &str,
    changes: &[String],
    by: Option<&str>,
    out: &mut Out,
) -> CliResult<()> {
    let root = store.root();
    let id = lifecycle::resolve_id(root, thread)?;
    let config = config::load(root)?;
    let bindings = controls::rebind(store, &config.config, &id, changes, by)?;
    let agents: serde_json::Map<String, serde_json::Value> = bindings
        .into_iter()
        .map(|(role, b)| (role, json!(b.name)))
        .collect();
    let bound: Vec<String> = agents
        .iter()
        .map(|(role, agent)| format!("{role}={}", agent.as_str().unwrap_or_default()))
        .collect();
    let text = format!("Thread {id} plays its roles with: {}.", bound.join(", "));
    out.said(&text, &id, &json!({"thread": id, "agents": agents}))?;
    Ok(())
}

/// `thread budget`: with limits, sets them as the thread's own (a raise); a thread that waited
/// at its budget and is under it now goes on (`resumed`); then prints the budget and what the
/// thread spent.
pub(super) fn budget(
    store: &Store,
    thread: &str,
    limits: (Option<u64>, Option<f64>),
    by: Option<&str>,
    out: &mut Out,
) -> CliResult<()> {
    let root = store.root();
    let id = lifecycle::resolve_id(root, thread)?;
    start_budget(root, &id, limits, by)?;
    let config = config::load(root)?.config;
    let summary = lifecycle::summary(store, &id)?;
    // Under its budget now (raised here, or in `config.yaml`): a thread that waited at it
    // goes on, and a worker takes it again if it is queued.
    let resumed = !summary.done()
        && cost::resume_under_budget(store, &id, summary.head, &summary.workflow, &config)?;
    let json = cost::show_json(store, &id, summary.head, &summary.workflow, &config)?;
    let said = match cost::budget_words(&json["budget"]).as_str() {
        "none" => "no budget".to_owned(),
        limits => format!("a budget of {limits}"),
    };
    let spent = cost::line_of(&json["cost"]).unwrap_or_default();
    let mut text = format!("Thread {id} has {said}; it spent {spent}.");
    if resumed {
        text.push_str(" It no longer waits at its budget: it can step again.");
    }
    let mut result = json!({"thread": id});
    if resumed {
        result["resumed"] = true.into();
    }
    if let (Some(r), serde_json::Value::Object(j)) = (result.as_object_mut(), json) {
        r.extend(j);
    }
    out.said(&text, &id, &result)?;
    Ok(())
}

/// Sets thread `id`'s own budget from `--max-tokens` and `--max-cost`, when either is given.
pub(super) fn start_budget(
    root: &Path,
    id: &str,
    (max_tokens, max_cost): (Option<u64>, Option<f64>),
    by: Option<&str>,
) -> CliResult<()> {
    let budget = Budget {
        max_tokens,
        max_cost,
    };
    if !budget.is_empty() {
        cost::set_budget(root, id, budget, by)?;
    }
    Ok(())
}
