//! Running an agent process: `<program> <args…> <thread-id> <role>`
//! (`docs/agents.md#what-an-agent-is`).
//!
//! The agent runs in its own process group in the caller's working directory, with the
//! caller's environment plus `UWF_*` variables and an empty stdin. Its stderr is passed through
//! to ours, appended to the thread's log file, and its tail kept for error messages; its stdout
//! is collected. On timeout the whole process group is terminated (SIGTERM, then SIGKILL).
//!
//! Architecture Invariant: no process an agent started outlives its step. When the agent exits,
//! what is left of its process group is killed before the agent is reaped (so the group id
//! cannot have been reused). A stop signal the step catches ([`interrupt`]) stops the group as
//! a timeout does. When the step process itself dies (`kill -9`), the kernel sends the agent
//! SIGTERM (`PR_SET_PDEATHSIG`), but not the agent's children: the process's [`watchdog`] stops
//! the whole group. Should even that fail (no fork), the step recorded the group and the
//! agent's start time in the run file, and whoever takes the thread's lock next kills the
//! leftover group ([`kill_leftover_group`]) after checking it is that agent's.

use crate::advice::Advice;
use crate::process_group::signal_group;
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::engine::agent::interrupt;
use crate::engine::agent::resolve::AgentSpec;
use crate::engine::agent::watchdog;
use crate::engine::thread::log::StepLog;

/// How much of the agent's stderr is kept for messages and the detail node.
const STDERR_TAIL: usize = 4096;
/// How much of the end of an agent's stdout is kept: its last non-empty line must be the step
/// hash, so a few lines are plenty, and an agent printing 100 MB costs no memory.
const STDOUT_TAIL: usize = 64 << 10;
/// Time between SIGTERM and SIGKILL when stopping a process group.
pub(crate) const KILL_GRACE: Duration = Duration::from_secs(3);
/// How often a step waiting for its agent looks for a caught stop signal.
const SIGNAL_POLL: Duration = Duration::from_millis(20);

/// Errors starting or running an agent.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("agent `{name}`: cannot run `{program}`: {source}")]
    Spawn {
        name: String,
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("agent `{name}` timed out after {}s and was stopped{}", timeout.as_secs(), tail_note(stderr_tail))]
    Timeout {
        name: String,
        timeout: Duration,
        stderr_tail: String,
    },
    #[error(
        "agent `{name}` was stopped: the step was interrupted by {}{}",
        interrupt::name(*signal),
        tail_note(stderr_tail)
    )]
    Interrupted {
        name: String,
        signal: i32,
        stderr_tail: String,
    },
    #[error("agent `{name}` exited with {status}{}", tail_note(stderr_tail))]
    Failed {
        name: String,
        status: String,
        stderr_tail: String,
    },
    #[error("agent `{name}`: its env names the secret `{secret}`, which is not set")]
    MissingSecret { name: String, secret: String },
    #[error("agent `{name}`: cannot run in the thread's working directory {}: {source}", dir.display())]
    Workdir {
        name: String,
        dir: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "agent `{name}` printed no step hash on its last non-empty stdout line (got: {got}){}",
        tail_note(stderr_tail)
    )]
    NoHash {
        name: String,
        got: String,
        stderr_tail: String,
    },
}

impl Advice for AgentError {
    fn hints(&self) -> Vec<String> {
        match self {
            AgentError::Spawn { .. } => {
                vec!["check the command, or configure the agent in config.yaml".to_owned()]
            }
            AgentError::MissingSecret { secret, .. } => vec![format!(
                "set it in the store's .env (`uwf setup` writes it) or in the environment: {secret}=…"
            )],
            AgentError::Workdir { .. } => vec![
                "create the directory, or start the thread elsewhere (`uwf thread start --workdir DIR`)".to_owned(),
            ],
            _ => Vec::new(),
        }
    }
}

impl AgentError {
    /// The same error without the stderr tail (for a caller that showed that stderr already).
    pub(crate) fn without_stderr_tail(mut self) -> AgentError {
        match &mut self {
            AgentError::Timeout { stderr_tail, .. }
            | AgentError::Interrupted { stderr_tail, .. }
            | AgentError::Failed { stderr_tail, .. }
            | AgentError::NoHash { stderr_tail, .. } => stderr_tail.clear(),
            AgentError::Spawn { .. }
            | AgentError::MissingSecret { .. }
            | AgentError::Workdir { .. } => {}
        }
        self
    }
}

