//! The PostgreSQL backend against a real server started by the tests (issue #18).
//!
//! Each test gets a fresh database in one server shared by this binary; the restart test owns
//! its server. Without PostgreSQL binaries every test prints `SKIP …` and passes, unless
//! `UWF_REQUIRE_POSTGRES=1`.

mod pg_server;

use std::collections::HashSet;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use uwf::cas::canonical::node_hash;
use uwf::cas::{Hash, builtin};
use uwf::pg::{
    Holder, Listener, NewThread, PgConfig, PgError, PgStore, Registered, SCHEMA_VERSION,
    ThreadState,
};

use pg_server::PgServer;

/// A fresh database in the shared server, opened; `None` when skipping.
fn fresh(name: &str) -> Option<(&'static PgServer, String, PgStore)> {
    let server = pg_server::shared(name)?;
    let url = server.fresh_db(name);
    let store = open(&url);
    Some((server, url, store))
}

fn open(url: &str) -> PgStore {
    PgStore::open(&PgConfig::parse(url).expect("url parses")).expect("store opens")
}

fn hash(text: &str) -> Hash {
    Hash::parse(text).expect("valid hash")
}

fn text_node(store: &PgStore, text: &str) -> Hash {
    store
        .put_node(builtin::hash_of("text"), &json!(text))
        .expect("put text")
}

fn thread(id: &str, head: Hash) -> NewThread<'_> {
    NewThread {
        id,
        workflow: hash("0000000000001"),
        head,
        parent: None,
        queued: false,
        steps: None,
        prompt: None,
        spent: None,
    }
}

#[test]
fn server_down_names_host_and_port() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let url = format!("postgres://uwf:hunter2@127.0.0.1:{port}/db");
    let err = PgStore::open(&PgConfig::parse(&url).expect("parses")).expect_err("nothing listens");
    let text = err.to_string();
    assert!(matches!(err, PgError::ServerDown { .. }), "{text}");
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(text.contains("connection refused"), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
    assert!(!uwf::advice::Advice::hints(&err).is_empty());
}

#[test]
fn wrong_password_is_named_without_the_password() {
    let Some(server) = pg_server::shared("wrong_password_is_named_without_the_password") else {
        return;
    };
    let url = server
        .url("postgres")
        .replace(pg_server::PASSWORD, "not-the-Password-42");
    let err = PgStore::open(&PgConfig::parse(&url).expect("parses")).expect_err("refused");
    let text = format!("{err} {err:?}");
    assert!(matches!(err, PgError::WrongPassword { .. }), "{text}");
    assert!(text.contains("user `uwf`"), "{text}");
    assert!(!text.contains("not-the-Password-42"), "{text}");

    let config = PgConfig::parse_with_env(&server.url_without_password("postgres"), |_| None)
        .expect("parses");
    let err = PgStore::open(&config).expect_err("no password");
    assert!(matches!(err, PgError::PasswordMissing { .. }), "{err}");
}

#[test]
fn migrations_are_idempotent_and_concurrent() {
    let Some(server) = pg_server::shared("migrations_are_idempotent_and_concurrent") else {
        return;
    };
    let url = server.fresh_db("migrations");
    let start = Arc::new(Barrier::new(6));
    let racers: Vec<_> = (0..6)
        .map(|_| {
            let (url, start) = (url.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                PgStore::open(&PgConfig::parse(&url).expect("parses")).map(drop)
            })
        })
        .collect();
    for racer in racers {
        racer.join().expect("no panic").expect("every racer opens");
    }
    open(&url); // and once more, on a migrated database
    let mut raw = PgServer::raw(&url);
    let version: i32 = raw
        .query_one("select schema_version from uwf_meta", &[])
        .expect("meta")
        .get(0);
    assert_eq!(version, SCHEMA_VERSION);
    let builtins: i64 = raw
        .query_one(
            "select count(*) from nodes where type_hash = $1",
            &[&Hash::META.to_string()],
        )
        .expect("count")
        .get(0);
    assert_eq!(builtins as usize, builtin::all().len());
}

