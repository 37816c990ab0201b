//! The step cycle (`docs/ARCHITECTURE.md#one-step`): everything that moves a thread. It stands on
//! [`super::thread`] (state) and [`super::agent`] (running agents), and nothing below imports it.
//!
//! - [`step`]: **one step** — moderator → agent → verify → publish (the head's
//!   compare-and-set is the commit point).
//! - [`failure`]: when a role fails — its agent run again (`retry`), then a step recording
//!   the failure that moves the thread on (`onFailure`).
//! - [`lifecycle`]: start, fork, kill, archive; summaries that end orphaned children.
//! - [`publish`]: a step node written outside a step, published as a step would.
//! - [`session`]: what a process taking many steps keeps warm between them.
//! - [`controls`]: pause, resume and rebind a thread without stepping it.
//! - [`human`]: a person's answer to an awaiting thread, published as its step.
//! - [`rebase`]: a thread's history written again onto another version of its workflow.
//! - [`subworkflow`]: a workflow run as an agent — a child thread stepped to its end.
//! - [`worker`]: `uwf worker`, steps of any thread, leased one at a time.
pub(crate) mod controls;
pub(crate) mod failure;
pub(crate) mod human;
pub(crate) mod lifecycle;
pub(crate) mod publish;
pub(crate) mod rebase;
pub(crate) mod session;
pub mod step;
pub(crate) mod step_error;
pub(crate) mod subworkflow;
pub mod worker;
