//! `uwf thread rebase` (`docs/workflows.md#fixing-a-workflow-threads-run-on`): a thread's history
//! written again onto another version of its workflow — typically the fixed version of one it got
//! stuck on — as a new thread that takes its place.
//!
//! The new chain has a new start node (the new version, the same prompt) and a new step node
//! for every step, with the same role, agent, detail and output. An output stays the same node
//! when its role's schema did not change; otherwise its payload is put again, typed by the new
//! schema (which validates it). The old thread is archived as `rebased` and points to the new
//! one; the new one has the old one as its parent in the index (`thread show` says both).
//!
//! What is checked, before anything is written: every step's role is a role of the new version,
//! and every output fits that role's schema; each step that does not is named, with why.
//! Conditions are not evaluated again: history is not re-routed, and the path it took need not
//! be one the new graph would take. The next step routes from the last step's role.
//!
//! Architecture Invariant: a rebase holds the old thread's step lock (no step runs on it
//! meanwhile; a running one makes the rebase busy, exit 75) and a store pin (GC keeps the new
//! nodes until the index names them). The old thread's archive and the new thread's entry are
//! one index transaction, so a refused or interrupted rebase leaves the old thread as it was,
//! and at most nodes that nothing names, which GC removes.

use std::path::Path;

use serde_json::{Value, json};

use crate::advice::Advice;
use crate::cas::canonical::node_hash;
use crate::cas::{Hash, Store, StoreError, builtin};
use crate::engine::chain::{self, Chain, ChainError, Start};
use crate::engine::cycle::lifecycle;
use crate::engine::thread::context::{self, ThreadContext};
use crate::engine::thread::events;
use crate::engine::thread::family;
use crate::engine::thread::index::{self, Successor, ThreadIndexError};
use crate::engine::thread::run_files::RunFiles;
use crate::engine::thread::summary::Summary;
use crate::engine::thread::view::{ThreadView, ViewError};
use crate::engine::workflow::registry::{self, RegistryError};
use crate::engine::workflow::{Workflow, WorkflowError, decisions};

/// Why a rebase was refused or failed. Nothing was changed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RebaseError {
    #[error("thread {thread} is already on version {hash} of `{workflow}`: nothing to rebase")]
    SameVersion {
        thread: String,
        workflow: String,
        hash: Hash,
    },
    #[error(
        "thread {thread} runs a sub-workflow for a step of thread {parent}: it lives and ends with that step, and is not rebased on its own"
    )]
    Child { thread: String, parent: String },
    #[error("`{0}` is not NAME@HASH: the part after `@` is not a workflow hash")]
    BadVersion(String),
    #[error("{hash} is a version of `{found}`, not of `{name}`")]
    OtherName {
        name: String,
        hash: Hash,
        found: String,
    },
    #[error(
        "thread {thread} cannot be rebased onto version {hash} of `{workflow}`: {} of its steps {} not fit:\n{}",
        misfits.len(),
        if misfits.len() == 1 { "does" } else { "do" },
        misfits.iter().map(|m| format!("  - {m}")).collect::<Vec<_>>().join("\n")
    )]
    Misfits {
        thread: String,
        workflow: String,
        hash: Hash,
        misfits: Vec<Misfit>,
    },
    #[error(transparent)]
    Index(#[from] ThreadIndexError),
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    View(#[from] ViewError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Chain(#[from] ChainError),
}

impl From<WorkflowError> for RebaseError {
    fn from(e: WorkflowError) -> RebaseError {
        RebaseError::Registry(e.into())
    }
}

impl Advice for RebaseError {
    fn hints(&self) -> Vec<String> {
        match self {
            RebaseError::SameVersion { workflow, .. } => vec![
                "fix the workflow and register it (`uwf workflow put FILE`), then rebase onto the new version".to_owned(),
                format!("`uwf workflow history {workflow}` lists its versions; --workflow {workflow}@HASH picks one"),
            ],
            RebaseError::Child { parent, .. } => {
                vec![format!("rebase thread {parent} instead")]
            }
            RebaseError::BadVersion(_) | RebaseError::OtherName { .. } => {
                vec!["`uwf workflow history NAME` lists a workflow's versions".to_owned()]
            }
            RebaseError::Misfits { workflow, .. } => vec![
                format!("`uwf workflow show {workflow}` shows the version's roles and schemas"),
                "change the workflow so that the old outputs fit (a new field optional, a role kept), register it, and rebase again".to_owned(),
            ],
            RebaseError::Index(e) => e.hints(),
            RebaseError::Registry(e) => e.hints(),
            RebaseError::View(e) => e.hints(),
            RebaseError::Store(e) => e.hints(),
            RebaseError::Chain(e) => e.hints(),
        }
    }

    fn is_busy(&self) -> bool {
        match self {
            RebaseError::Index(e) => e.is_busy(),
            RebaseError::Registry(e) => e.is_busy(),
            RebaseError::View(e) => e.is_busy(),
            RebaseError::Store(e) => e.is_busy(),
            RebaseError::Chain(e) => e.is_busy(),
            _ => false,
        }
    }
}

/// A step that does not fit the new version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Misfit {
    /// 1-based, as `thread steps` numbers them.
    pub index: usize,
    pub step: Hash,
    pub role: String,
    pub problem: Problem,
}

