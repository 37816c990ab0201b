//! The workflow engine: definitions, registry, moderator, threads and agents.
//!
//! Builds on [`crate::cas`]; never prints to the terminal (that is `cli`'s job).
pub mod agent;
pub mod builtin_agents;
pub mod chain;
pub mod config;
pub mod decisions;
pub mod doctor;
pub mod dotenv;
pub mod extract;
pub mod extract_llm;
pub mod graph;
pub mod index_files;
pub mod jsonata;
pub mod llm;
pub mod llm_agents;
pub mod minimal;
pub mod moderator;
pub mod registry;
pub mod render;
pub mod step;
pub mod submit;
pub mod thread;
pub mod threads;
pub mod workdir;
pub mod workflow;
