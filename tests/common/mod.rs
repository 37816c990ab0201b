//! Shared helpers for integration tests: a sealed environment around the real `uwf` binary.
#![allow(dead_code)]

pub mod browser;
pub mod machine;
pub mod markdown;
pub mod serve;

use std::path::{Path, PathBuf};
use std::process::Output;

use assert_cmd::Command;

/// Gives SIGINT its default action in this test process, so that the `uwf` processes a test
/// starts take Ctrl-C as they do at a terminal. Tests started in the background by a shell
/// without job control (`nohup cargo test &`, a script's `cargo test &`) inherit SIGINT
/// ignored, and uwf leaves an inherited-ignored SIGINT ignored on purpose, as `cmd &` expects:
/// every test that stops a step with SIGINT would then wait for a timeout and fail. Call it
/// before starting a process the test will interrupt.
pub fn sigint_as_at_a_terminal() {
    use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
    let default = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
    // SAFETY: this installs no handler, only the default action, which is what a process
    // started from a terminal has; nothing in a test process relies on SIGINT being ignored.
    unsafe { sigaction(Signal::SIGINT, &default) }.expect("give SIGINT its default action");
}

/// A temporary storage root and home directory; every command runs with only these.
pub struct Env {
    pub dir: tempfile::TempDir,
}

impl Env {
    /// An empty storage root that exists (as `UWF_STORAGE_ROOT=$(mktemp -d)` makes one):
    /// commands that only read refuse a root that does not exist.
    pub fn new() -> Env {
        let env = Env {
            dir: tempfile::tempdir().expect("temp dir"),
        };
        std::fs::create_dir(env.root()).expect("storage root");
        env
    }

    pub fn root(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    /// A `uwf` command in this environment.
    pub fn uwf(&self) -> Command {
        let mut cmd = Command::cargo_bin("uwf").expect("uwf binary");
        cmd.env_remove("WORKFLOW_STORAGE_ROOT")
            .env("UWF_STORAGE_ROOT", self.root())
            .env("HOME", self.dir.path())
            .env("NO_COLOR", "1")
            .current_dir(self.dir.path());
        cmd
    }

    /// Runs `uwf args…` and returns its output, whatever the exit status.
    pub fn run(&self, args: &[&str]) -> Output {
        self.uwf().args(args).output().expect("run uwf")
    }

    /// Runs `uwf args…`, asserts success, and returns trimmed stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        success_stdout(args, &self.run(args))
    }

