//! Threads (SPEC §5): the index of heads, the chain of steps, one step, and everything else
//! that happens to a thread.
//!
//! - [`index`]: where each thread stands (`index.db` or PostgreSQL) — heads move only by
//!   compare-and-set here.
//! - [`listing`]: listing threads at scale, newest first, from index rows alone.
//! - [`run_files`]: the per-thread step and kill locks and run files under `runs/`.
//! - [`events`]: the per-thread change feed (`runs/<id>.events`), one JSON line per event.
//! - [`chain`]: a thread's history from its head back to the start node, cached by head.
//! - [`view`]: a thread as a step or an agent sees it (head, chain, workflow).
//! - [`step`]: **one step** — moderator → agent → verify → publish (the head's
//!   compare-and-set is the commit point).
//! - [`lifecycle`]: start, fork, kill, status summaries and id lookup.
//! - [`forks`]: `forks.jsonl`, where each fork came from.
//! - [`render`]: transcripts, outputs as YAML/JSON, details and diffs for people.
pub mod chain;
pub mod events;
pub mod family;
pub mod forks;
pub mod index;
pub mod lifecycle;
pub mod listing;
pub mod log;
pub mod render;
pub mod retention;
pub mod run_files;
pub mod step;
pub mod view;
