//! uwf: a stateless workflow engine for LLM-agent workflows over a content-addressed store.
//!
//! Layers: `cli` → (`engine`, `fs`) → `cas`. `cas` imports none of the others.
pub mod advice;
pub mod cas;
pub mod cli;
pub mod engine;
pub mod fs;
pub mod pg;