#[test]
fn a_newer_schema_is_refused_naming_both_versions() {
    let Some((_, url, _)) = fresh("a_newer_schema_is_refused_naming_both_versions") else {
        return;
    };
    PgServer::raw(&url)
        .execute("update uwf_meta set schema_version = 99", &[])
        .expect("bump");
    let err = PgStore::open(&PgConfig::parse(&url).expect("parses")).expect_err("too new");
    let text = err.to_string();
    assert!(
        matches!(err, PgError::SchemaTooNew { found: 99, .. }),
        "{text}"
    );
    assert!(text.contains("version 99"), "{text}");
    assert!(
        text.contains(&format!("up to version {SCHEMA_VERSION}")),
        "{text}"
    );
}

#[test]
fn nodes_round_trip_with_the_spec_vectors() {
    let Some((_, _, store)) = fresh("nodes_round_trip_with_the_spec_vectors") else {
        return;
    };
    let schema: Value = json!({"properties":{"a":{"type":"string"},"b":{"type":"integer"}},"required":["a"],"type":"object"});
    let data: Value = json!({"a":"héllo\n\"q\"","b":-3,"z":[true,null,0.5,{"x":2,"y":1}]});
    assert_eq!(
        store
            .get_node(Hash::META)
            .expect("bootstrap")
            .hash
            .to_string(),
        "F5VV55NBKX1R5"
    );
    let schema_hash = store.put_node(Hash::META, &schema).expect("put schema");
    assert_eq!(schema_hash.to_string(), "827F196W26J4M");
    let data_hash = store.put_node(schema_hash, &data).expect("put data");
    assert_eq!(data_hash.to_string(), "298FDNKR7P5MH");
    assert_eq!(
        data_hash,
        node_hash(schema_hash, &data),
        "same hash as the directory store"
    );
    assert_eq!(
        store.put_node(schema_hash, &data).expect("again"),
        data_hash,
        "idempotent"
    );

    let node = store.get_node(data_hash).expect("get");
    assert_eq!((node.type_hash, &node.payload), (schema_hash, &data));
    assert!(node.timestamp > 0);
    assert!(store.has_node(data_hash).expect("has"));
    let absent = hash("0000000000009");
    assert!(!store.has_node(absent).expect("has"));
    assert!(matches!(store.get_node(absent), Err(PgError::NotFound(h)) if h == absent));
    assert_eq!(store.list_type(schema_hash).expect("list"), vec![data_hash]);
    let schemas = store.list_type(Hash::META).expect("list schemas");
    assert!(schemas.contains(&schema_hash) && schemas.contains(&builtin::hash_of("step")));
    assert!(store.list_all().expect("all").contains(&Hash::META));
}

#[test]
fn a_collision_is_refused_and_a_tampered_row_detected() {
    let Some((_, url, store)) = fresh("a_collision_is_refused_and_a_tampered_row_detected") else {
        return;
    };
    let original = text_node(&store, "original");
    PgServer::raw(&url)
        .execute(
            "update nodes set bytes = convert_to(replace(convert_from(bytes, 'UTF8'), 'original', 'tampered'), 'UTF8') where hash = $1",
            &[&original.to_string()],
        )
        .expect("tamper");
    let err = store.get_node(original).expect_err("tampered");
    assert!(
        matches!(err, PgError::HashMismatch { hash, .. } if hash == original),
        "{err}"
    );
    assert!(err.to_string().contains(&original.to_string()));

    let err = store
        .put_node(builtin::hash_of("text"), &json!("original"))
        .expect_err("different bytes under that hash");
    assert!(
        matches!(err, PgError::Collision { hash } if hash == original),
        "{err}"
    );
}

#[test]
fn compare_and_set_lets_exactly_one_racer_win() {
    let Some((_, url, store)) = fresh("compare_and_set_lets_exactly_one_racer_win") else {
        return;
    };
    let start = text_node(&store, "start");
    store.add_thread(&thread("T1", start)).expect("add");
    assert!(matches!(
        store.add_thread(&thread("T1", start)),
        Err(PgError::ThreadExists(_))
    ));
    let barrier = Arc::new(Barrier::new(2));
    let racers: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|who| {
            let (url, barrier) = (url.clone(), barrier.clone());
            std::thread::spawn(move || {
                let store = open(&url);
                let new = text_node(&store, who);
                barrier.wait();
                (
                    who,
                    new,
                    store.compare_and_set("T1", start, new).expect("cas"),
                )
            })
        })
        .collect();
    let results: Vec<_> = racers
        .into_iter()
        .map(|r| r.join().expect("no panic"))
        .collect();
    let winners: Vec<_> = results.iter().filter(|r| r.2).collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    assert_eq!(store.head("T1").expect("head"), winners[0].1);
    assert!(
        !store
            .compare_and_set("nope", start, start)
            .expect("unknown thread")
    );
}

