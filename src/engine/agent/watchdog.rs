//! The watchdog of running agents: stops their process groups if the step process dies.
//!
//! The parent-death signal (`PR_SET_PDEATHSIG`) reaches an agent only, not the processes it
//! started (a shell agent's `sleep`, an editor, a compiler). So the first time a process spawns
//! an agent, it forks a watchdog: a copy of itself that holds one end of a socket whose other
//! end only this process keeps, and reads it. Right after each spawn, before anything else, the
//! step writes the agent's group id to the watchdog, and once the agent has exited and what was
//! left of its group was killed, that the group is done.
//! When the process dies in any way (`kill -9` included), the kernel closes its end, the read
//! returns end of file, and the watchdog sends every group still watched SIGTERM, then SIGKILL
//! after [`GRACE`], and exits; when the process ends normally the watchdog watches nothing and
//! just exits. One watchdog serves every agent a process runs (a `thread run` of many steps, a
//! mount's concurrent steps).
//!
//! The group's "done" is written before the agent is reaped, and the watchdog reads in order,
//! so it never signals a group id that could have been reused by someone else's group. The
//! watchdog exists before the agent does; the one gap is the few microseconds between the
//! spawn's return and the write naming the group: a `kill -9` landing there leaves the agent's
//! children to whoever next takes the thread's lock (`kill_leftover_group`).
//!
//! Architecture Invariant: the forked watchdog runs only async-signal-safe system calls (the
//! fork copied one thread of a multi-threaded process, whose other threads may have held the
//! allocator's locks): no allocation, no panic, no std I/O. It is a fork, not an exec of a
//! helper, because a step must stay cheap: see `docs/performance.md#a-one-shot-step` for the
//! measured cost.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// How long the agents' groups have between SIGTERM and SIGKILL once the step died.
pub(crate) const GRACE: Duration = Duration::from_millis(500);
/// How often the watchdog looks whether the groups are gone during [`GRACE`].
const TICK: Duration = Duration::from_millis(10);
/// Descriptors closed one by one in the watchdog if `close_range` is not there (Linux < 5.9).
const CLOSE_UP_TO: i32 = 4096;
/// How many agents' groups one watchdog watches at once; more at the same time in one process
/// are left to the leftover cleanup.
const SLOTS: usize = 256;

/// A running watchdog, forked by this process.
#[derive(Debug)]
pub(crate) struct Watchdog {
    /// Read by the unit tests, which reap their own watchdogs.
    #[cfg_attr(not(test), allow(dead_code))]
    pid: libc::pid_t,
    /// This process's end of the socket: while it is open, the watchdog waits.
    to_watchdog: Mutex<Option<UnixStream>>,
}

/// The watchdog of this process, forked the first time it is asked for. `None` when it cannot
/// be (no socket, no fork): then whoever next takes the thread's lock cleans up, as before.
pub(crate) fn shared() -> Option<&'static Watchdog> {
    static SHARED: OnceLock<Option<Watchdog>> = OnceLock::new();
    SHARED.get_or_init(Watchdog::start).as_ref()
}

/// An agent's group the watchdog watches; dropping it tells the watchdog the group is done.
/// Drop it after the group was killed and before the agent is reaped.
#[derive(Debug)]
pub(crate) struct Watched<'w> {
    watchdog: &'w Watchdog,
    pgid: i32,
}

impl Watchdog {
    /// Forks a watchdog watching nothing yet.
    fn start() -> Option<Watchdog> {
        // Close-on-exec: an agent spawned by any thread of this process never holds it.
        let (ours, theirs) = UnixStream::pair().ok()?;
        let fd = theirs.as_raw_fd();
        // SAFETY: the child runs only `watch`, which makes async-signal-safe system calls on
        // integers it was given and on its own stack, and never returns; the parent goes on
        // as after any fork.
        match unsafe { libc::fork() } {
            -1 => None,
            0 => watch(fd),
            pid => {
                drop(theirs);
                Some(Watchdog {
                    pid,
                    to_watchdog: Mutex::new(Some(ours)),
                })
            }
        }
    }

    /// Watches the group `pgid` (an agent's pid, just spawned in a group of its own).
    pub(crate) fn watch(&self, pgid: u32) -> Option<Watched<'_>> {
        let pgid = i32::try_from(pgid).ok().filter(|p| *p > 1)?;
        self.tell(pgid).then_some(Watched {
            watchdog: self,
            pgid,
        })
    }

    /// Writes one message (a group to watch, or minus one that is done); false if the watchdog
    /// is gone.
    fn tell(&self, message: i32) -> bool {
        let mut guard = self
            .to_watchdog
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // A lost watchdog (killed by someone) is not an error of the step: SIGPIPE is ignored
        // in Rust programs, and the write fails with EPIPE.
        guard
            .as_mut()
            .is_some_and(|s| s.write_all(&message.to_le_bytes()).is_ok())
    }

    /// Closes this process's end and reaps the watchdog, which then stops every group still
    /// watched, as if this process had died (what the unit tests use; a step's watchdog lives
    /// as long as the step).
    #[cfg(test)]
    fn stop(self) {
        drop(self.to_watchdog.lock().unwrap().take());
        // SAFETY: waitpid on our own unreaped child; a null status pointer is allowed.
        unsafe {
            while libc::waitpid(self.pid, std::ptr::null_mut(), 0) == -1
                && *libc::__errno_location() == libc::EINTR
            {}
        }
    }
}

