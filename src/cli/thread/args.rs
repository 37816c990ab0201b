//! The command line of `uwf thread …`: its subcommands, their flags, help and examples (clap
//! derives them); what each does is in this folder's other files.

use clap::{Args, Subcommand};

use super::list::parse_since;
use super::rebase;

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub(crate) enum ThreadCommand {
    /// Start a thread of a workflow; prints {"workflow","thread"}
    #[command(
        after_help = "A prompt read from stdin (-p -) or --prompt-file is limited to 16 MiB \
(UWF_MAX_INPUT=64MiB or `maxInput: 64MiB` in config.yaml raise it).\n\n\
Its agents run in --workdir (default: this directory) whoever steps it, with the agents \
config.yaml names now (`uwf thread rebind` changes them later).\n\n\
Examples:\n  uwf thread start solve-issue -p 'Fix the login bug'\n  \
uwf thread start develop -p 'Add a --json flag' --workdir ~/src/app\n  \
echo 'Summarise RFC 9110' | uwf thread start analyze-topic -p -\n  uwf thread start develop --prompt-file task.md\n  \
UWF_MAX_INPUT=64MiB uwf thread start analyze-topic --prompt-file big-log.txt"
    )]
    Start(StartArgs),
    /// Run one moderator → agent → extract cycle; prints {"workflow","thread","head","role","done"}
    #[command(
        after_help = "Exit status 75 when another step holds the thread.\n\nExamples:\n  \
uwf thread step 01JD8X…\n  uwf thread step 01JD8X… --agent \"uwf agent script --file demo.yaml\""
    )]
    Step {
        /// Thread id (a unique prefix is enough)
        thread: String,
        /// The agent: a configured agent name or a command line
        #[arg(long)]
        agent: Option<String>,
        /// Who runs it (default: $UWF_BY, else your login name)
        #[arg(long, value_name = "NAME")]
        by: Option<String>,
    },
    /// Step until the thread is done (or --max-steps); prints one JSON line per step
    #[command(
        after_help = "Exits 0 when the thread is done (or already was), 3 when still \
active after --max-steps, 4 when waiting for a person, 5 when a step failed, 6 when killed.\n\n\
Example:\n  uwf thread run 01JD8X… --agent dry --max-steps 20"
    )]
    Run {
        /// Thread id (a unique prefix is enough)
        thread: String,
        /// Stop after this many steps even if the thread is not done
        #[arg(long, default_value_t = 100, value_name = "N")]
        max_steps: usize,
        /// The agent for every step: a configured agent name or a command line (default: the
        /// config's agentOverrides and defaultAgent)
        #[arg(long)]
        agent: Option<String>,
        /// Who runs it (default: $UWF_BY, else your login name)
        #[arg(long, value_name = "NAME")]
        by: Option<String>,
    },
    /// Show a thread: {"workflow","thread","head","done","status","next"}, and "error" when
    /// its last step failed
    #[command(after_help = "Example:\n  uwf thread show 01JD8X…")]
    Show {
        /// Thread id (a unique prefix is enough)
        thread: String,
    },
    /// List threads, newest first: a table on a terminal (the newest 50, and how many more),
    /// else one JSON object per line (all of them, streamed)
    #[command(
        after_help = "Examples:\n  uwf thread list\n  uwf thread list --all --workflow solve-issue --json\n  \
uwf thread list --status failed --since 2h\n  uwf thread list -q   # ids only\n  \
uwf thread list --all --search 'flaky test'   # prompt, id or workflow name holds it\n  \
uwf thread list --all --json --limit 1000 --before 01JD8X…   # the page after 01JD8X…"
    )]
    List {
        /// Include archived (done, killed and rebased) threads
        #[arg(long)]
        all: bool,
        /// Only threads of this workflow (name)
        #[arg(long)]
        workflow: Option<String>,
        /// Only threads in this status (done, killed and rebased look at archived threads)
        #[arg(long, value_parser = crate::engine::thread::listing::STATUSES)]
        status: Option<String>,
        /// Only threads started since WHEN: a duration ago (30m, 2h, 7days), a date
        /// (2026-11-27, midnight UTC) or a time (2026-11-27T09:00:00Z)
        #[arg(long, value_name = "WHEN", value_parser = parse_since)]
        since: Option<u64>,
        /// At most N threads (a terminal shows 50 unless this is given)
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        /// Only threads older than this one: give the last id of a page to get the next
        #[arg(long, value_name = "THREAD")]
        before: Option<String>,
        /// Only threads whose start prompt (its first 1,000 characters), id or workflow name
        /// holds TEXT, in any case (the dashboard's search)
        #[arg(long, value_name = "TEXT")]
        search: Option<String>,
        /// One line per thread, children (started by sub-workflows) indented under their parent
        #[arg(long)]
        tree: bool,
        /// Also list threads started by sub-workflows (left out by default: they are listed
        /// under their parent with --tree, and by `uwf thread show PARENT`)
        #[arg(long)]
        children: bool,
    },
    /// List a thread's steps: index, hash, role, agent, output summary
    #[command(
        after_help = "Examples:\n  uwf thread steps 01JD8X…\n  uwf thread steps 01JD8X… --json | jq .summary"
    )]
    Steps {
        /// Thread id (a unique prefix is enough)
        thread: String,
    },
    /// Print the thread as Markdown (for people and for agents' context)
    #[command(
        after_help = "--json prints one object: the thread, its task, each step's output and body, and \
the same Markdown.\n\nExamples:\n  uwf thread read 01JD8X…\n  uwf thread read 01JD8X… --quota 8000 --before 4X5K4AE2AA5F2\n  \
uwf thread read 01JD8X… --json | jq '.steps[-1].output'"
    )]
    Read {
        /// Thread id (a unique prefix is enough)
        thread: String,
        /// Keep the newest steps that fit in this many characters
        #[arg(long)]
        quota: Option<usize>,
        /// Only the steps before this step (a hash, a unique prefix, or THREAD:INDEX)
        #[arg(long, value_name = "STEP")]
        before: Option<String>,
    },
    /// Start a new thread from a step (or start node) of any thread
    #[command(
        after_help = "A step is named by its hash, a unique prefix of 4 or more symbols, \
or THREAD:INDEX (1-based; T:-1 is the head, T:0 the start).\n\n\
Examples:\n  uwf thread fork 4X5K4AE2AA5F2\n  uwf thread fork 01JD8X…:2"
    )]
    Fork {
        /// The step to continue from (hash, prefix, or THREAD:INDEX)
        #[arg(value_name = "STEP")]
        step: String,
        /// Who does it (default: $UWF_BY, else git's user.name, else your login name)
        #[arg(long, value_name = "NAME")]
        by: Option<String>,
    },
    /// Print a step's execution detail as YAML
    #[command(
        name = "step-details",
        after_help = "--json prints the detail as one JSON object, -q its hash.\n\n\
Example:\n  uwf thread step-details 4X5K4AE2AA5F2"
    )]
    StepDetails {
        /// The step (hash, prefix, or THREAD:INDEX)
        #[arg(value_name = "STEP")]
        step: String,
    },
    /// Unified diff of two steps' outputs and bodies
    #[command(
        after_help = "Examples:\n  uwf thread diff 01JD8X…:2 01JD8X…:4\n  uwf thread diff 4X5K4AE2AA5F2 2DHW2FP49YVD3 | less"
    )]
    Diff {
        /// The old step (hash, prefix, or THREAD:INDEX)
        #[arg(value_name = "STEP-A")]
        a: String,
        /// The new step
        #[arg(value_name = "STEP-B")]
        b: String,
    },
    /// Print the thread's log: every step's header and its agent's stdout and stderr
    #[command(
        after_help = "--json prints {\"thread\", \"log\"}.\n\nExamples:\n  uwf thread log 01JD8X…\n  uwf thread log 01JD8X… | less"
    )]
    Log {
        /// Thread id (a unique prefix is enough)
        thread: String,
    },
    /// Publish a step node written outside `uwf thread step` (by a hand-run agent)
    #[command(
        after_help = "Verifies the node as a step does (it continues the thread's head, \
its role is the one the moderator picks, its output fits the role's schema) and moves the head by \
compare-and-set.\n\nExample:\n  uwf thread publish $(./my-agent.sh $T writer)"
    )]
    Publish {
        /// The step node (hash, prefix)
        #[arg(value_name = "STEP")]
        step: String,
    },
    /// Make a thread runnable for `uwf worker` (until it is done, killed, failed or awaiting)
    #[command(
        after_help = "Examples:\n  uwf thread queue 01JD8X…\n  uwf thread queue 01JD8X… --off"
    )]
    Queue {
        /// Thread id (a unique prefix is enough)
        thread: String,
        /// Take it off the queue instead
        #[arg(long)]
        off: bool,
    },
    /// Let a running step finish, then take no more steps until `thread resume`
    #[command(
        after_help = "Steps, `touch step` in the mount, `thread run` and workers all stop at a \
paused thread (a step says so and exits 1).\n\nExample:\n  uwf thread pause 01JD8X…"
    )]
    Pause {
        /// Thread id (a unique prefix is enough)
        thread: String,
        /// Who does it (default: $UWF_BY, else git's user.name, else your login name)
        #[arg(long, value_name = "NAME")]
        by: Option<String>,
    },
    /// Show a thread's budget and what it spent, or raise it (`--max-tokens`, `--max-cost`)
    #[command(
        after_help = "Before each step the thread's spending (input plus output tokens, and \
dollars) is checked against its budget: config.yaml's `budgets` (default and per workflow), over \
which `thread start --max-tokens/--max-cost` and this command set the thread's own. A thread that \
reached it stops before its next step and waits for a person (status over-budget) until the \
budget is raised or the thread killed; once it is under its budget, this command lets it go on \
(a queued one is taken by a worker again).\n\n\
Examples:\n  uwf thread budget 01JD8X…\n  uwf thread budget 01JD8X… --max-cost 10"
    )]
    Budget {
        /// Thread id (a unique prefix is enough)
        thread: String,
        /// The new token limit (input plus output)
        #[arg(long, value_name = "N")]
        max_tokens: Option<u64>,
        /// The new limit in US dollars
        #[arg(long, value_name = "USD")]
        max_cost: Option<f64>,
        /// Who does it (default: $UWF_BY, else git's user.name, else your login name)
        #[arg(long, value_name = "NAME")]
        by: Option<String>,
    },
    /// Let a paused thread take steps again
    #[command(after_help = "Example:\n  uwf thread resume 01JD8X…")]
    Resume {
        /// Thread id (a unique prefix is enough)
        thread: String,
        /// Who does it (default: $UWF_BY, else git's user.name, else your login name)
        #[arg(long, value_name = "NAME")]
        by: Option<String>,
    },
    /// Bind a thread's roles to other agents (a thread keeps the agents it started with)
    #[command(
        after_help = "A thread keeps the agents config.yaml named when it started; editing the \
file changes the agents of threads started after the edit. Rebind changes a thread's on purpose: \
ROLE=AGENT pairs (a configured agent's name or a command line), or no pairs for every role as \
config.yaml names it now.\n\nExamples:\n  uwf thread rebind 01JD8X… coder=claude\n  \
uwf thread rebind 01JD8X… 'review=uwf agent script --file review.yaml'\n  \
uwf thread rebind 01JD8X…   # every role from config.yaml as it is now"
    )]
    Rebind {
        /// Thread id (a unique prefix is enough)
        thread: String,
        /// ROLE=AGENT pairs
        #[arg(value_name = "ROLE=AGENT")]
        bindings: Vec<String>,
        /// Who does it (default: $UWF_BY, else git's user.name, else your login name)
        #[arg(long, value_name = "NAME")]
        by: Option<String>,
    },
    /// Stop a running step's agent and archive the thread as killed
    #[command(after_help = "Example:\n  uwf thread kill 01JD8X…")]
    Kill {
        /// Thread id (a unique prefix is enough)
        thread: String,
        /// Who does it (default: $UWF_BY, else git's user.name, else your login name)
        #[arg(long, value_name = "NAME")]
        by: Option<String>,
    },
    /// Move a thread onto another version of its workflow (a fixed one): a new thread with the
    /// same steps, outputs re-validated; the old one is archived as rebased
    #[command(after_help = rebase::AFTER_HELP)]
    Rebase(rebase::RebaseArgs),
    /// Evaluate a JSONata expression against the thread's moderator context
    #[command(
        after_help = "Example:\n  uwf thread eval 01JD8X… '$count(steps[role=\"reviewer\"])'"
    )]
    Eval {
        /// Thread id (a unique prefix is enough)
        thread: String,
        /// A JSONata expression over {"start", "steps"}
        expression: String,
        /// Memory limit of the evaluation, e.g. 64MiB, 1GiB (default 256MiB, or
        /// $UWF_JSONATA_MAX_MEMORY)
        #[arg(long, value_name = "SIZE", value_parser = crate::cli::eval::parse_memory)]
        max_memory: Option<usize>,
    },
    /// Show which transition the moderator would take now, and how each condition evaluated
    #[command(
        after_help = "Exits 1 with the step's own error exactly when a step now would fail: a condition \
tried before the first match fails to evaluate, or no transition matches.\n\n\
Examples:\n  uwf thread why 01JD8X…\n  uwf thread why 01JD8X… || uwf thread show 01JD8X…"
    )]
    Why {
        /// Thread id (a unique prefix is enough)
        thread: String,
    },
    /// Watch a thread: its agents' output as it arrives, a line per step, until it ends
    Live(crate::cli::live::LiveArgs),
    /// Print what a person is asked when the thread awaits a human step
    #[command(after_help = "Example:\n  uwf thread question 01JD8X…")]
    Question {
        /// Thread id (a unique prefix is enough)
        thread: String,
    },
    /// Answer the question a thread awaits: extracted, verified and published like any step
    #[command(
        after_help = "The answer is read from -f FILE, or from stdin (`-`, -f -, or neither); at a terminal with \
neither, your editor ($VISUAL, $EDITOR, else vi) opens on a template of the fields to fill in. It must fit \
the role's schema: plain YAML fields, YAML frontmatter (--- … ---) or a JSON object. A refused answer leaves the thread awaiting. \
An answer is at most 16 MiB (UWF_MAX_INPUT=64MiB or `maxInput: 64MiB` in config.yaml raise it); a larger \
one is refused and nothing is stored.\n\n\
--by NAME is recorded as agent `human:NAME` (default: $UWF_BY, else git's user.name, else your \
login name): 1 to 64 printable characters on one line (no control characters such as newlines or \
ANSI escapes).\n\n\
Examples:\n  echo '{\"approved\": true}' | uwf thread answer 01JD8X… - --by alice\n  \
uwf thread answer 01JD8X… -f answer.md --by \"Alice Smith\""
    )]
    Answer {
        /// Thread id (a unique prefix is enough)
        thread: String,
        /// `-`: read the answer from stdin (the default)
        #[arg(value_name = "-", value_parser = stdin_dash, conflicts_with = "file")]
        stdin: Option<String>,
        /// Read the answer from FILE (`-`: stdin, the default)
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        file: Option<String>,
        /// Who answers, recorded as agent `human:NAME` (at most 64 printable characters;
        /// default: $UWF_BY, else git's user.name, else your login name)
        #[arg(long, value_name = "NAME")]
        by: Option<String>,
    },
}