#[test]
fn racing_compare_and_set_loses_no_update() {
    let Some((_, url, store)) = fresh("racing_compare_and_set_loses_no_update") else {
        return;
    };
    let step = json!({"type": "object", "required": ["prev", "by"]});
    let link_type = store.put_node(Hash::META, &step).expect("schema");
    let start = text_node(&store, "chain start");
    store.add_thread(&thread("CHAIN", start)).expect("add");
    let (racers, attempts) = (20, 50);
    let barrier = Arc::new(Barrier::new(racers));
    let handles: Vec<_> = (0..racers)
        .map(|r| {
            let (url, barrier) = (url.clone(), barrier.clone());
            std::thread::spawn(move || {
                let store = open(&url);
                barrier.wait();
                let mut won = 0;
                for i in 0..attempts {
                    let head = store.head("CHAIN").expect("head");
                    let link = json!({"prev": head.to_string(), "by": format!("{r}-{i}")});
                    let new = store.put_node(link_type, &link).expect("put link");
                    if store.compare_and_set("CHAIN", head, new).expect("cas") {
                        won += 1;
                    }
                }
                won
            })
        })
        .collect();
    let won: usize = handles
        .into_iter()
        .map(|h| h.join().expect("no panic"))
        .sum();
    // Walk the chain back from the head: every successful CAS must be a link in it.
    let mut length = 0;
    let mut at = store.head("CHAIN").expect("head");
    while at != start {
        let node = store.get_node(at).expect("link");
        at = hash(node.payload["prev"].as_str().expect("prev"));
        length += 1;
    }
    assert_eq!(
        length, won,
        "every successful compare-and-set is in the chain"
    );
    assert!(
        won >= attempts,
        "progress: {won} of {} attempts won",
        racers * attempts
    );
}

#[test]
fn archive_moves_a_thread_to_history() {
    let Some((_, _, store)) = fresh("archive_moves_a_thread_to_history") else {
        return;
    };
    let head = text_node(&store, "h");
    store
        .add_thread(&NewThread {
            parent: Some("P"),
            ..thread("T2", head)
        })
        .expect("add");
    let archived = store.archive("T2", "done").expect("archive");
    assert_eq!(
        (
            archived.head,
            archived.status.as_str(),
            archived.parent.as_deref()
        ),
        (head, "done", Some("P"))
    );
    assert!(matches!(store.thread("T2"), Ok(ThreadState::Archived(a)) if a.status == "done"));
    assert!(matches!(store.head("T2"), Err(PgError::Archived { .. })));
    assert!(matches!(
        store.archive("T2", "killed"),
        Err(PgError::Archived { .. })
    ));
    assert!(matches!(
        store.archive("T9", "done"),
        Err(PgError::UnknownThread(_))
    ));
    assert!(matches!(
        store.archive("T2", "weird"),
        Err(PgError::BadStatus(_))
    ));
    assert!(
        !store
            .compare_and_set("T2", head, head)
            .expect("cas on archived")
    );
    assert!(matches!(
        store.add_thread(&thread("T2", head)),
        Err(PgError::ThreadExists(_))
    ));
    assert!(store.active_threads(None).expect("list").is_empty());
}

