//! `uwf thread live ID` (and `uwf live ID`): watch a thread from any terminal
//! (`docs/agents.md#watching-a-thread-live`).
//!
//! Follows the thread log (`runs/<id>.log`, see `engine::thread::log`) from the running step's
//! header, printing agent output as it arrives, and one line per step as its head is published,
//! until the thread is done, killed, rebased, failed or waiting for a person. It only reads, so
//! it works whoever steps the thread: `uwf thread step/run`, the mount, a worker. Over
//! PostgreSQL it reads the log from the database and wakes on notifications, so it follows
//! steps that any machine runs.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use clap::Args;

use super::Out;
use crate::cas::{Hash, Store};
use crate::cli::error::{CliResult, CommandError, ended};
use crate::engine::cycle::lifecycle;
use crate::engine::storage::notify::ThreadWaker;
use crate::engine::thread::index::{self, State};
use crate::engine::thread::log;
use crate::engine::thread::run_files::RunFiles;
use crate::engine::thread::view::ThreadView;
use crate::pg::RunFileKind;

/// How often the log and the thread's state are looked at in a directory store (over
/// PostgreSQL, a notification wakes the reader).
const POLL: Duration = Duration::from_millis(100);

#[derive(Debug, Args)]
#[command(
    after_help = "Ends when the thread is done (exit 0), waiting for a person (4), failed (5), \
killed or rebased (6); --once when the current step ends (0). On a terminal a progress line shows the running role, agent and time.\n\n\
Examples:\n  uwf thread live 01JD8X…            # in one terminal\n  \
uwf thread run 01JD8X…             # in another\n  uwf live 01JD8X… --once"
)]
pub(super) struct LiveArgs {
    /// Thread id (a unique prefix is enough)
    thread: String,
    /// Only the current step: end when it ends (at once when no step runs)
    #[arg(long)]
    once: bool,
}

pub(super) fn run(args: LiveArgs, root: &Path, out: &mut Out) -> CliResult {
    let store = crate::engine::storage::open_store(root)?;
    let id = lifecycle::resolve_id(root, &args.thread)?;
    let files = RunFiles::new(root, &id);
    let mut waker = ThreadWaker::new(root, &id, POLL);
    let mut log = LogReader::default();
    let progress = std::io::stderr().is_terminal();
    let mut running = files.is_running();
    // From the running step's header, or from the end: what is already there is history
    // (`uwf thread log` prints it).
    log.offset = if running {
        last_header(&files)
    } else {
        files.text_stat(RunFileKind::Log).0
    };
    let (mut head, steps) = position(&store, &id)?;
    // Steps shown so far (the history counts as shown): a step's line comes before the next
    // step's header, however fast the steps go.
    let shown = std::cell::Cell::new(steps);
    let mut before_header = |index: usize, agents: &HashMap<usize, String>, out: &mut Out| {
        if index > shown.get() + 1 {
            let (now, published) = position(&store, &id)?;
            let upto = published.min(index - 1);
            if upto > shown.get() {
                print_steps(&store, &id, now, (shown.get(), upto), agents, out)?;
                shown.set(upto);
            }
        }
        CliResult::Ok(())
    };
    let mut at_head = steps;
    let mut shown_progress = false;
    let mut quiet_since = Instant::now();
    loop {
        let copied = log.copy_new(&files, out, &mut before_header)?;
        if copied > 0 {
            if shown_progress {
                eprint!("\r\x1b[K");
                shown_progress = false;
            }
            out.flush()?;
            quiet_since = Instant::now();
        }
        let now_running = files.is_running();
        let (new_head, new_steps) = position(&store, &id)?;
        if new_head != head {
            log.copy_new(&files, out, &mut before_header)?;
            log.finish(out)?;
            if new_steps > shown.get() {
                print_steps(
                    &store,
                    &id,
                    new_head,
                    (shown.get(), new_steps),
                    &log.agents,
                    out,
                )?;
            }
            out.flush()?;
            let stepped = new_steps > at_head;
            at_head = new_steps;
            head = new_head;
            shown.set(new_steps.max(shown.get()));
            if args.once && stepped {
                return Ok(());
            }
        }
        if !now_running {
            log.copy_new(&files, out, &mut before_header)?;
            log.finish(out)?;
            let summary = lifecycle::summary(&store, &id)?;
            // The exit codes `thread run` ends with (`docs/cli.md#exit-codes`).
            let end = match summary.status.as_str() {
                "done" => Some((format!("thread {id} is {}", summary.status_line(&files)), 0)),
                _ if summary.done() => Some((
                    format!("thread {id} is {}", summary.status_line(&files)),
                    ended::KILLED,
                )),
                "awaiting" => Some((
                    format!(
                        "thread {id} is waiting for a person (role {}): `uwf thread question {id}`, then `uwf thread answer {id}`",
                        summary.awaiting.as_deref().unwrap_or("?")
                    ),
                    ended::AWAITING,
                )),
                "over-budget" => Some((
                    format!(
                        "thread {id} waits for a person to raise its budget: {}",
                        summary.error.as_deref().unwrap_or("").trim_end()
                    ),
                    ended::AWAITING,
                )),
                "failed" if running || !args.once => Some((
                    format!(
                        "thread {id} failed: {}",
                        summary.error.as_deref().unwrap_or("").trim_end()
                    ),
                    ended::FAILED,
                )),
                _ if args.once => Some((
                    format!(
                        "no step is running on thread {id} (next: {})",
                        summary.next.as_deref().unwrap_or("?")
                    ),
                    0,
                )),
                _ => None,
            };
            if let Some((end, code)) = end {
                if shown_progress {
                    eprint!("\r\x1b[K");
                }
                out.line(end)?;
                out.flush()?;
                return match code {
                    0 => Ok(()),
                    code => Err(CommandError::silent(code)),
                };
            }
        }
        running = now_running;
        if progress
            && running
            && quiet_since.elapsed() > Duration::from_secs(1)
            && let Some(info) = files.running_info()
        {
            let secs = crate::cas::store::now_ms().saturating_sub(info.started_at) / 1000;
            eprint!(
                "\r\x1b[K⏵ step {} · {} · agent {} · {secs}s",
                shown.get() + 1,
                info.role.as_deref().unwrap_or("?"),
                info.agent.as_deref().unwrap_or("?")
            );
            let _ = std::io::stderr().flush();
            shown_progress = true;
        }
        waker.wait();
    }
}

