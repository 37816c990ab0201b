//! The directory store's thread index (`docs/store.md`): one SQLite database, `index.db`, in WAL
//! mode, with a row per thread — active or archived — holding its head, workflow, status, times
//! and what lists show without reading the thread (steps, the next role, the last error, the
//! question it waits on). Every per-thread operation is one indexed statement, so it costs the
//! same at 100,000 threads as at 1,000, and a listing is one scan in id order (ULIDs sort by
//! creation), newest first.
//!
//! The first layout, `threads.yaml` (active id → head) and `history.jsonl` (archived threads), is
//! migrated on first use: the database is built under a temp name, the old files' entries copied
//! in, then hard-linked into place (never replacing one that exists), and only then are the old
//! files renamed to `*.migrated`. A `kill -9` at any point leaves either no `index.db` (the next
//! command migrates again from the untouched old files) or a complete one.
//!
//! Architecture Invariant: a head moves only by compare-and-set (`update … where head = ?`) in a
//! transaction that is synced before it returns (`synchronous=FULL`), so `kill -9` at any instant
//! leaves every thread at its old or its new head. The file only ever appears whole, so one that
//! exists without the schema (empty, truncated, overwritten) is damaged — an error naming the
//! file, never "no threads" (a GC that read it as empty would delete every thread's nodes).
//! Derived columns (`steps`, `next`, `error`, `awaiting`, `spent`) are caches of what the nodes
//! and run files say: `NULL` means "not known here", and readers then work it out the slow way.
//! So is `prompt`, what a search reads of the start prompt ([`search`]): written with the row,
//! and for rows made before it existed (or copied), by the first search.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, params};

use crate::cas::Hash;
use crate::engine::storage::index_files::IndexError;
use crate::pg::{
    ArchivedThread, Entry, IndexRow, Learned, NewThread, SPENT_LINES_LIMIT, SpentChange, Successor,
};

mod connection;
mod make;
mod search;
pub use crate::pg::search_text;
pub(crate) use connection::at_exit;
pub use connection::close_all;
use connection::{with, write};
pub use search::TextFilter;
pub(crate) use search::{note_prompts, unsearchable};

/// The database's file name under the storage root.
pub(crate) const FILE: &str = "index.db";

/// Every column a row is written with (and `prompt`).
const COLUMNS: &str = "id, workflow, head, status, parent, created_ms, updated_ms, completed_ms, \
                       steps, next, error, awaiting, spent";

/// The columns [`read_row`] reads, in its order: an archived row's last change is its end.
const READ: &str = "id, workflow, head, status, parent, coalesce(completed_ms, updated_ms), \
                    steps, next, error, awaiting, spent";

/// A row read as [`READ`]. `running` is not known here (a step's lock is a file).
fn read_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<IndexRow> {
    let hash = |i: usize| -> rusqlite::Result<Hash> {
        let text: String = r.get(i)?;
        Hash::parse(&text).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, Box::new(e))
        })
    };
    let ms = |i: usize| -> rusqlite::Result<Option<u64>> {
        Ok(r.get::<_, Option<i64>>(i)?
            .map(|v| u64::try_from(v).unwrap_or(0)))
    };
    Ok(IndexRow {
        id: r.get(0)?,
        workflow: hash(1)?,
        head: hash(2)?,
        status: r.get(3)?,
        parent: r.get(4)?,
        updated_ms: ms(5)?.unwrap_or(0),
        steps: ms(6)?,
        next: r.get(7)?,
        error: r.get(8)?,
        awaiting: r.get(9)?,
        running: None,
        spent: r.get(10)?,
    })
}

/// What a listing wants, in the database's terms (live statuses are the caller's).
#[derive(Debug, Clone, Default)]
pub struct Scan {
    /// Archived threads too.
    pub all: bool,
    /// Only these workflow versions (`None`: any).
    pub workflows: Option<Vec<Hash>>,
    /// Only threads whose id sorts at or after this (a ULID made from a time: started since).
    pub since_id: Option<String>,
    /// Only threads whose id sorts before this (keyset paging: the last id of the page before).
    pub before_id: Option<String>,
    /// Only threads whose prompt or id holds this text, or whose workflow is one of its versions.
    pub text: Option<TextFilter>,
}