fn tail_note(tail: &str) -> String {
    let tail = tail.trim_end();
    if tail.is_empty() {
        String::new()
    } else {
        let lines: Vec<&str> = tail.lines().collect();
        let start = lines.len().saturating_sub(10);
        format!(
            "\nits stderr ended with:\n  {}",
            lines[start..].join("\n  ")
        )
    }
}

/// What the agent did.
#[derive(Debug)]
pub(crate) struct Finished {
    pub stdout: String,
    pub stderr_tail: String,
}

/// Everything needed to run one agent for one step.
pub(crate) struct Invocation<'a> {
    pub spec: &'a AgentSpec,
    pub thread: &'a str,
    pub role: &'a str,
    pub env: Vec<(String, String)>,
    /// Append the agent's stdout and stderr here, as they arrive (the thread log).
    pub log: Option<Arc<StepLog>>,
    /// Pass the agent's stderr through to ours.
    pub passthrough: bool,
    /// Where the agent runs (the thread's working directory); `None`: where this process runs.
    pub workdir: Option<&'a std::path::Path>,
}

/// The program to run: `uwf` means this very binary (so built-in agents need no PATH entry).
pub(crate) fn program_path(program: &str) -> PathBuf {
    if program == "uwf"
        && let Some(exe) = own_exe()
    {
        return exe.to_path_buf();
    }
    PathBuf::from(program)
}

/// The running executable's path, looked up once per process (`/proc/self/exe`; a step asks
/// while it resolves its agent and again when it spawns one).
pub(crate) fn own_exe() -> Option<&'static std::path::Path> {
    static EXE: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    EXE.get_or_init(|| std::env::current_exe().ok()).as_deref()
}

