//! A thread as a step sees it: its head, chain and workflow ([`ThreadView`]), or just where the
//! next step goes ([`StepTarget`]). Read by the step, the agents' kit and the renderers.

use crate::advice::Advice;
use crate::cas::{Hash, Store, StoreError};

use crate::engine::thread::chain::{self, Chain, ChainError, History};
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
    pub fn at(store: &Store, id: &str, head: Hash) -> Result<ThreadView, ViewError> {
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
    pub fn role_schema(&self, role: &str) -> Result<Hash, ViewError> {
        role_schema(&self.workflow, role)
    }

    /// Where a new step of this thread goes.
    pub fn target(&self) -> StepTarget<'_> {
        StepTarget {
            head: self.head,
            start_hash: self.chain.start_hash,
            workflow: &self.workflow,
        }
    }
}

/// The schema hash of `role`'s output in `workflow`.
pub fn role_schema(workflow: &Workflow, role: &str) -> Result<Hash, ViewError> {
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
pub struct StepTarget<'a> {
    pub head: Hash,
    pub start_hash: Hash,
    pub workflow: &'a Workflow,
}

impl StepTarget<'_> {
    pub fn role_schema(&self, role: &str) -> Result<Hash, ViewError> {
        role_schema(self.workflow, role)
    }
}

/// The head, history (header only) and workflow of active thread `id`: what a built-in agent
/// needs, without parsing the steps.
pub fn load_light(store: &Store, id: &str) -> Result<(History, Workflow), ViewError> {
    load_light_at(store, index::active_head(store.root(), id)?)
}

/// [`load_light`] of the thread whose head is `head`.
pub fn load_light_at(store: &Store, head: Hash) -> Result<(History, Workflow), ViewError> {
    let history = chain::history(store, head)?;
    let workflow = Workflow::load(store, history.start().workflow)?;
    Ok((history, workflow))
}

impl History {
    /// Where a new step after this history goes.
    pub fn target<'a>(&self, workflow: &'a Workflow) -> StepTarget<'a> {
        StepTarget {
            head: self.head(),
            start_hash: self.start_hash(),
            workflow,
        }
    }
}
