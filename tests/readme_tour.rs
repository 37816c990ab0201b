//! The documentation's shell tutorials run as pasted: the first ```sh block after a heading is
//! taken from the page as it is, and run line by line in one fresh `bash` (with `uwf` on PATH
//! from this build, a temp HOME and TMPDIR), failing at the first line that fails. README.md's
//! 5-minute tour runs everywhere; docs/several-machines.md's tutorial (a PostgreSQL server, two
//! workers, a mount) where PostgreSQL, FUSE and root are there.

use std::path::Path;
use std::process::Command;

/// The first ```sh block after `heading` in `page` (a path in the repository), as written there.
fn sh_block(page: &str, heading: &str) -> String {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(page))
        .unwrap_or_else(|e| panic!("{page}: {e}"));
    let after = text
        .split_once(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("{page} has no heading {heading:?}"))
        .1;
    let block = after
        .split_once("```sh\n")
        .unwrap_or_else(|| panic!("no ```sh block follows {heading:?} in {page}"))
        .1;
    block
        .split_once("```")
        .expect("the block ends")
        .0
        .to_owned()
}

#[test]
fn every_line_of_the_readme_tour_runs_as_pasted() {
    let tour = sh_block("README.md", "## A 5-minute tour");
    assert!(
        !tour.contains('<'),
        "the tour has a placeholder to fill in:\n{tour}"
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let bin = Path::new(env!("CARGO_BIN_EXE_uwf"))
        .parent()
        .expect("bin dir");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // Each line echoed before it runs (-x), so a failure names its line; -e stops there.
    let out = Command::new("bash")
        .args([
            "--noprofile",
            "--norc",
            "-e",
            "-o",
            "pipefail",
            "-x",
            "-c",
            &tour,
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_clear()
        .env("PATH", path)
        .env("HOME", dir.path())
        .env("TMPDIR", dir.path())
        .env("NO_COLOR", "1")
        .output()
        .expect("run bash");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the tour failed ({:?}); the last `+` line is the one that failed:\n{stderr}\nstdout:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        !stderr.contains("error:"),
        "a line printed an error:\n{stderr}"
    );
}

mod common;

/// The PostgreSQL binaries' directory, as the tutorial finds it.
fn postgres_bin() -> Option<std::path::PathBuf> {
    let mut dirs: Vec<_> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|d| d.join("initdb").is_file())
        .collect();
    dirs.sort();
    dirs.pop()
}

#[test]
fn the_several_machines_tutorial_runs_as_pasted() {
    let name = "the_several_machines_tutorial_runs_as_pasted";
    let mut missing = common::missing(&[common::Need::Fuse, common::Need::Tool("runuser")]);
    if postgres_bin().is_none() {
        missing.push("PostgreSQL not found in /usr/lib/postgresql".to_owned());
    }
    if !nix::unistd::geteuid().is_root() {
        missing.push("not root (the tutorial runs the server as the postgres user)".to_owned());
    }
    let require_all = ["UWF_REQUIRE_ALL_TESTS", "UWF_REQUIRE_POSTGRES"]
        .iter()
        .any(|v| std::env::var(v).is_ok_and(|x| x == "1"));
    if let Some(line) = common::skip_line(name, &missing, require_all) {
        eprintln!("{line}");
        return;
    }
    let block = sh_block("docs/several-machines.md", "## A tutorial on one machine");
    // As pasted, but: the package is installed already (CI does it), and instead of watching
    // forever, wait until all 50 threads are done; the server is stopped however it ends.
    let mut script = String::from(
        "trap 'uwf umount \"$M\" >/dev/null 2>&1 || true; runuser -u postgres -- $PGBIN/pg_ctl -D $PGDIR/data -m immediate stop >/dev/null 2>&1 || true' EXIT\n",
    );
    for line in block.lines() {
        if line.starts_with("apt-get install") {
            script.push_str(": already installed\n");
        } else if line.starts_with("watch ") {
            script.push_str(
                "for i in $(seq 600); do [ \"$(uwf thread list --all --json | grep -c '\"status\":\"done\"')\" = 50 ] && break; sleep 0.2; done\n\
                 [ \"$(ls $M/threads | wc -l)\" = 50 ]\n\
                 [ \"$(uwf thread list --all --json | grep -c '\"status\":\"done\"')\" = 50 ]\n",
            );
        } else {
            script.push_str(line);
            script.push('\n');
        }
    }
    let dir = tempfile::tempdir().expect("temp dir");
    // The server's directory is made inside; the postgres user must be able to reach it.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples"),
        dir.path().join("examples"),
    )
    .unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_uwf"))
        .parent()
        .expect("bin dir");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .args([
            "--noprofile",
            "--norc",
            "-e",
            "-o",
            "pipefail",
            "-x",
            "-c",
            &script,
        ])
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", path)
        .env("HOME", dir.path())
        .env("TMPDIR", dir.path())
        .env("NO_COLOR", "1")
        .output()
        .expect("run bash");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the tutorial failed ({:?}); the last `+` line is the one that failed:\n{stderr}\nstdout:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        !stderr.contains("error:"),
        "a line printed an error:\n{stderr}"
    );
    let logs: usize = ["worker-1.log", "worker-2.log"]
        .iter()
        .map(|f| {
            std::fs::read_to_string(dir.path().join(f))
                .unwrap_or_default()
                .lines()
                .count()
        })
        .sum();
    assert!(logs >= 50 * 5, "the two workers logged {logs} steps");
}
