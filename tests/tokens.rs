//! Tokens, cost and budgets through the real binary (`docs/LLM.md#tokens-cost-and-budgets`),
//! on the directory store and on PostgreSQL: the `llm` and `react` agents against a scripted
//! server with known `usage`, the totals of `thread show`, `thread list --json`, `uwf status`
//! and `thread budget`, prices from `config.yaml`, and a budget that stops a thread until it
//! is raised.

mod common;
mod mock_llm;
mod pg_server;

use common::json;
use common::machine::Machine;
use common::serve::Server;
use mock_llm::{Mock, Reply};
use serde_json::{Value, json};

const KEY_ENV: &str = "UWF_TEST_TOKENS_KEY";

const WORKFLOW: &str = r#"
name: trio
description: Three roles one after another.
roles:
  first: &role
    description: Writes a note.
    goal: You write notes.
    procedure: Write one.
    output: A note.
    meta:
      type: object
      properties:
        notes: { type: string, description: The note. }
      required: [notes]
      additionalProperties: false
  second: *role
  third: *role
conditions: {}
graph:
  $START:
    - role: first
      condition: null
  first:
    - role: second
      condition: null
  second:
    - role: third
      condition: null
  third:
    - role: $END
      condition: null
"#;

const NOTE: &str = "---\nnotes: done\n---\n";

/// A completion of `NOTE` whose usage is `prompt` tokens in (`cached` of them from the cache)
/// and `completion` out.
fn answer(prompt: u64, completion: u64, cached: u64) -> Reply {
    with_usage(mock_llm::content(NOTE), prompt, completion, cached)
}

fn with_usage(reply: Reply, prompt: u64, completion: u64, cached: u64) -> Reply {
    let Reply::Http { status, body, .. } = reply else {
        panic!("a JSON reply")
    };
    let mut body: Value = serde_json::from_str(&body).unwrap();
    body["usage"] = json!({"prompt_tokens": prompt, "completion_tokens": completion,
        "total_tokens": prompt + completion, "prompt_tokens_details": {"cached_tokens": cached}});
    Reply::json(status, body)
}

/// A machine (on `url`'s PostgreSQL when given) with the `trio` workflow and a config pointing
/// at `mock`, `extra` appended to it.
fn machine(url: Option<&str>, mock: &Mock, extra: &str) -> Machine {
    let m = Machine::new(url, None);
    let file = m.dir.path().join("trio.yaml");
    std::fs::write(&file, WORKFLOW).unwrap();
    m.ok(&["workflow", "put", file.to_str().unwrap()]);
    std::fs::write(
        m.root().join("config.yaml"),
        format!(
            "providers:\n  mock: {{ baseUrl: '{}', apiKeyEnv: {KEY_ENV}, timeout: 5, retries: 0 }}\n\
             models:\n  fast: {{ provider: mock, name: mock-fast-1 }}\n\
             defaultModel: fast\ndefaultAgent: llm\n{extra}",
            mock.base_url
        ),
    )
    .unwrap();
    std::fs::write(m.root().join(".env"), format!("{KEY_ENV}=sk-test\n")).unwrap();
    common::chmod_600(&m.root().join(".env"));
    m
}

fn start(m: &Machine, extra: &[&str]) -> String {
    let mut args = vec!["thread", "start", "trio", "-p", "Write three notes"];
    args.extend(extra);
    json(&m.ok(&args))["thread"].as_str().unwrap().to_owned()
}

/// The `cost` of a thread in `thread list --json`.
fn listed_cost(m: &Machine, id: &str) -> Value {
    m.ok(&["thread", "list", "--all", "--json"])
        .lines()
        .map(json)
        .find(|row| row["thread"] == id)
        .unwrap_or_else(|| panic!("{id} listed"))["cost"]
        .clone()
}

/// The hash of the detail node of thread `id`'s step `n` (as `thread steps` lists them, from 0).
fn detail_of(m: &Machine, id: &str, n: usize) -> String {
    let steps: Vec<Value> = m
        .ok(&["thread", "steps", id, "--json"])
        .lines()
        .map(json)
        .collect();
    let hash = steps[n]["hash"].as_str().unwrap();
    let step = json(&m.ok(&["cas", "get", hash, "--payload"]));
    step["detail"].as_str().unwrap().to_owned()
}

