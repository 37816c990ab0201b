//! When a role fails (`docs/workflows.md#when-a-role-fails`), through the real binary: `retry: N`
//! runs a failing agent again with the failure in its prompt, `onFailure` publishes a step
//! recording the failure and moves the thread to the named role, and without `onFailure` the thread
//! is left failed.
//!
//! The agents are shell scripts that count their runs, keep what `uwf agent prompt` showed
//! them, and fail (or, in one test, succeed on their second run).

mod common;

use std::path::{Path, PathBuf};

use common::{Env, json, script, start_thread};
use serde_json::Value;

const UWF: &str = env!("CARGO_BIN_EXE_uwf");

/// `work` may fail; `fallback` runs after it did (its prompt quotes the failure); `report`
/// runs after `fallback` only when the step before it recorded a failure.
fn workflow(work_extra: &str) -> String {
    format!(
        r#"name: flaky
roles:
  work:
    goal: Do the work.
{work_extra}    meta:
      type: object
      properties: {{ result: {{ type: string }} }}
      required: [result]
  fallback:
    goal: Recover from the failed work.
    procedure: "The work failed {{{{ steps[-1].error.attempts }}}} times: {{{{ steps[-1].error.message }}}}"
    meta:
      type: object
      properties: {{ recovered: {{ type: boolean }} }}
      required: [recovered]
  report:
    goal: Report the failure.
    meta: {{ type: object }}
conditions:
  afterFailure:
    description: The step before this one recorded its role's failure.
    expression: "$exists(steps[-2].error)"
graph:
  $START: [ {{ role: work, condition: null }} ]
  work: [ {{ role: $END, condition: null }} ]
  fallback:
    - {{ role: report, condition: afterFailure }}
    - {{ role: $END, condition: null }}
  report: [ {{ role: $END, condition: null }} ]
"#
    )
}

/// Registers `yaml` and starts a thread of it.
fn start(env: &Env, yaml: &str) -> String {
    env.ok_stdin(&["workflow", "put", "-"], yaml);
    start_thread(env, "flaky", "do the flaky work")
}

/// An agent that counts its runs in `<dir>/count`, keeps the prompt of run N in
/// `<dir>/prompt-N.md`, then runs `then` (a shell command; `$n` is the run's number).
fn counting_agent(env: &Env, name: &str, then: &str) -> (PathBuf, PathBuf) {
    let dir = env.dir.path().join(format!("{name}.runs"));
    std::fs::create_dir_all(&dir).unwrap();
    let body = format!(
        r#"dir='{dir}'
n=$(cat "$dir/count" 2>/dev/null || echo 0); n=$((n + 1)); echo "$n" > "$dir/count"
'{UWF}' agent prompt "$1" "$2" > "$dir/prompt-$n.md" || exit 9
{then}"#,
        dir = dir.display()
    );
    (script(env, &format!("{name}.sh"), &body), dir)
}

/// An agent that always fails with exit code 3, saying which run it was.
fn failing_agent(env: &Env) -> (PathBuf, PathBuf) {
    counting_agent(
        env,
        "failing",
        "echo \"run $n: the disk is full\" >&2\nexit 3",
    )
}