/// The outcome of a compare-and-set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cas {
    Moved,
    /// Not moved: the thread's row as it is (another head, or archived).
    Refused(Box<IndexRow>),
    Unknown,
}

fn path_of(root: &Path) -> PathBuf {
    root.join(FILE)
}

fn db_error(root: &Path, action: &'static str) -> impl Fn(rusqlite::Error) -> IndexError {
    let path = path_of(root);
    move |source| match source.sqlite_error_code() {
        Some(rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt) => {
            IndexError::Damaged {
                path: path.clone(),
                reason: source.to_string(),
            }
        }
        _ => IndexError::Db {
            path: path.clone(),
            action,
            source,
        },
    }
}

fn ms(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// When a thread was started, from its id (a ULID's first 48 bits are milliseconds).
pub(crate) fn created_of(id: &str) -> Option<i64> {
    ulid::Ulid::from_string(id)
        .ok()
        .map(|u| ms(u.timestamp_ms()))
}

/// The smallest ULID of millisecond `at` (for "started since").
pub(crate) fn id_since(at_ms: u64) -> String {
    ulid::Ulid::from_parts(at_ms, 0).to_string()
}

/// A thread's row, or `None`.
pub fn get(root: &Path, id: &str) -> Result<Option<IndexRow>, IndexError> {
    Ok(with(root, false, "reading a thread", |c| {
        c.prepare_cached(&format!("select {READ} from threads where id = ?1"))?
            .query_row(params![id], read_row)
            .optional()
    })?
    .flatten())
}

/// Adds an active thread (an id that exists is an error). Whether it is queued is not the
/// database's: the run queue is files beside it.
pub(crate) fn insert(root: &Path, row: &NewThread<'_>) -> Result<(), IndexError> {
    let now = ms(crate::cas::store::now_ms());
    write(root, "adding a thread", |c| insert_row(c, row, now))
}

fn insert_row(c: &Connection, row: &NewThread<'_>, now: i64) -> rusqlite::Result<()> {
    c.prepare_cached(&format!(
        "insert into threads ({COLUMNS}, prompt) \
         values (?1, ?2, ?3, 'active', ?4, ?5, ?5, null, ?6, null, null, null, ?7, ?8)"
    ))?
    .execute(params![
        row.id,
        row.workflow.to_string(),
        row.head.to_string(),
        row.parent,
        now,
        row.steps.map(ms),
        row.spent,
        row.prompt.map(search_text),
    ])
    .map(drop)
}

/// Archives active thread `id`, still at `head`, as `rebased` onto the new thread `new` and
/// adds `new` with `id` as its parent, in one transaction: both or neither. `None` when `id` is
/// not active at `head`.
pub(crate) fn rebase(
    root: &Path,
    id: &str,
    head: Hash,
    new: &Successor<'_>,
) -> Result<Option<ArchivedThread>, IndexError> {
    let now = ms(crate::cas::store::now_ms());
    write(root, "rebasing a thread", |c| {
        let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let old = tx
            .prepare_cached(&format!(
                "update threads set status = 'rebased', successor = ?3, completed_ms = ?4, \
                 updated_ms = ?4, next = null, awaiting = null \
                 where id = ?1 and head = ?2 and status = 'active' returning {READ}"
            ))?
            .query_row(params![id, head.to_string(), new.id, now], read_row)
            .optional()?;
        let Some(old) = old else { return Ok(None) };
        let row = NewThread {
            id: new.id,
            workflow: new.workflow,
            head: new.head,
            parent: Some(id),
            queued: false,
            steps: Some(new.steps),
            prompt: Some(new.prompt),
            spent: None,
        };
        insert_row(&tx, &row, now)?;
        tx.commit()?;
        Ok(Some(old.archived()))
    })
}

/// What active thread `id`'s row knows its steps spent, while it is at `head`.
pub(crate) fn spent_at(root: &Path, id: &str, head: Hash) -> Result<Option<String>, IndexError> {
    Ok(with(root, false, "reading what a thread spent", |c| {
        c.prepare_cached(
            "select spent from threads where id = ?1 and head = ?2 and status = 'active'",
        )?
        .query_row(params![id, head.to_string()], |r| {
            r.get::<_, Option<String>>(0)
        })
        .optional()
    })?
    .flatten()
    .flatten())
}

/// Records what active thread `id` spent, worked out at `head`, in a row that does not know it
/// (not synced: a cache).
pub(crate) fn note_spent(root: &Path, id: &str, head: Hash, spent: &str) {
    note(
        root,
        "update threads set spent = ?3 \
         where id = ?1 and head = ?2 and status = 'active' and spent is null",
        &[&id, &head.to_string(), &spent],
    );
}

/// The thread that thread `id` was rebased onto, if it was.
pub(crate) fn successor(root: &Path, id: &str) -> Result<Option<String>, IndexError> {
    Ok(with(root, false, "reading a thread", |c| {
        c.prepare_cached("select successor from threads where id = ?1")?
            .query_row(params![id], |r| r.get::<_, Option<String>>(0))
            .optional()
    })?
    .flatten()
    .flatten())
}

/// Moves an active thread's head from `expected` to `new` (a step continuing `expected`, so
/// one step more), with the role the moderator picks at `new` when known, and what the step
/// spent added to what the row knows (`spent`).
pub(crate) fn compare_and_set(
    root: &Path,
    id: &str,
    expected: Hash,
    new: Hash,
    (next, spent): (Option<&str>, SpentChange<'_>),
) -> Result<Cas, IndexError> {
    let now = ms(crate::cas::store::now_ms());
    let (expected, new) = (expected.to_string(), new.to_string());
    let spent_sql = match spent {
        SpentChange::Forget => ", spent = null".to_owned(),
        SpentChange::Keep => String::new(),
        SpentChange::Add(_) => format!(
            ", spent = case when length(spent) > {SPENT_LINES_LIMIT} then null \
             else spent || char(10) || ?6 end"
        ),
    };
    let sql = format!(
        "update threads set head = ?3, updated_ms = ?4, steps = steps + 1, next = ?5{spent_sql} \
         where id = ?1 and head = ?2 and status = 'active'"
    );
    let moved = write(root, "moving a head", |c| {
        let mut update = c.prepare_cached(&sql)?;
        match spent {
            SpentChange::Add(line) => update.execute(params![id, expected, new, now, next, line]),
            _ => update.execute(params![id, expected, new, now, next]),
        }
    })?;
    if moved == 1 {
        return Ok(Cas::Moved);
    }
    Ok(match get(root, id)? {
        Some(row) => Cas::Refused(Box::new(row)),
        None => Cas::Unknown,
    })
}

/// Archives an active thread with `status` (`done` or `killed`; `rebased` is [`rebase`]);
/// `None` if there is no active thread `id` (look it up to say why).
pub(crate) fn archive(
    root: &Path,
    id: &str,
    status: &str,
) -> Result<Option<ArchivedThread>, IndexError> {
    let now = ms(crate::cas::store::now_ms());
    let next = (status == "done").then_some(crate::engine::END);
    let row = write(root, "archiving a thread", |c| {
        c.prepare_cached(&format!(
            "update threads set status = ?2, completed_ms = ?3, updated_ms = ?3, next = ?4, \
             awaiting = null where id = ?1 and status = 'active' returning {READ}"
        ))?
        .query_row(params![id, status, now, next], read_row)
        .optional()
    })?;
    Ok(row.map(|r| r.archived()))
}

/// Records a derived fact (best effort, not synced: a cache, `NULL` when lost).
fn note(root: &Path, sql: &'static str, args: &[&dyn rusqlite::ToSql]) {
    let _ = with(root, false, "noting a thread's state", |c| {
        c.execute_batch("pragma synchronous = normal;")?;
        let done = c.prepare_cached(sql).and_then(|mut s| s.execute(args));
        c.execute_batch("pragma synchronous = full;")?;
        done.map(drop)
    });
}

/// What a reader worked out the slow way for rows that did not know it (migrated or copied
/// threads, or moved since): steps, an active thread's next role, and what it spent when
/// worked out, each kept only while the thread is still at its head. One transaction, not
/// synced (a cache).
pub(crate) fn note_derived(root: &Path, facts: &[Learned]) {
    if facts.is_empty() {
        return;
    }
    let _ = with(root, false, "noting what threads' rows did not know", |c| {
        c.execute_batch("pragma synchronous = normal;")?;
        let done = (|| {
            let tx = c.transaction()?;
            {
                let mut update = tx.prepare_cached(
                    "update threads set steps = ?3, \
                     next = case when status = 'active' then ?4 else next end, \
                     spent = coalesce(?5, spent) \
                     where id = ?1 and head = ?2",
                )?;
                for f in facts {
                    update.execute(params![
                        f.id,
                        f.head.to_string(),
                        ms(f.facts.steps),
                        f.facts.next,
                        f.facts.spent
                    ])?;
                }
            }
            tx.commit()
        })();
        c.execute_batch("pragma synchronous = full;")?;
        done
    });
}

/// The last step attempt's error, or `None` after a success.
pub(crate) fn note_error(root: &Path, id: &str, error: Option<&str>) {
    note(
        root,
        "update threads set error = ?2 where id = ?1 and error is not ?2",
        &[&id, &error],
    );
}

/// The question the thread waits on (JSON), or `None` once answered.
pub(crate) fn note_awaiting(root: &Path, id: &str, question: Option<&str>) {
    note(
        root,
        "update threads set awaiting = ?2 where id = ?1 and awaiting is not ?2",
        &[&id, &question],
    );
}

/// Active threads: id → head.
pub(crate) fn active(root: &Path) -> Result<BTreeMap<String, Hash>, IndexError> {
    let rows = with(root, false, "listing threads", |c| {
        let mut stmt =
            c.prepare_cached("select id, head from threads where status = 'active' order by id")?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
    })?
    .unwrap_or_default();
    let mut out = BTreeMap::new();
    for (id, head) in rows {
        out.insert(id, parse_hash(root, &head)?);
    }
    Ok(out)
}

/// Every thread, by id (one statement; the mount's `threads/`).
pub(crate) fn entries(root: &Path) -> Result<Vec<Entry>, IndexError> {
    let rows = with(root, false, "listing threads", |c| {
        let mut stmt =
            c.prepare_cached("select id, workflow, head, status from threads order by id")?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
            ))
        })?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
    })?
    .unwrap_or_default();
    rows.into_iter()
        .map(|(id, workflow, head, status)| {
            Ok(Entry {
                id,
                workflow: parse_hash(root, &workflow)?,
                head: parse_hash(root, &head)?,
                archived: (status != "active").then_some(status),
            })
        })
        .collect()
}

