//! What a person at a terminal sees, under a pseudo-terminal (`script` from util-linux):
//! coloured errors and diffs (never with `NO_COLOR` or `--color=never`, always with
//! `--color=always`), and long output through `$PAGER` (not with `--no-pager`, nor into a
//! pipe).

mod common;

use common::{Env, Need, put_example, start_thread};

const RED_ERROR: &str = "\x1b[1;31merror:\x1b[0m";

/// Runs `uwf args…` on a pseudo-terminal; long output goes through a pager that marks it.
fn on_terminal(env: &Env, args: &[&str], extra_env: &[(&str, &str)]) -> String {
    let mut vars = vec![("PAGER", "sed s/^/PAGED:/")];
    vars.extend_from_slice(extra_env);
    common::on_terminal(env, args, &vars)
}

#[test]
fn errors_and_diffs_are_coloured_on_a_terminal_unless_told_not_to() {
    if !common::has(
        "errors_and_diffs_are_coloured_on_a_terminal_unless_told_not_to",
        &[Need::Tool("script")],
    ) {
        return;
    }
    let env = Env::new();
    put_example(&env, "solve-issue");
    let missing = ["thread", "show", "01ZZZZZZZZZZZZZZZZZZZZZZZZ"];
    let coloured = on_terminal(&env, &missing, &[]);
    assert!(coloured.contains(RED_ERROR), "{coloured:?}");
    let plain = on_terminal(&env, &missing, &[("NO_COLOR", "1")]);
    assert!(
        plain.contains("error:") && !plain.contains('\x1b'),
        "{plain:?}"
    );
    let never = on_terminal(&env, &["--color", "never", "thread", "show", "nope"], &[]);
    assert!(
        never.contains("error:") && !never.contains('\x1b'),
        "{never:?}"
    );
    // Into a pipe: plain, unless asked.
    let piped = env.run(&missing);
    assert!(!String::from_utf8_lossy(&piped.stderr).contains('\x1b'));
    let always = env.run(&[
        "--color=always",
        "thread",
        "show",
        "01ZZZZZZZZZZZZZZZZZZZZZZZZ",
    ]);
    assert!(String::from_utf8_lossy(&always.stderr).contains(RED_ERROR));

    // doctor: a failed check in red, a passed one in green.
    std::fs::write(
        env.root().join("config.yaml"),
        "agents: { broken: { command: /no/such } }\n",
    )
    .unwrap();
    let doctor = on_terminal(
        &env,
        &["doctor", "--skip", "fuse", "--skip", "storage"],
        &[],
    );
    assert!(
        doctor.contains("\x1b[1;31mFAIL\x1b[0m agent broken"),
        "{doctor:?}"
    );
    assert!(doctor.contains("\x1b[32mok  \x1b[0m"), "{doctor:?}");
    std::fs::remove_file(env.root().join("config.yaml")).unwrap();

    // A diff: added lines green, removed lines red.
    let id = start_thread(&env, "solve-issue", "p");
    // Still active after two steps: exit 3 (`docs/cli.md#exit-codes`).
    let run = env.run(&["thread", "run", &id, "--agent", "dry", "--max-steps", "2"]);
    assert_eq!(run.status.code(), Some(3), "{run:?}");
    let diff = on_terminal(
        &env,
        &["thread", "diff", &format!("{id}:1"), &format!("{id}:2")],
        &[("PAGER", "cat")],
    );
    assert!(diff.contains("\x1b[32m+"), "{diff:?}");
    assert!(diff.contains("\x1b[1;31m-"), "{diff:?}");
    let piped = env.ok(&["thread", "diff", &format!("{id}:1"), &format!("{id}:2")]);
    assert!(
        !piped.contains('\x1b') && piped.contains("\n+"),
        "{piped:?}"
    );
}

#[test]
fn long_output_goes_through_the_pager_on_a_terminal_only() {
    if !common::has(
        "long_output_goes_through_the_pager_on_a_terminal_only",
        &[Need::Tool("script")],
    ) {
        return;
    }
    let env = Env::new();
    put_example(&env, "solve-issue");
    let id = start_thread(&env, "solve-issue", "p");
    env.ok(&["thread", "step", &id, "--agent", "dry"]);
    for command in [["thread", "read"], ["thread", "log"]] {
        let args = [command[0], command[1], id.as_str()];
        let paged = on_terminal(&env, &args, &[]);
        let lines: Vec<&str> = paged.lines().filter(|l| !l.trim().is_empty()).collect();
        assert!(
            !lines.is_empty() && lines.iter().all(|l| l.starts_with("PAGED:")),
            "{command:?}: {paged:?}"
        );
        let straight = on_terminal(
            &env,
            &[command[0], command[1], id.as_str(), "--no-pager"],
            &[],
        );
        assert!(
            !straight.contains("PAGED:") && !straight.trim().is_empty(),
            "{straight:?}"
        );
        let piped = env.ok(&args);
        assert!(!piped.contains("PAGED:"), "{piped:?}");
    }
}

