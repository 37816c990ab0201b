//! The whole CLI over PostgreSQL (issue #18): a thread run through the real binary
//! against a real server, the same nodes as over files, and each fault a clear error with
//! nothing lost — wrong URL, server down, wrong password (named with the target, the password
//! never printed), a schema from a newer uwf, a server restart in the middle of a step.

mod common;
mod pg_server;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use common::machine::Machine;
use pg_server::PgServer;

fn example() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/solve-issue.yaml")
        .to_string_lossy()
        .into_owned()
}

/// The hashes of a thread's steps, outputs and details, in order.
type Chain = Vec<(String, String, String)>;

fn chain(m: &Machine, id: &str) -> Chain {
    m.ok(&["thread", "steps", id, "--json"])
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let hash = v["hash"].as_str().unwrap().to_owned();
            let node: Value =
                serde_json::from_str(&m.ok(&["cas", "get", &hash, "--payload"])).unwrap();
            (
                hash,
                node["output"].as_str().unwrap().to_owned(),
                node["detail"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn a_thread_over_postgres_is_the_same_nodes_as_over_files_and_any_machine_reads_it() {
    let name = "a_thread_over_postgres_is_the_same_nodes";
    let Some(server) = pg_server::shared(name) else {
        return;
    };
    let url = server.fresh_db(name);
    let (pg, other, files) = (
        Machine::new(Some(&url), None),
        Machine::new(Some(&url), None),
        Machine::new(None, None),
    );
    for m in [&pg, &files] {
        m.ok(&["workflow", "put", &example()]);
    }
    let (a, b) = (
        pg.ok(&["thread", "start", "solve-issue", "-p", "Fix it", "-q"]),
        files.ok(&["thread", "start", "solve-issue", "-p", "Fix it", "-q"]),
    );
    pg.ok(&["thread", "run", &a, "--agent", &pg.script_agent()]);
    files.ok(&["thread", "run", &b, "--agent", &files.script_agent()]);
    // Content addressing: the same thread over either backend is the same outputs (details,
    // and so steps, carry each run's timings).
    let (over_pg, over_files) = (chain(&pg, &a), chain(&files, &b));
    assert_eq!(over_pg.len(), 5);
    let outputs = |c: &Chain| c.iter().map(|s| s.1.clone()).collect::<Vec<_>>();
    assert_eq!(outputs(&over_pg), outputs(&over_files));
    // Another machine with an empty cache reads everything from the database.
    let show: Value = serde_json::from_str(&other.ok(&["thread", "show", &a])).unwrap();
    assert_eq!(show["status"], "done", "{show}");
    assert_eq!(chain(&other, &a), over_pg);
    let list = other.ok(&["workflow", "list", "--json"]);
    assert!(list.contains("solve-issue"), "{list}");
    // The registry keeps versions and their sources over PostgreSQL too.
    let text = other.ok(&["workflow", "show", "solve-issue"]);
    assert!(text.contains("solve-issue"), "{text}");
}

#[test]
fn bad_urls_a_down_server_and_a_wrong_password_are_named_without_the_password() {
    let name = "bad_urls_a_down_server_and_a_wrong_password";
    let Some(server) = pg_server::shared(name) else {
        return;
    };
    let secret = "Sup3r-secret-pw";
    let cases = [
        (
            format!("mysql://uwf:{secret}@localhost/uwf"),
            "expected a URL starting with postgres://",
        ),
        (
            format!("postgres://uwf:{secret}@127.0.0.1:{}/uwf", free_port()),
            "cannot connect to PostgreSQL at 127.0.0.1:",
        ),
        (
            server.url("postgres").replace(pg_server::PASSWORD, secret),
            "refused the password of user `uwf`",
        ),
    ];
    for (url, expected) in cases {
        let m = Machine::new(Some(&url), None);
        for args in [vec!["thread", "list"], vec!["workflow", "put", &example()]] {
            let err = m.fails(&args);
            assert!(err.contains(expected), "{url}: {err}");
            assert!(!err.contains(secret), "the password leaked: {err}");
        }
    }
    // The same URL in config.yaml instead of the environment.
    let m = Machine::new(None, None);
    std::fs::write(
        m.root().join("config.yaml"),
        format!(
            "storage: postgres://uwf:{secret}@127.0.0.1:{}/uwf\n",
            free_port()
        ),
    )
    .unwrap();
    let err = m.fails(&["thread", "list"]);
    assert!(err.contains("cannot connect to PostgreSQL"), "{err}");
    assert!(!err.contains(secret), "{err}");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

#[test]
fn a_schema_from_a_newer_uwf_is_refused_naming_both_versions() {
    let name = "a_schema_from_a_newer_uwf_is_refused";
    let Some(server) = pg_server::shared(name) else {
        return;
    };
    let url = server.fresh_db(name);
    let m = Machine::new(Some(&url), None);
    m.ok(&["workflow", "put", &example()]);
    PgServer::raw(&url)
        .batch_execute("update uwf_meta set schema_version = 99")
        .unwrap();
    let err = m.fails(&["thread", "list"]);
    assert!(err.contains("version 99"), "{err}");
    assert!(
        err.contains(&format!("up to version {}", uwf::pg::SCHEMA_VERSION)),
        "{err}"
    );
}

#[test]
fn a_server_restart_mid_step_fails_the_step_cleanly_and_the_thread_goes_on() {
    let name = "a_server_restart_mid_step";
    let Some(mut server) = PgServer::private(name) else {
        return;
    };
    let url = server.fresh_db("restart");
    let m = Machine::new(Some(&url), None);
    m.ok(&["workflow", "put", &example()]);
    let id = m.ok(&["thread", "start", "solve-issue", "-p", "Fix it", "-q"]);
    m.ok(&["thread", "step", &id, "--agent", &m.script_agent()]);
    let before = chain(&m, &id);
    // An agent that takes two seconds; the server restarts while it runs.
    let slow = m.slow_agent("2");
    let step = m
        .uwf()
        .args(["thread", "step", &id, "--agent", &slow])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    server.stop().expect("stop");
    std::thread::sleep(Duration::from_millis(500));
    server.start().expect("start");
    let out = step.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    // The step either failed with a clear error or got through after the restart; either way
    // the head is a whole step (the old one or the new one), and the thread steps on.
    let after = chain(&m, &id);
    match out.status.code() {
        Some(0) => assert_eq!(after.len(), 2, "{err}"),
        Some(1) => {
            assert!(err.contains("PostgreSQL"), "names the store: {err}");
            assert_eq!(after, before, "a failed step publishes nothing");
        }
        other => panic!("exit {other:?}: {err}"),
    }
    m.ok(&["thread", "run", &id, "--agent", &m.script_agent()]);
    let show: Value = serde_json::from_str(&m.ok(&["thread", "show", &id])).unwrap();
    assert_eq!(show["status"], "done", "{show}");
    assert_eq!(show["steps"], 5, "{show}");
}

#[test]
fn a_kill_from_another_machine_archives_the_thread_and_the_running_step_publishes_nothing() {
    let name = "a_kill_from_another_machine";
    let Some(server) = pg_server::shared(name) else {
        return;
    };
    let url = server.fresh_db(name);
    let (a, b) = (
        Machine::new(Some(&url), None),
        Machine::new(Some(&url), None),
    );
    a.ok(&["workflow", "put", &example()]);
    let id = a.ok(&["thread", "start", "solve-issue", "-p", "Fix it", "-q"]);
    let slow = a.slow_agent("2");
    let step = a
        .uwf()
        .args(["thread", "step", &id, "--agent", &slow])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let killed: Value = serde_json::from_str(&b.ok(&["thread", "kill", &id])).unwrap();
    assert_eq!(killed["status"], "killed", "{killed}");
    let out = step.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "the step cannot publish: {err}");
    assert!(err.contains("archived"), "{err}");
    let show: Value = serde_json::from_str(&b.ok(&["thread", "show", &id])).unwrap();
    assert_eq!(show["status"], "killed", "{show}");
    assert_eq!(show["steps"], 0, "{show}");
}

#[test]
fn a_damaged_cache_file_is_replaced_from_the_database() {
    let name = "a_damaged_cache_file_is_replaced";
    let Some(server) = pg_server::shared(name) else {
        return;
    };
    let url = server.fresh_db(name);
    let m = Machine::new(Some(&url), None);
    let hash = m.ok(&["cas", "put", "text", "\"cached here\""]);
    let file = m
        .root()
        .join("cas/objects")
        .join(&hash[..2])
        .join(format!("{}.json", &hash[2..]));
    assert!(file.exists(), "a put leaves a cache file");
    // A torn write (no fsync for cache files) or later damage.
    common::make_writable(&file);
    std::fs::write(&file, b"{\"payl").unwrap();
    let payload = m.ok(&["cas", "get", &hash, "--payload"]);
    assert_eq!(payload, "\"cached here\"");
    let healed = std::fs::read_to_string(&file).unwrap();
    assert!(healed.contains("cached here"), "{healed}");
}

#[test]
fn a_step_that_failed_on_one_machine_shows_as_failed_on_every_machine() {
    let name = "a_step_that_failed_on_one_machine_shows";
    let Some(server) = pg_server::shared(name) else {
        return;
    };
    let url = server.fresh_db(name);
    let (a, b) = (
        Machine::new(Some(&url), None),
        Machine::new(Some(&url), None),
    );
    a.ok(&["workflow", "put", &example()]);
    let id = a.ok(&[
        "thread",
        "start",
        "solve-issue",
        "-p",
        "Fix it",
        "--queue",
        "-q",
    ]);
    let out = a.run(&[
        "thread",
        "step",
        &id,
        "--agent",
        "sh -c 'echo no model today >&2; exit 3'",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let show: Value = serde_json::from_str(&b.ok(&["thread", "show", &id])).unwrap();
    assert_eq!(show["status"], "failed", "machine B sees it: {show}");
    let error = show["error"].as_str().unwrap_or_default();
    assert!(error.contains("exit"), "{show}");
    // A worker anywhere leaves a failed thread alone until it is queued again.
    let mut raw = PgServer::raw(&url);
    let status: String = raw
        .query_one("select status from threads where id = $1", &[&id])
        .unwrap()
        .get(0);
    assert_eq!(status, "failed");
    b.ok(&["thread", "queue", &id]);
    let status: String = raw
        .query_one("select status from threads where id = $1", &[&id])
        .unwrap()
        .get(0);
    assert_eq!(status, "active", "queued again to retry");
    // A step that gets through clears it everywhere.
    b.ok(&["thread", "step", &id, "--agent", &b.script_agent()]);
    let show: Value = serde_json::from_str(&a.ok(&["thread", "show", &id])).unwrap();
    assert_eq!(show["status"], "active", "{show}");
    assert!(show.get("error").is_none(), "{show}");
}

#[test]
fn a_question_asked_on_one_machine_is_answered_on_another() {
    let name = "a_question_asked_on_one_machine";
    let Some(server) = pg_server::shared(name) else {
        return;
    };
    let url = server.fresh_db(name);
    let (a, b) = (
        Machine::new(Some(&url), None),
        Machine::new(Some(&url), None),
    );
    a.ok(&["workflow", "put", &example()]);
    let id = a.ok(&["thread", "start", "solve-issue", "-p", "Fix it", "-q"]);
    // Machine A's step is a person's: it records the question and stops.
    let asked: Value =
        serde_json::from_str(&a.ok(&["thread", "step", &id, "--agent", "human"])).unwrap();
    assert_eq!(asked["awaiting"], true, "{asked}");
    // Machine B sees the question, and answers it.
    let show: Value = serde_json::from_str(&b.ok(&["thread", "show", &id])).unwrap();
    assert_eq!(show["status"], "awaiting", "{show}");
    assert_eq!(show["awaiting"], "planner", "{show}");
    let question = b.ok(&["thread", "question", &id]);
    assert!(question.contains("planner"), "{question}");
    let out = b
        .uwf()
        .args(["thread", "answer", &id])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(
                br#"{"summary": "Fix the session check", "steps": ["reproduce", "fix"]}"#,
            )?;
            child.wait_with_output()
        })
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Both machines see it answered: one step, active again.
    for m in [&a, &b] {
        let show: Value = serde_json::from_str(&m.ok(&["thread", "show", &id])).unwrap();
        assert_eq!(show["status"], "active", "{show}");
        assert_eq!(show["steps"], 1, "{show}");
    }
}

#[test]
fn a_second_put_through_a_warm_cache_still_marks_an_old_row_written_now() {
    let name = "a_second_put_through_a_warm_cache";
    let Some(server) = pg_server::shared(name) else {
        return;
    };
    let url = server.fresh_db(name);
    let m = Machine::new(Some(&url), None);
    let hash = m.ok(&["cas", "put", "text", "\"old but wanted\""]);
    let mut raw = PgServer::raw(&url);
    raw.execute(
        "update nodes set created_ms = created_ms - 172800000 where hash = $1",
        &[&hash],
    )
    .unwrap();
    let before: i64 = raw
        .query_one("select created_ms from nodes where hash = $1", &[&hash])
        .unwrap()
        .get(0);
    // The local cache file is there: the put still reaches the table, so a GC (grace a day)
    // that marked before a reference to it lands does not take it.
    m.ok(&["cas", "put", "text", "\"old but wanted\""]);
    let after: i64 = raw
        .query_one("select created_ms from nodes where hash = $1", &[&hash])
        .unwrap()
        .get(0);
    assert!(after > before + 86_400_000, "{before} → {after}");
}

#[test]
fn lists_over_postgres_page_newest_first_across_active_and_archived() {
    let name = "lists_over_postgres_page_newest_first";
    let Some(server) = pg_server::shared(name) else {
        return;
    };
    let url = server.fresh_db(name);
    let (a, b) = (
        Machine::new(Some(&url), None),
        Machine::new(Some(&url), None),
    );
    a.ok(&["workflow", "put", &example()]);
    let started: Vec<String> = (0..12)
        .map(|i| {
            a.ok(&[
                "thread",
                "start",
                "solve-issue",
                "-p",
                &format!("task {i}"),
                "-q",
            ])
        })
        .collect();
    for id in [&started[1], &started[4], &started[7]] {
        a.ok(&["thread", "kill", id]);
    }
    a.ok(&["thread", "step", &started[11], "--agent", &a.script_agent()]);
    let failed = a.run(&["thread", "step", &started[10], "--agent", "sh -c 'exit 3'"]);
    assert_eq!(failed.status.code(), Some(1));

    let ids = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["thread", "list", "--json"];
        all.extend_from_slice(args);
        b.ok(&all)
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["thread"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect()
    };
    let mut newest_first = started.clone();
    newest_first.reverse();
    assert_eq!(ids(&["--all"]), newest_first);
    // Keyset pages over both tables, without gaps or repeats.
    let mut paged = Vec::new();
    let mut before: Option<String> = None;
    loop {
        let mut args = vec!["--all", "--limit", "5"];
        if let Some(last) = &before {
            args.extend(["--before", last.as_str()]);
        }
        let page = ids(&args);
        if page.is_empty() {
            break;
        }
        before = page.last().cloned();
        paged.extend(page);
    }
    assert_eq!(paged, newest_first);
    assert_eq!(ids(&["--status", "killed"]).len(), 3);
    assert_eq!(ids(&["--status", "failed"]), [started[10].clone()]);
    assert_eq!(ids(&[]).len(), 9);
    let top: Value = serde_json::from_str(
        b.ok(&["thread", "list", "--json", "--limit", "1"])
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(top["thread"], started[11].as_str());
    assert_eq!(
        (top["steps"].as_u64(), top["status"].as_str()),
        (Some(1), Some("active")),
        "{top}"
    );
    assert!(top["next"].is_string(), "{top}");
}

/// A database of schema version 6 (before the index kept prompts) is migrated on first use,
/// and the first search fills every row, active or archived, from its start node.
#[test]
fn search_finds_threads_of_a_database_made_before_it_kept_prompts() {
    let name = "search_finds_threads_of_a_database_made_before";
    let Some(server) = pg_server::shared(name) else {
        return;
    };
    let url = server.fresh_db(name);
    let m = Machine::new(Some(&url), None);
    m.ok(&["workflow", "put", &example()]);
    let start = |prompt: &str| {
        m.ok(&["thread", "start", "solve-issue", "-p", prompt, "-q"])
            .trim()
            .to_owned()
    };
    let stepped = start("Migrate the Billing service");
    m.ok(&["thread", "step", &stepped, "--agent", "dry"]);
    let killed = start("billing: 100% of invoices");
    m.ok(&["thread", "kill", &killed]);
    start("something else");
    PgServer::raw(&url)
        .batch_execute(
            "alter table threads drop column prompt;
             alter table history drop column prompt;
             alter table threads drop column spent;
             alter table history drop column spent;
             update uwf_meta set schema_version = 6;",
        )
        .unwrap();
    let ids = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["thread", "list", "--json"];
        all.extend_from_slice(args);
        m.ok(&all)
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                v["thread"].as_str().unwrap().to_owned()
            })
            .collect()
    };
    assert_eq!(
        ids(&["--all", "--search", "BILLING"]),
        [killed.as_str(), stepped.as_str()]
    );
    let mut raw = PgServer::raw(&url);
    let row = raw
        .query_one(
            "select (select schema_version from uwf_meta),
                    (select count(*) from threads where prompt is null)
                    + (select count(*) from history where prompt is null)",
            &[],
        )
        .unwrap();
    assert_eq!(
        (row.get::<_, i32>(0), row.get::<_, i64>(1)),
        (uwf::pg::SCHEMA_VERSION, 0)
    );
    assert_eq!(ids(&["--search", "billing"]), [stepped.as_str()]);
    assert_eq!(ids(&["--all", "--search", "100%"]), [killed.as_str()]);
    assert!(ids(&["--all", "--search", "100%_"]).is_empty());
}
