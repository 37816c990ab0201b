//! `uwf agent …`: the agent kit (prompt, submit) and the built-in agents.

use std::path::{Path, PathBuf};

use clap::Subcommand;

use super::Out;
use crate::cas::Store;
use crate::cli::error::{CliResult, CommandError, Context, user_error};
use crate::engine::agent::builtin;
use crate::engine::agent::llm::{self, ReactOptions};
use crate::engine::agent::programs;
use crate::engine::agent::submit::{self, Submission};
use crate::engine::chain::Entry;
use crate::engine::config;
use crate::engine::cycle::lifecycle;
use crate::engine::cycle::subworkflow;
use crate::engine::input::{self, Source};
use crate::engine::thread::run_files::RunFiles;
use crate::engine::thread::view::ThreadView;

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub(super) enum AgentCommand {
    /// Print the full prompt for a role: output format, role, task and history
    #[command(after_help = "Example (a whole agent in one line):\n  \
uwf agent prompt \"$1\" \"$2\" | my-llm-cli | uwf agent submit \"$1\" \"$2\" --agent my-llm-cli")]
    Prompt {
        /// Thread id (a unique prefix is enough)
        thread: String,
        /// The role to play
        role: String,
        /// Keep the newest history that fits in this many characters
        #[arg(long)]
        quota: Option<usize>,
        /// Append the N passages of this repository's project knowledge that best match the
        /// thread's task (see `uwf knowledge`)
        #[arg(long, value_name = "N")]
        knowledge: Option<usize>,
    },
    /// Read raw agent output on stdin, extract it, write the step; prints the step hash
    #[command(
        after_help = "The output must start with YAML frontmatter (--- … ---) or be a JSON object \
(optionally in a ```json fence) valid for the role's schema. The role must be the one the \
moderator picks next (--force writes it anyway). Run by `uwf thread step`, the step publishes the \
node; run by hand, publish it with `uwf thread publish HASH`. The output (and --detail-json) \
is limited to 16 MiB (UWF_MAX_INPUT=64MiB or `maxInput: 64MiB` in config.yaml raise it); a larger \
one is refused and nothing is stored.\n\n\
Examples:\n  uwf agent prompt \"$1\" \"$2\" | my-llm-cli |\n    UWF_MAX_INPUT=64MiB uwf agent submit \"$1\" \"$2\" --agent my-llm-cli\n  printf -- '---\\napproved: true\\n---\\n' |\n    uwf agent submit \"$1\" \"$2\" --agent reviewer-bot"
    )]
    Submit {
        /// Thread id (a unique prefix is enough)
        thread: String,
        /// The role to play
        role: String,
        /// The agent's name, recorded in the step
        #[arg(long)]
        agent: String,
        /// A JSON object of extra detail fields (tool turns, model, tokens…)
        #[arg(long, value_name = "FILE")]
        detail_json: Option<PathBuf>,
        /// Write the step even if the moderator picks another role next
        #[arg(long)]
        force: bool,
    },
    /// Built-in: fabricate the smallest schema-valid output (offline routing trials)
    #[command(after_help = "Example:\n  uwf thread run 01JD8X… --agent dry")]
    Dry {
        /// Thread id (a unique prefix is enough)
        thread: String,
        /// The role to play
        role: String,
    },
    /// Built-in: replay canned outputs from a YAML file (role → list; n-th visit → n-th entry)
    #[command(after_help = "Script file:\n  planner:\n    - { plan: \"do it\" }\n  \
