//! `uwf workflow …` and `uwf eval` through the real binary.

mod common;

use common::Env;
use serde_json::Value;

const V1: &str = r#"
name: review
description: write, then review
roles:
  writer:
    goal: You write.
    meta: { type: object, properties: { text: { type: string } }, required: [text] }
  reviewer:
    meta: { type: object, properties: { approved: { type: boolean } }, required: [approved] }
conditions:
  notApproved: { expression: "steps[-1].output.approved = false" }
graph:
  $START: [ { role: writer, condition: null } ]
  writer: [ { role: reviewer, condition: null } ]
  reviewer: [ { role: writer, condition: notApproved }, { role: $END, condition: null } ]
"#;

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[test]
fn put_versions_history_rollback_rm() {
    let env = Env::new();
    let first = json(&env.ok_stdin(&["workflow", "put", "-"], V1));
    assert_eq!(first["status"], "new");
    let h1 = first["hash"].as_str().unwrap().to_owned();
    assert_eq!(
        json(&env.ok_stdin(&["workflow", "put", "-"], V1))["status"],
        "unchanged"
    );

    let v2 = V1.replace("You write.", "You write well.");
    let second = json(&env.ok_stdin(&["workflow", "put", "-"], &v2));
    assert_eq!(second["status"], "updated");
    assert_eq!(second["previous"], h1.as_str());
    let h2 = second["hash"].as_str().unwrap().to_owned();

    let history: Vec<Value> = env
        .ok(&["workflow", "history", "review"])
        .lines()
        .map(json)
        .collect();
    assert_eq!(history.len(), 2);
    assert_eq!(
        (history[0]["hash"].as_str(), history[0]["current"].as_bool()),
        (Some(h2.as_str()), Some(true))
    );
    assert_eq!(history[1]["hash"], h1.as_str());

    let list = json(&env.ok(&["workflow", "list"]));
    assert_eq!(
        (list["name"].as_str(), list["versions"].as_u64()),
        (Some("review"), Some(2))
    );

    let back = json(&env.ok(&["workflow", "rollback", "review"]));
    assert_eq!(
        (back["hash"].as_str(), back["previous"].as_str()),
        (Some(h1.as_str()), Some(h2.as_str()))
    );
    assert!(
        env.ok(&["workflow", "show", "review"])
            .contains("goal: You write.\n")
    );
    // Rolling back to a named version, and refusing one that is not a version.
    env.ok(&["workflow", "rollback", "review", &h2]);
    assert!(
        env.ok(&["workflow", "show", "review"])
            .contains("You write well.")
    );
    let err = env.fails(&["workflow", "rollback", "review", "ABCDEFGHJKMNP"], 1);
    assert!(err.contains("is not a version of `review`"), "{err}");

    // Both versions stay reachable for GC while registered.
    let gc = env.ok(&["cas", "gc", "--grace", "0s"]);
    assert!(gc.contains("removed 0"), "{gc}");

    let rm = json(&env.ok(&["workflow", "rm", "review"]));
    assert_eq!(rm["removed"], h2.as_str());
    let err = env.fails(&["workflow", "show", "review"], 1);
    assert!(
        err.contains("neither a registered workflow name nor the hash"),
        "{err}"
    );
    // The hash still works after the name is gone.
    assert!(env.ok(&["workflow", "show", &h2]).contains("name: review"));
    let err = env.fails(&["workflow", "rm", "review"], 1);
    assert!(err.contains("no workflow named `review`"), "{err}");
}

#[test]
fn check_validates_without_registering() {
    let env = Env::new();
    let out = json(&env.ok_stdin(&["workflow", "put", "--check", "-"], V1));
    assert_eq!(out["valid"], true);
    assert_eq!(env.ok(&["workflow", "list"]), "");
}

#[test]
fn warnings_do_not_refuse() {
    let env = Env::new();
    let text = V1
        .replace(
            "conditions:\n",
            "conditions:\n  unused: { expression: \"true\" }\n",
        )
        .replace("roles:\n", "roles:\n  orphan: { meta: { type: object } }\n")
        .replace(
            "graph:\n",
            "graph:\n  orphan: [ { role: $END, condition: null } ]\n",
        );
    let out = env
        .uwf()
        .args(["workflow", "put", "-"])
        .write_stdin(text)
        .output()
        .unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("warning: roles.orphan: not reachable from `$START`"),
        "{stderr}"
    );
    assert!(
        stderr.contains("warning: conditions.unused: defined but never used"),
        "{stderr}"
    );
}

