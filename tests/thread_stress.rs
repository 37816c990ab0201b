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