#[test]
fn an_empty_table_says_so_under_its_header() {
    if !common::has(
        "an_empty_table_says_so_under_its_header",
        &[Need::Tool("script")],
    ) {
        return;
    }
    let env = Env::new();
    put_example(&env, "solve-issue");
    let workers = on_terminal(&env, &["worker", "list"], &[]);
    assert!(
        workers.contains("WORKER") && workers.contains("(none)"),
        "{workers:?}"
    );
    let steps_of_new = start_thread(&env, "solve-issue", "p");
    let steps = on_terminal(&env, &["thread", "steps", &steps_of_new], &[]);
    assert!(
        steps.contains("STEP") && steps.contains("(none)"),
        "{steps:?}"
    );
    // In a pipe: nothing at all (JSON lines of no items).
    assert_eq!(env.ok(&["worker", "list"]), "");
}

#[test]
fn one_object_reads_as_aligned_fields_on_a_terminal_and_as_json_when_asked() {
    if !common::has(
        "one_object_reads_as_aligned_fields_on_a_terminal_and_as_json_when_asked",
        &[Need::Tool("script")],
    ) {
        return;
    }
    let env = Env::new();
    let hash = put_example(&env, "solve-issue");
    let id = start_thread(&env, "solve-issue", "p");
    let shown = on_terminal(&env, &["thread", "show", &id], &[]);
    let status = shown
        .lines()
        .find(|l| l.starts_with("status "))
        .unwrap_or_default();
    assert_eq!(
        status.split_whitespace().collect::<Vec<_>>(),
        ["status", "active"],
        "{shown:?}"
    );
    let parent = shown
        .lines()
        .find(|l| l.starts_with("parent "))
        .unwrap_or_default();
    assert!(
        parent.trim_end().ends_with('—'),
        "null shows as a dash: {shown:?}"
    );
    let workflow_at = shown
        .lines()
        .find(|l| l.starts_with("workflow "))
        .unwrap_or_default();
    assert_eq!(
        workflow_at.find("solve-issue"),
        status.find("active"),
        "values are aligned: {shown:?}"
    );
    // It ends with what to do next, and an empty list of children reads as nothing.
    assert!(
        shown.contains(&format!("Next: take one step with `uwf thread step {id}`")),
        "{shown:?}"
    );
    assert!(!shown.contains("[]"), "{shown:?}");
    let json = on_terminal(&env, &["thread", "show", &id, "--json"], &[]);
    assert!(common::json(json.trim())["status"] == "active", "{json:?}");
    // -q and --json where a command prints one thing.
    let yaml = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/solve-issue.yaml");
    assert_eq!(
        env.ok(&["workflow", "put", yaml.to_str().unwrap(), "-q"]),
        hash
    );
    let why = env.ok(&["thread", "why", &id, "--json"]);
    let why = common::json(&why);
    assert_eq!(why["next"], "planner", "{why}");
    assert_eq!(why["trace"][0]["to"], "planner", "{why}");
}

#[test]
fn commands_speak_to_a_person_on_a_terminal_and_print_json_when_asked() {
    if !common::has(
        "commands_speak_to_a_person_on_a_terminal_and_print_json_when_asked",
        &[Need::Tool("script")],
    ) {
        return;
    }
    let env = Env::new();
    let yaml = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/solve-issue.yaml");
    let yaml = yaml.to_str().unwrap();
    let put = on_terminal(&env, &["workflow", "put", yaml], &[]);
    assert!(
        put.starts_with("Registered workflow solve-issue ("),
        "{put:?}"
    );
    assert!(put.contains("uwf thread start solve-issue"), "{put:?}");
    let again = on_terminal(&env, &["workflow", "put", yaml, "--json"], &[]);
    assert_eq!(
        common::json(again.trim())["status"],
        "unchanged",
        "{again:?}"
    );

    let started = on_terminal(
        &env,
        &["thread", "start", "solve-issue", "-p", "Fix it"],
        &[],
    );
    assert!(started.starts_with("Started thread "), "{started:?}");
    let id = started
        .split_whitespace()
        .nth(2)
        .expect("the thread's id")
        .to_owned();
    assert!(
        started.contains(&format!("uwf thread run {id}")),
        "{started:?}"
    );

    let ran = on_terminal(
        &env,
        &["thread", "run", &id, "--agent", "dry", "--max-steps", "2"],
        &[],
    );
    assert!(ran.contains("✓ step 1 · planner · agent dry → "), "{ran:?}");
    assert!(ran.contains("✓ step 2 · "), "{ran:?}");
    assert!(
        !ran.contains("{\"workflow\""),
        "no JSON lines for a person: {ran:?}"
    );

    let paused = on_terminal(&env, &["thread", "pause", &id], &[]);
    assert!(
        paused.starts_with(&format!("Thread {id} is paused")),
        "{paused:?}"
    );
    let json = on_terminal(&env, &["thread", "resume", &id, "--json"], &[]);
    assert_eq!(common::json(json.trim())["paused"], false, "{json:?}");
}

