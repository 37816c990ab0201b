//! What a thread is and where it stands, for a reader: a thread or step found by a prefix, a
//! thread's summary (`thread show`, `thread list`, the mount's `status`), its family; and
//! [`ThreadError`], which these and the lifecycle's operations share.

use crate::advice::Advice;
use std::path::Path;

use serde_json::{Value, json};

use crate::cas::{Hash, Store, builtin};
use crate::engine::chain;
use crate::engine::storage::index_files;
use crate::engine::thread::context;
use crate::engine::thread::cost;
use crate::engine::thread::family;
use crate::engine::thread::index::{self, State, ThreadIndexError};
use crate::engine::thread::run_files::RunFiles;
use crate::engine::thread::view::{ThreadView, ViewError};
use crate::engine::workflow::END;
use crate::engine::workflow::moderator::Moderator;
use crate::engine::workflow::registry::RegistryError;

/// Errors of thread operations.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ThreadError {
    #[error(
        "the prompt is empty: say what the thread should do (-p TEXT, -p - for stdin, or --prompt-file FILE)"
    )]
    EmptyPrompt,
    #[error("`{prefix}` matches {} threads: {}", candidates.len(), candidates.join(", "))]
    Ambiguous {
        prefix: String,
        candidates: Vec<String>,
    },
    #[error("`{prefix}` matches {} nodes: {}", candidates.len(), candidates.join(", "))]
    AmbiguousStep {
        prefix: String,
        candidates: Vec<String>,
    },
    #[error("no step or start node matches `{0}`")]
    NoSuchStep(String),
    #[error("`{0}` is too short to name a step")]
    ShortStepPrefix(String),
    #[error("`{0}` is too short to name a thread")]
    ShortThreadPrefix(String),
    #[error("thread {id} has {}; there is no step {index}", plural(*steps, "step"))]
    NoStepAt {
        id: String,
        index: i64,
        steps: usize,
    },
    #[error("{hash} is not a step or start node, so nothing can be forked from it")]
    NotForkable { hash: Hash },
    #[error(
        "could not stop the step on thread {0}: its step lock is still held after the agent was killed"
    )]
    KillTimeout(String),
    #[error(transparent)]
    Index(#[from] ThreadIndexError),
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    View(#[from] ViewError),
    #[error(transparent)]
    Store(#[from] crate::cas::StoreError),
    #[error(transparent)]
    Chain(#[from] chain::ChainError),
    #[error(transparent)]
    Files(#[from] index_files::IndexError),
    #[error(transparent)]
    BadName(#[from] crate::engine::thread::author::BadName),
}

impl Advice for ThreadError {
    fn hints(&self) -> Vec<String> {
        match self {
            ThreadError::BadName(e) => e.hints(),
            ThreadError::Index(e) => e.hints(),
            ThreadError::Registry(e) => e.hints(),
            ThreadError::View(e) => e.hints(),
            ThreadError::Store(e) => e.hints(),
            ThreadError::Chain(e) => e.hints(),
            ThreadError::Files(e) => e.hints(),
            ThreadError::Ambiguous { .. } => vec!["give more of the id".to_owned()],
            ThreadError::ShortThreadPrefix(_) => vec![
                format!(
                    "name a thread by its id or a unique prefix of {MIN_PREFIX} or more symbols"
                ),
                "`uwf thread list` lists the threads".to_owned(),
            ],
            ThreadError::AmbiguousStep { .. } => vec!["give more of the hash".to_owned()],
            ThreadError::NoSuchStep(_) | ThreadError::ShortStepPrefix(_) => vec![
                "name a step by its hash, a unique prefix of 4 or more symbols, or THREAD:INDEX \
                 (`T:1` is the first step, `T:-1` the head, `T:0` the start)"
                    .to_owned(),
                "`uwf thread steps <thread>` lists a thread's steps".to_owned(),
            ],
            ThreadError::NoStepAt { id, .. } => {
                vec![format!("`uwf thread steps {id}` lists its steps")]
            }
            _ => Vec::new(),
        }
    }
    fn is_busy(&self) -> bool {
        match self {
            ThreadError::Index(e) => e.is_busy(),
            ThreadError::Registry(e) => e.is_busy(),
            ThreadError::View(e) => e.is_busy(),
            ThreadError::Store(e) => e.is_busy(),
            ThreadError::Chain(e) => e.is_busy(),
            ThreadError::Files(e) => e.is_busy(),
            _ => false,
        }
    }
}

/// Finds a thread by its id or a unique prefix of it (case-insensitive).
pub(crate) fn resolve_id(root: &Path, text: &str) -> Result<String, ThreadError> {
    let wanted = text.trim().to_ascii_uppercase();
    if !wanted.is_empty() && index::exists(root, &wanted)? {
        return Ok(wanted);
    }
    if wanted.chars().count() < MIN_PREFIX {
        return Err(ThreadError::ShortThreadPrefix(text.to_owned()));
    }
    let mut matches = index::with_prefix(root, &wanted, AMBIGUOUS_SHOWN)?;
    match matches.len() {
        0 => Err(ThreadIndexError::Unknown(text.to_owned()).into()),
        1 => Ok(matches.remove(0)),
        _ => Err(ThreadError::Ambiguous {
            prefix: text.to_owned(),
            candidates: matches,
        }),
    }
}

/// How many candidates an ambiguous thread prefix names.
const AMBIGUOUS_SHOWN: usize = 20;

/// The shortest hash prefix accepted as a step reference.
pub(crate) const MIN_PREFIX: usize = 4;

/// Finds a step (or start node) by reference (`docs/cli.md#naming-a-step`): a full hash;
/// `<thread>:<index>` with the thread as in [`resolve_id`] and a 1-based index, negative from the
/// end (`T:-1` is the head, `T:0` the start node); or a unique prefix of at least [`MIN_PREFIX`]
/// symbols of a step's or start node's hash.
pub(crate) fn resolve_step(store: &Store, text: &str) -> Result<Hash, ThreadError> {
    let text = text.trim();
    if let Some((thread, index)) = text.rsplit_once(':')
        && let Ok(index) = index.parse::<i64>()
    {
        let id = resolve_id(store.root(), thread)?;
        let head = match index::state(store.root(), &id)? {
            State::Active { head } => head,
            State::Archived(a) => a.head,
        };
        let chain = ThreadView::at(store, &id, head)?.chain;
        let steps = chain.steps.len();
        let at = if index < 0 {
            steps
                .checked_sub(index.unsigned_abs() as usize)
                .map(|i| i + 1)
        } else {
            Some(index as usize)
        };
        return match at {
            Some(0) => Ok(chain.start_hash),
            Some(n) if n <= steps => Ok(chain.steps[n - 1].hash),
            _ => Err(ThreadError::NoStepAt { id, index, steps }),
        };
    }
    if let Ok(hash) = Hash::parse(text) {
        return Ok(hash);
    }
    // Crockford's reading of the prefix, as `Hash::parse` reads a whole hash.
    let prefix: String = text
        .chars()
        .map(|c| match c.to_ascii_uppercase() {
            'O' => '0',
            'I' | 'L' => '1',
            other => other,
        })
        .collect();
    if prefix.chars().count() < MIN_PREFIX {
        return Err(ThreadError::ShortStepPrefix(text.to_owned()));
    }
    let mut candidates = Vec::new();
    for name in ["step", "start", "start-v2"] {
        let type_hash = builtin::hash_of(name);
        for hash in store.list_type(type_hash)? {
            let name = hash.to_string();
            if name.starts_with(&prefix) {
                candidates.push(name);
            }
        }
    }
    candidates.sort();
    candidates.dedup();
    match candidates.len() {
        0 => Err(ThreadError::NoSuchStep(text.to_owned())),
        1 => Ok(Hash::parse(&candidates[0]).expect("a listed hash parses")),
        _ => Err(ThreadError::AmbiguousStep {
            prefix: text.to_owned(),
            candidates,
        }),
    }
}

/// `1 step`, `2 steps`.
pub(crate) fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("{n} {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// Everything `thread show` and `thread list` report about a thread.
#[derive(Debug, Clone)]
pub(crate) struct Summary {
    pub id: String,
    pub workflow: String,
    pub workflow_hash: Hash,
    pub head: Hash,
    pub steps: usize,
    /// `active`, `running`, `awaiting`, `over-budget`, `failed`, `done`, `killed` or
    /// `rebased`.
    pub status: String,
    /// The role the moderator picks now (`$END` when finished); `None` if it cannot decide.
    pub next: Option<String>,
    /// Why the last step failed, when `status` is `failed` (or was refused, `over-budget`).
    pub error: Option<String>,
    pub running_role: Option<String>,
    /// The role a person is asked to answer, when `status` is `awaiting`.
    pub awaiting: Option<String>,
    /// `thread pause`: no step starts until `thread resume` (a running one finishes).
    pub paused: bool,
    /// Where its agents run, when recorded.
    pub workdir: Option<std::path::PathBuf>,
    /// Role → the agent it is bound to, when recorded.
    pub agents: std::collections::BTreeMap<String, String>,
}

impl Summary {
    /// Whether the thread is archived (`done`, `killed` or `rebased`): it takes no more steps.
    pub(crate) fn done(&self) -> bool {
        index::is_archived_status(&self.status)
    }

    pub(crate) fn to_json(&self) -> Value {
        let mut json = json!({
            "workflow": self.workflow,
            "thread": self.id,
            "head": self.head.to_string(),
            "done": self.done(),
            "status": self.status,
            "next": self.next,
            "steps": self.steps,
        });
        if let Some(role) = &self.awaiting {
            json["awaiting"] = Value::String(role.clone());
        }
        if let Some(error) = &self.error {
            json["error"] = Value::String(error.clone());
        }
        if self.paused {
            json["paused"] = Value::Bool(true);
        }
        if let Some(dir) = &self.workdir {
            json["workdir"] = Value::String(dir.display().to_string());
        }
        if !self.agents.is_empty() {
            json["agents"] = json!(self.agents);
        }
        json
    }

    /// Recomputes the live part of an active thread's status from its run files: `running`
    /// while a step holds the lock, `failed` when the last attempt failed, else `active`.
    /// Archived threads (`done`, `killed`, `rebased`) never change and are left alone.
    ///
    /// The rest of a summary is a function of the head, so a caller that keeps summaries by head
    /// (the mount) refreshes only this part.
    pub(crate) fn refresh(&mut self, files: &RunFiles) {
        if self.done() {
            return;
        }
        self.error = None;
        self.running_role = None;
        self.awaiting = None;
        // Paused and resumed without the head moving: read with the rest of the live part.
        self.read_context(files);
        // A step that died mid-way may have left its agent's children running: looking at the
        // thread is one of the moments they are cleaned up (see `RunFiles::reap_abandoned`).
        files.reap_abandoned();
        if files.is_running() {
            self.status = "running".into();
            self.running_role = files.running_info().and_then(|i| i.role);
        } else if let Some(question) = files.awaiting(self.head) {
            self.status = "awaiting".into();
            self.awaiting = Some(question.role);
        } else if let Some(error) = files.last_failure() {
            self.status = failed_status(&error).into();
            self.error = Some(error).filter(|e| !e.is_empty());
        } else {
            self.status = "active".into();
        }
    }

    /// The thread's recorded working directory, agents and pause.
    fn read_context(&mut self, files: &RunFiles) {
        if let Ok(recorded) = context::read(files.root(), files.id()) {
            self.paused = recorded.paused;
            self.workdir = recorded.workdir;
            self.agents = recorded
                .bindings
                .into_iter()
                .map(|(role, binding)| (role, binding.name))
                .collect();
        }
    }

    /// The one-line status of the mount's `status` file.
    pub(crate) fn status_line(&self, files: &RunFiles) -> String {
        let line = self.live_line(files);
        match (self.paused, self.status.as_str()) {
            (true, "running") => format!("{line} (paused: no step after this one)"),
            (true, _) => format!(
                "paused ({line}); `uwf thread resume {}` lets it go on",
                self.id
            ),
            (false, _) => line,
        }
    }

    fn live_line(&self, files: &RunFiles) -> String {
        match self.status.as_str() {
            "running" => {
                let info = files.running_info();
                let role = self.running_role.clone().unwrap_or_else(|| "?".into());
                let pid = info
                    .and_then(|i| i.agent_pid.or(Some(i.pid)))
                    .map(|p| p.to_string())
                    .unwrap_or_else(|| "?".into());
                format!("running role={role} pid={pid}")
            }
            status @ ("failed" | cost::OVER_BUDGET) => format!(
                "{status}: {}",
                self.error
                    .as_deref()
                    .and_then(|e| e.lines().next())
                    .unwrap_or("")
            ),
            "awaiting" => format!(
                "awaiting role={}",
                self.awaiting.clone().unwrap_or_else(|| "?".into())
            ),
            "active" => format!(
                "active next={}",
                self.next.clone().unwrap_or_else(|| "?".into())
            ),
            index::REBASED => match index::successor(files.root(), files.id()) {
                Ok(Some(new)) => format!("rebased onto {new}"),
                _ => index::REBASED.to_owned(),
            },
            other => other.to_owned(),
        }
    }
}

/// The status of an active thread whose last step recorded `error`: `over-budget` when the
/// step was refused at the thread's budget (it waits for a person to raise it), else `failed`.
pub(crate) fn failed_status(error: &str) -> &'static str {
    if cost::is_budget_stop(error) {
        cost::OVER_BUDGET
    } else {
        "failed"
    }
}

/// Summarises a thread (active or archived).
pub(crate) fn summary(store: &Store, id: &str) -> Result<Summary, ThreadError> {
    let (head, archived) = match index::state(store.root(), id)? {
        State::Active { head } => (head, None),
        State::Archived(a) => (a.head, Some(a.status)),
    };
    summary_at(store, id, head, archived)
}

/// Summarises a thread whose place in the index is already known: its head, and its archived
/// status (`done`, `killed`, `rebased`) if it is archived. The mount keeps the index in memory.
pub(crate) fn summary_at(
    store: &Store,
    id: &str,
    head: Hash,
    archived: Option<String>,
) -> Result<Summary, ThreadError> {
    let root = store.root();
    let view = ThreadView::at(store, id, head)?;
    let files = RunFiles::new(root, id);
    let mut summary = Summary {
        id: id.to_owned(),
        workflow: view.workflow.name.clone(),
        workflow_hash: view.workflow_hash,
        head,
        steps: view.chain.steps.len(),
        status: String::new(),
        next: None,
        error: None,
        running_role: None,
        awaiting: None,
        paused: false,
        workdir: None,
        agents: Default::default(),
    };
    if let Some(status) = archived {
        summary.next = (status == "done").then(|| END.to_owned());
        summary.status = status;
        summary.read_context(&files);
        summary.paused = false;
        return Ok(summary);
    }
    summary.next = crate::engine::workflow::decisions::cached_next(
        store,
        view.workflow_hash,
        &view.workflow,
        head,
    )
    .or_else(|| {
        Moderator::new(view.workflow.clone())
            .ok()
            .and_then(|m| m.decide_chain(&view.chain).ok())
            .map(|d| d.next)
    });
    summary.refresh(&files);
    Ok(summary)
}

/// Every thread that sub-workflows started under thread `id`, depth-first in start order, with
/// its depth (1 for a child). A thread whose summary cannot be read is left out.
pub(crate) fn descendants(store: &Store, id: &str) -> Vec<(usize, Summary)> {
    fn walk(store: &Store, id: &str, depth: usize, out: &mut Vec<(usize, Summary)>) {
        // Bounded like the nesting itself: a damaged link cannot make this loop.
        if depth > 64 {
            return;
        }
        for child in family::children(store.root(), id) {
            if let Ok(summary) = summary(store, &child) {
                out.push((depth, summary));
                walk(store, &child, depth + 1, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(store, id, 1, &mut out);
    out
}

/// `thread show`'s view of a thread's family: `parent` (`{thread, head, role}`, or null) and
/// `children` (ids, oldest first).
pub(crate) fn family_json(root: &Path, id: &str) -> (Value, Value) {
    let parent = family::parent(root, id)
        .map(|p| json!({"thread": p.thread, "head": p.head.to_string(), "role": p.role}))
        .unwrap_or(Value::Null);
    (parent, json!(family::children(root, id)))
}
