//! The command line: argument parsing, output, and turning errors into messages and exit codes.
//!
//! Only this layer prints. Exit codes: 0 ok, 1 error, 2 usage, 75 busy (a thread's step is held
//! by another process), 128 + the signal's number when SIGINT, SIGTERM or SIGHUP stopped a step
//! (130, 143, 129).

mod agent;
mod cas;
mod error;
mod eval;
mod export;
mod knowledge;
mod live;
mod mount;
mod scale;
mod serve;
mod setup;
mod skill;
mod terminal;
mod thread;
mod workflow;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub(crate) use terminal::output::Out;

use error::CliResult;

/// uwf runs LLM-agent workflows over a content-addressed store.
#[derive(Debug, Parser)]
#[command(
    name = "uwf",
    version,
    about,
    propagate_version = true,
    max_term_width = 100
)]
#[command(
    after_help = "Examples:\n  uwf workflow put examples/solve-issue.yaml\n  \
uwf thread start solve-issue -p 'Fix the login bug'   # prints {\"workflow\",\"thread\"}\n  \
id=$(uwf thread start -q solve-issue -p 'Fix it')     # -q prints only the thread id\n  \
uwf thread run \"$id\"                                  # the dry agent by default (offline)\n  \
uwf mount --background ~/uwf && ls ~/uwf/threads\n  uwf skill author\n\n\
Storage root: --root, else $UWF_STORAGE_ROOT, else $WORKFLOW_STORAGE_ROOT, else ~/.uwf"
)]
pub(crate) struct Cli {
    /// Storage root (overrides $UWF_STORAGE_ROOT)
    #[arg(long, global = true, value_name = "DIR", display_order = 900)]
    root: Option<PathBuf>,

    /// Print JSON, one object per line (lists do so whenever stdout is not a terminal)
    #[arg(long = "json", id = "output_json", global = true, display_order = 901)]
    json: bool,

    /// Print only ids, hashes or names, one per line
    #[arg(short, long, global = true, display_order = 902)]
    quiet: bool,

    /// Colour on a terminal (auto: unless NO_COLOR is set), always, or never
    #[arg(
        long,
        global = true,
        value_name = "WHEN",
        default_value = "auto",
        display_order = 903
    )]
    color: terminal::style::When,

    /// Print long output (thread read, log, diff) straight, not through $PAGER (less -FRX)
    #[arg(long, global = true, display_order = 904)]
    no_pager: bool,

    #[command(subcommand)]
    command: Command,
}