fn runs(dir: &Path) -> usize {
    // The agent rewrites the file in place: a read between its truncation and its write finds
    // it empty, which is no run counted yet.
    std::fs::read_to_string(dir.join("count"))
        .ok()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

fn prompt(dir: &Path, n: usize) -> String {
    std::fs::read_to_string(dir.join(format!("prompt-{n}.md"))).unwrap()
}

/// `uwf thread step`, with its stdout (JSON) and stderr.
fn step(env: &Env, id: &str, agent: &Path) -> (std::process::Output, String) {
    let out = env.run(&["thread", "step", id, "--agent", agent.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{stderr}");
    (out, stderr)
}

#[test]
fn a_failing_agent_runs_again_with_the_failure_in_its_prompt_then_on_failure_routes() {
    let env = Env::new();
    let id = start(&env, &workflow("    retry: 2\n    onFailure: fallback\n"));
    let (agent, dir) = failing_agent(&env);
    let (out, stderr) = step(&env, &id, &agent);
    assert!(out.status.success(), "{stderr}");

    // Three attempts in all; the second and third were told why the one before failed.
    assert_eq!(runs(&dir), 3);
    assert!(!prompt(&dir, 1).contains("## Previous attempt failed"));
    for n in 2..=3 {
        let p = prompt(&dir, n);
        assert!(
            p.contains("## Previous attempt failed")
                && p.contains(&format!("This is attempt {n} of 3"))
                && p.contains(&format!("run {}: the disk is full", n - 1))
                && p.contains("exited with exit code 3"),
            "prompt {n}:\n{p}"
        );
    }
    // One line per retry and one for the routing, on stderr.
    let retries: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("running its agent again"))
        .collect();
    assert_eq!(retries.len(), 2, "{stderr}");
    assert!(
        retries[0].starts_with("uwf: role `work` of thread")
            && retries[0].contains("(attempt 1 of 3)")
            && retries[0].contains("exited with exit code 3"),
        "{stderr}"
    );
    assert!(
        stderr.contains("failed (3 attempts); onFailure moves the thread to `fallback`"),
        "{stderr}"
    );

    // A step recording the failure was published: the role's, with no output and an error.
    let stepped = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(
        (&stepped["role"], &stepped["done"]),
        (&json("\"work\""), &Value::Bool(false))
    );
    let show = json(&env.ok(&["thread", "show", &id, "--json"]));
    assert_eq!(show["next"], "fallback");
    assert_eq!(show["status"], "active");
    assert_eq!(show["failure"]["role"], "work");
    assert_eq!(show["failure"]["attempts"], 3);
    let message = show["failure"]["message"].as_str().unwrap();
    assert!(
        message.contains("exited with exit code 3") && message.contains("run 3: the disk is full"),
        "{message}"
    );
    let steps = env.ok(&["thread", "steps", &id, "--json"]);
    let first = json(steps.lines().next().unwrap());
    assert_eq!(first["output"], Value::Null);
    assert_eq!(first["error"]["attempts"], 3);
    // Conditions, templates and `thread eval` see it as `steps[-1].error`.
    assert_eq!(
        env.ok(&["thread", "eval", &id, "steps[-1].error.attempts"]),
        "3"
    );
    assert_eq!(env.ok(&["thread", "eval", &id, "steps[-1].output"]), "null");
    let fallback = env.ok(&["agent", "prompt", &id, "fallback"]);
    assert!(
        fallback.contains("The work failed 3 times: agent `")
            && fallback.contains("### 1. work (")
            && fallback.contains("— failed"),
        "{fallback}"
    );
    // The detail holds the error too, with the agent's stderr tail.
    let detail = env.ok(&["thread", "step-details", &format!("{id}:1")]);
    assert!(
        detail.contains("error:") && detail.contains("attempts: 3"),
        "{detail}"
    );
    // The step's log has a header per attempt, and the feed a `retrying` event per retry.
    let log = env.ok(&["thread", "log", &id]);
    assert!(
        log.contains("· work · agent failing.sh (attempt 3 of 3) ·"),
        "{log}"
    );
    assert!(log.contains("uwf: attempt 2 failed: agent `"), "{log}");
    let events = std::fs::read_to_string(env.root().join(format!("runs/{id}.events"))).unwrap();
    assert_eq!(
        events.matches("\"event\":\"retrying\"").count(),
        2,
        "{events}"
    );

    // The thread goes on: fallback, then report (the condition saw `steps[-2].error`), `$END`.
    let run = env.ok(&["thread", "run", &id, "--agent", "dry"]);
    let roles: Vec<Value> = run.lines().map(|l| json(l)["role"].clone()).collect();
    assert_eq!(roles, [json("\"fallback\""), json("\"report\"")], "{run}");
    let show = json(&env.ok(&["thread", "show", &id, "--json"]));
    assert_eq!(show["status"], "done");
    assert!(show.get("failure").is_none(), "{show}");
    // A transcript, a diff and a fork of the failure step all work.
    let read = env.ok(&["thread", "read", &id]);
    assert!(read.contains("### 1. work (") && read.contains("The agent failed 3 times"));
    let diff = env.ok(&["thread", "diff", &format!("{id}:1"), &format!("{id}:2")]);
    assert!(
        diff.contains("-error:\n-  attempts: 3\n") && diff.contains("+recovered: false"),
        "{diff}"
    );
    let fork = json(&env.ok(&["thread", "fork", &format!("{id}:1")]));
    let forked = fork["thread"].as_str().unwrap();
    let show = json(&env.ok(&["thread", "show", forked, "--json"]));
    assert_eq!(show["next"], "fallback");
    assert_eq!(show["failure"]["role"], "work");
    assert!(env.ok(&["cas", "fsck"]).starts_with("ok:"));
}

#[test]
fn thread_run_routes_a_failure_and_runs_on_to_the_end_with_configured_agents() {
    let env = Env::new();
    let (agent, dir) = failing_agent(&env);
    std::fs::write(
        env.root().join("config.yaml"),
        format!(
            "agents:\n  failing: {{ command: '{}' }}\ndefaultAgent: dry\n\
agentOverrides:\n  flaky: {{ work: failing }}\n",
            agent.display()
        ),
    )
    .unwrap();
    let id = start(&env, &workflow("    retry: 1\n    onFailure: fallback\n"));
    let out = env.run(&["thread", "run", &id]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(runs(&dir), 2);
    assert!(
        stderr.contains("onFailure moves the thread to `fallback`"),
        "{stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<Value> = stdout.lines().map(json).collect();
    let roles: Vec<&str> = lines.iter().map(|l| l["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["work", "fallback", "report"], "{stdout}");
    assert_eq!(lines[2]["done"], true);
    let steps = env.ok(&["thread", "steps", &id, "--json"]);
    let agents: Vec<Value> = steps.lines().map(|l| json(l)["agent"].clone()).collect();
    assert_eq!(
        agents,
        [json("\"failing\""), json("\"dry\""), json("\"dry\"")]
    );
    assert_eq!(json(&env.ok(&["thread", "show", &id]))["status"], "done");
}

#[test]
fn without_on_failure_the_thread_is_left_failed_after_the_retries() {
    let env = Env::new();
    let id = start(&env, &workflow("    retry: 1\n"));
    let (agent, dir) = failing_agent(&env);
    let before = json(&env.ok(&["thread", "show", &id]))["head"].clone();
    let (out, stderr) = step(&env, &id, &agent);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(runs(&dir), 2);
    assert!(
        stderr.contains("error: after 2 attempts: agent `")
            && stderr.contains("exited with exit code 3"),
        "{stderr}"
    );
    assert!(!stderr.contains("onFailure"), "{stderr}");
    let show = json(&env.ok(&["thread", "show", &id]));
    assert_eq!(show["head"], before, "a failed step moved the head");
    assert_eq!(show["status"], "failed");
    assert!(
        show["error"]
            .as_str()
            .unwrap()
            .starts_with("after 2 attempts: agent `"),
        "{show}"
    );

    // No `retry`: one attempt, and the message is exactly today's.
    let env = Env::new();
    let id = start(&env, &workflow(""));
    let (agent, dir) = failing_agent(&env);
    let (out, stderr) = step(&env, &id, &agent);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(runs(&dir), 1);
    assert!(
        stderr.ends_with("error: agent `failing.sh` exited with exit code 3\n"),
        "{stderr}"
    );
    assert!(!stderr.contains("attempt"), "{stderr}");
}

#[test]
fn an_agent_that_succeeds_on_its_second_attempt_publishes_one_step() {
    let env = Env::new();
    let id = start(&env, &workflow("    retry: 3\n    onFailure: fallback\n"));
    let (agent, dir) = counting_agent(
        &env,
        "second",
        &format!(
            "if [ \"$n\" = 1 ]; then echo 'not yet' >&2; exit 1; fi\n\
printf -- '---\\nresult: done\\n---\\n' | '{UWF}' agent submit \"$1\" \"$2\" --agent second"
        ),
    );
    let (out, stderr) = step(&env, &id, &agent);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(runs(&dir), 2);
    assert!(prompt(&dir, 2).contains("not yet"));
    assert_eq!(
        stderr.matches("running its agent again").count(),
        1,
        "{stderr}"
    );
    assert!(!stderr.contains("onFailure"), "{stderr}");
    let steps = env.ok(&["thread", "steps", &id, "--json"]);
    assert_eq!(steps.lines().count(), 1, "{steps}");
    let only = json(&steps);
    assert_eq!(only["output"]["result"], "done");
    assert!(only.get("error").is_none(), "{only}");
    let show = json(&env.ok(&["thread", "show", &id]));
    assert_eq!(show["status"], "done");
    assert!(show.get("failure").is_none());
}

#[test]
fn an_in_process_output_that_does_not_fit_the_schema_is_a_failure_and_on_failure_can_end() {
    let env = Env::new();
    let id = start(&env, &workflow("    retry: 1\n    onFailure: $END\n"));
    let canned = env.dir.path().join("bad.yaml");
    std::fs::write(&canned, "work:\n  - { result: 42 }\n").unwrap();
    let agent = format!("uwf agent script --file {}", canned.display());
    let out = env.run(&["thread", "step", &id, "--agent", &agent]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        stderr.matches("running its agent again").count(),
        1,
        "{stderr}"
    );
    assert!(
        stderr.contains("onFailure moves the thread to `$END`"),
        "{stderr}"
    );
    let stepped = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(stepped["done"], true);
    let show = json(&env.ok(&["thread", "show", &id]));
    assert_eq!(show["status"], "done");
    assert_eq!(show["failure"]["attempts"], 2);
    assert!(
        show["failure"]["message"]
            .as_str()
            .unwrap()
            .contains("role `work`"),
        "{show}"
    );
}

#[test]
fn an_agent_that_cannot_start_is_no_role_failure_and_runs_once() {
    let env = Env::new();
    let id = start(&env, &workflow("    retry: 2\n    onFailure: fallback\n"));
    let err = env.fails(&["thread", "step", &id, "--agent", "/no/such/agent"], 1);
    assert!(err.contains("cannot run `/no/such/agent`"), "{err}");
    assert!(
        !err.contains("attempt") && !err.contains("onFailure"),
        "{err}"
    );
    assert_eq!(json(&env.ok(&["thread", "show", &id]))["status"], "failed");
}

#[test]
fn a_kill_or_a_stop_signal_during_an_attempt_ends_the_step_without_another() {
    common::sigint_as_at_a_terminal();
    let env = Env::new();
    let (agent, dir) = counting_agent(&env, "slow", "sleep 30\nexit 4");
    let slow = agent.to_str().unwrap();
    for stop in ["kill", "SIGINT"] {
        std::fs::remove_file(dir.join("count")).ok();
        let id = start(&env, &workflow("    retry: 5\n    onFailure: fallback\n"));
        let child = std::process::Command::new(UWF)
            .args(["thread", "step", &id, "--agent", slow])
            .env("UWF_STORAGE_ROOT", env.root())
            .env("HOME", env.dir.path())
            .current_dir(env.dir.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while runs(&dir) == 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        match stop {
            "kill" => {
                env.ok(&["thread", "kill", &id]);
            }
            _ => nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGINT,
            )
            .unwrap(),
        }
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let (code, said) = match stop {
            "kill" => (1, "was stopped: the thread was killed (`uwf thread kill`)"),
            _ => (130, "interrupted by SIGINT"),
        };
        assert_eq!(out.status.code(), Some(code), "{stop}: {stderr}");
        assert!(stderr.contains(said), "{stop}: {stderr}");
        assert!(
            !stderr.contains("running its agent again"),
            "{stop}: {stderr}"
        );
        assert_eq!(runs(&dir), 1, "{stop}: another attempt ran");
        let show = json(&env.ok(&["thread", "show", &id]));
        assert_eq!(show["steps"], 0, "{stop}: {show}");
    }
}

#[test]
fn retry_and_on_failure_are_checked_at_put_with_their_locations() {
    let env = Env::new();
    let refused = |extra: &str| {
        let out = env
            .uwf()
            .args(["workflow", "put", "-"])
            .write_stdin(workflow(extra))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = refused("    onFailure: fallbak\n");
    assert!(
        err.contains(
            "roles.work.onFailure: `fallbak` is neither a role nor `$END`; did you mean `fallback`?"
        ),
        "{err}"
    );
    for retry in ["-1", "99", "two", "1.5"] {
        let err = refused(&format!("    retry: {retry}\n"));
        assert!(
            err.contains("roles.work.retry: must be a whole number from 0 to 10"),
            "{retry}: {err}"
        );
    }
    assert_eq!(env.ok(&["workflow", "list"]), "");
}