/// The only positional source `thread answer` takes: `-`, stdin.
fn stdin_dash(text: &str) -> Result<String, String> {
    if text == "-" {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "`{text}` is not `-`: the answer comes from stdin (`-`) or from a file (`-f {text}`)"
        ))
    }
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("text").required(true).args(["prompt", "prompt_file"])))]
pub(crate) struct StartArgs {
    /// Workflow name or hash
    pub(super) workflow: String,
    /// The prompt, or `-` to read it from stdin
    #[arg(short, long, conflicts_with = "prompt_file")]
    pub(super) prompt: Option<String>,
    /// Read the prompt from a file
    #[arg(long, value_name = "FILE")]
    pub(super) prompt_file: Option<String>,
    /// Queue it for `uwf worker` at once (as `uwf thread queue` does)
    #[arg(long)]
    pub(super) queue: bool,
    /// Where the thread's agents run, whoever steps it (default: this directory)
    #[arg(long, value_name = "DIR")]
    pub(super) workdir: Option<std::path::PathBuf>,
    /// Who starts it (default: $UWF_BY, else git's user.name, else your login name)
    #[arg(long, value_name = "NAME")]
    pub(super) by: Option<String>,
    /// Stop before a step once the thread has spent this many tokens (over config.yaml's budgets)
    #[arg(long, value_name = "N")]
    pub(super) max_tokens: Option<u64>,
    /// Stop before a step once the thread has spent this many US dollars
    #[arg(long, value_name = "USD")]
    pub(super) max_cost: Option<f64>,
}