// Not deferred, unlike the enums below it: the top level's own arguments are few, and clap
// makes the `help` subcommand's tree before deferred parts exist, so `uwf help worker <TAB>`
// would lose `list`.
#[derive(Debug, Subcommand)]
enum Command {
    /// Start, step, run and inspect threads
    #[command(
        subcommand,
        after_help = "Steps are named by hash, a unique prefix (4+ symbols), or THREAD:INDEX \
(T:1 the first step, T:-1 the head).\n\n\
Examples:\n  T=$(uwf thread start solve-issue -p 'Fix the login bug' -q)\n  uwf thread run $T\n  \
uwf thread steps $T\n  uwf thread diff $T:1 $T:-1\n  uwf thread show $T   # \"error\" says why a step failed\n  \
uwf thread log $T"
    )]
    Thread(thread::ThreadCommand),
    /// Start a thread and run it to its end: `thread start` then `thread run`
    #[command(
        after_help = "Prints one JSON line per step ({\"workflow\",\"thread\",\"head\",\"role\",\"done\"}), \
or its head with -q; stops at the end, when a person is asked, or after --max-steps.\n\n\
Examples:\n  uwf run solve-issue -p 'Fix the login bug'\n  \
uwf run develop --prompt-file task.md --workdir ~/src/app --agent claude\n  \
uwf run analyze-topic -p 'Summarise RFC 9110' --agent dry --max-steps 5"
    )]
    Run(thread::RunArgs),
    /// The agent kit (prompt, submit) and the built-in agents (dry, script, exec, llm, react)
    #[command(
        subcommand,
        after_help = "An agent is any program run as `<command> <thread-id> <role>` that prints the \
hash of the step it wrote.\n\n\
Examples:\n  uwf agent prompt \"$1\" \"$2\" | my-llm-cli |\n    uwf agent submit \"$1\" \"$2\" --agent my-llm-cli\n  \
uwf thread step $T --agent \"uwf agent script --file demo.yaml\"\n  \
uwf thread step $T --agent claude   (Claude Code; `codex` for Codex, `opencode` for OpenCode)"
    )]
    Agent(agent::AgentCommand),
    /// Register, inspect, version and draw workflow definitions
    #[command(
        subcommand,
        after_help = "Examples:\n  uwf workflow put examples/solve-issue.yaml\n  uwf workflow list\n  \
uwf workflow graph solve-issue\n  uwf workflow history solve-issue\n  uwf workflow rollback solve-issue"
    )]
    Workflow(workflow::WorkflowCommand),
    /// Evaluate a JSONata expression (as the moderator does)
    Eval(eval::EvalArgs),
    /// Inspect and maintain the content-addressed store
    #[command(
        subcommand,
        after_help = "Examples:\n  uwf cas list --type step\n  uwf cas get 2DHW2FP49YVD3 --payload\n  \
uwf cas has 2DHW2FP49YVD3 && echo present\n  uwf cas fsck\n  uwf cas gc --dry-run"
    )]
    Cas(cas::CasCommand),
    /// Copy a whole store between backends (a directory, PostgreSQL), verifying every hash
    #[command(
        subcommand,
        after_help = "Examples:\n  uwf store copy ~/.uwf postgres://uwf@db/uwf\n  \
uwf store copy postgres://uwf@db/uwf ~/uwf-backup"
    )]
    Store(scale::store::StoreCommand),
    /// Index a repository's documents and code, and search them (offline, or with embeddings)
    #[command(
        subcommand,
        after_help = "Examples:\n  uwf knowledge sync                  # in a repository with a knowledge.yaml\n  \
uwf knowledge query 'how are retries configured'\n  uwf knowledge query -g 'lease renewal'\n  uwf knowledge status"
    )]
    Knowledge(knowledge::KnowledgeCommand),
    /// Serve the storage as files at DIR (FUSE)
    Mount(mount::MountArgs),
    /// Unmount a `uwf mount` (also after its process died)
    Umount(mount::UmountArgs),
    /// Print concise reference text for agents: cli, author, or agent
    Skill(skill::SkillArgs),
    /// Print shell completion that knows the store (bash, zsh, fish, elvish, powershell)
    #[command(
        long_about = "Print the script that registers uwf's completion with a shell.\n\n\
The script asks uwf itself on every TAB, so it completes what is in the store: thread ids (with \
their prompts), steps as THREAD:INDEX, workflow names and versions, roles and agents, as well as \
commands and flags. It reads the store --root names on the line, else UWF_STORAGE_ROOT. Load \
it from the shell's start-up file, so that it always matches the uwf on your PATH. \
`COMPLETE=SHELL uwf` prints the same script."
    )]
    Completions(skill::CompletionsArgs),
    /// Write config.yaml and .env: a provider, its key, a default model and agent
    Setup(setup::SetupArgs),
    /// Check what a run needs: config, secrets, agents, providers, storage, FUSE
    Doctor(setup::DoctorArgs),
    /// Write the mount's tree (a thread, or --all) as plain files
    Export(export::ExportArgs),
    /// Watch a thread: its agents' output as it arrives, a line per step (= `uwf thread live`)
    Live(live::LiveArgs),
    /// What needs you now: threads waiting for an answer, failed, running or paused, with the
    /// command for each
    #[command(
        after_help = "Examples:\n  uwf status\n  uwf status --limit 50\n  uwf status --json | jq '.awaiting.threads[].thread'"
    )]
    Status(thread::status::StatusArgs),
    /// Step queued threads until stopped; `uwf worker list` shows the workers at work
    #[command(
        after_help = "A thread is queued by `uwf thread start … --queue` or `uwf thread queue ID`, \
and stays runnable until it is done, killed, failed or awaiting a person. Any number of workers \
on any number of machines share the queue of a PostgreSQL store (see docs/several-machines.md \
in uwf's repository); over a directory store they share this machine's.\n\n\
SIGTERM or Ctrl-C: finish the steps under way, let their threads go, stop. A second one: stop at once.\n\n\
Examples:\n  uwf worker --concurrency 4\n  uwf worker --workflow solve-issue --until-idle\n  \
uwf worker list"
    )]
    Worker(scale::worker::WorkerArgs),
    /// The web dashboard: threads, steps, live logs, answers, diffs and workflows in a browser
    Serve(serve::ServeArgs),
    /// Open a thread's page (or the list) in the dashboard, or print its address
    Open(serve::open::OpenArgs),
}

