//! Issue #27 item 6: every input read from stdin or a named file (`cas put -`, `thread start
//! -p -`, `thread answer -f`, `agent submit`, `eval --input`) is capped (16 MiB by default,
//! `maxInput` in config.yaml, `UWF_MAX_INPUT`), endless input is refused after the limit
//! instead of filling memory, and a refused input stores nothing.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Env, json, start_thread};

const GATE: &str = "name: gate\nroles:\n  writer:\n    meta: { type: object, properties: { text: { type: string } }, required: [text] }\n  approver:\n    meta: { type: object, properties: { approved: { type: boolean } }, required: [approved] }\ngraph:\n  $START: [ { role: writer, condition: null } ]\n  writer: [ { role: approver, condition: null } ]\n  approver: [ { role: $END, condition: null } ]\n";

/// Runs `uwf args…` with stdin read from `stdin` (a path such as `/dev/zero`), within 60 s.
fn run_with_stdin(env: &Env, args: &[&str], stdin: &str, vars: &[(&str, &str)]) -> (i32, String) {
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_uwf"))
        .args(args)
        .env_remove("UWF_MAX_INPUT")
        .env("UWF_STORAGE_ROOT", env.root())
        .env("HOME", env.dir.path())
        .envs(vars.iter().copied())
        .current_dir(env.dir.path())
        .stdin(Stdio::from(std::fs::File::open(stdin).unwrap()))
        .output()
        .expect("run uwf");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "uwf {args:?} took {:?}",
        started.elapsed()
    );
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{stderr}");
    (out.status.code().unwrap_or(-1), stderr)
}

/// How many nodes the store holds.
fn nodes(env: &Env) -> usize {
    env.ok(&["cas", "list"]).lines().count()
}

fn gate_env(config: &str) -> Env {
    let env = Env::new();
    env.ok_stdin(&["workflow", "put", "-"], GATE);
    std::fs::write(
        env.root().join("config.yaml"),
        format!("agentOverrides:\n  gate: {{ approver: human }}\n{config}"),
    )
    .unwrap();
    env
}

#[test]
fn endless_stdin_is_refused_at_the_default_limit_and_stores_nothing() {
    let env = gate_env("");
    let before = nodes(&env);
    let (code, err) = run_with_stdin(&env, &["cas", "put", "text", "-"], "/dev/zero", &[]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("error: stdin is more than 16777216 bytes; an input has at most 16 MiB"),
        "{err}"
    );
    assert!(
        err.contains("UWF_MAX_INPUT=64MiB") && err.contains("maxInput"),
        "{err}"
    );
    // The same for a prompt, an agent's output and eval's input.
    let (code, err) = run_with_stdin(
        &env,
        &["thread", "start", "gate", "-p", "-"],
        "/dev/zero",
        &[],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("stdin is more than 16777216 bytes"), "{err}");
    assert_eq!(env.ok(&["thread", "list"]), "", "no thread was started");
    let id = start_thread(&env, "gate", "Write it");
    let (code, err) = run_with_stdin(
        &env,
        &["agent", "submit", &id, "writer", "--agent", "bot"],
        "/dev/zero",
        &[],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("stdin is more than 16777216 bytes"), "{err}");
    let (code, err) = run_with_stdin(&env, &["eval", "1", "--input", "-"], "/dev/zero", &[]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("stdin is more than 16777216 bytes"), "{err}");
    // Only the thread's start node (and its prompt) came in.
    assert_eq!(nodes(&env), before + 1, "{}", env.ok(&["cas", "list"]));
}

#[test]
fn a_refused_answer_stores_nothing_and_the_limit_is_configurable() {
    let env = gate_env("maxInput: 1MiB\n");
    let id = start_thread(&env, "gate", "Write it");
    // Waiting for a person: exit 4.
    env.ends(&["thread", "run", &id], 4);
    assert_eq!(
        json(&env.ok(&["thread", "show", &id]))["status"],
        "awaiting"
    );
    let before = nodes(&env);
    // A 3 MiB answer in a file: its real size and the configured limit.
    let big = env.dir.path().join("answer.md");
    let mut text = "---\napproved: true\n---\n".to_owned();
    text.push_str(&"x".repeat(3 << 20));
    std::fs::write(&big, &text).unwrap();
    let file = big.to_str().unwrap();
    let err = env.fails(&["thread", "answer", &id, "-f", file], 1);
    assert!(
        err.contains(&format!(
            "{file} is {} bytes; an input has at most 1 MiB (1048576 bytes)",
            text.len()
        )),
        "{err}"
    );
    let err = env.fails(&["thread", "answer", &id, "-f", "/dev/zero"], 1);
    assert!(
        err.contains("/dev/zero is more than 1048576 bytes"),
        "{err}"
    );
    let (code, err) = run_with_stdin(&env, &["thread", "answer", &id, "-"], "/dev/zero", &[]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("stdin is more than 1048576 bytes"), "{err}");
    assert_eq!(nodes(&env), before, "a refused answer stored nothing");
    assert_eq!(
        json(&env.ok(&["thread", "show", &id]))["status"],
        "awaiting"
    );
    // The environment wins over config.yaml; under the limit the answer goes through.
    let (code, err) = run_with_stdin(
        &env,
        &["thread", "answer", &id, "-f", file],
        "/dev/null",
        &[("UWF_MAX_INPUT", "4MiB")],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&env.ok(&["thread", "show", &id]))["status"], "done");
    // A limit that is not a size is refused with its name.
    let (code, err) = run_with_stdin(
        &env,
        &["cas", "put", "text", "-"],
        "/dev/null",
        &[("UWF_MAX_INPUT", "lots")],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("UWF_MAX_INPUT=lots is not a size"), "{err}");
}
