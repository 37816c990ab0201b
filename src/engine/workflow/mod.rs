//! Workflows.
pub mod decisions;
pub mod definition;
pub mod graph;
pub mod jsonata;
pub mod moderator;
pub mod registry;
pub mod validate;

pub use definition::*;
pub use validate::{parse, yaml_to_json};
