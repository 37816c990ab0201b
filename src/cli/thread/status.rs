//! `uwf status`: what needs a person now — threads waiting for an answer or at their budget
//! (for a raise), steps that failed,
//! steps running (and on which worker), paused threads — each with the command that deals
//! with it. Every section reads the thread index through the listing (newest first) and
//! stops at its page, so the cost follows the page, not the store; `and N more` names the
//! list command that shows the rest.

use clap::Args;
use serde_json::{Value, json};

use crate::cas::Store;
use crate::cli::error::CliResult;
use crate::cli::terminal::output::{Mode, Out, ago};
use crate::engine::config::budget::Prices;
use crate::engine::cycle::worker::{self, WorkerStatus};
use crate::engine::thread::context;
use crate::engine::thread::cost;
use crate::engine::thread::listing::{self, Listed, Query};
use crate::engine::thread::summary::Summary;

/// How many threads each section shows unless `--limit` says otherwise.
const SECTION_ROWS: usize = 10;

#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// Threads shown per section (the newest)
    #[arg(long, default_value_t = SECTION_ROWS, value_name = "N")]
    limit: usize,
}

/// One section: the threads in `status`, and how many there are in all.
struct Section {
    status: &'static str,
    threads: Vec<Listed>,
    total: u64,
}

pub(crate) fn run(args: StatusArgs, store: &Store, out: &mut Out) -> CliResult {
    let mut sections = Vec::new();
    for status in ["awaiting", "failed", "running", "paused"] {
        sections.push(section(store, status, args.limit)?);
    }
    // Workers are shown as a machine and a process: best effort, a store without any has none.
    let workers = worker::list(store).unwrap_or_default();
    let prices = crate::engine::config::load(store.root())
        .map(|l| l.config.prices)
        .unwrap_or_default();
    match out.mode {
        Mode::Table => out.text(&text(store, &sections, &workers, &prices))?,
        Mode::Quiet => {
            for s in &sections {
                for t in &s.threads {
                    out.line(&t.summary.id)?;
                }
            }
        }
        Mode::Json => {
            let mut report = json!({});
            for s in &sections {
                let threads: Vec<Value> = s
                    .threads
                    .iter()
                    .map(|t| {
                        let mut v = t.summary.to_json();
                        v["updatedAt"] = t.updated_ms.into();
                        v["command"] = next_command(&t.summary).into();
                        v["cost"] = spent_of(store, t, &prices)
                            .map(|spent| spent.to_json())
                            .unwrap_or(Value::Null);
                        if let Some(w) = worker_of(&workers, &t.summary.id) {
                            v["worker"] = json!({"machine": w.machine, "pid": w.pid});
                        }
                        v
                    })
                    .collect();
                report[s.status] = json!({"threads": threads, "total": s.total});
            }
            out.line(report)?;
        }
    }
    Ok(())
}

/// The newest `limit` threads in `status` (`paused`: active threads paused), and their number.
/// What a listed thread spent: as its listing read it, else from its steps (the paused, looked
/// for among all active threads, are listed without it).
fn spent_of(store: &Store, t: &Listed, prices: &Prices) -> Option<cost::Spent> {
    match &t.usage {
        Some(usage) => Some(usage.spent(prices)),
        None => cost::spent_at(store, t.summary.head, prices).ok(),
    }
}

fn section(store: &Store, status: &'static str, limit: usize) -> CliResult<Section> {
    let query = Query {
        status: (status != "paused").then(|| status.to_owned()),
        usage: status != "paused",
        ..Query::default()
    };
    let mut threads = Vec::new();
    let total = if status == "paused" {
        // Pause is not a status of its own: any active thread may be paused. Active threads
        // are looked at, newest first, until `limit` paused ones are found (the total counts
        // those seen on the way).
        let mut seen = 0u64;
        listing::list_page(store, &query, |mut listed| {
            let id = &listed.summary.id;
            if context::is_paused(store.root(), id).unwrap_or(false) {
                listed.summary.paused = true;
                seen += 1;
                if threads.len() < limit {
                    threads.push(listed);
                }
            }
            threads.len() < limit
        })?;
        seen
    } else {
        let mut total = listing::list(store, &query, |listed| {
            threads.push(listed);
            threads.len() < limit
        })?;
        if status == "awaiting" {
            // A thread at its budget waits for a person too: for a raise, not an answer.
            let query = Query {
                status: Some(cost::OVER_BUDGET.to_owned()),
                usage: true,
                ..Query::default()
            };
            let mut over = Vec::new();
            total += listing::list(store, &query, |listed| {
                over.push(listed);
                over.len() < limit
            })?;
            threads.extend(over);
            threads.sort_by_key(|t| std::cmp::Reverse(t.updated_ms));
            threads.truncate(limit);
        }
        total
    };
    Ok(Section {
        status,
        threads,
        total,
    })
}

