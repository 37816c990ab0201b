//! The workflow registry in PostgreSQL: name → current hash, with earlier versions (SPEC §3.3).
//!
//! The same model as `registry.yaml`: registering changed content makes a new current version
//! and moves the previous one to `registry_versions`; identical content is a no-op. Each change
//! is one transaction holding the name's row lock, so concurrent registrations never lose a
//! version.

use crate::cas::Hash;

use super::error::PgError;
use super::store::PgStore;
use super::threads::hash_column;

/// What [`PgStore::register`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Registered {
    New,
    Unchanged,
    Updated { previous: Hash },
}

/// One registered name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryRow {
    pub name: String,
    pub hash: Hash,
    pub registered_ms: i64,
    /// Earlier versions `(hash, registered_ms)`, oldest first.
    pub history: Vec<(Hash, i64)>,
}

impl PgStore {
    /// Makes `hash` the current version of `name`.
    pub fn register(&self, name: &str, hash: Hash, now_ms: i64) -> Result<Registered, PgError> {
        let key = hash.to_string();
        self.with_client("register workflow", |c| {
            let mut tx = c.transaction()?;
            let inserted = tx.execute(
                "insert into registry (name, hash, registered_ms) values ($1, $2, $3)
                 on conflict (name) do nothing",
                &[&name, &key, &now_ms],
            )?;
            if inserted == 1 {
                tx.commit()?;
                return Ok(Ok(Registered::New));
            }
            let row = tx.query_one(
                "select hash, registered_ms from registry where name = $1 for update",
                &[&name],
            )?;
            let (current, since): (String, i64) = (row.get(0), row.get(1));
            if current == key {
                tx.commit()?;
                return Ok(Ok(Registered::Unchanged));
            }
            tx.execute(
                "delete from registry_versions where name = $1 and hash = $2",
                &[&name, &key],
            )?;
            tx.execute(
                "insert into registry_versions (name, hash, registered_ms) values ($1, $2, $3)",
                &[&name, &current, &since],
            )?;
            tx.execute(
                "update registry set hash = $2, registered_ms = $3 where name = $1",
                &[&name, &key, &now_ms],
            )?;
            tx.commit()?;
            Ok(Hash::parse(&current).map(|previous| Registered::Updated { previous }))
        })?
        .map_err(|e| PgError::Query {
            action: "register workflow",
            reason: e.to_string(),
        })
    }

    /// Every registered name with its versions, sorted by name.
    pub fn registry(&self) -> Result<Vec<RegistryRow>, PgError> {
        let rows = self.with_client("read registry", |c| {
            c.query(
                "select name, hash, registered_ms from registry order by name",
                &[],
            )
        })?;
        let versions = self.with_client("read registry", |c| {
            c.query(
                "select name, hash, registered_ms from registry_versions order by name, seq",
                &[],
            )
        })?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            let name: String = row.get(0);
            let mut history = Vec::new();
            for v in versions.iter().filter(|v| v.get::<_, &str>(0) == name) {
                history.push((hash_column(v, 1)?, v.get(2)));
            }
            out.push(RegistryRow {
                hash: hash_column(row, 1)?,
                registered_ms: row.get(2),
                name,
                history,
            });
        }
        Ok(out)
    }

    /// Removes a name; its versions' nodes stay (threads reference hashes, not names).
    pub fn unregister(&self, name: &str) -> Result<(), PgError> {
        let n = self.with_client("remove workflow", |c| {
            let mut tx = c.transaction()?;
            let n = tx.execute("delete from registry where name = $1", &[&name])?;
            tx.execute("delete from registry_versions where name = $1", &[&name])?;
            tx.commit()?;
            Ok(n)
        })?;
        if n == 0 {
            return Err(PgError::UnknownName(name.to_owned()));
        }
        Ok(())
    }
}
