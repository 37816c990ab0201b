//! README.md's 5-minute tour runs as pasted: its first ```sh block after the "A 5-minute tour"
//! heading is taken from README.md as it is, and run line by line in one fresh `bash` (with
//! `uwf` on PATH from this build, a temp HOME and TMPDIR), failing at the first line that fails.

use std::path::Path;
use std::process::Command;

/// The tour's shell block, as written in README.md.
fn tour() -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let after = readme
        .split_once("## A 5-minute tour")
        .expect("README.md has a tour")
        .1;
    let block = after
        .split_once("```sh\n")
        .expect("the tour has a ```sh block")
        .1;
    block
        .split_once("```")
        .expect("the block ends")
        .0
        .to_owned()
}

#[test]
fn every_line_of_the_readme_tour_runs_as_pasted() {
    let tour = tour();
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
