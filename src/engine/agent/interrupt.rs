//! Stop signals (SIGINT, SIGTERM, SIGHUP) caught by a process that runs agents' steps.
//!
//! `uwf thread step`, `uwf thread run` and `uwf agent workflow` catch them instead of dying at
//! once, which would leave their agent's process group running (the agent is in a group of its
//! own, so a terminal's Ctrl-C or hang-up never reaches it). The first signal is only recorded
//! here; the step under way sees it ([`caught`]) and stops: an agent that runs is stopped like
//! on a timeout (SIGTERM to its group, SIGKILL after a grace), no agent is started, nothing is
//! published, and the process exits with 128 + the signal's number. A second signal ends the
//! process at once with that status (the agent's watchdog then stops the group).
//!
//! `uwf agent exec` waits for its command with [`output_unless_stopped`]: a stop signal ends the
//! wait at once, so that the prompt file it wrote is removed before it exits.
//!
//! A signal the process was started ignoring (`nohup` ignores SIGHUP, a shell without job
//! control SIGINT for `cmd &`) stays ignored.

use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, mpsc};

/// The signal caught first (0: none yet).
static CAUGHT: LazyLock<Arc<AtomicUsize>> = LazyLock::new(|| Arc::new(AtomicUsize::new(0)));
/// Set by the first signal: arms the immediate exit of a second one.
static ARMED: LazyLock<Arc<AtomicBool>> = LazyLock::new(|| Arc::new(AtomicBool::new(false)));

/// The signals that ask a process to stop.
pub(crate) const STOP_SIGNALS: [i32; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Installs the handlers of [`STOP_SIGNALS`] (once per process; those it inherited ignored are
/// left alone).
pub(crate) fn catch_stop_signals() -> std::io::Result<()> {
    static INSTALLED: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    if INSTALLED.get().is_some() {
        return Ok(());
    }
    for signal in STOP_SIGNALS {
        if ignored(signal) {
            continue;
        }
        // The exit goes first: it runs only once the flag below was set by an earlier signal.
        signal_hook::flag::register_conditional_shutdown(signal, 128 + signal, ARMED.clone())?;
        signal_hook::flag::register(signal, ARMED.clone())?;
        signal_hook::flag::register_usize(signal, CAUGHT.clone(), signal as usize)?;
    }
    let _ = INSTALLED.set(());
    Ok(())
}

/// Runs `cmd` to its end and collects its output, unless a stop signal ([`STOP_SIGNALS`], those
/// this process was not started ignoring) comes first: then `Err(signal)`, at once, for the
/// caller to clean up before it exits (the command itself got the same signal when it came to
/// the whole group, else it gets its parent-death signal when this process exits).
///
/// For `uwf agent exec`, whose prompt file a default SIGTERM (a thread kill, a timeout, the
/// step's death) would leave in the temporary folder. From the call on, a stop signal that comes
/// once the command has ended ends this process with 128 + its number, as if it were not caught.
pub(crate) fn output_unless_stopped(cmd: &mut Command) -> std::io::Result<Result<Output, i32>> {
    let watched: Vec<i32> = STOP_SIGNALS.into_iter().filter(|s| !ignored(*s)).collect();
    let mut signals = signal_hook::iterator::Signals::new(&watched)?;
    let child = cmd.spawn()?;
    let (tx, rx) = mpsc::channel::<Result<std::io::Result<Output>, i32>>();
    let stopped = tx.clone();
    std::thread::spawn(move || {
        for signal in signals.forever() {
            // Nobody waits any more: the signal's default, as it would have been.
            if stopped.send(Err(signal)).is_err() {
                std::process::exit(128 + signal);
            }
        }
    });
    std::thread::spawn(move || {
        let _ = tx.send(Ok(child.wait_with_output()));
    });
    match rx.recv() {
        Ok(Ok(output)) => output.map(Ok),
        Ok(Err(signal)) => Ok(Err(signal)),
        Err(_) => Err(std::io::Error::other(
            "the command's waiter ended without a word",
        )),
    }
}

/// The stop signal this process caught, if any.
pub(crate) fn caught() -> Option<i32> {
    match CAUGHT.load(Ordering::SeqCst) {
        0 => None,
        signal => i32::try_from(signal).ok(),
    }
}

/// `SIGINT`, `SIGTERM`, `SIGHUP` (or `signal N`).
pub(crate) fn name(signal: i32) -> String {
    match signal {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGHUP => "SIGHUP".into(),
        other => format!("signal {other}"),
    }
}

/// Whether `signal`'s disposition is "ignore" (inherited through exec).
fn ignored(signal: i32) -> bool {
    // SAFETY: sigaction with a null new action only reads the current one into `old`, a
    // zeroed plain C struct owned here.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(signal, std::ptr::null(), &mut old) == 0
            && old.sa_sigaction == libc::SIG_IGN
    }
}
