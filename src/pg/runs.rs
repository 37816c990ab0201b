//! Run text, run state and lineage in the database (`docs/several-machines.md#reference`): what a
//! step leaves besides nodes, so every machine sees every machine's work.
//!
//! - `run_text`: a thread's log and event feed as byte ranges. A row's `pos` is the byte offset
//!   of its `bytes` in the file, computed by the insert from the rows already committed, so a
//!   file is its rows in `pos` order, without gaps or overlaps. Two writers racing on one file
//!   (a kill's event while a step writes) compute the same `pos`; the loser's insert does
//!   nothing and it tries again with its next batch.
//! - `run_state`: the last step attempt's outcome and the running step's record, as JSON.
//! - `lineage`: where a fork (`kind = fork`) or a child thread (`kind = child`) comes from.
//!
//! Architecture Invariant: run text is only appended; a reader that has read a file up to an
//! offset never sees the bytes before it change. Every insert into `run_text` notifies
//! [`super::schema::RUNS_CHANNEL`] with the thread id.

use postgres::{Client, Statement};

use super::error::PgError;
use super::store::PgStore;

/// A file of a thread that grows while it lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunFileKind {
    /// The agents' output with step headers.
    Log,
    /// The change feed, one JSON line per event.
    Events,
}

impl RunFileKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RunFileKind::Log => "log",
            RunFileKind::Events => "events",
        }
    }
}

/// Bytes to append to one file of one thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAppend {
    pub thread: String,
    pub file: RunFileKind,
    pub at_ms: u64,
    pub bytes: Vec<u8>,
}

/// A change of a thread's run state; `None` fields are left as they are.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunStateChange {
    pub thread: String,
    /// The last step attempt's outcome (JSON).
    pub last: Option<String>,
    /// The running step's record (JSON; `{}` when no step runs).
    pub info: Option<String>,
}

/// Where a thread comes from: a fork of a step, or a child started by a parent's role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LineageRow {
    pub thread: String,
    /// `fork` or `child`.
    pub kind: String,
    /// The thread forked from (when known) or the parent.
    pub source: Option<String>,
    /// The forked step, or the parent's head when the child started.
    pub step: String,
    /// The parent's role that a child plays.
    pub role: Option<String>,
    pub at_ms: u64,
}

/// The one statement that writes a batch: appends (all to distinct files) and state changes
/// (all of distinct threads). Returns the thread and file of every append that was made.
const WRITE_BATCH: &str = "
with texts as (
    insert into run_text (thread, file, pos, at_ms, bytes)
    select u.t, u.f,
           coalesce((select r.pos + octet_length(r.bytes) from run_text r
                     where r.thread = u.t and r.file = u.f
                     order by r.pos desc limit 1), 0),
           u.a, u.b
    from unnest($1::text[], $2::text[], $3::bigint[], $4::bytea[]) as u(t, f, a, b)
    on conflict do nothing
    returning thread, file
), states as (
    insert into run_state as s (thread, last, info, updated_ms)
    select v.t, v.l, v.i, $8 from unnest($5::text[], $6::text[], $7::text[]) as v(t, l, i)
    on conflict (thread) do update
        set last = coalesce(excluded.last, s.last),
            info = coalesce(excluded.info, s.info),
            updated_ms = excluded.updated_ms
)
select thread, file from texts";

/// Prepares [`write_batch`]'s statement on a connection of its own (the run sink's).
pub(crate) fn prepare_batch(client: &mut Client) -> Result<Statement, postgres::Error> {
    client.prepare(WRITE_BATCH)
}