/// Runs the agent to completion. `on_spawn` receives its pid (= process group id).
///
/// A stop signal caught before the spawn starts nothing; one caught while the agent runs stops
/// its group (SIGTERM, then SIGKILL after [`KILL_GRACE`]), and the step fails as interrupted.
pub(crate) fn run(
    inv: &Invocation<'_>,
    on_spawn: impl FnOnce(u32),
) -> Result<Finished, AgentError> {
    let started = Instant::now();
    let interrupted = |signal, stderr_tail| AgentError::Interrupted {
        name: inv.spec.name.clone(),
        signal,
        stderr_tail,
    };
    if let Some(signal) = interrupt::caught() {
        return Err(interrupted(signal, String::new()));
    }
    let secrets = crate::engine::agent::resolve::expand_env(&inv.spec.env).map_err(|secret| {
        AgentError::MissingSecret {
            name: inv.spec.name.clone(),
            secret,
        }
    })?;
    let mut cmd = Command::new(program_path(&inv.spec.program));
    if let Some(dir) = inv.workdir {
        // Checked here, so a missing directory is named as one (a spawn would only say
        // "No such file or directory", as if the program were missing).
        std::fs::read_dir(dir).map_err(|source| AgentError::Workdir {
            name: inv.spec.name.clone(),
            dir: dir.to_path_buf(),
            source,
        })?;
        cmd.current_dir(dir);
    }
    cmd.envs(secrets)
        .args(&inv.spec.args)
        .arg(inv.thread)
        .arg(inv.role)
        .envs(inv.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    if is_own_binary(cmd.get_program()) {
        // A `uwf` agent arms the parent-death signal itself (see `arm_parent_death`), which
        // lets the spawn skip the pre-exec hook: with one, std must fork instead of
        // posix_spawn, which cost ~0.4 ms per step here.
        cmd.env(DIE_WITH_ENV, std::process::id().to_string());
    } else {
        cmd.env_remove(DIE_WITH_ENV);
        die_with_parent(&mut cmd);
    }
    // Forked before the first agent exists, so it is there before the agent runs anything.
    let watchdog = watchdog::shared();
    let mut child = cmd.spawn().map_err(|source| AgentError::Spawn {
        name: inv.spec.name.clone(),
        program: inv.spec.program.clone(),
        source,
    })?;
    let pid = child.id();
    // Told first: from here a `kill -9` of this process stops the agent's whole group.
    let watched = watchdog.and_then(|w| w.watch(pid));
    on_spawn(pid);

    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take().expect("stderr is piped");
    let log = inv.log.clone();
    let out_reader = Reader::spawn(move || tee(stdout, log.as_deref(), None, STDOUT_TAIL));
    let log = inv.log.clone();
    let passthrough = inv.passthrough.then(std::io::stderr);
    let err_reader = Reader::spawn(move || tee(stderr, log.as_deref(), passthrough, STDERR_TAIL));

    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        // Wait for the agent's exit without reaping it: while it is a zombie its pid, the group
        // id, cannot be reused, so killing what is left of the group hits only the agent's own
        // children (a `cmd &` it left running).
        let _ = nix::sys::wait::waitid(
            nix::sys::wait::Id::Pid(nix::unistd::Pid::from_raw(pid as i32)),
            nix::sys::wait::WaitPidFlag::WEXITED | nix::sys::wait::WaitPidFlag::WNOWAIT,
        );
        signal_group(pid, nix::sys::signal::Signal::SIGKILL);
        // The group is done before its id can be reused: the watchdog lets it go first.
        drop(watched);
        let status = child.wait();
        let _ = tx.send(());
        status
    });
    let stopped = wait_or_stop(&rx, started.checked_add(inv.spec.timeout));
    if stopped.is_some() {
        // SIGTERM, and SIGKILL if the agent is still there after the grace. Once the agent
        // exits, the waiter kills the rest of its group; their zombies may wait a while for
        // init, so whether the group "exists" says nothing here.
        signal_group(pid, nix::sys::signal::Signal::SIGTERM);
        if rx.recv_timeout(KILL_GRACE).is_err() {
            signal_group(pid, nix::sys::signal::Signal::SIGKILL);
        }
    }
    let status = waiter.join().ok().and_then(|s| s.ok());
    // Grandchildren may still hold the pipes open; do not wait for them forever.
    let stdout = out_reader.finish(pid);
    let stderr_tail = err_reader.finish(pid);
    match stopped {
        Some(Stop::Timeout) => {
            return Err(AgentError::Timeout {
                name: inv.spec.name.clone(),
                timeout: inv.spec.timeout,
                stderr_tail,
            });
        }
        Some(Stop::Signal(signal)) => return Err(interrupted(signal, stderr_tail)),
        None => {}
    }
    match status {
        Some(s) if s.success() => Ok(Finished {
            stdout,
            stderr_tail,
        }),
        other => Err(AgentError::Failed {
            name: inv.spec.name.clone(),
            status: other
                .map(describe_status)
                .unwrap_or_else(|| "an unknown status".into()),
            stderr_tail,
        }),
    }
}

/// Why a step stopped its agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Timeout,
    Signal(i32),
}

/// Waits for the agent's waiter to report (`done`), until `deadline` (none: no timeout) or a
/// caught stop signal, whichever comes first.
fn wait_or_stop(done: &mpsc::Receiver<()>, deadline: Option<Instant>) -> Option<Stop> {
    loop {
        let slice = match deadline {
            Some(deadline) => deadline
                .saturating_duration_since(Instant::now())
                .min(SIGNAL_POLL),
            None => SIGNAL_POLL,
        };
        match done.recv_timeout(slice) {
            Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => return None,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if let Some(signal) = interrupt::caught() {
                    return Some(Stop::Signal(signal));
                }
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Some(Stop::Timeout);
                }
            }
        }
    }
}

fn describe_status(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(sig)) => format!("signal {sig}"),
        _ => status.to_string(),
    }
}

/// The last non-empty line of an agent's stdout, which must be a step hash.
pub(crate) fn last_line(stdout: &str) -> Option<&str> {
    stdout.lines().rev().map(str::trim).find(|l| !l.is_empty())
}

/// A thread draining one of the agent's pipes.
struct Reader {
    done: mpsc::Receiver<String>,
}

