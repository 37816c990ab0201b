//! The thread index's write-ahead log under real use: a store grown the way a team grows one,
//! one `uwf` process per command, keeps `index.db-wal` small whatever the number of commands.
//!
//! Until every command closed its index connection, each process left its writes in the log,
//! the next one rebuilt the log's index from every frame before its first query, and the log
//! was never restarted: 28 MB after 1,000 starts, 298 MB after 10,000, and `thread start` 63
//! times a process spawn.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use common::Env;

const LOOP: &str = r#"
name: counter
roles:
  tick: { meta: { type: object, properties: { n: { type: integer } }, required: [n] } }
graph:
  $START: [ { role: tick, condition: null } ]
  tick: [ { role: $END, condition: null } ]
"#;

/// Threads started by real processes, in two concurrent streams.
const STARTS: usize = 2_000;

/// The most the log may hold at any moment (commands fold it in from 256 KiB, and a long one
/// checkpoints at 1,000 pages of 4 KiB; with room for the frames written meanwhile).
const MOST: u64 = 8 * 1024 * 1024;

fn wal(root: &Path) -> u64 {
    std::fs::metadata(root.join("index.db-wal")).map_or(0, |m| m.len())
}

#[test]
fn two_thousand_start_processes_leave_the_log_small() {
    let env = Env::new();
    let root = env.root();
    env.ok_stdin(&["workflow", "put", "-"], LOOP);
    // Watch the log's size while the processes run.
    let stop = Arc::new(AtomicBool::new(false));
    let most = Arc::new(AtomicU64::new(0));
    let watcher = {
        let (stop, most, root) = (stop.clone(), most.clone(), root.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                most.fetch_max(wal(&root), Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        })
    };
    // As the issue's team did: one `thread start` per thread, every other thread killed,
    // stepped or left active; two shells at once, so closes race too.
    let streams: Vec<_> = (0..2)
        .map(|s| {
            Command::new("sh")
                .arg("-c")
                .arg(format!(
                    "set -e; for i in $(seq {n}); do \
                       id=$('{uwf}' thread start counter -p \"stream {s} thread $i\" -q); \
                       case $((i % 4)) in \
                         1) '{uwf}' thread kill \"$id\" -q >/dev/null ;; \
                         3) '{uwf}' thread step \"$id\" --agent dry >/dev/null ;; \
                       esac; \
                     done",
                    n = STARTS / 2,
                    uwf = env!("CARGO_BIN_EXE_uwf"),
                ))
                .env("UWF_STORAGE_ROOT", &root)
                .env_remove("UWF_STORAGE_URL")
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("sh")
        })
        .collect();
    for child in streams {
        let out = child.wait_with_output().expect("wait");
        assert!(
            out.status.success(),
            "a stream failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    stop.store(true, Ordering::Relaxed);
    watcher.join().expect("watcher");
    let most = most.load(Ordering::Relaxed).max(wal(&root));
    assert!(
        most <= MOST,
        "index.db-wal reached {most} bytes over {STARTS} starts"
    );
    // A command alone folds the log in once it has grown past 256 KiB: what is left is less
    // than that and one command's writes.
    env.ok(&["thread", "list", "-q", "--limit", "1"]);
    let left = wal(&root);
    assert!(
        left < 512 * 1024,
        "index.db-wal kept {left} bytes after the last command"
    );
    // Every thread is there: half of each stream's threads are active, a quarter killed.
    let all = env.ok(&["thread", "list", "--all", "-q"]);
    assert_eq!(all.lines().count(), STARTS);
    let active = env.ok(&["thread", "list", "-q"]);
    assert_eq!(active.lines().count(), STARTS / 2);
}
