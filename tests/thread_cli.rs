//! Threads through the real binary: complete runs of the example workflows with the `script`
//! agent, forks, diffs, and every fault of the step cycle.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Env, SOLVE_SCRIPT, json, put_example, script, start_thread};

fn script_agent(env: &Env) -> String {
    let file = env.dir.path().join("solve.yaml");
    std::fs::write(&file, SOLVE_SCRIPT).unwrap();
    format!("uwf agent script --file {}", file.display())
}

fn lines(text: &str) -> Vec<serde_json::Value> {
    text.lines().map(json).collect()
}

#[test]
fn a_reviewer_loop_runs_to_completion_with_the_script_agent() {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let id = start_thread(&env, "solve-issue", "Users are logged out after a minute");
    let agent = script_agent(&env);
    let steps = lines(&env.ok(&["thread", "run", &id, "--agent", &agent]));
    let roles: Vec<&str> = steps.iter().map(|s| s["role"].as_str().unwrap()).collect();
    assert_eq!(
        roles,
        ["planner", "developer", "reviewer", "developer", "reviewer"]
    );
    assert!(steps.last().unwrap()["done"].as_bool().unwrap());
    assert!(steps[..4].iter().all(|s| s["done"] == false));

    let show = json(&env.ok(&["thread", "show", &id]));
    assert_eq!(
        (
            show["status"].as_str(),
            show["next"].as_str(),
            show["done"].as_bool()
        ),
        (Some("done"), Some("$END"), Some(true))
    );
    assert_eq!(show["head"], steps[4]["head"]);

    // The transcript has every step, outputs as YAML and bodies.
    let read = env.ok(&["thread", "read", &id]);
    assert!(
        read.contains("## Task\n\nUsers are logged out after a minute"),
        "{read}"
    );
    assert!(
        read.contains("### 3. reviewer (script)") && read.contains("Please add a test."),
        "{read}"
    );
    assert!(
        read.contains("### 5. reviewer (script)\n\n```yaml\napproved: true"),
        "{read}"
    );

    // Steps list and details.
    let listed = lines(&env.ok(&["thread", "steps", &id]));
    assert_eq!(listed.len(), 5);
    assert_eq!(listed[2]["role"], "reviewer");
    let details = env.ok(&[
        "thread",
        "step-details",
        listed[2]["hash"].as_str().unwrap(),
    ]);
    assert!(
        details.contains("extractedBy: frontmatter") && details.contains("bodyText: |"),
        "{details}"
    );

    // Archived: stepping again is an error naming the status.
    let err = env.fails(&["thread", "step", &id, "--agent", &agent], 1);
    assert!(err.contains("archived (done)"), "{err}");
    assert!(env.ok(&["thread", "list"]).is_empty());
    assert_eq!(lines(&env.ok(&["thread", "list", "--all"])).len(), 1);
    assert!(env.ok(&["cas", "fsck"]).starts_with("ok:"));
}

/// Every file under `dir` (recursively) with its inode number.
fn inodes(dir: &std::path::Path) -> std::collections::BTreeSet<(String, u64)> {
    use std::os::unix::fs::MetadataExt;
    let mut found = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let meta = entry.metadata().unwrap();
        if meta.is_dir() {
            found.extend(inodes(&entry.path()));
        } else {
            found.insert((entry.file_name().into_string().unwrap(), meta.ino()));
        }
    }
    found
}