/// Why a step does not fit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Problem {
    /// The version has no such role.
    NoRole { roles: Vec<String> },
    /// The output does not validate against the role's schema.
    Output {
        schema: Hash,
        violations: Vec<String>,
    },
}

impl std::fmt::Display for Misfit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "step {} ({}, role `{}`): ",
            self.index, self.step, self.role
        )?;
        match &self.problem {
            Problem::NoRole { roles } => write!(
                f,
                "the version has no role `{}` (roles: {})",
                self.role,
                roles.join(", ")
            ),
            Problem::Output { schema, violations } => write!(
                f,
                "its output does not match the role's schema {schema}: {}",
                violations.join("; ")
            ),
        }
    }
}

/// What a rebase did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rebased {
    /// The new thread.
    pub thread: String,
    pub head: Hash,
    /// The workflow's name and the version the new thread is on.
    pub workflow: String,
    pub version: Hash,
    /// The old thread, now archived as `rebased`, and the version it was on.
    pub from: String,
    pub from_version: Hash,
    pub steps: usize,
    /// How many outputs were put again under a changed schema.
    pub retyped: usize,
}

impl Rebased {
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "workflow": self.workflow,
            "thread": self.thread,
            "head": self.head.to_string(),
            "version": self.version.to_string(),
            "rebasedFrom": self.from,
            "fromVersion": self.from_version.to_string(),
            "steps": self.steps,
            "retyped": self.retyped,
        })
    }
}

/// Adds what `thread show` says of a rebase to a thread's JSON: `rebasedOnto`, the thread a
/// rebased thread goes on as, and `rebasedFrom`, the thread this one took the place of (each
/// only when there is one). Two index reads at most.
pub(crate) fn show(root: &Path, summary: &Summary, json: &mut Value) {
    if summary.status == index::REBASED
        && let Ok(Some(new)) = index::successor(root, &summary.id)
    {
        json["rebasedOnto"] = new.into();
    }
    if let Some(old) = index::rebased_from(root, &summary.id) {
        json["rebasedFrom"] = old.into();
    }
}

/// Rebases active thread `id` onto `onto` — `NAME` (its current version), `NAME@HASH`, or a
/// workflow hash — or, when `None`, onto the current version of the thread's own workflow.
pub(crate) fn rebase(store: &Store, id: &str, onto: Option<&str>) -> Result<Rebased, RebaseError> {
    let root = store.root();
    index::active_head(root, id)?;
    if let Some(parent) = family::parent(root, id) {
        return Err(RebaseError::Child {
            thread: id.to_owned(),
            parent: parent.thread,
        });
    }
    let files = RunFiles::new(root, id);
    // As a step does: a running step (here or on any machine) or a kill under way is busy.
    let lock = files.try_lock()?;
    files.check_not_killing()?;
    // The new nodes are kept from GC until the index names them (see `cas::gc`).
    let _pin = store.pin()?;
    // Children an earlier step's sub-workflow left active (that step died) end now.
    lifecycle::end_children(store, id);
    let head = index::active_head(root, id)?;
    let old = ThreadView::at(store, id, head)?;
    let (version, workflow) = target(store, &old.workflow, onto)?;
    if version == old.workflow_hash {
        return Err(RebaseError::SameVersion {
            thread: id.to_owned(),
            workflow: workflow.name,
            hash: version,
        });
    }
    let outputs = fit(store, &old.chain, &workflow).map_err(|misfits| RebaseError::Misfits {
        thread: id.to_owned(),
        workflow: workflow.name.clone(),
        hash: version,
        misfits,
    })?;
    let (new_head, retyped) = write(store, &old.chain, version, &outputs)?;
    let new_id = index::new_id();
    let successor = Successor {
        id: &new_id,
        workflow: version,
        head: new_head,
        steps: old.chain.steps.len() as u64,
        prompt: &old.chain.start.prompt,
    };
    // It goes on where the old one worked, with the agents its roles were bound to (a role new
    // in this version takes what config.yaml names), before the index names it.
    let recorded = context::read(root, id).map_err(ThreadIndexError::from)?;
    if recorded != ThreadContext::default() {
        context::write(root, &new_id, &recorded.for_fork()).map_err(ThreadIndexError::from)?;
    }
    index::rebase(root, id, head, &successor)?;
    chain::drop_spare(store, id);
    decisions::drop_spare(store, id);
    files.clear_awaiting();
    lock.record_success(&json!({
        "workflow": old.workflow.name,
        "thread": id,
        "head": head.to_string(),
        "status": index::REBASED,
        "done": true,
        "rebasedOnto": new_id,
    }));
    events::append(
        &files,
        id,
        index::REBASED,
        json!({"head": head.to_string(), "onto": new_id}),
    );
    drop(lock);
    Ok(Rebased {
        thread: new_id,
        head: new_head,
        workflow: workflow.name,
        version,
        from: id.to_owned(),
        from_version: old.workflow_hash,
        steps: old.chain.steps.len(),
        retyped,
    })
}