reviewer:\n    - \"---\\napproved: false\\n---\\nNot yet.\"\n    - { approved: true }\n\n\
Example:\n  uwf thread run 01JD8X… --agent \"uwf agent script --file demo.yaml\"")]
    Script {
        /// The YAML script
        #[arg(long)]
        file: PathBuf,
        /// Thread id (a unique prefix is enough)
        thread: String,
        /// The role to play
        role: String,
    },
    /// Built-in: run a command template; its stdout goes through extraction
    #[command(
        after_help = "Placeholders (shell-quoted): {prompt} {prompt_file} {task} {thread} {role} {workdir}\n\
({prompt} is the full role prompt; {task} only the thread's own prompt)\n\n\
Examples:\n  --agent \"uwf agent exec --cmd 'my-llm-cli -p {prompt}'\"\n  --agent \"uwf agent exec --cmd 'my-tool --input {prompt_file} --json'\""
    )]
    Exec {
        /// The command line to run, with placeholders (see below)
        #[arg(long)]
        cmd: String,
        /// Thread id (a unique prefix is enough)
        thread: String,
        /// The role to play
        role: String,
    },
    /// Built-in: Claude Code plays the role in the thread's working directory (edits files, answers)
    #[command(
        after_help = "Runs `claude -p --output-format json --permission-mode acceptEdits -- PROMPT` \
(stdin /dev/null, CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1). The result text goes through \
extraction; the step's detail records tokens, sessionId and turns. The key: ANTHROPIC_API_KEY \
(or --api-key-env VAR), or a `claude` login.\n\n\
Examples:\n  uwf thread step 01JD8X… --agent claude\n  \
uwf thread step 01JD8X… --agent \"uwf agent claude --model claude-sonnet-4-5 --arg=--max-turns --arg=30\""
    )]
    Claude {
        #[command(flatten)]
        program: ProgramArgs,
        /// Thread id (a unique prefix is enough)
        thread: String,
        /// The role to play
        role: String,
    },
    /// Built-in: Codex plays the role in the thread's working directory (edits files, answers)
    #[command(
        after_help = "Runs `codex exec --json --sandbox workspace-write --skip-git-repo-check \
-c check_for_update_on_startup=false -c analytics.enabled=false --disable plugins --disable \
remote_plugin --disable apps -- PROMPT` (stdin /dev/null). With --base-url, Codex gets a model \
provider `uwf` speaking the Responses API there, its key in --api-key-env (default \
OPENAI_API_KEY); without, its own login. The last agent_message goes through extraction; the \
step's detail records tokens, sessionId and turns.\n\n\
Examples:\n  uwf thread step 01JD8X… --agent codex\n  \
uwf thread step 01JD8X… --agent \"uwf agent codex --model gpt-5.5 --base-url http://127.0.0.1:8080/v1 --api-key-env MY_KEY\""
    )]
    Codex {
        #[command(flatten)]
        program: ProgramArgs,
        /// Thread id (a unique prefix is enough)
        thread: String,
        /// The role to play
        role: String,
    },
    /// Built-in: OpenCode plays the role in the thread's working directory (edits files, answers)
    #[command(
        after_help = "Runs `opencode run --format json --title uwf [-m M] ARGS…` with the prompt on stdin \
and OPENCODE_DISABLE_AUTOUPDATE, OPENCODE_DISABLE_MODELS_FETCH, OPENCODE_DISABLE_LSP_DOWNLOAD and \
OPENCODE_DISABLE_SHARE set. With --base-url (and --model), OpenCode gets a provider `uwf` speaking \
the OpenAI Chat Completions API there (@ai-sdk/openai-compatible), its key in --api-key-env \
(default OPENAI_API_KEY); without, --model is OpenCode's provider/model and its own login. The \
text of its last message goes through extraction; the step's detail records tokens, cost, \
sessionId and turns.\n\n\
Examples:\n  uwf thread step 01JD8X… --agent opencode\n  \
uwf thread step 01JD8X… --agent \"uwf agent opencode --model qwen2.5-coder --base-url http://127.0.0.1:8080/v1 --api-key-env MY_KEY\""
    )]
    Opencode {
        #[command(flatten)]
        program: ProgramArgs,
        /// Thread id (a unique prefix is enough)
        thread: String,
        /// The role to play
        role: String,
    },
    /// Built-in: one chat completion (system: format and role; user: task and history) → extract
    #[command(
        after_help = "The model: --model, else modelOverrides.llm, else defaultModel (config.yaml; see `uwf setup`).\n\n\
Example:\n  uwf thread step 01JD8X… --agent \"uwf agent llm --model gpt-4o-mini\""
    )]
    Llm {
        /// A model alias from config.yaml
        #[arg(long)]
        model: Option<String>,
        /// Thread id (a unique prefix is enough)
        thread: String,
        /// The role to play
        role: String,
    },
    /// Built-in: a tool-calling loop over the working directory, ended by `resolve`
    #[command(
        after_help = "Tools: read_file, write_file, edit_file, list_dir, grep (confined to the working directory), \
run_command (only with `react: {runCommand: true}` in config.yaml), and resolve, whose parameters are the role's \
output schema. Every turn is recorded in the step's detail (`uwf thread step-details`).\n\n\
The model: --model, else modelOverrides.react, else defaultModel.\n\n\
Example:\n  cd ~/src/project && uwf thread step 01JD8X… --agent \"uwf agent react --max-rounds 30\""
    )]
    React {
        /// A model alias from config.yaml
        #[arg(long)]
        model: Option<String>,
        /// Rounds before giving up (default: react.maxRounds, else 20)
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        max_rounds: Option<u32>,
        /// Thread id (a unique prefix is enough)
        thread: String,
        /// The role to play
        role: String,
    },
    /// Built-in: play the role with a whole workflow, as a child thread run to its end
    #[command(
        after_help = "The child thread's prompt is this role's prompt (task and history); its steps use \
the same agent resolution as any thread (agentOverrides, defaultAgent). The parent's output is the \
child's last output when it fits the role's schema, else what extraction finds in the child's \
transcript. Nesting deeper than maxDepth (config.yaml, default 4) is refused; killing the parent \
kills the child.\n\n\
Examples:\n  uwf thread step 01JD8X… --agent \"uwf agent workflow --name develop\"\n\n  \
# in config.yaml:\n  \
agents: { develop-flow: { command: uwf, args: [agent, workflow, --name, develop] } }\n  \
agentOverrides: { solve-issue: { developer: develop-flow } }"
    )]
    Workflow {
        /// The child's workflow (a registered name or a hash)
        #[arg(long)]
        name: String,
        /// The most steps the child may take
        #[arg(long, default_value_t = 100)]
        max_steps: usize,
        /// Thread id (a unique prefix is enough)
        thread: String,
        /// The role to play
        role: String,
    },
    /// Built-in: a person answers (no process runs; the thread waits for `uwf thread answer`)
    #[command(
        after_help = "Use it like any agent: `--agent human`, or `agentOverrides: { review: { approver: human } }`. Stepping records the question and exits 0 with \"awaiting\":true; `uwf thread question ID` shows it, `uwf thread answer ID` completes the step.\n\nExample:\n  uwf thread step 01JD8X… --agent human && uwf thread question 01JD8X…"
    )]
    Human { thread: String, role: String },
}

