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
