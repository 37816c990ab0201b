//! `scripts/demo.sh`, README command 1: its output can go to a file, its echoed commands can be
//! pasted, and however it ends it leaves no store behind.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const UWF: &str = env!("CARGO_BIN_EXE_uwf");

/// The demo run as `bash scripts/demo.sh > log 2>&1`, with this test build's binary.
fn demo(log: &Path) -> Command {
    let file = std::fs::File::create(log).expect("log file");
    let mut cmd = Command::new("bash");
    cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/demo.sh"))
        .env("UWF_BIN", UWF)
        .env_remove("UWF_DEMO_ROOT")
        .env_remove("UWF_STORAGE_ROOT")
        .stdin(Stdio::null())
        .stdout(file.try_clone().expect("dup"))
        .stderr(file);
    cmd
}

/// The storage root the demo names on its first line.
fn root_of(log: &str) -> PathBuf {
    let first = log.lines().next().unwrap_or_default();
    let root = first
        .strip_prefix("uwf demo — storage root: ")
        .unwrap_or_else(|| panic!("the log starts with its header, not {first:?}"));
    PathBuf::from(root)
}

#[test]
fn a_demo_logged_to_a_file_keeps_every_line_and_its_quotes_and_removes_its_store() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("log");
    let status = demo(&log).status().expect("run the demo");
    let bytes = std::fs::read(&log).expect("log");
    let text = String::from_utf8_lossy(&bytes);
    assert!(status.success(), "the demo failed:\n{text}");
    assert!(!bytes.contains(&0), "NUL bytes in the log:\n{text}");
    let root = root_of(&text);
    assert!(
        text.contains("$ uwf thread start solve-issue -p 'Users are logged out after one minute'"),
        "the echoed command keeps its quotes:\n{text}"
    );
    assert!(
        text.contains(r#""thread":""#),
        "the start's JSON is in the log"
    );
    assert!(
        !root.exists(),
        "the demo left its store at {}",
        root.display()
    );
}

#[test]
fn an_interrupted_demo_removes_its_store() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("log");
    let mut child = demo(&log).spawn().expect("start the demo");
    // Wait until it has made its store and written into it.
    let start = Instant::now();
    let root = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("$ uwf workflow graph") {
            break root_of(&text);
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the demo did not start:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(root.exists(), "the store exists while the demo runs");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("signal the demo");
    let status = child.wait().expect("wait for the demo");
    assert!(!status.success(), "the demo was stopped");
    assert!(!root.exists(), "the stopped demo left {}", root.display());
}
