//! Why a step failed ([`StepError`]), the advice a person gets for each failure, and the
//! questions callers ask of one: was it stopped, did it only lose a race, is it the role's
//! agent failing at its task.

use crate::advice::Advice;
use crate::cas::{Hash, StoreError};
use crate::engine::agent::spawn::AgentError;
use crate::engine::chain::ChainError;
use crate::engine::config::ConfigError;
use crate::engine::cycle::failure;
use crate::engine::thread::cost;
use crate::engine::thread::index::ThreadIndexError;
use crate::engine::thread::view::ViewError;
use crate::engine::workflow::moderator::ModeratorError;

/// Why a step failed.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error("agent `{agent}`: {source}")]
    Builtin {
        agent: String,
        source: Box<crate::engine::agent::builtin::BuiltinError>,
    },
    #[error("cannot record the question of thread {id}: {error}")]
    Awaiting {
        id: String,
        error: crate::file_util::FileError,
    },
    #[error(transparent)]
    Thread(#[from] ThreadIndexError),
    #[error(transparent)]
    View(#[from] ViewError),
    #[error(transparent)]
    Moderator(#[from] ModeratorError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Agent(#[from] AgentError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Chain(#[from] ChainError),
    #[error("{hash} cannot be published: {reason}")]
    NotPublishable { hash: Hash, reason: String },
    /// What the step would build on (head, start, workflow, role schema) is missing or damaged;
    /// no agent ran and nothing changed.
    #[error("cannot step thread {thread}: its {what} {hash} is unusable: {error}")]
    Damaged {
        thread: String,
        what: &'static str,
        hash: Hash,
        error: StoreError,
    },
    /// A caught stop signal (SIGINT, SIGTERM, SIGHUP) ended the step before it published.
    #[error(
        "the step on thread {thread} was interrupted by {}; its head did not move",
        crate::engine::agent::interrupt::name(*signal)
    )]
    Interrupted { thread: String, signal: i32 },
    /// `uwf thread kill` stopped the step's agent: the thread is killed, nothing failed.
    #[error("the step on thread {thread} was stopped: the thread was killed (`uwf thread kill`)")]
    Killed { thread: String },
    /// `thread pause`: no step starts until `thread resume`.
    #[error("thread {thread} is paused; no step starts until it is resumed")]
    Paused { thread: String },
    /// The thread has spent its budget: no step starts until `thread budget` raises it. The
    /// refusal is recorded as the last outcome, and the thread lists as `over-budget` (waiting
    /// for a person, not failed) until a raise clears it (`cost::resume_under_budget`).
    #[error("{0}")]
    Budget(cost::Reached),
    #[error(transparent)]
    Cost(#[from] cost::CostError),
    #[error("agent `{agent}` returned {hash}, which is not a valid step for this thread: {reason}")]
    Rejected {
        agent: String,
        hash: String,
        reason: String,
    },
    /// Every attempt of a role with `retry` failed, and it has no `onFailure`.
    #[error("after {attempts} attempts: {last}")]
    Attempts { attempts: u32, last: Box<StepError> },
}

/// What a thread stuck on a broken workflow version can do once the workflow is fixed.
const REBASE_HINT: &str = "if the workflow has been fixed since (`uwf workflow put`), \
                           `uwf thread rebase <thread>` moves the thread onto the new version";

impl Advice for StepError {
    fn hints(&self) -> Vec<String> {
        match self {
            StepError::Builtin { source, .. } => source.hints(),
            StepError::Thread(e) => e.hints(),
            StepError::View(e) => e.hints(),
            StepError::Moderator(e) => {
                let mut hints = e.hints();
                hints.push(REBASE_HINT.to_owned());
                hints
            }
            StepError::Config(e) => e.hints(),
            StepError::Agent(e) => e.hints(),
            StepError::Store(e) => e.hints(),
            StepError::Chain(e) => e.hints(),
            StepError::Cost(e) => e.hints(),
            StepError::Paused { thread } => vec![format!("`uwf thread resume {thread}` lets it go on")],
            StepError::Attempts { last, .. } => last.hints(),
            StepError::Damaged { .. } => vec![
                "`uwf cas fsck` lists the damage; restore the node from a backup, or fork the thread from an intact step (`uwf thread fork HASH`)".into(),
            ],
            _ => Vec::new(),
        }
    }
    fn is_busy(&self) -> bool {
        match self {
            StepError::Thread(e) => e.is_busy(),
            StepError::View(e) => e.is_busy(),
            StepError::Moderator(e) => e.is_busy(),
            StepError::Config(e) => e.is_busy(),
            StepError::Agent(e) => e.is_busy(),
            StepError::Store(e) => e.is_busy(),
            StepError::Chain(e) => e.is_busy(),
            StepError::Cost(e) => e.is_busy(),
            _ => false,
        }
    }
}

impl StepError {
    /// Whether a person or a supervisor stopped the step (a stop signal this process caught,
    /// `uwf thread kill`) rather than anything failing.
    pub(crate) fn is_stop(&self) -> bool {
        self.stopped_by().is_some()
    }

    /// Who stopped a step that [`StepError::is_stop`]: `uwf thread kill`, or the stop signal
    /// this process caught (`SIGINT` is Ctrl-C at a terminal), whichever part of the step it
    /// reached first (the agent, or the step before it published).
    pub(crate) fn stopped_by(&self) -> Option<String> {
        if matches!(self, StepError::Killed { .. }) {
            return Some("uwf thread kill".to_owned());
        }
        match crate::engine::agent::interrupt::caught()? {
            libc::SIGINT => Some("SIGINT (Ctrl-C)".to_owned()),
            signal => Some(crate::engine::agent::interrupt::name(signal)),
        }
    }

    /// Whether the step failed only because another step got there first (the head moved, or
    /// the thread was archived or removed meanwhile): nothing is wrong with the thread.
    pub(crate) fn lost_race(&self) -> bool {
        let index = match self {
            StepError::Thread(e) | StepError::View(ViewError::Thread(e)) => e,
            _ => return false,
        };
        matches!(
            index,
            ThreadIndexError::HeadMoved { .. }
                | ThreadIndexError::Archived { .. }
                | ThreadIndexError::Unknown(_)
        )
    }

    /// The same error without the agent's stderr tail.
    pub(crate) fn without_stderr_tail(self) -> StepError {
        match self {
            StepError::Agent(e) => StepError::Agent(e.without_stderr_tail()),
            StepError::Attempts { attempts, last } => {
                let last = Box::new(last.without_stderr_tail());
                StepError::Attempts { attempts, last }
            }
            other => other,
        }
    }

    /// Whether this is the role's agent failing at its task (what `retry` and `onFailure`
    /// handle; see [`failure`]); then the tail of its stderr.
    pub(super) fn role_failure(&self) -> Option<&str> {
        match self {
            StepError::Agent(e) => failure::agent_failed(e),
            StepError::Builtin { source, .. } => failure::builtin_failed(source),
            StepError::Rejected { .. } => Some(""),
            _ => None,
        }
    }
}
