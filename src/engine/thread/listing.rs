//! Listing threads at team scale (`docs/cli.md#paging-through-threads`): one pass over the index,
//! newest first, a summary per thread made from its index row alone — no chain, workflow or run
//! file is read for a thread whose row knows its steps and next role — handed to the caller as it
//! is read.
//!
//! The directory store scans `index.db`; PostgreSQL answers one keyset-paged query per page
//! (`threads` and `history` merged by id), so neither costs a round trip or a file per thread.
//! Rows the index knows less about (threads migrated from the first layout, copied stores) are
//! summarised the slow way, from their nodes, exactly as `thread show` does.
//!
//! A text search ([`Query::text`], `docs/dashboard.md#search`) is a filter of the same scan:
//! the index keeps each thread's start prompt for it, so the match is found in the index at any
//! size and pages with the same cursor. Rows that do not keep their prompt yet (made by a
//! binary before the index kept it, or copied) are filled from their start nodes, in batches,
//! by the first search that meets them ([`make_searchable`]).

use std::collections::HashMap;

use crate::cas::{Hash, Store};
use crate::engine::chain;
use crate::engine::storage;
use crate::engine::storage::index_db;
use crate::engine::storage::seam::{Learned, RowFacts, ThreadIndex};
use crate::engine::workflow::END;

use super::cost::{self, Usage};
use super::index;
use super::run_files::{Awaiting, RunFiles};
use super::summary::{self, Summary, ThreadError};

/// What to list.
#[derive(Debug, Clone, Default)]
pub(crate) struct Query {
    /// Archived (done, killed and rebased) threads too.
    pub all: bool,
    /// Only threads of the workflow of this name.
    pub workflow: Option<String>,
    /// Only threads in this status (`active`, `running`, `awaiting`, `over-budget`, `failed`,
    /// `done`, `killed`, `rebased`).
    pub status: Option<String>,
    /// Only threads started at or after this time (ms since the epoch).
    pub since_ms: Option<u64>,
    /// Only threads older than this one (keyset paging: the last id of the previous page).
    pub before: Option<String>,
    /// Only threads forked or spawned from this one.
    pub parent: Option<String>,
    /// Only threads no sub-workflow started: a child is listed under its parent on request
    /// (`thread list --tree`, `--children`), not among the threads a person started.
    pub top_level: bool,
    /// Only threads whose start prompt (its first [`crate::pg::rows::SEARCH_CHARS`] characters), id
    /// or workflow name holds this text, in any case.
    pub text: Option<String>,
    /// What each listed thread spent ([`Listed::usage`]): read from its row, else worked out
    /// from its steps and written back for the next listing.
    pub usage: bool,
}

/// A "since" as ms since the epoch: a duration ago (`2h`, `7days`), a date (`2026-11-27`,
/// midnight UTC) or a time (`2026-11-27T09:00:00Z`). `thread list --since` and the dashboard's
/// date filter read it alike.
pub(crate) fn since_ms(text: &str) -> Result<u64, String> {
    let now = std::time::SystemTime::now();
    let at = match humantime::parse_duration(text) {
        Ok(ago) => now.checked_sub(ago).unwrap_or(std::time::UNIX_EPOCH),
        Err(_) => {
            let time = if text.len() == 10 {
                format!("{text}T00:00:00Z")
            } else {
                text.to_owned()
            };
            humantime::parse_rfc3339_weak(&time).map_err(|_| {
                format!(
                    "`{text}` is neither a duration (30m, 2h, 7days), a date (2026-11-27) nor a time (2026-11-27T09:00:00Z)"
                )
            })?
        }
    };
    Ok(at
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0))
}

/// The statuses a thread can be listed in.
pub(crate) const STATUSES: [&str; 8] = [
    "active",
    "running",
    "awaiting",
    "over-budget",
    "failed",
    "done",
    "killed",
    "rebased",
];

/// One listed thread.
#[derive(Debug, Clone)]
pub(crate) struct Listed {
    pub summary: Summary,
    /// When the thread last changed (its head moved, or it ended), ms since the epoch.
    pub updated_ms: u64,
    /// What its steps spent, when the query asked ([`Query::usage`]) and its steps could be
    /// read.
    pub usage: Option<Usage>,
}

/// One row of either backend's index, as listing needs it.
pub(crate) use crate::engine::storage::seam::IndexRow;

