//! Data-driven checks of workflow validation: every file under `tests/fixtures/workflows/` and
//! `examples/` goes through the real `uwf workflow put`.
//!
//! Invalid fixtures name each expected problem in `# expect: <location>` header lines; the
//! refusal must list exactly those locations. Valid fixtures may name warnings with `# warn:`.

mod common;

use std::path::{Path, PathBuf};

use common::Env;

fn yaml_files(dir: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    files
}

/// The values of `# <key>: value` header lines.
fn header(path: &Path, key: &str) -> Vec<String> {
    let prefix = format!("# {key}:");
    // Lossy: some fixtures are deliberately not UTF-8; their headers are.
    String::from_utf8_lossy(&std::fs::read(path).unwrap())
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix).map(|v| v.trim().to_owned()))
        .collect()
}

/// The locations of the problems listed in a refusal (`  - <location>: <message>`).
fn refused_locations(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("  - "))
        .map(|l| {
            // YAML syntax problems are located as `line L, column C`.
            if l.starts_with("line ") {
                l.split(',').next().unwrap().to_owned()
            } else {
                l.split(": ").next().unwrap().to_owned()
            }
        })
        .collect()
}

#[test]
fn invalid_fixtures_are_refused_with_every_problem_located() {
    let files = yaml_files("tests/fixtures/workflows/invalid");
    assert!(files.len() >= 15, "only {} invalid fixtures", files.len());
    let env = Env::new();
    let mut failures = Vec::new();
    for file in &files {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let mut expected = header(file, "expect");
        assert!(!expected.is_empty(), "{name} has no `# expect:` line");
        let stderr = env.fails(&["workflow", "put", file.to_str().unwrap()], 1);
        assert!(
            stderr.starts_with("error: workflow definition refused"),
            "{name}: {stderr}"
        );
        let mut got = refused_locations(&stderr);
        expected.sort();
        got.sort();
        if got != expected {
            failures.push(format!(
                "{name}: expected {expected:?}, got {got:?}\n{stderr}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(
        env.ok(&["workflow", "list"]),
        "",
        "a refused definition was registered"
    );
}

fn check_valid(dir: &str, min: usize) {
    let files = yaml_files(dir);
    assert!(files.len() >= min, "only {} files in {dir}", files.len());
    let env = Env::new();
    for file in &files {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let out = env.run(&["workflow", "put", file.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name} refused:\n{stderr}");
        let warns = header(file, "warn");
        for warn in &warns {
            assert!(
                stderr.contains(&format!("warning: {warn}:")),
                "{name}: no warning at {warn}:\n{stderr}"
            );
        }
        // No other warning: an example, or a valid fixture, says nothing it does not mean.
        for line in stderr.lines().filter(|l| l.starts_with("warning: ")) {
            assert!(
                warns
                    .iter()
                    .any(|w| line.starts_with(&format!("warning: {w}:"))),
                "{name}: an unexpected warning: {line}"
            );
        }
        let put: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let hash = put["hash"].as_str().unwrap().to_owned();
        // `show` renders YAML that registers to the same hash.
        let shown = env.ok(&["workflow", "show", &hash]);
        let again: serde_json::Value =
            serde_json::from_str(&env.ok_stdin(&["workflow", "put", "-"], &shown)).unwrap();
        assert_eq!(
            again["hash"],
            hash.as_str(),
            "{name}: show does not round-trip:\n{shown}"
        );
        assert_eq!(again["status"], "unchanged", "{name}");
        let graph = env.ok(&["workflow", "graph", &hash]);
        assert!(
            graph.starts_with("flowchart TD") && graph.contains("$END"),
            "{name}: {graph}"
        );
    }
    assert!(env.ok(&["cas", "fsck"]).starts_with("ok:"));
}

#[test]
fn valid_fixtures_register_and_round_trip() {
    check_valid("tests/fixtures/workflows/valid", 5);
}

#[test]
fn examples_register_and_round_trip() {
    check_valid("examples", 4);
}

#[test]
fn docs_examples_show_the_current_graphs() {
    let docs =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/EXAMPLES.md"))
            .unwrap();
    let env = Env::new();
    for file in yaml_files("examples") {
        let put = env.ok(&["workflow", "put", file.to_str().unwrap()]);
        let name = serde_json::from_str::<serde_json::Value>(&put).unwrap()["name"]
            .as_str()
            .unwrap()
            .to_owned();
        let graph = env.ok(&["workflow", "graph", &name]);
        assert!(
            docs.contains(&format!("```mermaid\n{graph}\n```")),
            "docs/EXAMPLES.md is out of date for {name}: run scripts/example-graphs.sh"
        );
    }
}
