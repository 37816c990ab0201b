//! Workflows (`docs/workflows.md`): what a definition is, how it is checked, registered and drawn,
//! and how the moderator decides a thread's next role from it.
//!
//! - [`definition`]: the YAML form and the stored form ([`Workflow`]), loading and storing.
//! - [`validate`]: YAML text → a checked [`Definition`], every problem with its location.
//! - [`registry`]: `registry.yaml`, names → current hash and earlier versions.
//! - [`field_order`]: a role's output fields in the order its author wrote them.
//! - [`graph`]: Mermaid and Graphviz renderings.
//! - [`moderator`]: **where the next role is decided** — the JSONata conditions over a
//!   thread's context, first matching transition wins.
//! - [`template`]: `{{ expr }}` templates in role text, checked at registration and rendered
//!   against the same context when a prompt is made.
//! - [`decisions`]: the cache of the moderator's picks by head (derived data).
//! - [`jsonata`]: the only code that names the JSONata engine (limits, worker, conversion).
pub(crate) mod decisions;
pub(crate) mod definition;
pub(crate) mod field_order;
pub(crate) mod graph;
pub mod jsonata;
pub mod moderator;
pub(crate) mod registry;
pub(crate) mod schema_words;
pub(crate) mod template;
pub(crate) mod validate;
pub(crate) mod yaml_load;

pub(crate) use definition::*;
pub use validate::parse;
pub(crate) use validate::{parse_bytes, too_large};
pub(crate) use yaml_load::MAX_FILE_BYTES;
pub(crate) use yaml_load::yaml_to_json;
