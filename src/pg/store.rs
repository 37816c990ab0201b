//! [`PgStore`]: one connection to the PostgreSQL store, and the nodes table.
//!
//! A node row holds the canonical bytes of `{"payload": P, "type": T}` — exactly the bytes its hash
//! is computed from (`docs/store.md#hashes`) — so a row can be verified without re-encoding
//! anything.
//!
//! Architecture Invariant: nodes are write-once. A put inserts with `on conflict do nothing` and
//! then compares the stored bytes with its own: equal is success (idempotent), different is a
//! collision; a row is never updated. Every get re-hashes the stored bytes and refuses a row
//! that does not hash to its key.
//!
//! Puts do no schema validation: like the directory store's internal writer, this is the layer
//! below validation. The storage seam puts validation (schemas, `cas_ref`s) above both backends.

use std::sync::{Mutex, MutexGuard};

use postgres::Client;
use serde_json::Value;

use crate::cas::canonical::node_bytes;
use crate::cas::remote::{RemoteError, RemoteNodes};
use crate::cas::{Hash, Node, builtin};

use super::config::PgConfig;
use super::error::{PgError, describe, is_connection_loss};
use super::schema;

/// A put of a node already stored marks it as written now when its row is older than this
/// (an hour), as a directory store touches the file: GC spares nodes younger than its grace
/// period (a day by default), so a writer that re-puts an old node and is about to refer to it
/// does not lose it to a GC that marked before the reference existed. Only the time changes;
/// the bytes are never rewritten.
const TOUCH_AFTER_MS: i64 = 3_600_000;

/// A connection to one uwf database. Methods take `&self`; calls are serialised on the one
/// connection, so open one store per thread that should work in parallel.
///
/// A lost connection fails the call that noticed it ([`PgError::ConnectionLost`]); the next
/// call reconnects. Nothing is retried behind the caller's back: a compare-and-set whose reply
/// was lost may or may not have happened, and only the caller knows how to re-check.
pub struct PgStore {
    config: PgConfig,
    client: Mutex<Option<Client>>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("config", &self.config)
            .finish()
    }
}

impl PgStore {
    /// Connects, migrates the schema if needed (refusing a newer one) and writes the bootstrap
    /// and built-in schema nodes if they are missing.
    pub fn open(config: &PgConfig) -> Result<PgStore, PgError> {
        let mut client = config.connect()?;
        schema::migrate(&mut client)?;
        let store = PgStore {
            config: config.clone(),
            client: Mutex::new(Some(client)),
        };
        // One round trip when they are there already (every open but the first).
        let wanted: Vec<String> = std::iter::once(Hash::META)
            .chain(builtin::all().iter().map(|b| b.hash))
            .map(|h| h.to_string())
            .collect();
        let present: i64 = store
            .with_client("check built-in schemas", |c| {
                c.query_one(
                    "select count(*) from nodes where hash = any($1)",
                    &[&wanted],
                )
            })?
            .get(0);
        if present != wanted.len() as i64 {
            store.put_node(Hash::ZERO, &builtin::bootstrap_payload())?;
            for b in builtin::all() {
                store.put_node(Hash::META, b.schema())?;
            }
        }
        Ok(store)
    }

    /// The configuration this store connects with.
    pub(crate) fn config(&self) -> &PgConfig {
        &self.config
    }

    /// Runs `f` on the connection (reconnecting first if it was lost) and classifies its error.
    pub(crate) fn with_client<T>(
        &self,
        action: &'static str,
        f: impl FnOnce(&mut Client) -> Result<T, postgres::Error>,
    ) -> Result<T, PgError> {
        let mut guard = self.lock();
        if guard.as_ref().is_none_or(Client::is_closed) {
            *guard = None;
            *guard = Some(self.config.connect()?);
        }
        let client = guard.as_mut().expect("connected just above");
        f(client).map_err(|e| {
            if is_connection_loss(&e) {
                *guard = None;
                PgError::ConnectionLost {
                    target: self.config.target(),
                    action,
                    reason: describe(&e),
                }
            } else {
                PgError::Query {
                    action,
                    reason: describe(&e),
                }
            }
        })
    }

