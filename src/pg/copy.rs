//! Bulk reads and writes for `uwf store copy`: nodes a thousand at a time with their
//! original timestamps, and whole sets of active and archived threads in one transaction.
//!
//! Architecture Invariant: these keep the rules of the rest of the backend. Node rows are
//! write-once (`on conflict do nothing`, then the stored bytes are compared with the copied
//! ones: a difference is a collision, never an overwrite), every node read is re-hashed, and
//! threads are only ever added to a database that has none, active or archived.

use std::collections::HashMap;

use crate::cas::canonical::node_bytes;
use crate::cas::{Hash, Node};

use super::error::PgError;
use super::rows::{Exported, RowFacts, from_bigint, to_bigint};
use super::store::{PgStore, parse_typed_row};
use super::threads::hash_column;

/// What a database already holds besides nodes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Occupancy {
    pub threads: i64,
    pub archived: i64,
    pub workflows: i64,
}

impl Occupancy {
    /// Whether there is no thread (active or archived) and no registered workflow.
    pub(crate) fn is_empty(&self) -> bool {
        self.threads == 0 && self.archived == 0 && self.workflows == 0
    }
}

/// `timestamptz` from milliseconds since the epoch, exactly (integer arithmetic on an interval).
const FROM_MS: &str = "timestamptz 'epoch' + ms * interval '1 millisecond'";

impl PgStore {
    /// How many active threads, archived threads and registered workflows there are.
    pub(crate) fn occupancy(&self) -> Result<Occupancy, PgError> {
        self.with_client("count threads and workflows", |c| {
            let row = c.query_one(
                "select (select count(*) from threads), (select count(*) from history),
                        (select count(*) from registry)",
                &[],
            )?;
            Ok(Occupancy {
                threads: row.get(0),
                archived: row.get(1),
                workflows: row.get(2),
            })
        })
    }

    /// Reads the nodes `hashes` in one query, each verified as [`PgStore::get_node`] does, in
    /// the order asked. A hash with no row is [`PgError::NotFound`].
    pub(crate) fn nodes_by_hash(&self, hashes: &[Hash]) -> Result<Vec<Node>, PgError> {
        let keys: Vec<String> = hashes.iter().map(Hash::to_string).collect();
        let rows = self.with_client("read nodes", |c| {
            c.query(
                "select hash, type_hash, bytes, created_ms from nodes where hash = any($1)",
                &[&keys],
            )
        })?;
        let mut found = HashMap::with_capacity(rows.len());
        for row in &rows {
            let hash = hash_column(row, 0)?;
            let node = parse_typed_row(hash, row.get(1), row.get(2), row.get(3))?;
            found.insert(hash, node);
        }
        hashes
            .iter()
            .map(|h| found.remove(h).ok_or(PgError::NotFound(*h)))
            .collect()
    }

