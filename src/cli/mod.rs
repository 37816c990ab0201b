//! The command line: argument parsing, output, and turning errors into messages and exit codes.
//!
//! Only this layer prints. Exit codes: 0 ok, 1 error, 2 usage, 75 busy (a thread's step is held
//! by another process).

mod agent;
mod cas;
mod error;
mod eval;
mod export;
mod live;
mod mount;
mod output;
mod setup;
mod skill;
mod thread;
mod workflow;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub use output::Out;

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
uwf thread start solve-issue -p 'Fix the login bug'   # prints the thread id\n  \
uwf thread run <thread-id>                             # the dry agent by default (offline)\n  \
uwf mount --background ~/uwf && ls ~/uwf/threads\n  uwf skill author\n\n\
Storage root: --root, else $UWF_STORAGE_ROOT, else $WORKFLOW_STORAGE_ROOT, else ~/.uwf"
)]
pub struct Cli {
    /// Storage root (overrides $UWF_STORAGE_ROOT)
    #[arg(long, global = true, value_name = "DIR")]
    root: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start, step, run and inspect threads
    #[command(subcommand)]
    Thread(thread::ThreadCommand),
    /// The agent kit (prompt, submit) and the built-in agents (dry, script, exec, llm, react)
    #[command(subcommand)]
    Agent(agent::AgentCommand),
    /// Register, inspect, version and draw workflow definitions
    #[command(subcommand)]
    Workflow(workflow::WorkflowCommand),
    /// Evaluate a JSONata expression (as the moderator does)
    Eval(eval::EvalArgs),
    /// Inspect and maintain the content-addressed store
    #[command(subcommand)]
    Cas(cas::CasCommand),
    /// Serve the storage as files at DIR (FUSE)
    Mount(mount::MountArgs),
    /// Unmount a `uwf mount` (also after its process died)
    Umount(mount::UmountArgs),
    /// Print concise reference text for agents: cli, author, or agent
    Skill(skill::SkillArgs),
    /// Print shell completions (bash, zsh, fish, elvish, powershell)
    Completions(skill::CompletionsArgs),
    /// Write config.yaml and .env: a provider, its key, a default model and agent
    Setup(setup::SetupArgs),
    /// Check what a run needs: config, secrets, agents, providers, storage, FUSE
    Doctor(setup::DoctorArgs),
    /// Write the mount's tree (a thread, or --all) as plain files
    Export(export::ExportArgs),
    /// Watch a thread: its agents' output as it arrives, a line per step (= `uwf thread live`)
    Live(live::LiveArgs),
}

/// Runs the CLI and returns the process exit code.
pub fn main() -> ExitCode {
    crate::engine::agent::spawn::arm_parent_death();
    let cli = Cli::parse();
    let mut out = Out::stdout();
    let result = run(cli, &mut out).and_then(|()| Ok(out.flush()?));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => err.report(),
    }
}

fn run(cli: Cli, out: &mut Out) -> CliResult {
    let root = match cli.root {
        Some(root) => root,
        None => crate::cas::store::default_root()?,
    };
    load_dotenv(&root);
    match cli.command {
        Command::Cas(cmd) => cas::run(cmd, &root, out),
        Command::Workflow(cmd) => workflow::run(cmd, &root, out),
        Command::Eval(args) => eval::run(args, out),
        Command::Thread(cmd) => thread::run(cmd, &root, out),
        Command::Agent(cmd) => agent::run(cmd, &root, out),
        Command::Mount(args) => mount::run_mount(args, &root, out),
        Command::Umount(args) => mount::run_umount(args, out),
        Command::Skill(args) => skill::skill(&args, out),
        Command::Completions(args) => skill::completions(&args, out),
        Command::Setup(args) => setup::setup(args, &root, out),
        Command::Doctor(args) => setup::doctor(args, &root, out),
        Command::Export(args) => export::run(args, &root, out),
        Command::Live(args) => live::run(args, &root, out),
    }
}

/// Loads `<root>/.env` into the environment, without overriding variables already set (SPEC
/// §6.4). A broken file is reported and skipped, so that commands that need no key still run;
/// an unreadable one is skipped quietly (an unusable root is reported by the command itself, and
/// `uwf doctor` reports the file).
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
