//! `uwf agent …`: the agent kit (prompt, submit) and the built-in agents.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Subcommand;

use super::Out;
use crate::cas::Store;
use crate::engine::builtin_agents;
use crate::engine::chain::Entry;
use crate::engine::render;
use crate::engine::submit::{self, Submission, ThreadView};

#[derive(Debug, Subcommand)]
pub enum AgentCommand {
    /// Print the full prompt for a role: output format, role, task and history
    #[command(after_help = "Example (a whole agent in one line):\n  \
uwf agent prompt \"$1\" \"$2\" | my-llm-cli | uwf agent submit \"$1\" \"$2\" --agent my-llm-cli")]
    Prompt {
        thread: String,
        role: String,
        /// Keep the newest history that fits in this many characters
        #[arg(long)]
        quota: Option<usize>,
    },
    /// Read raw agent output on stdin, extract it, write the step; prints the step hash
    #[command(
        after_help = "The output must start with YAML frontmatter (--- … ---) or be a JSON object \
(optionally in a ```json fence) valid for the role's schema.\n\n\
Example:\n  printf -- '---\\napproved: true\\n---\\nLooks good.\\n' | uwf agent submit \"$1\" \"$2\" --agent reviewer-bot"
    )]
    Submit {
        thread: String,
        role: String,
        /// The agent's name, recorded in the step
        #[arg(long)]
        agent: String,
        /// A JSON object of extra detail fields (tool turns, model, tokens…)
        #[arg(long, value_name = "FILE")]
        detail_json: Option<PathBuf>,
    },
    /// Built-in: fabricate the smallest schema-valid output (offline routing trials)
    #[command(after_help = "Example:\n  uwf thread run 01JD8X… --agent dry")]
    Dry { thread: String, role: String },
    /// Built-in: replay canned outputs from a YAML file (role → list; n-th visit → n-th entry)
    #[command(after_help = "Script file:\n  planner:\n    - { plan: \"do it\" }\n  \
reviewer:\n    - \"---\\napproved: false\\n---\\nNot yet.\"\n    - { approved: true }\n\n\
Example:\n  uwf thread run 01JD8X… --agent \"uwf agent script --file demo.yaml\"")]
    Script {
        /// The YAML script
        #[arg(long)]
        file: PathBuf,
        thread: String,
        role: String,
    },
    /// Built-in: run a command template; its stdout goes through extraction
    #[command(
        after_help = "Placeholders (shell-quoted): {prompt} {prompt_file} {thread} {role} {workdir}\n\n\
Examples:\n  --agent \"uwf agent exec --cmd 'claude -p {prompt}'\"\n  --agent \"uwf agent exec --cmd 'my-tool --input {prompt_file} --json'\""
    )]
    Exec {
        #[arg(long)]
        cmd: String,
        thread: String,
        role: String,
    },
}

pub fn run(cmd: AgentCommand, root: &Path, out: &mut Out) -> anyhow::Result<()> {
    let store = Store::open(root)?;
    let thread_id = |t: &str| crate::engine::thread::resolve_id(root, t);
    match cmd {
        AgentCommand::Prompt {
            thread,
            role,
            quota,
        } => {
            let id = thread_id(&thread)?;
            let view = ThreadView::load(&store, &id)?;
            let schema = store.get_payload(view.role_schema(&role)?)?;
            let body_of = |e: &Entry| ThreadView::body_of(&store, e.detail);
            out.text(&render::agent_prompt(
                &id,
                &view.workflow,
                &role,
                &schema,
                &view.chain,
                quota,
                &body_of,
            ))?;
        }
        AgentCommand::Submit {
            thread,
            role,
            agent,
            detail_json,
        } => {
            let id = thread_id(&thread)?;
            let mut raw = String::new();
            std::io::stdin()
                .read_to_string(&mut raw)
                .context("cannot read the agent's output from stdin")?;
            let extra = match detail_json {
                Some(path) => {
                    let text = std::fs::read_to_string(&path)
                        .with_context(|| format!("cannot read {}", path.display()))?;
                    submit::detail_from_json(&text)?
                }
                None => Default::default(),
            };
            let duration_ms = std::env::var("UWF_STEP_STARTED_MS")
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .map(|start| crate::cas::store::now_ms().saturating_sub(start))
                .unwrap_or(0);
            let view = ThreadView::load(&store, &id)?;
            let submission = Submission {
                agent,
                raw,
                exit_code: None,
                duration_ms,
                extra,
                ..Default::default()
            };
            out.line(submit::submit_raw(&store, &view, &role, submission)?)?;
        }
        AgentCommand::Dry { thread, role } => {
            out.line(builtin_agents::dry(&store, &thread_id(&thread)?, &role)?)?;
        }
        AgentCommand::Script { file, thread, role } => {
            out.line(builtin_agents::script(
                &store,
                &file,
                &thread_id(&thread)?,
                &role,
            )?)?;
        }
        AgentCommand::Exec { cmd, thread, role } => {
            out.line(builtin_agents::exec(
                &store,
                &cmd,
                &thread_id(&thread)?,
                &role,
            )?)?;
        }
    }
    Ok(())
}
