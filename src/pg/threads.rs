//! Thread heads, history and the run queue in PostgreSQL (`docs/several-machines.md#reference`).
//!
//! Architecture Invariant: a head moves only by compare-and-set (`update … where head = $old`),
//! and a thread leaves `threads` for `history` in one statement, so every reader sees it either
//! active at some head or archived, never both or neither. A trigger notifies
//! [`super::schema::CHANNEL`] with the thread id on every insert, head, status or queue change
//! and on archive.

use crate::cas::Hash;

use super::error::PgError;
use super::rows::{
    ActiveThread, ArchivedThread, Entry, IndexRow, Learned, NewThread, SPENT_LINES_LIMIT,
    SpentChange, Successor, from_bigint, search_text, to_bigint,
};
use super::store::PgStore;

/// One page of a listing: newest first, keyset-paged by id.
#[derive(Debug, Clone, Default)]
pub(crate) struct ListPage {
    /// Archived threads too.
    pub all: bool,
    /// Only these workflow versions.
    pub workflows: Option<Vec<Hash>>,
    /// Only ids at or after this one.
    pub since_id: Option<String>,
    /// Only ids before this one (the last of the previous page).
    pub before_id: Option<String>,
    /// Only threads whose prompt column or lowercased id holds this (lowercase) text, or whose
    /// workflow is one of these versions.
    pub text: Option<(String, Vec<Hash>)>,
    pub limit: usize,
}

/// Where a thread stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThreadState {
    Active(ActiveThread),
    Archived(ArchivedThread),
}

const ACTIVE_COLUMNS: &str =
    "id, workflow, head, parent, queued, (extract(epoch from created_at) * 1000)::bigint";

impl PgStore {
    /// Registers a new active thread.
    pub fn add_thread(&self, thread: &NewThread<'_>) -> Result<(), PgError> {
        let (workflow, head) = (thread.workflow.to_string(), thread.head.to_string());
        let inserted = self.with_client("add thread", |c| {
            c.execute(
                "insert into threads (id, workflow, head, parent, queued, steps, prompt, spent)
                 select $1, $2, $3, $4, $5, $6, $7, $8
                 where not exists (select 1 from history where thread = $1)
                 on conflict (id) do nothing",
                &[
                    &thread.id,
                    &workflow,
                    &head,
                    &thread.parent,
                    &thread.queued,
                    &thread.steps.map(to_bigint),
                    &thread.prompt.map(search_text),
                    &thread.spent,
                ],
            )
        })?;
        if inserted == 0 {
            return Err(PgError::ThreadExists(thread.id.to_owned()));
        }
        Ok(())
    }

    /// Looks a thread up: active first, then archived.
    pub fn thread(&self, id: &str) -> Result<ThreadState, PgError> {
        let sql = format!("select {ACTIVE_COLUMNS} from threads where id = $1");
        if let Some(row) = self.with_client("read thread", |c| c.query_opt(&sql, &[&id]))? {
            return Ok(ThreadState::Active(active_row(&row)?));
        }
        let row = self.with_client("read thread", |c| {
            c.query_opt(
                "select thread, workflow, head, status, parent,
                        (extract(epoch from completed_at) * 1000)::bigint
                 from history where thread = $1",
                &[&id],
            )
        })?;
        match row {
            Some(row) => Ok(ThreadState::Archived(archived_row(&row)?)),
            None => Err(PgError::UnknownThread(id.to_owned())),
        }
    }

    /// The head of an active thread; an archived one is [`PgError::Archived`].
    pub fn head(&self, id: &str) -> Result<Hash, PgError> {
        match self.thread(id)? {
            ThreadState::Active(t) => Ok(t.head),
            ThreadState::Archived(a) => Err(PgError::Archived {
                id: id.to_owned(),
                status: a.status,
            }),
        }
    }

    /// Every active thread (of one workflow, if given), oldest first.
    pub fn active_threads(&self, workflow: Option<Hash>) -> Result<Vec<ActiveThread>, PgError> {
        let workflow = workflow.map(|w| w.to_string());
        let sql = format!(
            "select {ACTIVE_COLUMNS} from threads
             where $1::text is null or workflow = $1 order by created_at, id"
        );
        let rows = self.with_client("list threads", |c| c.query(&sql, &[&workflow]))?;
        rows.iter().map(active_row).collect()
    }

    /// Every archived thread, oldest first.
    pub fn archived_threads(&self) -> Result<Vec<ArchivedThread>, PgError> {
        let rows = self.with_client("read history", |c| {
            c.query(
                "select thread, workflow, head, status, parent,
                        (extract(epoch from completed_at) * 1000)::bigint
                 from history order by completed_at, thread",
                &[],
            )
        })?;
        rows.iter().map(archived_row).collect()
    }