/// Runs the CLI and returns the process exit code.
pub fn main() -> ExitCode {
    crate::malloc_tuning::apply();
    crate::profile::start();
    crate::engine::agent::spawn::arm_parent_death();
    // A TAB in a shell with uwf's completion registered: answer it and exit.
    terminal::complete::on_request();
    let cli = Cli::parse();
    crate::profile::mark("parsed the command line");
    terminal::style::init(cli.color, cli.no_pager);
    let mut out = Out::stdout(cli.json, cli.quiet);
    let result = run(cli, &mut out).and_then(|()| Ok(out.flush()?));
    // Over PostgreSQL, what this process queued for the database (an event of a kill, a
    // failure recorded outside a step) is sent before it exits.
    crate::engine::storage::run_sink::flush_all(crate::engine::thread::run_files::SINK_FLUSH);
    // The thread index's log is folded in once it has grown (`index_db::at_exit`).
    crate::engine::storage::index_db::at_exit();
    crate::profile::mark("done");
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // A step stopped by a caught SIGINT/SIGTERM/SIGHUP failed because of it: the exit
        // status says so, as if the signal had ended the process.
        Err(err) => match crate::engine::agent::interrupt::caught() {
            Some(signal) => err.interrupted_by(signal).report(),
            None => err.report(),
        },
    }
}

fn run(cli: Cli, out: &mut Out) -> CliResult {
    let root = match cli.root {
        Some(root) => root,
        None => crate::cas::store::default_root()?,
    };
    // Over PostgreSQL (named in the environment) the store is the database; the root is only
    // this machine's cache and is made on first use.
    let remote = std::env::var_os(crate::engine::storage::URL_VAR).is_some_and(|u| !u.is_empty());
    if needs_a_store(&cli.command) && !root.exists() && !remote {
        return Err(error::user_error!("no uwf store at {}", root.display())
            .hint("give the storage root with --root DIR or UWF_STORAGE_ROOT=DIR")
            .hint("`uwf workflow put FILE` creates a store and registers a workflow"));
    }
    if cli.json
        && let Some((what, instead)) = text_only(&cli.command)
    {
        return Err(error::CommandError::usage(format!(
            "`--json` does not apply here: this command {what}"
        ))
        .hint(instead));
    }
    load_dotenv(&root);
    match cli.command {
        Command::Cas(cmd) => cas::run(cmd, &root, out),
        Command::Store(cmd) => scale::store::run(cmd, out),
        Command::Workflow(cmd) => workflow::run(cmd, &root, out),
        Command::Eval(args) => eval::run(args, &root, out),
        Command::Thread(cmd) => thread::run(cmd, &root, out),
        Command::Run(args) => thread::start_and_run(args, &root, out),
        Command::Agent(cmd) => agent::run(cmd, &root, out),
        Command::Knowledge(cmd) => knowledge::run(cmd, &root, out),
        Command::Mount(args) => mount::run_mount(args, &root, out),
        Command::Umount(args) => mount::run_umount(args, out),
        Command::Skill(args) => skill::skill(&args, out),
        Command::Completions(args) => skill::completions(&args, out),
        Command::Setup(args) => setup::setup(args, &root, out),
        Command::Doctor(args) => setup::doctor(args, &root, out),
        Command::Export(args) => export::run(args, &root, out),
        Command::Live(args) => live::run(args, &root, out),
        Command::Status(args) => {
            thread::status::run(args, &crate::engine::storage::open_store(&root)?, out)
        }
        Command::Worker(args) => scale::worker::run(args, &root, out),
        Command::Serve(args) => serve::run(args, &root, out),
        Command::Open(args) => serve::open::run(args, &root, out),
    }
}

