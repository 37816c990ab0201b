//! uwf: a stateless workflow engine for LLM-agent workflows over a content-addressed store.
//!
//! Layers, each importing only from layers after it: `cli` → (`serve`, `fs`) → `engine` → `pg`
//! → `cas`. All may use the crate's loose helpers — `file_util` (atomic and inode-recycling file
//! writes), `process_group`, `byte_size`, `advice` — which import none of the layers.
//! `tests/tidy.rs` holds the arrows one way.
pub mod advice;
pub mod byte_size;
pub mod cas;
pub mod cli;
pub mod engine;
pub mod file_util;
pub mod fs;
pub mod malloc_tuning;
pub mod pg;
pub mod process_group;
pub mod profile;
pub mod serve;
