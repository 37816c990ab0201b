//! Coding-agent programs as built-in agents (`docs/LLM.md#claude-code-codex-and-opencode`): `uwf
//! agent claude` runs Claude Code, `uwf agent codex` runs Codex and `uwf agent opencode` runs
//! OpenCode, each non-interactive and quiet, in the thread's working directory, stdin from
//! `/dev/null` (OpenCode reads its prompt there). Their structured output gives the
//! answer, which goes through extraction like any agent's raw output, and the step's detail
//! records `tokens`, `sessionId` and `turns`.
//!
//! The program runs in this process's group, which the step made for its agent: a timeout or a
//! stop signal the step catches ends the program and whatever it started with it
//! (`src/engine/agent/spawn.rs`); should this process die first, the program gets SIGTERM too
//! (parent-death signal).

pub(crate) mod claude;
pub(crate) mod codex;
pub(crate) mod opencode;

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use serde_json::{Map, Value, json};

use crate::advice::Advice;
use crate::cas::{Hash, Store};
use crate::engine::agent::builtin::{BuiltinError, role_prompt};
use crate::engine::agent::submit::{self, Submission, SubmitError};
use crate::engine::config::Config;
use crate::engine::thread::view::ThreadView;

/// The longest prompt passed as an argument; a longer one is written to the program's stdin.
const ARG_PROMPT_MAX: usize = 100 << 10;
/// How much of the program's stderr is kept for messages and the detail node.
const STDERR_TAIL: usize = 4096;

/// Which program plays the role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Program {
    Claude,
    Codex,
    OpenCode,
}

impl Program {
    /// The agent's name in the step, and the default executable.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Program::Claude => "claude",
            Program::Codex => "codex",
            Program::OpenCode => "opencode",
        }
    }

    /// The command that installs it.
    pub(crate) fn install_command(self) -> &'static str {
        match self {
            Program::Claude => "npm install -g @anthropic-ai/claude-code",
            Program::Codex => "npm install -g @openai/codex",
            Program::OpenCode => "npm install -g opencode-ai",
        }
    }
}

/// What the caller chose for the program (`uwf agent claude|codex|opencode` flags).
#[derive(Debug, Clone, Default)]
pub(crate) struct Options {
    /// The model, passed through as the program's `--model`.
    pub model: Option<String>,
    /// The model API's root URL (Claude: `ANTHROPIC_BASE_URL`; Codex: a model provider of its
    /// own, speaking the Responses API; OpenCode: one speaking Chat Completions).
    pub base_url: Option<String>,
    /// The variable holding the API key (Claude: copied to `ANTHROPIC_API_KEY`; Codex: the
    /// provider's `env_key`).
    pub api_key_env: Option<String>,
    /// More arguments for the program, put before the prompt.
    pub extra: Vec<String>,
    /// The executable (default: the program's name, looked up on PATH).
    pub executable: Option<PathBuf>,
}

/// Errors of the agent programs.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProgramError {
    #[error(transparent)]
    Builtin(#[from] BuiltinError),
    #[error(transparent)]
    Submit(#[from] SubmitError),
    #[error("`{executable}` is not installed: it is not on PATH")]
    Missing {
        program: Program,
        executable: String,
    },
    #[error("cannot run `{executable}`: {source}")]
    Spawn {
        executable: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{} refuses to run as root: {message}", .program.name())]
    RootRefused { program: Program, message: String },
    #[error("{} is not logged in: {message}", .program.name())]
    Login { program: Program, message: String },
    #[error("{} does not trust the working directory: {message}", .program.name())]
    Untrusted { program: Program, message: String },
    #[error("{} needs --model with --base-url: the provider uwf defines there has no default model", .program.name())]
    NeedsModel { program: Program },
    #[error("{}'s model provider failed: {message}", .program.name())]
    Provider { program: Program, message: String },
    #[error(
        "{} exited with {status} and gave no answer{}",
        .program.name(),
        stderr_note(stderr_tail)
    )]
    NoAnswer {
        program: Program,
        status: String,
        stderr_tail: String,
    },
}

