//! The workflow engine: definitions, registry, moderator, threads and agents, as a library with
//! one error enum per module and no printing (that is `cli`'s job). Builds on [`crate::cas`].
//!
//! Rooms, lowest first; each imports only from rooms above it in this list (a test,
//! `tests/tidy.rs`, holds arrows one way):
//! - [`suggest`]: "did you mean" for names.
//! - [`chain`]: a thread's record — its start and step nodes, the chain from a head back to the
//!   start, cached by head.
//! - [`config`]: `config.yaml`, `.env`, `uwf setup`'s writer.
//! - [`storage`]: which backend a root uses, and the thread index and registry on it
//!   (`index.db` / files / PostgreSQL), step leases, run sinks, change notifications.
//! - [`workflow`]: definitions, validation, registry, graph drawing, the moderator (where the
//!   next role is decided) and JSONata.
//! - [`input`]: stdin and `-f FILE` inputs, read within one size limit.
//! - [`thread`]: a thread's state — where it stands, its run files, logs and events, lineage,
//!   listing, renderings. Runs nothing.
//! - [`llm`]: the model client.
//! - [`agent`]: agent resolution, spawning (where an agent process starts), the kit's prompt,
//!   extraction and submit, the offline and model built-ins.
//! - [`cycle`]: the step cycle — one step (moderator → agent → publish), starting, forking and
//!   killing threads, what a process taking many steps keeps warm, people's answers, child
//!   workflows, workers.
//! - [`upkeep`]: store-level maintenance — `fsck`, `doctor`, `cas gc`'s log retention,
//!   PostgreSQL upkeep, `uwf store copy`.
pub(crate) mod agent;
pub(crate) mod chain;
pub mod config;
pub mod cycle;
pub(crate) mod input;
pub mod knowledge;
pub(crate) mod llm;
pub mod storage;
pub(crate) mod suggest;
pub mod thread;
pub mod upkeep;
pub mod workflow;

/// Where every thread starts: the moderator's position before the first step.
pub(crate) const START: &str = "$START";
/// Where a thread ends: the target of a transition that finishes it.
pub(crate) const END: &str = "$END";
