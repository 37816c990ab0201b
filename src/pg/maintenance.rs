//! The queries of `uwf cas gc` and `uwf cas fsck` over PostgreSQL: the nodes table read in
//! pages (keyset by hash, so no query holds the whole table in memory and a page is one index
//! range scan), rows re-verified one by one, and unreachable old rows deleted in batches.
//!
//! Architecture Invariant: a delete names its rows and re-checks their age in the same
//! statement (`created_ms < cutoff`), so a row written after the caller computed the cutoff is
//! never deleted, whatever the caller read before.

use crate::cas::{Hash, Node};

use super::error::PgError;
use super::store::{PgStore, parse_hashes, parse_typed_row};

/// How many rows one page of a scan or one delete holds.
pub(crate) const BATCH: usize = 1000;

/// One row of the nodes table as a scan read it.
#[derive(Debug)]
pub(crate) struct ScannedRow {
    pub hash: Hash,
    /// The node, verified against its hash and its type column, or why it is not.
    pub node: Result<Node, PgError>,
}

impl PgStore {
    /// The hashes and write times of up to `limit` rows whose hash sorts after `after`, in
    /// hash order: one page of a walk over the whole table that reads no node bytes.
    pub(crate) fn node_ages(
        &self,
        after: Option<Hash>,
        limit: usize,
    ) -> Result<Vec<(Hash, i64)>, PgError> {
        let after = after.map(|h| h.to_string()).unwrap_or_default();
        let limit = limit as i64;
        let rows = self.with_client("list node ages", |c| {
            c.query(
                "select hash, created_ms from nodes where hash > $1 order by hash limit $2",
                &[&after, &limit],
            )
        })?;
        let hashes = parse_hashes(rows.iter().map(|r| r.get::<_, String>(0)))?;
        Ok(hashes
            .into_iter()
            .zip(rows.iter().map(|r| r.get::<_, i64>(1)))
            .collect())
    }

    /// Up to `limit` rows whose hash sorts after `after`, in hash order, each re-hashed and
    /// parsed as [`PgStore::get_node`] would (a bad row is reported in its `node`, not as the
    /// call's error): one page of a check of the whole table.
    pub(crate) fn scan_nodes(
        &self,
        after: Option<Hash>,
        limit: usize,
    ) -> Result<Vec<ScannedRow>, PgError> {
        let after_key = after.map(|h| h.to_string()).unwrap_or_default();
        let limit = limit as i64;
        let rows = self.with_client("scan nodes", |c| {
            c.query(
                "select hash, type_hash, bytes, created_ms from nodes
                 where hash > $1 order by hash limit $2",
                &[&after_key, &limit],
            )
        })?;
        let hashes = parse_hashes(rows.iter().map(|r| r.get::<_, String>(0)))?;
        Ok(hashes
            .into_iter()
            .zip(rows.iter())
            .map(|(hash, row)| {
                let node = parse_typed_row(hash, row.get(1), row.get(2), row.get(3));
                ScannedRow { hash, node }
            })
            .collect())
    }

    /// Deletes those of `hashes` whose rows were written before `cutoff_ms`; returns the hashes
    /// of the rows it deleted. Rows written since are kept, even if named.
    pub(crate) fn delete_nodes_older_than(
        &self,
        hashes: &[Hash],
        cutoff_ms: i64,
    ) -> Result<Vec<Hash>, PgError> {
        let keys: Vec<String> = hashes.iter().map(Hash::to_string).collect();
        let mut deleted = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(BATCH) {
            let chunk = chunk.to_vec();
            let rows = self.with_client("delete nodes", |c| {
                c.query(
                    "delete from nodes where hash = any($1) and created_ms < $2 returning hash",
                    &[&chunk, &cutoff_ms],
                )
            })?;
            deleted.extend(parse_hashes(rows.iter().map(|r| r.get::<_, String>(0)))?);
        }
        deleted.sort();
        Ok(deleted)
    }
}
