//! `thread run` and `uwf run`: stepping a thread to its end in one process, a line per step, and
//! what a role's retries and failures say on the way.

use std::path::Path;

use clap::Args;

use super::super::Out;
use super::{StartArgs, load_config};
use crate::cas::Store;
use crate::cli::error::{CliResult, CommandError, Context, ended};
use crate::cli::terminal::output::Mode;
use crate::engine::agent::interrupt;
use crate::engine::cycle::step::{self, StepOptions};
use crate::engine::cycle::{failure, lifecycle};
use crate::engine::thread::index::{self, State};
use crate::engine::thread::view::ThreadView;
use crate::engine::workflow::jsonata;

/// Steps thread `id` until it is done, awaits a person or took `max_steps` steps, printing a
/// line per step (`thread run`, `uwf run`). Ends with the codes of `docs/cli.md#exit-codes`: 0
/// done (also when it already was), [`ended::STOPPED`] still active after `max_steps`,
/// [`ended::AWAITING`] waiting for a person, [`ended::FAILED`] a step failed,
/// [`ended::KILLED`] killed.
pub(super) fn run_steps(
    store: &Store,
    id: &str,
    max_steps: usize,
    (agent, by): (Option<String>, Option<String>),
    out: &mut Out,
) -> CliResult<()> {
    // A finished thread has nothing left to run: done is not an error, killed is its own end.
    // One row of the index says so (a summary would read the thread's chain first).
    if let Ok(State::Archived(archived)) = index::state(store.root(), id) {
        return finished(id, &archived.status, true);
    }
    let config = load_config(store.root(), agent.as_deref())?;
    let options = StepOptions {
        agent,
        passthrough: true,
        from_queue: false,
        by,
    };
    let progress = std::io::IsTerminal::is_terminal(&std::io::stderr());
    // Steps are numbered as `thread log` numbers them: after the steps the thread already has.
    let before = if progress {
        let head = crate::engine::thread::index::active_head(store.root(), id)?;
        crate::engine::chain::history(store, head)?.len()
    } else {
        0
    };
    let started = std::time::Instant::now();
    let mut warm = step::Warm::default();
    for n in 1..=max_steps {
        if progress {
            eprintln!(
                "uwf: step {} of thread {id} ({} elapsed)",
                before + n,
                human_duration(started.elapsed())
            );
        }
        let stepped = match step::step_warm(store, &config, id, &options, &mut warm) {
            Ok(stepped) => stepped,
            Err(e) => return Err(step_failed(store, id, CommandError::from(e))),
        };
        print_stepped(store, out, &stepped)?;
        out.flush()?;
        if stepped.done {
            let status = match index::state(store.root(), id) {
                Ok(State::Archived(archived)) => archived.status,
                _ => "done".to_owned(),
            };
            return finished(id, &status, false);
        }
        if stepped.awaiting {
            // On a terminal, the step's line said it already.
            if out.mode == Mode::Table {
                return Err(CommandError::silent(ended::AWAITING));
            }
            eprintln!(
                "uwf: thread {id} is waiting for a person (role {}): `uwf thread question {id}`, \
                 then `uwf thread answer {id}`",
                stepped.role.as_deref().unwrap_or("?")
            );
            return Err(CommandError::silent(ended::AWAITING));
        }
        if let Some(signal) = interrupt::caught() {
            return Err(CommandError::user(format!(
                "thread run was interrupted by {} after {n} steps; thread {id} is at {}",
                interrupt::name(signal),
                stepped.head
            ))
            .interrupted_by(signal));
        }
    }
    eprintln!(
        "uwf: stopped after {} (--max-steps); the thread is still active",
        crate::engine::thread::summary::plural(max_steps, "step")
    );
    Err(CommandError::silent(ended::STOPPED))
}

/// How a run of a thread that is archived ends: 0 for `done` (saying so when it `already` was),
/// [`ended::KILLED`] for one killed or rebased away.
fn finished(id: &str, status: &str, already: bool) -> CliResult<()> {
    match status {
        "done" if already => {
            eprintln!("uwf: thread {id} is already done: nothing to run");
            Ok(())
        }
        "done" => Ok(()),
        other => Err(CommandError::user(format!(
            "thread {id} was {other}: it takes no more steps"
        ))
        .ended(ended::KILLED)),
    }
}

/// A step that did not publish: [`ended::FAILED`] when the thread recorded a failed step,
/// [`ended::AWAITING`] when it was refused at the thread's budget,
/// [`ended::KILLED`] when it was killed meanwhile; any other error (busy, a stop signal, a
/// thread that is not there) keeps its own code.
fn step_failed(store: &Store, id: &str, e: CommandError) -> CommandError {
    match lifecycle::summary(store, id).map(|s| s.status) {
        Ok(status) if status == "failed" => e.ended(ended::FAILED),
        // Refused at its budget: it waits for a person to raise it (the error says how).
        Ok(status) if status == crate::engine::thread::cost::OVER_BUDGET => {
            e.ended(ended::AWAITING)
        }
        Ok(status) if status == "killed" || status == "rebased" => e.ended(ended::KILLED),
        _ => e,
    }
}

