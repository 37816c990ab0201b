//! The database of the directory store's thread index (`index.db`, see
//! [`super::index_db`]): its tables, the version a binary writes, the upgrade of an index
//! written by an earlier version, and how a connection to it is set up.
//!
//! Versions: 1, the first (`status` is `active`, `done` or `killed`); 2 adds the `rebased`
//! status (`uwf thread rebase`) and the `successor` column, the thread a rebased one
//! continues as. SQLite cannot change a `check` constraint in place, so the upgrade builds the
//! table anew, copies the rows and renames it, in one transaction: a `kill -9` leaves the index
//! of version 1 or of version 2, and the next command upgrades again if need be. 3 adds the
//! `prompt` column, the start prompt as search reads it (lowercase, its first
//! [`crate::pg::rows::SEARCH_CHARS`] characters; see `docs/dashboard.md#search`), and an index of
//! the rows that do not know it yet: the upgrade adds the column empty (`NULL`) in one
//! transaction, without reading a node, and a search fills the rows that lack it from their
//! start nodes before it runs ([`super::index_db::unsearchable`]). 4 adds the `spent` column,
//! what a thread's steps spent (tokens, and dollars their agents reported), to which each step
//! adds its line as it moves the head, and which a listing fills where the row does not know:
//! added empty the same way, filled by the first listing that shows a row's cost.

use rusqlite::{Connection, OptionalExtension, params};

/// The schema version this binary writes and understands (`meta.schema`).
pub(super) const SCHEMA: i64 = 4;

/// The thread table, made by [`CREATE`] and by [`upgrade`] under another name.
const THREADS: &str = "
create table threads (
    id text primary key not null,
    workflow text not null,
    head text not null,
    status text not null check (status in ('active', 'done', 'killed', 'rebased')),
    parent text,
    created_ms integer not null,
    updated_ms integer not null,
    completed_ms integer,
    steps integer,
    next text,
    error text,
    awaiting text,
    successor text,
    prompt text,
    spent text
) without rowid;
";

/// The thread table's indexes (dropped with the table it indexes).
const INDEXES: &str = "
create index threads_by_status on threads (status, id);
create index threads_by_workflow on threads (workflow, id);
create index threads_by_head on threads (head) where status = 'active';
create index threads_unsearchable on threads (id) where prompt is null;
";

/// The columns of version 1, all kept by version 2.
const V1_COLUMNS: &str = "id, workflow, head, status, parent, created_ms, updated_ms, \
                          completed_ms, steps, next, error, awaiting";

/// Sets up a connection to an index: WAL is recorded in the file (set when it was made);
/// FULL syncs the log at every commit; the log may keep 4 MiB between checkpoints (a bulk
/// insert's log is cut back to that); and the log files are kept when it closes.
pub(super) fn set_up(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch("pragma synchronous = full; pragma journal_size_limit = 4194304;")?;
    keep_log_files(conn);
    Ok(())
}

/// Keeps `index.db-wal` and `index.db-shm` when the last connection closes, instead of
/// deleting them: the next process (every `uwf` command is one) reuses their blocks rather than
/// making, syncing and removing two files, and a store on a full disk can still be read and
/// take small changes. Best effort: without it the files are only remade.
fn keep_log_files(conn: &Connection) {
    let mut on: std::ffi::c_int = 1;
    // SAFETY: `handle` is this open connection's own `sqlite3*`, used only for this call while
    // `conn` is borrowed; SQLITE_FCNTL_PERSIST_WAL reads and writes one `int` through the
    // pointer, which points at `on`, alive for the call.
    unsafe {
        rusqlite::ffi::sqlite3_file_control(
            conn.handle(),
            c"main".as_ptr(),
            rusqlite::ffi::SQLITE_FCNTL_PERSIST_WAL,
            (&raw mut on).cast(),
        );
    }
}

/// The schema version recorded in the index; `None` when it has no `meta` table (an empty or
/// overwritten file: not an index).
pub(super) fn version(conn: &Connection) -> rusqlite::Result<Option<i64>> {
    conn.query_row("select value from meta where key = 'schema'", [], |r| {
        r.get(0)
    })
    .optional()
    .or_else(|e| match &e {
        rusqlite::Error::SqliteFailure(_, Some(msg)) if msg.contains("no such table") => Ok(None),
        _ => Err(e),
    })
}

/// Makes the tables of a new index (the caller records [`SCHEMA`] in `meta`).
pub(super) fn create(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "create table meta (key text primary key not null, value integer not null) without rowid;",
    )?;
    conn.execute_batch(THREADS)?;
    conn.execute_batch(INDEXES)
}

