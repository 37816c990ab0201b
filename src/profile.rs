//! `UWF_PROFILE=1`: marks on stderr with the milliseconds since `uwf` started its CLI, for
//! finding where a command's time goes (`UWF_PROFILE=1 uwf thread step T 2>&1 | grep profile`).
//! Off, a mark costs one atomic load.

use std::sync::OnceLock;
use std::time::Instant;

static START: OnceLock<Option<Instant>> = OnceLock::new();

/// Starts the clock when `UWF_PROFILE` is set (called first thing by the CLI).
pub fn start() {
    START.get_or_init(|| std::env::var_os("UWF_PROFILE").map(|_| Instant::now()));
}

/// Prints `label` with the time since [`start`], when profiling.
pub fn mark(label: &str) {
    if let Some(Some(t)) = START.get() {
        eprintln!(
            "uwf-profile {:>8.3} ms  {label}",
            t.elapsed().as_secs_f64() * 1e3
        );
    }
}