/// A duration for people: `0.4s` under ten seconds, `12s` under a minute, then `3m05s` and
/// `2h07m`.
pub(crate) fn human_duration(d: std::time::Duration) -> String {
    let secs = d.as_secs();
    match secs {
        0..10 => format!("{:.1}s", (d.as_millis() / 100) as f64 / 10.0),
        10..60 => format!("{secs}s"),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        _ => format!("{}h{:02}m", secs / 3600, secs % 3600 / 60),
    }
}

/// `uwf run`: start a thread and run it to its end.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    start: StartArgs,
    /// Stop after this many steps even if the thread is not done
    #[arg(long, default_value_t = 100, value_name = "N")]
    max_steps: usize,
    /// The agent for every step: a configured agent name or a command line (default: the
    /// agents config.yaml names for the workflow's roles)
    #[arg(long)]
    agent: Option<String>,
}

/// `uwf run W -p PROMPT`: `thread start` then `thread run`, one line per step.
pub(crate) fn start_and_run(args: RunArgs, root: &Path, out: &mut Out) -> CliResult<()> {
    if args.start.queue {
        return Err(CommandError::usage(
            "--queue leaves the thread to workers; `uwf run` runs it here (use `uwf thread start --queue`)",
        ));
    }
    jsonata::prewarm();
    interrupt::catch_stop_signals().context("cannot catch stop signals")?;
    failure::report_to(print_notice);
    let by = super::author::person(args.start.by.as_deref())?;
    let store = crate::engine::storage::open_store(root)?;
    let (workflow, id) = args.start.start_by(&store, root, by.as_deref())?;
    eprintln!("uwf: started thread {id} of {workflow}");
    run_steps(&store, &id, args.max_steps, (args.agent, by), out)
}

/// Says on stderr when a role's agent runs again after a failed attempt, or when its failure
/// moved the thread on (its `onFailure`).
pub(super) fn print_notice(notice: &failure::Notice<'_>) {
    match *notice {
        failure::Notice::Retrying {
            thread,
            role,
            failed,
            most,
            error,
        } => eprintln!(
            "uwf: role `{role}` of thread {thread} failed (attempt {failed} of {most}), running its agent again: {}",
            failure::first_line(error)
        ),
        failure::Notice::Routed {
            thread,
            role,
            attempts,
            to,
            error,
        } => eprintln!(
            "uwf: role `{role}` of thread {thread} failed ({}); onFailure moves the thread to `{to}`: {}",
            lifecycle::plural(attempts as usize, "attempt"),
            failure::first_line(error)
        ),
    }
}

/// What a step did: for a person at a terminal, one line as `uwf live` writes it (the step's
/// number, role, agent, new head and output) and what comes next; else its JSON (`-q`: the
/// head).
pub(super) fn print_stepped(
    store: &Store,
    out: &mut Out,
    stepped: &step::Stepped,
) -> CliResult<()> {
    match out.mode {
        Mode::Quiet => out.line(stepped.head)?,
        Mode::Json => out.line(stepped.to_json())?,
        Mode::Table => out.text(&step_lines(store, stepped))?,
    }
    Ok(())
}

/// The lines of [`print_stepped`] for a person.
fn step_lines(store: &Store, stepped: &step::Stepped) -> String {
    let id = &stepped.thread;
    let role = stepped.role.as_deref().unwrap_or("?");
    if stepped.awaiting {
        return format!(
            "? {role} waits for a person: `uwf thread question {id}`, then `uwf thread answer {id}`\n"
        );
    }
    let Some(_) = &stepped.role else {
        return format!("thread {id} is at its end: nothing to step\n");
    };
    let view = ThreadView::at(store, id, stepped.head);
    let mut text = match view
        .as_ref()
        .ok()
        .and_then(|v| Some((v.chain.steps.len(), v.chain.steps.last()?)))
    {
        Some((number, step)) => {
            format!(
                "{}\n",
                crate::cli::live::step_line(number, step, &step.agent)
            )
        }
        None => format!("✓ {role} → {}\n", stepped.head),
    };
    if stepped.done {
        text.push_str(&format!(
            "thread {id} is done: `uwf thread read {id}` reads it\n"
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::human_duration;

    #[test]
    fn durations_read_as_people_write_them() {
        let cases = [
            (Duration::from_nanos(411), "0.0s"),
            (Duration::from_millis(400), "0.4s"),
            (Duration::from_millis(9_990), "9.9s"),
            (Duration::from_secs(12), "12s"),
            (Duration::from_secs(185), "3m05s"),
            (Duration::from_secs(7_620), "2h07m"),
        ];
        for (d, text) in cases {
            assert_eq!(human_duration(d), text, "{d:?}");
        }
    }
}
