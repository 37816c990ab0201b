//! `UWF_PROFILE=1`: marks on stderr with the milliseconds since `uwf` started its CLI, for
//! finding where a command's time goes (`UWF_PROFILE=1 uwf thread step T 2>&1 | grep profile`).
//! Off, a mark costs one atomic load.

use std::sync::OnceLock;
use std::time::Instant;

static START: OnceLock<Option<Instant>> = OnceLock::new();

/// Starts the clock when `UWF_PROFILE` is set (called first thing by the CLI).
pub(crate) fn start() {
    START.get_or_init(|| std::env::var_os("UWF_PROFILE").map(|_| Instant::now()));
}

/// Prints `label` with the time since [`start`], when profiling, and the absolute
/// `CLOCK_MONOTONIC` time, so that a caller timing the process from outside can tell its start
/// (exec, loading, relocation) and its exit from the work in between
/// (`scripts/step-timeline.py`). One write per mark, so marks of threads do not interleave.
pub(crate) fn mark(label: &str) {
    if let Some(Some(t)) = START.get() {
        let mono = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
            .map(|t| t.tv_sec() as f64 * 1e3 + t.tv_nsec() as f64 / 1e6)
            .unwrap_or(0.0);
        let line = format!(
            "uwf-profile {:>8.3} ms  {label}  (monotonic {mono:.3} ms)\n",
            t.elapsed().as_secs_f64() * 1e3
        );
        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    }
}