/// The thread's head and number of steps now.
fn position(store: &Store, id: &str) -> CliResult<(Hash, usize)> {
    let head = match index::state(store.root(), id)? {
        State::Active { head } => head,
        State::Archived(a) => a.head,
    };
    let steps = crate::engine::chain::history(store, head)?.len();
    Ok((head, steps))
}

/// One line per step `from + 1 ..= upto` of the chain at `head`, naming the agent its log
/// header named (`agents`, by step), as the header did.
fn print_steps(
    store: &Store,
    id: &str,
    head: Hash,
    (from, upto): (usize, usize),
    agents: &HashMap<usize, String>,
    out: &mut Out,
) -> CliResult {
    let view = ThreadView::at(store, id, head)?;
    for (i, step) in view.chain.steps.iter().enumerate().take(upto).skip(from) {
        let agent = agents.get(&(i + 1)).unwrap_or(&step.agent);
        out.line(step_line(i + 1, step, agent))?;
    }
    Ok(())
}

/// One finished step as a person reads it: `✓ step N · role · agent A → HASH  output` (its
/// failure line instead of the output for a step recording its role's failure), within a line.
pub(crate) fn step_line(number: usize, step: &crate::engine::chain::Entry, agent: &str) -> String {
    let mut summary = step
        .failure_line()
        .unwrap_or_else(|| step.output().to_string());
    if summary.chars().count() > 80 {
        summary = format!("{}…", summary.chars().take(79).collect::<String>());
    }
    format!(
        "✓ step {number} · {} · agent {agent} → {}  {summary}",
        step.role, step.hash
    )
}

/// The offset of the last step header in the log (0 when there is none).
fn last_header(files: &RunFiles) -> u64 {
    let Ok(bytes) = files.read_text_all(RunFileKind::Log) else {
        return 0;
    };
    let needle = format!("\n{}", log::HEADER_PREFIX);
    match bytes
        .windows(needle.len())
        .rposition(|w| w == needle.as_bytes())
    {
        Some(at) => at as u64 + 1,
        None => 0,
    }
}

/// Where the reader is in the log, the start of a line the last read cut, and the agent each
/// step's header named.
#[derive(Debug, Default)]
struct LogReader {
    offset: u64,
    partial: Vec<u8>,
    agents: std::collections::HashMap<usize, String>,
}

/// What runs before a step's header is printed: given the step and the agents the headers so
/// far named, it prints the steps published before it.
type BeforeHeader<'a> = dyn FnMut(usize, &HashMap<usize, String>, &mut Out) -> CliResult + 'a;

/// A step header's step number and agent (`── step 3 · role · agent NAME · 12:00:01`).
fn parse_header(line: &str) -> Option<(usize, String)> {
    let rest = line.strip_prefix(log::HEADER_PREFIX)?;
    let mut parts = rest.split(" · ");
    let index = parts.next()?.parse().ok()?;
    let agent = parts.nth(1)?.strip_prefix("agent ")?.to_owned();
    Some((index, agent))
}

impl LogReader {
    /// Copies the whole lines the log gained since the last read to `out`; returns how many
    /// bytes were read. Before a step's header, `before_header(step)` prints what must come
    /// first (the steps published before it). A line that is only a hash (an agent's printed
    /// step hash) is left out: the step's line names it.
    fn copy_new(
        &mut self,
        files: &RunFiles,
        out: &mut Out,
        before_header: &mut BeforeHeader<'_>,
    ) -> CliResult<u64> {
        let mut copied = 0;
        loop {
            let chunk = files.read_text(RunFileKind::Log, self.offset, 1 << 20)?;
            if chunk.is_empty() {
                return Ok(copied);
            }
            self.offset += chunk.len() as u64;
            copied += chunk.len() as u64;
            self.partial.extend_from_slice(&chunk);
            let Some(end) = self.partial.iter().rposition(|&b| b == b'\n') else {
                continue;
            };
            let lines: Vec<u8> = self.partial.drain(..=end).collect();
            for line in String::from_utf8_lossy(&lines).lines() {
                self.line(line, out, before_header)?;
            }
        }
    }

    fn line(
        &mut self,
        line: &str,
        out: &mut Out,
        before_header: &mut BeforeHeader<'_>,
    ) -> CliResult {
        if Hash::parse(line.trim()).is_ok() {
            return Ok(());
        }
        if let Some((index, agent)) = parse_header(line) {
            before_header(index, &self.agents, out)?;
            self.agents.insert(index, agent);
        }
        out.line(line)?;
        Ok(())
    }

    /// The rest of a line the log ends in without a newline (the step is over).
    fn finish(&mut self, out: &mut Out) -> CliResult {
        let rest = std::mem::take(&mut self.partial);
        let rest = String::from_utf8_lossy(&rest);
        if !rest.trim().is_empty() && Hash::parse(rest.trim()).is_err() {
            out.line(rest.as_ref())?;
        }
        Ok(())
    }
}