#[test]
fn leases_name_the_holder_expire_and_renew() {
    let Some((_, _, store)) = fresh("leases_name_the_holder_expire_and_renew") else {
        return;
    };
    let a = Holder {
        holder: "step-a",
        machine: "m1",
    };
    let b = Holder {
        holder: "step-b",
        machine: "m2",
    };
    let lease = store
        .try_acquire("T", a, Duration::from_secs(30))
        .expect("free");
    let err = store
        .try_acquire("T", b, Duration::from_secs(30))
        .expect_err("busy");
    let text = err.to_string();
    assert!(uwf::advice::Advice::is_busy(&err), "{text}");
    assert!(text.contains("step-a") && text.contains("m1"), "{text}");
    store
        .renew(&lease, Duration::from_millis(300))
        .expect("renew");
    assert!(
        store.try_acquire("T", b, Duration::from_secs(30)).is_err(),
        "still held"
    );
    std::thread::sleep(Duration::from_millis(400));
    let taken = store
        .try_acquire("T", b, Duration::from_secs(30))
        .expect("expired: taken over");
    assert!(matches!(
        store.renew(&lease, Duration::from_secs(1)),
        Err(PgError::LeaseLost { .. })
    ));
    assert!(!store.release(&lease).expect("release lost lease"));
    assert!(store.release(&taken).expect("release"));
    store
        .try_acquire("T", a, Duration::from_secs(30))
        .expect("free again");
}

#[test]
fn skip_locked_claims_every_queued_thread_exactly_once() {
    let Some((_, url, store)) = fresh("skip_locked_claims_every_queued_thread_exactly_once") else {
        return;
    };
    let head = text_node(&store, "q");
    let (threads, claimers) = (60, 6);
    for i in 0..threads {
        let id = format!("Q{i:03}");
        store
            .add_thread(&NewThread {
                queued: i % 10 != 0,
                steps: None,
                ..thread(&id, head)
            })
            .expect("add");
    }
    // A queued thread whose step lease is held elsewhere is not runnable.
    store
        .try_acquire(
            "Q001",
            Holder {
                holder: "cli",
                machine: "m0",
            },
            Duration::from_secs(30),
        )
        .expect("lease");
    let barrier = Arc::new(Barrier::new(claimers));
    let handles: Vec<_> = (0..claimers)
        .map(|c| {
            let (url, barrier) = (url.clone(), barrier.clone());
            std::thread::spawn(move || {
                let store = open(&url);
                let name = format!("worker-{c}");
                barrier.wait();
                let mut got = Vec::new();
                let who = Holder {
                    holder: &name,
                    machine: "m",
                };
                while let Some(lease) = store
                    .claim(None, who, Duration::from_secs(30))
                    .expect("claim")
                {
                    got.push(lease.thread);
                }
                got
            })
        })
        .collect();
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.join().expect("no panic"));
    }
    let unique: HashSet<_> = all.iter().cloned().collect();
    assert_eq!(unique.len(), all.len(), "a thread was claimed twice");
    let expected: HashSet<_> = (0..threads)
        .filter(|i| i % 10 != 0 && *i != 1)
        .map(|i| format!("Q{i:03}"))
        .collect();
    assert_eq!(unique, expected);
}

#[test]
fn putting_an_old_node_again_marks_it_written_now_so_gc_spares_it() {
    let Some((_, url, store)) = fresh("putting_an_old_node_again_marks_it_written_now") else {
        return;
    };
    let node = text_node(&store, "kept");
    let mut raw = PgServer::raw(&url);
    let created = |raw: &mut postgres::Client| -> i64 {
        raw.query_one(
            "select created_ms from nodes where hash = $1",
            &[&node.to_string()],
        )
        .unwrap()
        .get(0)
    };
    let fresh_ms = created(&mut raw);
    // A moment later the same put changes nothing (young rows are not touched) …
    text_node(&store, "kept");
    assert_eq!(created(&mut raw), fresh_ms);
    // … but a row two days old is marked as written now, bytes untouched.
    raw.execute(
        "update nodes set created_ms = created_ms - 172800000 where hash = $1",
        &[&node.to_string()],
    )
    .unwrap();
    text_node(&store, "kept");
    assert!(created(&mut raw) >= fresh_ms, "touched");
    assert_eq!(store.get_node(node).unwrap().payload, json!("kept"));
}

