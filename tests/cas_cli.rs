//! `uwf cas …` driven through the real binary: every command and every bad input (`docs/store.md`).

mod common;

use common::{Env, make_writable};
use serde_json::Value;

const SCHEMA: &str = r#"{"properties":{"a":{"type":"string"},"b":{"type":"integer"}},"required":["a"],"type":"object"}"#;
const DATA: &str = r#"{"a":"héllo\n\"q\"","b":-3,"z":[true,null,0.5,{"x":2,"y":1}]}"#;

/// A schema with a `cas_ref` field, for reference tests.
const LINK_SCHEMA: &str = r#"{"type":"object","properties":{"next":{"type":"string","format":"cas_ref"},"label":{"type":"string"}},"required":["label"]}"#;

#[test]
fn spec_vectors_through_the_cli() {
    let env = Env::new();
    assert_eq!(
        env.ok_stdin(&["cas", "schema", "put", "-"], SCHEMA),
        "827F196W26J4M"
    );
    assert_eq!(
        env.ok(&["cas", "put", "827F196W26J4M", DATA]),
        "298FDNKR7P5MH"
    );
    // The bootstrap node is stored under its hash.
    let meta: Value = serde_json::from_str(&env.ok(&["cas", "get", "F5VV55NBKX1R5"])).unwrap();
    assert_eq!(meta["type"], "0000000000000");
    // Putting the same content again is a no-op with the same hash and the first timestamp.
    let before: Value = serde_json::from_str(&env.ok(&["cas", "get", "298FDNKR7P5MH"])).unwrap();
    let pretty =
        serde_json::to_string_pretty(&serde_json::from_str::<Value>(DATA).unwrap()).unwrap();
    assert_eq!(
        env.ok_stdin(&["cas", "put", "827F196W26J4M", "-"], &pretty),
        "298FDNKR7P5MH"
    );
    let after: Value = serde_json::from_str(&env.ok(&["cas", "get", "298fdnkr7p5mh"])).unwrap();
    assert_eq!(before["timestamp"], after["timestamp"]);
}

#[test]
fn get_prints_node_or_payload() {
    let env = Env::new();
    let h = env.ok(&["cas", "put", "text", "\"hello\""]);
    let node: Value = serde_json::from_str(&env.ok(&["cas", "get", &h])).unwrap();
    assert_eq!(node["payload"], "hello");
    assert_eq!(
        node["type"],
        env.ok(&["cas", "schema", "list"])
            .lines()
            .find(|l| l.ends_with("text"))
            .unwrap()[..13]
    );
    assert!(node["timestamp"].as_u64().unwrap() > 1_700_000_000_000);
    assert_eq!(env.ok(&["cas", "get", &h, "--payload"]), "\"hello\"");
}

#[test]
fn has_answers_with_exit_status() {
    let env = Env::new();
    let h = env.ok(&["cas", "put", "text", "\"x\""]);
    env.ok(&["cas", "has", &h]);
    env.ok(&["cas", "has", &h.to_lowercase()]);
    env.fails(&["cas", "has", "ABCDEFGHJKMNP"], 1);
    let err = env.fails(&["cas", "has", "not-a-hash"], 2);
    assert!(err.contains("invalid hash"), "{err}");
}