/// `thread show` on a terminal ends with the next thing to do for the state the thread is in:
/// answer a person's question, resume a pause, why a step failed, go on after a stop, read a
/// finished thread (issue #41).
#[test]
fn thread_show_ends_with_the_next_thing_to_do_in_every_state() {
    if !common::has(
        "thread_show_ends_with_the_next_thing_to_do_in_every_state",
        &[Need::Tool("script")],
    ) {
        return;
    }
    let env = Env::new();
    env.ok_stdin(
        &["workflow", "put", "-"],
        "name: ask\nroles:\n  writer:\n    meta: { type: object, properties: { text: { type: string } }, required: [text] }\n  approver:\n    meta: { type: object, properties: { approved: { type: boolean } }, required: [approved] }\ngraph:\n  $START: [ { role: writer, condition: null } ]\n  writer: [ { role: approver, condition: null } ]\n  approver: [ { role: $END, condition: null } ]\n",
    );
    let last_line = |id: &str| {
        let shown = on_terminal(
            &env,
            &["thread", "show", id, "--no-pager"],
            &[("NO_COLOR", "1")],
        );
        shown
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or_default()
            .to_owned()
    };

    let asks = start_thread(&env, "ask", "asks");
    env.ok(&["thread", "step", &asks, "--agent", "dry"]);
    env.ok(&["thread", "step", &asks, "--agent", "human"]);
    let next = last_line(&asks);
    assert!(
        next.contains("answer as `approver`")
            && next.contains(&format!("uwf thread question {asks}"))
            && next.contains(&format!("uwf thread answer {asks}")),
        "{next}"
    );

    let paused = start_thread(&env, "ask", "paused");
    env.ok(&["thread", "pause", &paused]);
    assert!(
        last_line(&paused).contains(&format!("Resume it with `uwf thread resume {paused}`")),
        "{}",
        last_line(&paused)
    );

    let failed = start_thread(&env, "ask", "fails");
    env.fails(&["thread", "step", &failed, "--agent", "false"], 1);
    let shown = on_terminal(
        &env,
        &["thread", "show", &failed, "--no-pager"],
        &[("NO_COLOR", "1")],
    );
    assert!(shown.contains("exited with"), "why it failed: {shown}");
    let next = last_line(&failed);
    assert!(
        next.contains("its last step failed") && next.contains(&format!("uwf thread log {failed}")),
        "{next}"
    );

    // A step stopped by Ctrl-C: nothing failed, and it says who stopped it and how to go on.
    common::sigint_as_at_a_terminal();
    let stopped = start_thread(&env, "ask", "stopped");
    let slow = common::script(&env, "slow.sh", "sleep 30");
    let mut step = std::process::Command::new(env!("CARGO_BIN_EXE_uwf"))
        .args([
            "thread",
            "step",
            &stopped,
            "--agent",
            slow.to_str().unwrap(),
        ])
        .env("UWF_STORAGE_ROOT", env.root())
        .env("HOME", env.dir.path())
        .env_remove("WORKFLOW_STORAGE_ROOT")
        .current_dir(env.dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn uwf");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while common::json(&env.ok(&["thread", "show", &stopped]))["status"] != "running" {
        assert!(std::time::Instant::now() < deadline, "the step never ran");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(step.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    step.wait().unwrap();
    let next = last_line(&stopped);
    assert!(
        next.contains("was stopped (by SIGINT")
            && next.contains("nothing failed")
            && next.contains(&format!("uwf thread step {stopped}")),
        "{next}"
    );

    let done = start_thread(&env, "ask", "done");
    env.ok(&["thread", "step", &done, "--agent", "dry"]);
    env.ok(&["thread", "step", &done, "--agent", "dry"]);
    assert!(
        last_line(&done).contains(&format!("Read it with `uwf thread read {done}`")),
        "{}",
        last_line(&done)
    );
}

/// `uwf run` (start, then run) speaks as `thread run` does on a terminal: one readable line per
/// step, no JSON lines (issue #41).
#[test]
fn uwf_run_prints_one_line_per_step_on_a_terminal() {
    if !common::has(
        "uwf_run_prints_one_line_per_step_on_a_terminal",
        &[Need::Tool("script")],
    ) {
        return;
    }
    let env = Env::new();
    put_example(&env, "solve-issue");
    let ran = on_terminal(
        &env,
        &[
            "run",
            "solve-issue",
            "-p",
            "Fix it",
            "--agent",
            "dry",
            "--max-steps",
            "2",
        ],
        &[("NO_COLOR", "1")],
    );
    assert!(ran.contains("✓ step 1 · planner · agent dry → "), "{ran:?}");
    assert!(ran.contains("✓ step 2 · "), "{ran:?}");
    assert!(
        !ran.contains("{\"workflow\""),
        "no JSON lines for a person: {ran:?}"
    );
    assert!(ran.contains("uwf: started thread "), "{ran:?}");
}
