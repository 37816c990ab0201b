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
//! A signal the process was started ignoring (`nohup` ignores SIGHUP, a shell without job
//! control SIGINT for `cmd &`) stays ignored.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};

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
