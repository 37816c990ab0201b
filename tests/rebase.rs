//! `uwf thread rebase` through the real binary: a thread stuck on a broken workflow
//! version goes on once the workflow is fixed; a history that no longer fits is refused, naming
//! the step, and nothing changes; `--workflow NAME@HASH` picks a version; a running step makes
//! it busy; an index of the first version is upgraded to hold the new status. The core
//! scenario runs over a directory store and over PostgreSQL (skipped without it, unless
//! `UWF_REQUIRE_POSTGRES=1`).

mod common;
mod pg_server;

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use common::json;
use common::machine::Machine;
use common::serve::Server;

/// The writer's schema of the first versions.
const WRITER: &str = "{ type: object, properties: { text: { type: string }, n: { type: integer } }, required: [text] }";

/// A condition that compiles (so `workflow put` takes it) and fails at every evaluation: the
/// writer's text is a string, and `+` wants numbers (T2001).
const BROKEN: &str = "steps[-1].output.text + 1 > 2";
const FIXED: &str = "$length(steps[-1].output.text) > 2";

/// The `fixme` workflow: writer → checker → $END, the first transition guarded by `long`.
fn workflow(expression: &str, writer_meta: &str) -> String {
    format!(
        r#"name: fixme
description: a workflow whose condition is fixed later
roles:
  writer:
    description: writes
    goal: write a text
    capabilities: []
    procedure: write it
    output: the text
    meta: {writer_meta}
  checker:
    description: checks
    goal: check the text
    capabilities: []
    procedure: check it
    output: a verdict
    meta: {{ type: object, properties: {{ ok: {{ type: boolean }} }}, required: [ok] }}
conditions:
  long:
    description: a long text
    expression: '{expression}'
graph:
  $START: [ {{ role: writer, condition: null }} ]
  writer: [ {{ role: checker, condition: long }}, {{ role: checker, condition: null }} ]
  checker: [ {{ role: $END, condition: null }} ]
"#
    )
}

/// Registers `yaml` (written to `file` beside the store) and returns the version's hash.
fn put(m: &Machine, file: &str, yaml: &str) -> String {
    let path = m.dir.path().join(file);
    std::fs::write(&path, yaml).expect("write workflow");
    let out = json(&m.ok(&["workflow", "put", path.to_str().expect("utf-8")]));
    out["hash"].as_str().expect("hash").to_owned()
}

/// The script agent with canned outputs for both roles.
fn agent(m: &Machine) -> String {
    let file = m.dir.path().join("fixme-script.yaml");
    std::fs::write(
        &file,
        "writer:\n  - { text: hello, n: 3 }\nchecker:\n  - { ok: true }\n",
    )
    .expect("write script");
    format!("uwf agent script --file {}", file.display())
}

fn show(m: &Machine, id: &str) -> Value {
    json(&m.ok(&["thread", "show", id]))
}

/// A step node's payload.
fn step_node(m: &Machine, hash: &str) -> Value {
    json(&m.ok(&["cas", "get", hash, "--payload"]))
}

/// The hashes of a thread's steps.
fn steps(m: &Machine, id: &str) -> Vec<String> {
    m.ok(&["thread", "steps", id, "--json"])
        .lines()
        .map(|l| json(l)["hash"].as_str().expect("hash").to_owned())
        .collect()
}

/// A thread started on the broken version, its first step taken and its second failed.
fn stuck_thread(m: &Machine) -> (String, String) {
    let broken = put(m, "v1.yaml", &workflow(BROKEN, WRITER));
    let id = m.ok(&["thread", "start", "fixme", "-p", "Write a greeting", "-q"]);
    let agent = agent(m);
    m.ok(&["thread", "step", &id, "--agent", &agent]);
    let err = m.fails(&["thread", "step", &id, "--agent", &agent]);
    assert!(err.contains("condition `long` failed"), "{err}");
    assert!(
        err.contains("hint: if the workflow has been fixed since")
            && err.contains("`uwf thread rebase <thread>`"),
        "{err}"
    );
    (id, broken)
}

