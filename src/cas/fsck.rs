//! Consistency check of the whole store: every node re-hashed, every ref resolved, every data
//! node validated against its schema, and no stray files among the objects.

use std::path::PathBuf;

use super::error::StoreError;
use super::id::Hash;
use super::schema::CompiledSchema;
use super::store::Store;

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
        if node.type_hash == Hash::ZERO {
            if node.payload != super::builtin::bootstrap_payload() {
                problem(StoreError::Reserved.to_string());
            }
            continue;
        }
        if node.is_schema() {
            if let Err(violations) = CompiledSchema::compile(&node.payload) {
                problem(StoreError::InvalidSchema { violations }.to_string());
            }
            continue;
        }
        let schema = match store.schema(node.type_hash) {
            Ok(schema) => schema,
            Err(e) => {
                problem(format!("its type cannot be used: {e}"));
                continue;
            }
        };
        if let Err(violations) = schema.validate(&node.payload) {
            problem(
                StoreError::InvalidPayload {
                    type_hash: node.type_hash,
                    violations,
                }
                .to_string(),
            );
        }
        for (pointer, target) in schema.located_refs(&node.payload) {
            if !store.has(target) {
                problem(format!(
                    "dangling reference: field {pointer} names {target}, which is not in the store"
                ));
            }
        }
    }
    Ok(report)
}
