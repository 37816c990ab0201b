//! Live progress (`docs/agents.md#watching-a-thread-live`) through the real binary: the thread log
//! only grows, with a header per step, and `uwf thread live` in another process shows an agent's
//! output while it runs.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{Env, json, put_example, script, start_thread};

fn spawn_uwf(env: &Env, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_uwf"))
        .args(args)
        .env_remove("WORKFLOW_STORAGE_ROOT")
        .env("UWF_STORAGE_ROOT", env.root())
        .env("HOME", env.dir.path())
        .current_dir(env.dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn uwf")
}

/// Reads `child`'s stdout lines on a thread, each with the time it arrived.
fn lines_of(child: &mut Child, since: Instant) -> mpsc::Receiver<(Duration, String)> {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send((since.elapsed(), line)).is_err() {
                break;
            }
        }
    });
    rx
}

/// An agent that prints a line, sleeps `secs`, prints another, then plays the role with `dry`.
fn slow_agent(env: &Env, secs: u32) -> String {
    script(
        env,
        "slow.sh",
        &format!(
            "echo \"first line from $2\" >&2\nsleep {secs}\necho \"second line from $2\" >&2\nexec '{}' agent dry \"$1\" \"$2\"",
            env!("CARGO_BIN_EXE_uwf")
        ),
    )
    .display()
    .to_string()
}

fn wait_running(env: &Env, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while json(&env.ok(&["thread", "show", id]))["status"] != "running" {
        assert!(Instant::now() < deadline, "the step never started");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn live_shows_the_running_agent_output_before_the_agent_ends() {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let id = start_thread(&env, "solve-issue", "Users are logged out after one minute");
    let agent = slow_agent(&env, 3);
    let started = Instant::now();
    let mut step = spawn_uwf(&env, &["thread", "step", &id, "--agent", &agent]);
    wait_running(&env, &id);
    let mut live = spawn_uwf(&env, &["thread", "live", &id, "--once"]);
    let lines = lines_of(&mut live, started);
    let mut seen = Vec::new();
    let first_at = loop {
        let (at, line) = lines
            .recv_timeout(Duration::from_secs(20))
            .expect("live printed the first line");
        seen.push(line.clone());
        if line == "first line from planner" {
            break at;
        }
    };
    // The agent sleeps 3 s after its first line: live printed it well before the step ended.
    let step_status = step.wait().unwrap();
    let step_ended = started.elapsed();
    assert!(step_status.success());
    assert!(
        first_at + Duration::from_millis(1500) < step_ended,
        "first line at {first_at:?}, step ended at {step_ended:?}"
    );
    assert!(
        seen[0].starts_with("── step 1 · planner · agent slow.sh · "),
        "{seen:?}"
    );
    // Then the second line and one line for the finished step; --once ends there.
    let rest: Vec<String> = lines.iter().map(|(_, l)| l).collect();
    assert!(live.wait().unwrap().success());
    assert!(
        rest.contains(&"second line from planner".to_owned()),
        "{rest:?}"
    );
    assert!(
        rest.iter()
            .any(|l| l.starts_with("✓ step 1 · planner · agent slow.sh → ")),
        "{rest:?}"
    );
}

#[test]
fn live_follows_a_whole_run_to_its_end_and_the_log_only_grows() {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let id = start_thread(&env, "solve-issue", "p");
    let agent = slow_agent(&env, 0);
    let started = Instant::now();
    let mut live = spawn_uwf(&env, &["live", &id]);
    let lines = lines_of(&mut live, started);
    std::thread::sleep(Duration::from_millis(300));
    env.ok(&["thread", "run", &id, "--agent", &agent]);
    assert!(live.wait().unwrap().success());
    let all: Vec<String> = lines.iter().map(|(_, l)| l).collect();
    let finished = all.iter().filter(|l| l.starts_with("✓ step ")).count();
    assert_eq!(finished, 7, "{all:#?}");
    assert_eq!(
        all.last().unwrap(),
        &format!("thread {id} is done"),
        "{all:#?}"
    );
    // One order: each step's line before the next step's header, with the header's agent;
    // no bare hash lines (the agent's printed step hash is in the step's line).
    let at = |prefix: &str| all.iter().position(|l| l.starts_with(prefix));
    for k in 1..7 {
        let done = at(&format!("✓ step {k} · ")).expect("a line per step");
        let next = at(&format!("── step {} · ", k + 1)).expect("a header per step");
        assert!(
            done < next,
            "step {k}'s line after step {}'s header: {all:#?}",
            k + 1
        );
    }
    assert!(
        all.iter()
            .filter(|l| l.starts_with("✓ step "))
            .all(|l| l.contains(" · agent slow.sh → ")),
        "{all:#?}"
    );
    assert!(
        !all.iter()
            .any(|l| l.len() == 13 && uwf::cas::Hash::parse(l).is_ok()),
        "{all:#?}"
    );
    // The log holds every step, in order, each under its header.
    let log = std::fs::read_to_string(env.root().join("runs").join(format!("{id}.log"))).unwrap();
    let headers: Vec<&str> = log.lines().filter(|l| l.starts_with("── step ")).collect();
    assert_eq!(headers.len(), 7, "{log}");
    for (i, h) in headers.iter().enumerate() {
        assert!(h.starts_with(&format!("── step {} · ", i + 1)), "{h}");
    }
    assert_eq!(log.matches("first line from developer").count(), 3);
}

#[test]
fn live_on_an_idle_thread_with_once_says_so_and_ends() {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let id = start_thread(&env, "solve-issue", "p");
    let out = env.ok(&["thread", "live", &id, "--once"]);
    assert_eq!(
        out,
        format!("no step is running on thread {id} (next: planner)")
    );
}
