//! uwf: a stateless workflow engine for LLM-agent workflows over a content-addressed store.
//!
//! Layers: `cli` → (`engine`, `fs`) → `cas`. `cas` imports none of the others; all may use
//! `file_util` (atomic and inode-recycling file writes), which imports nothing from the crate.
pub mod advice;
pub mod cas;
pub mod cli;
pub mod engine;
pub mod file_util;
pub mod fs;
pub mod malloc_tuning;
pub mod pg;
pub mod profile;
pub mod serve;