    fn lock(&self) -> MutexGuard<'_, Option<Client>> {
        // A poisoned lock only means a panic mid-call; the connection is re-checked on use.
        self.client.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the server answers (`select 1`), reconnecting if needed.
    pub(crate) fn ping(&self) -> Result<(), PgError> {
        self.with_client("ping", |c| c.simple_query("select 1").map(drop))
    }

    /// Stores a node (no schema validation, see the module doc) and returns its hash.
    /// Idempotent; different content under an existing hash is [`PgError::Collision`].
    pub fn put_node(&self, type_hash: Hash, payload: &Value) -> Result<Hash, PgError> {
        let bytes = node_bytes(type_hash, payload);
        let hash = Hash::of_bytes(&bytes);
        let key = hash.to_string();
        let type_key = type_hash.to_string();
        let now = crate::cas::store::now_ms() as i64;
        let (inserted, existing) = self.with_client("put node", |c| {
            let row = c.query_one(
                "with ins as (
                     insert into nodes (hash, type_hash, bytes, created_ms)
                     values ($1, $2, $3, $4) on conflict (hash) do nothing returning 1
                 ), touched as (
                     update nodes set created_ms = $4
                     where hash = $1 and bytes = $3 and created_ms < $4 - $5
                       and not exists (select 1 from ins)
                 )
                 select exists (select 1 from ins),
                        (select bytes from nodes where hash = $1)",
                &[&key, &type_key, &bytes, &now, &TOUCH_AFTER_MS],
            )?;
            Ok((row.get::<_, bool>(0), row.get::<_, Option<Vec<u8>>>(1)))
        })?;
        if inserted {
            return Ok(hash);
        }
        // A row committed by a racing writer after this statement's snapshot is invisible to
        // it; read it again.
        let existing = match existing {
            Some(bytes) => bytes,
            None => self.stored_bytes(hash)?.ok_or_else(|| PgError::Query {
                action: "put node",
                reason: format!("{hash} neither inserted nor found"),
            })?,
        };
        if existing != bytes {
            return Err(PgError::Collision { hash });
        }
        Ok(hash)
    }

    /// Whether a node row with this hash exists (no verification).
    pub fn has_node(&self, hash: Hash) -> Result<bool, PgError> {
        let key = hash.to_string();
        self.with_client("has node", |c| {
            Ok(c.query_one(
                "select exists (select 1 from nodes where hash = $1)",
                &[&key],
            )?
            .get(0))
        })
    }

    /// Reads a node, verifying that its bytes hash to its name.
    pub fn get_node(&self, hash: Hash) -> Result<Node, PgError> {
        let key = hash.to_string();
        let row = self.with_client("get node", |c| {
            c.query_opt(
                "select type_hash, bytes, created_ms from nodes where hash = $1",
                &[&key],
            )
        })?;
        let row = row.ok_or(PgError::NotFound(hash))?;
        parse_typed_row(hash, row.get(0), row.get(1), row.get(2))
    }

    /// The hashes of all nodes of one type, sorted.
    pub fn list_type(&self, type_hash: Hash) -> Result<Vec<Hash>, PgError> {
        let key = type_hash.to_string();
        let rows = self.with_client("list nodes", |c| {
            c.query(
                "select hash from nodes where type_hash = $1 order by hash",
                &[&key],
            )
        })?;
        parse_hashes(rows.iter().map(|r| r.get::<_, String>(0)))
    }

    /// The hashes of all nodes, sorted.
    pub fn list_all(&self) -> Result<Vec<Hash>, PgError> {
        let rows = self.with_client("list nodes", |c| {
            c.query("select hash from nodes order by hash", &[])
        })?;
        parse_hashes(rows.iter().map(|r| r.get::<_, String>(0)))
    }

    fn stored_bytes(&self, hash: Hash) -> Result<Option<Vec<u8>>, PgError> {
        let key = hash.to_string();
        let row = self.with_client("get node", |c| {
            c.query_opt("select bytes from nodes where hash = $1", &[&key])
        })?;
        Ok(row.map(|r| r.get(0)))
    }
}

