//! Dynamic prompts through the real binary: `{{ expr }}` templates in a role's `goal`,
//! `procedure` and `output` are refused at `workflow put` when they do not compile, rendered
//! against the thread's moderator context in the prompt an agent gets, and fail the step, by
//! name, when they cannot be evaluated.

mod common;

use common::{Env, json, start_thread};

/// `second` quotes what `first` produced; `first`'s schema has the field `x`.
const CARRY: &str = r#"
name: carry
roles:
  first:
    goal: "You start the work for: {{ start.prompt }}"
    meta: { type: object, properties: { x: { type: string } }, required: [x] }
  second:
    goal: "You build on {{ steps[-1].output.x }}."
    procedure: |
      Steps so far: {{ $count(steps) }}.
      Last step: {{ {"role": steps[-1].role, "x": steps[-1].output.x} }}
    output: 'Literal braces: {{ "{{" }}kept{{ "}}" }}'
    meta: { type: object, properties: { done: { type: boolean } }, required: [done] }
graph:
  $START: [ { role: first, condition: null } ]
  first: [ { role: second, condition: null } ]
  second: [ { role: $END, condition: null } ]
"#;

/// A `script` agent whose `first` outputs `x: ZEBRA-7731`.
fn script_agent(env: &Env) -> String {
    let file = env.dir.path().join("carry-script.yaml");
    std::fs::write(
        &file,
        "first:\n  - { x: ZEBRA-7731 }\nsecond:\n  - { done: true }\n",
    )
    .unwrap();
    format!("uwf agent script --file {}", file.display())
}

fn put(env: &Env, yaml: &str) -> String {
    json(&env.ok_stdin(&["workflow", "put", "-"], yaml))["name"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn a_template_shows_the_previous_steps_output_in_the_prompt() {
    let env = Env::new();
    put(&env, CARRY);
    let id = start_thread(&env, "carry", "Ship the login fix");

    // Step 0: no steps yet, so paths into them render as nothing (not an error).
    let before = env.ok(&["agent", "prompt", &id, "second"]);
    assert!(before.contains("**Goal:** You build on .\n"), "{before}");
    assert!(before.contains("Steps so far: 0."), "{before}");
    let first = env.ok(&["agent", "prompt", &id, "first"]);
    assert!(
        first.contains("**Goal:** You start the work for: Ship the login fix\n"),
        "{first}"
    );

    env.ok(&["thread", "step", &id, "--agent", &script_agent(&env)]);
    let prompt = env.ok(&["agent", "prompt", &id, "second"]);
    assert!(
        prompt.contains("**Goal:** You build on ZEBRA-7731.\n"),
        "{prompt}"
    );
    assert!(prompt.contains("Steps so far: 1."), "{prompt}");
    assert!(
        prompt.contains(r#"Last step: {"role":"first","x":"ZEBRA-7731"}"#),
        "{prompt}"
    );
    assert!(
        prompt.contains("**Output:** Literal braces: {{kept}}"),
        "{prompt}"
    );
    assert!(!prompt.contains("steps[-1]"), "{prompt}");

    // An agent that reads its prompt gets the rendered text: this one answers only if it does.
    let exec = "uwf agent exec --cmd 'grep -q \"You build on ZEBRA-7731.\" {prompt_file} && echo \"{\\\"done\\\": true}\"'";
    let stepped = json(&env.ok(&["thread", "step", &id, "--agent", exec]));
    assert_eq!(stepped["role"], "second");
    assert_eq!(stepped["done"], true);

    // `workflow show` keeps the templates as written, and they register to the same hash.
    let shown = env.ok(&["workflow", "show", "carry"]);
    assert!(shown.contains("{{ steps[-1].output.x }}"), "{shown}");
    let again = json(&env.ok_stdin(&["workflow", "put", "-"], &shown));
    assert_eq!(again["status"], "unchanged");
}

#[test]
fn a_template_that_does_not_compile_is_refused_with_role_field_and_location() {
    let env = Env::new();
    for (bad, location) in [
        ("{{ steps[-1]. }}", "line 2, column 7 of the procedure"),
        ("{{ $foo( }}", "line 2, column 7 of the procedure"),
    ] {
        let yaml = CARRY.replace("Last step: {{ {", &format!("Last: {bad} {{{{ {{"));
        for args in [
            &["workflow", "put", "-"][..],
            &["workflow", "put", "--check", "-"][..],
        ] {
            let out = env
                .uwf()
                .args(args)
                .write_stdin(yaml.clone())
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{bad}: {stderr}");
            assert!(
                stderr.contains(&format!(
                    "  - roles.second.procedure: the template `{bad}` at {location} does not compile: S0"
                )),
                "{bad}: {stderr}"
            );
            assert!(!stderr.contains("panicked"), "{stderr}");
        }
    }

    // Unbalanced braces, located by line and column inside the field.
    let yaml = CARRY
        .replace("You start the work", "You {{ start the work")
        .replace("{{ \"}}\" }}'", "}}'");
    let err = env.fails_stdin(&["workflow", "put", "-"], &yaml);
    assert!(
        err.contains(
            "  - roles.first.goal: `{{` at line 1, column 5 of the goal is not closed by `}}`"
        ),
        "{err}"
    );
    assert!(
        err.contains(
            "  - roles.second.output: `}}` at line 1, column 31 of the output closes no template"
        ),
        "{err}"
    );
    assert!(
        err.contains("to write `{{` as text, write `{{ \"{{\" }}`"),
        "{err}"
    );
    assert_eq!(
        env.ok(&["workflow", "list"]),
        "",
        "a refused workflow was registered"
    );
}

#[test]
fn a_template_that_fails_at_the_step_fails_it_by_name() {
    let env = Env::new();
    put(
        &env,
        &CARRY.replace("{{ steps[-1].output.x }}", "{{ 1 + 'a' }}"),
    );
    let id = start_thread(&env, "carry", "Ship the login fix");
    let agent = script_agent(&env);
    env.ok(&["thread", "step", &id, "--agent", &agent]);
    let head = json(&env.ok(&["thread", "show", &id]))["head"].clone();

    let named = |err: &str| {
        assert!(
            err.contains("cannot make the prompt of role `second`: the template `{{ 1 + 'a' }}` at line 1, column 14 of the goal failed: T2002"),
            "{err}"
        );
    };
    // `uwf agent prompt`, an agent that reads the prompt (spawned), and the offline agents
    // (in process) all fail the same way, and the head stays.
    named(&env.fails(&["agent", "prompt", &id, "second"], 1));
    let exec = "uwf agent exec --cmd 'echo \"{\\\"done\\\": true}\"'";
    for agent in [exec, "dry", agent.as_str()] {
        let err = env.fails(&["thread", "step", &id, "--agent", agent], 1);
        named(&err);
        let show = json(&env.ok(&["thread", "show", &id]));
        assert_eq!(show["head"], head, "{agent}");
        assert_eq!(show["next"], "second", "{agent}");
    }
}

#[test]
fn the_authoring_skill_teaches_templates() {
    let env = Env::new();
    let skill = env.ok(&["skill", "author"]);
    for needle in [
        "{{ steps[-1].output.text }}",
        "`{{ \"{{\" }}`",
        "compact JSON",
    ] {
        assert!(skill.contains(needle), "no {needle:?} in:\n{skill}");
    }
    let help = env.ok(&["workflow", "put", "--help"]);
    assert!(help.contains("`{{ expr }}`"), "{help}");
}