#[test]
fn a_step_frees_and_allocates_no_inode_for_its_caches_and_run_files() {
    // ext4 without a journal scans past every inode freed in the last minute at each new file,
    // so a step that freed a few inodes slowed every later file creation of the store.
    let env = Env::new();
    put_example(&env, "solve-issue");
    let id = start_thread(&env, "solve-issue", "p");
    let agent = script_agent(&env);
    // Three steps make the spare files; the fourth must only reuse them.
    for _ in 0..3 {
        env.ok(&["thread", "step", &id, "--agent", &agent]);
    }
    let snapshot = |env: &Env| {
        let mut all = inodes(&env.root().join("cache"));
        all.extend(inodes(&env.root().join("runs")));
        all.into_iter()
            .map(|(_, ino)| ino)
            .collect::<std::collections::BTreeSet<_>>()
    };
    let before = snapshot(&env);
    let head = json(&env.ok(&["thread", "step", &id, "--agent", &agent]))["head"].clone();
    assert_eq!(json(&env.ok(&["thread", "show", &id]))["head"], head);
    assert_eq!(
        snapshot(&env),
        before,
        "the step's cache and run files reuse inodes"
    );
    // The last step archives the thread, which needs no spare files any more.
    assert!(json(&env.ok(&["thread", "step", &id, "--agent", &agent]))["done"] == true);
    let spares: Vec<_> = inodes(&env.root().join("cache"))
        .into_iter()
        .filter(|(name, _)| name.ends_with(".spare"))
        .collect();
    assert_eq!(spares, []);
}

#[test]
fn diff_between_two_steps_of_the_same_role() {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let id = start_thread(&env, "solve-issue", "p");
    let steps = lines(&env.ok(&["thread", "run", &id, "--agent", &script_agent(&env)]));
    let (a, b) = (
        steps[1]["head"].as_str().unwrap(),
        steps[3]["head"].as_str().unwrap(),
    );
    let diff = env.ok(&["thread", "diff", a, b]);
    assert!(
        diff.starts_with(&format!("--- a/{a}\n+++ b/{b}\n@@")),
        "{diff}"
    );
    assert!(
        diff.contains("\n-summary: first attempt\n")
            && diff.contains("\n+summary: second attempt\n"),
        "{diff}"
    );
    assert!(diff.contains("+- tests/login.rs"), "{diff}");
    assert!(diff.contains("+Added the missing test."), "{diff}");
    assert_eq!(env.ok(&["thread", "diff", a, a]), "");
}

#[test]
fn fork_from_a_middle_step_leaves_the_source_unchanged() {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let id = start_thread(&env, "solve-issue", "p");
    let agent = script_agent(&env);
    let steps = lines(&env.ok(&["thread", "run", &id, "--agent", &agent]));
    let before = env.ok(&["thread", "read", &id]);

    let middle = steps[2]["head"].as_str().unwrap(); // the first review
    let fork = json(&env.ok(&["thread", "fork", middle]));
    let fid = fork["thread"].as_str().unwrap().to_owned();
    assert_eq!(fork["head"], middle);
    assert_eq!(
        json(&env.ok(&["thread", "show", &fid]))["next"],
        "developer"
    );
    // The fork continues with dry output: a different path from the source.
    let more = lines(&env.ok(&["thread", "run", &fid, "--agent", "dry"]));
    assert_eq!(more[0]["role"], "developer");
    let fork_steps = lines(&env.ok(&["thread", "steps", &fid]));
    assert_eq!(
        fork_steps[..3]
            .iter()
            .map(|s| s["hash"].clone())
            .collect::<Vec<_>>(),
        steps[..3]
            .iter()
            .map(|s| s["head"].clone())
            .collect::<Vec<_>>()
    );
    assert_eq!(
        env.ok(&["thread", "read", &id]),
        before,
        "the source thread changed"
    );

    // A fork from the start node begins again at the first role.
    let start_hash = json(&env.ok(&["cas", "get", middle]))["payload"]["start"]
        .as_str()
        .unwrap()
        .to_owned();
    let again = json(&env.ok(&["thread", "fork", &start_hash]));
    assert_eq!(
        json(&env.ok(&["thread", "show", again["thread"].as_str().unwrap()]))["next"],
        "planner"
    );
    // Forking something that is not a step is refused.
    let text = env.ok(&["cas", "put", "text", "\"x\""]);
    assert!(
        env.fails(&["thread", "fork", &text], 1)
            .contains("not a step or start node")
    );
}

#[test]
fn dry_runs_reach_the_end_for_every_example() {
    let env = Env::new();
    for name in ["solve-issue", "analyze-topic", "develop", "document"] {
        put_example(&env, name);
        let id = start_thread(&env, name, "try the routing");
        let steps = lines(&env.ok(&["thread", "run", &id, "--max-steps", "40"]));
        assert!(
            steps.last().unwrap()["done"].as_bool().unwrap(),
            "{name} did not finish: {steps:?}"
        );
    }
}