/// [`parse_row`], and the row's `type_hash` column must name the type in its bytes.
pub(super) fn parse_typed_row(
    hash: Hash,
    type_column: &str,
    bytes: &[u8],
    created_ms: i64,
) -> Result<Node, PgError> {
    let node = parse_row(hash, bytes, created_ms)?;
    if type_column != node.type_hash.to_string() {
        return Err(PgError::Corrupt {
            hash,
            reason: format!(
                "type column {type_column} differs from the type {} in its bytes",
                node.type_hash
            ),
        });
    }
    Ok(node)
}

/// Parses and verifies the stored bytes of a node.
fn parse_row(hash: Hash, bytes: &[u8], created_ms: i64) -> Result<Node, PgError> {
    let actual = Hash::of_bytes(bytes);
    if actual != hash {
        return Err(PgError::HashMismatch { hash, actual });
    }
    let corrupt = |reason: String| PgError::Corrupt { hash, reason };
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| corrupt(format!("not JSON: {e}")))?;
    let Value::Object(mut fields) = value else {
        return Err(corrupt("not a JSON object".to_owned()));
    };
    let type_hash = fields
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| corrupt("no `type` string".to_owned()))
        .and_then(|t| Hash::parse(t).map_err(|e| corrupt(e.to_string())))?;
    let payload = fields
        .remove("payload")
        .ok_or_else(|| corrupt("no `payload`".to_owned()))?;
    if node_bytes(type_hash, &payload) != bytes {
        return Err(corrupt("bytes are not canonical".to_owned()));
    }
    Ok(Node {
        hash,
        type_hash,
        payload,
        timestamp: u64::try_from(created_ms).unwrap_or(0),
    })
}

pub(crate) fn parse_hashes(texts: impl Iterator<Item = String>) -> Result<Vec<Hash>, PgError> {
    texts
        .map(|t| {
            Hash::parse(&t).map_err(|e| PgError::Query {
                action: "reading a hash column",
                reason: e.to_string(),
            })
        })
        .collect()
}

// ── As the shared node table behind a directory store (`cas::remote`) ─────────────────────

fn remote_error(e: PgError) -> RemoteError {
    RemoteError {
        collision: matches!(e, PgError::Collision { .. }),
        message: e.to_string(),
    }
}

impl RemoteNodes for PgStore {
    fn put(&self, type_hash: Hash, payload: &Value) -> Result<(), RemoteError> {
        self.put_node(type_hash, payload)
            .map(|_| ())
            .map_err(remote_error)
    }

    fn get(&self, hash: Hash) -> Result<Option<Node>, RemoteError> {
        match self.get_node(hash) {
            Ok(node) => Ok(Some(node)),
            Err(PgError::NotFound(_)) => Ok(None),
            Err(e) => Err(remote_error(e)),
        }
    }

    fn has(&self, hash: Hash) -> Result<bool, RemoteError> {
        self.has_node(hash).map_err(remote_error)
    }

    fn list_all(&self) -> Result<Vec<Hash>, RemoteError> {
        PgStore::list_all(self).map_err(remote_error)
    }

    fn list_type(&self, type_hash: Hash) -> Result<Vec<Hash>, RemoteError> {
        PgStore::list_type(self, type_hash).map_err(remote_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rows_verify_their_hash_and_canonical_form() {
        let payload = json!({"b": 1, "a": "x"});
        let bytes = node_bytes(Hash::META, &payload);
        let hash = Hash::of_bytes(&bytes);
        let node = parse_row(hash, &bytes, 7).expect("valid row");
        assert_eq!(
            (node.type_hash, node.payload, node.timestamp),
            (Hash::META, payload, 7)
        );

        let tampered = String::from_utf8(bytes.clone())
            .expect("utf8")
            .replace("\"x\"", "\"y\"");
        let err = parse_row(hash, tampered.as_bytes(), 7).expect_err("tampered");
        assert!(matches!(err, PgError::HashMismatch { .. }), "{err}");

        let spaced = b"{\"payload\": 1,\"type\":\"F5VV55NBKX1R5\"}";
        let err = parse_row(Hash::of_bytes(spaced), spaced, 0).expect_err("not canonical");
        assert!(err.to_string().contains("not canonical"), "{err}");
    }
}