/// Archived threads, in the order they ended.
pub(crate) fn archived(root: &Path) -> Result<Vec<ArchivedThread>, IndexError> {
    Ok(with(root, false, "listing archived threads", |c| {
        let mut stmt = c.prepare_cached(&format!(
            "select {READ} from threads where status != 'active' order by completed_ms, id"
        ))?;
        let rows = stmt.query_map([], |r| read_row(r).map(|row| row.archived()))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
    })?
    .unwrap_or_default())
}

/// Active threads whose head is `head`.
pub(crate) fn active_at(root: &Path, head: Hash) -> Result<Vec<String>, IndexError> {
    Ok(with(root, false, "finding threads at a head", |c| {
        let mut stmt = c.prepare_cached(
            "select id from threads where head = ?1 and status = 'active' order by id",
        )?;
        let rows = stmt.query_map(params![head.to_string()], |r| r.get::<_, String>(0))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
    })?
    .unwrap_or_default())
}

/// Counts of active and archived threads.
pub(crate) fn counts(root: &Path) -> Result<(u64, u64), IndexError> {
    Ok(with(root, false, "counting threads", |c| {
        c.query_row(
            "select count(*) filter (where status = 'active'), \
                    count(*) filter (where status != 'active') from threads",
            [],
            |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64)),
        )
    })?
    .unwrap_or((0, 0)))
}

