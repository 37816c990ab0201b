//! A database that stops answering mid-step (`docs/several-machines.md#reference`): the whole
//! PostgreSQL server is frozen with SIGSTOP for two seconds while a chatty agent prints. The agent
//! is never held up (its lines keep their pace), the step's result is published once the server
//! answers again, and the log every machine reads has every line or says where lines were lost.
//!
//! Skips with a printed reason when the PostgreSQL binaries are missing
//! (`UWF_REQUIRE_POSTGRES=1` makes a skip fail). The server is always thawed, also when the test
//! panics.

mod common;
mod pg_server;

use std::time::{Duration, Instant};

use common::machine::Machine;

const ONE: &str = "name: one\nroles:\n  writer:\n    goal: write\n    meta:\n      type: object\n      \
properties: { text: { type: string } }\n      required: [text]\n\
graph:\n  $START: [ { role: writer, condition: null } ]\n  writer: [ { role: $END, condition: null } ]\n";

/// Sends SIGSTOP to `pids` and SIGCONT when dropped.
struct Frozen(Vec<u32>);

impl Frozen {
    fn new(pids: Vec<u32>) -> Frozen {
        for &pid in &pids {
            signal(pid, "STOP");
        }
        Frozen(pids)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        for &pid in &self.0 {
            signal(pid, "CONT");
        }
    }
}

fn signal(pid: u32, name: &str) {
    let _ = std::process::Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status();
}

#[test]
fn a_frozen_database_neither_blocks_the_agent_nor_loses_the_step() {
    let name = "a_frozen_database_neither_blocks_the_agent_nor_loses_the_step";
    let Some(server) = pg_server::PgServer::private(name) else {
        return;
    };
    let url = server.fresh_db("stall");
    let a = Machine::new(Some(&url), None);
    let b = Machine::new(Some(&url), None);
    let one = a.dir.path().join("one.yaml");
    std::fs::write(&one, ONE).expect("one.yaml");
    a.ok(&["workflow", "put", one.to_str().expect("utf-8")]);
    let agent = a.dir.path().join("chatty.sh");
    std::fs::write(
        &agent,
        format!(
            "#!/bin/sh\nfor i in $(seq 15); do echo \"tick $i $(date +%s%3N)\" >&2; sleep 0.2; done\n\
             exec '{}' agent dry \"$1\" \"$2\"\n",
            env!("CARGO_BIN_EXE_uwf")
        ),
    )
    .expect("agent");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let id = a.ok(&["thread", "start", "one", "-p", "through a stall", "-q"]);

    let step = a
        .uwf()
        .args([
            "thread",
            "step",
            &id,
            "--agent",
            agent.to_str().expect("utf-8"),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("step");
    std::thread::sleep(Duration::from_millis(800));
    let pids = server.pids();
    assert!(pids.len() > 1, "the server's processes: {pids:?}");
    {
        let _frozen = Frozen::new(pids);
        std::thread::sleep(Duration::from_secs(2));
    }
    let started = Instant::now();
    let out = step.wait_with_output().expect("step");
    common::assert_succeeded("the step through the stall", &out);
    assert!(started.elapsed() < Duration::from_secs(30));

    // The agent kept its pace: no gap between its lines near the two seconds of the stall.
    let local =
        std::fs::read_to_string(a.root().join("runs").join(format!("{id}.log"))).expect("A's log");
    let times: Vec<u64> = local
        .lines()
        .filter_map(|l| l.strip_prefix("tick ")?.split(' ').nth(1)?.parse().ok())
        .collect();
    assert_eq!(times.len(), 15, "{local}");
    let widest = times.windows(2).map(|w| w[1] - w[0]).max().expect("gaps");
    assert!(widest < 1000, "the agent was held up {widest} ms:\n{local}");

    // The step was published, and machine B reads its log: whole, or with the marker.
    let shown = b.ok(&["thread", "show", &id]);
    assert!(shown.contains("\"steps\":1"), "{shown}");
    let shared = b.ok(&["thread", "log", &id]);
    assert!(
        shared.trim_end() == local.trim_end()
            || shared.contains("bytes of this log did not reach the database"),
        "B's log:\n{shared}\nA's log:\n{local}"
    );
    assert!(shared.contains("tick 15"), "{shared}");
}
