//! The thread index's first layout and its migration: a store written by uwf before
//! `index.db` existed (`tests/fixtures/legacy-store/`, made by that version's binary: `threads.yaml`
//! and `history.jsonl`) is converted on first use; a migration killed by `kill -9` at any moment
//! leaves a store that the next command migrates whole; and a damaged or empty index — old or
//! new — is an error, never "no threads" (GC would otherwise delete every thread's nodes).

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use common::{Env, json};

const FIXTURE: &str = "tests/fixtures/legacy-store";

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read fixture") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// An environment whose store is a copy of the first-layout fixture.
fn legacy_env() -> Env {
    let env = Env::new();
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURE),
        &env.root(),
    );
    env
}

/// What the first layout says: thread → (head, archived status or `None`).
fn legacy_entries(root: &Path) -> BTreeMap<String, (String, Option<String>)> {
    let mut out = BTreeMap::new();
    let history = std::fs::read_to_string(root.join("history.jsonl")).expect("history.jsonl");
    for line in history.lines().filter(|l| !l.trim().is_empty()) {
        let v = json(line);
        out.insert(
            v["thread"].as_str().unwrap().to_owned(),
            (
                v["head"].as_str().unwrap().to_owned(),
                Some(v["status"].as_str().unwrap().to_owned()),
            ),
        );
    }
    let threads = std::fs::read_to_string(root.join("threads.yaml")).expect("threads.yaml");
    for line in threads.lines().filter(|l| !l.trim().is_empty()) {
        let (id, head) = line.split_once(": ").expect("id: head");
        out.insert(id.to_owned(), (head.to_owned(), None));
    }
    out
}

/// What `thread list --all --json` says, in the same terms.
fn listed(env: &Env) -> BTreeMap<String, (String, Option<String>)> {
    env.ok(&["thread", "list", "--all", "--json"])
        .lines()
        .map(|line| {
            let v = json(line);
            let status = v["status"].as_str().unwrap().to_owned();
            let archived = matches!(status.as_str(), "done" | "killed").then_some(status);
            (
                v["thread"].as_str().unwrap().to_owned(),
                (v["head"].as_str().unwrap().to_owned(), archived),
            )
        })
        .collect()
}

/// What the thread index says (through the library: listing 20,000 migrated threads through
/// the CLI would work out each one's next role from its nodes, which is not what is tested).
fn indexed(root: &Path) -> BTreeMap<String, (String, Option<String>)> {
    let mut out: BTreeMap<_, _> = uwf::engine::storage::threads::read_history(root)
        .expect("archived threads")
        .into_iter()
        .map(|a| (a.thread, (a.head.to_string(), Some(a.status))))
        .collect();
    for (id, head) in uwf::engine::storage::threads::read_threads(root).expect("active threads") {
        out.insert(id, (head.to_string(), None));
    }
    out
}

#[test]
fn a_store_of_the_first_layout_is_migrated_on_first_use() {
    let env = legacy_env();
    let root = env.root();
    let expected = legacy_entries(&root);
    assert!(
        expected.values().any(|e| e.1.is_none()) && expected.values().any(|e| e.1.is_some()),
        "the fixture has active and archived threads: {expected:?}"
    );
    assert!(!root.join("index.db").exists());

    assert_eq!(listed(&env), expected);
    assert!(root.join("index.db").exists());
    assert!(!root.join("threads.yaml").exists() && !root.join("history.jsonl").exists());
    assert!(root.join("threads.yaml.migrated").exists());
    assert!(root.join("history.jsonl.migrated").exists());
    // Once only: the next command reads the index as it is.
    assert_eq!(listed(&env), expected);

    // Every old root is a root of the new index: nothing is collected, fsck is clean.
    env.ok(&["cas", "gc", "--grace", "0s"]);
    env.ok(&["cas", "fsck"]);

    // The migrated active threads go on, and show their steps and next role.
    for (id, (head, archived)) in &expected {
        let show = json(&env.ok(&["thread", "show", id]));
        assert_eq!(show["head"].as_str(), Some(head.as_str()), "{show}");
        if archived.is_none() {
            let before = show["steps"].as_u64().unwrap();
            let stepped = json(&env.ok(&["thread", "step", id, "--agent", "dry"]));
            assert_ne!(stepped["head"].as_str(), Some(head.as_str()));
            let after = json(&env.ok(&["thread", "show", id]));
            assert_eq!(after["steps"].as_u64(), Some(before + 1), "{after}");
        }
    }
    env.ok(&["cas", "fsck"]);
}

