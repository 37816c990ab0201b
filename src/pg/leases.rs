//! Step locks as leases, and claiming runnable threads for workers
//! (`docs/several-machines.md#reference`).
//!
//! A lease is a row `(thread, holder, machine, expires_at)`. Every time comparison uses the
//! server's clock (`now()`), so clock skew between machines does not matter. A step renews its
//! lease while it runs; a machine that dies stops renewing and its lease expires, after which
//! anyone may take it over.
//!
//! Architecture Invariant: taking a lease is one statement (`insert … on conflict do update …
//! where expires_at <= now()`), so of any number of racers at most one gets it, and a live lease
//! is never overwritten. Claiming a queued thread takes its lease in the same statement, with
//! `for update skip locked` so concurrent claimers never wait for, or pick, the same row.

use std::time::Duration;

use super::error::PgError;
use super::store::PgStore;

/// A lease this process holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub thread: String,
    pub holder: String,
    pub machine: String,
}

/// Who takes a lease: a unique holder name (e.g. `pid@host/ulid`) and the machine it runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holder<'a> {
    pub holder: &'a str,
    pub machine: &'a str,
}

impl PgStore {
    /// Takes the step lease of `thread` for `ttl`, unless an unexpired lease of another holder
    /// exists ([`PgError::Busy`] names that holder and its machine). Taking one's own lease
    /// again renews it; an expired lease is taken over.
    pub fn try_acquire(
        &self,
        thread: &str,
        who: Holder<'_>,
        ttl: Duration,
    ) -> Result<Lease, PgError> {
        let secs = ttl.as_secs_f64();
        // A lease released between the insert and the read of its holder leaves nothing to
        // report; take another turn then.
        for _ in 0..3 {
            let taken = self.with_client("take lease", |c| {
                c.query_opt(
                    "insert into leases (thread, holder, machine, expires_at)
                     values ($1, $2, $3, now() + make_interval(secs => $4))
                     on conflict (thread) do update
                        set holder = excluded.holder, machine = excluded.machine,
                            expires_at = excluded.expires_at
                        where leases.expires_at <= now() or leases.holder = excluded.holder
                     returning thread",
                    &[&thread, &who.holder, &who.machine, &secs],
                )
            })?;
            if taken.is_some() {
                return Ok(Lease {
                    thread: thread.to_owned(),
                    holder: who.holder.to_owned(),
                    machine: who.machine.to_owned(),
                });
            }
            let current = self.with_client("read lease", |c| {
                c.query_opt(
                    "select holder, machine,
                            (extract(epoch from expires_at - now()) * 1000)::bigint
                     from leases where thread = $1",
                    &[&thread],
                )
            })?;
            if let Some(row) = current {
                return Err(PgError::Busy {
                    thread: thread.to_owned(),
                    holder: row.get(0),
                    machine: row.get(1),
                    expires_in_ms: row.get::<_, i64>(2).max(0),
                });
            }
        }
        Err(PgError::Query {
            action: "take lease",
            reason: format!("the lease of thread {thread} kept changing hands"),
        })
    }

    /// Extends a held lease to `ttl` from now; [`PgError::LeaseLost`] if it expired and was
    /// taken over, or was released.
    pub fn renew(&self, lease: &Lease, ttl: Duration) -> Result<(), PgError> {
        let secs = ttl.as_secs_f64();
        let n = self.with_client("renew lease", |c| {
            c.execute(
                "update leases set expires_at = now() + make_interval(secs => $3)
                 where thread = $1 and holder = $2",
                &[&lease.thread, &lease.holder, &secs],
            )
        })?;
        if n == 1 {
            Ok(())
        } else {
            Err(PgError::LeaseLost {
                thread: lease.thread.clone(),
                holder: lease.holder.clone(),
            })
        }
    }

    /// Who holds the live lease of `thread`, if anyone: `(holder, machine, ms until it
    /// expires)`.
    pub(crate) fn lease_of(&self, thread: &str) -> Result<Option<(String, String, i64)>, PgError> {
        let row = self.with_client("read lease", |c| {
            c.query_opt(
                "select holder, machine,
                        (extract(epoch from expires_at - now()) * 1000)::bigint
                 from leases where thread = $1 and expires_at > now()",
                &[&thread],
            )
        })?;
        Ok(row.map(|r| (r.get(0), r.get(1), r.get::<_, i64>(2).max(0))))
    }

    /// Gives a lease up. Returns whether it was still held (false after a takeover).
    pub fn release(&self, lease: &Lease) -> Result<bool, PgError> {
        // Readers that watch the thread (`live`, `wait`) learn at once that its step ended.
        let rows = self.with_client("release lease", |c| {
            c.query(
                "with gone as (
                     delete from leases where thread = $1 and holder = $2 returning thread
                 )
                 select pg_notify('uwf_runs', thread)::text from gone",
                &[&lease.thread, &lease.holder],
            )
        })?;
        Ok(rows.len() == 1)
    }

    /// Claims one runnable thread — queued, active, of `workflow` if given, with no live lease —
    /// by taking its lease. A thread whose lease expired (its worker died mid-run) comes first,
    /// then the one waiting longest. `None` when there is nothing to claim. The thread stays queued: the
    /// worker dequeues it when it finishes, fails or awaits a human, and releases the lease
    /// after each step.
    pub fn claim(
        &self,
        workflow: Option<crate::cas::Hash>,
        who: Holder<'_>,
        ttl: Duration,
    ) -> Result<Option<Lease>, PgError> {
        let secs = ttl.as_secs_f64();
        let workflow = workflow.map(|w| w.to_string());
        // The insert finds a conflicting row only if a live lease appeared between the pick and
        // the insert (a `thread step` outside the queue); then pick again.
        for _ in 0..3 {
            let claimed = self.with_client("claim thread", |c| {
                c.query_opt(
                    "with pick as (
                         select t.id from threads t
                         left join leases l on l.thread = t.id
                         where t.queued and t.status = 'active'
                           and not exists (select 1 from thread_context c
                                           where c.thread = t.id and c.paused)
                           and ($1::text is null or t.workflow = $1)
                           and (l.thread is null or l.expires_at <= now())
                         order by (l.thread is not null) desc, t.updated_at, t.id
                         limit 1
                         for update of t skip locked
                     )
                     insert into leases (thread, holder, machine, expires_at)
                     select id, $2, $3, now() + make_interval(secs => $4) from pick
                     on conflict (thread) do update
                        set holder = excluded.holder, machine = excluded.machine,
                            expires_at = excluded.expires_at
                        where leases.expires_at <= now()
                     returning thread",
                    &[&workflow, &who.holder, &who.machine, &secs],
                )
            })?;
            if let Some(row) = claimed {
                return Ok(Some(Lease {
                    thread: row.get(0),
                    holder: who.holder.to_owned(),
                    machine: who.machine.to_owned(),
                }));
            }
            let any_left = self.with_client("claim thread", |c| {
                c.query_one(
                    "select exists (select 1 from threads t
                         where t.queued and t.status = 'active'
                           and not exists (select 1 from thread_context c
                                           where c.thread = t.id and c.paused)
                           and ($1::text is null or t.workflow = $1)
                           and not exists (select 1 from leases l
                                           where l.thread = t.id and l.expires_at > now()))",
                    &[&workflow],
                )
            })?;
            if !any_left.get::<_, bool>(0) {
                return Ok(None);
            }
        }
        Ok(None)
    }
}
