//! A "machine" for the multi-machine tests: a storage root of its own (with the solve-issue
//! script agent's answers beside it), optionally on a PostgreSQL store, driving the real `uwf`.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

use super::SOLVE_SCRIPT;

/// A storage root with `url` (if any) as its store.
pub struct Machine {
    pub dir: tempfile::TempDir,
    url: Option<String>,
}

impl Machine {
    /// A fresh root; with `lease_seconds`, a `config.yaml` setting `leaseSeconds`.
    pub fn new(url: Option<&str>, lease_seconds: Option<u64>) -> Machine {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join("store")).expect("root");
        std::fs::write(dir.path().join("solve.yaml"), SOLVE_SCRIPT).expect("script");
        if let Some(secs) = lease_seconds {
            std::fs::write(
                dir.path().join("store/config.yaml"),
                format!("leaseSeconds: {secs}\n"),
            )
            .expect("config");
        }
        Machine {
            dir,
            url: url.map(str::to_owned),
        }
    }

    pub fn root(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    /// The node file of a hash in this machine's directory store.
    pub fn object_path(&self, hash: &str) -> PathBuf {
        self.root()
            .join("cas/objects")
            .join(&hash[..2])
            .join(format!("{}.json", &hash[2..]))
    }

    /// The script agent's answers for solve-issue.
    pub fn script(&self) -> PathBuf {
        self.dir.path().join("solve.yaml")
    }

    /// A `uwf` command on this machine's root (and store).
    pub fn uwf(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_uwf"));
        cmd.env_remove("WORKFLOW_STORAGE_ROOT")
            .env("UWF_STORAGE_ROOT", self.root())
            .env("HOME", self.dir.path())
            .current_dir(self.dir.path())
            .stdin(Stdio::null());
        match &self.url {
            Some(url) => cmd.env("UWF_STORAGE_URL", url),
            None => cmd.env_remove("UWF_STORAGE_URL"),
        };
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.uwf().args(args).output().expect("run uwf")
    }

    /// Runs `uwf args…`, asserts success, and returns trimmed stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        super::success_stdout(args, &self.run(args))
    }

    /// Runs a command that must fail with exit 1 and a clear message; returns stderr.
    pub fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "uwf {args:?}: {err}");
        assert!(err.starts_with("error: "), "{err}");
        assert!(
            !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
            "{err}"
        );
        err
    }

    /// The script agent as a command line run in process.
    pub fn script_agent(&self) -> String {
        format!("uwf agent script --file {}", self.script().display())
    }

    /// The script agent as a separate program that first sleeps `secs` (so a kill, a race or
    /// a restart lands mid-step).
    pub fn slow_agent(&self, secs: &str) -> String {
        format!(
            "sh -c 'sleep {secs}; exec {} agent script --file {} \"$@\"' agent",
            env!("CARGO_BIN_EXE_uwf"),
            self.script().display()
        )
    }

    /// A worker process with `agent` for every step, stopping when the queue is empty.
    pub fn worker(&self, agent: &str) -> Child {
        self.uwf()
            .args(["worker", "--until-idle", "--agent", agent])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn worker")
    }
}