impl Reader {
    fn spawn(read: impl FnOnce() -> String + Send + 'static) -> Reader {
        let (tx, done) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(read());
        });
        Reader { done }
    }

    /// The text read, once the pipe closes. Grandchildren may hold the pipe open after the agent
    /// exits; after two seconds the whole group is killed so the pipe closes.
    fn finish(self, pgid: u32) -> String {
        match self.done.recv_timeout(Duration::from_secs(2)) {
            Ok(text) => text,
            Err(_) => {
                signal_group(pgid, nix::sys::signal::Signal::SIGKILL);
                self.done
                    .recv_timeout(Duration::from_secs(2))
                    .unwrap_or_default()
            }
        }
    }
}

/// Drains one of the agent's pipes to its end (so the agent never blocks on a full pipe):
/// each chunk goes to the thread log and to `passthrough` as it arrives, and the last `keep`
/// bytes are returned.
fn tee(
    mut r: impl Read,
    log: Option<&StepLog>,
    mut passthrough: Option<std::io::Stderr>,
    keep: usize,
) -> String {
    let mut tail: VecDeque<u8> = VecDeque::with_capacity(keep.min(64 << 10));
    let mut buf = [0u8; 8192];
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        if let Some(out) = passthrough.as_mut() {
            let _ = out.write_all(chunk);
        }
        if let Some(log) = log {
            log.write(chunk);
        }
        let drop = (tail.len() + chunk.len()).saturating_sub(keep);
        tail.drain(..drop.min(tail.len()));
        tail.extend(&chunk[chunk.len().saturating_sub(keep)..]);
    }
    String::from_utf8_lossy(&tail.into_iter().collect::<Vec<_>>()).into_owned()
}

/// Set by a step for an agent that is `uwf` itself: the step's pid, for [`arm_parent_death`].
pub(crate) const DIE_WITH_ENV: &str = "UWF_DIE_WITH_PARENT";

/// Whether `program` is the running executable (same file), so it understands [`DIE_WITH_ENV`].
pub(crate) fn is_own_binary(program: &std::ffi::OsStr) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Some(exe) = own_exe() else {
        return false;
    };
    match (std::fs::metadata(program), std::fs::metadata(exe)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Called first thing by every `uwf` process. When a step started this process as its agent
/// ([`DIE_WITH_ENV`] names the step's pid, our parent), asks the kernel for SIGTERM when that
/// parent dies: what [`die_with_parent`] does for other programs, without a pre-exec hook. If
/// the step is already gone, exits at once. A `uwf` further down (the variable inherited through
/// a program the agent ran) leaves its own parent-death setting alone, but still does not
/// start work for a step that has died.
pub(crate) fn arm_parent_death() {
    let Some(step) = std::env::var_os(DIE_WITH_ENV)
        .and_then(|v| v.to_str().and_then(|s| s.parse::<i32>().ok()))
        .filter(|pid| *pid > 1)
    else {
        return;
    };
    const TERMINATED: i32 = 128 + libc::SIGTERM;
    let parent = || std::os::unix::process::parent_id() as i32;
    if parent() != step {
        let step_alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(step), None).is_ok();
        if !step_alive {
            std::process::exit(TERMINATED);
        }
        return;
    }
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM);
    // The step may have died between our spawn and the line above.
    if parent() != step {
        std::process::exit(TERMINATED);
    }
}

/// Asks the kernel to SIGTERM the agent if the step process dies (e.g. `kill -9`), so no orphan
/// agent keeps working on a thread whose step is gone.
pub(crate) fn die_with_parent(cmd: &mut Command) {
    // SAFETY: the closure runs in the forked child before exec and only calls prctl, which is
    // async-signal-safe; it touches no memory shared with the parent.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process_group::{kill_leftover_group, proc_stat};

    #[test]
    fn a_leftover_group_is_killed_only_when_its_start_time_matches() {
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut child = cmd.spawn().unwrap();
        let pid = child.id();
        let stat = proc_stat(pid).expect("a running process has a stat");
        assert_eq!(stat.pgrp, pid, "its own group");
        // Another start time: the pid was reused by someone else's process; leave it.
        assert_eq!(kill_leftover_group(pid, stat.start + 1), 0);
        assert!(proc_stat(pid).is_some_and(|p| p.state != 'Z'));
        assert_eq!(kill_leftover_group(pid, stat.start), 1);
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL));
        assert_eq!(kill_leftover_group(pid, stat.start), 0, "nothing left");
    }
}