/// The most bytes a command reads from stdin or an input file: `UWF_MAX_INPUT` → `maxInput`
/// in `<root>/config.yaml` → 16 MiB (see [`crate::engine::input`]).
pub(crate) fn input_limit(root: &std::path::Path) -> CliResult<u64> {
    let config = crate::engine::config::load(root)?;
    Ok(crate::engine::input::max_input(&config.config)?)
}

/// The commands whose output is text by nature, so that `--json` is refused rather than
/// silently ignored: what they print, and where the JSON is instead.
fn text_only(command: &Command) -> Option<(&'static str, &'static str)> {
    use agent::AgentCommand;
    use thread::ThreadCommand;
    Some(match command {
        Command::Live(_) | Command::Thread(ThreadCommand::Live(_)) => (
            "streams the thread's log as text",
            "`uwf thread log T --json` gives the log, `uwf thread show T --json` the status",
        ),
        Command::Thread(ThreadCommand::Diff { .. }) => (
            "prints a unified diff",
            "`uwf thread steps T --json` holds each step's output",
        ),
        Command::Agent(AgentCommand::Prompt { .. }) => (
            "prints the prompt an agent reads",
            "`uwf thread question T --json` gives what a thread asks as JSON",
        ),
        Command::Skill(_) => ("prints reference text", "leave out --json"),
        Command::Completions(_) => ("prints a shell script", "leave out --json"),
        _ => return None,
    })
}

/// Whether a command needs a store that already exists: the commands that only
/// read, and every thread and agent command (a thread needs a registered workflow, so a missing
/// store can only be a wrong root). They refuse a root that does not exist instead of creating
/// an empty one, which would make a typo in `--root` look like an empty store. `workflow put`,
/// `cas put`, `setup` and `mount` create it; `doctor` reports on it; the others do not use it.
fn needs_a_store(command: &Command) -> bool {
    match command {
        Command::Workflow(cmd) => cmd.only_reads(),
        Command::Cas(cmd) => cmd.needs_a_store(),
        Command::Thread(_)
        | Command::Run(_)
        | Command::Agent(_)
        | Command::Export(_)
        | Command::Live(_)
        | Command::Status(_)
        | Command::Serve(_)
        | Command::Open(_)
        | Command::Worker(_) => true,
        Command::Eval(_)
        | Command::Knowledge(_)
        | Command::Mount(_)
        | Command::Umount(_)
        | Command::Skill(_)
        | Command::Completions(_)
        | Command::Setup(_)
        | Command::Doctor(_)
        | Command::Store(_) => false,
    }
}

/// Loads `<root>/.env` into the environment, without overriding variables already set
/// (`docs/LLM.md#secrets-rootenv`). A broken file is reported and skipped, so that commands that
/// need no key still run; an unreadable one is skipped quietly (an unusable root is reported by the
/// command itself, and `uwf doctor` reports the file).
fn load_dotenv(root: &std::path::Path) {
    use crate::engine::config::dotenv::DotenvError;
    match crate::engine::config::dotenv::read(root) {
        Ok(pairs) => {
            for (key, value) in pairs {
                if std::env::var_os(&key).is_none() {
                    // SAFETY: this runs at start, before uwf starts any thread, so nothing
                    // reads the environment concurrently.
                    unsafe { std::env::set_var(&key, value) };
                }
            }
        }
        Err(DotenvError::Read { .. }) => {}
        Err(e) => {
            let text = e.to_string();
            eprintln!(
                "warning: {}; not loaded",
                text.lines().next().unwrap_or_default()
            );
        }
    }
}
