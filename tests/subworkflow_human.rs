//! Sub-workflows and human steps through the real binary: nesting three
//! levels offline, the depth limit, unknown and failing children, killing a parent whose child
//! awaits a person, and the question/answer round trip with its bad inputs.

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Env, json, start_thread};

const PARENT: &str = "name: parent\nroles:\n  planner:\n    goal: Plan.\n    meta: { type: object, properties: { plan: { type: string } }, required: [plan] }\n  developer:\n    goal: Develop.\n    meta: { type: object, properties: { done: { type: boolean } }, required: [done] }\ngraph:\n  $START: [ { role: planner, condition: null } ]\n  planner: [ { role: developer, condition: null } ]\n  developer: [ { role: $END, condition: null } ]\n";

const CHILD: &str = "name: child\nroles:\n  coder:\n    goal: Code.\n    meta: { type: object, properties: { done: { type: boolean } }, required: [done] }\n  deeper:\n    goal: Go deeper.\n    meta: { type: object, properties: { done: { type: boolean } }, required: [done] }\ngraph:\n  $START: [ { role: coder, condition: null } ]\n  coder: [ { role: deeper, condition: null } ]\n  deeper: [ { role: $END, condition: null } ]\n";

const GRANDCHILD: &str = "name: grandchild\nroles:\n  worker:\n    goal: Work.\n    meta: { type: object, properties: { done: { type: boolean } }, required: [done] }\ngraph:\n  $START: [ { role: worker, condition: null } ]\n  worker: [ { role: $END, condition: null } ]\n";

const REVIEW: &str = "name: review\nroles:\n  writer:\n    goal: Write.\n    meta: { type: object, properties: { text: { type: string } }, required: [text] }\n  approver:\n    goal: Approve or not.\n    meta: { type: object, properties: { approved: { type: boolean } }, required: [approved] }\nconditions:\n  rejected: { expression: \"steps[-1].output.approved = false\" }\ngraph:\n  $START: [ { role: writer, condition: null } ]\n  writer: [ { role: approver, condition: null } ]\n  approver: [ { role: writer, condition: rejected }, { role: $END, condition: null } ]\n";

const SCRIPT: &str = "planner: [ { plan: \"split it\" } ]\ncoder: [ { done: false } ]\nworker: [ { done: true } ]\nwriter: [ { text: \"v1\" }, { text: \"v2\" } ]\n";

/// A store with the four workflows registered and a config that plays `developer` with the
/// `child` workflow, `deeper` with `grandchild`, `approver` by a person, and everything else
/// with the canned script. `extra` is appended to config.yaml.
fn family_env(extra: &str) -> Env {
    let env = Env::new();
    for (name, text) in [
        ("parent", PARENT),
        ("child", CHILD),
        ("grandchild", GRANDCHILD),
        ("review", REVIEW),
    ] {
        let path = env.dir.path().join(format!("{name}.yaml"));
        std::fs::write(&path, text).unwrap();
        env.ok(&["workflow", "put", path.to_str().unwrap()]);
    }
    let script = env.dir.path().join("script.yaml");
    std::fs::write(&script, SCRIPT).unwrap();
    let config = format!(
        "defaultAgent: canned\nagents:\n  canned: {{ command: uwf, args: [agent, script, --file, '{}'] }}\n  \
child-flow: {{ command: uwf, args: [agent, workflow, --name, child] }}\n  \
grandchild-flow: {{ command: uwf, args: [agent, workflow, --name, grandchild] }}\n\
agentOverrides:\n  parent: {{ developer: child-flow }}\n  child: {{ deeper: grandchild-flow }}\n  review: {{ approver: human }}\n{extra}",
        script.display()
    );
    std::fs::write(env.root().join("config.yaml"), config).unwrap();
    env
}