/// The threads that changed (started, stepped, noted or ended) at or after `since_ms`, with the
/// latest change time among them; for watchers that patch what they show.
pub(crate) fn changed_since(root: &Path, since_ms: u64) -> Result<(Vec<String>, u64), IndexError> {
    Ok(with(root, false, "listing changed threads", |c| {
        let mut stmt = c.prepare_cached(
            "select id, max(updated_ms, coalesce(completed_ms, 0)) as at from threads \
             where updated_ms >= ?1 or completed_ms >= ?1 order by at",
        )?;
        let rows = stmt.query_map([ms(since_ms)], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
        })?;
        let mut ids = Vec::new();
        let mut latest = since_ms;
        for row in rows {
            let (id, at) = row?;
            latest = latest.max(at as u64);
            ids.push(id);
        }
        Ok((ids, latest))
    })?
    .unwrap_or_default())
}

/// Ids starting with `prefix` (at most `limit`).
pub(crate) fn with_prefix(
    root: &Path,
    prefix: &str,
    limit: usize,
) -> Result<Vec<String>, IndexError> {
    Ok(with(root, false, "finding a thread", |c| {
        let mut stmt =
            c.prepare_cached("select id from threads where id >= ?1 order by id limit ?2")?;
        let rows = stmt.query_map(params![prefix, limit as i64 + 1], |r| r.get::<_, String>(0))?;
        let mut out = Vec::new();
        for id in rows {
            let id = id?;
            if !id.starts_with(prefix) || out.len() == limit {
                break;
            }
            out.push(id);
        }
        Ok(out)
    })?
    .unwrap_or_default())
}