/// The version `onto` names, or the current version of `old`'s name.
fn target(
    store: &Store,
    old: &Workflow,
    onto: Option<&str>,
) -> Result<(Hash, Workflow), RebaseError> {
    let Some((name, hash)) = onto.and_then(|o| o.split_once('@')) else {
        return Ok(registry::load(store, onto.unwrap_or(&old.name))?);
    };
    let hash =
        Hash::parse(hash).map_err(|_| RebaseError::BadVersion(onto.unwrap_or_default().into()))?;
    let workflow = Workflow::load(store, hash)?;
    if workflow.name != name {
        return Err(RebaseError::OtherName {
            name: name.to_owned(),
            hash,
            found: workflow.name,
        });
    }
    Ok((hash, workflow))
}

/// Each step's output schema in `workflow` and whether its output is already of that type;
/// or every step that does not fit.
fn fit(
    store: &Store,
    chain: &Chain,
    workflow: &Workflow,
) -> Result<Vec<(Hash, bool)>, Vec<Misfit>> {
    let mut fits = Vec::with_capacity(chain.steps.len());
    let mut misfits = Vec::new();
    for (i, step) in chain.steps.iter().enumerate() {
        let misfit = |problem| Misfit {
            index: i + 1,
            step: step.hash,
            role: step.role.clone(),
            problem,
        };
        let Some(role) = workflow.roles.get(&step.role) else {
            misfits.push(misfit(Problem::NoRole {
                roles: workflow.roles.keys().cloned().collect(),
            }));
            continue;
        };
        let output = step.output();
        // A step recording the role's failure (`onFailure`) keeps its failure node as it is.
        let failure = crate::cas::builtin::hash_of("failure");
        if node_hash(failure, &output) == step.output_hash {
            fits.push((failure, true));
            continue;
        }
        // The same node: validated against this very schema when it was put.
        if node_hash(role.meta, &output) == step.output_hash {
            fits.push((role.meta, true));
            continue;
        }
        let checked = store
            .schema(role.meta)
            .map_err(|e| vec![e.to_string()])
            .and_then(|schema| {
                schema
                    .validate(&output)
                    .map_err(|v| v.iter().map(ToString::to_string).collect())
            });
        match checked {
            Ok(()) => fits.push((role.meta, false)),
            Err(violations) => misfits.push(misfit(Problem::Output {
                schema: role.meta,
                violations,
            })),
        }
    }
    if misfits.is_empty() {
        Ok(fits)
    } else {
        Err(misfits)
    }
}

/// Writes the new start node and steps (and the outputs whose type changed) in one batch, in
/// order. Returns the new head and how many outputs were put again.
fn write(
    store: &Store,
    chain: &Chain,
    version: Hash,
    outputs: &[(Hash, bool)],
) -> Result<(Hash, usize), RebaseError> {
    let start = Start {
        workflow: version,
        prompt: chain.start.prompt.clone(),
        parent: chain.start.parent,
        by: chain.start.by.clone(),
    };
    let start_type = builtin::hash_of(start.type_name());
    let start = serde_json::to_value(&start).expect("a start node serializes");
    let step_type = builtin::hash_of("step");
    let start_hash = node_hash(start_type, &start);
    let mut nodes: Vec<(Hash, Value)> = vec![(start_type, start)];
    let mut prev: Option<Hash> = None;
    let mut retyped = 0;
    for (step, (schema, same)) in chain.steps.iter().zip(outputs) {
        let output_hash = if *same {
            step.output_hash
        } else {
            let output = step.output();
            let hash = node_hash(*schema, &output);
            nodes.push((*schema, output));
            retyped += 1;
            hash
        };
        let node = json!({
            "start": start_hash.to_string(),
            "prev": prev.map(|p| p.to_string()),
            "role": step.role,
            "output": output_hash.to_string(),
            "detail": step.detail.to_string(),
            "agent": step.agent,
        });
        prev = Some(node_hash(step_type, &node));
        nodes.push((step_type, node));
    }
    let batch: Vec<(Hash, &Value)> = nodes.iter().map(|(t, p)| (*t, p)).collect();
    store.put_all(&batch).map_err(|(_, e)| e)?;
    Ok((prev.unwrap_or(start_hash), retyped))
}
