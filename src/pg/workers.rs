//! What each `uwf worker` is doing, for `uwf worker list` on any machine.
//!
//! A worker upserts its row every few seconds (`seen_at`); a row not seen for a minute is a
//! worker that died without saying so, and is left out of the list (and removed by the next
//! beat of any worker).

use super::error::PgError;
use super::store::PgStore;

/// One worker's last report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WorkerRow {
    pub holder: String,
    pub machine: String,
    pub pid: i32,
    pub workflow: Option<String>,
    /// The threads it is stepping now.
    pub threads: Vec<String>,
    /// Steps taken since it started.
    pub steps: i64,
    /// `running`, `idle` or `stopping`.
    pub state: String,
    pub started_ms: i64,
    pub seen_ms: i64,
}

/// How long a worker's row counts as alive without a beat.
const STALE_SECS: f64 = 60.0;

impl PgStore {
    /// Records what worker `row.holder` is doing now (and forgets workers long gone).
    pub(crate) fn worker_beat(&self, row: &WorkerRow) -> Result<(), PgError> {
        let threads = row.threads.join(",");
        self.with_client("record worker", |c| {
            c.execute(
                "insert into workers (holder, machine, pid, workflow, threads, steps, state)
                 values ($1, $2, $3, $4, $5, $6, $7)
                 on conflict (holder) do update set threads = excluded.threads,
                     steps = excluded.steps, state = excluded.state, seen_at = now()",
                &[
                    &row.holder,
                    &row.machine,
                    &row.pid,
                    &row.workflow,
                    &threads,
                    &row.steps,
                    &row.state,
                ],
            )?;
            c.execute(
                "delete from workers where seen_at < now() - make_interval(secs => $1)",
                &[&STALE_SECS],
            )
        })?;
        Ok(())
    }

    /// Removes a worker's row (it stopped).
    pub(crate) fn worker_gone(&self, holder: &str) -> Result<(), PgError> {
        self.with_client("record worker", |c| {
            c.execute("delete from workers where holder = $1", &[&holder])
        })?;
        Ok(())
    }

    /// The workers seen in the last minute, oldest first.
    pub(crate) fn workers(&self) -> Result<Vec<WorkerRow>, PgError> {
        let rows = self.with_client("list workers", |c| {
            c.query(
                "select holder, machine, pid, workflow, threads, steps, state,
                        (extract(epoch from started_at) * 1000)::bigint,
                        (extract(epoch from seen_at) * 1000)::bigint
                 from workers where seen_at >= now() - make_interval(secs => $1)
                 order by started_at, holder",
                &[&STALE_SECS],
            )
        })?;
        Ok(rows
            .iter()
            .map(|r| {
                let threads: String = r.get(4);
                WorkerRow {
                    holder: r.get(0),
                    machine: r.get(1),
                    pid: r.get(2),
                    workflow: r.get(3),
                    threads: threads
                        .split(',')
                        .filter(|t| !t.is_empty())
                        .map(str::to_owned)
                        .collect(),
                    steps: r.get(5),
                    state: r.get(6),
                    started_ms: r.get(7),
                    seen_ms: r.get(8),
                }
            })
            .collect())
    }

    /// Whether any thread is waiting for a worker: queued and active (of `workflow`, if given),
    /// leased or not.
    pub(crate) fn any_queued(&self, workflow: Option<crate::cas::Hash>) -> Result<bool, PgError> {
        let workflow = workflow.map(|w| w.to_string());
        let row = self.with_client("read queue", |c| {
            c.query_one(
                "select exists (select 1 from threads
                     where queued and status = 'active' and ($1::text is null or workflow = $1)
                       and not exists (select 1 from thread_context c
                                       where c.thread = threads.id and c.paused))",
                &[&workflow],
            )
        })?;
        Ok(row.get(0))
    }
}