// The flags `uwf agent claude`, `uwf agent codex` and `uwf agent opencode` share (a plain comment: a doc comment
// would become their help's first line).
#[derive(Debug, clap::Args)]
pub(super) struct ProgramArgs {
    /// The model, passed to the program as is
    #[arg(long)]
    model: Option<String>,
    /// The model API's root URL (Claude: ANTHROPIC_BASE_URL; Codex: a Responses API provider;
    /// OpenCode: a Chat Completions provider)
    #[arg(long, value_name = "URL")]
    base_url: Option<String>,
    /// The variable holding the API key
    #[arg(long, value_name = "VAR")]
    api_key_env: Option<String>,
    /// One more argument for the program, before the prompt (repeatable: --arg=--max-turns --arg=5)
    #[arg(long = "arg", value_name = "ARG", allow_hyphen_values = true)]
    args: Vec<String>,
    /// The program's executable (default: looked up on PATH)
    #[arg(long, value_name = "PATH")]
    executable: Option<PathBuf>,
}

impl ProgramArgs {
    fn options(self) -> programs::Options {
        programs::Options {
            model: self.model,
            base_url: self.base_url,
            api_key_env: self.api_key_env,
            extra: self.args,
            executable: self.executable,
        }
    }
}

pub(super) fn run(cmd: AgentCommand, root: &Path, out: &mut Out) -> CliResult<()> {
    let store = crate::engine::storage::open_store(root)?;
    let thread_id = |t: &str| crate::engine::cycle::lifecycle::resolve_id(root, t);
    let config = || config::load(root).map(|l| l.config);
    // Claude Code, Codex or OpenCode playing `role` of thread `id`.
    let run_program = |which, program: ProgramArgs, thread: &str, role: &str, out: &mut Out| {
        let id = thread_id(thread)?;
        let hash = programs::run(&store, &config()?, which, &program.options(), (&id, role))?;
        wrote(out, &id, role, hash)?;
        note_unpublished(root, &id, hash);
        CliResult::Ok(())
    };
    match cmd {
        AgentCommand::Prompt {
            thread,
            role,
            quota,
            knowledge,
        } => {
            let id = thread_id(&thread)?;
            let view = ThreadView::load(&store, &id)?;
            let schema = store.get_payload(view.role_schema(&role)?)?;
            let body_of = |e: &Entry| crate::engine::thread::render::stored_body(&store, e.detail);
            let mut prompt = crate::engine::agent::prompt::agent_prompt(
                &id,
                &view.workflow,
                &role,
                &schema,
                &view.chain,
                quota,
                &body_of,
            )?;
            if let Some(n) = knowledge {
                let dir = std::env::current_dir().context("cannot read the working directory")?;
                prompt.push_str(&crate::engine::agent::knowledge_tool::prompt_section(
                    root,
                    &dir,
                    &view.chain.start.prompt,
                    n,
                    &config()?,
                )?);
            }
            out.text(&prompt)?;
        }
        AgentCommand::Submit {
            thread,
            role,
            agent,
            detail_json,
            force,
        } => {
            let id = thread_id(&thread)?;
            if !force {
                check_next_role(&store, &id, &role)?;
            }
            let limit = super::input_limit(root)?;
            let raw = input::read_text(Source::Stdin, limit)?;
            let extra = match detail_json {
                Some(path) => {
                    let text = input::read_text(Source::File(&path), limit)?;
                    submit::detail_from_json(&text)?
                }
                None => Default::default(),
            };
            let duration_ms = submit::step_duration_ms(None, &id);
            let view = ThreadView::load(&store, &id)?;
            let submission = Submission {
                agent,
                raw,
                exit_code: None,
                duration_ms,
                extra,
                ..Default::default()
            };
            let hash = submit::submit_raw(&store, &view, &role, submission, &config()?)?;
            wrote(out, &id, &role, hash)?;
            note_unpublished(root, &id, hash);
        }
        AgentCommand::Dry { thread, role } => {
            let id = thread_id(&thread)?;
            let hash = builtin::dry(&store, &id, &role)?;
            wrote(out, &id, &role, hash)?;
            note_unpublished(root, &id, hash);
        }
        AgentCommand::Script { file, thread, role } => {
            let id = thread_id(&thread)?;
            let hash = builtin::script(&store, &config()?, &file, &id, &role)?;
            wrote(out, &id, &role, hash)?;
            note_unpublished(root, &id, hash);
        }
        AgentCommand::Exec { cmd, thread, role } => {
            let id = thread_id(&thread)?;
            let hash = match builtin::exec(&store, &config()?, &cmd, &id, &role) {
                Ok(hash) => hash,
                Err(e @ builtin::BuiltinError::Stopped { signal, .. }) => {
                    return Err(CommandError::from(e).interrupted_by(signal));
                }
                Err(e) => return Err(e.into()),
            };
            wrote(out, &id, &role, hash)?;
            note_unpublished(root, &id, hash);
        }
        AgentCommand::Claude {
            program,
            thread,
            role,
        } => run_program(programs::Program::Claude, program, &thread, &role, out)?,
        AgentCommand::Codex {
            program,
            thread,
            role,
        } => run_program(programs::Program::Codex, program, &thread, &role, out)?,
        AgentCommand::Opencode {
            program,
            thread,
            role,
        } => run_program(programs::Program::OpenCode, program, &thread, &role, out)?,
        AgentCommand::Llm {
            model,
            thread,
            role,
        } => {
            let id = thread_id(&thread)?;
            let hash = llm::llm(&store, &config()?, &id, &role, model.as_deref())?;
            wrote(out, &id, &role, hash)?;
            note_unpublished(root, &id, hash);
        }
        AgentCommand::React {
            model,
            max_rounds,
            thread,
            role,
        } => {
            let workdir = std::env::current_dir().context("cannot read the working directory")?;
            let options = ReactOptions {
                model: model.as_deref(),
                max_rounds: max_rounds.map(|n| n as usize),
            };
            let id = thread_id(&thread)?;
            let hash = llm::react(&store, &config()?, &id, &role, &workdir, &options)?;
            wrote(out, &id, &role, hash)?;
            note_unpublished(root, &id, hash);
        }
        AgentCommand::Workflow {
            name,
            max_steps,
            thread,
            role,
        } => {
            let id = thread_id(&thread)?;
            // Stopped by its step (or that step's death): stop the child's step and end it.
            crate::engine::agent::interrupt::catch_stop_signals()
                .context("cannot catch stop signals")?;
            let job = subworkflow::Delegation {
                thread: &id,
                role: &role,
                workflow: &name,
                max_steps,
            };
            let hash = subworkflow::run(&store, &config::load(root)?, &job)?;
            wrote(out, &id, &role, hash)?;
        }
        AgentCommand::Human { thread, role } => {
            return Err(user_error!(
                "the human agent is not a program: a person answers role `{role}` of thread {thread}"
            )
            .hint(format!(
                "`uwf thread step {thread} --agent human` records the question; `uwf thread answer {thread}` answers it"
            )));
        }
    }
    Ok(())
}