#[test]
fn a_thread_whose_worker_died_is_claimed_before_the_ones_waiting_longer() {
    let Some((_, _, store)) = fresh("a_thread_whose_worker_died_is_claimed_first") else {
        return;
    };
    let head = text_node(&store, "q");
    for id in ["A1", "A2", "A3"] {
        store
            .add_thread(&NewThread {
                queued: true,
                steps: None,
                ..thread(id, head)
            })
            .expect("add");
    }
    // A3, the newest, was claimed by a worker that died: its lease ran out.
    let dead = Holder {
        holder: "dead",
        machine: "m0",
    };
    store
        .try_acquire("A3", dead, Duration::from_millis(1))
        .expect("lease");
    std::thread::sleep(Duration::from_millis(20));
    let who = Holder {
        holder: "live",
        machine: "m1",
    };
    let first = store
        .claim(None, who, Duration::from_secs(30))
        .expect("claim")
        .expect("something to claim");
    assert_eq!(first.thread, "A3", "abandoned work is resumed first");
    let second = store
        .claim(None, who, Duration::from_secs(30))
        .unwrap()
        .unwrap();
    assert_eq!(second.thread, "A1", "then the one waiting longest");
}

#[test]
fn listen_notify_delivers_a_head_change_within_a_second() {
    let Some((_, url, store)) = fresh("listen_notify_delivers_a_head_change_within_a_second")
    else {
        return;
    };
    let a = text_node(&store, "a");
    let b = text_node(&store, "b");
    store.add_thread(&thread("N1", a)).expect("add");
    let mut listener = Listener::open(&PgConfig::parse(&url).expect("parses")).expect("listen");
    assert_eq!(
        listener.wait(Duration::from_millis(50)).expect("quiet"),
        None
    );
    let moved_at = Instant::now();
    assert!(store.compare_and_set("N1", a, b).expect("cas"));
    let got = listener.wait(Duration::from_secs(1)).expect("wait");
    assert_eq!(got.as_deref(), Some("N1"));
    assert!(moved_at.elapsed() < Duration::from_secs(1));
    store.archive("N1", "killed").expect("archive");
    assert_eq!(
        listener
            .wait(Duration::from_secs(1))
            .expect("wait")
            .as_deref(),
        Some("N1")
    );
}

#[test]
fn registry_keeps_versions() {
    let Some((_, _, store)) = fresh("registry_keeps_versions") else {
        return;
    };
    let (v1, v2) = (text_node(&store, "v1"), text_node(&store, "v2"));
    assert_eq!(store.register("wf", v1, 1).expect("new"), Registered::New);
    assert_eq!(
        store.register("wf", v1, 2).expect("same"),
        Registered::Unchanged
    );
    assert_eq!(
        store.register("wf", v2, 3).expect("update"),
        Registered::Updated { previous: v1 }
    );
    let rows = store.registry().expect("list");
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].hash, rows[0].registered_ms, rows[0].history.clone()),
        (v2, 3, vec![(v1, 1)])
    );
    store.unregister("wf").expect("remove");
    assert!(matches!(
        store.unregister("wf"),
        Err(PgError::UnknownName(_))
    ));
}

#[test]
fn a_server_restart_mid_operation_is_a_clear_error_then_reconnects() {
    let Some(mut server) =
        PgServer::private("a_server_restart_mid_operation_is_a_clear_error_then_reconnects")
    else {
        return;
    };
    let url = server.fresh_db("restart");
    let store = open(&url);
    let a = text_node(&store, "a");
    store.add_thread(&thread("R1", a)).expect("add");
    server.stop().expect("stop");
    let err = store.head("R1").expect_err("server is down");
    let text = err.to_string();
    assert!(
        matches!(
            err,
            PgError::ConnectionLost { .. } | PgError::ServerDown { .. }
        ),
        "{text}"
    );
    assert!(text.contains(".s.PGSQL."), "names the socket: {text}");
    assert!(!text.contains(pg_server::PASSWORD), "{text}");
    let err = store.head("R1").expect_err("still down");
    assert!(matches!(err, PgError::ServerDown { .. }), "{err}");
    server.start().expect("start");
    assert_eq!(store.head("R1").expect("reconnected"), a);
}

