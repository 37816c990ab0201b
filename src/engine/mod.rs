//! The workflow engine: definitions, registry, moderator, threads and agents.
//!
//! Builds on [`crate::cas`]; never prints to the terminal (that is `cli`'s job).
pub mod graph;
pub mod index_files;
pub mod jsonata;
pub mod moderator;
pub mod registry;
pub mod workflow;
pub mod config;
pub mod chain;
pub mod threads;
pub mod extract;
pub mod minimal;
pub mod render;
pub mod submit;
pub mod agent;
pub mod step;
pub mod thread;