#[test]
fn graph_renders_mermaid_and_dot_with_condition_labels() {
    let env = Env::new();
    env.ok_stdin(&["workflow", "put", "-"], V1);
    let mermaid = env.ok(&["workflow", "graph", "review"]);
    assert_eq!(
        mermaid,
        "flowchart TD\n    start((\"$START\"))\n    r1[\"writer\"]\n    r2[\"reviewer\"]\n    done((\"$END\"))\n    start --> r1\n    r1 --> r2\n    r2 -->|\"1. notApproved\"| r1\n    r2 -->|\"2. otherwise\"| done"
    );
    let dot = env.ok(&["workflow", "graph", "review", "--dot"]);
    assert!(dot.starts_with("digraph \"review\" {"), "{dot}");
    assert!(
        dot.contains("\"reviewer\" -> \"writer\" [label=\"1. notApproved\"];"),
        "{dot}"
    );
}

#[test]
fn bad_input_is_explained() {
    let env = Env::new();
    let err = env.fails(&["workflow", "put", "/no/such/file.yaml"], 1);
    assert!(err.contains("cannot read /no/such/file.yaml"), "{err}");
    let err = env.fails(&["workflow", "put", "-"], 1);
    assert!(err.contains("empty"), "{err}");
    let err = env.fails(&["workflow", "show", "nope"], 1);
    assert!(err.contains("`nope` is neither"), "{err}");
    let text = env.ok(&["cas", "put", "text", "\"x\""]);
    let err = env.fails(&["workflow", "show", &text], 1);
    assert!(err.contains("is not a workflow node"), "{err}");
    let err = env.fails(&["workflow", "history", "nope"], 1);
    assert!(
        err.contains("no workflow named `nope`") && err.contains("hint:"),
        "{err}"
    );
    let err = env.fails(&["workflow", "rollback", "nope"], 1);
    assert!(err.contains("no workflow named"), "{err}");
    env.ok_stdin(&["workflow", "put", "-"], V1);
    let err = env.fails(&["workflow", "rollback", "review"], 1);
    assert!(err.contains("no earlier version"), "{err}");
}

