//! `uwf thread live ID` (and `uwf live ID`): watch a thread from any terminal (SPEC §11).
//!
//! Follows the thread log (`runs/<id>.log`, see `engine::thread::log`) from the running step's
//! header, printing agent output as it arrives, and one line per step as its head is published,
//! until the thread is done, killed, rebased, failed or waiting for a person. It only reads, so
//! it works whoever steps the thread: `uwf thread step/run`, the mount, a worker. Over
//! PostgreSQL it reads the log from the database and wakes on notifications, so it follows
//! steps that any machine runs.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use clap::Args;

use super::Out;
use crate::cas::{Hash, Store};
use crate::cli::error::CliResult;
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
    after_help = "Ends when the thread is done, killed, rebased, failed or waiting for a person \
(exit 0). On a terminal a progress line shows the running role, agent and time.\n\n\
Examples:\n  uwf thread live 01JD8X…            # in one terminal\n  \
uwf thread run 01JD8X…             # in another\n  uwf live 01JD8X… --once"
)]
pub struct LiveArgs {
    /// Thread id (a unique prefix is enough)
    thread: String,
    /// Only the current step: end when it ends (at once when no step runs)
    #[arg(long)]
    once: bool,
}

pub fn run(args: LiveArgs, root: &Path, out: &mut Out) -> CliResult {
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
    let (mut head, mut steps) = position(&store, &id)?;
    let mut shown_progress = false;
    let mut quiet_since = Instant::now();
    loop {
        let copied = log.copy_new(&files, out)?;
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
            log.copy_new(&files, out)?;
            print_steps(&store, &id, new_head, steps, out)?;
            out.flush()?;
            let stepped = new_steps > steps;
            head = new_head;
            steps = new_steps;
            if args.once && stepped {
                return Ok(());
            }
        }
        if !now_running {
            log.copy_new(&files, out)?;
            let summary = lifecycle::summary(&store, &id)?;
            let end = match summary.status.as_str() {
                _ if summary.done() => {
                    Some(format!("thread {id} is {}", summary.status_line(&files)))
                }
                "awaiting" => Some(format!(
                    "thread {id} is waiting for a person (role {}): `uwf thread question {id}`, then `uwf thread answer {id}`",
                    summary.awaiting.as_deref().unwrap_or("?")
                )),
                "failed" if running || !args.once => Some(format!(
                    "thread {id} failed: {}",
                    summary.error.as_deref().unwrap_or("").trim_end()
                )),
                _ if args.once => Some(format!(
                    "no step is running on thread {id} (next: {})",
                    summary.next.as_deref().unwrap_or("?")
                )),
                _ => None,
            };
            if let Some(end) = end {
                if shown_progress {
                    eprint!("\r\x1b[K");
                }
                out.line(end)?;
                return Ok(());
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
                steps + 1,
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

/// One line per step published after the first `from` steps, up to `head`.
fn print_steps(store: &Store, id: &str, head: Hash, from: usize, out: &mut Out) -> CliResult {
    let view = ThreadView::at(store, id, head)?;
    for (i, step) in view.chain.steps.iter().enumerate().skip(from) {
        let mut summary = step
            .failure_line()
            .unwrap_or_else(|| step.output().to_string());
        if summary.chars().count() > 80 {
            summary = format!("{}…", summary.chars().take(79).collect::<String>());
        }
        out.line(format!(
            "✓ step {} · {} · agent {} → {}  {summary}",
            i + 1,
            step.role,
            step.agent,
            step.hash
        ))?;
    }
    Ok(())
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

/// Where the reader is in the log, and the start of a character cut at the last read's end.
#[derive(Debug, Default)]
struct LogReader {
    offset: u64,
    partial: Vec<u8>,
}

impl LogReader {
    /// Copies what the log gained since the last read to `out`; returns how many bytes.
    fn copy_new(&mut self, files: &RunFiles, out: &mut Out) -> CliResult<u64> {
        let mut copied = 0;
        loop {
            let chunk = files.read_text(RunFileKind::Log, self.offset, 1 << 20)?;
            if chunk.is_empty() {
                return Ok(copied);
            }
            self.offset += chunk.len() as u64;
            copied += chunk.len() as u64;
            self.partial.extend_from_slice(&chunk);
            out.text(&log::whole_chars(&mut self.partial))?;
        }
    }
}
