//! Versioned migrations of the uwf tables (`docs/ARCHITECTURE.md#the-postgresql-tables`).
//!
//! `uwf_meta` holds one row with the schema version. [`migrate`] runs on every open: a fast read
//! of the version, and only when it is behind, the missing migrations inside one transaction
//! that holds an advisory lock, so two processes racing on a fresh database serialise and both
//! succeed (the second finds the work done). A database whose version is newer than
//! [`SCHEMA_VERSION`] is refused before anything is touched.
//!
//! Architecture Invariant: migrations are append-only. A released migration's SQL is never
//! edited; a change is a new entry in [`MIGRATIONS`].

use postgres::Client;

use super::error::{PgError, describe};

/// The schema version this binary writes and understands.
pub const SCHEMA_VERSION: i32 = 8;

/// The advisory lock key of migrations (`uwf` + `mig` in ASCII, any fixed number would do).
const LOCK_KEY: i64 = 0x0075_7766_006d_6967;

/// The channel on which head changes, archives and queue changes are notified (payload: the
/// thread id).
pub(crate) const CHANNEL: &str = "uwf_threads";

/// The channel on which appends to a thread's log or event feed are notified (payload: the
/// thread id). Apart from [`CHANNEL`], so that a chatty agent does not make every mount re-read
/// the thread index.
pub const RUNS_CHANNEL: &str = "uwf_runs";

/// Migration `n` (1-based) brings the schema from version `n - 1` to `n`.
const MIGRATIONS: &[&str] = &[
    r#"
create table nodes (
    hash       text primary key check (length(hash) = 13),
    type_hash  text not null check (length(type_hash) = 13),
    bytes      bytea not null,
    created_ms bigint not null
);
create index nodes_by_type on nodes (type_hash, hash);

create table threads (
    id         text primary key,
    workflow   text not null,
    head       text not null,
    status     text not null default 'active',
    parent     text,
    queued     boolean not null default false,
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now()
);
create index threads_queued on threads (updated_at) where queued;

create table history (
    thread       text primary key,
    workflow     text not null,
    head         text not null,
    status       text not null check (status in ('done', 'killed')),
    parent       text,
    completed_at timestamptz not null default now()
);

create table registry (
    name          text primary key,
    hash          text not null,
    registered_ms bigint not null
);
create table registry_versions (
    seq           bigserial primary key,
    name          text not null,
    hash          text not null,
    registered_ms bigint not null
);
create index registry_versions_by_name on registry_versions (name, seq);

create table leases (
    thread     text primary key,
    holder     text not null,
    machine    text not null,
    expires_at timestamptz not null
);

create function uwf_notify_thread() returns trigger language plpgsql as $$
begin
    perform pg_notify('uwf_threads', coalesce(new.id, old.id));
    return null;
end $$;
create trigger threads_notify after insert or delete or update of head, status, queued
    on threads for each row execute function uwf_notify_thread();
"#,
    r#"
alter table registry add column source text;
alter table registry_versions add column source text;
alter table threads add column error text;
alter table threads add column awaiting text;

create table workers (
    holder     text primary key,
    machine    text not null,
    pid        integer not null,
    workflow   text,
    threads    text not null default '',
    steps      bigint not null default 0,
    state      text not null,
    started_at timestamptz not null default now(),
    seen_at    timestamptz not null default now()
);
"#,
    // Listing at scale: what a list shows without reading the thread, and the
    // indexes its keyset-paged query walks (both tables by id are their primary keys).
    r#"
alter table threads add column steps bigint;
alter table threads add column next text;
alter table history add column steps bigint;
create index threads_by_workflow on threads (workflow, id);
create index history_by_workflow on history (workflow, thread);
"#,
    // What a step leaves besides nodes, shared by every machine: the thread log and
    // event feed as byte ranges (`pos` is the byte offset of `bytes` in the file, so a file
    // is the rows in `pos` order and has no gaps), the last outcome and the running step's
    // record, and where forks and child threads come from.
    r#"
create table run_text (
    thread text not null,
    file   text not null check (file in ('log', 'events')),
    pos    bigint not null,
    at_ms  bigint not null,
    bytes  bytea not null,
    primary key (thread, file, pos)
);
-- Stored as sent: compressing agent output costs the server CPU that the steps need.
alter table run_text alter column bytes set storage external;

create table run_state (
    thread     text primary key,
    last       text,
    info       text,
    updated_ms bigint not null
);

create table lineage (
    thread text primary key,
    kind   text not null check (kind in ('fork', 'child')),
    source text,
    step   text not null,
    role   text,
    at_ms  bigint not null
);
create index lineage_by_source on lineage (source, thread);

create function uwf_notify_run() returns trigger language plpgsql as $$
begin
    perform pg_notify('uwf_runs', new.thread);
    return null;
end $$;
create trigger run_text_notify after insert on run_text
    for each row execute function uwf_notify_run();
"#,
    // A thread's agent context: its working directory and agent bindings, recorded
    // when it starts (JSON), and whether it is paused (a column, so claims can skip it).
    r#"
create table thread_context (
    thread     text primary key,
    body       text not null,
    paused     boolean not null default false,
    updated_ms bigint not null
);
"#,
    // `uwf thread rebase`: a thread archived as `rebased`, and the thread it goes on
    // as. (`history_status_check` is the name PostgreSQL gave the column's check.)
    r#"
alter table history drop constraint history_status_check;
alter table history add constraint history_status_check
    check (status in ('done', 'killed', 'rebased'));
alter table history add column successor text;
"#,
    // Search over every thread: what a search reads of the start prompt (lowercase, its first
    // 1,000 characters), kept with the row. Rows made before it have none (`NULL`, added at no
    // cost to the tables); the first search fills them from their start nodes, found through
    // these partial indexes, which hold only rows still to fill.
    r#"
alter table threads add column prompt text;
alter table history add column prompt text;
create index threads_unsearchable on threads (id) where prompt is null;
create index history_unsearchable on history (thread) where prompt is null;
"#,
    // What a thread's steps spent (tokens, and dollars their agents reported; JSON the engine
    // writes), so that a listing of costs reads rows, not every thread's steps. Each step adds
    // its line as it moves the head; empty (`NULL`) on rows made before it, which the first
    // listing of costs fills.
    r#"
alter table threads add column spent text;
alter table history add column spent text;
"#,
];