#[test]
fn a_migration_killed_at_any_moment_leaves_a_store_the_next_command_migrates() {
    // A bigger first-layout store: the fixture's active heads under many more ids, so that a
    // migration takes long enough to be cut at many points.
    let template = legacy_env();
    let root = template.root();
    let entries = legacy_entries(&root);
    let mut threads = String::new();
    let mut expected = entries.clone();
    let heads: Vec<&String> = entries
        .values()
        .filter(|e| e.1.is_none())
        .map(|e| &e.0)
        .collect();
    for i in 0..10_000u64 {
        let id = ulid::Ulid::from_parts(1_700_000_000_000 + i, u128::from(i)).to_string();
        let head = heads[i as usize % heads.len()];
        threads.push_str(&format!("{id}: {head}\n"));
        expected.insert(id, (head.clone(), None));
    }
    for (id, (head, archived)) in &entries {
        if archived.is_none() {
            threads.push_str(&format!("{id}: {head}\n"));
        }
    }
    std::fs::write(root.join("threads.yaml"), threads).expect("threads.yaml");

    // The command cut short: any command migrates first; this one then reads one row.
    let some_id = expected.keys().next().unwrap().clone();
    let command = ["thread", "show", some_id.as_str()];
    // How long an uninterrupted migration (and the command) takes here.
    let timing = Env::new();
    copy_dir(&root, &timing.root());
    let started = Instant::now();
    timing.ok(&command);
    let whole = started.elapsed();

    let trials = 16u32;
    let mut cut = 0;
    for trial in 0..trials {
        let env = Env::new();
        copy_dir(&root, &env.root());
        let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("uwf"))
            .args(command)
            .env("UWF_STORAGE_ROOT", env.root())
            .env("HOME", env.dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn uwf");
        // Spread the kills over the whole migration, from its very start to past its end.
        std::thread::sleep(whole.mul_f64(f64::from(trial) / f64::from(trials - 4)));
        let _ = child.kill();
        let status = child.wait().expect("wait");
        if !status.success() {
            cut += 1;
        }
        assert_eq!(indexed(&env.root()), expected, "trial {trial}");
        let leftovers: Vec<String> = std::fs::read_dir(env.root())
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("index.db.tmp-"))
            .collect();
        assert!(leftovers.is_empty(), "trial {trial}: {leftovers:?}");
        env.ok(&["cas", "fsck"]);
    }
    eprintln!("{cut} of {trials} kills landed before the command ended ({whole:?} uncut)");
    assert!(
        cut >= trials / 3,
        "only {cut} of {trials} kills landed mid-run ({whole:?})"
    );
}

#[test]
fn an_empty_or_damaged_index_is_an_error_and_gc_removes_nothing() {
    let count_nodes = |env: &Env| walk_count(&env.root().join("cas/objects"));
    // The first layout: an empty threads.yaml (uwf wrote `{}` for none).
    let env = legacy_env();
    std::fs::write(env.root().join("threads.yaml"), "").unwrap();
    // Opening the store adds the three built-in schemas newer than the fixture (`workflow-v2`,
    // `failure`, `start-v2`); no node may go.
    let nodes = count_nodes(&env) + 3;
    let err = env.fails(&["cas", "gc", "--grace", "0s"], 1);
    assert!(err.contains("threads.yaml is damaged"), "{err}");
    assert!(err.contains("nothing was removed"), "{err}");
    let err = env.fails(&["cas", "fsck"], 1);
    assert!(err.contains("threads.yaml is damaged"), "{err}");
    assert_eq!(count_nodes(&env), nodes);
    assert!(!env.root().join("index.db").exists(), "nothing migrated");

    // The new layout: index.db emptied, or overwritten.
    for bytes in [
        &b""[..],
        b"garbage that is not a database, written over the index file",
    ] {
        let env = Env::new();
        common::put_example(&env, "solve-issue");
        let id = common::start_thread(&env, "solve-issue", "keep my nodes");
        env.ok(&["thread", "step", &id, "--agent", "dry"]);
        let nodes = count_nodes(&env);
        std::fs::write(env.root().join("index.db"), bytes).unwrap();
        for args in [
            &["cas", "gc", "--grace", "0s"][..],
            &["cas", "fsck"],
            &["thread", "list"],
            &["thread", "show", &id],
        ] {
            let err = env.fails(args, 1);
            assert!(err.contains("index.db is damaged"), "{args:?}: {err}");
        }
        assert_eq!(
            count_nodes(&env),
            nodes,
            "gc removed nodes of a damaged index"
        );
    }
}

fn walk_count(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                walk_count(&e.path())
            } else {
                1
            }
        })
        .sum()
}
