//! Killing `uwf cas put` at any instant never leaves a visible partial node.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::Env;

#[test]
fn killed_puts_leave_no_partial_node() {
    let env = Env::new();
    env.ok(&["cas", "list"]); // create the store
    let bin = assert_cmd::cargo::cargo_bin("uwf");
    let mut killed_early = 0;
    for i in 0..40u64 {
        // A payload of a few MiB takes long enough to write that kills land mid-way.
        let payload = format!("\"{}{}\"", i, "y".repeat(3 << 20));
        let mut child = Command::new(&bin)
            .args(["cas", "put", "text", "-"])
            .env("UWF_STORAGE_ROOT", env.root())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn uwf");
        let mut stdin = child.stdin.take().expect("stdin");
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(payload.as_bytes());
        });
        std::thread::sleep(Duration::from_millis(i * 3 % 60));
        let _ = child.kill();
        let status = child.wait().expect("wait");
        let _ = writer.join();
        if !status.success() {
            killed_early += 1;
        }
    }
    assert!(
        killed_early > 10,
        "only {killed_early} puts were interrupted; the test did not test much"
    );
    // Every visible node is whole: fsck re-hashes all of them.
    let fsck = env.ok(&["cas", "fsck"]);
    assert!(fsck.starts_with("ok:"), "{fsck}");
    for h in env.ok(&["cas", "list"]).lines() {
        env.ok(&["cas", "get", h, "--payload"]);
    }
}

const COUNTER: &str = r#"
name: counter
roles:
  tick:
    goal: Count.
    meta: { type: object, properties: { n: { type: integer } }, required: [n] }
conditions:
  more: { expression: "$count(steps) < 100000" }
graph:
  $START: [ { role: tick, condition: null } ]
  tick: [ { role: tick, condition: more }, { role: $END, condition: null } ]
"#;

/// `uwf thread run` killed with SIGKILL at 200 instants: the head it leaves is always a whole,
/// verified step of the thread (the index write is the commit point, through a synced spare),
/// and the thread steps on from it.
#[test]
fn two_hundred_killed_runs_never_leave_a_corrupt_head() {
    let env = Env::new();
    env.ok_stdin(&["workflow", "put", "-"], COUNTER);
    let id = common::start_thread(&env, "counter", "count");
    let bin = assert_cmd::cargo::cargo_bin("uwf");
    let (mut kills, mut moved) = (0, 0);
    let mut last = String::new();
    for i in 0..200u64 {
        let mut child = Command::new(&bin)
            .args([
                "thread",
                "run",
                &id,
                "--agent",
                "dry",
                "--max-steps",
                "1000",
            ])
            .env("UWF_STORAGE_ROOT", env.root())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn uwf");
        std::thread::sleep(Duration::from_millis(15 + i * 37 % 60));
        let _ = child.kill();
        if !child.wait().expect("wait").success() {
            kills += 1;
        }
        // The head is readable, whole and a step of this thread.
        let head = common::json(&env.ok(&["thread", "show", &id, "--json"]))["head"]
            .as_str()
            .expect("a head")
            .to_owned();
        env.ok(&["cas", "get", &head, "--payload"]);
        if head != last {
            moved += 1;
            last = head;
        }
    }
    assert!(kills >= 190, "only {kills} of 200 runs were killed mid-way");
    assert!(
        moved > 50,
        "the head moved only {moved} times: the kills came too early"
    );
    // No node is missing or damaged. A kill between a node's publication and its line in the
    // type index leaves only that derived index behind, which `--repair` rebuilds.
    let fsck = env.run(&["cas", "fsck"]);
    let report = String::from_utf8_lossy(&fsck.stdout);
    assert!(
        report
            .lines()
            .all(|l| l.starts_with("ok:") || l.starts_with("derived ")),
        "{report}"
    );
    env.ok(&["cas", "fsck", "--repair"]);
    let fsck = env.ok(&["cas", "fsck"]);
    assert!(fsck.starts_with("ok:"), "{fsck}");
    env.ok(&["thread", "step", &id, "--agent", "dry"]);
}
