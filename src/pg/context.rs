//! A thread's agent context in the database (`docs/agents.md#what-a-thread-keeps`): the JSON its
//! engine records when the thread starts (working directory, agent bindings), and whether it is
//! paused. The body is opaque here; a paused thread is one no claim picks ([`super::leases`]).

use super::error::PgError;
use super::store::PgStore;

/// A thread's context row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ContextRow {
    pub body: String,
    pub paused: bool,
}

impl PgStore {
    /// The context of `thread`, if one was recorded.
    pub(crate) fn thread_context(&self, thread: &str) -> Result<Option<ContextRow>, PgError> {
        let row = self.with_client("read thread context", |c| {
            c.query_opt(
                "select body, paused from thread_context where thread = $1",
                &[&thread],
            )
        })?;
        Ok(row.map(|r| ContextRow {
            body: r.get(0),
            paused: r.get(1),
        }))
    }

    /// Records (or replaces) the context of `thread`, keeping whether it is paused.
    pub(crate) fn put_thread_context(
        &self,
        thread: &str,
        body: &str,
        at_ms: u64,
    ) -> Result<(), PgError> {
        let at = at_ms as i64;
        self.with_client("record thread context", |c| {
            c.execute(
                "insert into thread_context (thread, body, updated_ms) values ($1, $2, $3)
                 on conflict (thread) do update set body = excluded.body,
                     updated_ms = excluded.updated_ms",
                &[&thread, &body, &at],
            )
        })?;
        Ok(())
    }

    /// Pauses or resumes `thread` (a thread with no context yet gets an empty one). Notifies
    /// the threads channel, so watchers and idle workers look again.
    pub(crate) fn set_thread_paused(
        &self,
        thread: &str,
        paused: bool,
        at_ms: u64,
    ) -> Result<(), PgError> {
        let at = at_ms as i64;
        self.with_client("pause or resume a thread", |c| {
            c.execute(
                "insert into thread_context (thread, body, paused, updated_ms)
                 values ($1, '{}', $2, $3)
                 on conflict (thread) do update set paused = excluded.paused,
                     updated_ms = excluded.updated_ms",
                &[&thread, &paused, &at],
            )?;
            c.execute(
                "select pg_notify($1, $2)",
                &[&super::schema::CHANNEL, &thread],
            )
        })?;
        Ok(())
    }
}