    /// Writes nodes copied from another store in one statement, each keeping its timestamp as
    /// `created_ms`, then reads the batch's stored bytes back and compares them with the
    /// copied ones. No schema validation (like [`PgStore::put_node`]). Returns how many rows
    /// were new; a node already there with the same bytes is success, with different bytes a
    /// [`PgError::Collision`]; a node whose content does not hash to its `hash` is refused
    /// before anything is written.
    pub(crate) fn put_copied_nodes(&self, nodes: &[Node]) -> Result<usize, PgError> {
        let mut keys = Vec::with_capacity(nodes.len());
        let mut types = Vec::with_capacity(nodes.len());
        let mut all_bytes = Vec::with_capacity(nodes.len());
        let mut times = Vec::with_capacity(nodes.len());
        for node in nodes {
            let bytes = node_bytes(node.type_hash, &node.payload);
            let actual = Hash::of_bytes(&bytes);
            if actual != node.hash {
                return Err(PgError::HashMismatch {
                    hash: node.hash,
                    actual,
                });
            }
            keys.push(node.hash.to_string());
            types.push(node.type_hash.to_string());
            all_bytes.push(bytes);
            times.push(i64::try_from(node.timestamp).unwrap_or(i64::MAX));
        }
        let (inserted, stored) = self.with_client("copy nodes", |c| {
            let inserted: i64 = c
                .query_one(
                    "with ins as (
                         insert into nodes (hash, type_hash, bytes, created_ms)
                         select * from unnest($1::text[], $2::text[], $3::bytea[], $4::int8[])
                         on conflict (hash) do nothing returning 1
                     )
                     select count(*) from ins",
                    &[&keys, &types, &all_bytes, &times],
                )?
                .get(0);
            let stored = c.query(
                "select hash, bytes from nodes where hash = any($1)",
                &[&keys],
            )?;
            Ok((inserted, stored))
        })?;
        let stored: HashMap<String, Vec<u8>> =
            stored.iter().map(|row| (row.get(0), row.get(1))).collect();
        for (node, bytes) in nodes.iter().zip(&all_bytes) {
            match stored.get(&node.hash.to_string()) {
                Some(found) if found == bytes => {}
                Some(_) => return Err(PgError::Collision { hash: node.hash }),
                None => return Err(PgError::NotFound(node.hash)),
            }
        }
        Ok(usize::try_from(inserted).unwrap_or(0))
    }

    /// What each thread's row knows of it beyond its head (steps, what it spent, and the next
    /// role of an active one), by id; threads whose row does not know their steps are left out.
    pub(crate) fn row_facts(&self) -> Result<HashMap<String, RowFacts>, PgError> {
        let rows = self.with_client("list threads", |c| {
            c.query(
                "select id, steps, next, spent from threads where steps is not null
                 union all select thread, steps, null, spent from history where steps is not null",
                &[],
            )
        })?;
        Ok(rows
            .iter()
            .map(|row| {
                let facts = RowFacts {
                    steps: from_bigint(row.get(1)),
                    next: row.get(2),
                    spent: row.get(3),
                };
                (row.get(0), facts)
            })
            .collect())
    }

    /// Adds copied active and archived threads in one transaction, keeping start and
    /// completion times — only into a database with no thread at all: otherwise nothing is
    /// written and the answer is what is there (its `workflows` is not counted, 0). The tables
    /// are locked against writers for the transaction, so no thread can slip in between the
    /// check and the inserts. Active threads are not queued.
    pub(crate) fn insert_copied_threads(
        &self,
        threads: &Exported,
    ) -> Result<Result<(), Occupancy>, PgError> {
        let (active, archived, known) = (&threads.active, &threads.archived, &threads.known);
        let steps_of = |id: &str| known.get(id).map(|f| to_bigint(f.steps));
        let ids: Vec<&str> = active.iter().map(|t| t.id.as_str()).collect();
        let steps: Vec<Option<i64>> = active.iter().map(|t| steps_of(&t.id)).collect();
        let nexts: Vec<Option<&str>> = active
            .iter()
            .map(|t| known.get(&t.id).and_then(|f| f.next.as_deref()))
            .collect();
        let workflows: Vec<String> = active.iter().map(|t| t.workflow.to_string()).collect();
        let heads: Vec<String> = active.iter().map(|t| t.head.to_string()).collect();
        let parents: Vec<Option<&str>> = active.iter().map(|t| t.parent.as_deref()).collect();
        let started: Vec<Option<i64>> =
            active.iter().map(|t| t.started_ms.map(to_bigint)).collect();
        let spent_of = |id: &str| known.get(id).and_then(|f| f.spent.as_deref());
        let spent: Vec<Option<&str>> = active.iter().map(|t| spent_of(&t.id)).collect();

        let a_ids: Vec<&str> = archived.iter().map(|a| a.thread.as_str()).collect();
        let a_workflows: Vec<String> = archived.iter().map(|a| a.workflow.to_string()).collect();
        let a_heads: Vec<String> = archived.iter().map(|a| a.head.to_string()).collect();
        let a_status: Vec<&str> = archived.iter().map(|a| a.status.as_str()).collect();
        let a_parents: Vec<Option<&str>> = archived.iter().map(|a| a.parent.as_deref()).collect();
        let a_completed: Vec<i64> = archived.iter().map(|a| to_bigint(a.completed_ms)).collect();
        let a_steps: Vec<Option<i64>> = archived.iter().map(|a| steps_of(&a.thread)).collect();
        let a_spent: Vec<Option<&str>> = archived.iter().map(|a| spent_of(&a.thread)).collect();

        self.with_client("copy threads", |c| {
            let mut tx = c.transaction()?;
            tx.batch_execute("lock table threads, history in exclusive mode")?;
            let row = tx.query_one(
                "select (select count(*) from threads), (select count(*) from history)",
                &[],
            )?;
            let found = Occupancy {
                threads: row.get(0),
                archived: row.get(1),
                workflows: 0,
            };
            if !found.is_empty() {
                return Ok(Err(found));
            }
            tx.execute(
                &format!(
                    "insert into threads (id, workflow, head, parent, created_at, updated_at,
                                          steps, next, spent)
                     select id, workflow, head, parent, coalesce({FROM_MS}, now()), now(),
                            steps, next, spent
                     from unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[],
                                 $6::int8[], $7::text[], $8::text[])
                          as u(id, workflow, head, parent, ms, steps, next, spent)"
                ),
                &[
                    &ids, &workflows, &heads, &parents, &started, &steps, &nexts, &spent,
                ],
            )?;
            tx.execute(
                &format!(
                    "insert into history (thread, workflow, head, status, parent, completed_at,
                                          steps, spent)
                     select thread, workflow, head, status, parent, {FROM_MS}, steps, spent
                     from unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[],
                                 $6::int8[], $7::int8[], $8::text[])
                          as u(thread, workflow, head, status, parent, ms, steps, spent)"
                ),
                &[
                    &a_ids,
                    &a_workflows,
                    &a_heads,
                    &a_status,
                    &a_parents,
                    &a_completed,
                    &a_steps,
                    &a_spent,
                ],
            )?;
            tx.commit()?;
            Ok(Ok(()))
        })
    }
}