/// Refuses to write a step for a role the moderator would not pick next: such a node could
/// never be published.
fn check_next_role(store: &Store, id: &str, role: &str) -> CliResult<()> {
    let summary = lifecycle::summary(store, id)?;
    match summary.next.as_deref() {
        Some(next) if next == role => Ok(()),
        Some(crate::engine::workflow::END) => Err(user_error!(
            "thread {id} is at `$END`: no role runs next, so `{role}` cannot"
        )
        .hint("--force writes the step anyway")),
        Some(next) => Err(user_error!(
            "role `{role}` is not next on thread {id}: the moderator picks `{next}`"
        )
        .hint(format!("submit as `{next}`, or --force to write it anyway"))),
        None => Ok(()),
    }
}

/// Says on stderr that a step node written outside `uwf thread step` did not move the head,
/// and how to publish it. Inside a step (the agent that the step spawned) there is nothing to
/// say: the step publishes what its agent prints.
fn note_unpublished(root: &Path, id: &str, hash: crate::cas::Hash) {
    let inside_step =
        std::env::var("UWF_THREAD").is_ok_and(|t| t == id) && RunFiles::new(root, id).is_running();
    if !inside_step {
        eprintln!(
            "uwf: step {hash} is written but not published: the head of thread {id} did not move.\n\
             uwf: publish it with `uwf thread publish {hash}`, or let a step run the agent: \
             `uwf thread step {id} --agent CMD`"
        );
    }
}

/// What an agent prints: the hash of the step it wrote (what `thread step` reads), or with
/// `--json` the step with its thread and role.
fn wrote(out: &mut Out, thread: &str, role: &str, step: crate::cas::Hash) -> std::io::Result<()> {
    if out.json_asked {
        out.line(serde_json::json!({"thread": thread, "role": role, "step": step}))
    } else {
        out.line(step)
    }
}
