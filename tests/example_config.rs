//! `examples/config/config.yaml` works offline as shipped (issue #27 item 13): with every
//! example registered and the file copied into the storage root unchanged, as README.md and
//! docs/EXAMPLES.md describe, solve-issue runs to its end with each `developer` step played by
//! a `develop` child thread, and release-notes waits for a person and finishes once answered.

mod common;

use std::path::Path;

use common::{Env, json, start_thread};

/// A store with every `examples/*.yaml` registered and `examples/config/config.yaml` copied in.
fn shipped() -> Env {
    let env = Env::new();
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut registered = 0;
    for entry in std::fs::read_dir(&examples).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            env.ok(&["workflow", "put", path.to_str().unwrap()]);
            registered += 1;
        }
    }
    assert!(registered >= 5, "examples/ has its workflows");
    std::fs::copy(
        examples.join("config/config.yaml"),
        env.root().join("config.yaml"),
    )
    .unwrap();
    env
}

#[test]
fn solve_issue_runs_offline_with_develop_playing_the_developer() {
    let env = shipped();
    let id = start_thread(&env, "solve-issue", "Fix the login bug");
    let run = env.ok(&["thread", "run", &id]);
    let last = json(run.lines().last().unwrap());
    assert_eq!(last["done"], true, "{run}");
    let show = json(&env.ok(&["thread", "show", &id]));
    assert_eq!(show["status"], "done", "{show}");
    let children = show["children"].as_array().unwrap().clone();
    assert_eq!(
        children.len(),
        3,
        "one develop child per developer step: {show}"
    );
    for child in &children {
        let child = json(&env.ok(&["thread", "show", child.as_str().unwrap()]));
        assert_eq!(
            (child["workflow"].as_str(), child["status"].as_str()),
            (Some("develop"), Some("done")),
            "{child}"
        );
    }
    let steps = env.ok(&["thread", "steps", &id]);
    assert_eq!(
        steps.matches("\"agent\":\"workflow:develop\"").count(),
        3,
        "{steps}"
    );
    // The transcript names every child and how it ended.
    let read = env.ok(&["thread", "read", &id]);
    for child in &children {
        let line = format!("develop `{}`: done", child.as_str().unwrap());
        assert!(read.contains(&line), "{line} in {read}");
    }
}

#[test]
fn release_notes_waits_for_a_person_and_finishes_when_answered() {
    let env = shipped();
    let id = start_thread(&env, "release-notes", "v1.2: faster steps");
    // Waiting for a person: exit 4.
    let run = env.ends(&["thread", "run", &id], 4);
    let last = json(run.lines().last().unwrap());
    assert_eq!(
        (last["awaiting"].clone(), last["role"].clone()),
        (true.into(), "approver".into()),
        "{run}"
    );
    let question = env.ok(&["thread", "question", &id]);
    assert!(question.contains("approved"), "{question}");
    let done = json(&env.ok_stdin(
        &["thread", "answer", &id, "-", "--by", "alice"],
        "{\"approved\": true}",
    ));
    assert_eq!(done["done"], true, "{done}");
}