#[test]
fn start_errors() {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let err = env.fails(&["thread", "start", "solve-issue", "-p", "  "], 1);
    assert!(err.contains("prompt is empty"), "{err}");
    let err = env.fails(&["thread", "start", "nope", "-p", "x"], 1);
    assert!(err.contains("`nope` is neither"), "{err}");
    let id = json(&env.ok_stdin(
        &["thread", "start", "solve-issue", "-p", "-"],
        "from stdin\n",
    ))["thread"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(env.ok(&["thread", "read", &id]).contains("from stdin"));
    // Unknown threads, and unique prefixes.
    assert!(
        env.fails(&["thread", "step", "01NOPE"], 1)
            .contains("no thread `01NOPE`")
    );
    assert_eq!(
        json(&env.ok(&["thread", "show", &id[..20].to_lowercase()]))["thread"],
        id.as_str()
    );
}

/// Runs `thread step` with an agent command and returns stderr (expects exit 1, head unchanged).
fn failing_step(env: &Env, id: &str, agent: &str) -> String {
    let before = json(&env.ok(&["thread", "show", id]))["head"].clone();
    let err = env.fails(&["thread", "step", id, "--agent", agent], 1);
    let after = json(&env.ok(&["thread", "show", id]));
    assert_eq!(after["head"], before, "a failed step moved the head");
    assert_eq!(after["status"], "failed");
    err
}

#[test]
fn agent_faults_fail_the_step_precisely() {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let id = start_thread(&env, "solve-issue", "p");

    let err = failing_step(&env, &id, "/no/such/agent");
    assert!(err.contains("cannot run `/no/such/agent`"), "{err}");

    let crash = script(&env, "crash.sh", "echo 'about to fail' >&2; exit 3");
    let err = failing_step(&env, &id, crash.to_str().unwrap());
    assert!(
        err.contains("exited with exit code 3") && err.contains("about to fail"),
        "{err}"
    );

    let silent = script(&env, "silent.sh", "true");
    assert!(failing_step(&env, &id, silent.to_str().unwrap()).contains("printed no step hash"));
    let chatty = script(&env, "chatty.sh", "echo 'I did it!'");
    assert!(failing_step(&env, &id, chatty.to_str().unwrap()).contains("`I did it!`"));

    let text = env.ok(&["cas", "put", "text", "\"not a step\""]);
    let err = failing_step(&env, &id, &format!("sh -c 'echo {text}' --"));
    assert!(err.contains("it is a text node, not a step node"), "{err}");

    let unknown = failing_step(&env, &id, "sh -c 'echo ABCDEFGHJKMNP' --");
    assert!(unknown.contains("no such node"), "{unknown}");

    // A valid step, but for another role than the moderator chose.
    let err = failing_step(
        &env,
        &id,
        &format!(
            "sh -c '\"{}\" agent dry \"$1\" reviewer' --",
            env!("CARGO_BIN_EXE_uwf")
        ),
    );
    assert!(
        err.contains("its role is `reviewer`, but the moderator chose `planner`"),
        "{err}"
    );

    // The error file and the status tell the same story.
    let files = env.root().join("runs");
    let error = std::fs::read_to_string(files.join(format!("{id}.error"))).unwrap();
    assert!(error.contains("its role is `reviewer`"), "{error}");

    // After all that, a good step still works.
    let ok = json(&env.ok(&["thread", "step", &id, "--agent", "dry"]));
    assert_eq!(ok["role"], "planner");
    assert_eq!(json(&env.ok(&["thread", "show", &id]))["status"], "active");
}

#[test]
fn steps_with_wrong_start_or_prev_are_rejected() {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let a = start_thread(&env, "solve-issue", "a");
    let s1 = json(&env.ok(&["thread", "step", &a, "--agent", "dry"]))["head"]
        .as_str()
        .unwrap()
        .to_owned();
    let s2 = json(&env.ok(&["thread", "step", &a, "--agent", "dry"]))["head"]
        .as_str()
        .unwrap()
        .to_owned();

    // Another thread's step: wrong start.
    let b = start_thread(&env, "solve-issue", "b");
    let err = failing_step(&env, &b, &format!("sh -c 'echo {s1}' --"));
    assert!(
        err.contains("its start is") && err.contains("but this thread started at"),
        "{err}"
    );

    // Same start (a fork from the start node), but prev points elsewhere.
    let start = json(&env.ok(&["cas", "get", &s1]))["payload"]["start"]
        .as_str()
        .unwrap()
        .to_owned();
    let c = json(&env.ok(&["thread", "fork", &start]))["thread"]
        .as_str()
        .unwrap()
        .to_owned();
    let err = failing_step(&env, &c, &format!("sh -c 'echo {s2}' --"));
    assert!(
        err.contains(&format!("its prev is {s1}, but the head is null")),
        "{err}"
    );
}

#[test]
fn output_failing_the_role_schema_is_refused_and_the_raw_output_kept() {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let id = start_thread(&env, "solve-issue", "p");
    // Through extraction: frontmatter missing a required field.
    let bad = env.dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "planner:\n  - \"---\\nsummary: only a summary\\n---\\nMy plan.\\n\"\n",
    )
    .unwrap();
    let err = failing_step(
        &env,
        &id,
        &format!("uwf agent script --file {}", bad.display()),
    );
    assert!(
        err.contains("does not match the role's schema")
            && err.contains("\"steps\" is a required property"),
        "{err}"
    );
    let raw = err
        .split("text node ")
        .nth(1)
        .unwrap()
        .split(':')
        .next()
        .unwrap()
        .trim()
        .to_owned();
    assert!(
        env.ok(&["cas", "get", &raw, "--payload"])
            .contains("only a summary")
    );

    // A hand-made step whose output node has the wrong type.
    let start = json(&env.ok(&["thread", "show", &id]))["head"]
        .as_str()
        .unwrap()
        .to_owned();
    let text = env.ok(&["cas", "put", "text", "\"plan\""]);
    let detail = env.ok(&[
        "cas",
        "put",
        "detail",
        &format!(r#"{{"raw":"{text}","exitCode":0,"durationMs":1,"stderrTail":""}}"#),
    ]);
    let step = env.ok(&["cas", "put", "step", &format!(
        r#"{{"start":"{start}","prev":null,"role":"planner","output":"{text}","detail":"{detail}","agent":"hand"}}"#
    )]);
    let err = failing_step(&env, &id, &format!("sh -c 'echo {step}' --"));
    assert!(err.contains("not role `planner`'s schema"), "{err}");
}

#[test]
fn no_matching_transition_is_an_error_naming_position_and_conditions() {
    let env = Env::new();
    let wf = r#"
name: strict
roles:
  reviewer: { meta: { type: object, properties: { approved: { type: boolean } }, required: [approved] } }
conditions:
  approved: { expression: "steps[-1].output.approved = true" }
  rejected: { expression: "steps[-1].output.approved = false and $count(steps) > 5" }
graph:
  $START: [ { role: reviewer, condition: null } ]
  reviewer: [ { role: $END, condition: approved }, { role: reviewer, condition: rejected } ]
"#;
    env.ok_stdin(&["workflow", "put", "-"], wf);
    let id = start_thread(&env, "strict", "p");
    let first = json(&env.ok(&["thread", "step", &id]));
    assert_eq!(first["done"], false);
    let err = env.fails(&["thread", "step", &id], 1);
    assert!(
        err.contains("no transition out of `reviewer` matched (tried: approved, rejected)"),
        "{err}"
    );
    // `why` fails as the step does (exit 1, the same error), after showing each condition.
    let out = env.run(&["thread", "why", &id]);
    assert_eq!(out.status.code(), Some(1));
    let why = String::from_utf8_lossy(&out.stdout);
    assert!(
        why.contains("approved `steps[-1].output.approved = true`: = false"),
        "{why}"
    );
    assert!(why.contains("next: none"), "{why}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no transition out of `reviewer` matched (tried: approved, rejected)"),
        "{err}"
    );
    assert_eq!(env.ok(&["thread", "eval", &id, "$count(steps)"]), "1");
}

