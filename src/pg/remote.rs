//! [`PgStore`] as the shared node table behind a directory store ([`crate::cas::remote`]).

use serde_json::Value;

use crate::cas::remote::{RemoteError, RemoteNodes};
use crate::cas::{Hash, Node};

use super::error::PgError;
use super::store::PgStore;

fn remote(e: PgError) -> RemoteError {
    RemoteError {
        collision: matches!(e, PgError::Collision { .. }),
        message: e.to_string(),
    }
}

impl RemoteNodes for PgStore {
    fn put(&self, type_hash: Hash, payload: &Value) -> Result<(), RemoteError> {
        self.put_node(type_hash, payload)
            .map(|_| ())
            .map_err(remote)
    }

    fn get(&self, hash: Hash) -> Result<Option<Node>, RemoteError> {
        match self.get_node(hash) {
            Ok(node) => Ok(Some(node)),
            Err(PgError::NotFound(_)) => Ok(None),
            Err(e) => Err(remote(e)),
        }
    }

    fn has(&self, hash: Hash) -> Result<bool, RemoteError> {
        self.has_node(hash).map_err(remote)
    }

    fn list_all(&self) -> Result<Vec<Hash>, RemoteError> {
        PgStore::list_all(self).map_err(remote)
    }

    fn list_type(&self, type_hash: Hash) -> Result<Vec<Hash>, RemoteError> {
        PgStore::list_type(self, type_hash).map_err(remote)
    }
}
