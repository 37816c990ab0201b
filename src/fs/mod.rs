//! The FUSE view of the store (`uwf mount`, SPEC §7).
//!
//! Layout of this module:
//! - [`tree`]: the protocol-free filesystem ([`tree::Tree`]): every operation as a method
//!   returning `Result<_, FsError>`, unit-tested by replaying editors' op sequences.
//! - [`views`]: generated entries read from the store and the registry.
//! - [`save`]: which names register workflows, and registering them.
//! - [`scratch`]: in-memory files editors create, size-limited.
//! - [`control`]: what control files do (`step`, `run`, `kill`, `fork`, `prompt`, `wait`).
//! - [`inode`]: the inode table.
//! - [`error`]: [`FsError`] and its one errno mapping.
//! - [`fuse`]: the thin fuser adapter, the only code that names fuser types.
//! - [`unmount`]: unmounting, also after the daemon died.
//! - [`export`]: the same tree written as plain files (`uwf export`).
//!
//! Architecture Invariant: `fs` depends on `engine` and `cas`, never on `cli`, and prints nothing.

pub mod actions;
pub mod attr;
pub mod error;
pub mod export;
pub mod fuse;
pub mod inode;
pub mod registration;
pub mod scratch;
pub mod tree;
pub mod unmount;
pub mod views;

pub use error::FsError;
pub use tree::{Options, Tree};
