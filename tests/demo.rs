//! `scripts/demo.sh`, README command 1: it builds uwf where a person sees the build (cargo's own
//! progress, an estimate, how long it took), its output can go to a file, its echoed commands can
//! be pasted, and however it ends it leaves no store behind.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const UWF: &str = env!("CARGO_BIN_EXE_uwf");

/// The target directory this test's `uwf` was built in, when it is a plain debug build
/// (`<target>/debug/uwf`), where `cargo build --bin uwf` finds nothing to do.
fn debug_target_dir() -> Option<PathBuf> {
    let debug = Path::new(UWF).parent()?;
    let target = debug.parent()?;
    (debug.file_name()? == "debug" && target.join(".rustc_info.json").is_file())
        .then(|| target.to_path_buf())
}

/// The demo run as `bash scripts/demo.sh > log 2>&1`: with this test build's binary
/// (`UWF_BIN`), or, given the target directory it was built in, building it as a reader's run
/// does (cargo finds it up to date).
fn demo(log: &Path, build_in: Option<&Path>) -> Command {
    let file = std::fs::File::create(log).expect("log file");
    let mut cmd = Command::new("bash");
    cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/demo.sh"))
        .env_remove("UWF_DEMO_ROOT")
        .env_remove("UWF_STORAGE_ROOT")
        .stdin(Stdio::null())
        .stdout(file.try_clone().expect("dup"))
        .stderr(file);
    match build_in {
        Some(target) => {
            cmd.env_remove("UWF_BIN").env("CARGO_TARGET_DIR", target);
            // What cargo sets for a test, and a reader's shell lacks: some build scripts watch
            // these (ring's, CARGO_MANIFEST_DIR), and cargo would rebuild them for the change.
            for (name, _) in std::env::vars_os() {
                let name = name.to_string_lossy();
                if name.starts_with("CARGO_PKG_")
                    || [
                        "CARGO_MANIFEST_DIR",
                        "CARGO_MANIFEST_PATH",
                        "CARGO_CRATE_NAME",
                        "CARGO_BIN_NAME",
                        "CARGO_PRIMARY_PACKAGE",
                    ]
                    .contains(&name.as_ref())
                {
                    cmd.env_remove(name.as_ref());
                }
            }
        }
        None => {
            cmd.env("UWF_BIN", UWF);
        }
    }
    cmd
}

/// The storage root the demo names in its header (its first line, after the build's lines).
fn root_of(log: &str) -> PathBuf {
    let header = log
        .lines()
        .find_map(|l| l.strip_prefix("uwf demo — storage root: "))
        .unwrap_or_else(|| panic!("the log has no header:\n{log}"));
    PathBuf::from(header)
}

#[test]
fn a_demo_logged_to_a_file_shows_its_build_keeps_every_line_and_its_quotes_and_removes_its_store() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("log");
    // The demo's own build, as a reader runs it; where this test's binary is not a plain debug
    // build (`--release`, `--target`), that build would be a long one: the demo runs this binary.
    let target = debug_target_dir();
    if target.is_none() {
        eprintln!("note: {UWF} is not <target>/debug/uwf; the demo runs it without building");
    }
    let status = demo(&log, target.as_deref())
        .status()
        .expect("run the demo");
    let bytes = std::fs::read(&log).expect("log");
    let text = String::from_utf8_lossy(&bytes);
    assert!(status.success(), "the demo failed:\n{text}");
    assert!(!bytes.contains(&0), "NUL bytes in the log:\n{text}");
    if target.is_some() {
        // Never a silent build: the estimate first, then cargo's own output (its last line is
        // `Finished …`, printed even when there is nothing to build), then how long it took.
        let (build, demo) = text
            .split_once("\nuwf demo — storage root: ")
            .unwrap_or_else(|| panic!("the build comes before the demo's header:\n{text}"));
        let estimate = build
            .lines()
            .position(|l| l.starts_with("building uwf (") && l.contains(" minutes "))
            .unwrap_or_else(|| panic!("the demo says how long a build takes:\n{build}"));
        let finished = build
            .lines()
            .position(|l| l.contains("Finished"))
            .unwrap_or_else(|| panic!("cargo's output reaches the reader:\n{build}"));
        let built = build
            .lines()
            .position(|l| l.starts_with("built in "))
            .unwrap_or_else(|| panic!("the demo says how long the build took:\n{build}"));
        assert!(estimate < finished && finished < built, "{build}");
        assert!(
            demo.contains("$ uwf workflow put examples/solve-issue.yaml"),
            "{text}"
        );
    }
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
    let mut child = demo(&log, None).spawn().expect("start the demo");
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