/// Brings an index of an earlier version to [`SCHEMA`], in one immediate transaction (a
/// second process upgrading at the same moment waits, then finds the work done).
pub(super) fn upgrade(conn: &mut Connection) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let upgraded = match version(&tx)? {
        // The table is built anew with this version's columns (the new ones empty).
        Some(1) => {
            tx.execute_batch(&format!(
                "{}\n insert into threads_v2 ({V1_COLUMNS}) select {V1_COLUMNS} from threads;
                 drop table threads;
                 alter table threads_v2 rename to threads;
                 {INDEXES}",
                THREADS.replace("create table threads", "create table threads_v2")
            ))?;
            true
        }
        // Columns added empty: rows made before them are filled by the first search (`prompt`)
        // and the first listing of costs (`spent`).
        Some(2) => {
            tx.execute_batch(
                "alter table threads add column prompt text;
                 create index threads_unsearchable on threads (id) where prompt is null;
                 alter table threads add column spent text;",
            )?;
            true
        }
        Some(3) => {
            tx.execute_batch("alter table threads add column spent text;")?;
            true
        }
        _ => false,
    };
    if upgraded {
        tx.execute(
            "update meta set value = ?1 where key = 'schema'",
            params![SCHEMA],
        )?;
    }
    tx.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Upgrades `conn`, then again (nothing left to do), and checks it is at [`SCHEMA`].
    fn upgrade_twice(conn: &mut Connection) {
        upgrade(conn).unwrap();
        upgrade(conn).unwrap();
        let version: i64 = conn
            .query_row("select value from meta", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA);
    }

    /// The first version's tables, as binaries before version 2 made them.
    const V1: &str = "
create table meta (key text primary key not null, value integer not null) without rowid;
create table threads (
    id text primary key not null,
    workflow text not null,
    head text not null,
    status text not null check (status in ('active', 'done', 'killed')),
    parent text,
    created_ms integer not null,
    updated_ms integer not null,
    completed_ms integer,
    steps integer,
    next text,
    error text,
    awaiting text
) without rowid;
create index threads_by_status on threads (status, id);
insert into meta values ('schema', 1);
insert into threads values ('01A', 'W', 'H', 'done', null, 1, 2, 2, 3, '$END', null, null);
";

    #[test]
    fn a_first_version_index_is_upgraded_keeping_its_rows() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(V1).unwrap();
        let refused = conn.execute("update threads set status = 'rebased' where id = '01A'", []);
        assert!(refused.is_err(), "version 1 refuses the new status");
        upgrade_twice(&mut conn);
        let (status, steps): (String, i64) = conn
            .query_row(
                "select status, steps from threads where id = '01A'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!((status.as_str(), steps), ("done", 3));
        conn.execute(
            "update threads set status = 'rebased', successor = '01B' where id = '01A'",
            [],
        )
        .unwrap();
        let indexes: i64 = conn
            .query_row(
                "select count(*) from sqlite_master where type = 'index' and tbl_name = 'threads' \
                 and name like 'threads_by_%'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(indexes, 3);
        let unfilled: i64 = conn
            .query_row(
                "select count(*) from threads indexed by threads_unsearchable \
                 where prompt is null",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(unfilled, 1, "a row of version 1 does not know its prompt");
    }

    /// The second version's tables, as binaries before version 3 made them.
    fn v2() -> String {
        format!(
            "create table meta (key text primary key not null, value integer not null) \
             without rowid;
             {}
             {}
             insert into meta values ('schema', 2);
             insert into threads ({V1_COLUMNS}) values
                 ('01A', 'W', 'H', 'done', null, 1, 2, 2, 3, '$END', null, null);",
            THREADS.replace(",\n    prompt text,\n    spent text", ""),
            INDEXES.replace(
                "create index threads_unsearchable on threads (id) where prompt is null;",
                ""
            ),
        )
    }

    #[test]
    fn a_second_version_index_gets_an_empty_prompt_column_once() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(&v2()).unwrap();
        assert!(
            conn.execute("update threads set prompt = 'x'", []).is_err(),
            "version 2 has no prompt column"
        );
        upgrade_twice(&mut conn);
        let (prompt, steps): (Option<String>, i64) = conn
            .query_row(
                "select prompt, steps from threads indexed by threads_unsearchable \
                 where prompt is null and id = '01A'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!((prompt, steps), (None, 3));
        let spent: Option<String> = conn
            .query_row("select spent from threads where id = '01A'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(
            spent, None,
            "a row of version 2 does not know what it spent"
        );
    }

    #[test]
    fn a_third_version_index_gets_an_empty_spent_column_once() {
        let mut conn = Connection::open_in_memory().unwrap();
        let v3 = v2().replace(
            ",\n    successor text\n",
            ",\n    successor text,\n    prompt text\n",
        );
        let v3 = v3.replace("('schema', 2)", "('schema', 3)");
        conn.execute_batch(&v3).unwrap();
        conn.execute("update threads set prompt = 'kept'", [])
            .unwrap();
        assert!(
            conn.execute("update threads set spent = '{}'", []).is_err(),
            "version 3 has no spent column"
        );
        upgrade_twice(&mut conn);
        let (prompt, spent, steps): (String, Option<String>, i64) = conn
            .query_row(
                "select prompt, spent, steps from threads where id = '01A'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!((prompt.as_str(), spent, steps), ("kept", None, 3));
    }
}