/// Deletes the detail nodes of thread `id`'s steps `steps` (counted as `detail_of` counts):
/// only the thread's row can then say what those steps spent.
fn remove_details(m: &Machine, id: &str, steps: std::ops::Range<usize>) {
    // Every hash first: `thread steps` refuses a thread with a node missing.
    let details: Vec<String> = steps.map(|n| detail_of(m, id, n)).collect();
    for detail in details {
        let file = m.object_path(&detail);
        std::fs::remove_file(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    }
}

const PRICES: &str = "prices:\n  mock-fast-1: { input: 1, output: 2, cached: 0.5 }\n";

fn totals_equal_the_sum_of_what_the_server_reported(url: Option<&str>) {
    let mock = Mock::start(vec![
        answer(100, 10, 0),
        answer(200, 20, 50),
        answer(300, 30, 0),
    ]);
    let m = machine(url, &mock, PRICES);
    let id = start(&m, &[]);
    m.ok(&["thread", "run", &id]);
    assert_eq!(mock.requests().len(), 3);
    let show = json(&m.ok(&["thread", "show", &id, "--json"]));
    let cost = &show["cost"];
    assert_eq!(
        (
            &cost["input"],
            &cost["output"],
            &cost["cached"],
            &cost["tokens"],
            &cost["steps"]
        ),
        (&json!(600), &json!(60), &json!(50), &json!(660), &json!(3)),
        "{show}"
    );
    // (550 fresh × $1 + 50 cached × $0.50 + 60 out × $2) per million.
    let usd = cost["costUsd"].as_f64().unwrap();
    assert!((usd - 0.000_695).abs() < 1e-12, "{usd}");
    assert_eq!(show["budget"], Value::Null);
    assert_eq!(&listed_cost(&m, &id), cost);
    // Each step's detail keeps its own tokens in the shared shape.
    let detail = json(&m.ok(&["cas", "get", &detail_of(&m, &id, 1), "--payload"]));
    assert_eq!(
        detail["tokens"],
        json!({"input": 200, "output": 20, "cached": 50, "model": "mock-fast-1"})
    );
    let budget = json(&m.ok(&["thread", "budget", &id]));
    assert_eq!((&budget["budget"], &budget["cost"]), (&Value::Null, cost));
    // The dashboard: the thread's totals and each step's tokens.
    let server = Server::start_with(m.uwf(), "127.0.0.1:0", &[]);
    let (status, thread) = server.get_json(&format!("/api/threads/{id}"));
    assert_eq!((status, &thread["cost"]), (200, cost), "{thread}");
    let (_, steps) = server.get_json(&format!("/api/threads/{id}/steps"));
    assert_eq!(steps["steps"][2]["tokens"]["input"], 300, "{steps}");
}

#[test]
fn totals_equal_the_sum_over_files() {
    totals_equal_the_sum_of_what_the_server_reported(None);
}

/// Once a listing has worked out what a thread spent, the next one reads it from the thread's
/// row, at the prices of the moment: with a step's detail node gone (only the row can say what
/// that step spent) and the prices doubled, the listing still counts every token, at the new
/// prices.
#[test]
fn a_listing_reads_what_threads_spent_from_their_rows() {
    let mock = Mock::start(vec![
        answer(100, 10, 0),
        answer(200, 20, 50),
        answer(300, 30, 0),
    ]);
    let m = machine(None, &mock, PRICES);
    let id = start(&m, &[]);
    m.ok(&["thread", "run", &id]);
    let first = listed_cost(&m, &id);
    assert_eq!(
        (&first["tokens"], &first["steps"]),
        (&json!(660), &json!(3))
    );
    assert!((first["costUsd"].as_f64().unwrap() - 0.000_695).abs() < 1e-12);

    remove_details(&m, &id, 1..2);
    let config = m.root().join("config.yaml");
    let doubled = std::fs::read_to_string(&config).unwrap().replace(
        "{ input: 1, output: 2, cached: 0.5 }",
        "{ input: 2, output: 4, cached: 1 }",
    );
    std::fs::write(&config, doubled).unwrap();

    let second = listed_cost(&m, &id);
    assert_eq!(
        (&second["tokens"], &second["steps"]),
        (&json!(660), &json!(3)),
        "{second}"
    );
    let usd = second["costUsd"].as_f64().unwrap();
    assert!((usd - 2.0 * 0.000_695).abs() < 1e-12, "{usd}");
}

/// Each step adds what it spent to its thread's row as it moves the head: a listing after the
/// steps reads the row alone, even with every step's detail node gone, and writes the lines
/// back as their sum.
#[test]
fn each_step_adds_what_it_spent_to_its_thread_row() {
    let mock = Mock::start(vec![
        answer(100, 10, 0),
        answer(200, 20, 50),
        answer(300, 30, 0),
    ]);
    let m = machine(None, &mock, PRICES);
    let id = start(&m, &[]);
    m.ok(&["thread", "run", &id]);
    remove_details(&m, &id, 0..3);
    for listing in ["first", "second"] {
        let cost = listed_cost(&m, &id);
        assert_eq!(
            (&cost["tokens"], &cost["steps"]),
            (&json!(660), &json!(3)),
            "{listing} listing: {cost}"
        );
        let usd = cost["costUsd"].as_f64().unwrap();
        assert!((usd - 0.000_695).abs() < 1e-12, "{listing} listing: {usd}");
    }
}

/// A fork's row does not know what its first steps spent; the first budget check works it out
/// and writes it back, and the fork's steps add to it from there.
#[test]
fn a_budget_check_writes_back_what_a_fork_spent() {
    let mock = Mock::start(vec![
        answer(100, 10, 0),
        answer(200, 20, 50),
        answer(300, 30, 0),
        answer(400, 40, 0),
    ]);
    let m = machine(None, &mock, PRICES);
    let id = start(&m, &[]);
    m.ok(&["thread", "run", &id]);
    let fork = m
        .ok(&["thread", "fork", &format!("{id}:1"), "-q"])
        .trim()
        .to_owned();
    m.ok(&["thread", "budget", &fork, "--max-tokens", "100000"]);
    m.ok(&["thread", "step", &fork]);
    remove_details(&m, &fork, 0..2);
    let cost = listed_cost(&m, &fork);
    assert_eq!(
        (&cost["tokens"], &cost["steps"]),
        (&json!(110 + 440), &json!(2)),
        "{cost}"
    );
}

#[test]
fn totals_equal_the_sum_over_postgres() {
    let name = "tokens_totals_equal_the_sum_over_postgres";
    let Some(server) = pg_server::shared(name) else {
        return;
    };
    let url = server.fresh_db(name);
    totals_equal_the_sum_of_what_the_server_reported(Some(&url));
}

#[test]
fn react_rounds_add_up_and_a_cost_without_a_price_is_unknown() {
    let mock = Mock::start(vec![
        with_usage(mock_llm::content("thinking"), 40, 4, 10),
        with_usage(mock_llm::call("resolve", json!({"notes": "n"})), 60, 6, 0),
    ]);
    let m = machine(None, &mock, "");
    let id = start(&m, &[]);
    m.ok(&["thread", "step", &id, "--agent", "react"]);
    let show = json(&m.ok(&["thread", "show", &id, "--json"]));
    let cost = &show["cost"];
    assert_eq!(
        (
            &cost["input"],
            &cost["output"],
            &cost["cached"],
            &cost["steps"]
        ),
        (&json!(100), &json!(10), &json!(10), &json!(1)),
        "{show}"
    );
    // No price for the model and none reported: unknown, never 0.
    assert_eq!(cost["costUsd"], Value::Null, "{show}");
    assert_eq!(&listed_cost(&m, &id), cost);
}

fn a_budget_stops_the_thread_until_it_is_raised(url: Option<&str>) {
    let mock = Mock::start(vec![
        answer(100, 10, 0),
        answer(100, 10, 0),
        answer(100, 10, 0),
    ]);
    let m = machine(url, &mock, "");
    let id = start(&m, &["--max-tokens", "100", "--by", "alice"]);
    // The first step spends 110 tokens, reaching 100: the second does not run, and the thread
    // waits for a person (exit 4, as for a question), saying why.
    let out = m.run(&["thread", "run", &id]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(err.contains("budget reached: 110 of 100 tokens"), "{err}");
    assert!(
        err.contains(&format!("uwf thread budget {id} --max-tokens")),
        "{err}"
    );
    assert_eq!(mock.requests().len(), 1);
    let show = json(&m.ok(&["thread", "show", &id, "--json"]));
    assert_eq!(show["status"], "over-budget", "{show}");
    assert!(
        show["error"]
            .as_str()
            .unwrap_or_default()
            .contains("budget reached"),
        "{show}"
    );
    assert_eq!(show["budget"], json!({"maxTokens": 100}));
    // Listed as such, and found by that status.
    let row = m
        .ok(&["thread", "list", "--json"])
        .lines()
        .map(json)
        .find(|row| row["thread"] == id.as_str())
        .expect("listed");
    assert_eq!(row["status"], "over-budget", "{row}");
    assert_eq!(
        m.ok(&["thread", "list", "--status", "over-budget", "-q"])
            .trim(),
        id
    );
    assert_eq!(
        m.ok(&["thread", "list", "--status", "failed", "-q"]).trim(),
        ""
    );
    // `uwf status` shows it among what waits for a person, with the raise command.
    let status = json(&m.ok(&["status", "--json"]));
    let waiting = &status["awaiting"]["threads"][0];
    assert_eq!(waiting["thread"], id.as_str(), "{status}");
    assert_eq!(waiting["status"], "over-budget", "{status}");
    assert_eq!(waiting["cost"]["tokens"], 110, "{status}");
    assert!(
        waiting["command"]
            .as_str()
            .unwrap()
            .contains("uwf thread budget"),
        "{status}"
    );
    assert_eq!(status["failed"]["total"], 0, "{status}");
    let err = m.fails(&["thread", "step", &id]);
    assert!(err.contains("budget reached"), "{err}");
    assert_eq!(mock.requests().len(), 1);
    // A raise, and it no longer waits: no `thread queue` or step needed to say so.
    let raised = json(&m.ok(&["thread", "budget", &id, "--max-tokens", "1000", "--json"]));
    assert_eq!(raised["budget"], json!({"maxTokens": 1000}));
    assert_eq!(raised["resumed"], true, "{raised}");
    let show = json(&m.ok(&["thread", "show", &id, "--json"]));
    assert_eq!(show["status"], "active", "{show}");
    m.ok(&["thread", "run", &id]);
    let show = json(&m.ok(&["thread", "show", &id, "--json"]));
    assert_eq!(show["status"], "done", "{show}");
    assert_eq!(show["cost"]["tokens"], 330, "{show}");
    let log = m.ok(&["thread", "log", &id]);
    assert!(log.contains("budget by"), "{log}");
}

#[test]
fn a_budget_stops_the_thread_over_files() {
    a_budget_stops_the_thread_until_it_is_raised(None);
}

#[test]
fn a_budget_stops_the_thread_over_postgres() {
    let name = "tokens_a_budget_stops_the_thread_over_postgres";
    let Some(server) = pg_server::shared(name) else {
        return;
    };
    let url = server.fresh_db(name);
    a_budget_stops_the_thread_until_it_is_raised(Some(&url));
}

#[test]
fn a_cost_budget_from_config_counts_priced_steps() {
    let mock = Mock::start(vec![
        answer(100, 10, 0),
        answer(100, 10, 0),
        answer(100, 10, 0),
    ]);
    // Each step: (100 × $100 + 10 × $200) per million = $0.012.
    let extra = "prices:\n  mock-fast-1: { input: 100, output: 200 }\n\
                 budgets:\n  default: { maxCost: 5 }\n  trio: { maxCost: 0.02 }\n";
    let m = machine(None, &mock, extra);
    let id = start(&m, &[]);
    let out = m.run(&["thread", "run", &id]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    // Two steps ran (0 < 0.02, then 0.012 < 0.02); the third would start at $0.024.
    assert!(err.contains("budget reached: $0.0240 of $0.0200"), "{err}");
    assert_eq!(mock.requests().len(), 2);
    m.ok(&["thread", "budget", &id, "--max-cost", "1"]);
    m.ok(&["thread", "run", &id]);
    let cost = json(&m.ok(&["thread", "show", &id, "--json"]))["cost"].clone();
    assert!(
        (cost["costUsd"].as_f64().unwrap() - 0.036).abs() < 1e-9,
        "{cost}"
    );
}

/// A queued thread at its budget stays queued and waits; a worker passes it by (and goes idle),
/// and takes it again once a raise clears it, with no `thread queue`.
fn a_queued_thread_resumes_after_a_raise(url: Option<&str>) {
    let mock = Mock::start(vec![
        answer(100, 10, 0),
        answer(100, 10, 0),
        answer(100, 10, 0),
    ]);
    let m = machine(url, &mock, "");
    let id = start(&m, &["--max-tokens", "100"]);
    m.ok(&["thread", "queue", &id]);
    let out = m.run(&["worker", "--until-idle"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("waits for a person"), "{err}");
    assert_eq!(mock.requests().len(), 1);
    let show = json(&m.ok(&["thread", "show", &id, "--json"]));
    assert_eq!(show["status"], "over-budget", "{show}");
    // Raising less than it spent changes nothing.
    let raised = json(&m.ok(&["thread", "budget", &id, "--max-tokens", "110", "--json"]));
    assert_eq!(raised["resumed"], Value::Null, "{raised}");
    m.ok(&["worker", "--until-idle"]);
    assert_eq!(mock.requests().len(), 1);
    let raised = json(&m.ok(&["thread", "budget", &id, "--max-tokens", "1000", "--json"]));
    assert_eq!(raised["resumed"], true, "{raised}");
    let out = m.run(&["worker", "--until-idle"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let show = json(&m.ok(&["thread", "show", &id, "--json"]));
    assert_eq!(show["status"], "done", "{show}");
    assert_eq!(mock.requests().len(), 3);
}

#[test]
fn a_queued_thread_resumes_after_a_raise_over_files() {
    a_queued_thread_resumes_after_a_raise(None);
}

#[test]
fn a_queued_thread_resumes_after_a_raise_over_postgres() {
    let name = "tokens_a_queued_thread_resumes_after_a_raise_over_postgres";
    let Some(server) = pg_server::shared(name) else {
        return;
    };
    let url = server.fresh_db(name);
    a_queued_thread_resumes_after_a_raise(Some(&url));
}

/// A workflow's totals are the sum over its threads, in `workflow show`, `workflow list` and
/// the dashboard's workflow API alike.
fn workflow_totals_are_the_sum_over_its_threads(url: Option<&str>) {
    let mock = Mock::start(vec![
        answer(100, 10, 0),
        answer(200, 20, 50),
        answer(300, 30, 0),
        answer(400, 40, 10),
    ]);
    let m = machine(url, &mock, PRICES);
    let done = start(&m, &[]);
    m.ok(&["thread", "run", &done]);
    let one_step = start(&m, &[]);
    m.ok(&["thread", "step", &one_step]);
    let _idle = start(&m, &[]);
    let (a, b) = (listed_cost(&m, &done), listed_cost(&m, &one_step));
    let shown = json(&m.ok(&["workflow", "show", "trio", "--json"]))["cost"].clone();
    for field in ["input", "output", "cached", "tokens", "steps"] {
        assert_eq!(
            shown[field].as_u64().unwrap(),
            a[field].as_u64().unwrap() + b[field].as_u64().unwrap(),
            "{field}: {shown} = {a} + {b}"
        );
    }
    assert_eq!(
        (&shown["input"], &shown["threads"]),
        (&json!(1000), &json!(3))
    );
    let usd = a["costUsd"].as_f64().unwrap() + b["costUsd"].as_f64().unwrap();
    assert!(
        (shown["costUsd"].as_f64().unwrap() - usd).abs() < 1e-12,
        "{shown}"
    );
    let listed = json(&m.ok(&["workflow", "list", "--json"]));
    assert_eq!(listed["cost"], shown, "{listed}");
    let server = Server::start_with(m.uwf(), "127.0.0.1:0", &[]);
    let (status, all) = server.get_json("/api/workflows");
    assert_eq!((status, &all["items"][0]["cost"]), (200, &shown), "{all}");
    let (_, one) = server.get_json("/api/workflows/trio");
    assert_eq!(one["cost"], shown, "{one}");
}

#[test]
fn workflow_totals_over_files() {
    workflow_totals_are_the_sum_over_its_threads(None);
}

#[test]
fn workflow_totals_over_postgres() {
    let name = "tokens_workflow_totals_over_postgres";
    let Some(server) = pg_server::shared(name) else {
        return;
    };
    let url = server.fresh_db(name);
    workflow_totals_are_the_sum_over_its_threads(Some(&url));
}