#[test]
fn agent_timeout_kills_the_process_group() {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let marker = env.dir.path().join("survived");
    let slow = script(
        &env,
        "slow.sh",
        &format!("(sleep 3; touch {}) & sleep 30", marker.display()),
    );
    std::fs::create_dir_all(env.root()).unwrap();
    std::fs::write(
        env.root().join("config.yaml"),
        format!(
            "agents:\n  slow: {{ command: {}, timeout: 1 }}\n",
            slow.display()
        ),
    )
    .unwrap();
    let id = start_thread(&env, "solve-issue", "p");
    let started = Instant::now();
    let err = failing_step(&env, &id, "slow");
    assert!(err.contains("agent `slow` timed out after 1s"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        !marker.exists(),
        "a process of the agent's group survived the timeout"
    );
}

fn spawn_step(env: &Env, id: &str, agent: &str) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_uwf"))
        .args(["thread", "step", id, "--agent", agent])
        .env("UWF_STORAGE_ROOT", env.root())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits until the running step of `id` has started its agent (its run file names the agent's pid).
fn wait_for_agent(env: &Env, id: &str) {
    let run = env.root().join("runs").join(format!("{id}.run.json"));
    wait_for("the step to start its agent", || {
        // The record names the agent once it runs (`"agentPid": null` before).
        std::fs::read_to_string(&run)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .is_some_and(|v| v["agentPid"].is_u64())
    });
}

fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn start_without_a_prompt_is_a_usage_error() {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let err = env.fails(&["thread", "start", "solve-issue"], 2);
    assert!(err.contains("--prompt"), "{err}");
}

#[test]
fn a_second_step_on_a_busy_thread_exits_75_naming_the_holder() {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let id = start_thread(&env, "solve-issue", "p");
    let slow = script(
        &env,
        "slow.sh",
        &format!(
            "sleep 3; exec '{}' agent dry \"$1\" \"$2\"",
            env!("CARGO_BIN_EXE_uwf")
        ),
    );
    let mut first = spawn_step(&env, &id, slow.to_str().unwrap());
    wait_for_agent(&env, &id);
    let started = Instant::now();
    let err = env.fails(&["thread", "step", &id, "--agent", "dry"], 75);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the busy answer was not immediate"
    );
    assert!(
        err.contains(&format!("thread {id} is busy"))
            && err.contains(&format!("process {}", first.id()))
            && err.contains("role planner"),
        "{err}"
    );
    // Both hints, each on its own line, after the message.
    assert!(
        err.contains(&format!("\nhint: wait for it: `uwf thread show {id}`"))
            && err.contains(&format!("\nhint: or stop it: `uwf thread kill {id}`")),
        "{err}"
    );
    assert!(first.wait().unwrap().success());
    assert_eq!(lines(&env.ok(&["thread", "steps", &id])).len(), 1);
}

#[test]
fn kill_9_of_a_step_leaves_the_old_head_and_stops_the_agent() {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let id = start_thread(&env, "solve-issue", "p");
    let head = json(&env.ok(&["thread", "show", &id]))["head"].clone();
    let marker = env.dir.path().join("agent-finished");
    let slow = script(
        &env,
        "slow.sh",
        &format!(
            "sleep 2; touch {}; exec '{}' agent dry \"$1\" \"$2\"",
            marker.display(),
            env!("CARGO_BIN_EXE_uwf")
        ),
    );
    let mut step = spawn_step(&env, &id, slow.to_str().unwrap());
    wait_for_agent(&env, &id);
    step.kill().unwrap(); // SIGKILL
    step.wait().unwrap();
    // The lock went with the process; the head did not move; the index is intact.
    let show = json(&env.ok(&["thread", "show", &id]));
    assert_eq!(show["head"], head);
    assert_ne!(show["status"], "running");
    std::thread::sleep(Duration::from_secs(3));
    assert!(!marker.exists(), "the orphaned agent kept running");
    let next = json(&env.ok(&["thread", "step", &id, "--agent", "dry"]));
    assert_eq!(next["role"], "planner");
    assert!(env.ok(&["cas", "fsck"]).starts_with("ok:"));
}

#[test]
fn kill_9_of_a_step_stops_a_uwf_agent_and_the_command_it_runs() {
    // A `uwf` agent is spawned without a pre-exec hook and arms its parent-death signal itself.
    let env = Env::new();
    put_example(&env, "solve-issue");
    let id = start_thread(&env, "solve-issue", "p");
    let started = env.dir.path().join("started");
    let finished = env.dir.path().join("finished");
    let agent = format!(
        "uwf agent exec --cmd 'touch {}; sleep 2; touch {}'",
        started.display(),
        finished.display()
    );
    let mut step = spawn_step(&env, &id, &agent);
    wait_for("the agent's command to start", || started.exists());
    step.kill().unwrap(); // SIGKILL
    step.wait().unwrap();
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        !finished.exists(),
        "the orphaned agent's command kept running"
    );
    assert_eq!(json(&env.ok(&["thread", "show", &id]))["status"], "active");
}

