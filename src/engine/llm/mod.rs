//! LLM.
pub mod agents;
pub mod client;
pub mod json_extract;
pub mod workdir;