#[test]
fn refs_walk_and_list() {
    let env = Env::new();
    let link = env.ok(&["cas", "schema", "put", LINK_SCHEMA]);
    let leaf = env.ok(&["cas", "put", &link, r#"{"label":"leaf"}"#]);
    let mid = env.ok(&[
        "cas",
        "put",
        &link,
        &format!(r#"{{"label":"mid","next":"{leaf}"}}"#),
    ]);
    let top = env.ok(&[
        "cas",
        "put",
        &link,
        &format!(r#"{{"label":"top","next":"{}"}}"#, mid.to_lowercase()),
    ]);

    assert_eq!(env.ok(&["cas", "refs", &top]), format!("{link}\n{mid}"));
    assert_eq!(env.ok(&["cas", "refs", &link]), "F5VV55NBKX1R5");
    let walked: Vec<String> = env
        .ok(&["cas", "walk", &top])
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        walked,
        [
            top.clone(),
            link.clone(),
            mid.clone(),
            "F5VV55NBKX1R5".into(),
            leaf.clone()
        ]
    );

    let mut of_type: Vec<String> = env
        .ok(&["cas", "list", "--type", &link])
        .lines()
        .map(str::to_owned)
        .collect();
    of_type.sort();
    let mut expected = vec![leaf.clone(), mid.clone(), top.clone()];
    expected.sort();
    assert_eq!(of_type, expected);
    let all = env.ok(&["cas", "list"]);
    for h in [&leaf, &mid, &top, &link] {
        assert!(all.contains(h.as_str()));
    }
    // Built-in schemas (9) + the bootstrap + our 4 nodes.
    assert_eq!(all.lines().count(), 10 + 4);
    assert!(env.ok(&["cas", "list", "--type", "step"]).is_empty());
}

#[test]
fn reindex_rebuilds_a_lost_index() {
    let env = Env::new();
    let a = env.ok(&["cas", "put", "text", "\"a\""]);
    let b = env.ok(&["cas", "put", "text", "\"b\""]);
    std::fs::remove_dir_all(env.root().join("cas/index/types")).unwrap();
    std::fs::create_dir_all(env.root().join("cas/index/types")).unwrap();
    assert_eq!(env.ok(&["cas", "list", "--type", "text"]), "");
    assert_eq!(env.ok(&["cas", "reindex"]), "indexed 12 nodes");
    let listed = env.ok(&["cas", "list", "--type", "text"]);
    assert!(listed.contains(&a) && listed.contains(&b), "{listed}");
    assert_eq!(env.ok(&["cas", "schema", "list"]).lines().count(), 10);
}

#[test]
fn schema_commands() {
    let env = Env::new();
    let listed = env.ok(&["cas", "schema", "list"]);
    for name in ["meta", "workflow", "start", "step", "text", "detail"] {
        assert!(listed.contains(name), "{listed}");
    }
    let file = env.dir.path().join("s.json");
    std::fs::write(&file, r#"{"title":"review","type":"object"}"#).unwrap();
    let h = env.ok(&["cas", "schema", "put", file.to_str().unwrap()]);
    assert!(
        env.ok(&["cas", "schema", "list"])
            .contains(&format!("{h}  review"))
    );
    let got: Value = serde_json::from_str(&env.ok(&["cas", "schema", "get", &h])).unwrap();
    assert_eq!(got["title"], "review");
    let step: Value = serde_json::from_str(&env.ok(&["cas", "schema", "get", "step"])).unwrap();
    assert_eq!(step["properties"]["start"]["format"], "cas_ref");
    let text = env.ok(&["cas", "put", "text", "\"x\""]);
    let err = env.fails(&["cas", "schema", "get", &text], 1);
    assert!(err.contains("not a schema node"), "{err}");
}

#[test]
fn built_in_schemas_need_no_store_and_nothing_is_made() {
    let env = Env::new();
    std::fs::remove_dir(env.root()).unwrap();
    // Without a store, the built-ins answer as a fresh store's listing does.
    let without = env.ok(&["cas", "schema", "list"]);
    let step = env.ok(&["cas", "schema", "get", "step"]);
    let meta = env.ok(&["cas", "schema", "get", "meta", "--json"]);
    let quiet = env.ok(&["cas", "schema", "list", "-q"]);
    assert!(!env.root().exists(), "a built-in schema made a store");
    // A schema that is not built in still needs the store, and says so.
    let err = env.fails(&["cas", "schema", "get", "827F196W26J4M"], 1);
    assert!(err.contains("no uwf store at"), "{err}");
    assert!(!env.root().exists());
    env.ok(&["cas", "put", "text", "\"x\""]);
    assert_eq!(without, env.ok(&["cas", "schema", "list"]));
    assert_eq!(quiet, env.ok(&["cas", "schema", "list", "-q"]));
    assert_eq!(step, env.ok(&["cas", "schema", "get", "step"]));
    assert_eq!(meta, env.ok(&["cas", "schema", "get", "meta", "--json"]));
    assert_eq!(without.lines().count(), 10, "{without}");
}

#[test]
fn bad_hashes_and_unknown_nodes() {
    let env = Env::new();
    for args in [
        &["cas", "get", "xyz"][..],
        &["cas", "get", "EYHPV6X8XHTCU"],
        &["cas", "refs", "GGGGGGGGGGGGG"],
        &["cas", "walk", "é"],
    ] {
        let err = env.fails(args, 1);
        assert!(err.starts_with("error: invalid hash"), "{args:?}: {err}");
    }
    let err = env.fails(&["cas", "get", "ABCDEFGHJKMNP"], 1);
    assert!(err.contains("no node ABCDEFGHJKMNP"), "{err}");
    let err = env.fails(&["cas", "walk", "ABCDEFGHJKMNP"], 1);
    assert!(err.contains("no node"), "{err}");
}

#[test]
fn invalid_json_is_located() {
    let env = Env::new();
    let err = env.fails(&["cas", "put", "text", "{\"a\":\n  oops}"], 1);
    assert!(
        err.contains("invalid JSON") && err.contains("line 2"),
        "{err}"
    );
    let err = env.fails(&["cas", "put", "text", "-"], 1);
    assert!(err.contains("no JSON"), "{err}");
}

#[test]
fn payload_failing_its_schema_lists_every_rule() {
    let env = Env::new();
    let s = env.ok(&["cas", "schema", "put", SCHEMA]);
    let err = env.fails(&["cas", "put", &s, r#"{"b":"two","c":1}"#], 1);
    assert!(err.contains("payload does not match schema"), "{err}");
    assert!(err.contains("at /: \"a\" is a required property"), "{err}");
    assert!(
        err.contains("at /b: \"two\" is not of type \"integer\""),
        "{err}"
    );
    assert_eq!(env.ok(&["cas", "list", "--type", &s]), "");
}

#[test]
fn unknown_type_and_non_schema_type() {
    let env = Env::new();
    let err = env.fails(&["cas", "put", "ABCDEFGHJKMNP", "1"], 1);
    assert!(err.contains("unknown type ABCDEFGHJKMNP"), "{err}");
    let text = env.ok(&["cas", "put", "text", "\"x\""]);
    let err = env.fails(&["cas", "put", &text, "1"], 1);
    assert!(err.contains("not a schema node"), "{err}");
    let err = env.fails(&["cas", "put", "nonsense", "1"], 1);
    assert!(err.contains("give a schema hash or one of"), "{err}");
    let err = env.fails(&["cas", "put", "0000000000000", "{}"], 1);
    assert!(err.contains("reserved"), "{err}");
}

#[test]
fn invalid_json_schema_is_refused_with_locations() {
    let env = Env::new();
    let err = env.fails(
        &[
            "cas",
            "schema",
            "put",
            r#"{"type":"strnig","properties":{"a":{"minLength":-1}}}"#,
        ],
        1,
    );
    assert!(err.contains("not a valid JSON Schema"), "{err}");
    assert!(
        err.contains("at /type") && err.contains("at /properties/a/minLength"),
        "{err}"
    );
    let err = env.fails(
        &[
            "cas",
            "put",
            "meta",
            r#"{"$schema":"http://json-schema.org/draft-04/schema#"}"#,
        ],
        1,
    );
    assert!(err.contains("2020-12"), "{err}");
    assert_eq!(env.ok(&["cas", "schema", "list"]).lines().count(), 10);
}

#[test]
fn cas_refs_are_validated_and_must_exist() {
    let env = Env::new();
    let link = env.ok(&["cas", "schema", "put", LINK_SCHEMA]);
    let err = env.fails(
        &["cas", "put", &link, r#"{"label":"x","next":"not a hash"}"#],
        1,
    );
    assert!(err.contains("at /next") && err.contains("cas_ref"), "{err}");
    let err = env.fails(
        &[
            "cas",
            "put",
            &link,
            r#"{"label":"x","next":"ABCDEFGHJKMNP"}"#,
        ],
        1,
    );
    assert!(
        err.contains("field /next refers to ABCDEFGHJKMNP, which is not in the store"),
        "{err}"
    );
}

#[test]
fn corrupt_node_is_a_hash_mismatch_and_fsck_finds_it() {
    let env = Env::new();
    let good = env.ok(&["cas", "put", "text", "\"good\""]);
    let bad = env.ok(&["cas", "put", "text", "\"original\""]);
    assert!(env.ok(&["cas", "fsck"]).starts_with("ok: 12 nodes checked"));

    let path = env.object_path(&bad);
    make_writable(&path);
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("original", "tampered");
    std::fs::write(&path, text).unwrap();

    let err = env.fails(&["cas", "get", &bad], 1);
    assert!(err.contains("hash mismatch"), "{err}");
    env.ok(&["cas", "get", &good]);

    let out = env.run(&["cas", "fsck"]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("{bad}: hash mismatch")),
        "{stdout}"
    );
    assert!(!stdout.contains(&good), "{stdout}");

    // Garbage that is not even JSON, and a stray file, are reported too.
    std::fs::write(&path, "{{{").unwrap();
    std::fs::write(env.root().join("cas/objects/ZZ.txt"), "").unwrap();
    let out = env.run(&["cas", "fsck"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("corrupt: not JSON"), "{stdout}");
    assert!(stdout.contains("stray file"), "{stdout}");
    // Putting the same content again does not paper over the damage.
    let err = env.fails(&["cas", "put", "text", "\"original\""], 1);
    assert!(err.contains("corrupt"), "{err}");
}

#[test]
fn fsck_reports_dangling_refs() {
    let env = Env::new();
    let link = env.ok(&["cas", "schema", "put", LINK_SCHEMA]);
    let leaf = env.ok(&["cas", "put", &link, r#"{"label":"leaf"}"#]);
    let top = env.ok(&[
        "cas",
        "put",
        &link,
        &format!(r#"{{"label":"top","next":"{leaf}"}}"#),
    ]);
    std::fs::remove_file(env.object_path(&leaf)).unwrap();
    let out = env.run(&["cas", "fsck"]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!(
            "{top}: dangling reference: field /next names {leaf}"
        )),
        "{stdout}"
    );
}

#[test]
fn gc_keeps_what_roots_reach_and_removes_the_rest() {
    let env = Env::new();
    let link = env.ok(&["cas", "schema", "put", LINK_SCHEMA]);
    let leaf = env.ok(&["cas", "put", &link, r#"{"label":"leaf"}"#]);
    let kept = env.ok(&[
        "cas",
        "put",
        &link,
        &format!(r#"{{"label":"kept","next":"{leaf}"}}"#),
    ]);
    let garbage = env.ok(&["cas", "put", "text", "\"garbage\""]);
    // A thread head is a root.
    std::fs::write(
        env.root().join("threads.yaml"),
        format!("01JD0000000000000000000000: {kept}\n"),
    )
    .unwrap();

    // A dry run removes nothing.
    let dry = env.ok(&["cas", "gc", "--grace", "0s", "--dry-run"]);
    assert!(dry.contains(&format!("would remove {garbage}")), "{dry}");
    assert!(
        !dry.contains(&format!("remove {kept}")) && !dry.contains(&format!("remove {leaf}")),
        "{dry}"
    );
    env.ok(&["cas", "has", &garbage]);

    // The default grace (24 h) protects a young node.
    let young = env.ok(&["cas", "gc"]);
    assert!(young.contains("removed 0"), "{young}");
    env.ok(&["cas", "has", &garbage]);

    let out = env.ok(&["cas", "gc", "--grace", "0s"]);
    assert!(out.contains(&format!("removed {garbage}")), "{out}");
    env.fails(&["cas", "has", &garbage], 1);
    for h in [&kept, &leaf, &link] {
        env.ok(&["cas", "has", h]);
    }
    // Built-ins survive, the index forgot the removed node, and the store is consistent.
    assert_eq!(env.ok(&["cas", "schema", "list"]).lines().count(), 11);
    assert!(
        !env.ok(&["cas", "list", "--type", "text"])
            .contains(&garbage)
    );
    assert!(env.ok(&["cas", "fsck"]).starts_with("ok:"));
}

#[test]
fn gc_roots_include_registry_history_and_archive() {
    let env = Env::new();
    let a = env.ok(&["cas", "put", "text", "\"current\""]);
    let b = env.ok(&["cas", "put", "text", "\"older\""]);
    let c = env.ok(&["cas", "put", "text", "\"archived\""]);
    let d = env.ok(&["cas", "put", "text", "\"loose\""]);
    std::fs::write(
        env.root().join("registry.yaml"),
        format!("demo:\n  hash: {a}\n  registeredAt: 1\n  history:\n  - hash: {b}\n    registeredAt: 0\n"),
    )
    .unwrap();
    std::fs::write(
        env.root().join("history.jsonl"),
        format!("{{\"thread\":\"t\",\"workflow\":\"{a}\",\"head\":\"{c}\",\"status\":\"done\",\"completedAt\":1}}\n"),
    )
    .unwrap();
    let out = env.ok(&["cas", "gc", "--grace", "0s"]);
    assert!(out.contains(&format!("removed {d}")), "{out}");
    for h in [&a, &b, &c] {
        env.ok(&["cas", "has", h]);
    }
}

#[test]
fn gc_refuses_to_run_on_a_damaged_index() {
    let env = Env::new();
    let h = env.ok(&["cas", "put", "text", "\"live\""]);
    std::fs::write(env.root().join("threads.yaml"), "this: [is not: valid").unwrap();
    let err = env.fails(&["cas", "gc", "--grace", "0s"], 1);
    assert!(
        err.contains("threads.yaml is damaged") && err.contains("nothing was removed"),
        "{err}"
    );
    env.ok(&["cas", "has", &h]);
    let err = env.fails(&["cas", "gc", "--grace", "soon"], 2);
    assert!(err.contains("24h"), "{err}");
}

#[test]
fn unusable_storage_root_is_a_clear_error() {
    let env = Env::new();
    let file = env.dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let out = env
        .uwf()
        .env("UWF_STORAGE_ROOT", file.join("store"))
        .args(["cas", "put", "text", "\"x\""])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("error: storage root") && err.contains("not usable"),
        "{err}"
    );
}

#[test]
fn storage_root_falls_back_to_workflow_storage_root_then_home() {
    let env = Env::new();
    let other = env.dir.path().join("other");
    let out = env
        .uwf()
        .env_remove("UWF_STORAGE_ROOT")
        .env("WORKFLOW_STORAGE_ROOT", &other)
        .args(["cas", "put", "text", "\"w\""])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(other.join("cas/objects").is_dir());
    let out = env
        .uwf()
        .env_remove("UWF_STORAGE_ROOT")
        .args(["cas", "put", "text", "\"h\""])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(env.dir.path().join(".uwf/cas/objects").is_dir());
    // --root wins over everything.
    let flag = env.dir.path().join("flag");
    env.ok(&[
        "--root",
        flag.to_str().unwrap(),
        "cas",
        "put",
        "text",
        "\"f\"",
    ]);
    assert!(flag.join("cas").is_dir());
}

#[test]
fn node_files_are_read_only() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    let h = env.ok(&["cas", "put", "text", "\"ro\""]);
    let mode = std::fs::metadata(env.object_path(&h))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o444);
}

#[test]
fn broken_pipe_is_not_an_error() {
    let env = Env::new();
    // Far more than a pipe buffer holds, so `head` closes the pipe while uwf is still writing.
    let big = format!("\"{}\"", "x".repeat(1 << 20));
    let h = env.ok_stdin(&["cas", "put", "text", "-"], &big);
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "set -o pipefail; '{}' cas get {h} | head -c 10 >/dev/null",
            assert_cmd::cargo::cargo_bin("uwf").display()
        ))
        .env("UWF_STORAGE_ROOT", env.root())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
}

#[test]
fn help_has_examples_for_every_cas_command() {
    let env = Env::new();
    for cmd in [
        "get", "put", "has", "refs", "walk", "list", "reindex", "gc", "fsck",
    ] {
        let help = env.ok(&["cas", cmd, "--help"]);
        assert!(
            help.contains("Example"),
            "uwf cas {cmd} --help has no example:\n{help}"
        );
    }
    for cmd in ["list", "get", "put"] {
        let help = env.ok(&["cas", "schema", cmd, "--help"]);
        assert!(
            help.contains("Example"),
            "uwf cas schema {cmd} --help has no example:\n{help}"
        );
    }
}

/// Retention: `cas gc` removes the logs and event feeds of threads archived longer
/// ago than `--keep-logs`, and keeps those of younger and living threads.
#[test]
fn gc_removes_the_logs_of_threads_archived_long_ago() {
    let env = Env::new();
    let example =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/solve-issue.yaml");
    env.ok(&["workflow", "put", example.to_str().unwrap()]);
    let done = env.ok(&["thread", "start", "solve-issue", "-p", "finished", "-q"]);
    env.ok(&[
        "thread",
        "run",
        &done,
        "--agent",
        "dry",
        "--max-steps",
        "500",
    ]);
    let living = env.ok(&["thread", "start", "solve-issue", "-p", "living", "-q"]);
    env.ok(&["thread", "step", &living, "--agent", "dry"]);
    let log = |id: &str| env.root().join("runs").join(format!("{id}.log"));
    assert!(log(&done).exists() && log(&living).exists());

    let kept = env.ok(&["cas", "gc"]);
    assert!(!kept.contains("logs of"), "{kept}");
    std::thread::sleep(std::time::Duration::from_millis(20));
    let dry = env.ok(&["cas", "gc", "--keep-logs", "0s", "--dry-run"]);
    assert!(dry.contains("would remove the logs of 1 thread "), "{dry}");
    assert!(log(&done).exists());
    let out = env.ok(&["cas", "gc", "--keep-logs", "0s"]);
    assert!(
        out.contains("removed the logs of 1 thread archived more than 0 seconds ago"),
        "{out}"
    );
    assert!(!log(&done).exists());
    assert!(log(&living).exists());
    // The thread itself is untouched.
    let shown = env.ok(&["thread", "show", &done]);
    assert!(shown.contains("\"done\""), "{shown}");
}