/// The worker whose report names thread `id`.
fn worker_of<'a>(workers: &'a [WorkerStatus], id: &str) -> Option<&'a WorkerStatus> {
    workers.iter().find(|w| w.threads.iter().any(|t| t == id))
}

/// The command that deals with a thread in its status.
fn next_command(summary: &Summary) -> String {
    let id = &summary.id;
    if summary.paused && summary.status != "running" {
        return format!("uwf thread resume {id}");
    }
    match summary.status.as_str() {
        "awaiting" => format!("uwf thread question {id} && uwf thread answer {id}"),
        cost::OVER_BUDGET => format!(
            "uwf thread budget {id} --max-cost X (or --max-tokens N); uwf thread kill {id} ends it"
        ),
        "failed" => format!("uwf thread show {id}; uwf thread step {id} tries again"),
        "running" => format!("uwf live {id}"),
        _ => format!("uwf thread show {id}"),
    }
}

/// The sections for a person: a heading each, a line per thread, then its command.
fn text(store: &Store, sections: &[Section], workers: &[WorkerStatus], prices: &Prices) -> String {
    let now = crate::cas::store::now_ms();
    let mut out = String::new();
    let mut quiet = true;
    for s in sections {
        if s.threads.is_empty() {
            continue;
        }
        quiet = false;
        let heading = match s.status {
            "awaiting" => "Waiting for a person",
            "failed" => "Failed (the last step's error)",
            "running" => "Running",
            _ => "Paused",
        };
        out.push_str(&format!("{heading} ({}):\n", s.total));
        for t in &s.threads {
            let summary = &t.summary;
            let what = match s.status {
                "awaiting" if summary.status == cost::OVER_BUDGET => {
                    first_line(summary.error.as_deref().unwrap_or(""))
                }
                "awaiting" => format!("asks `{}`", summary.awaiting.as_deref().unwrap_or("?")),
                "failed" => first_line(summary.error.as_deref().unwrap_or("")),
                "running" => {
                    let role = summary.running_role.as_deref().unwrap_or("a step");
                    match worker_of(workers, &summary.id) {
                        Some(w) => format!("{role} on worker {} (pid {})", w.machine, w.pid),
                        None => role.to_owned(),
                    }
                }
                _ => format!("next: {}", summary.next.as_deref().unwrap_or("?")),
            };
            let spent = match spent_of(store, t, prices) {
                Some(spent) if spent.steps > 0 => format!("\n      spent {}", spent.line()),
                _ => String::new(),
            };
            out.push_str(&format!(
                "  {}  {}  {}  {what}{spent}\n      → {}\n",
                summary.id,
                summary.workflow,
                ago(t.updated_ms, now),
                next_command(summary)
            ));
        }
        let shown = s.threads.len() as u64;
        if s.total > shown {
            let list = match s.status {
                "paused" => "uwf thread list".to_owned(),
                status => format!("uwf thread list --status {status}"),
            };
            out.push_str(&format!("  … and {} more: `{list}`\n", s.total - shown));
        }
        out.push('\n');
    }
    if quiet {
        out.push_str(
            "Nothing needs you: no thread waits for an answer, failed, runs or is paused.\n",
        );
    }
    if !workers.is_empty() {
        out.push_str(&format!("Workers: {}\n", workers.len()));
    }
    out
}

/// The first line of an error, shortened to fit a line.
fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    if line.chars().count() > 90 {
        format!("{}…", line.chars().take(89).collect::<String>())
    } else {
        line.to_owned()
    }
}
