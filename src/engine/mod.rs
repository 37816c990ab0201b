//! The workflow engine: definitions, registry, moderator, threads and agents.
//!
//! Builds on [`crate::cas`]; never prints to the terminal (that is `cli`'s job).
pub mod graph;
pub mod index_files;
pub mod jsonata;
pub mod moderator;
pub mod registry;
pub mod workflow;