/// Brings the database to [`SCHEMA_VERSION`], or refuses a newer one. Returns the version found
/// before migrating (0 for a fresh database).
pub(crate) fn migrate(client: &mut Client) -> Result<i32, PgError> {
    let query = |e: postgres::Error| PgError::Query {
        action: "migration",
        reason: describe(&e),
    };
    if let Some(found) = read_version(client)? {
        check_supported(found)?;
        if found == SCHEMA_VERSION {
            return Ok(found);
        }
    }
    let mut tx = client.transaction().map_err(query)?;
    tx.execute("select pg_advisory_xact_lock($1)", &[&LOCK_KEY])
        .map_err(query)?;
    tx.batch_execute(
        "create table if not exists uwf_meta (
             id integer primary key check (id = 1),
             schema_version integer not null
         );
         insert into uwf_meta (id, schema_version) values (1, 0) on conflict do nothing;",
    )
    .map_err(query)?;
    let found: i32 = tx
        .query_one("select schema_version from uwf_meta where id = 1", &[])
        .map_err(query)?
        .get(0);
    check_supported(found)?;
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        tx.batch_execute(sql).map_err(query)?;
        let version = index as i32 + 1;
        tx.execute(
            "update uwf_meta set schema_version = $1 where id = 1",
            &[&version],
        )
        .map_err(query)?;
    }
    tx.commit().map_err(query)?;
    Ok(found)
}

/// The version recorded in `uwf_meta`, or none on a database uwf never touched.
pub(crate) fn read_version(client: &mut Client) -> Result<Option<i32>, PgError> {
    let query = |e: postgres::Error| PgError::Query {
        action: "reading the schema version",
        reason: describe(&e),
    };
    let exists: bool = client
        .query_one("select to_regclass('uwf_meta') is not null", &[])
        .map_err(query)?
        .get(0);
    if !exists {
        return Ok(None);
    }
    let row = client
        .query_opt("select schema_version from uwf_meta where id = 1", &[])
        .map_err(query)?;
    Ok(row.map(|r| r.get(0)))
}

fn check_supported(found: i32) -> Result<(), PgError> {
    if found > SCHEMA_VERSION {
        return Err(PgError::SchemaTooNew {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_version_has_a_migration() {
        assert_eq!(MIGRATIONS.len(), SCHEMA_VERSION as usize);
    }

    #[test]
    fn newer_versions_are_refused_naming_both() {
        let err = check_supported(SCHEMA_VERSION + 1).expect_err("too new");
        let text = err.to_string();
        assert!(
            text.contains(&format!("version {}", SCHEMA_VERSION + 1)),
            "{text}"
        );
        assert!(
            text.contains(&format!("up to version {SCHEMA_VERSION}")),
            "{text}"
        );
        assert!(check_supported(SCHEMA_VERSION).is_ok());
    }
}