/// Every distinct workflow version threads were started on.
pub(crate) fn workflows(root: &Path) -> Result<Vec<Hash>, IndexError> {
    let texts = with(root, false, "listing workflows of threads", |c| {
        let mut stmt = c.prepare_cached("select distinct workflow from threads")?;
        let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
    })?
    .unwrap_or_default();
    texts.iter().map(|t| parse_hash(root, t)).collect()
}

/// Rows read per statement of a scan.
const SCAN_BATCH: i64 = 1000;

/// Calls `each` with the rows `scan` selects, newest first, while it returns `true`. Rows are
/// read in batches of [`SCAN_BATCH`] (keyset by id), and `each` runs between them without the
/// connection held: the first row reaches the caller before the last is read, and `each` may
/// use the index itself.
pub(crate) fn scan(
    root: &Path,
    scan: &Scan,
    mut each: impl FnMut(IndexRow) -> bool,
) -> Result<(), IndexError> {
    let mut sql = format!("select {READ} from threads where id < ?1");
    let mut args: Vec<String> = vec![String::new()];
    if let Some(text) = &scan.text {
        search::push_condition(&mut sql, &mut args, text);
    }
    if !scan.all {
        sql.push_str(" and status = 'active'");
    }
    if let Some(since) = &scan.since_id {
        args.push(since.clone());
        sql.push_str(&format!(" and id >= ?{}", args.len()));
    }
    if let Some(workflows) = &scan.workflows {
        if workflows.is_empty() {
            return Ok(());
        }
        let first = args.len() + 1;
        args.extend(workflows.iter().map(Hash::to_string));
        let marks: Vec<String> = (first..=args.len()).map(|i| format!("?{i}")).collect();
        sql.push_str(&format!(" and workflow in ({})", marks.join(", ")));
    }
    sql.push_str(&format!(" order by id desc limit {SCAN_BATCH}"));
    // Every id sorts below this (ids are ASCII letters and digits).
    let mut below = scan
        .before_id
        .clone()
        .unwrap_or_else(|| "\u{7f}".to_owned());
    loop {
        args[0] = below.clone();
        let batch = with(root, false, "listing threads", |c| {
            let mut stmt = c.prepare_cached(&sql)?;
            let rows = stmt.query_map(rusqlite::params_from_iter(args.iter()), read_row)?;
            rows.collect::<rusqlite::Result<Vec<IndexRow>>>()
        })?
        .unwrap_or_default();
        let full = batch.len() as i64 == SCAN_BATCH;
        let Some(last) = batch.last().map(|r| r.id.clone()) else {
            return Ok(());
        };
        for row in batch {
            if !each(row) {
                return Ok(());
            }
        }
        if !full {
            return Ok(());
        }
        below = last;
    }
}