impl Advice for ProgramError {
    fn hints(&self) -> Vec<String> {
        match self {
            ProgramError::Builtin(e) => e.hints(),
            ProgramError::Submit(e) => e.hints(),
            ProgramError::Missing { program, .. } => vec![format!(
                "install it: `{}` (or give its path with --executable)",
                program.install_command()
            )],
            ProgramError::RootRefused { .. } => vec![
                "leave out --dangerously-skip-permissions / bypassPermissions (uwf's own flags need no root exception), or set IS_SANDBOX=1 in a throwaway container".into(),
            ],
            ProgramError::Login {
                program: Program::Claude,
                ..
            } => vec![
                "set ANTHROPIC_API_KEY (or --api-key-env VAR), or run `claude` once on a terminal and log in".into(),
            ],
            ProgramError::Login {
                program: Program::Codex,
                ..
            } => vec![
                "run `codex login`, or give a provider: --base-url URL --api-key-env VAR".into(),
            ],
            ProgramError::Login {
                program: Program::OpenCode,
                ..
            } => vec![
                "give a provider: --base-url URL --model M --api-key-env VAR, or run `opencode auth login`".into(),
            ],
            ProgramError::NeedsModel { .. } => vec![
                "add --model NAME: the model's name at that server (e.g. gpt-4o-mini)".into(),
            ],
            ProgramError::Untrusted { .. } => vec![
                "uwf passes --skip-git-repo-check to Codex; if the extra arguments override it, run the thread in a git repository".into(),
            ],
            ProgramError::Provider { .. } => vec![
                "check the base URL, key and model the program is given (`uwf doctor` checks uwf's own providers)".into(),
            ],
            ProgramError::NoAnswer { .. } => vec![
                "run the program by hand in the thread's working directory to see what it does".into(),
            ],
            ProgramError::Spawn { .. } => Vec::new(),
        }
    }
    fn is_busy(&self) -> bool {
        match self {
            ProgramError::Builtin(e) => e.is_busy(),
            ProgramError::Submit(e) => e.is_busy(),
            _ => false,
        }
    }
}

fn stderr_note(tail: &str) -> String {
    let tail = tail.trim_end();
    if tail.is_empty() {
        return String::new();
    }
    let lines: Vec<&str> = tail.lines().collect();
    format!(
        "\nits stderr ended with:\n  {}",
        lines[lines.len().saturating_sub(10)..].join("\n  ")
    )
}

/// Token counts of one step, as the detail node's `tokens` field holds them (one type for
/// every agent: the thread's totals and budgets add these up).
pub(crate) use crate::engine::thread::cost::Tokens;

/// What a program answered.
#[derive(Debug, Clone, Default)]
pub(crate) struct Answer {
    /// The final message: the role's raw output.
    pub text: String,
    pub tokens: Tokens,
    pub session_id: Option<String>,
    pub turns: Option<u64>,
    /// More detail fields the program's output gave.
    pub extra: Map<String, Value>,
}

/// What the program did: its stdout, stderr tail and exit status.
pub(crate) struct Ran {
    pub stdout: String,
    pub stderr_tail: String,
    pub status: std::process::ExitStatus,
}

impl Ran {
    fn status_text(&self) -> String {
        use std::os::unix::process::ExitStatusExt;
        match (self.status.code(), self.status.signal()) {
            (Some(code), _) => format!("exit code {code}"),
            (None, Some(sig)) => format!("signal {sig}"),
            _ => self.status.to_string(),
        }
    }
}

/// `uwf agent claude|codex|opencode`: plays `role` of `thread` with the program, in this process's
/// working directory (the thread's, when a step runs it). Returns the step hash.
pub(crate) fn run(
    store: &Store,
    config: &Config,
    program: Program,
    options: &Options,
    (thread, role): (&str, &str),
) -> Result<Hash, ProgramError> {
    let t = Instant::now();
    let view = ThreadView::load(store, thread).map_err(BuiltinError::from)?;
    let prompt = role_prompt(store, &view, thread, role)?;
    let executable = find_executable(program, options)?;
    let mut cmd = Command::new(&executable);
    // A prompt too long for one argument (the kernel's limit is 128 KiB) goes on stdin;
    // OpenCode's always does (an argument that starts with `-` would be taken for a flag).
    let on_stdin = prompt.len() > ARG_PROMPT_MAX || program == Program::OpenCode;
    let arg = (!on_stdin).then_some(prompt.as_str());
    match program {
        Program::Claude => claude::command(&mut cmd, options, arg),
        Program::Codex => codex::command(&mut cmd, options, arg),
        Program::OpenCode => opencode::command(&mut cmd, options)?,
    }
    let ran = run_command(cmd, &executable, on_stdin.then_some(prompt))?;
    let answer = match program {
        Program::Claude => claude::answer(&ran)?,
        Program::Codex => codex::answer(&ran, options)?,
        Program::OpenCode => opencode::answer(&ran, options)?,
    };
    let mut submission = Submission {
        agent: program.name().into(),
        raw: answer.text,
        exit_code: ran.status.code(),
        duration_ms: submit::step_duration_ms(Some(t), thread),
        stderr_tail: ran.stderr_tail,
        extra: answer.extra,
    };
    submission
        .extra
        .insert("tokens".into(), answer.tokens.to_json());
    submission.extra.insert(
        "sessionId".into(),
        answer.session_id.map(Value::from).unwrap_or(Value::Null),
    );
    submission.extra.insert(
        "turns".into(),
        answer.turns.map(Value::from).unwrap_or(Value::Null),
    );
    submission.extra.insert(
        "program".into(),
        json!({"name": program.name(), "executable": executable.display().to_string()}),
    );
    Ok(submit::submit_raw(store, &view, role, submission, config)?)
}

