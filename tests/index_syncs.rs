//! What the thread index syncs, traced with strace through the real binary: the command that
//! makes the index's write-ahead log syncs the store's folder before its first commit, and a
//! later command on the same store syncs the log but never the folder (SQLite is built without
//! its own folder sync, which cost one device flush per command; see
//! `src/engine/storage/index_db/connection.rs`).

mod common;

use std::path::Path;
use std::process::Command;

use common::machine::Machine;
use common::{Need, has, json, success_stdout};

/// One traced command: the calls strace saw, one per line.
fn traced(machine: &Machine, args: &[&str]) -> Vec<String> {
    let log = machine.dir.path().join("strace.log");
    let _ = std::fs::remove_file(&log);
    let uwf = machine.uwf();
    let mut cmd = Command::new("strace");
    cmd.args(["-f", "-qq", "-e", "trace=openat,fsync,fdatasync", "-o"])
        .arg(&log)
        .arg(uwf.get_program())
        .args(args)
        .current_dir(machine.dir.path());
    for (key, value) in uwf.get_envs() {
        match value {
            Some(v) => cmd.env(key, v),
            None => cmd.env_remove(key),
        };
    }
    let out = cmd.output().expect("run strace");
    success_stdout(args, &out);
    std::fs::read_to_string(&log)
        .expect("the trace")
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The descriptor an `openat` of `path` returned, and the line it is on.
fn opened(trace: &[String], path: &Path) -> Option<(usize, String)> {
    let quoted = format!("\"{}\"", path.display());
    trace.iter().enumerate().find_map(|(i, line)| {
        let fd = line.contains(&quoted).then(|| line.rsplit("= ").next())??;
        fd.trim().parse::<u32>().ok().map(|fd| (i, fd.to_string()))
    })
}

/// The lines after `from` that sync descriptor `fd` (until it is opened for something else).
fn syncs_of(trace: &[String], from: usize, fd: &str) -> Vec<usize> {
    let call = format!("fsync({fd})");
    let data = format!("fdatasync({fd})");
    trace
        .iter()
        .enumerate()
        .skip(from + 1)
        .take_while(|(_, line)| !(line.contains("openat(") && line.ends_with(&format!("= {fd}"))))
        .filter(|(_, line)| line.contains(&call) || line.contains(&data))
        .map(|(i, _)| i)
        .collect()
}

#[test]
fn the_store_folder_is_synced_when_the_log_is_made_and_not_by_every_command() {
    if !has(
        "the_store_folder_is_synced_when_the_log_is_made_and_not_by_every_command",
        &[Need::Tool("strace")],
    ) {
        return;
    }
    let machine = Machine::new(None, None);
    let root = machine.root();
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    machine.ok(&["workflow", "put", examples.to_str().unwrap(), "-q"]);
    let name = "solve-issue".to_owned();

    // The command that makes the index: its log is new, so the folder is synced before the
    // log's first commit.
    let first = traced(&machine, &["thread", "start", &name, "-p", "one", "--json"]);
    let (log_at, log_fd) = opened(&first, &root.join("index.db-wal")).expect("the log is opened");
    let log_syncs = syncs_of(&first, log_at, &log_fd);
    assert!(!log_syncs.is_empty(), "the start is committed: {first:#?}");
    let folder_syncs: Vec<usize> = first
        .iter()
        .enumerate()
        .skip(log_at)
        .filter_map(|(i, line)| {
            let fd = line
                .contains(&format!("\"{}\"", root.display()))
                .then(|| line.rsplit("= ").next())??;
            syncs_of(&first, i, fd.trim()).first().copied()
        })
        .collect();
    assert!(
        folder_syncs.iter().any(|&s| s < log_syncs[0]),
        "the folder is synced before the first commit in a new log: {first:#?}"
    );

    // Later commands find the log there: they sync it, and never the folder.
    let id = json(&machine.ok(&["thread", "start", &name, "-p", "two", "--json"]))["thread"]
        .as_str()
        .unwrap()
        .to_owned();
    for args in [
        vec!["thread", "start", &name, "-p", "three", "--json"],
        vec!["thread", "step", &id, "--agent", "dry", "--json"],
        vec!["thread", "kill", &id, "--json"],
    ] {
        let trace = traced(&machine, &args);
        let (at, fd) = opened(&trace, &root.join("index.db-wal")).expect("the log is opened");
        assert!(
            !syncs_of(&trace, at, &fd).is_empty(),
            "{args:?} commits: {trace:#?}"
        );
        assert!(
            opened(&trace, &root).is_none_or(|(at, fd)| syncs_of(&trace, at, &fd).is_empty()),
            "{args:?} does not sync the store's folder: {trace:#?}"
        );
    }

    // A log someone deleted is made again, and the folder synced again.
    std::fs::remove_file(root.join("index.db-wal")).unwrap();
    let again = traced(
        &machine,
        &["thread", "start", &name, "-p", "four", "--json"],
    );
    let (at, _) = opened(&again, &root.join("index.db-wal")).expect("the log is opened");
    assert!(
        opened(&again[at..], &root)
            .is_some_and(|(i, fd)| !syncs_of(&again[at..], i, &fd).is_empty()),
        "the folder is synced when the log is made again: {again:#?}"
    );
}