/// A thread added in bulk: active at `head` when `archived` is `None`.
#[derive(Debug, Clone)]
pub struct Bulk {
    pub id: String,
    pub workflow: Hash,
    pub head: Hash,
    pub parent: Option<String>,
    /// `(status, completed ms)` of an archived thread.
    pub archived: Option<(String, u64)>,
    pub steps: Option<u64>,
    /// The role the moderator picks at `head`, when known (archived threads: from the status).
    pub next: Option<String>,
    /// The start prompt, when known (else the first search reads it).
    pub prompt: Option<String>,
    /// What its steps spent, when known (see [`IndexRow::spent`]).
    pub spent: Option<String>,
}

/// Adds threads in bulk, in one synced transaction (`uwf store copy`, benchmarks), only into an
/// index with no thread: `Ok(Err((active, archived)))` counts what is there, and nothing is added.
pub(crate) fn insert_all(
    root: &Path,
    threads: &[Bulk],
) -> Result<Result<(), (u64, u64)>, IndexError> {
    insert_bulk(root, threads, true)
}

/// Adds threads in bulk, in one synced transaction, beside those already there (benchmarks
/// build stores of 10⁵ threads this way). An id that exists fails the whole transaction.
pub fn insert_many(root: &Path, threads: &[Bulk]) -> Result<(), IndexError> {
    insert_bulk(root, threads, false).map(|_| ())
}

