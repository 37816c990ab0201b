//! `uwf worker` over PostgreSQL and over a directory store (issue #18): worker
//! processes, each with its own storage root as if on its own machine, share one database;
//! every queued thread is finished exactly once, also when a worker is killed with -9.

mod common;
mod pg_server;

use std::collections::HashSet;
use std::io::Read;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use uwf::cas::Hash;
use uwf::pg::{PgConfig, PgStore};

use common::machine::Machine;

/// The roles a solve-issue thread takes with `common::SOLVE_SCRIPT`'s answers.
const ROLES: [&str; 5] = ["planner", "developer", "reviewer", "developer", "reviewer"];

/// Waits for a worker and returns (stdout, stderr); kills it after `limit`.
fn finish(mut child: Child, limit: Duration) -> (String, String) {
    let started = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("a worker did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let (mut out, mut err) = (String::new(), String::new());
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(child.wait().unwrap().success(), "worker failed: {err}");
    (out, err)
}

/// Registers solve-issue and queues `n` threads; returns their ids.
fn queue_threads(machine: &Machine, n: usize) -> Vec<String> {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/solve-issue.yaml");
    machine.ok(&["workflow", "put", &example.to_string_lossy()]);
    (0..n)
        .map(|i| {
            machine.ok(&[
                "thread",
                "start",
                "solve-issue",
                "-p",
                &format!("issue {i}"),
                "--queue",
                "-q",
            ])
        })
        .collect()
}

/// Checks that every thread is archived as done with exactly the five steps of the script,
/// each published once (a chain of distinct steps, each on the one before).
fn assert_all_done_once(pg: &PgStore, ids: &[String]) {
    let archived: Vec<_> = pg.archived_threads().expect("history");
    let by_id: std::collections::HashMap<_, _> =
        archived.iter().map(|a| (a.thread.as_str(), a)).collect();
    assert!(
        pg.active_threads(None).expect("active").is_empty(),
        "threads left active"
    );
    let mut all_steps = HashSet::new();
    for id in ids {
        let a = by_id
            .get(id.as_str())
            .unwrap_or_else(|| panic!("thread {id} is not archived"));
        assert_eq!(a.status, "done", "thread {id}");
        let mut roles = Vec::new();
        let mut at = a.head;
        loop {
            let node = pg.get_node(at).expect("step node");
            let Some(prev) = node.payload.get("prev") else {
                break; // the start node
            };
            assert!(all_steps.insert(at), "step {at} appears twice");
            roles.push(node.payload["role"].as_str().unwrap().to_owned());
            match prev {
                Value::Null => break,
                Value::String(p) => at = Hash::parse(p).unwrap(),
                other => panic!("prev {other}"),
            }
        }
        roles.reverse();
        assert_eq!(roles, ROLES, "thread {id}");
    }
    assert_eq!(all_steps.len(), ids.len() * ROLES.len());
}

fn steps_reported(stderr: &str) -> u64 {
    let line = stderr
        .lines()
        .find(|l| l.contains("worker stopped"))
        .unwrap_or_else(|| panic!("no summary in {stderr}"));
    let after = line.rsplit(": ").next().expect("counts");
    after.split(' ').next().unwrap().parse().expect("steps")
}

#[test]
fn four_workers_finish_a_hundred_queued_threads_exactly_once() {
    let name = "four_workers_finish_a_hundred_queued_threads_exactly_once";
    let Some(server) = pg_server::shared(name) else {
        return;
    };
    let url = server.fresh_db(name);
    let setup = Machine::new(Some(&url), None);
    let ids = queue_threads(&setup, 100);
    let machines: Vec<Machine> = (0..4).map(|_| Machine::new(Some(&url), None)).collect();
    let started = Instant::now();
    let workers: Vec<Child> = machines
        .iter()
        .map(|m| m.worker(&m.script_agent()))
        .collect();
    let mut total = 0;
    let mut busy_workers = 0;
    for w in workers {
        let (out, err) = finish(w, Duration::from_secs(120));
        let steps = steps_reported(&err);
        total += steps;
        busy_workers += usize::from(steps > 0);
        assert_eq!(out.lines().count() as u64, steps, "one line per step");
    }
    eprintln!(
        "4 workers, 100 threads, 500 steps in {:?}",
        started.elapsed()
    );
    // Every step a worker reports was published by it: 500 in all means none twice.
    assert_eq!(total, 500);
    assert!(busy_workers >= 2, "the work was shared");
    let pg = PgStore::open(&PgConfig::parse(&url).unwrap()).unwrap();
    assert_all_done_once(&pg, &ids);
}

#[test]
fn a_worker_killed_mid_step_loses_nothing_and_its_thread_resumes_after_the_lease() {
    let name = "a_worker_killed_mid_step_loses_nothing";
    let Some(server) = pg_server::shared(name) else {
        return;
    };
    let url = server.fresh_db(name);
    let lease = 3;
    let setup = Machine::new(Some(&url), Some(lease));
    let ids = queue_threads(&setup, 100);
    let machines: Vec<Machine> = (0..4)
        .map(|_| Machine::new(Some(&url), Some(lease)))
        .collect();
    let mut workers: Vec<Child> = machines
        .iter()
        .map(|m| m.worker(&m.slow_agent("0.05")))
        .collect();
    let pg = PgStore::open(&PgConfig::parse(&url).unwrap()).unwrap();
    // Wait until the victim holds a lease (it is mid-step), then kill it.
    let victim = workers.remove(0);
    let holder = format!("pid {} ", victim.id());
    let deadline = Instant::now() + Duration::from_secs(30);
    let held = loop {
        let mut client = pg_server::PgServer::raw(&url);
        let rows = client
            .query(
                "select thread from leases where holder like $1 || '%'",
                &[&holder],
            )
            .unwrap();
        if let Some(row) = rows.first() {
            break row.get::<_, String>(0);
        }
        assert!(Instant::now() < deadline, "the victim never took a lease");
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_millis(30));
    let mut victim = victim;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(victim.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let killed_at = Instant::now();
    victim.wait().unwrap();
    // The thread it held is resumed by another worker once the lease ran out.
    let resumed_within = Duration::from_secs(lease + 10);
    loop {
        let done = pg
            .archived_threads()
            .unwrap()
            .iter()
            .any(|a| a.thread == held);
        if done {
            break;
        }
        assert!(
            killed_at.elapsed() < resumed_within,
            "thread {held} not finished within the lease time + 10 s of the kill"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "the killed worker's thread finished {:?} after the kill",
        killed_at.elapsed()
    );
    for w in workers {
        finish(w, Duration::from_secs(120));
    }
    assert_all_done_once(&pg, &ids);
}

#[test]
fn a_thread_held_by_a_worker_is_busy_for_a_step_elsewhere_naming_holder_and_machine() {
    let name = "a_thread_held_by_a_worker_is_busy_elsewhere";
    let Some(server) = pg_server::shared(name) else {
        return;
    };
    let url = server.fresh_db(name);
    let a = Machine::new(Some(&url), None);
    let b = Machine::new(Some(&url), None);
    let ids = queue_threads(&a, 1);
    let slow = a.slow_agent("3");
    let mut step = a
        .uwf()
        .args(["thread", "step", &ids[0], "--agent", &slow])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    let out = b
        .uwf()
        .args(["thread", "step", &ids[0], "--agent", &b.script_agent()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(75), "{err}");
    assert!(err.contains(&format!("pid {}", step.id())), "{err}");
    assert!(err.contains("on machine"), "{err}");
    assert!(step.wait().unwrap().success());
    let show: Value = serde_json::from_str(&b.ok(&["thread", "show", &ids[0]])).unwrap();
    assert_eq!(show["steps"], 1, "exactly one step: {show}");
}

#[test]
fn workers_share_a_directory_stores_queue() {
    // No database: the same model over files (two workers, one root, file locks).
    let machine = Machine::new(None, None);
    let ids = queue_threads(&machine, 20);
    let off = &ids[19];
    let line = machine.ok(&["thread", "queue", off, "--off"]);
    assert!(line.contains("\"queued\":false"), "{line}");
    let workers: Vec<Child> = (0..2)
        .map(|_| machine.worker(&machine.script_agent()))
        .collect();
    let total: u64 = workers
        .into_iter()
        .map(|w| steps_reported(&finish(w, Duration::from_secs(60)).1))
        .sum();
    assert_eq!(total, 19 * 5);
    let list = machine.ok(&["thread", "list", "--all", "--json"]);
    let done = list
        .lines()
        .filter(|l| l.contains("\"status\":\"done\""))
        .count();
    assert_eq!(done, 19, "{list}");
    let left: Value = serde_json::from_str(&machine.ok(&["thread", "show", off])).unwrap();
    assert_eq!(left["steps"], 0, "the dequeued thread was not stepped");
}

/// A workflow whose middle role a person plays: intake → approver (human) → closer.
const GATE: &str = "name: gate\nroles:\n  intake:\n    meta: { type: object, properties: { text: { type: string } }, required: [text] }\n  approver:\n    meta: { type: object, properties: { approved: { type: boolean } }, required: [approved] }\n  closer:\n    meta: { type: object, properties: { text: { type: string } }, required: [text] }\ngraph:\n  $START: [ { role: intake, condition: null } ]\n  intake: [ { role: approver, condition: null } ]\n  approver: [ { role: closer, condition: null } ]\n  closer: [ { role: $END, condition: null } ]\n";

/// Issue #27 item 7: a queued thread that waited on a person goes back on the queue when it
/// is answered, so the next `worker --until-idle` finishes it.
fn answered_gate_goes_back_on_the_queue(machine: &Machine) {
    std::fs::write(machine.dir.path().join("gate.yaml"), GATE).unwrap();
    machine.ok(&["workflow", "put", "gate.yaml"]);
    std::fs::write(
        machine.root().join("config.yaml"),
        "agentOverrides:\n  gate: { approver: human }\n",
    )
    .unwrap();
    let id = machine.ok(&["thread", "start", "gate", "-p", "Ship it", "--queue", "-q"]);
    let worker = || {
        machine
            .uwf()
            .args(["worker", "--until-idle"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn worker")
    };
    let (_, err) = finish(worker(), Duration::from_secs(60));
    assert_eq!(steps_reported(&err), 1, "intake, then the question: {err}");
    let show: Value = serde_json::from_str(&machine.ok(&["thread", "show", &id])).unwrap();
    assert_eq!(show["status"], "awaiting", "{show}");
    // While it awaits, a worker has nothing to do.
    let (_, err) = finish(worker(), Duration::from_secs(60));
    assert_eq!(steps_reported(&err), 0, "{err}");
    std::fs::write(
        machine.dir.path().join("answer.json"),
        "{\"approved\": true}",
    )
    .unwrap();
    machine.ok(&[
        "thread",
        "answer",
        &id,
        "-f",
        "answer.json",
        "--by",
        "alice",
    ]);
    let (_, err) = finish(worker(), Duration::from_secs(60));
    assert_eq!(steps_reported(&err), 1, "the closer: {err}");
    let show: Value = serde_json::from_str(&machine.ok(&["thread", "show", &id])).unwrap();
    assert_eq!(show["status"], "done", "{show}");
    assert_eq!(show["steps"], 3, "{show}");
}

#[test]
fn an_answered_thread_goes_back_on_a_directory_stores_queue() {
    answered_gate_goes_back_on_the_queue(&Machine::new(None, None));
}

#[test]
fn an_answered_thread_goes_back_on_the_postgres_queue() {
    let name = "an_answered_thread_goes_back_on_the_postgres_queue";
    let Some(server) = pg_server::shared(name) else {
        return;
    };
    let url = server.fresh_db(name);
    answered_gate_goes_back_on_the_queue(&Machine::new(Some(&url), None));
}

#[test]
fn sigterm_lets_the_step_under_way_finish_then_the_worker_lets_its_thread_go() {
    let name = "sigterm_lets_the_step_under_way_finish";
    let Some(server) = pg_server::shared(name) else {
        return;
    };
    let url = server.fresh_db(name);
    let machine = Machine::new(Some(&url), None);
    let ids = queue_threads(&machine, 1);
    let slow = machine.slow_agent("1.5");
    let worker = machine
        .uwf()
        .args(["worker", "--agent", &slow])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Mid-step: `worker list` (from another machine) shows it stepping the thread.
    let other = Machine::new(Some(&url), None);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let list = other.ok(&["worker", "list", "--json"]);
        if list.contains(&ids[0]) {
            let row: Value = serde_json::from_str(list.lines().next().unwrap()).unwrap();
            assert_eq!(row["state"], "running", "{row}");
            assert_eq!(row["pid"], worker.id(), "{row}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "worker list never showed the thread: {list}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(worker.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = worker.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("worker stopped (signal)"), "{err}");
    let taken = steps_reported(&err);
    assert!((1..5).contains(&taken), "{err}");
    // The step under way was published, the thread let go (no lease) and still queued.
    let show: Value = serde_json::from_str(&other.ok(&["thread", "show", &ids[0]])).unwrap();
    assert_eq!(show["steps"], taken, "{show}");
    let mut client = pg_server::PgServer::raw(&url);
    let leases: i64 = client
        .query_one("select count(*) from leases", &[])
        .unwrap()
        .get(0);
    assert_eq!(leases, 0, "the lease was released");
    let queued: bool = client
        .query_one("select queued from threads where id = $1", &[&ids[0]])
        .unwrap()
        .get(0);
    assert!(queued, "the thread waits for the next worker");
    assert_eq!(
        other.ok(&["worker", "list", "-q"]),
        "",
        "the worker left the list"
    );
    // The next worker takes it from there.
    let next = other.worker(&other.script_agent());
    let (_, err) = finish(next, Duration::from_secs(60));
    assert_eq!(steps_reported(&err), 5 - taken, "{err}");
}

#[test]
fn a_worker_outlives_a_database_restart_and_loses_no_thread() {
    let name = "a_worker_outlives_a_database_restart";
    let Some(mut server) = pg_server::PgServer::private(name) else {
        return;
    };
    let url = server.fresh_db("restart");
    let machine = Machine::new(Some(&url), None);
    let ids = queue_threads(&machine, 10);
    let slow = machine.slow_agent("0.2");
    let worker = machine.worker(&slow);
    std::thread::sleep(Duration::from_millis(1500));
    server.stop().expect("stop");
    std::thread::sleep(Duration::from_millis(1500));
    server.start().expect("start");
    let (_, err) = finish(worker, Duration::from_secs(120));
    assert!(
        err.contains("trying again") || err.contains("interrupted"),
        "{err}"
    );
    assert!(!err.contains("taken off the queue"), "{err}");
    let pg = PgStore::open(&PgConfig::parse(&url).unwrap()).unwrap();
    assert_all_done_once(&pg, &ids);
}