/// The program's executable: `--executable`, else its name looked up on PATH.
pub(crate) fn find_executable(
    program: Program,
    options: &Options,
) -> Result<PathBuf, ProgramError> {
    let wanted = options
        .executable
        .clone()
        .unwrap_or_else(|| PathBuf::from(program.name()));
    let missing = || ProgramError::Missing {
        program,
        executable: wanted.display().to_string(),
    };
    if wanted.components().count() > 1 {
        return if is_executable(&wanted) {
            Ok(wanted.clone())
        } else {
            Err(missing())
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(&wanted))
        .find(|p| is_executable(p))
        .ok_or_else(missing)
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Runs the program to its end: stdin from `/dev/null` (or `input`, then closed), stdout
/// collected, stderr passed through to ours (the step's log) with its tail kept.
fn run_command(
    mut cmd: Command,
    executable: &Path,
    input: Option<String>,
) -> Result<Ran, ProgramError> {
    cmd.env_remove(crate::engine::agent::spawn::DIE_WITH_ENV)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    crate::engine::agent::spawn::die_with_parent(&mut cmd);
    let mut child = cmd.spawn().map_err(|source| ProgramError::Spawn {
        executable: executable.display().to_string(),
        source,
    })?;
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        // Written from a thread of its own, so a program that answers before it reads all of
        // it cannot block us; dropping the pipe closes it.
        std::thread::spawn(move || {
            let _ = stdin.write_all(input.as_bytes());
        });
    }
    let stderr = child.stderr.take();
    let err_reader = std::thread::spawn(move || {
        let mut tail: VecDeque<u8> = VecDeque::new();
        let Some(mut stderr) = stderr else {
            return String::new();
        };
        let mut buf = [0u8; 8192];
        let mut ours = std::io::stderr();
        loop {
            let n = match stderr.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let _ = ours.write_all(&buf[..n]);
            tail.extend(&buf[..n]);
            let over = tail.len().saturating_sub(STDERR_TAIL);
            tail.drain(..over);
        }
        String::from_utf8_lossy(&tail.into_iter().collect::<Vec<_>>()).into_owned()
    });
    let mut stdout = String::new();
    if let Some(mut out) = child.stdout.take() {
        let mut bytes = Vec::new();
        let _ = out.read_to_end(&mut bytes);
        stdout = String::from_utf8_lossy(&bytes).into_owned();
    }
    let status = child.wait().map_err(|source| ProgramError::Spawn {
        executable: executable.display().to_string(),
        source,
    })?;
    let stderr_tail = err_reader.join().unwrap_or_default();
    Ok(Ran {
        stdout,
        stderr_tail,
        status,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_have_the_detail_shape() {
        let t = Tokens {
            input: 300,
            output: 40,
            cached: 100,
            model: Some("m".into()),
            cost_usd: Some(0.002),
        };
        assert_eq!(
            t.to_json(),
            json!({"input": 300, "output": 40, "cached": 100, "model": "m", "costUsd": 0.002})
        );
        assert_eq!(
            Tokens::default().to_json(),
            json!({"input": 0, "output": 0, "cached": 0})
        );
    }

    #[test]
    fn a_program_missing_from_path_names_its_install_command() {
        let options = Options {
            executable: Some("/nonexistent/claude".into()),
            ..Default::default()
        };
        let e = find_executable(Program::Claude, &options).unwrap_err();
        assert!(e.to_string().contains("not installed"), "{e}");
        assert!(
            e.hints()[0].contains("npm install -g @anthropic-ai/claude-code"),
            "{:?}",
            e.hints()
        );
    }
}
