//! `uwf worker`: step queued threads (`docs/several-machines.md#reference`), and `uwf worker list`.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use clap::{Args, Subcommand};
use serde_json::json;

use crate::cas::store::now_ms;
use crate::cli::Out;
use crate::cli::error::{CliResult, Context};
use crate::cli::terminal::output::{Mode, ago};
use crate::engine::config;
use crate::engine::cycle::worker::{self, Event, WorkerOptions};
use crate::engine::storage;

/// `uwf worker [OPTIONS]` or `uwf worker list`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct WorkerArgs {
    #[command(subcommand)]
    command: Option<WorkerCommand>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, Subcommand)]
enum WorkerCommand {
    /// The workers at work on this store (every machine's, over PostgreSQL)
    List,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// Threads stepped at once
    #[arg(long, short = 'c', default_value_t = 1, value_name = "N")]
    concurrency: usize,
    /// Only threads of this workflow (name or hash)
    #[arg(long, value_name = "W")]
    workflow: Option<String>,
    /// Steps on one thread before it goes back to the queue for the next worker
    #[arg(long, default_value_t = 100, value_name = "N")]
    max_steps: usize,
    /// Stop when no thread is queued any more (default: wait for more)
    #[arg(long)]
    until_idle: bool,
    /// The agent for every step: a configured agent name or a command line (default: the
    /// config's agentOverrides and defaultAgent)
    #[arg(long)]
    agent: Option<String>,
    /// Who runs its steps, named in their log headers and events (default: $UWF_BY, else your
    /// login name)
    #[arg(long, value_name = "NAME")]
    by: Option<String>,
}

pub(crate) fn run(args: WorkerArgs, root: &Path, out: &mut Out) -> CliResult<()> {
    let store = storage::open_store(root)?;
    if let Some(WorkerCommand::List) = args.command {
        let mut rows = Vec::new();
        for w in worker::list(&store)? {
            match out.mode {
                Mode::Quiet => out.line(&w.holder)?,
                Mode::Json => out.line(serde_json::to_value(&w).expect("status serializes"))?,
                Mode::Table => rows.push(vec![
                    w.holder,
                    w.machine,
                    w.state,
                    w.steps.to_string(),
                    ago(w.started_at, now_ms()),
                    w.threads.join(" "),
                ]),
            }
        }
        out.table(
            &["WORKER", "MACHINE", "STATE", "STEPS", "STARTED", "THREADS"],
            &rows,
        )?;
        return Ok(());
    }
    let args = args.run;
    let by = crate::cli::thread::author::runner(args.by.as_deref())?;
    let loaded = config::load(root)?;
    let stop = Arc::new(AtomicBool::new(false));
    // The first SIGTERM or Ctrl-C asks the slots to finish the step they are in and let their
    // threads go; a second one ends the process at once (the leases then expire).
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        let _ = signal_hook::flag::register_conditional_shutdown(signal, 1, stop.clone());
        let _ = signal_hook::flag::register(signal, stop.clone());
    }
    let options = WorkerOptions {
        concurrency: args.concurrency,
        workflow: args.workflow,
        max_steps: args.max_steps,
        until_idle: args.until_idle,
        agent: args.agent,
        by,
    };
    eprintln!(
        "uwf: worker {} on {} with {} slot(s) over {}",
        storage::holder(),
        storage::machine(),
        options.concurrency,
        match storage::url(root)? {
            Some(url) => crate::pg::redact(&url),
            None => root.display().to_string(),
        }
    );
    // `out` holds stdout's lock for the whole command; the slots write their lines through a
    // duplicate of the descriptor instead, one whole line per write.
    let sink = std::os::fd::AsFd::as_fd(&std::io::stdout())
        .try_clone_to_owned()
        .map(|fd| Mutex::new(std::fs::File::from(fd)))
        .context("cannot duplicate stdout")?;
    let on_event = |event: Event<'_>| match event {
        Event::Stepped(s) => {
            let mut json = s.to_json();
            json["worker"] = json!(storage::holder());
            let mut file = sink.lock().unwrap_or_else(|p| p.into_inner());
            // A closed pipe only loses the report; the steps themselves are published.
            let _ = file.write_all(format!("{json}\n").as_bytes());
        }
        Event::Failed { thread, error } => {
            eprintln!(
                "uwf: thread {thread}: step failed, taken off the queue: {}",
                crate::advice::with_hints(error)
            );
        }
        Event::OverBudget { thread, error } => {
            eprintln!("uwf: thread {thread}: waits for a person (it stays queued): {error}");
        }
        Event::Interrupted { thread, error } => {
            eprintln!(
                "uwf: thread {thread}: step interrupted, the store does not answer (the thread stays queued): {error}"
            );
        }
        Event::Trouble { error } => {
            eprintln!("uwf: worker: {error}; trying again in a second");
        }
    };
    let report = worker::run(&store, &loaded, &options, &stop, &on_event)?;
    eprintln!(
        "uwf: worker stopped{}: {} steps, {} threads finished, {} failed",
        if stop.load(Ordering::SeqCst) {
            " (signal)"
        } else {
            ""
        },
        report.steps,
        report.finished,
        report.failed
    );
    Ok(())
}
