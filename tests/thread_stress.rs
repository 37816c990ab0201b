//! 16 threads stepped in parallel by separate processes, 50 steps each: every head and
//! `threads.yaml` consistent afterwards, and `uwf cas fsck` clean.

mod common;

use std::process::{Command, Stdio};

use common::{Env, json, start_thread};

const LOOP: &str = r#"
name: counter
roles:
  tick: { meta: { type: object, properties: { n: { type: integer } }, required: [n] } }
conditions:
  more: { expression: "$count(steps) < 50" }
graph:
  $START: [ { role: tick, condition: null } ]
  tick: [ { role: tick, condition: more }, { role: $END, condition: null } ]
"#;

#[test]
fn sixteen_threads_in_parallel_processes_stay_consistent() {
    let env = Env::new();
    env.ok_stdin(&["workflow", "put", "-"], LOOP);
    let ids: Vec<String> = (0..16)
        .map(|i| start_thread(&env, "counter", &format!("thread {i}")))
        .collect();
    // One process per thread runs all 50 steps; each step is its own `uwf thread step` process.
    let runners: Vec<_> = ids
        .iter()
        .map(|id| {
            Command::new("sh")
                .arg("-c")
                .arg(format!(
                    "for i in $(seq 50); do '{}' thread step {id} --agent dry >/dev/null || exit 1; done",
                    env!("CARGO_BIN_EXE_uwf")
                ))
                .env("UWF_STORAGE_ROOT", env.root())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for r in runners {
        let out = r.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for id in &ids {
        let show = json(&env.ok(&["thread", "show", id]));
        assert_eq!(
            (show["status"].as_str(), show["steps"].as_u64()),
            (Some("done"), Some(50)),
            "{show}"
        );
        let steps: Vec<serde_json::Value> =
            env.ok(&["thread", "steps", id]).lines().map(json).collect();
        assert_eq!(steps.len(), 50);
        assert_eq!(steps[49]["hash"], show["head"]);
    }
    // Every thread archived exactly once; none left active.
    assert!(env.ok(&["thread", "list"]).is_empty());
    let all: Vec<serde_json::Value> = env
        .ok(&["thread", "list", "--all", "--json"])
        .lines()
        .map(json)
        .collect();
    assert_eq!(all.len(), 16);
    assert!(all.iter().all(|t| t["status"] == "done"), "{all:?}");
    let fsck = env.ok(&["cas", "fsck"]);
    assert!(fsck.starts_with("ok:"), "{fsck}");
}

/// Issue #27 item 3: `uwf cas gc --grace 0s` in a loop while three `thread run`s step (one with
/// its agent in its own process): every run finishes, and no node a head reaches is lost.
#[test]
fn gc_with_no_grace_racing_thread_runs_loses_no_reachable_node() {
    const STEPS: usize = 100;
    let env = Env::new();
    env.ok_stdin(&["workflow", "put", "-"], &LOOP.replace("< 50", "< 100000"));
    let garbage = env.ok(&["cas", "put", "text", "\"garbage\""]);
    let ids: Vec<String> = (0..3)
        .map(|i| start_thread(&env, "counter", &format!("run {i}")))
        .collect();
    let runs: Vec<_> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let mut run = Command::new(env!("CARGO_BIN_EXE_uwf"));
            run.args(["thread", "run", id, "--agent", "dry", "--max-steps"])
                .arg(STEPS.to_string())
                .env("UWF_STORAGE_ROOT", env.root())
                .env("HOME", env.dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::piped());
            if i == 2 {
                // The agent writes the nodes in its own process; the step publishes them.
                run.env("UWF_SPAWN_BUILTINS", "1");
            }
            run.spawn().unwrap()
        })
        .collect();
    let mut collections = 0;
    let mut runs: Vec<_> = runs.into_iter().map(Some).collect();
    let mut outcomes = Vec::new();
    while runs.iter().any(Option::is_some) {
        let out = env.ok(&["cas", "gc", "--grace", "0s"]);
        assert!(out.contains("reachable"), "{out}");
        collections += 1;
        // GC holds the store while it marks: back to back, it would leave the steps little room.
        std::thread::sleep(std::time::Duration::from_millis(20));
        for slot in runs.iter_mut() {
            if let Some(run) = slot
                && run.try_wait().unwrap().is_some()
            {
                outcomes.push(slot.take().unwrap().wait_with_output().unwrap());
            }
        }
    }
    for out in outcomes {
        // Stopped by --max-steps with the thread still active: exit 3 (`docs/cli.md#exit-codes`).
        assert_eq!(
            out.status.code(),
            Some(3),
            "a run failed while GC ran: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(
        collections >= 5,
        "GC ran only {collections} times meanwhile"
    );
    // GC did collect: the loose node is gone.
    env.fails(&["cas", "has", &garbage], 1);
    for id in &ids {
        let steps = env.ok(&["thread", "steps", id]).lines().count();
        assert_eq!(steps, STEPS, "thread {id}");
    }
    let fsck = env.ok(&["cas", "fsck"]);
    assert!(fsck.starts_with("ok:"), "{fsck}");
}
