//! Process groups of agents: reading a process's state from `/proc`, signalling a group,
//! stopping it with a grace period, and killing what an agent left behind once its step died.
//! Below the engine's rooms so that both the step cycle and a thread's run files can use it.

use std::time::{Duration, Instant};

/// A process's state, process group and start time (clock ticks after boot), from
/// `/proc/<pid>/stat`; `None` when there is no such process.
pub(crate) fn proc_stat(pid: u32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid pgrp …`: comm may hold spaces and parentheses; it ends at the last
    // `)`. The start time is field 22, the 20th after comm.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(ProcStat {
        state: fields.first()?.chars().next()?,
        pgrp: fields.get(2)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
    })
}

/// What [`proc_stat`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcStat {
    pub state: char,
    pub pgrp: u32,
    /// Clock ticks after boot.
    pub start: u64,
}

/// Kills what is left of an agent's process group after its step died, if the group is still
/// that agent's: the agent `pgid` started at `start` (from [`proc_stat`], recorded in the run
/// file). Returns how many processes were signalled (0 when nothing of it is left, or when the
/// group cannot be shown to be ours).
///
/// Why the check holds: the kernel does not reuse a pid while a process group of that id has
/// members. So if the leader (pid = `pgid`) is alive with the recorded start time, the group is
/// the agent's; if a process with that pid has another start time, the pid was reused and the
/// group is someone else's. If the leader is gone but members are left, they are the agent's
/// children, unless the group emptied and a new process with that pid made a group of its own
/// and died too; members started before the agent cannot be its children, so only members
/// started at or after `start` are killed.
pub(crate) fn kill_leftover_group(pgid: u32, start: u64) -> usize {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    if pgid <= 1 {
        return 0;
    }
    match proc_stat(pgid) {
        Some(leader) if leader.start != start => return 0,
        Some(leader) if leader.pgrp == pgid && leader.state != 'Z' => {
            signal_group(pgid, Signal::SIGKILL);
            return 1;
        }
        _ => {}
    }
    // The leader is gone (or a zombie): kill the members one by one, again while any appear
    // (a member may fork between the scan and the kill).
    let mut killed = 0;
    for _ in 0..10 {
        let members: Vec<u32> = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&pid| {
                proc_stat(pid).is_some_and(|p| p.pgrp == pgid && p.start >= start && p.state != 'Z')
            })
            .collect();
        if members.is_empty() {
            break;
        }
        for pid in members {
            if kill(Pid::from_raw(pid as i32), Signal::SIGKILL).is_ok() {
                killed += 1;
            }
        }
    }
    killed
}

/// Sends `signal` to a process group; errors (already gone) are ignored.
pub(crate) fn signal_group(pgid: u32, signal: nix::sys::signal::Signal) {
    if let Ok(pgid) = i32::try_from(pgid)
        && pgid > 1
    {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), signal);
    }
}

/// Whether any process of the group is still alive.
pub(crate) fn group_alive(pgid: u32) -> bool {
    match i32::try_from(pgid) {
        Ok(pgid) if pgid > 1 => {
            nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), None).is_ok()
        }
        _ => false,
    }
}

/// SIGTERM to the group, then SIGKILL after `grace` if anything is left.
pub(crate) fn stop_group(pgid: u32, grace: Duration) {
    signal_group(pgid, nix::sys::signal::Signal::SIGTERM);
    let deadline = Instant::now() + grace;
    while group_alive(pgid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if group_alive(pgid) {
        signal_group(pgid, nix::sys::signal::Signal::SIGKILL);
    }
}