#[test]
fn thread_kill_stops_a_running_step_and_archives_the_thread() {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let id = start_thread(&env, "solve-issue", "p");
    let slow = script(&env, "slow.sh", "sleep 30");
    let mut step = spawn_step(&env, &id, slow.to_str().unwrap());
    wait_for_agent(&env, &id);
    let started = Instant::now();
    let killed = json(&env.ok(&["thread", "kill", &id]));
    assert_eq!(killed["status"], "killed");
    assert!(started.elapsed() < Duration::from_secs(8));
    assert!(!step.wait().unwrap().success());
    assert_eq!(json(&env.ok(&["thread", "show", &id]))["status"], "killed");
    assert!(
        env.fails(&["thread", "step", &id], 1)
            .contains("archived (killed)")
    );
    assert!(
        env.fails(&["thread", "kill", &id], 1)
            .contains("archived (killed)")
    );
    // An idle thread is killed at once.
    let idle = start_thread(&env, "solve-issue", "q");
    assert_eq!(
        json(&env.ok(&["thread", "kill", &idle]))["status"],
        "killed"
    );
}

#[test]
fn a_corrupted_thread_index_is_named_never_dropped() {
    // The index, and a first-layout `threads.yaml` not migrated yet.
    for (file, damage) in [
        (
            "index.db",
            "this is not a database, it was overwritten by accident".to_owned(),
        ),
        ("threads.yaml", "01JD8X: [not a hash\n".to_owned()),
    ] {
        let env = Env::new();
        put_example(&env, "solve-issue");
        let id = start_thread(&env, "solve-issue", "p");
        for name in ["index.db", "index.db-wal", "index.db-shm"] {
            let _ = std::fs::remove_file(env.root().join(name));
        }
        std::fs::write(env.root().join(file), &damage).unwrap();
        for args in [
            &["thread", "list"][..],
            &["thread", "step", &id],
            &["thread", "start", "solve-issue", "-p", "x"],
        ] {
            let err = env.fails(args, 1);
            assert!(
                err.contains(&format!("{file} is damaged")),
                "{args:?}: {err}"
            );
        }
        // Nothing rewrote the file behind the user's back.
        assert_eq!(
            std::fs::read_to_string(env.root().join(file)).unwrap(),
            damage
        );
    }
}

