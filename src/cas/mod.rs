//! The content-addressed store: ids, canonical bytes, nodes, schemas and storage.
pub mod canonical;
pub mod id;
