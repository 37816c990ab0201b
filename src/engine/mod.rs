//! The workflow engine: definitions, registry, moderator, threads and agents.
//!
//! Builds on [`crate::cas`]; never prints to the terminal (that is `cli`'s job).
pub mod agent;
pub mod config;
pub mod fsck;
pub mod index_files;
pub mod llm;
pub mod thread;
pub mod workflow;
