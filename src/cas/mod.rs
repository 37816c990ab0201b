//! The content-addressed store: ids, canonical bytes, nodes, schemas and storage (`docs/store.md`).
//!
//! This layer imports nothing else from the crate but the leaf module [`crate::file_util`].
pub mod builtin;
pub mod canonical;
pub(crate) mod error;
pub mod fsck;
pub mod gc;
pub(crate) mod id;
pub(crate) mod remote;
pub(crate) mod schema;
pub mod store;

pub use error::StoreError;
pub use id::Hash;
pub use store::{Node, Store};