    /// Every thread with its workflow: the archived ones in the order they ended, then the
    /// active ones oldest first (so that a reader keeping the last entry of an id keeps an
    /// active one).
    pub(crate) fn entries(&self) -> Result<Vec<Entry>, PgError> {
        let rows = self.with_client("list threads", |c| {
            c.query(
                "select thread, workflow, head, status, 0 as part, completed_at as at
                 from history
                 union all
                 select id, workflow, head, null, 1, created_at from threads
                 order by part, at, 1",
                &[],
            )
        })?;
        rows.iter()
            .map(|row| {
                Ok(Entry {
                    id: row.get(0),
                    workflow: hash_column(row, 1)?,
                    head: hash_column(row, 2)?,
                    archived: row.get(3),
                })
            })
            .collect()
    }

    /// Moves a thread's head from `expected` to `new`. Returns whether it moved: `false` when
    /// the head is no longer `expected` or the thread is not active.
    pub fn compare_and_set(&self, id: &str, expected: Hash, new: Hash) -> Result<bool, PgError> {
        self.compare_and_set_next(id, expected, new, (None, SpentChange::Forget))
    }

    /// [`PgStore::compare_and_set`] to a step continuing `expected` (one step more), with the
    /// role the moderator picks at `new` when known (listings show both), and what the step
    /// spent added to what the row knows (`spent`).
    pub(crate) fn compare_and_set_next(
        &self,
        id: &str,
        expected: Hash,
        new: Hash,
        (next, spent): (Option<&str>, SpentChange<'_>),
    ) -> Result<bool, PgError> {
        let (expected, new) = (expected.to_string(), new.to_string());
        let set = "update threads set head = $3, updated_at = now(), steps = steps + 1, next = $4";
        let only = "where id = $1 and head = $2";
        let moved = self.with_client("compare-and-set head", |c| match spent {
            SpentChange::Forget => c.execute(
                &format!("{set}, spent = null {only}"),
                &[&id, &expected, &new, &next],
            ),
            SpentChange::Keep => {
                c.execute(&format!("{set} {only}"), &[&id, &expected, &new, &next])
            }
            SpentChange::Add(line) => c.execute(
                &format!(
                    "{set}, spent = case when length(spent) > {SPENT_LINES_LIMIT} then null
                                         else spent || chr(10) || $5 end {only}"
                ),
                &[&id, &expected, &new, &next, &line],
            ),
        })?;
        Ok(moved == 1)
    }

    /// What active thread `id`'s row knows its steps spent, while it is at `head`.
    pub(crate) fn spent_at(&self, id: &str, head: Hash) -> Result<Option<String>, PgError> {
        let head = head.to_string();
        let row = self.with_client("read what a thread spent", |c| {
            c.query_opt(
                "select spent from threads where id = $1 and head = $2",
                &[&id, &head],
            )
        })?;
        Ok(row.and_then(|r| r.get::<_, Option<String>>(0)))
    }

    /// Records what active thread `id` spent, worked out at `head`, in a row that does not know.
    pub(crate) fn note_spent(&self, id: &str, head: Hash, spent: &str) -> Result<(), PgError> {
        let head = head.to_string();
        self.with_client("note what a thread spent", |c| {
            c.execute(
                "update threads set spent = $3 where id = $1 and head = $2 and spent is null",
                &[&id, &head, &spent],
            )
        })?;
        Ok(())
    }

    /// One page of threads, newest first: one query over both tables, each walked by its
    /// primary key (or by workflow and id), the leases joined for `running`. An active
    /// thread's status is `active` (its error and question columns tell failed and awaiting).
    pub(crate) fn list_page(&self, page: &ListPage) -> Result<Vec<IndexRow>, PgError> {
        let workflows: Option<Vec<String>> = page
            .workflows
            .as_ref()
            .map(|w| w.iter().map(Hash::to_string).collect());
        let limit = page.limit as i64;
        let (needle, text_workflows): (Option<&str>, Vec<String>) = match &page.text {
            Some((needle, w)) => (Some(needle), w.iter().map(Hash::to_string).collect()),
            None => (None, Vec::new()),
        };
        // `position` takes the text literally (`%` and `_` are no wildcards).
        let sql = "
            (select t.id, t.workflow, t.head, 'active'::text, t.steps, t.next, t.error, t.awaiting,
                    (l.thread is not null and l.expires_at > now()),
                    (extract(epoch from t.updated_at) * 1000)::bigint, t.parent, t.spent
             from threads t left join leases l on l.thread = t.id
             where ($1::text[] is null or t.workflow = any($1))
               and ($2::text is null or t.id >= $2) and ($3::text is null or t.id < $3)
               and ($6::text is null or position($6 in t.prompt) > 0
                    or position($6 in lower(t.id)) > 0 or t.workflow = any($7))
             order by t.id desc limit $4)
            union all
            (select h.thread, h.workflow, h.head, h.status, h.steps,
                    case when h.status = 'done' then '$END' end, null, null, false,
                    (extract(epoch from h.completed_at) * 1000)::bigint, h.parent, h.spent
             from history h
             where $5 and ($1::text[] is null or h.workflow = any($1))
               and ($2::text is null or h.thread >= $2) and ($3::text is null or h.thread < $3)
               and ($6::text is null or position($6 in h.prompt) > 0
                    or position($6 in lower(h.thread)) > 0 or h.workflow = any($7))
             order by h.thread desc limit $4)
            order by 1 desc limit $4";
        let rows = self.with_client("list threads", |c| {
            c.query(
                sql,
                &[
                    &workflows,
                    &page.since_id,
                    &page.before_id,
                    &limit,
                    &page.all,
                    &needle,
                    &text_workflows,
                ],
            )
        })?;
        rows.iter()
            .map(|row| {
                Ok(IndexRow {
                    id: row.get(0),
                    workflow: hash_column(row, 1)?,
                    head: hash_column(row, 2)?,
                    status: row.get(3),
                    steps: row.get::<_, Option<i64>>(4).map(from_bigint),
                    next: row.get(5),
                    error: row.get(6),
                    awaiting: row.get(7),
                    running: Some(row.get(8)),
                    updated_ms: from_bigint(row.get(9)),
                    parent: row.get(10),
                    spent: row.get(11),
                })
            })
            .collect()
    }

    /// Writes back what a listing worked out from the nodes for rows that did not know it,
    /// each kept only while the thread is still at its head (an archived thread's row keeps
    /// the steps it knows, and its next role follows from its status).
    pub(crate) fn note_derived(&self, facts: &[Learned]) -> Result<(), PgError> {
        if facts.is_empty() {
            return Ok(());
        }
        let ids: Vec<&str> = facts.iter().map(|f| f.id.as_str()).collect();
        let heads: Vec<String> = facts.iter().map(|f| f.head.to_string()).collect();
        let steps: Vec<i64> = facts.iter().map(|f| to_bigint(f.facts.steps)).collect();
        let nexts: Vec<Option<&str>> = facts.iter().map(|f| f.facts.next.as_deref()).collect();
        let spent: Vec<Option<&str>> = facts.iter().map(|f| f.facts.spent.as_deref()).collect();
        self.with_client("note what rows did not know", |c| {
            c.execute(
                "update threads t set steps = u.steps, next = u.next,
                        spent = coalesce(u.spent, t.spent)
                 from unnest($1::text[], $2::text[], $3::int8[], $4::text[], $5::text[])
                      as u(id, head, steps, next, spent)
                 where t.id = u.id and t.head = u.head",
                &[&ids, &heads, &steps, &nexts, &spent],
            )?;
            c.execute(
                "update history h set steps = coalesce(h.steps, u.steps),
                        spent = coalesce(u.spent, h.spent)
                 from unnest($1::text[], $2::text[], $3::int8[], $4::text[])
                      as u(id, head, steps, spent)
                 where h.thread = u.id and h.head = u.head
                   and (h.steps is null or u.spent is not null)",
                &[&ids, &heads, &steps, &spent],
            )?;
            Ok(())
        })
    }

    /// Threads (active or archived) whose `prompt` column is empty, `(id, head)`, at most
    /// `limit`.
    pub(crate) fn unsearchable(&self, limit: usize) -> Result<Vec<(String, Hash)>, PgError> {
        let rows = self.with_client("find rows to make searchable", |c| {
            c.query(
                "(select id, head from threads where prompt is null limit $1)
                 union all
                 (select thread, head from history where prompt is null limit $1)
                 limit $1",
                &[&(limit as i64)],
            )
        })?;
        rows.iter()
            .map(|r| Ok((r.get(0), hash_column(r, 1)?)))
            .collect()
    }

    /// Fills the `prompt` column of rows that have none, `(id, search text)`.
    pub(crate) fn note_prompts(&self, prompts: &[(String, String)]) -> Result<(), PgError> {
        if prompts.is_empty() {
            return Ok(());
        }
        let ids: Vec<&str> = prompts.iter().map(|p| p.0.as_str()).collect();
        let texts: Vec<&str> = prompts.iter().map(|p| p.1.as_str()).collect();
        self.with_client("make rows searchable", |c| {
            c.execute(
                "update threads t set prompt = u.prompt
                 from unnest($1::text[], $2::text[]) as u(id, prompt)
                 where t.id = u.id and t.prompt is null",
                &[&ids, &texts],
            )?;
            c.execute(
                "update history h set prompt = u.prompt
                 from unnest($1::text[], $2::text[]) as u(id, prompt)
                 where h.thread = u.id and h.prompt is null",
                &[&ids, &texts],
            )?;
            Ok(())
        })
    }

    /// Ids of threads (active or archived) starting with `prefix`, sorted, at most `limit`.
    pub(crate) fn ids_with_prefix(
        &self,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<String>, PgError> {
        let rows = self.with_client("find thread", |c| {
            c.query(
                "select id from threads where left(id, length($1)) = $1
                 union select thread from history where left(thread, length($1)) = $1
                 order by 1 limit $2",
                &[&prefix, &(limit as i64)],
            )
        })?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Every workflow version threads (active or archived) were started on.
    pub(crate) fn thread_workflows(&self) -> Result<Vec<Hash>, PgError> {
        let rows = self.with_client("list workflows of threads", |c| {
            c.query(
                "select workflow from threads union select workflow from history",
                &[],
            )
        })?;
        rows.iter().map(|r| hash_column(r, 0)).collect()
    }

    /// Archives an active thread at its current head with `status` (`done` or `killed`; a
    /// rebase is [`PgStore::rebase`]); its lease goes with it.
    pub fn archive(&self, id: &str, status: &str) -> Result<ArchivedThread, PgError> {
        if status != "done" && status != "killed" {
            return Err(PgError::BadStatus(status.to_owned()));
        }
        let row = self.with_client("archive thread", |c| {
            c.query_opt(
                "with moved as (delete from threads where id = $1 returning *),
                      gone as (delete from leases where thread = $1)
                 insert into history (thread, workflow, head, status, parent, steps, prompt,
                                      spent)
                 select id, workflow, head, $2, parent, steps, prompt, spent from moved
                 returning thread, workflow, head, status, parent,
                           (extract(epoch from completed_at) * 1000)::bigint",
                &[&id, &status],
            )
        })?;
        match row {
            Some(row) => archived_row(&row),
            None => match self.thread(id)? {
                ThreadState::Archived(a) => Err(PgError::Archived {
                    id: id.to_owned(),
                    status: a.status,
                }),
                ThreadState::Active(_) => Err(PgError::UnknownThread(id.to_owned())),
            },
        }
    }

    /// Archives active thread `id`, still at `head`, as `rebased` onto `new`, which enters
    /// `threads` in the same statement with `id` as its parent, not queued (both or neither;
    /// `id`'s lease goes too). `None` when `id` is not active at `head`.
    pub(crate) fn rebase(
        &self,
        id: &str,
        head: Hash,
        new: &Successor<'_>,
    ) -> Result<Option<ArchivedThread>, PgError> {
        let (workflow, new_head) = (new.workflow.to_string(), new.head.to_string());
        let steps = to_bigint(new.steps);
        let prompt = search_text(new.prompt);
        let row = self.with_client("rebase thread", |c| {
            c.query_opt(
                "with moved as (delete from threads where id = $1 and head = $2 returning *),
                      gone as (delete from leases where thread = $1
                               and exists (select 1 from moved)),
                      added as (insert into threads (id, workflow, head, parent, queued, steps,
                                                     prompt)
                                select $3, $4, $5, $1, false, $6, $7 from moved)
                 insert into history (thread, workflow, head, status, parent, steps, successor,
                                      prompt, spent)
                 select id, workflow, head, 'rebased', parent, steps, $3, prompt, spent
                 from moved
                 returning thread, workflow, head, status, parent,
                           (extract(epoch from completed_at) * 1000)::bigint",
                &[
                    &id,
                    &head.to_string(),
                    &new.id,
                    &workflow,
                    &new_head,
                    &steps,
                    &prompt,
                ],
            )
        })?;
        row.as_ref().map(archived_row).transpose()
    }

    /// The thread that archived thread `id` was rebased onto, if it was.
    pub(crate) fn successor_of(&self, id: &str) -> Result<Option<String>, PgError> {
        let row = self.with_client("read thread", |c| {
            c.query_opt("select successor from history where thread = $1", &[&id])
        })?;
        Ok(row.and_then(|r| r.get::<_, Option<String>>(0)))
    }

    /// Records how a thread's last step attempt ended, for every machine to see: `Some(error)`
    /// makes it `failed` with that text, `None` (a step published) makes a failed thread
    /// `active` again. Writes nothing when nothing changes (the common case: a step after a
    /// step), so a successful step costs a round trip but no commit flush.
    pub(crate) fn set_outcome(&self, id: &str, error: Option<&str>) -> Result<(), PgError> {
        self.with_client("record step outcome", |c| match error {
            Some(error) => c.execute(
                "update threads set status = 'failed', error = $2
                 where id = $1 and status in ('active', 'failed')",
                &[&id, &error],
            ),
            None => c.execute(
                "update threads set status = 'active', error = null
                 where id = $1 and status = 'failed'",
                &[&id],
            ),
        })?;
        Ok(())
    }

    /// The error of a thread whose last step attempt failed (on any machine), if it did.
    pub(crate) fn failure_of(&self, id: &str) -> Result<Option<String>, PgError> {
        let row = self.with_client("read step outcome", |c| {
            c.query_opt(
                "select error from threads where id = $1 and status = 'failed'",
                &[&id],
            )
        })?;
        Ok(row.map(|r| r.get::<_, Option<String>>(0).unwrap_or_default()))
    }

    /// Records the question a thread waits on (`Some`, its JSON: role, head, time asked),
    /// making it `awaiting`, or forgets it (`None`: answered), making it `active` again.
    pub(crate) fn set_awaiting(&self, id: &str, question: Option<&str>) -> Result<(), PgError> {
        self.with_client("record question", |c| {
            c.execute(
                "update threads set awaiting = $2,
                     status = case when $2::text is not null then 'awaiting'
                                   when status = 'awaiting' then 'active'
                                   else status end
                 where id = $1",
                &[&id, &question],
            )
        })?;
        Ok(())
    }

    /// The question an active thread waits on (its JSON), if any.
    pub(crate) fn awaiting_of(&self, id: &str) -> Result<Option<String>, PgError> {
        let row = self.with_client("read question", |c| {
            c.query_opt(
                "select awaiting from threads where id = $1 and status = 'awaiting'",
                &[&id],
            )
        })?;
        Ok(row.and_then(|r| r.get::<_, Option<String>>(0)))
    }

    /// Makes a thread runnable for workers (`uwf thread queue`).
    pub(crate) fn queue(&self, id: &str) -> Result<(), PgError> {
        self.set_queued(id, true)
    }

    /// Takes a thread off the run queue (it finished, failed or awaits a human).
    pub(crate) fn dequeue(&self, id: &str) -> Result<(), PgError> {
        self.set_queued(id, false)
    }

    fn set_queued(&self, id: &str, queued: bool) -> Result<(), PgError> {
        // Queuing a failed thread again is the way to retry it: it is runnable again.
        let n = self.with_client("queue thread", |c| {
            c.execute(
                "update threads set queued = $2,
                     status = case when $2 and status = 'failed' then 'active' else status end
                 where id = $1",
                &[&id, &queued],
            )
        })?;
        self.require_active(id, n)
    }

    fn require_active(&self, id: &str, rows: u64) -> Result<(), PgError> {
        if rows == 1 {
            return Ok(());
        }
        match self.thread(id)? {
            ThreadState::Archived(a) => Err(PgError::Archived {
                id: id.to_owned(),
                status: a.status,
            }),
            ThreadState::Active(_) => Err(PgError::UnknownThread(id.to_owned())),
        }
    }
}

/// A `history` row read as `thread, workflow, head, status, parent, completed ms`.
fn archived_row(row: &postgres::Row) -> Result<ArchivedThread, PgError> {
    Ok(ArchivedThread {
        thread: row.get(0),
        workflow: hash_column(row, 1)?,
        head: hash_column(row, 2)?,
        status: row.get(3),
        parent: row.get(4),
        completed_ms: from_bigint(row.get(5)),
    })
}

/// A `threads` row read as [`ACTIVE_COLUMNS`].
fn active_row(row: &postgres::Row) -> Result<ActiveThread, PgError> {
    Ok(ActiveThread {
        id: row.get(0),
        workflow: hash_column(row, 1)?,
        head: hash_column(row, 2)?,
        parent: row.get(3),
        queued: row.get(4),
        started_ms: Some(from_bigint(row.get(5))),
    })
}

pub(crate) fn hash_column(row: &postgres::Row, index: usize) -> Result<Hash, PgError> {
    let text: String = row.get(index);
    Hash::parse(&text).map_err(|e| PgError::Query {
        action: "reading a hash column",
        reason: e.to_string(),
    })
}