/// Writes appends and state changes in one round trip. Appends must name distinct files and
/// changes distinct threads (merge them first). Returns the indexes into `appends` that were
/// not made because another writer appended to the same file at the same moment: send them
/// again.
pub(crate) fn write_batch(
    client: &mut Client,
    statement: &Statement,
    appends: &[RunAppend],
    changes: &[RunStateChange],
    now_ms: u64,
) -> Result<Vec<usize>, postgres::Error> {
    let threads: Vec<&str> = appends.iter().map(|a| a.thread.as_str()).collect();
    let files: Vec<&str> = appends.iter().map(|a| a.file.as_str()).collect();
    let times: Vec<i64> = appends.iter().map(|a| a.at_ms as i64).collect();
    let bytes: Vec<&[u8]> = appends.iter().map(|a| a.bytes.as_slice()).collect();
    let state_threads: Vec<&str> = changes.iter().map(|c| c.thread.as_str()).collect();
    let lasts: Vec<Option<&str>> = changes.iter().map(|c| c.last.as_deref()).collect();
    let infos: Vec<Option<&str>> = changes.iter().map(|c| c.info.as_deref()).collect();
    let now = now_ms as i64;
    let rows = client.query(
        statement,
        &[
            &threads,
            &files,
            &times,
            &bytes,
            &state_threads,
            &lasts,
            &infos,
            &now,
        ],
    )?;
    let made: std::collections::HashSet<(String, String)> = rows
        .iter()
        .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
        .collect();
    Ok(appends
        .iter()
        .enumerate()
        .filter(|(_, a)| !made.contains(&(a.thread.clone(), a.file.as_str().to_owned())))
        .map(|(i, _)| i)
        .collect())
}

impl PgStore {
    /// Appends and state changes through this store's connection (see [`write_batch`]).
    pub fn write_runs(
        &self,
        appends: &[RunAppend],
        changes: &[RunStateChange],
    ) -> Result<Vec<usize>, PgError> {
        let now = crate::cas::store::now_ms();
        self.with_client("write run text", |c| {
            let statement = prepare_batch(c)?;
            write_batch(c, &statement, appends, changes, now)
        })
    }

    /// The size of one file of a thread and when it was last appended to (`None`: nothing
    /// was ever written to it).
    pub fn run_text_size(
        &self,
        thread: &str,
        file: RunFileKind,
    ) -> Result<Option<(u64, u64)>, PgError> {
        let row = self.with_client("read run text size", |c| {
            c.query_opt(
                "select pos + octet_length(bytes), at_ms from run_text
                 where thread = $1 and file = $2 order by pos desc limit 1",
                &[&thread, &file.as_str()],
            )
        })?;
        Ok(row.map(|r| (r.get::<_, i64>(0) as u64, r.get::<_, i64>(1) as u64)))
    }

    /// Up to `max` bytes of one file of a thread from byte `offset` on (fewer at its end).
    pub fn read_run_text(
        &self,
        thread: &str,
        file: RunFileKind,
        offset: u64,
        max: usize,
    ) -> Result<Vec<u8>, PgError> {
        let from = offset as i64;
        let until = offset.saturating_add(max as u64).min(i64::MAX as u64) as i64;
        let rows = self.with_client("read run text", |c| {
            c.query(
                "select pos, bytes from run_text
                 where thread = $1 and file = $2 and pos < $4
                   and pos >= coalesce((select max(pos) from run_text
                                        where thread = $1 and file = $2 and pos <= $3), 0)
                 order by pos",
                &[&thread, &file.as_str(), &from, &until],
            )
        })?;
        let mut out = Vec::new();
        for row in rows {
            let pos = row.get::<_, i64>(0) as u64;
            let bytes: Vec<u8> = row.get(1);
            let skip = offset.saturating_sub(pos) as usize;
            if skip < bytes.len() {
                out.extend_from_slice(&bytes[skip..]);
            }
            if out.len() >= max {
                out.truncate(max);
                break;
            }
        }
        Ok(out)
    }