impl Drop for Watched<'_> {
    fn drop(&mut self) {
        self.watchdog.tell(-self.pgid);
    }
}

/// The watchdog's whole life, in the forked child (see the module's invariant).
fn watch(fd: libc::c_int) -> ! {
    // SAFETY: every call below is an async-signal-safe system call on plain integers and on
    // buffers on this stack; `_exit` ends the process without running anything of the parent's.
    unsafe {
        // A terminal's Ctrl-C or hang-up goes to the step's whole process group, this process
        // included: the watchdog lives exactly as long as its socket, whatever the step does.
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
            libc::signal(signal, libc::SIG_IGN);
        }
        // Keep only the socket: a copy of the step lock's descriptor would keep the thread
        // locked after the step died, one of the caller's stdout would delay its end of file.
        let closed = libc::syscall(libc::SYS_close_range, 0u32, (fd - 1) as u32, 0u32) == 0
            && libc::syscall(libc::SYS_close_range, (fd + 1) as u32, u32::MAX, 0u32) == 0;
        if !closed {
            for other in 0..CLOSE_UP_TO {
                if other != fd {
                    libc::close(other);
                }
            }
        }
        libc::prctl(libc::PR_SET_NAME, c"uwf-watchdog".as_ptr());
        let mut groups = [0 as libc::pid_t; SLOTS];
        let mut message = [0u8; 4];
        let mut have = 0usize;
        // Until end of file (the step is gone): a positive number is a group to watch, a
        // negative one a group that is done.
        loop {
            let n = libc::read(fd, message.as_mut_ptr().add(have).cast(), 4 - have);
            if n == -1 && *libc::__errno_location() == libc::EINTR {
                continue;
            }
            if n <= 0 {
                break;
            }
            have += n as usize;
            if have < 4 {
                continue;
            }
            have = 0;
            let group = i32::from_le_bytes(message);
            // A group to watch takes a free slot; a group done frees its own.
            let (slot, value) = match group {
                2.. => (0, group),
                ..-1 => (group.wrapping_neg(), 0),
                _ => continue,
            };
            if let Some(slot) = groups.iter_mut().find(|g| **g == slot) {
                *slot = value;
            }
        }
        let watched = |g: &libc::pid_t| *g > 1;
        for group in groups.iter().filter(|g| watched(g)) {
            libc::killpg(*group, libc::SIGTERM);
        }
        let tick = libc::timespec {
            tv_sec: 0,
            tv_nsec: TICK.as_nanos() as libc::c_long,
        };
        let mut waited = Duration::ZERO;
        let alive = |g: &&libc::pid_t| watched(g) && libc::killpg(**g, 0) == 0;
        while waited < GRACE && groups.iter().any(|g| alive(&g)) {
            libc::nanosleep(&tick, std::ptr::null_mut());
            waited += TICK;
        }
        for group in groups.iter().filter(|g| watched(g)) {
            libc::killpg(*group, libc::SIGKILL);
        }
        libc::_exit(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;
    use std::process::Command;
    use std::time::Instant;

    /// A `sleep` in a group of its own stands in for an agent, this process for the step.
    fn agent() -> std::process::Child {
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        cmd.spawn().unwrap()
    }

    #[test]
    fn watched_groups_are_stopped_when_the_step_dies_and_done_ones_are_left_alone() {
        let watchdog = Watchdog::start().expect("a watchdog starts");
        let mut unwatched = agent();
        let mut done = agent();
        drop(watchdog.watch(done.id()).expect("watched"));
        let mut watched = [agent(), agent()];
        let held: Vec<Watched<'_>> = watched
            .iter()
            .map(|a| watchdog.watch(a.id()).expect("watched"))
            .collect();
        // The step dies holding them: no "done" is ever written for these two.
        std::mem::forget(held);

        let started = Instant::now();
        watchdog.stop();
        for agent in &mut watched {
            assert_eq!(agent.wait().unwrap().signal(), Some(libc::SIGTERM));
        }
        assert!(started.elapsed() < GRACE + Duration::from_secs(1));
        // The watchdog has exited: whatever it was going to stop, it has.
        for agent in [&mut unwatched, &mut done] {
            assert!(agent.try_wait().unwrap().is_none(), "an agent was stopped");
            agent.kill().unwrap();
            agent.wait().unwrap();
        }
    }

    #[test]
    fn a_group_ignoring_sigterm_is_killed_after_the_grace() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "trap '' TERM; sleep 30 & wait"]);
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut stubborn = cmd.spawn().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let watchdog = Watchdog::start().expect("a watchdog starts");
        std::mem::forget(watchdog.watch(stubborn.id()));
        let started = Instant::now();
        watchdog.stop();
        assert_eq!(stubborn.wait().unwrap().signal(), Some(libc::SIGKILL));
        assert!(started.elapsed() >= GRACE);
    }
}