/// Lists the threads `query` selects, newest first, calling `each` with every one until it
/// returns `false`. Returns how many threads matched in all (those `each` saw and those after
/// it stopped), for "and N more".
pub(crate) fn list(
    store: &Store,
    query: &Query,
    each: impl FnMut(Listed) -> bool,
) -> Result<u64, ThreadError> {
    list_counting(store, query, true, each)
}

/// [`list`] that stops reading the index as soon as `each` returns `false` (a page of a
/// longer list: nothing is counted past it). Returns how many threads `each` saw.
pub(crate) fn list_page(
    store: &Store,
    query: &Query,
    each: impl FnMut(Listed) -> bool,
) -> Result<u64, ThreadError> {
    list_counting(store, query, false, each)
}

fn list_counting(
    store: &Store,
    query: &Query,
    count_all: bool,
    mut each: impl FnMut(Listed) -> bool,
) -> Result<u64, ThreadError> {
    let root = store.root();
    let handle =
        storage::handle(root).map_err(crate::engine::storage::index_files::IndexError::from)?;
    let rows = handle.index();
    let mut names = Names::default();
    let workflows = match &query.workflow {
        Some(name) => {
            let versions = rows.thread_workflows()?;
            Some(names.hashes_named(store, name, &versions))
        }
        None => None,
    };
    let text = match &query.text {
        Some(text) => {
            make_searchable(store, rows)?;
            let needle = text.to_lowercase();
            let versions = rows.thread_workflows()?;
            let workflows = versions
                .into_iter()
                .filter(|h| {
                    names
                        .name(store, *h)
                        .is_some_and(|n| n.to_lowercase().contains(&needle))
                })
                .collect();
            Some(index_db::TextFilter {
                text: text.clone(),
                workflows,
            })
        }
        None => None,
    };
    let all = query.all
        || query
            .status
            .as_deref()
            .is_some_and(index::is_archived_status);
    let mut matched = 0u64;
    let mut wanted = true;
    let mut failure = None;
    // What rows did not know and was worked out from the nodes, kept for the next listing.
    let mut learned = Vec::new();
    let mut take = |row: IndexRow| -> bool {
        if query.parent.is_some() && row.parent != query.parent {
            return true;
        }
        // A row with a parent is a fork, a rebase or a child; only a child has a parent link.
        if query.top_level
            && row.parent.is_some()
            && crate::engine::thread::family::parent(store.root(), &row.id).is_some()
        {
            return true;
        }
        if !wanted {
            // Past the page: counted from the row alone, never summarised from its nodes.
            if query
                .status
                .as_deref()
                .is_none_or(|s| s == live(store, &row).status)
            {
                matched += 1;
            }
            return true;
        }
        let slow = row.steps.is_none() || (row.status == "active" && row.next.is_none());
        let (id, head) = (row.id.clone(), row.head);
        let kept = match (query.usage, row.spent.as_deref()) {
            (true, Some(text)) => Usage::from_row(text).map(|u| (u, Usage::row_has_lines(text))),
            _ => None,
        };
        match summarise(store, &mut names, row) {
            Ok(mut listed) => {
                let shown = query
                    .status
                    .as_deref()
                    .is_none_or(|s| s == listed.summary.status);
                // Spending is read for the threads shown only.
                let mut worked_out = None;
                if query.usage && shown {
                    listed.usage = match kept {
                        // Lines the steps added: summed, and written back as one.
                        Some((usage, true)) => {
                            worked_out = Some(usage.to_row());
                            Some(usage)
                        }
                        Some((usage, false)) => Some(usage),
                        None => {
                            let usage = cost::usage_at(store, head).ok();
                            worked_out = usage.as_ref().map(Usage::to_row);
                            usage
                        }
                    };
                }
                if slow || worked_out.is_some() {
                    let s = &listed.summary;
                    learned.push(Learned {
                        id,
                        head,
                        facts: RowFacts {
                            steps: s.steps as u64,
                            next: s.next.clone(),
                            spent: worked_out,
                        },
                    });
                    if learned.len() >= LEARNED_BATCH {
                        rows.note_derived(&std::mem::take(&mut learned));
                    }
                }
                if !shown {
                    return true;
                }
                matched += 1;
                wanted = each(listed);
                wanted || count_all
            }
            Err(e) => {
                failure = Some(e);
                false
            }
        }
    };
    let scan = index_db::Scan {
        all,
        workflows,
        since_id: query.since_ms.map(index_db::id_since),
        before_id: query.before.clone(),
        text,
    };
    rows.scan(&scan, &mut take)?;
    rows.note_derived(&learned);
    match failure {
        Some(e) => Err(e),
        None => Ok(matched),
    }
}

