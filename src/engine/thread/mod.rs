//! Threads.
pub mod chain;
pub mod index;
pub mod lifecycle;
pub mod render;
pub mod run_files;
pub mod step;
pub mod view;
