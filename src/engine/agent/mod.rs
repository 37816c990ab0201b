//! Agents.
pub mod builtin;
pub mod extract;
pub mod minimal;
pub mod prompt;
pub mod resolve;
pub mod spawn;
pub mod submit;
