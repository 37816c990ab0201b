//! Workflows.
pub mod decisions;
pub mod definition;
pub mod graph;
pub mod jsonata;
pub mod moderator;
pub mod registry;

pub use definition::*;
