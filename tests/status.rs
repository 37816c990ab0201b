//! `uwf status`: what needs a person, section by section, each thread with the command that
//! deals with it — as text on a terminal, as one JSON object in a pipe.

mod common;

use common::{Env, Need, json, start_thread};

const REVIEW: &str = "name: review\nroles:\n  writer:\n    goal: Write.\n    meta: { type: object, properties: { text: { type: string } }, required: [text] }\n  approver:\n    goal: Approve or not.\n    meta: { type: object, properties: { approved: { type: boolean } }, required: [approved] }\ngraph:\n  $START: [ { role: writer, condition: null } ]\n  writer: [ { role: approver, condition: null } ]\n  approver: [ { role: $END, condition: null } ]\n";

/// A store with one thread waiting for a person, one failed, one paused and one done.
fn store() -> (Env, [String; 4]) {
    let env = Env::new();
    env.ok_stdin(&["workflow", "put", "-"], REVIEW);
    let asks = start_thread(&env, "review", "asks");
    env.ok(&["thread", "step", &asks, "--agent", "dry"]);
    env.ok(&["thread", "step", &asks, "--agent", "human"]);
    let failed = start_thread(&env, "review", "fails");
    env.fails(&["thread", "step", &failed, "--agent", "false"], 1);
    let paused = start_thread(&env, "review", "paused");
    env.ok(&["thread", "pause", &paused]);
    let done = start_thread(&env, "review", "done");
    env.ends(&["thread", "run", &done, "--agent", "dry"], 0);
    (env, [asks, failed, paused, done])
}

#[test]
fn status_lists_what_needs_a_person_with_the_command_for_each() {
    let (env, [asks, failed, paused, done]) = store();
    let report = json(&env.ok(&["status"]));
    let ids = |section: &str| -> Vec<String> {
        report[section]["threads"]
            .as_array()
            .unwrap_or(&Vec::new())
            .iter()
            .map(|t| t["thread"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(ids("awaiting"), vec![asks.clone()], "{report}");
    assert_eq!(ids("failed"), vec![failed.clone()], "{report}");
    assert_eq!(ids("paused"), vec![paused.clone()], "{report}");
    assert!(ids("running").is_empty(), "{report}");
    assert!(
        !report.to_string().contains(&done),
        "a done thread needs no one: {report}"
    );
    assert_eq!(
        report["awaiting"]["threads"][0]["command"],
        format!("uwf thread question {asks} && uwf thread answer {asks}")
    );
    assert_eq!(
        report["paused"]["threads"][0]["command"],
        format!("uwf thread resume {paused}")
    );
    // Answered, it needs no one any more.
    env.ok_stdin(&["thread", "answer", &asks], "approved: true\n");
    let report = json(&env.ok(&["status"]));
    assert_eq!(report["awaiting"]["total"], 0, "{report}");
}

#[test]
fn status_reads_as_sections_on_a_terminal() {
    if !common::has(
        "status_reads_as_sections_on_a_terminal",
        &[Need::Tool("script")],
    ) {
        return;
    }
    let (env, [asks, failed, _, _]) = store();
    let text = common::on_terminal(&env, &["status", "--limit", "1"], &[("NO_COLOR", "1")]);
    assert!(text.contains("Waiting for a person (1):"), "{text}");
    assert!(
        text.contains(&format!("→ uwf thread question {asks}")),
        "{text}"
    );
    assert!(
        text.contains("Failed (the last step's error) (1):"),
        "{text}"
    );
    assert!(
        text.contains(&format!("→ uwf thread show {failed}")),
        "{text}"
    );
    assert!(text.contains("Paused (1):"), "{text}");

    let empty = Env::new();
    empty.ok_stdin(&["workflow", "put", "-"], REVIEW);
    let text = common::on_terminal(&empty, &["status"], &[("NO_COLOR", "1")]);
    assert!(text.starts_with("Nothing needs you"), "{text}");
}

/// A step a worker runs shows under "Running" with the worker's machine and pid and the
/// command to watch it, in JSON and on a terminal (issue #41).
#[test]
fn status_names_the_worker_that_runs_a_step() {
    let env = Env::new();
    env.ok_stdin(&["workflow", "put", "-"], REVIEW);
    let id = env.ok(&["thread", "start", "review", "-p", "queued", "--queue", "-q"]);
    let slow = common::script(&env, "slow.sh", "sleep 6; exit 1");
    let mut worker = std::process::Command::new(env!("CARGO_BIN_EXE_uwf"))
        .args(["worker", "--until-idle", "--agent", slow.to_str().unwrap()])
        .env("UWF_STORAGE_ROOT", env.root())
        .env("HOME", env.dir.path())
        .env_remove("WORKFLOW_STORAGE_ROOT")
        .env_remove("UWF_STORAGE_URL")
        .current_dir(env.dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn worker");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let running = loop {
        let report = json(&env.ok(&["status"]));
        let running = report["running"]["threads"][0].clone();
        if running["thread"] == id.as_str() && running.get("worker").is_some() {
            break running;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the worker's step never showed as running: {report}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(running["worker"]["pid"], worker.id(), "{running}");
    assert!(running["worker"]["machine"].is_string(), "{running}");
    assert_eq!(running["command"], format!("uwf live {id}"), "{running}");
    if common::has(
        "status_names_the_worker_that_runs_a_step (terminal)",
        &[Need::Tool("script")],
    ) {
        let text = common::on_terminal(&env, &["status"], &[("NO_COLOR", "1")]);
        assert!(text.contains("Running (1):"), "{text}");
        assert!(
            text.contains("writer on worker ") && text.contains(&format!("(pid {})", worker.id())),
            "{text}"
        );
        assert!(text.contains(&format!("→ uwf live {id}")), "{text}");
    }
    worker
        .wait()
        .expect("the worker ends when its queue is empty");
}