/// `uwf thread run id`, which must stop where a person answers (exit 4); its stdout.
fn run_to_a_person(env: &Env, id: &str) -> String {
    let out = env.run(&["thread", "run", id]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(4),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn show(env: &Env, id: &str) -> serde_json::Value {
    json(&env.ok(&["thread", "show", id]))
}

#[test]
fn three_levels_run_offline_and_the_parent_names_every_descendant() {
    let env = family_env("");
    let id = start_thread(&env, "parent", "Build it");
    env.ok(&["thread", "run", &id]);
    let parent = show(&env, &id);
    assert_eq!(parent["status"], "done", "{parent}");
    let children = parent["children"].as_array().unwrap().clone();
    assert_eq!(children.len(), 1, "{parent}");
    let child = children[0].as_str().unwrap().to_owned();
    let child_show = show(&env, &child);
    assert_eq!(child_show["status"], "done");
    assert_eq!(child_show["parent"]["thread"], id.as_str());
    assert_eq!(child_show["parent"]["role"], "developer");
    // The child's task is what it was given, not the parent agent's output-format rules.
    let prompt = env.ok(&["thread", "read", &child]);
    assert!(!prompt.contains("## Output format"), "{prompt}");
    assert!(
        prompt.contains("## What this sub-workflow returns")
            && prompt.contains("the `developer` step"),
        "{prompt}"
    );
    let grandchild = child_show["children"][0].as_str().unwrap().to_owned();
    assert_eq!(show(&env, &grandchild)["parent"]["thread"], child.as_str());

    // The transcript names every descendant and how it ended.
    let read = env.ok(&["thread", "read", &id]);
    assert!(
        read.contains(&format!("child `{child}`: done"))
            && read.contains(&format!("grandchild `{grandchild}`: done")),
        "{read}"
    );
    // The parent's step says which child played it, and its output is the child's last.
    let steps = env.ok(&["thread", "steps", &id]);
    let last = json(steps.lines().last().unwrap());
    assert_eq!(last["agent"], "workflow:child");
    assert_eq!(last["child"], child.as_str());
    assert_eq!(last["summary"], "{\"done\":true}");
    // A list shows the threads a person started; children come on request.
    let listed = env.ok(&["thread", "list", "--all", "-q"]);
    assert!(
        listed.lines().any(|l| l == id)
            && !listed.contains(child.as_str())
            && !listed.contains(grandchild.as_str()),
        "{listed}"
    );
    assert_eq!(
        env.ok(&["thread", "list", "--all", "--limit", "1", "-q"]),
        id,
        "the newest thread a person started"
    );
    let everything = env.ok(&["thread", "list", "--all", "--children", "-q"]);
    assert!(
        everything.contains(child.as_str()) && everything.contains(grandchild.as_str()),
        "{everything}"
    );
    // In a pipe the tree is JSON lines: each thread with its depth under the top one.
    let tree = env.ok(&["thread", "list", "--all", "--tree"]);
    let rows: Vec<serde_json::Value> = tree.lines().map(json).collect();
    let row = |id: &str| {
        rows.iter()
            .find(|r| r["thread"] == id)
            .unwrap_or_else(|| panic!("{id} missing: {tree}"))
    };
    assert_eq!(
        (row(&id)["depth"].clone(), row(&id)["top"].clone()),
        (0.into(), id.as_str().into()),
        "{tree}"
    );
    assert_eq!(
        (row(&child)["depth"].clone(), row(&child)["top"].clone()),
        (1.into(), id.as_str().into()),
        "{tree}"
    );
    assert_eq!(row(&grandchild)["depth"], 2, "{tree}");
    assert_eq!(
        env.ok(&["thread", "list", "--all", "--tree", "-q"])
            .lines()
            .count(),
        rows.len()
    );

    // GC keeps the child reachable from the parent: the parent's chain reaches the child's
    // terminal head through the step's subthread detail.
    let walk = env.ok(&["cas", "walk", parent["head"].as_str().unwrap()]);
    assert!(
        walk.contains(child_show["head"].as_str().unwrap()),
        "the child's head is not reachable from the parent's"
    );
}

#[test]
fn nesting_past_max_depth_fails_the_step_and_keeps_the_head() {
    let env = family_env("maxDepth: 1\n");
    let id = start_thread(&env, "parent", "Build it");
    env.ok(&["thread", "step", &id]);
    let head = show(&env, &id)["head"].clone();
    let err = env.fails(&["thread", "step", &id], 1);
    assert!(err.contains("maxDepth 1"), "{err}");
    let after = show(&env, &id);
    assert_eq!(after["head"], head);
    assert_eq!(after["status"], "failed");
}

#[test]
fn an_unregistered_child_workflow_is_named_with_the_registered_ones() {
    let env = family_env("");
    let id = start_thread(&env, "parent", "Build it");
    env.ok(&["thread", "step", &id]);
    let err = env.fails(
        &[
            "thread",
            "step",
            &id,
            "--agent",
            "uwf agent workflow --name nosuch",
        ],
        1,
    );
    assert!(
        err.contains("no workflow named `nosuch`")
            && err.contains("child, grandchild, parent, review"),
        "{err}"
    );
}

#[test]
fn a_failed_child_fails_the_parent_step_with_its_reason() {
    let env = family_env("");
    // `child`'s coder has canned outputs, but `review`'s approver is a person and the script
    // has nothing for `tester`: use a child workflow whose role the script cannot play.
    let broken = env.dir.path().join("broken.yaml");
    std::fs::write(
        &broken,
        GRANDCHILD
            .replace("grandchild", "broken")
            .replace("worker", "tester"),
    )
    .unwrap();
    env.ok(&["workflow", "put", broken.to_str().unwrap()]);
    let id = start_thread(&env, "parent", "Build it");
    env.ok(&["thread", "step", &id]);
    let head = show(&env, &id)["head"].clone();
    let err = env.fails(
        &[
            "thread",
            "step",
            &id,
            "--agent",
            "uwf agent workflow --name broken",
        ],
        1,
    );
    assert!(
        err.contains("child thread") && err.contains("no outputs for role `tester`"),
        "{err}"
    );
    assert_eq!(show(&env, &id)["head"], head);
}

#[test]
fn human_round_trip_and_its_bad_inputs() {
    let env = family_env("");
    let id = start_thread(&env, "review", "Release notes");
    // `thread run` stops where a person must answer, exit 4 (it was 0: a script could not tell
    // it from done).
    let run = run_to_a_person(&env, &id);
    let last = json(run.lines().last().unwrap());
    assert_eq!(last["awaiting"], true, "{run}");
    assert_eq!(last["role"], "approver");
    let s = show(&env, &id);
    assert_eq!(
        (s["status"].clone(), s["awaiting"].clone()),
        ("awaiting".into(), "approver".into())
    );
    // Stepping again changes nothing.
    let again = json(&env.ok(&["thread", "step", &id]));
    assert_eq!(again["awaiting"], true);
    assert_eq!(again["head"], s["head"]);
    // The question is the role and the task first, then how a person answers: the fields in
    // words, not an agent's frontmatter rules.
    let q = env.ok(&["thread", "question", &id]);
    let task = q.find("## Task").expect("the task");
    let how = q.find("## How to answer").expect("how to answer");
    assert!(task < how, "{q}");
    assert!(q.contains("`approved` (true or false, required)"), "{q}");
    assert!(
        !q.contains("## Output format") && !q.contains("frontmatter"),
        "{q}"
    );

    // An answer that does not validate: says which rule, keeps the text, still awaiting.
    let err = env.fails_stdin(&["thread", "answer", &id], "{\"approved\": \"yes\"}");
    assert!(
        err.contains("/approved") && err.contains("boolean"),
        "{err}"
    );
    let kept = err
        .split("text node ")
        .nth(1)
        .and_then(|t| t.get(..13))
        .expect("the raw answer is named");
    assert!(env.ok(&["cas", "get", kept, "--payload"]).contains("yes"));
    assert_eq!(show(&env, &id)["status"], "awaiting");

    // A valid answer from a file, by a named person.
    let answer = env.dir.path().join("answer.md");
    std::fs::write(
        &answer,
        "---\napproved: false\n---\nNot yet: say what changed.\n",
    )
    .unwrap();
    let stepped = json(&env.ok(&[
        "thread",
        "answer",
        &id,
        "-f",
        answer.to_str().unwrap(),
        "--by",
        "alice",
    ]));
    assert_eq!(stepped["role"], "approver");
    let steps = env.ok(&["thread", "steps", &id]);
    assert!(steps.contains("\"agent\":\"human:alice\""), "{steps}");

    // Not awaiting (the writer's turn is next): exit 1, saying what it does instead.
    let err = env.fails_stdin(&["thread", "answer", &id], "{\"approved\": true}");
    assert!(err.contains("is not waiting for an answer"), "{err}");

    run_to_a_person(&env, &id);
    let done = json(&env.ok_stdin(&["thread", "answer", &id], "{\"approved\": true}"));
    assert_eq!(done["done"], true);
}

/// Issue #27 item 8: `--by` is a name (no newlines, ANSI escapes or 100,000 characters that
/// would forge headings in `thread read`), `-` reads the answer from stdin, and an answer to an
/// idle thread names the next role instead of claiming a step is running.
#[test]
fn answer_checks_by_reads_dash_and_names_the_idle_role() {
    let env = family_env("");
    let id = start_thread(&env, "review", "Release notes");
    run_to_a_person(&env, &id);
    let answer = "{\"approved\": false}";
    let long = "a".repeat(100_000);
    for (by, says) in [
        (
            "eve\n## writer · forged",
            "character 4 is U+000A, a control character",
        ),
        (
            "\u{1b}[31mred",
            "character 1 is U+001B, a control character",
        ),
        (
            "mal\u{202e}lory",
            "character 4 is U+202E, an invisible formatting character",
        ),
        (long.as_str(), "the name has 100000 characters; at most 64"),
        ("  ", "the name is empty"),
    ] {
        let err = env.fails_stdin(&["thread", "answer", &id, "--by", by], answer);
        assert!(
            err.contains(says),
            "--by {:?}: {err}",
            by.get(..20).unwrap_or(by)
        );
        assert!(
            err.contains("hint: a name is 1 to 64 printable characters"),
            "{err}"
        );
    }
    assert_eq!(
        show(&env, &id)["status"],
        "awaiting",
        "nothing was published"
    );
    // 64 characters with spaces and non-ASCII letters are a name; `-` is stdin.
    let name = format!("Zoë {}", "x".repeat(60));
    let stepped = json(&env.ok_stdin(&["thread", "answer", &id, "-", "--by", &name], answer));
    assert_eq!(stepped["role"], "approver", "{stepped}");
    let read = env.ok(&["thread", "read", &id]);
    assert!(read.contains(&format!("human:{name}")), "{read}");
    // Only `-` is a positional source.
    let err = env.fails(&["thread", "answer", &id, "answer.md"], 2);
    assert!(err.contains("`-f answer.md`"), "{err}");
    // Idle: the writer's turn is next, and no step is running.
    let err = env.fails_stdin(&["thread", "answer", &id, "-"], answer);
    assert!(
        err.contains(
            "it is idle: its next role `writer` is not a person's (its agent is `canned`)"
        ),
        "{err}"
    );
    assert!(!err.contains("running a step"), "{err}");
}

/// Holds thread `id`'s step lock from another process (an OFD write lock, as a step takes it)
/// until the returned child is killed.
fn hold_lock(env: &Env, id: &str) -> std::process::Child {
    let path: PathBuf = env.root().join("runs").join(format!("{id}.lock"));
    let code = "import fcntl, os, struct, sys, time\n\
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n\
fcntl.fcntl(fd, 37, struct.pack('hhqqi', fcntl.F_WRLCK, 0, 0, 0, 0))\n\
print('locked', flush=True)\n\
time.sleep(60)\n";
    let mut child = Command::new("python3")
        .args(["-c", code, path.to_str().unwrap()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "locked");
    child
}

#[test]
fn a_second_answer_while_one_is_being_published_is_busy() {
    if !common::has(
        "a_second_answer_while_one_is_being_published_is_busy",
        &[common::Need::Tool("python3")],
    ) {
        return;
    }
    let env = family_env("");
    let id = start_thread(&env, "review", "Release notes");
    run_to_a_person(&env, &id);
    let mut holder = hold_lock(&env, &id);
    let out = env
        .uwf()
        .args(["thread", "answer", &id])
        .write_stdin("{\"approved\": true}")
        .output()
        .unwrap();
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert_eq!(
        out.status.code(),
        Some(75),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(show(&env, &id)["status"], "awaiting");
}

#[test]
fn killing_a_parent_kills_its_child_awaiting_a_person() {
    // The child workflow's second role is a person's.
    let env = family_env("");
    let id = start_thread(&env, "parent", "Build it");
    env.ok(&["thread", "step", &id]);
    let mut step = Command::new(env!("CARGO_BIN_EXE_uwf"))
        .args([
            "thread",
            "step",
            &id,
            "--agent",
            "uwf agent workflow --name review",
        ])
        .env("UWF_STORAGE_ROOT", env.root())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait for the child to ask its question.
    let deadline = Instant::now() + Duration::from_secs(20);
    let child = loop {
        let s = show(&env, &id);
        if let Some(c) = s["children"][0].as_str()
            && show(&env, c)["status"] == "awaiting"
        {
            break c.to_owned();
        }
        assert!(Instant::now() < deadline, "the child never asked");
        std::thread::sleep(Duration::from_millis(50));
    };
    let killed = json(&env.ok(&["thread", "kill", &id]));
    assert_eq!(killed["status"], "killed");
    assert_eq!(show(&env, &child)["status"], "killed");
    assert_eq!(show(&env, &id)["status"], "killed");
    // The parent's step process ends (its agent was stopped), without publishing anything.
    let status = step.wait().unwrap();
    assert!(!status.success());
    assert_eq!(
        env.ok(&["thread", "steps", &id]).lines().count(),
        1,
        "nothing was published after the kill"
    );
}

#[test]
fn doctor_and_help_cover_the_two_kinds() {
    let env = family_env("");
    let out = env.run(&["doctor"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("agent child-flow: runs workflow `child` as a sub-workflow (maxDepth 4)")
            && text.contains("agent human: a person answers"),
        "{text}"
    );
    for kind in ["workflow", "human"] {
        let help = env.ok(&["agent", kind, "--help"]);
        assert!(help.contains("Example"), "{kind}: {help}");
    }
    let help = env.ok(&["thread", "answer", "--help"]);
    assert!(help.contains("uwf thread answer"), "{help}");
}

/// A person answers with the role's fields as plain YAML, as a JSON object or as a `---` block;
/// a refused answer says in a person's words which field is wrong and what it must be.
#[test]
fn a_person_answers_in_plain_yaml_json_or_frontmatter() {
    let env = family_env("");
    let id = start_thread(&env, "review", "Release notes");
    let awaiting = |env: &Env| {
        run_to_a_person(env, &id);
        assert_eq!(show(env, &id)["status"], "awaiting");
    };
    awaiting(&env);
    // Plain YAML from stdin, not approved: back to the writer, who asks again.
    let stepped = json(&env.ok_stdin(&["thread", "answer", &id], "approved: false\n"));
    assert_eq!(
        (stepped["role"].clone(), stepped["done"].clone()),
        ("approver".into(), false.into())
    );
    let steps = env.ok(&["thread", "steps", &id]);
    assert!(steps.contains("\"approved\":false"), "{steps}");

    awaiting(&env);
    // A wrong type in plain YAML: the field, what it must be, and what was given.
    let err = env.fails_stdin(&["thread", "answer", &id], "approved: yes please\n");
    assert!(
        err.contains("the field `approved` must be true or false, not \"yes please\""),
        "{err}"
    );
    assert!(err.contains("/approved"), "{err}");
    // A missing field, and a text that is no set of fields.
    let err = env.fails_stdin(&["thread", "answer", &id], "notes: fine\n");
    assert!(
        err.contains("the field `approved` is missing: it must be true or false"),
        "{err}"
    );
    let err = env.fails_stdin(&["thread", "answer", &id], "looks good to me");
    assert!(
        err.contains("write them as YAML, e.g. `approved: true`"),
        "{err}"
    );
    assert_eq!(show(&env, &id)["status"], "awaiting");

    // Plain YAML from a file, approved: done.
    let file = env.dir.path().join("answer.yaml");
    std::fs::write(&file, "approved: true\n").unwrap();
    let done = json(&env.ok(&["thread", "answer", &id, "-f", file.to_str().unwrap()]));
    assert_eq!(done["done"], true);
}