/// How many of a workflow's threads (the newest) [`workflow_spent`] sums: a page, so that a
/// workflow with many threads costs what a page of them does.
pub(crate) const WORKFLOW_SPENT_PAGE: usize = 200;

/// What the threads of workflow `name` spent (`docs/LLM.md#tokens-cost-and-budgets`): the sum
/// over its newest `page` threads, active and archived, each thread's own steps.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct WorkflowSpent {
    pub spent: super::cost::Spent,
    /// Threads summed.
    pub counted: u64,
    /// Threads of the workflow in all.
    pub threads: u64,
}

impl WorkflowSpent {
    /// [`super::cost::Spent::to_json`] with `threads` (in all) and, when the page held fewer,
    /// `threadsCounted`.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        let mut json = self.spent.to_json();
        json["threads"] = self.threads.into();
        if self.counted < self.threads {
            json["threadsCounted"] = self.counted.into();
        }
        json
    }

    /// One line: what [`super::cost::Spent::line`] says, over how many threads.
    pub(crate) fn line(&self) -> String {
        let over = if self.counted < self.threads {
            format!("the newest {} of {} threads", self.counted, self.threads)
        } else {
            summary::plural(self.threads as usize, "thread")
        };
        format!("{} over {over}", self.spent.line())
    }
}

/// Sums what the newest `page` threads of workflow `name` spent (one listing page and each
/// thread's chain; the threads past the page are counted from the index alone).
pub(crate) fn workflow_spent(
    store: &Store,
    name: &str,
    prices: &crate::engine::config::budget::Prices,
    page: usize,
) -> Result<WorkflowSpent, ThreadError> {
    let query = Query {
        all: true,
        workflow: Some(name.to_owned()),
        usage: true,
        ..Query::default()
    };
    let mut total = WorkflowSpent::default();
    let threads = list(store, &query, |listed| {
        if let Some(usage) = &listed.usage {
            total.spent.merge(&usage.spent(prices));
        }
        total.counted += 1;
        (total.counted as usize) < page
    })?;
    total.threads = threads;
    Ok(total)
}

/// Rows learned the slow way that are written back together.
const LEARNED_BATCH: usize = 500;

/// Rows made searchable per batch.
const SEARCHABLE_BATCH: usize = 500;

/// Fills the prompt of every row that does not keep it yet, from its start node (one or two
/// node reads a row), [`SEARCHABLE_BATCH`] rows a transaction. A row whose start cannot be read
/// keeps an empty prompt (found by its id and workflow only; `cas fsck` reports the node). On
/// an index whose rows all keep their prompts (every thread started by this binary) it costs
/// one look at an empty index. Best effort, as the column is a cache: an index that cannot be
/// written (a read-only disk) is searched as it is, its unfilled rows found by id and workflow.
fn make_searchable(store: &Store, rows: &dyn ThreadIndex) -> Result<(), ThreadError> {
    let mut seen = std::collections::HashSet::new();
    loop {
        let missing = rows.unsearchable(SEARCHABLE_BATCH)?;
        // A row seen before was not filled (a writer raced it): stop rather than loop.
        if missing.is_empty() || !missing.iter().all(|(id, _)| seen.insert(id.clone())) {
            return Ok(());
        }
        let prompts: Vec<(String, String)> = missing
            .into_iter()
            .map(|(id, head)| {
                let prompt = chain::start_of(store, head).map(|s| s.prompt);
                (id, prompt.unwrap_or_default())
            })
            .collect();
        if rows.note_prompts(&prompts).is_err() {
            return Ok(());
        }
    }
}

/// Workflow names by version, read once each.
#[derive(Default)]
struct Names(HashMap<Hash, Option<String>>);

