//! A thread's state: where it stands, what its runs left behind, and how it reads for people.
//! Nothing here runs an agent; the step cycle that does is [`crate::engine::cycle`].
//!
//! - [`index`]: where each thread stands (`index.db` or PostgreSQL) — heads move only by
//!   compare-and-set here.
//! - [`listing`]: listing threads at scale, newest first, from index rows alone.
//! - [`run_files`]: the per-thread step and kill locks and run files under `runs/`.
//! - [`author`]: who did what: names checked, recorded in the feed and the log, read back.
//! - [`events`]: the per-thread change feed (`runs/<id>.events`), one JSON line per event.
//! - [`view`]: a thread as a step or an agent sees it (head, chain, workflow).
//! - [`context`]: its working directory, agent bindings and pause, recorded at start.
//! - [`family`], [`forks`]: where child threads and forks come from.
//! - [`log`]: a step's captured agent output.
//! - [`forks`]: `forks.jsonl`, where each fork came from.
//! - [`summary`]: a thread or step found by prefix, a thread's summary and family.
//! - [`render`]: transcripts, outputs as YAML/JSON, details and diffs for people.
pub(crate) mod author;
pub mod context;
pub(crate) mod cost;
pub mod events;
pub mod family;
pub mod forks;
pub mod index;
pub(crate) mod listing;
pub(crate) mod log;
pub(crate) mod render;
pub mod run_files;
pub(crate) mod summary;
pub mod view;