/// The core scenario, over whatever store `m` uses.
fn a_stuck_thread_goes_on_after_a_rebase(m: &Machine) {
    let (id, broken) = stuck_thread(m);
    let stuck = show(m, &id);
    assert_eq!(stuck["status"], "failed", "{stuck}");
    let error = stuck["error"].as_str().unwrap_or_default();
    assert!(error.contains("uwf thread rebase"), "{stuck}");
    // Nothing to rebase onto before the fix.
    let err = m.fails(&["thread", "rebase", &id]);
    assert!(
        err.contains(&format!("already on version {broken} of `fixme`")),
        "{err}"
    );

    let fixed = put(m, "v2.yaml", &workflow(FIXED, WRITER));
    let rebased = json(&m.ok(&["thread", "rebase", &id[..10]]));
    let new = rebased["thread"].as_str().expect("new id").to_owned();
    assert_ne!(new, id);
    assert_eq!(rebased["rebasedFrom"], id.as_str(), "{rebased}");
    assert_eq!(rebased["version"], fixed.as_str(), "{rebased}");
    assert_eq!(rebased["fromVersion"], broken.as_str(), "{rebased}");
    assert_eq!(
        (rebased["steps"].as_u64(), rebased["retyped"].as_u64()),
        (Some(1), Some(0))
    );

    // New start and step nodes; the same role, agent, output and detail.
    let (old_steps, new_steps) = (steps(m, &id), steps(m, &new));
    assert_eq!((old_steps.len(), new_steps.len()), (1, 1));
    assert_ne!(old_steps[0], new_steps[0]);
    assert_eq!(rebased["head"], new_steps[0].as_str());
    let (before, after) = (step_node(m, &old_steps[0]), step_node(m, &new_steps[0]));
    for field in ["role", "agent", "output", "detail"] {
        assert_eq!(before[field], after[field], "{field}: {before} / {after}");
    }
    assert_ne!(before["start"], after["start"]);
    let start = step_node(m, after["start"].as_str().expect("start"));
    assert_eq!(start["workflow"], fixed.as_str(), "{start}");
    assert_eq!(start["prompt"], "Write a greeting", "{start}");
    // It goes on where the old one worked, with the agents its roles were bound to.
    let (old_show, new_show) = (show(m, &id), show(m, &new));
    assert!(old_show["workdir"].is_string(), "{old_show}");
    assert_eq!(new_show["workdir"], old_show["workdir"], "{new_show}");
    assert_eq!(new_show["agents"], old_show["agents"], "{new_show}");

    // The new thread goes on to the end; the old one says where its history went.
    let agent = agent(m);
    let run = m.ok(&["thread", "run", &new, "--agent", &agent]);
    let last = json(run.lines().last().expect("a step"));
    assert_eq!(
        (last["role"].as_str(), last["done"].as_bool()),
        (Some("checker"), Some(true))
    );
    let new_show = show(m, &new);
    assert_eq!(new_show["status"], "done", "{new_show}");
    assert_eq!(new_show["rebasedFrom"], id.as_str(), "{new_show}");
    let old_show = show(m, &id);
    assert_eq!(
        (
            old_show["status"].as_str(),
            old_show["done"].as_bool(),
            old_show["rebasedOnto"].as_str(),
            old_show["head"].as_str()
        ),
        (
            Some("rebased"),
            Some(true),
            Some(new.as_str()),
            stuck["head"].as_str()
        ),
        "{old_show}"
    );
    assert!(old_show.get("error").is_none(), "{old_show}");

    // Listings: not active any more, archived as rebased.
    assert!(!m.ok(&["thread", "list", "-q"]).contains(&id));
    assert_eq!(m.ok(&["thread", "list", "--status", "rebased", "-q"]), id);
    let all = m.ok(&["thread", "list", "--all", "--json"]);
    assert!(
        all.lines()
            .map(json)
            .any(|t| t["thread"] == id.as_str() && t["status"] == "rebased"),
        "{all}"
    );
    // A rebased thread takes no step, and says which thread goes on.
    let err = m.fails(&["thread", "step", &id, "--agent", &agent]);
    assert!(
        err.contains(&format!("is archived (rebased onto {new})"))
            && err.contains(&format!("`uwf thread run {new}`")),
        "{err}"
    );
    let err = m.fails(&["thread", "rebase", &id]);
    assert!(err.contains("archived (rebased"), "{err}");

    // The dashboard's API says the same.
    let server = Server::start_with(m.uwf(), "127.0.0.1:0", &[]);
    let (code, old_api) = server.get_json(&format!("/api/threads/{id}"));
    assert_eq!(code, 200, "{old_api}");
    assert_eq!(
        (old_api["status"].as_str(), old_api["rebasedOnto"].as_str()),
        (Some("rebased"), Some(new.as_str())),
        "{old_api}"
    );
    let (_, new_api) = server.get_json(&format!("/api/threads/{new}"));
    assert_eq!(new_api["rebasedFrom"], id.as_str(), "{new_api}");
    let (_, listed) = server.get_json("/api/threads?status=rebased");
    let items: Vec<&str> = listed["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|t| t["thread"].as_str())
        .collect();
    assert_eq!(items, [id.as_str()], "{listed}");
}

#[test]
fn a_thread_stuck_on_a_broken_version_goes_on_after_a_rebase() {
    a_stuck_thread_goes_on_after_a_rebase(&Machine::new(None, None));
}

#[test]
fn a_thread_stuck_on_a_broken_version_goes_on_after_a_rebase_over_postgres() {
    let name = "a_thread_stuck_on_a_broken_version_goes_on_after_a_rebase_over_postgres";
    let Some(server) = pg_server::shared(name) else {
        return;
    };
    let url = server.fresh_db(name);
    let m = Machine::new(Some(&url), None);
    a_stuck_thread_goes_on_after_a_rebase(&m);
    // Another machine (its own root, the same database) sees both ends of the rebase.
    let other = Machine::new(Some(&url), None);
    let rebased = other.ok(&["thread", "list", "--status", "rebased", "-q"]);
    let old = show(&other, &rebased);
    let new = old["rebasedOnto"].as_str().expect("rebasedOnto").to_owned();
    assert_eq!(show(&other, &new)["rebasedFrom"], rebased.as_str());
}

#[test]
fn outputs_that_no_longer_fit_are_refused_naming_the_step_and_nothing_changes() {
    let m = Machine::new(None, None);
    let (id, _) = stuck_thread(&m);
    let before = show(&m, &id);
    let threads = m.ok(&["thread", "list", "--all", "-q"]);
    // A field made required and another's type changed: both named, with the step.
    let stricter = "{ type: object, properties: { text: { type: string }, n: { type: string }, \
                    words: { type: integer } }, required: [text, words] }";
    let version = put(&m, "v2.yaml", &workflow(FIXED, stricter));
    let step = &steps(&m, &id)[0];
    let err = m.fails(&["thread", "rebase", &id]);
    assert!(
        err.contains(&format!(
            "cannot be rebased onto version {version} of `fixme`"
        )) && err.contains(&format!("step 1 ({step}, role `writer`)"))
            && err.contains("\"words\" is a required property")
            && err.contains("at /n: 3 is not of type \"string\""),
        "{err}"
    );
    // A role the version no longer has.
    let renamed = workflow(FIXED, WRITER).replace("writer", "author");
    put(&m, "v3.yaml", &renamed);
    let err = m.fails(&["thread", "rebase", &id]);
    assert!(
        err.contains(&format!(
            "step 1 ({step}, role `writer`): the version has no role `writer`"
        )) && err.contains("(roles: author, checker)"),
        "{err}"
    );
    // Nothing changed: the thread is as it was, and no thread was added.
    let after = show(&m, &id);
    assert_eq!(
        (&after["status"], &after["head"]),
        (&before["status"], &before["head"])
    );
    assert_eq!(m.ok(&["thread", "list", "--all", "-q"]), threads);
}

#[test]
fn workflow_name_at_hash_picks_the_version() {
    let m = Machine::new(None, None);
    let (id, broken) = stuck_thread(&m);
    let fixed = put(&m, "v2.yaml", &workflow(FIXED, WRITER));
    let later = put(
        &m,
        "v3.yaml",
        &workflow("$length(steps[-1].output.text) > 3", WRITER),
    );
    // A hash of another workflow's version is refused by name.
    let other = put(
        &m,
        "other.yaml",
        &workflow(FIXED, WRITER).replace("name: fixme", "name: other"),
    );
    let err = m.fails(&[
        "thread",
        "rebase",
        &id,
        "--workflow",
        &format!("fixme@{other}"),
    ]);
    assert!(
        err.contains(&format!("{other} is a version of `other`, not of `fixme`")),
        "{err}"
    );
    let err = m.fails(&["thread", "rebase", &id, "--workflow", "fixme@NOTAHASH"]);
    assert!(err.contains("is not NAME@HASH"), "{err}");
    // The version asked for, not the current one.
    let picked = format!("fixme@{fixed}");
    let rebased = json(&m.ok(&["thread", "rebase", &id, "--workflow", &picked]));
    assert_eq!(
        (rebased["version"].as_str(), rebased["fromVersion"].as_str()),
        (Some(fixed.as_str()), Some(broken.as_str()))
    );
    // And the thread on it can be rebased again, by default onto the current version.
    let new = rebased["thread"].as_str().expect("thread");
    let again = json(&m.ok(&["thread", "rebase", new]));
    assert_eq!(again["version"], later.as_str(), "{again}");
    assert_eq!(show(&m, new)["rebasedOnto"], again["thread"]);
}

#[test]
fn a_rebase_while_a_step_runs_is_busy() {
    let m = Machine::new(None, None);
    put(&m, "v1.yaml", &workflow(BROKEN, WRITER));
    let id = m.ok(&["thread", "start", "fixme", "-p", "p", "-q"]);
    let slow = format!(
        "sh -c 'sleep 3; exec {} agent dry \"$1\" \"$2\"' agent",
        env!("CARGO_BIN_EXE_uwf")
    );
    put(&m, "v2.yaml", &workflow(FIXED, WRITER));
    let mut first = m
        .uwf()
        .args(["thread", "step", &id, "--agent", &slow])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn step");
    let run = m.root().join("runs").join(format!("{id}.run.json"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&run)
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .is_some_and(|v| v["agentPid"].is_u64())
    {
        assert!(
            Instant::now() < deadline,
            "the step never started its agent"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = m.run(&["thread", "rebase", &id]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(75), "{err}");
    assert!(err.contains(&format!("thread {id} is busy")), "{err}");
    assert!(first.wait().expect("step").success());
    // Once the step is over, the rebase goes through.
    json(&m.ok(&["thread", "rebase", &id]));
}

#[test]
fn help_says_what_is_checked_with_examples() {
    let m = Machine::new(None, None);
    let help = m.ok(&["thread", "rebase", "--help"]);
    for wanted in [
        "--workflow <NAME[@HASH]>",
        "Conditions are not evaluated again",
        "Examples:",
        "uwf thread rebase 01JD8X… --workflow solve-issue@4X5K4AE2AA5F2",
    ] {
        assert!(help.contains(wanted), "no `{wanted}` in:\n{help}");
    }
    assert!(m.ok(&["thread", "--help"]).contains("rebase"));
}

#[test]
fn an_index_of_the_first_version_is_upgraded_and_takes_a_rebase() {
    let m = Machine::new(None, None);
    let (id, _) = stuck_thread(&m);
    // Back to the first version's table, as a store written before `rebased` existed.
    let db = m.root().join("index.db");
    {
        let conn = rusqlite::Connection::open(&db).expect("open index");
        conn.execute_batch(
            "create table v1 (
                 id text primary key not null, workflow text not null, head text not null,
                 status text not null check (status in ('active', 'done', 'killed')),
                 parent text, created_ms integer not null, updated_ms integer not null,
                 completed_ms integer, steps integer, next text, error text, awaiting text
             ) without rowid;
             insert into v1 select id, workflow, head, status, parent, created_ms, updated_ms,
                 completed_ms, steps, next, error, awaiting from threads;
             drop table threads;
             alter table v1 rename to threads;
             create index threads_by_status on threads (status, id);
             create index threads_by_workflow on threads (workflow, id);
             create index threads_by_head on threads (head) where status = 'active';
             update meta set value = 1 where key = 'schema';",
        )
        .expect("downgrade");
    }
    assert_eq!(m.ok(&["thread", "list", "-q"]), id);
    put(&m, "v2.yaml", &workflow(FIXED, WRITER));
    let new = m.ok(&["thread", "rebase", &id, "-q"]);
    assert_eq!(show(&m, &id)["rebasedOnto"], new.as_str());
    let conn = rusqlite::Connection::open(&db).expect("open index");
    let version: i64 = conn
        .query_row("select value from meta where key = 'schema'", [], |r| {
            r.get(0)
        })
        .expect("version");
    // Straight to this binary's version (3 keeps prompts for search, 4 what threads spent).
    assert_eq!(version, 4);
}