impl Names {
    fn name(&mut self, store: &Store, hash: Hash) -> Option<String> {
        self.0
            .entry(hash)
            .or_insert_with(|| {
                let node = store.get(hash).ok()?;
                node.payload
                    .get("name")
                    .and_then(serde_json::Value::as_str)
                    .map(str::to_owned)
            })
            .clone()
    }

    fn hashes_named(&mut self, store: &Store, name: &str, versions: &[Hash]) -> Vec<Hash> {
        versions
            .iter()
            .copied()
            .filter(|h| self.name(store, *h).as_deref() == Some(name))
            .collect()
    }
}

/// A row's summary: from the row when it knows enough, else from the thread's nodes.
fn summarise(store: &Store, names: &mut Names, row: IndexRow) -> Result<Listed, ThreadError> {
    let archived = index::is_archived_status(&row.status);
    let known = row.steps.is_some() && (archived || row.next.is_some());
    let name = names.name(store, row.workflow);
    let updated_ms = row.updated_ms;
    let (Some(steps), true, Some(name)) = (row.steps, known, name) else {
        let status = archived.then(|| row.status.clone());
        let summary = summary::summary_at(store, &row.id, row.head, status)?;
        return Ok(Listed {
            summary,
            updated_ms,
            usage: None,
        });
    };
    let live = (!archived).then(|| live(store, &row));
    let mut summary = Summary {
        id: row.id,
        workflow: name,
        workflow_hash: row.workflow,
        head: row.head,
        steps: steps as usize,
        status: row.status.clone(),
        next: row.next.clone(),
        error: None,
        running_role: None,
        awaiting: None,
        // A listing reads rows alone; `thread show` reads the context.
        paused: false,
        workdir: None,
        agents: Default::default(),
    };
    let Some(live) = live else {
        summary.next = (row.status == "done").then(|| END.to_owned());
        return Ok(Listed {
            summary,
            updated_ms,
            usage: None,
        });
    };
    summary.status = live.status;
    summary.running_role = live.running_role;
    summary.awaiting = live.awaiting;
    summary.error = live.error;
    Ok(Listed {
        summary,
        updated_ms,
        usage: None,
    })
}

/// What an active thread's row says of it now, without its nodes.
struct Live {
    /// `running`, `awaiting`, `over-budget`, `failed` or `active`; an archived row's own status.
    status: String,
    running_role: Option<String>,
    awaiting: Option<String>,
    error: Option<String>,
}

/// The status a row lists under, from the row and (on the directory store) the thread's run
/// files; what lists filter and count by past the page they print.
fn live(store: &Store, row: &IndexRow) -> Live {
    let mut live = Live {
        status: row.status.clone(),
        running_role: None,
        awaiting: None,
        error: None,
    };
    if index::is_archived_status(&row.status) {
        return live;
    }
    let running = match row.running {
        Some(running) => running,
        None => {
            let files = RunFiles::new(store.root(), &row.id);
            let running = files.is_running();
            if running {
                live.running_role = files.running_info().and_then(|i| i.role);
            }
            running
        }
    };
    let question = row
        .awaiting
        .as_deref()
        .and_then(|q| serde_json::from_str::<Awaiting>(q).ok())
        .filter(|q| q.head == row.head);
    live.status = if running {
        "running".to_owned()
    } else if let Some(q) = question {
        live.awaiting = Some(q.role);
        "awaiting".to_owned()
    } else if let Some(error) = &row.error {
        live.error = Some(error.clone()).filter(|e| !e.is_empty());
        summary::failed_status(error).to_owned()
    } else {
        "active".to_owned()
    };
    live
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workflows_totals_say_when_they_cover_only_a_page() {
        let spent = super::super::cost::Spent {
            input: 10,
            output: 5,
            steps: 2,
            cost_usd: 0.5,
            ..Default::default()
        };
        let all = WorkflowSpent {
            spent: spent.clone(),
            counted: 3,
            threads: 3,
        };
        assert_eq!(all.to_json()["threads"], 3);
        assert!(all.to_json().get("threadsCounted").is_none());
        assert!(all.line().ends_with("over 3 threads"), "{}", all.line());
        let page = WorkflowSpent {
            spent,
            counted: 200,
            threads: 250,
        };
        assert_eq!(page.to_json()["threadsCounted"], 200);
        assert!(
            page.line().ends_with("over the newest 200 of 250 threads"),
            "{}",
            page.line()
        );
    }
}
