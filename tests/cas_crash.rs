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
    // No node is missing or damaged. (Derived files that disagree would be rebuilt by
    // `--repair`; the type index no longer can: its lines are written before the nodes, see
    // `killed_node_writers_never_leave_the_type_index_short`.)
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

/// Issue #27 item 12: writers killed with SIGKILL while they write nodes — `store copy` (node
/// after node: most of its time is spent between one node's link and the next one's) and
/// `thread run` (a step's nodes in one batch) — never leave a type index that disagrees with
/// the store: `uwf cas fsck` finds no derived file to repair, and nothing else.
#[test]
fn killed_node_writers_never_leave_the_type_index_short() {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let bin = assert_cmd::cargo::cargo_bin("uwf");
    // The store copied: a thread of 40 steps, left as it is.
    let source = Env::new();
    source.ok_stdin(&["workflow", "put", "-"], COUNTER);
    let id = common::start_thread(&source, "counter", "count");
    // Still active after 40 steps: exit 3 (`docs/cli.md#exit-codes`).
    source.ends(
        &["thread", "run", &id, "--agent", "dry", "--max-steps", "40"],
        3,
    );
    // The store whose runs are killed.
    let env = Env::new();
    env.ok_stdin(&["workflow", "put", "-"], COUNTER);
    let id = common::start_thread(&env, "counter", "count");
    let spawn = |args: &[&str]| {
        Command::new(&bin)
            .args(args)
            .env("UWF_STORAGE_ROOT", env.root())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn uwf")
    };
    let copies = env.dir.path().join("copies");
    std::fs::create_dir(&copies).unwrap();
    let copy_into = |n: u64| {
        let to = copies.join(n.to_string());
        let (from, into) = (source.root(), to.clone());
        let child = spawn(&[
            "store",
            "copy",
            from.to_str().unwrap(),
            into.to_str().unwrap(),
        ]);
        (child, to)
    };
    let fsck = |root: &std::path::Path| {
        let out = Command::new(&bin)
            .args(["cas", "fsck"])
            .env("UWF_STORAGE_ROOT", root)
            .output()
            .expect("run fsck");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // How long a whole copy takes here: the kills land inside that span.
    let started = std::time::Instant::now();
    let (mut whole, _) = copy_into(0);
    assert!(whole.wait().unwrap().success());
    let measured = started.elapsed().as_millis().max(20) as u64;
    // Copies run faster or slower as the machine's load changes: the span shrinks when a copy
    // finished before its kill and grows back when kills land.
    let mut span = measured;
    let (mut copies_killed, mut runs_killed) = (0, 0);
    for i in 1..=100u64 {
        if std::time::Instant::now() > deadline {
            break;
        }
        // A copy, killed somewhere in its span. Cut short, it lacks nodes that those it has
        // refer to (it copies in hash order), so only its derived files are looked at.
        let (mut child, to) = copy_into(i);
        std::thread::sleep(Duration::from_millis(5 + i * 7919 % span));
        let _ = child.kill();
        if child.wait().unwrap().success() {
            span = (span * 2 / 3).max(10);
        } else {
            copies_killed += 1;
            span = (span + span / 10 + 1).min(measured * 2);
        }
        if to.join("cas").exists() {
            let report = fsck(&to);
            let derived: Vec<&str> = report
                .lines()
                .filter(|l| l.starts_with("derived "))
                .collect();
            assert!(derived.is_empty(), "copy {i} killed: {derived:?}");
        }
        let _ = std::fs::remove_dir_all(&to);
        // A run, killed mid-step.
        let mut child = spawn(&[
            "thread",
            "run",
            &id,
            "--agent",
            "dry",
            "--max-steps",
            "1000",
        ]);
        std::thread::sleep(Duration::from_millis(10 + i * 37 % 50));
        let _ = child.kill();
        if !child.wait().unwrap().success() {
            runs_killed += 1;
        }
    }
    assert!(
        copies_killed >= 15 && runs_killed >= 15,
        "only {copies_killed} copies and {runs_killed} runs were killed mid-way"
    );
    let report = fsck(&env.root());
    assert!(report.starts_with("ok:"), "runs killed: {report}");
    env.ok(&["thread", "step", &id, "--agent", "dry"]);
}