/// Run text: appends land at the end of their file whatever the batch, a read at any
/// offset returns exactly the bytes there, writers racing on one file lose nothing (the loser
/// sends again), every append notifies the runs channel, and pruning removes only the run text
/// of threads archived before the cut.
#[test]
fn run_text_appends_race_free_and_reads_at_any_offset() {
    use uwf::pg::{RunAppend, RunFileKind, RunStateChange};
    let Some((_server, url, store)) = fresh("run_text_appends_race_free_and_reads_at_any_offset")
    else {
        return;
    };
    let config = PgConfig::parse(&url).expect("url");
    let mut listener = Listener::open_on(&config, &[uwf::pg::RUNS_CHANNEL]).expect("listen");
    let append = |thread: &str, file, text: &str| RunAppend {
        thread: thread.to_owned(),
        file,
        at_ms: 1,
        bytes: text.as_bytes().to_vec(),
    };
    let not_made = store
        .write_runs(
            &[
                append("T", RunFileKind::Log, "hello "),
                append("T", RunFileKind::Events, "{\"event\":\"started\"}\n"),
            ],
            &[RunStateChange {
                thread: "T".into(),
                last: None,
                info: Some("{\"pid\":7,\"startedAt\":1}".into()),
            }],
        )
        .expect("write");
    assert!(not_made.is_empty());
    store
        .write_runs(&[append("T", RunFileKind::Log, "world\n")], &[])
        .expect("write");
    assert_eq!(
        listener.wait(Duration::from_secs(5)).expect("notified"),
        Some("T".to_owned())
    );
    let whole = b"hello world\n";
    assert_eq!(
        store
            .run_text_size("T", RunFileKind::Log)
            .expect("size")
            .map(|s| s.0),
        Some(whole.len() as u64)
    );
    for offset in 0..=whole.len() {
        for max in [1, 3, 100] {
            let got = store
                .read_run_text("T", RunFileKind::Log, offset as u64, max)
                .expect("read");
            let end = (offset + max).min(whole.len());
            assert_eq!(got, &whole[offset..end], "offset {offset} max {max}");
        }
    }
    assert_eq!(
        store.run_text_size("U", RunFileKind::Log).expect("size"),
        None
    );
    let (last, info, at) = store.run_state("T").expect("state");
    assert_eq!(last, None);
    assert!(info.expect("info").contains("\"pid\":7"));
    assert!(at > 0);

    // Four writers append 50 numbered lines each to one file: every line exactly once, whole.
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let url = url.clone();
            std::thread::spawn(move || {
                let store = open(&url);
                for i in 0..50 {
                    let mut pending = vec![RunAppend {
                        thread: "R".into(),
                        file: RunFileKind::Events,
                        at_ms: 1,
                        bytes: format!("w{w} line {i}\n").into_bytes(),
                    }];
                    while !pending.is_empty() {
                        let again = store.write_runs(&pending, &[]).expect("write");
                        pending = again.into_iter().map(|j| pending[j].clone()).collect();
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.join().expect("writer");
    }
    let text = String::from_utf8(
        store
            .read_run_text("R", RunFileKind::Events, 0, 1 << 20)
            .expect("read"),
    )
    .expect("utf-8");
    let mut lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 200, "{text}");
    lines.sort();
    lines.dedup();
    assert_eq!(lines.len(), 200);

    // Pruning: only threads archived before the cut lose their run text.
    let head = text_node(&store, "start");
    store.add_thread(&thread("T", head)).expect("thread T");
    store.add_thread(&thread("R", head)).expect("thread R");
    store.archive("T", "done").expect("archive");
    let (threads, bytes) = store.prune_runs(0, false).expect("prune nothing");
    assert_eq!((threads, bytes), (0, 0));
    let later = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + 1000;
    let counted = store.prune_runs(later, true).expect("count");
    assert!(
        store
            .run_text_size("T", RunFileKind::Log)
            .expect("size")
            .is_some()
    );
    let (threads, bytes) = store.prune_runs(later, false).expect("prune");
    assert_eq!((threads, bytes), counted);
    assert_eq!(threads, 1);
    assert!(bytes > 0);
    assert_eq!(
        store.run_text_size("T", RunFileKind::Log).expect("size"),
        None
    );
    assert_eq!(store.run_state("T").expect("state").2, 0);
    assert!(
        store
            .run_text_size("R", RunFileKind::Events)
            .expect("size")
            .is_some()
    );
}