#[test]
fn the_agent_kit_prompt_and_submit() {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let id = start_thread(&env, "solve-issue", "Fix the login bug");
    env.ok(&["thread", "step", &id, "--agent", "dry"]);
    let prompt = env.ok(&["agent", "prompt", &id, "developer"]);
    assert!(prompt.starts_with("## Output format"), "{prompt}");
    assert!(prompt.contains("\"testsPassing\""), "{prompt}");
    assert!(
        prompt.contains("You are the `developer` role of the `solve-issue` workflow"),
        "{prompt}"
    );
    assert!(
        prompt.contains("## Task\n\nFix the login bug") && prompt.contains("### 1. planner (dry)"),
        "{prompt}"
    );
    let short = env.ok(&["agent", "prompt", &id, "developer", "--quota", "10"]);
    assert!(short.contains("1 earlier step left out"), "{short}");

    // A shell-script agent built from the kit.
    let agent = script(
        &env,
        "kit-agent.sh",
        &format!(
            "uwf='{}'\n\"$uwf\" agent prompt \"$1\" \"$2\" > /dev/null\nprintf -- '---\\nfilesChanged: [a.rs]\\nsummary: done\\ntestsPassing: true\\n---\\nAll green.\\n' | \"$uwf\" agent submit \"$1\" \"$2\" --agent kit-agent",
            env!("CARGO_BIN_EXE_uwf")
        ),
    );
    let step = json(&env.ok(&["thread", "step", &id, "--agent", agent.to_str().unwrap()]));
    assert_eq!(step["role"], "developer");
    let listed = lines(&env.ok(&["thread", "steps", &id]));
    assert_eq!(listed[1]["agent"], "kit-agent");
    let err = env.fails_stdin(
        &["agent", "submit", &id, "reviewer", "--agent", "x"],
        "no structure here",
    );
    assert!(
        err.contains("no YAML frontmatter") && err.contains("raw output is kept as text node"),
        "{err}"
    );
}

