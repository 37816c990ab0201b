//! Consistency check of the whole store: every node re-hashed, every ref resolved, every data
//! node validated against its schema, and no stray files among the objects.

use std::path::PathBuf;

use super::error::StoreError;
use super::id::Hash;
use super::schema::CompiledSchema;
use super::store::{Node, Store};

/// One problem found by [`fsck`].
#[derive(Debug)]
pub struct Problem {
    pub hash: Option<Hash>,
    pub path: PathBuf,
    pub message: String,
}

/// The outcome of a check.
#[derive(Debug, Default)]
pub struct FsckReport {
    pub checked: usize,
    pub problems: Vec<Problem>,
}

/// Checks every node file. Problems are collected, not returned as errors; an `Err` means the
/// store itself could not be listed.
pub fn fsck(store: &Store) -> Result<FsckReport, StoreError> {
    let mut report = FsckReport::default();
    for (path, hash) in store.scan_objects()? {
        let Some(hash) = hash else {
            report.problems.push(Problem {
                hash: None,
                path,
                message: "stray file: the name is not a node hash".into(),
            });
            continue;
        };
        report.checked += 1;
        let mut problem = |message: String| {
            report.problems.push(Problem {
                hash: Some(hash),
                path: path.clone(),
                message,
            })
        };
        let node = match store.get(hash) {
            Ok(node) => node,
            Err(e) => {
                problem(e.to_string());
                continue;
            }
        };
        let (problems, refs) = check_node(store, &node);
        problems.into_iter().for_each(&mut problem);
        for (pointer, target) in refs {
            if !store.has(target) {
                problem(dangling(&pointer, target));
            }
        }
    }
    Ok(report)
}

/// Checks one node read intact: the reserved bootstrap, a schema that compiles, a data node
/// whose type is a usable schema and whose payload validates. Returns the problems in words
/// and the references its schema locates (pointer, target), for the caller to resolve as its
/// storage answers fastest.
pub(crate) fn check_node(store: &Store, node: &Node) -> (Vec<String>, Vec<(String, Hash)>) {
    if node.type_hash == Hash::ZERO {
        if node.payload != super::builtin::bootstrap_payload() {
            return (vec![StoreError::Reserved.to_string()], Vec::new());
        }
        return (Vec::new(), Vec::new());
    }
    if node.is_schema() {
        return match CompiledSchema::compile(&node.payload) {
            Ok(_) => (Vec::new(), Vec::new()),
            Err(violations) => (
                vec![StoreError::InvalidSchema { violations }.to_string()],
                Vec::new(),
            ),
        };
    }
    let schema = match store.schema(node.type_hash) {
        Ok(schema) => schema,
        Err(e) => return (vec![format!("its type cannot be used: {e}")], Vec::new()),
    };
    let mut problems = Vec::new();
    if let Err(violations) = schema.validate(&node.payload) {
        problems.push(
            StoreError::InvalidPayload {
                type_hash: node.type_hash,
                violations,
            }
            .to_string(),
        );
    }
    (problems, schema.located_refs(&node.payload))
}

/// The problem of a reference that names no node.
pub(crate) fn dangling(pointer: &str, target: Hash) -> String {
    format!("dangling reference: field {pointer} names {target}, which is not in the store")
}