    /// The last step attempt's outcome and the running step's record of a thread, as JSON,
    /// and when either last changed (ms; 0 when never).
    pub fn run_state(
        &self,
        thread: &str,
    ) -> Result<(Option<String>, Option<String>, u64), PgError> {
        let row = self.with_client("read run state", |c| {
            c.query_opt(
                "select last, info, updated_ms from run_state where thread = $1",
                &[&thread],
            )
        })?;
        Ok(row.map_or((None, None, 0), |r| {
            (r.get(0), r.get(1), r.get::<_, i64>(2) as u64)
        }))
    }

    /// Records where a thread comes from (once: a second record of the same thread is kept
    /// as the first).
    pub(crate) fn add_lineage(&self, row: &LineageRow) -> Result<(), PgError> {
        let at = row.at_ms as i64;
        self.with_client("record lineage", |c| {
            c.execute(
                "insert into lineage (thread, kind, source, step, role, at_ms)
                 values ($1, $2, $3, $4, $5, $6) on conflict (thread) do nothing",
                &[
                    &row.thread,
                    &row.kind,
                    &row.source,
                    &row.step,
                    &row.role,
                    &at,
                ],
            )
            .map(drop)
        })
    }

    /// Where `thread` comes from, if it is a fork or a child.
    pub(crate) fn lineage_of(&self, thread: &str) -> Result<Option<LineageRow>, PgError> {
        let rows = self.with_client("read lineage", |c| {
            c.query(
                "select thread, kind, source, step, role, at_ms from lineage where thread = $1",
                &[&thread],
            )
        })?;
        Ok(rows.iter().map(lineage_row).next())
    }

    /// The threads of one kind that come from `source`, oldest first.
    pub(crate) fn lineage_from(
        &self,
        source: &str,
        kind: &str,
    ) -> Result<Vec<LineageRow>, PgError> {
        let rows = self.with_client("read lineage", |c| {
            c.query(
                "select thread, kind, source, step, role, at_ms from lineage
                 where source = $1 and kind = $2 order by at_ms, thread",
                &[&source, &kind],
            )
        })?;
        Ok(rows.iter().map(lineage_row).collect())
    }

    /// Every lineage row of one kind, oldest first.
    pub(crate) fn lineage_all(&self, kind: &str) -> Result<Vec<LineageRow>, PgError> {
        let rows = self.with_client("read lineage", |c| {
            c.query(
                "select thread, kind, source, step, role, at_ms from lineage
                 where kind = $1 order by at_ms, thread",
                &[&kind],
            )
        })?;
        Ok(rows.iter().map(lineage_row).collect())
    }

    /// Removes the log, event feed and run state of threads archived before `before_ms`
    /// (lineage stays: it is small and says where kept threads come from); with `dry_run`,
    /// only counts them. Returns the number of threads whose run text goes and its bytes.
    pub fn prune_runs(&self, before_ms: u64, dry_run: bool) -> Result<(u64, u64), PgError> {
        let before = before_ms as i64;
        let old = "select thread from history
                   where completed_at < to_timestamp($1::bigint / 1000.0)";
        let sql = if dry_run {
            format!(
                "select count(distinct thread), coalesce(sum(octet_length(bytes)), 0)::bigint
                 from run_text where thread in ({old})"
            )
        } else {
            format!(
                "with texts as (
                     delete from run_text where thread in ({old})
                     returning thread, octet_length(bytes) as n
                 ), states as (
                     delete from run_state where thread in ({old})
                 )
                 select count(distinct thread), coalesce(sum(n), 0)::bigint from texts"
            )
        };
        let row = self.with_client("remove old logs", |c| c.query_one(&sql, &[&before]))?;
        Ok((row.get::<_, i64>(0) as u64, row.get::<_, i64>(1) as u64))
    }
}

fn lineage_row(r: &postgres::Row) -> LineageRow {
    LineageRow {
        thread: r.get(0),
        kind: r.get(1),
        source: r.get(2),
        step: r.get(3),
        role: r.get(4),
        at_ms: r.get::<_, i64>(5) as u64,
    }
}