#[test]
fn exec_agent_runs_a_template_through_extraction() {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let id = start_thread(&env, "solve-issue", "Fix it");
    let cmd = "uwf agent exec --cmd 'grep -q \"Fix it\" {prompt_file} && echo \"{\\\"summary\\\": \\\"from {role}\\\", \\\"steps\\\": [\\\"one\\\"]}\"'";
    let step = json(&env.ok(&["thread", "step", &id, "--agent", cmd]));
    assert_eq!(step["role"], "planner");
    let out = env.ok(&["thread", "read", &id]);
    assert!(out.contains("summary: from planner"), "{out}");
    let failing = "uwf agent exec --cmd 'echo partial work; echo oops >&2; exit 4'";
    let err = failing_step(&env, &id, failing);
    assert!(
        err.contains("exited with") && err.contains("oops") && err.contains("kept as text node"),
        "{err}"
    );
}

const ASK: &str = "name: ask\nroles:\n  writer:\n    meta: { type: object, properties: { text: { type: string } }, required: [text] }\n  approver:\n    meta: { type: object, properties: { approved: { type: boolean } }, required: [approved] }\ngraph:\n  $START: [ { role: writer, condition: null } ]\n  writer: [ { role: approver, condition: null } ]\n  approver: [ { role: $END, condition: null } ]\n";

