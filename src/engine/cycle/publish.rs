//! Publishing a step node written outside a step (`uwf thread publish`: an agent run by hand, the
//! kit of `uwf agent prompt`/`submit` used without `thread step`): the node is verified and
//! published exactly as a step publishes its agent's ([`step::publish`]), under the thread's step
//! lock.

use serde_json::json;

use crate::cas::{Hash, Store, builtin};
use crate::engine::chain;
use crate::engine::cycle::step::{self, Current, StepError, Stepped};
use crate::engine::thread::events;
use crate::engine::thread::index;
use crate::engine::thread::run_files::RunFiles;
use crate::engine::workflow::jsonata::Input;
use crate::engine::workflow::moderator::Moderator;

/// Publishes step node `hash` written outside a step (a hand-run agent, `uwf thread publish`):
/// finds the active thread whose head the node continues, takes its step lock, asks the
/// moderator for the role, and then verifies and publishes exactly as a step does
/// ([`step::publish`]).
pub(crate) fn publish_node(store: &Store, hash: Hash) -> Result<Stepped, StepError> {
    let node = store.get(hash)?;
    if node.type_hash != builtin::hash_of("step") {
        let kind = builtin::name_of(node.type_hash).unwrap_or("data");
        return Err(StepError::NotPublishable {
            hash,
            reason: format!("it is a {kind} node, not a step node"),
        });
    }
    let step = chain::read_step(&node)?;
    let continues = step.prev.unwrap_or(step.start);
    // Forks share heads: the thread must also have started where the node did.
    let mut found = Vec::new();
    for id in index::active_at(store.root(), continues)? {
        if Current::load(store, &id)?.history.start_hash() == step.start {
            found.push(id);
        }
    }
    let id = match found.len() {
        1 => found.remove(0),
        0 => {
            return Err(StepError::NotPublishable {
                hash,
                reason: format!(
                    "no active thread has {continues} as its head (the step continues it)"
                ),
            });
        }
        _ => {
            return Err(StepError::NotPublishable {
                hash,
                reason: format!(
                    "several threads continue from {continues}: {}",
                    found.join(", ")
                ),
            });
        }
    };
    let files = RunFiles::new(store.root(), &id);
    let lock = files.try_lock()?;
    files.check_not_killing()?;
    let view = Current::load(store, &id)?;
    let moderator = Moderator::new(view.workflow.clone())?;
    let context = Input::from_json_text(view.history.context_json());
    let next = moderator.decide_prepared(view.history.at(), &context)?.next;
    let step_number = view.history.len() + 1;
    let published = step::publish(
        store,
        &id,
        view,
        &next,
        &step.agent,
        hash,
        Some((moderator, context)),
        None,
    )
    .map_err(|e| match e {
        // Said of a node the user names, not of an agent's answer.
        StepError::Rejected { reason, .. } => StepError::NotPublishable {
            hash,
            reason: format!("{reason} (thread {id})"),
        },
        other => other,
    });
    match &published {
        Ok(stepped) => {
            lock.record_success(&stepped.to_json());
            let fields = json!({"step": step_number, "role": stepped.role,
                "head": stepped.head.to_string(), "done": stepped.done});
            events::append(&files, &id, "finished", fields);
        }
        Err(e) => lock.record_failure(&crate::advice::with_hints(e), !e.lost_race()),
    }
    published
}