fn insert_bulk(
    root: &Path,
    threads: &[Bulk],
    only_into_empty: bool,
) -> Result<Result<(), (u64, u64)>, IndexError> {
    let now = ms(crate::cas::store::now_ms());
    write(root, "adding threads", |c| {
        let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let (active, archived): (i64, i64) = tx.query_row(
            "select count(*) filter (where status = 'active'), \
                    count(*) filter (where status != 'active') from threads",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        if only_into_empty && active + archived > 0 {
            return Ok(Err((active as u64, archived as u64)));
        }
        insert_rows(&tx, threads, Some(now), false)?;
        tx.commit()?;
        Ok(Ok(()))
    })
}

/// Inserts `threads` in `tx`. A row's last change is its end for an archived thread, else `now`
/// (or, with none, its start); `replace` lets a later row of the same id win.
fn insert_rows(
    tx: &rusqlite::Transaction<'_>,
    threads: &[Bulk],
    now: Option<i64>,
    replace: bool,
) -> rusqlite::Result<()> {
    let mut insert = tx.prepare_cached(&format!(
        "insert {} into threads ({COLUMNS}, prompt) \
         values (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, null, null, ?11, ?12)",
        if replace { "or replace" } else { "" }
    ))?;
    for t in threads {
        let (status, completed) = match &t.archived {
            Some((status, at)) => (status.as_str(), Some(ms(*at))),
            None => ("active", None),
        };
        let created = created_of(&t.id).unwrap_or(completed.or(now).unwrap_or(0));
        let next = match &t.archived {
            Some(_) => (status == "done").then(|| crate::engine::END.to_owned()),
            None => t.next.clone(),
        };
        insert.execute(params![
            t.id,
            t.workflow.to_string(),
            t.head.to_string(),
            status,
            t.parent,
            created,
            completed.or(now).unwrap_or(created),
            completed,
            t.steps.map(ms),
            next,
            t.spent,
            t.prompt.as_deref().map(search_text),
        ])?;
    }
    Ok(())
}

/// The files whose stamps change with every committed change (the mount watches them).
pub(crate) fn watched_files(root: &Path) -> [PathBuf; 2] {
    [path_of(root), root.join(format!("{FILE}-wal"))]
}

fn parse_hash(root: &Path, text: &str) -> Result<Hash, IndexError> {
    Hash::parse(text).map_err(|e| IndexError::Damaged {
        path: path_of(root),
        reason: format!("`{text}` is not a hash: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(n: u64) -> Hash {
        Hash::from_u64(n)
    }

    fn add(root: &Path, id: &str, head: Hash) {
        insert(
            root,
            &NewThread {
                id,
                workflow: h(1),
                head,
                parent: None,
                queued: false,
                steps: Some(0),
                prompt: Some(id),
                spent: None,
            },
        )
        .unwrap();
    }

    #[test]
    fn a_missing_index_reads_empty_and_is_not_created_by_reads() {
        let dir = tempfile::tempdir().unwrap();
        assert!(active(dir.path()).unwrap().is_empty());
        assert!(get(dir.path(), "X").unwrap().is_none());
        assert!(!dir.path().join(FILE).exists());
    }

    #[test]
    fn heads_move_only_from_the_expected_head() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        add(root, "01A", h(10));
        assert_eq!(
            compare_and_set(root, "01A", h(10), h(11), (None, SpentChange::Forget)).unwrap(),
            Cas::Moved
        );
        match compare_and_set(root, "01A", h(10), h(12), (None, SpentChange::Forget)).unwrap() {
            Cas::Refused(row) => assert_eq!(row.head, h(11)),
            other => panic!("{other:?}"),
        }
        assert_eq!(get(root, "01A").unwrap().unwrap().steps, Some(1));
        assert_eq!(
            compare_and_set(root, "nope", h(1), h(2), (None, SpentChange::Forget)).unwrap(),
            Cas::Unknown
        );
        let a = archive(root, "01A", "done").unwrap().unwrap();
        assert_eq!((a.head, a.status.as_str()), (h(11), "done"));
        assert!(archive(root, "01A", "killed").unwrap().is_none());
        assert!(matches!(
            compare_and_set(root, "01A", h(11), h(12), (None, SpentChange::Forget)).unwrap(),
            Cas::Refused(_)
        ));
        assert!(active(root).unwrap().is_empty());
        assert_eq!(archived(root).unwrap(), vec![a]);
    }

    #[test]
    fn an_empty_or_foreign_file_is_damaged_never_empty() {
        for bytes in [
            &b""[..],
            b"not a database at all, just some bytes here........",
        ] {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join(FILE), bytes).unwrap();
            let err = active(dir.path()).unwrap_err().to_string();
            assert!(err.contains("index.db is damaged"), "{err}");
        }
    }

    #[test]
    fn scans_are_newest_first_and_filtered() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for id in ["01A", "01B", "01C", "01D"] {
            add(root, id, h(5));
        }
        archive(root, "01B", "killed").unwrap();
        let ids = |scan: &Scan| {
            let mut out = Vec::new();
            super::scan(root, scan, |r| {
                out.push(r.id);
                true
            })
            .unwrap();
            out
        };
        assert_eq!(ids(&Scan::default()), ["01D", "01C", "01A"]);
        let all = Scan {
            all: true,
            ..Scan::default()
        };
        assert_eq!(ids(&all), ["01D", "01C", "01B", "01A"]);
        let page = Scan {
            all: true,
            before_id: Some("01C".into()),
            since_id: Some("01B".into()),
            ..Scan::default()
        };
        assert_eq!(ids(&page), ["01B"]);
        let none = Scan {
            workflows: Some(vec![h(2)]),
            ..Scan::default()
        };
        assert!(ids(&none).is_empty());
        assert_eq!(with_prefix(root, "01", 2).unwrap(), ["01A", "01B"]);
        assert_eq!(counts(root).unwrap(), (3, 1));
    }
}