    /// Runs `uwf args…` with stdin, asserts success, and returns trimmed stdout.
    pub fn ok_stdin(&self, args: &[&str], stdin: &str) -> String {
        let out = self
            .uwf()
            .args(args)
            .write_stdin(stdin.to_owned())
            .output()
            .expect("run uwf");
        assert!(
            out.status.success(),
            "uwf {args:?} failed\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Runs `uwf args…` (a `thread run`, `run` or `live`), asserts it ended with `code`
    /// (`docs/cli.md#exit-codes`: 3 stopped by `--max-steps`, 4 waiting for a person…), and
    /// returns trimmed stdout.
    #[allow(dead_code)]
    pub fn ends(&self, args: &[&str], code: i32) -> String {
        let out = self.run(args);
        assert_eq!(
            out.status.code(),
            Some(code),
            "uwf {args:?}: expected exit {code}\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Runs `uwf args…`, asserts it exits with `code`, and returns stderr.
    pub fn fails(&self, args: &[&str], code: i32) -> String {
        let out = self.run(args);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(
            out.status.code(),
            Some(code),
            "uwf {args:?}: expected exit {code}\nstdout: {}\nstderr: {stderr}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(
            !stderr.contains("panicked"),
            "panic in uwf {args:?}: {stderr}"
        );
        assert!(
            !stderr.contains("RUST_BACKTRACE"),
            "backtrace in uwf {args:?}: {stderr}"
        );
        stderr
    }

    /// Runs `uwf args…` with stdin, asserts it exits with 1, and returns stderr.
    pub fn fails_stdin(&self, args: &[&str], stdin: &str) -> String {
        let out = self
            .uwf()
            .args(args)
            .write_stdin(stdin.to_owned())
            .output()
            .expect("run uwf");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "uwf {args:?}: {stderr}");
        stderr
    }

    /// The node file of a hash in this environment's store.
    pub fn object_path(&self, hash: &str) -> PathBuf {
        self.root()
            .join("cas/objects")
            .join(&hash[..2])
            .join(format!("{}.json", &hash[2..]))
    }
}

/// Makes a read-only file writable (tests tamper with node files on purpose).
pub fn make_writable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
}

/// Registers an example workflow from `examples/`.
pub fn put_example(env: &Env, name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(format!("{name}.yaml"));
    let out = env.ok(&["workflow", "put", path.to_str().expect("utf-8 path")]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("put prints JSON");
    v["hash"].as_str().expect("hash").to_owned()
}

/// Starts a thread and returns its id.
pub fn start_thread(env: &Env, workflow: &str, prompt: &str) -> String {
    let out = env.ok(&["thread", "start", workflow, "-p", prompt]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("start prints JSON");
    v["thread"].as_str().expect("thread id").to_owned()
}

/// Parses one JSON object.
pub fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// Runs `uwf args…` in `env` on a pseudo-terminal (`script` from util-linux), with `NO_COLOR`
/// unset, `TERM=xterm` and `extra_env`; returns everything it printed, without carriage returns.
pub fn on_terminal(env: &Env, args: &[&str], extra_env: &[(&str, &str)]) -> String {
    let line = std::iter::once(env!("CARGO_BIN_EXE_uwf"))
        .chain(args.iter().copied())
        .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ");
    let mut cmd = std::process::Command::new("script");
    cmd.args(["-qec", &line, "/dev/null"])
        .env("UWF_STORAGE_ROOT", env.root())
        .env("HOME", env.dir.path())
        .env_remove("WORKFLOW_STORAGE_ROOT")
        .env_remove("NO_COLOR")
        .env("TERM", "xterm")
        .current_dir(env.dir.path());
    for (key, value) in extra_env {
        cmd.env(key, value);
    }
    let out = cmd.output().expect("run script(1)");
    String::from_utf8_lossy(&out.stdout).replace('\r', "")
}

/// Writes an executable shell script at `path` and returns the path.
pub fn write_script(path: &Path, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).expect("write script");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path.to_path_buf()
}

/// Makes `path` readable by its owner only (as `.env` must be).
pub fn chmod_600(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
}

/// Writes an executable shell script and returns its path.
pub fn script(env: &Env, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = env.dir.path().join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

/// Something a test needs from the machine beyond Rust.
#[derive(Debug, Clone, Copy)]
pub enum Need {
    /// A program on PATH (an editor, tmux, python3).
    Tool(&'static str),
    /// A usable FUSE: `/dev/fuse` opens read-write, and we are root or have `fusermount3`.
    Fuse,
}

/// What of `needs` this machine lacks, one phrase each ("emacs not found").
pub fn missing(needs: &[Need]) -> Vec<String> {
    needs
        .iter()
        .filter_map(|need| match need {
            Need::Tool(name) => (!on_path(name)).then(|| format!("{name} not found")),
            Need::Fuse => {
                let opens = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open("/dev/fuse")
                    .is_ok();
                let mounts = nix::unistd::geteuid().is_root() || on_path("fusermount3");
                (!(opens && mounts)).then(|| "no usable /dev/fuse (or not root)".to_owned())
            }
        })
        .collect()
}

/// Whether an executable `name` is on PATH.
pub fn on_path(name: &str) -> bool {
    which(name).is_some()
}

/// The first executable `name` on PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|file| {
            std::fs::metadata(file)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Whether the machine has everything `test` needs; call first and return when false.
///
/// When something is missing the test is skipped with a line on stderr (`SKIP test: emacs not
/// found`, written past the test harness's capture so that `cargo test` shows it), unless
/// `UWF_REQUIRE_ALL_TESTS=1` (CI) makes it panic: a skip there would hide a missing install.
pub fn has(test: &str, needs: &[Need]) -> bool {
    runs(test, &missing(needs))
}

/// [`has`] for a test that works out what it lacks itself (one phrase each, as [`missing`]
/// words them): whether it runs, after printing the `SKIP …` line or panicking as `has` does.
pub fn runs(test: &str, missing: &[String]) -> bool {
    let require_all = std::env::var("UWF_REQUIRE_ALL_TESTS").is_ok_and(|v| v == "1");
    match skip_line(test, missing, require_all) {
        None => true,
        Some(line) => {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "{line}");
            false
        }
    }
}

/// The decision of [`has`], given what is missing: `None` to run, or the `SKIP …` line to
/// print; panics instead when `require_all`.
pub fn skip_line(test: &str, missing: &[String], require_all: bool) -> Option<String> {
    if missing.is_empty() {
        return None;
    }
    let reason = missing.join(", ");
    assert!(
        !require_all,
        "{test} cannot run: {reason} (UWF_REQUIRE_ALL_TESTS=1 forbids skipping; install it)"
    );
    Some(format!("SKIP {test}: {reason}"))
}

/// A `script` agent file for solve-issue: the reviewer rejects once (with frontmatter and a
/// body), then approves.
pub const SOLVE_SCRIPT: &str = r#"
planner:
  - { summary: "Fix the login bug", steps: ["reproduce", "fix the session check", "add a test"] }
developer:
  - { filesChanged: [src/login.rs], summary: "first attempt", testsPassing: false }
  - "---\nfilesChanged: [src/login.rs, tests/login.rs]\nsummary: second attempt\ntestsPassing: true\n---\nAdded the missing test.\n"
reviewer:
  - "---\napproved: false\nreplan: false\ncomments:\n  - { file: src/login.rs, line: 12, message: no test }\n---\nPlease add a test.\n"
  - { approved: true, replan: false, comments: [] }
"#;

/// Asserts that the command described by `what` succeeded, showing its exit code and output if
/// not.
pub fn assert_succeeded(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what} failed ({:?})\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Asserts that `uwf args…` succeeded (see [`assert_succeeded`]) and returns its trimmed stdout:
/// the `ok` of every test harness.
pub fn success_stdout(args: &[&str], out: &Output) -> String {
    assert_succeeded(&format!("uwf {args:?}"), out);
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}
