//! Built-in agents inside the step process (issue #17): the same nodes, byte for byte, as the
//! same run through `uwf agent <kind>` programs.

mod common;

use common::{Env, SOLVE_SCRIPT, json, put_example};

/// Runs a solve-issue thread to its end with `agent` and returns its step hashes, each with its
/// output and detail hashes.
fn run(env: &Env, agent: &str, spawn: bool) -> Vec<(String, String, String)> {
    let out = env
        .uwf()
        .env("UWF_REPRODUCIBLE", "1")
        .env("UWF_SPAWN_BUILTINS", if spawn { "1" } else { "0" })
        .args(["thread", "start", "solve-issue", "-p", "Fix the login bug"])
        .output()
        .unwrap();
    let id = json(&String::from_utf8_lossy(&out.stdout))["thread"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = env
        .uwf()
        .env("UWF_REPRODUCIBLE", "1")
        .env("UWF_SPAWN_BUILTINS", if spawn { "1" } else { "0" })
        .args(["thread", "run", &id, "--agent", agent])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Which way it ran shows in the thread log: a spawned agent prints its step hash on stdout,
    // which the log keeps; a built-in run inside the step prints nothing.
    let log = std::fs::read_to_string(env.root().join(format!("runs/{id}.log"))).unwrap();
    let head = json(&env.ok(&["thread", "show", &id]))["head"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(log.contains(&head), spawn, "{log}");
    env.ok(&["thread", "steps", &id])
        .lines()
        .map(|l| {
            let hash = json(l)["hash"].as_str().unwrap().to_owned();
            let step = json(&env.ok(&["cas", "get", &hash, "--payload"]));
            (
                hash,
                step["output"].as_str().unwrap().to_owned(),
                step["detail"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn in_process_built_ins_write_the_same_nodes_as_spawned_ones() {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let file = env.dir.path().join("solve.yaml");
    std::fs::write(&file, SOLVE_SCRIPT).unwrap();
    for agent in [
        format!("uwf agent script --file {}", file.display()),
        format!(
            "{} agent script --file={}",
            env!("CARGO_BIN_EXE_uwf"),
            file.display()
        ),
        "dry".to_owned(),
    ] {
        let inside = run(&env, &agent, false);
        let spawned = run(&env, &agent, true);
        assert!(!inside.is_empty());
        assert_eq!(inside, spawned, "{agent}");
    }
}

/// `thread run` keeps the moderator and the view between steps (`step::Warm`); when another
/// process moved the head in between, the next step notices and starts from the new head.
#[test]
fn a_warm_run_starts_from_a_head_another_process_moved() {
    use uwf::engine::cycle::step::{self, StepOptions, Warm};
    let env = Env::new();
    put_example(&env, "solve-issue");
    let id = common::start_thread(&env, "solve-issue", "Fix the login bug");
    let store = uwf::cas::Store::open(&env.root()).unwrap();
    let config = uwf::engine::config::load(&env.root()).unwrap();
    let options = StepOptions {
        agent: Some("dry".into()),
        passthrough: false,
        from_queue: false,
        by: None,
    };
    let mut warm = Warm::default();
    let first = step::step_warm(&store, &config, &id, &options, &mut warm).unwrap();
    // Another process takes the next step.
    let second = json(&env.ok(&["thread", "step", &id, "--agent", "dry"]));
    let third = step::step_warm(&store, &config, &id, &options, &mut warm).unwrap();
    let steps: Vec<serde_json::Value> = env
        .ok(&["thread", "steps", &id])
        .lines()
        .map(json)
        .collect();
    assert_eq!(steps.len(), 3, "{steps:?}");
    assert_eq!(steps[0]["hash"], first.head.to_string().as_str());
    assert_eq!(steps[1]["hash"], second["head"]);
    assert_eq!(steps[2]["hash"], third.head.to_string().as_str());
    // And a warm step right after its own publication goes on from there.
    let fourth = step::step_warm(&store, &config, &id, &options, &mut warm).unwrap();
    let head = json(&env.ok(&["thread", "show", &id]))["head"].clone();
    assert_eq!(head, fourth.head.to_string().as_str());
    assert_eq!(env.ok(&["thread", "steps", &id]).lines().count(), 4);
}
