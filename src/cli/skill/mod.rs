//! `uwf skill` and `uwf completions`: reference text for agents, and shell completions.

use clap::{Args, ValueEnum};

use super::Out;
use crate::cli::error::CliResult;

/// Which reference to print.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(super) enum Topic {
    /// How to drive the uwf CLI
    Cli,
    /// How to author a workflow
    Author,
    /// How to write an agent
    Agent,
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  uwf skill author\n  uwf skill agent > AGENTS.md")]
pub(super) struct SkillArgs {
    #[arg(value_enum, default_value = "cli")]
    topic: Topic,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  echo 'source <(uwf completions bash)' >> ~/.bashrc\n  \
echo 'source <(uwf completions zsh)' >> ~/.zshrc\n  \
mkdir -p ~/.config/fish/completions && echo 'uwf completions fish | source' > ~/.config/fish/completions/uwf.fish"
)]
pub(super) struct CompletionsArgs {
    shell: clap_complete::Shell,
}

pub(super) fn skill(args: &SkillArgs, out: &mut Out) -> CliResult<()> {
    out.text(match args.topic {
        Topic::Cli => include_str!("cli.md"),
        Topic::Author => include_str!("author.md"),
        Topic::Agent => include_str!("agent.md"),
    })?;
    Ok(())
}

pub(super) fn completions(args: &CompletionsArgs, out: &mut Out) -> CliResult<()> {
    let mut script = Vec::new();
    crate::cli::terminal::complete::registration(&args.shell.to_string(), &mut script)?;
    out.text(&String::from_utf8_lossy(&script))?;
    Ok(())
}
