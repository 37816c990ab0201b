//! A thread as a step sees it: its head, chain and workflow ([`ThreadView`]), or just where the
//! next step goes ([`StepTarget`]). Read by the step, the agents' kit and the renderers.

use crate::advice::Advice;
use crate::cas::{Hash, Store, StoreError, builtin};

use crate::engine::chain::{self, Chain, ChainError, History};
use crate::engine::thread::index::{self, ThreadIndexError};
use crate::engine::workflow::{Workflow, WorkflowError};

/// Errors while loading a thread's view.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    #[error(transparent)]
    Thread(#[from] ThreadIndexError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Workflow(#[from] WorkflowError),
    #[error(transparent)]
    Chain(#[from] ChainError),
    #[error("role `{role}` is not part of workflow `{workflow}` (roles: {roles})")]
    UnknownRole {
        role: String,
        workflow: String,
        roles: String,
    },
}

impl Advice for ViewError {
    fn hints(&self) -> Vec<String> {
        match self {
            ViewError::Thread(e) => e.hints(),
            ViewError::Store(e) => e.hints(),
            ViewError::Workflow(e) => e.hints(),
            ViewError::Chain(e) => e.hints(),
            _ => Vec::new(),
        }
    }
    fn is_busy(&self) -> bool {
        match self {
            ViewError::Thread(e) => e.is_busy(),
            ViewError::Store(e) => e.is_busy(),
            ViewError::Workflow(e) => e.is_busy(),
            ViewError::Chain(e) => e.is_busy(),
            _ => false,
        }
    }
}

/// An active thread as an agent sees it during a step.
#[derive(Debug)]
pub struct ThreadView {
    pub id: String,
    pub head: Hash,
    pub chain: Chain,
    pub workflow_hash: Hash,
    pub workflow: Workflow,
}

impl ThreadView {
    /// Loads the active thread `id`.
    pub fn load(store: &Store, id: &str) -> Result<ThreadView, ViewError> {
        let head = index::active_head(store.root(), id)?;
        Self::at(store, id, head)
    }

    /// A view of thread `id` at `head` (for archived threads and past steps too).
    pub(crate) fn at(store: &Store, id: &str, head: Hash) -> Result<ThreadView, ViewError> {
        let chain = chain::load(store, head)?;
        let workflow_hash = chain.start.workflow;
        let workflow = Workflow::load(store, workflow_hash)?;
        Ok(ThreadView {
            id: id.to_owned(),
            head,
            chain,
            workflow_hash,
            workflow,
        })
    }

    /// The schema hash of a role's output.
    pub(crate) fn role_schema(&self, role: &str) -> Result<Hash, ViewError> {
        role_schema(&self.workflow, role)
    }

    /// Where a new step of this thread goes.
    pub(crate) fn target(&self) -> StepTarget<'_> {
        StepTarget {
            head: self.head,
            start_hash: self.chain.start_hash,
            workflow: &self.workflow,
        }
    }
}

/// The schema hash of `role`'s output in `workflow`.
pub(crate) fn role_schema(workflow: &Workflow, role: &str) -> Result<Hash, ViewError> {
    workflow
        .roles
        .get(role)
        .map(|r| r.meta)
        .ok_or_else(|| ViewError::UnknownRole {
            role: role.to_owned(),
            workflow: workflow.name.clone(),
            roles: workflow
                .roles
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// What writing a step needs to know of its thread: the head it follows, the start it belongs
/// to, and the workflow (for the role's schema). Cheaper to get than a whole [`ThreadView`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct StepTarget<'a> {
    pub head: Hash,
    pub start_hash: Hash,
    pub workflow: &'a Workflow,
}

impl StepTarget<'_> {
    pub(crate) fn role_schema(&self, role: &str) -> Result<Hash, ViewError> {
        role_schema(self.workflow, role)
    }
}

/// The head, history (header only) and workflow of active thread `id`: what a built-in agent
/// needs, without parsing the steps.
pub(crate) fn load_light(store: &Store, id: &str) -> Result<(History, Workflow), ViewError> {
    load_light_at(store, index::active_head(store.root(), id)?)
}

/// [`load_light`] of the thread whose head is `head`.
pub(crate) fn load_light_at(store: &Store, head: Hash) -> Result<(History, Workflow), ViewError> {
    let history = chain::history(store, head)?;
    let workflow = Workflow::load(store, history.start().workflow)?;
    Ok((history, workflow))
}

impl History {
    /// Where a new step after this history goes.
    pub(crate) fn target<'a>(&self, workflow: &'a Workflow) -> StepTarget<'a> {
        StepTarget {
            head: self.head(),
            start_hash: self.start_hash(),
            workflow,
        }
    }
}

/// The thread as a step reads it: head, history (header only: a step never parses the steps)
/// and workflow.
pub(crate) struct Current {
    pub(crate) history: History,
    pub(crate) workflow: Workflow,
}

impl Current {
    pub(crate) fn load(store: &Store, id: &str) -> Result<Current, ViewError> {
        let (history, workflow) = load_light(store, id)?;
        Ok(Current { history, workflow })
    }

    /// The thread whose head is `head` (read from the index by the caller).
    pub(crate) fn load_at(store: &Store, head: Hash) -> Result<Current, ViewError> {
        let (history, workflow) = load_light_at(store, head)?;
        Ok(Current { history, workflow })
    }

    pub(crate) fn head(&self) -> Hash {
        self.history.head()
    }

    pub(crate) fn workflow_hash(&self) -> Hash {
        self.history.start().workflow
    }
}

/// Checks the node an agent returned: a step of this thread, on its head, for `role`,
/// with an output its schema accepts. The error is the reason, in words.
pub(crate) fn verify(store: &Store, view: &Current, role: &str, hash: Hash) -> Result<(), String> {
    // A node this process's own in-process agent just wrote is checked as it was written.
    let node = match store.get_written(hash) {
        Ok(node) => node,
        Err(StoreError::NotFound(_)) => return Err("no such node in the store".into()),
        Err(e) => return Err(e.to_string()),
    };
    if node.type_hash != builtin::hash_of("step") {
        let kind = builtin::name_of(node.type_hash).unwrap_or("data");
        return Err(format!("it is a {kind} node, not a step node"));
    }
    let step = chain::read_step(&node).map_err(|e| e.to_string())?;
    if step.start != view.history.start_hash() {
        return Err(format!(
            "its start is {}, but this thread started at {}",
            step.start,
            view.history.start_hash()
        ));
    }
    let expected_prev = (view.head() != view.history.start_hash()).then_some(view.head());
    if step.prev != expected_prev {
        let show = |h: Option<Hash>| h.map(|h| h.to_string()).unwrap_or_else(|| "null".into());
        return Err(format!(
            "its prev is {}, but the head is {}",
            show(step.prev),
            show(expected_prev)
        ));
    }
    if step.role != role {
        return Err(format!(
            "its role is `{}`, but the moderator chose `{role}`",
            step.role
        ));
    }
    let schema_hash = role_schema(&view.workflow, role).map_err(|e| e.to_string())?;
    let output = store
        .get_written(step.output)
        .map_err(|e| format!("its output: {e}"))?;
    if output.type_hash != schema_hash {
        return Err(format!(
            "its output {} is typed {}, not role `{role}`'s schema {schema_hash}",
            step.output, output.type_hash
        ));
    }
    // A node of type T was validated against T when it was put (the store's invariant, which
    // `uwf cas fsck` re-checks), so the right type means a valid output.
    Ok(())
}