#[test]
fn a_damaged_registry_is_named_not_ignored() {
    let env = Env::new();
    env.ok_stdin(&["workflow", "put", "-"], V1);
    std::fs::write(env.root().join("registry.yaml"), "review: [broken").unwrap();
    let err = env.fails(&["workflow", "list"], 1);
    assert!(err.contains("registry.yaml is damaged"), "{err}");
    let err = env.fails(&["workflow", "put", "-"], 1);
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn eval_prints_json_and_errors_with_codes() {
    let env = Env::new();
    assert_eq!(env.ok(&["eval", "1 + 2"]), "3");
    assert_eq!(env.ok(&["eval", "nothing"]), "");
    assert_eq!(env.ok(&["eval", "$max * 2", "--bind", "max=3"]), "6");
    let ctx = r#"{"steps":[{"role":"reviewer","output":{"approved":false}}]}"#;
    assert_eq!(
        env.ok_stdin(
            &["eval", "steps[-1].output.approved = false", "--input", "-"],
            ctx
        ),
        "true"
    );
    let file = env.dir.path().join("ctx.json");
    std::fs::write(&file, ctx).unwrap();
    assert_eq!(
        env.ok(&["eval", "steps.role", "--input", file.to_str().unwrap()]),
        "\"reviewer\""
    );
    let err = env.fails(&["eval", "\"a\" + 1"], 1);
    assert!(err.starts_with("error: T2001"), "{err}");
    let err = env.fails(&["eval", "(1"], 1);
    assert!(err.starts_with("error: S0"), "{err}");
    let err = env.fails(&["eval", "1", "--bind", "oops"], 1);
    assert!(err.contains("NAME=JSON"), "{err}");
    let started = std::time::Instant::now();
    let err = env.fails(&["eval", "($f := function($x){ $f($x) + 1 }; $f(1))"], 1);
    assert!(err.starts_with("error: D1011"), "{err}");
    let err = env.fails(
        &[
            "eval",
            "($f := function($x){ $f($x) }; $f(1))",
            "--timeout-ms",
            "200",
        ],
        1,
    );
    assert!(
        err.starts_with("error: D1012") || err.starts_with("error: D1011"),
        "{err}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

#[test]
fn skill_texts_and_completions() {
    let env = Env::new();
    assert!(env.ok(&["skill"]).contains("uwf thread step ID"));
    assert!(env.ok(&["skill", "author"]).contains("condition: null"));
    assert!(env.ok(&["skill", "agent"]).contains("uwf agent submit"));
    assert!(
        env.ok(&["completions", "bash"])
            .contains("_clap_complete_uwf()")
    );
    env.fails(&["skill", "nonsense"], 2);
}

#[test]
fn every_command_has_help_with_an_example() {
    let env = Env::new();
    let groups: &[(&str, &[&str])] = &[
        (
            "workflow",
            &["put", "show", "list", "history", "rollback", "graph", "rm"],
        ),
        (
            "thread",
            &[
                "start",
                "step",
                "run",
                "show",
                "list",
                "steps",
                "read",
                "fork",
                "step-details",
                "diff",
                "kill",
                "eval",
                "why",
            ],
        ),
        ("agent", &["prompt", "submit", "dry", "script", "exec"]),
    ];
    for (group, commands) in groups {
        for cmd in *commands {
            let help = env.ok(&[group, cmd, "--help"]);
            assert!(
                help.contains("Example"),
                "uwf {group} {cmd} --help has no example:\n{help}"
            );
        }
    }
    for cmd in [
        "eval",
        "skill",
        "completions",
        "mount",
        "umount",
        "export",
        "setup",
        "doctor",
    ] {
        let help = env.ok(&[cmd, "--help"]);
        assert!(
            help.contains("Example"),
            "uwf {cmd} --help has no example:\n{help}"
        );
    }
}

/// Issue #27 item 10: a call of a function that is neither built-in nor bound in the expression
/// is refused at `put` with its location (it would compile, then fail a step later with T1006),
/// and `thread why` fails exactly when a step would, with the step's error.
#[test]
fn undefined_functions_are_refused_and_why_fails_as_the_step_does() {
    let env = Env::new();
    let wf = |expression: &str| {
        format!(
            "name: counting\nroles:\n  tick:\n    meta: {{ type: object, properties: {{ n: {{ type: integer }} }}, required: [n] }}\n\
conditions:\n  more: {{ expression: \"{expression}\" }}\n\
graph:\n  $START: [ {{ role: tick, condition: null }} ]\n  tick: [ {{ role: tick, condition: more }}, {{ role: $END, condition: null }} ]\n"
        )
    };
    let err = env.fails_stdin(&["workflow", "put", "-"], &wf("$cont(steps) < 3"));
    assert!(
        err.contains(
            "  - conditions.more.expression: `$cont` is called but is neither a built-in function \
             nor bound in the expression"
        ) && err.contains("at character 1; did you mean `$count`?"),
        "{err}"
    );
    assert_eq!(env.ok(&["workflow", "list"]), "", "nothing was registered");
    // Functions the expression binds itself are fine.
    env.ok_stdin(
        &["workflow", "put", "-"],
        &wf("($c := function($xs){ $count($xs) }; $c(steps) < 3)"),
    );

    // A condition that fails only on the thread's data: `why` exits 1 with the step's error.
    env.ok_stdin(
        &["workflow", "put", "-"],
        &wf("steps[-1].output.n + 'x' > 0"),
    );
    let id = common::start_thread(&env, "counting", "go");
    env.ok(&["thread", "step", &id]);
    let step_err = env.fails(&["thread", "step", &id], 1);
    assert!(step_err.contains("condition `more` failed"), "{step_err}");
    let out = env.run(&["thread", "why", &id]);
    assert_eq!(out.status.code(), Some(1), "why must fail as the step does");
    let why = String::from_utf8_lossy(&out.stdout);
    assert!(why.contains("next: none — a step now would fail"), "{why}");
    assert!(!why.contains("next: $END"), "{why}");
    let why_err = String::from_utf8_lossy(&out.stderr);
    let first = |text: &str| {
        text.lines()
            .find(|l| l.starts_with("error: "))
            .unwrap_or_default()
            .to_owned()
    };
    assert!(!first(&why_err).is_empty(), "{why_err}");
    assert_eq!(first(&why_err), first(&step_err), "the same error");
}

/// Schema mistakes JSON Schema lets through refuse `workflow put`, located, with a did-you-mean:
/// a required name not among the properties, and a misspelt keyword.
#[test]
fn schema_mistakes_are_refused_with_did_you_mean() {
    let env = Env::new();
    let text = V1.replace(
        "properties: { approved: { type: boolean } }, required: [approved]",
        "properties: { approved: { type: boolean }, comments: { type: string } }, required: [approved, coments]",
    );
    let err = env.fails_stdin(&["workflow", "put", "-"], &text);
    assert!(
        err.contains(
            "roles.reviewer.meta.required[1]: `coments` is required but is not one of the \
             `properties` (approved, comments); did you mean `comments`?"
        ),
        "{err}"
    );
    let text = V1.replace("required: [approved]", "requried: [approved]");
    let err = env.fails_stdin(&["workflow", "put", "-"], &text);
    assert!(
        err.contains("roles.reviewer.meta.requried: `requried` is not a JSON Schema keyword")
            && err.contains("did you mean `required`?"),
        "{err}"
    );
    let text = V1.replace(
        "properties: { text: { type: string } }",
        "propertes: { text: { type: string } }",
    );
    let err = env.fails_stdin(&["workflow", "put", "-"], &text);
    assert!(err.contains("did you mean `properties`?"), "{err}");
    // A keyword that is no typo of one is a warning: the comma that splits a description.
    let text = V1.replace(
        "{ text: { type: string } }",
        "{ text: { type: string, description: The text, in full. } }",
    );
    let out = env
        .uwf()
        .args(["workflow", "put", "-"])
        .write_stdin(text)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: roles.writer.meta.properties.text.in full.: `in full.` is not a JSON Schema keyword"),
        "{stderr}"
    );
    assert_eq!(env.ok(&["workflow", "list", "-q"]).trim(), "review");
}

/// The dry agent fills a required field that has no type with a text, not with null.
#[test]
fn dry_fills_an_untyped_required_field_with_a_text() {
    let env = Env::new();
    let text = V1.replace(
        "properties: { text: { type: string } }, required: [text]",
        "properties: { text: { description: Anything. } }, required: [text]",
    );
    env.ok_stdin(&["workflow", "put", "-"], &text);
    let id = common::start_thread(&env, "review", "go");
    let step = json(&env.ok(&["thread", "step", &id, "--agent", "dry"]));
    let node = json(&env.ok(&["cas", "get", step["head"].as_str().unwrap(), "--payload"]));
    let output = json(&env.ok(&["cas", "get", node["output"].as_str().unwrap(), "--payload"]));
    assert_eq!(output, serde_json::json!({"text": ""}));
}

#[test]
fn workflow_put_takes_several_files_and_folders_and_names_the_refused_one() {
    let env = Env::new();
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let folder = env.dir.path().join("flows");
    std::fs::create_dir(&folder).unwrap();
    for name in ["solve-issue.yaml", "develop.yaml"] {
        std::fs::copy(examples.join(name), folder.join(name)).unwrap();
    }
    std::fs::write(folder.join("notes.txt"), "not a workflow").unwrap();
    let lone = env.dir.path().join("lone.yml");
    std::fs::copy(examples.join("release-notes.yaml"), &lone).unwrap();
    let out = env.ok(&[
        "workflow",
        "put",
        folder.to_str().unwrap(),
        lone.to_str().unwrap(),
    ]);
    let names: Vec<String> = out
        .lines()
        .map(|l| common::json(l)["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["develop", "solve-issue", "release-notes"], "{out}");

    // One refused file is named; the others still go in; the command fails saying so.
    let broken = env.dir.path().join("broken.yaml");
    std::fs::write(&broken, "name: broken\nroles: {}\n").unwrap();
    let err = env.fails(
        &[
            "workflow",
            "put",
            broken.to_str().unwrap(),
            lone.to_str().unwrap(),
        ],
        1,
    );
    assert!(
        err.contains(&format!("error: {}: ", broken.display())),
        "{err}"
    );
    assert!(err.contains("1 of 2 workflow files were refused"), "{err}");
    let empty = env.dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let err = env.fails(&["workflow", "put", empty.to_str().unwrap()], 1);
    assert!(err.contains("holds no .yaml or .yml file"), "{err}");
}

/// The dry agent fills each required field with the smallest value of its type — a number at
/// its minimum, `false`, a list of its `minItems`, an enum's first choice, a nested object's own
/// required fields — and leaves optional ones out, so a dry run passes only when a real
/// agent's output could (issue #41).
#[test]
fn dry_fills_required_fields_by_their_types() {
    let env = Env::new();
    env.ok_stdin(
        &["workflow", "put", "-"],
        "name: typed\nroles:\n  filler:\n    meta:\n      type: object\n      properties:\n        \
         count: { type: integer, minimum: 3 }\n        ratio: { type: number }\n        \
         ok: { type: boolean }\n        tags: { type: array, items: { type: string, minLength: 2 }, minItems: 2 }\n        \
         level: { enum: [high, low] }\n        title: { type: string, minLength: 1 }\n        \
         author: { type: object, properties: { name: { type: string } }, required: [name] }\n        \
         note: { type: string }\n      \
         required: [count, ratio, ok, tags, level, title, author]\n\
         graph:\n  $START: [ { role: filler, condition: null } ]\n  filler: [ { role: $END, condition: null } ]\n",
    );
    let id = common::start_thread(&env, "typed", "go");
    let step = json(&env.ok(&["thread", "step", &id, "--agent", "dry"]));
    let node = json(&env.ok(&["cas", "get", step["head"].as_str().unwrap(), "--payload"]));
    let output = json(&env.ok(&["cas", "get", node["output"].as_str().unwrap(), "--payload"]));
    assert_eq!(
        output,
        serde_json::json!({
            "count": 3, "ratio": 0, "ok": false, "tags": ["xx", "xx"], "level": "high",
            "title": "x", "author": {"name": ""}
        })
    );
}
