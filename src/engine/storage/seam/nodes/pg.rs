//! PostgreSQL's nodes: the `nodes` table, read and written a batch per query, with this root's
//! node files as its cache when there is a root.

use std::collections::HashSet;
use std::sync::Arc;

use crate::cas::gc::Cutoff;
use crate::cas::store::parse_node_file;
use crate::cas::{Hash, Node, Store};
use crate::pg::maintenance::BATCH;
use crate::pg::{PgError, PgStore};

use super::{Condition, Derived, MaintenanceError, Nodes, Stored};

/// The `nodes` table of a database, and the local store caching it, if any.
pub(in crate::engine::storage::seam) struct PgNodes<'a> {
    pub pg: Arc<PgStore>,
    pub cache: Option<&'a Store>,
}

impl Nodes for PgNodes<'_> {
    fn list_all(&self) -> Result<Vec<Hash>, MaintenanceError> {
        Ok(self.pg.list_all()?)
    }

    fn read(&self, hash: Hash) -> Result<Node, MaintenanceError> {
        Ok(self.pg.get_node(hash)?)
    }

    fn read_many(&self, hashes: &[Hash]) -> Result<Vec<Node>, MaintenanceError> {
        Ok(self.pg.nodes_by_hash(hashes)?)
    }

    fn write_copied(&self, nodes: &[Node]) -> Result<usize, MaintenanceError> {
        Ok(self.pg.put_copied_nodes(nodes)?)
    }

    fn sync(&self) -> Result<(), MaintenanceError> {
        Ok(())
    }

    fn local(&self) -> Option<&Store> {
        None
    }

    /// A row's age is its `created_ms` (a second put of an hour-old row refreshes it).
    fn each_age(
        &self,
        cutoff: &Cutoff,
        each: &mut dyn FnMut(Hash, bool) -> Result<(), MaintenanceError>,
    ) -> Result<(), MaintenanceError> {
        let cutoff = cutoff.as_ms();
        let mut after = None;
        loop {
            let page = self.pg.node_ages(after, BATCH)?;
            let Some(&(last, _)) = page.last() else {
                return Ok(());
            };
            after = Some(last);
            for (hash, created_ms) in page {
                each(hash, created_ms < cutoff)?;
            }
        }
    }

    /// Writers on other machines may re-put a row meanwhile: the delete re-checks each age.
    fn delete(&self, hashes: &[Hash], cutoff: &Cutoff) -> Result<Vec<Hash>, MaintenanceError> {
        Ok(self.pg.delete_nodes_older_than(hashes, cutoff.as_ms())?)
    }

    fn each_stored(&self, each: &mut dyn FnMut(Stored)) -> Result<(), MaintenanceError> {
        let mut after = None;
        loop {
            let page = self.pg.scan_nodes(after, BATCH)?;
            let Some(last) = page.last() else {
                return Ok(());
            };
            after = Some(last.hash);
            for row in page {
                each(Stored {
                    hash: Some(row.hash),
                    path: Default::default(),
                    node: row.node.map_err(|e| e.to_string()),
                });
            }
        }
    }

    fn has(&self, hash: Hash) -> Result<bool, MaintenanceError> {
        Ok(self.pg.has_node(hash)?)
    }

    /// The cache serves an intact row; a damaged cache file is not the node's damage
    /// ([`Nodes::check_cache`] reports it), so the row is read instead.
    fn read_checked(&self, hash: Hash) -> Result<Node, Condition> {
        if let Some(Ok(node)) = self.cache.map(|store| store.get(hash)) {
            return Ok(node);
        }
        match self.pg.get_node(hash) {
            Ok(node) => Ok(node),
            Err(PgError::NotFound(_)) => Err(Condition::Missing),
            Err(e) => Err(Condition::Corrupt(e.to_string())),
        }
    }

    /// The node files of the cache that do not hold their node, and those of nodes the table
    /// no longer has: derived files, which `--repair` removes.
    fn check_cache(&self, present: &HashSet<Hash>) -> Result<Vec<Derived>, MaintenanceError> {
        let Some(store) = self.cache else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for (path, hash) in store.scan_objects()? {
            let Some(hash) = hash else {
                if path.is_file() {
                    out.push(Derived {
                        path,
                        problem: "stray file in the node cache: the name is not a node hash".into(),
                    });
                }
                continue;
            };
            let problem = match std::fs::read(&path) {
                Err(e) => format!("cached node file cannot be read: {e}"),
                Ok(bytes) => match parse_node_file(hash, &path, &bytes) {
                    Err(e) => format!("cached node file: {e}"),
                    Ok(_) if !present.contains(&hash) && !self.pg.has_node(hash)? => {
                        "cached node is no longer in the database".to_owned()
                    }
                    Ok(_) => continue,
                },
            };
            out.push(Derived { path, problem });
        }
        Ok(out)
    }
}
