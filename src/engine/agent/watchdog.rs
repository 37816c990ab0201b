//! The watchdog of a running agent: stops the agent's process group if the step process dies.
//!
//! The parent-death signal (`PR_SET_PDEATHSIG`) reaches the agent only, not the processes it
//! started (a shell agent's `sleep`, an editor, a compiler). So for each agent it spawns, a
//! step forks a watchdog: a copy of itself that holds the read end of a pipe whose only write
//! end the step keeps, and blocks reading it. When the step dies in any way (`kill -9`
//! included), the kernel closes the write end, the read returns, and the watchdog sends the
//! agent's group SIGTERM, then SIGKILL after [`GRACE`], and exits. When the agent ends
//! normally the step kills and reaps the watchdog before it reaps the agent, so a watchdog
//! never outlives the agent's group id (which could then be reused by someone else's group).
//!
//! Architecture Invariant: the forked watchdog runs only async-signal-safe system calls (the
//! fork copied one thread of a multi-threaded process, whose other threads may have held the
//! allocator's locks): no allocation, no panic, no std I/O. It is a fork, not an exec of a
//! helper, because a step must stay cheap: see `docs/performance.md#a-one-shot-step` for the
//! measured cost.

use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

/// How long the agent's group has between SIGTERM and SIGKILL once the step died.
pub(crate) const GRACE: Duration = Duration::from_millis(500);
/// How often the watchdog looks whether the group is gone during [`GRACE`].
const TICK: Duration = Duration::from_millis(10);
/// Descriptors closed one by one in the watchdog if `close_range` is not there (Linux < 5.9).
const CLOSE_UP_TO: i32 = 4096;

/// A running watchdog; stopped (killed and reaped) when dropped.
#[derive(Debug)]
pub(crate) struct Watchdog {
    pid: libc::pid_t,
    /// The write end of the pipe: while this process holds it, the watchdog waits.
    _alive: Option<OwnedFd>,
}

impl Watchdog {
    /// Forks the watchdog of the agent whose process group is `pgid`. `None` when it cannot
    /// (no pipe, no fork): then whoever next takes the thread's lock cleans up, as before.
    pub(crate) fn start(pgid: u32) -> Option<Watchdog> {
        let pgid = libc::pid_t::try_from(pgid).ok().filter(|p| *p > 1)?;
        // Close-on-exec: an agent spawned by another thread of this process never holds it.
        let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).ok()?;
        let fd = read.as_raw_fd();
        // SAFETY: the child runs only `watch`, which makes async-signal-safe system calls on
        // integers it was given and never returns; the parent goes on as after any fork.
        match unsafe { libc::fork() } {
            -1 => None,
            0 => watch(fd, pgid),
            pid => {
                drop(read);
                Some(Watchdog {
                    pid,
                    _alive: Some(write),
                })
            }
        }
    }
}

impl Drop for Watchdog {
    /// Kills and reaps the watchdog: it is this process's child, so its pid cannot have been
    /// reused before the `waitpid`.
    fn drop(&mut self) {
        // SAFETY: kill and waitpid on our own unreaped child; a null status pointer is allowed.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            while libc::waitpid(self.pid, std::ptr::null_mut(), 0) == -1
                && *libc::__errno_location() == libc::EINTR
            {}
        }
    }
}

/// The watchdog's whole life, in the forked child (see the module's invariant).
fn watch(fd: libc::c_int, pgid: libc::pid_t) -> ! {
    // SAFETY: every call below is an async-signal-safe system call on plain integers and on
    // buffers on this stack; `_exit` ends the process without running anything of the parent's.
    unsafe {
        // A terminal's Ctrl-C or hang-up goes to the step's whole process group, this process
        // included: the watchdog lives exactly as long as its pipe, whatever the step does.
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
            libc::signal(signal, libc::SIG_IGN);
        }
        // Keep only the pipe: a copy of the step lock's descriptor would keep the thread locked
        // after the step died, one of the caller's stdout would delay its end of file.
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
        let mut byte = 0u8;
        // The step never writes: the read returns when the step is gone (end of file).
        while libc::read(fd, (&raw mut byte).cast(), 1) == -1
            && *libc::__errno_location() == libc::EINTR
        {}
        libc::killpg(pgid, libc::SIGTERM);
        let tick = libc::timespec {
            tv_sec: 0,
            tv_nsec: TICK.as_nanos() as libc::c_long,
        };
        let mut waited = Duration::ZERO;
        while waited < GRACE && libc::killpg(pgid, 0) == 0 {
            libc::nanosleep(&tick, std::ptr::null_mut());
            waited += TICK;
        }
        libc::killpg(pgid, libc::SIGKILL);
        libc::_exit(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn the_group_is_stopped_when_the_step_dies_and_left_alone_when_it_does_not() {
        // A `sleep` in a group of its own stands in for the agent, this process for the step.
        let agent = |secs: &str| {
            let mut cmd = Command::new("sleep");
            cmd.arg(secs);
            std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
            cmd.spawn().unwrap()
        };

        // Dropped by a living step: the watchdog is gone and the agent untouched.
        let mut kept = agent("30");
        drop(Watchdog::start(kept.id()).expect("a watchdog starts"));
        std::thread::sleep(Duration::from_millis(100));
        assert!(kept.try_wait().unwrap().is_none(), "the agent was stopped");
        kept.kill().unwrap();
        kept.wait().unwrap();

        // The step dies: closing the pipe's write end is what the death of this process does.
        let mut stopped = agent("30");
        let mut watchdog = Watchdog::start(stopped.id()).expect("a watchdog starts");
        drop(watchdog._alive.take());
        let started = std::time::Instant::now();
        let status = stopped.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGTERM));
        assert!(started.elapsed() < GRACE + Duration::from_secs(1));
        drop(watchdog);
    }
}
