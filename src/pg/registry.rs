//! The workflow registry in PostgreSQL: name → current hash, with earlier versions.
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

/// One version of a registered name, as the engine's registry keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RegistryVersion {
    pub hash: Hash,
    pub registered_ms: i64,
    /// The text node saved for this version (comments and all), if any.
    pub source: Option<Hash>,
}

/// A registered name: its current version and the earlier ones, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RegistryName {
    pub name: String,
    pub current: RegistryVersion,
    pub history: Vec<RegistryVersion>,
}

/// The advisory lock key serialising whole-registry changes (`uwf` + `reg`).
const REGISTRY_LOCK: i64 = 0x0075_7766_0072_6567;

impl PgStore {
    /// Every registered name with its versions and sources, sorted by name.
    pub(crate) fn registry_names(&self) -> Result<Vec<RegistryName>, PgError> {
        let (current, versions) = self.with_client("read registry", |c| {
            let mut tx = c.transaction()?;
            let rows = read_rows(&mut tx)?;
            tx.commit()?;
            Ok(rows)
        })?;
        assemble(&current, &versions)
    }

    /// Reads the whole registry, lets `change` edit it, and writes it back, in one transaction
    /// under an advisory lock (so concurrent changes serialise and none is lost). Nothing is
    /// written when `change` returns `Err`.
    pub(crate) fn update_registry<R, E>(
        &self,
        change: impl FnOnce(&mut Vec<RegistryName>) -> Result<R, E>,
    ) -> Result<Result<R, E>, PgError> {
        let mut change = Some(change);
        let mut outcome = None;
        self.with_client("update registry", |c| {
            let mut tx = c.transaction()?;
            tx.execute("select pg_advisory_xact_lock($1)", &[&REGISTRY_LOCK])?;
            let (current, versions) = read_rows(&mut tx)?;
            let mut names = match assemble(&current, &versions) {
                Ok(names) => names,
                Err(e) => {
                    outcome = Some(Err(e));
                    return Ok(());
                }
            };
            let before = names.clone();
            let change = change.take().expect("called once");
            match change(&mut names) {
                Err(e) => {
                    outcome = Some(Ok(Err(e)));
                    return Ok(());
                }
                Ok(r) => outcome = Some(Ok(Ok(r))),
            }
            if names == before {
                return tx.commit();
            }
            tx.execute("delete from registry_versions", &[])?;
            tx.execute("delete from registry", &[])?;
            for n in &names {
                let current = std::iter::once(("registry", &n.current));
                for (table, v) in current.chain(n.history.iter().map(|v| ("registry_versions", v)))
                {
                    tx.execute(
                        &format!(
                            "insert into {table} (name, hash, registered_ms, source)
                             values ($1, $2, $3, $4)"
                        ),
                        &[
                            &n.name,
                            &v.hash.to_string(),
                            &v.registered_ms,
                            &v.source.map(|s| s.to_string()),
                        ],
                    )?;
                }
            }
            tx.commit()
        })?;
        outcome.expect("set by the transaction")
    }
}

/// The registry's current versions and earlier ones (oldest first), as rows.
fn read_rows(
    tx: &mut postgres::Transaction<'_>,
) -> Result<(Vec<postgres::Row>, Vec<postgres::Row>), postgres::Error> {
    let current = tx.query(
        "select name, hash, registered_ms, source from registry order by name",
        &[],
    )?;
    let versions = tx.query(
        "select name, hash, registered_ms, source from registry_versions order by name, seq",
        &[],
    )?;
    Ok((current, versions))
}

fn version_row(row: &postgres::Row) -> Result<RegistryVersion, PgError> {
    let source: Option<String> = row.get(3);
    Ok(RegistryVersion {
        hash: hash_column(row, 1)?,
        registered_ms: row.get(2),
        source: source
            .map(|s| {
                Hash::parse(&s).map_err(|e| PgError::Query {
                    action: "reading a hash column",
                    reason: e.to_string(),
                })
            })
            .transpose()?,
    })
}

fn assemble(
    current: &[postgres::Row],
    versions: &[postgres::Row],
) -> Result<Vec<RegistryName>, PgError> {
    let mut out = Vec::with_capacity(current.len());
    for row in current {
        let name: String = row.get(0);
        let mut history = Vec::new();
        for v in versions.iter().filter(|v| v.get::<_, &str>(0) == name) {
            history.push(version_row(v)?);
        }
        out.push(RegistryName {
            current: version_row(row)?,
            name,
            history,
        });
    }
    Ok(out)
}