/// The exit code of `uwf` with `args`, and its stdout and stderr.
fn ended(env: &Env, args: &[&str]) -> (Option<i32>, String, String) {
    let out = env.run(args);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `thread run`, `uwf run` and `uwf live` exit with a code a script can branch on
/// (`docs/cli.md#exit-codes`): 0 done (also when it already was), 3 still active after
/// `--max-steps`, 4 waiting for a person, 5 a step failed, 6 killed.
#[test]
fn run_and_live_exit_with_how_the_thread_ended() {
    let env = Env::new();
    env.ok_stdin(&["workflow", "put", "-"], ASK);
    // Still active after --max-steps: 3.
    let id = start_thread(&env, "ask", "go");
    let (code, out, err) = ended(
        &env,
        &["thread", "run", &id, "--agent", "dry", "--max-steps", "1"],
    );
    assert_eq!(code, Some(3), "{out}{err}");
    assert!(err.contains("still active"), "{err}");
    // Done: 0; run again, still 0, saying it is already done and running nothing.
    env.ok(&["thread", "run", &id, "--agent", "dry"]);
    let (code, out, err) = ended(&env, &["thread", "run", &id, "--agent", "dry"]);
    assert_eq!((code, out.as_str()), (Some(0), ""), "{err}");
    assert!(err.contains("is already done"), "{err}");
    // A step failed: 5, with its error.
    let failing = start_thread(&env, "ask", "fail");
    let (code, out, err) = ended(&env, &["thread", "run", &failing, "--agent", "false"]);
    assert_eq!(code, Some(5), "{out}{err}");
    assert!(err.starts_with("error: "), "{err}");
    let (code, out, _) = ended(&env, &["live", &failing]);
    assert_eq!(code, Some(5), "{out}");
    assert!(out.contains("failed"), "{out}");
    // Killed: 6, for run and live.
    env.ok(&["thread", "kill", &failing]);
    let (code, _, err) = ended(&env, &["thread", "run", &failing, "--agent", "dry"]);
    assert_eq!(code, Some(6), "{err}");
    assert!(err.contains("killed"), "{err}");
    assert_eq!(ended(&env, &["live", &failing]).0, Some(6));
    // Waiting for a person: 4, for `uwf run` (start, then run) and live.
    std::fs::write(
        env.root().join("config.yaml"),
        "defaultAgent: dry\nagentOverrides:\n  ask: { approver: human }\n",
    )
    .unwrap();
    let (code, out, err) = ended(&env, &["run", "ask", "-p", "ask someone"]);
    assert_eq!(code, Some(4), "{out}{err}");
    assert!(err.contains("waiting for a person"), "{err}");
    let asked = json(out.lines().last().unwrap());
    assert_eq!(asked["awaiting"], true);
    let thread = asked["thread"].as_str().unwrap().to_owned();
    assert_eq!(ended(&env, &["live", &thread]).0, Some(4));
    env.ok_stdin(&["thread", "answer", &thread], "approved: true");
    assert_eq!(ended(&env, &["live", &thread]).0, Some(0));
}

/// `uwf run` (start, then run) exits as `thread run` does: 0 done, 3 still active after
/// `--max-steps`, 5 a step failed (`docs/cli.md#exit-codes`; 4 is in the test above).
#[test]
fn uwf_run_exits_with_how_the_thread_ended() {
    let env = Env::new();
    env.ok_stdin(&["workflow", "put", "-"], ASK);
    let (code, out, err) = ended(&env, &["run", "ask", "-p", "done", "--agent", "dry"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(json(out.lines().last().unwrap())["done"], true, "{out}");
    let (code, out, err) = ended(
        &env,
        &[
            "run",
            "ask",
            "-p",
            "one step",
            "--agent",
            "dry",
            "--max-steps",
            "1",
        ],
    );
    assert_eq!(code, Some(3), "{out}{err}");
    assert!(err.contains("still active"), "{err}");
    let (code, out, err) = ended(&env, &["run", "ask", "-p", "fails", "--agent", "false"]);
    assert_eq!(code, Some(5), "{out}{err}");
    assert!(
        err.starts_with("error: ") || err.contains("\nerror: "),
        "{err}"
    );
}

/// A running step stopped by `uwf thread kill` says it was stopped by the kill, not only
/// "exited with signal 15"; the kill names who asked for it (`--by`) in `thread show` and
/// `thread log`, and the thread counts as killed, not failed (issue #41).
#[test]
fn a_step_stopped_by_a_kill_says_so_and_who_asked() {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let id = start_thread(&env, "solve-issue", "p");
    let slow = script(&env, "slow.sh", "sleep 30");
    let step = spawn_step(&env, &id, slow.to_str().unwrap());
    wait_for_agent(&env, &id);
    env.ok(&["thread", "kill", &id, "--by", "zed"]);
    let out = step.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("was stopped: the thread was killed (`uwf thread kill`)"),
        "{err}"
    );
    assert!(!err.contains("signal 15"), "{err}");
    let show = json(&env.ok(&["thread", "show", &id]));
    assert_eq!(show["status"], "killed", "{show}");
    assert_eq!(
        (
            show["lastAction"]["event"].clone(),
            show["lastAction"]["by"].clone()
        ),
        ("killed".into(), "zed".into()),
        "{show}"
    );
    let log = env.ok(&["thread", "log", &id]);
    assert!(log.contains("── killed by zed · "), "{log}");
    let failed = env.ok(&["thread", "list", "--all", "--status", "failed", "-q"]);
    assert!(
        !failed.contains(&id),
        "a killed thread listed as failed: {failed}"
    );
}
