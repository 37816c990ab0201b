//! uwf: a stateless workflow engine for LLM-agent workflows over a content-addressed store.
//!
//! Layers, each importing only from layers after it: `cli` → (`serve`, `fs`) → `engine` → `pg`
//! → `cas`. All may use the crate's loose helpers — `file_util` (atomic and inode-recycling file
//! writes), `process_group`, `byte_size`, `advice` — which import none of the layers.
//! `tests/tidy.rs` holds the arrows one way.
//!
//! `pub` marks what the binary, the integration tests and the benches use; everything else is
//! `pub(crate)`, and `unreachable_pub` keeps it so.
#![warn(unreachable_pub)]
pub mod advice;
pub(crate) mod byte_size;
pub mod cas;
pub mod cli;
pub mod engine;
pub(crate) mod file_util;
pub mod fs;
pub(crate) mod malloc_tuning;
pub mod pg;
pub(crate) mod process_group;
pub(crate) mod profile;
pub(crate) mod serve;
