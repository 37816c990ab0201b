//! The documentation's shell tutorials run as pasted: the first ```sh block after a heading is
//! taken from the page as it is, and run line by line in one fresh `bash` (with `uwf` on PATH
//! from this build, a temp HOME and TMPDIR), failing at the first line that fails. README.md's
//! 5-minute tour runs everywhere; docs/mount.md's two blocks where FUSE is there; and
//! docs/several-machines.md's tutorial (a PostgreSQL server, two workers, a mount) where
//! PostgreSQL, FUSE and root are there.

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

/// `script` run in one fresh `bash` in `cwd`, with `uwf` on PATH from this build and `home` as
/// HOME and TMPDIR: each line echoed before it runs (-x), so a failure names its line; -e stops
/// there.
fn run_bash(script: &str, cwd: &Path, home: &Path) -> std::process::Output {
    let bin = Path::new(env!("CARGO_BIN_EXE_uwf"))
        .parent()
        .expect("bin dir");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new("bash")
        .args([
            "--noprofile",
            "--norc",
            "-e",
            "-o",
            "pipefail",
            "-x",
            "-c",
            script,
        ])
        .current_dir(cwd)
        .env_clear()
        .env("PATH", path)
        .env("HOME", home)
        .env("TMPDIR", home)
        .env("NO_COLOR", "1")
        .output()
        .expect("run bash")
}

/// A temp directory the postgres user can reach, with the clone's `examples/` linked in: a
/// tutorial run from it finds the examples, and what it writes stays out of the clone.
fn workspace() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples"),
        dir.path().join("examples"),
    )
    .unwrap();
    dir
}

#[test]
fn every_line_of_the_readme_tour_runs_as_pasted() {
    let tour = sh_block("README.md", "## A 5-minute tour");
    assert!(
        !tour.contains('<'),
        "the tour has a placeholder to fill in:\n{tour}"
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let out = run_bash(&tour, Path::new(env!("CARGO_MANIFEST_DIR")), dir.path());
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

#[test]
fn the_knowledge_tutorial_runs_as_pasted_on_this_clone() {
    let block = sh_block("docs/knowledge.md", "## Try it on this clone");
    let dir = tempfile::tempdir().expect("temp dir");
    let out = run_bash(&block, Path::new(env!("CARGO_MANIFEST_DIR")), dir.path());
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && !stderr.contains("error:"),
        "the tutorial failed ({:?}); the last `+` line is the one that failed:\n{stderr}\nstdout:\n{stdout}",
        out.status.code()
    );
    // The lease question (after the sync's report) finds the lease code first; the second sync
    // read nothing again.
    let first = stdout.lines().nth(1).unwrap_or_default();
    assert!(
        first.contains("\"file\":\"src/engine/storage/lease.rs\""),
        "{first}"
    );
    assert!(stdout.contains("\"changed\":0,"), "{stdout}");
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
    // The server's directory is made inside; the postgres user must be able to reach it.
    let dir = workspace();
    let out = run_bash(&script, dir.path(), dir.path());
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

#[test]
fn the_mount_tour_runs_as_pasted() {
    let name = "the_mount_tour_runs_as_pasted";
    if !common::has(name, &[common::Need::Fuse]) {
        return;
    }
    let mounting = sh_block("docs/mount.md", "## Mounting");
    let tour = sh_block("docs/mount.md", "## Tour of the mount");
    // As pasted, in a fresh HOME, after the README tour's first two lines (a store with
    // solve-issue); but a person's vim session is a sed, the new flow a copy of an example,
    // and the unmount waits for the end of the tour.
    let mut script = String::from(
        "trap 'cd /; uwf umount ~/uwf >/dev/null 2>&1 || true' EXIT\n\
         export UWF_STORAGE_ROOT=$(mktemp -d)\n\
         uwf workflow put examples/solve-issue.yaml\n\
         sed 's/^name: analyze-topic$/name: new-flow/' examples/analyze-topic.yaml > new-flow.yaml\n",
    );
    let mut edited = false;
    for line in mounting.lines() {
        if line.starts_with("vim ") {
            // Written in place, as vim writes a file it may not rename over.
            script.push_str(
                "sed 's/Resolve an issue end to end/Resolve one issue end to end/' ~/uwf/workflows/solve-issue/workflow.yaml > edited.yaml\n\
                 cat edited.yaml > ~/uwf/workflows/solve-issue/workflow.yaml\n",
            );
            edited = true;
        } else if line.starts_with("uwf umount ") {
            continue;
        } else {
            script.push_str(line);
            script.push('\n');
        }
    }
    assert!(
        edited,
        "the mount's first block edits a workflow:\n{mounting}"
    );
    script.push_str(&tour);
    script.push_str(
        "[ \"$(cat $T/status)\" = done ] || { cat $T/status; exit 1; }\n\
         uwf workflow list --json | grep -q '\"name\":\"new-flow\"'\n\
         [ \"$(uwf workflow history solve-issue --json | wc -l)\" = 2 ]\n\
         [ \"$(uwf thread list --all --json | wc -l)\" = 2 ]\n\
         [ -s ~/snapshot/workflows/solve-issue/workflow.yaml ]   # HOME is where the tour began\n",
    );
    let dir = workspace();
    let out = run_bash(&script, dir.path(), dir.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the mount tour failed ({:?}); the last `+` line is the one that failed:\n{stderr}\nstdout:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout)
    );
}
