//! The workflow engine: definitions, registry, moderator, threads and agents, as a library with
//! one error enum per module and no printing (that is `cli`'s job). Builds on [`crate::cas`].
//!
//! Rooms:
//! - [`workflow`]: definitions, validation, registry, graph drawing, the moderator (where the
//!   next role is decided) and JSONata.
//! - [`thread`]: the head index, chains, one step (where a step is published), start/fork/kill,
//!   renderings.
//! - [`agent`]: agent resolution, spawning (where an agent process starts), the kit's prompt,
//!   extraction and submit, the offline built-ins.
//! - [`llm`]: the model client and the agents that use it.
//! - [`config`]: `config.yaml`, `.env`, `uwf setup`, `uwf doctor`.
//! - [`input`]: stdin and `-f FILE` inputs, read within one size limit.
//! - [`index_files`]: formats, locks and atomic writes of the small mutable files.
//! - [`session`]: what a process taking many steps keeps warm between them.
//! - [`store_copy`]: `uwf store copy`, a whole store from one backend to another, verified.
pub mod agent;
pub mod config;
pub mod fsck;
pub mod index_db;
pub mod index_files;
pub mod input;
pub mod llm;
pub mod pg_maintenance;
pub mod session;
pub mod storage;
pub mod store_copy;
pub mod suggest;
pub mod thread;
pub mod worker;
pub mod workflow;
