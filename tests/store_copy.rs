//! `uwf store copy` through the real binary, against a real PostgreSQL (issue #18):
//! a directory store of 1,000 threads goes into a fresh database and back into a fresh
//! directory, and comes out the same — node files byte for byte, heads, history, registry —
//! and `cas fsck` passes on it. Bad URLs, a server that is down and a wrong password fail with
//! exit 1, naming the target and never the password; a destination that holds threads or
//! workflows is refused and left as it was.
//!
//! Without PostgreSQL binaries the tests print `SKIP …` and pass, unless
//! `UWF_REQUIRE_POSTGRES=1`.

mod common;
mod pg_server;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{Env, json};
use serde_json::Value;
use uwf::cas::{Hash, Store, builtin};
use uwf::engine::storage::{index_db, index_files};
use uwf::engine::thread::{forks, index};

/// Threads in the big store. Through the CLI: run to the end (archived `done`), run two steps
/// (active) and started then killed (archived `killed`). Written with the library, as `thread
/// start` and `thread fork` write them but with one `threads.yaml` update for all (a thousand
/// CLI calls take half a minute on a busy machine): started threads, and forks of the two-step
/// threads' heads.
const DONE: usize = 20;
const PARTIAL: usize = 40;
const KILLED: usize = 20;
const STARTED: usize = 420;
const FORKS: usize = 500;
const THREADS: usize = DONE + PARTIAL + KILLED + STARTED + FORKS;
const ACTIVE: usize = PARTIAL + STARTED + FORKS;
const ARCHIVED: usize = DONE + KILLED;
/// Text nodes no thread names (as GC leaves them within its grace period), so the store has
/// as many nodes as 1,000 threads with a few real steps each would write.
const LOOSE_TEXTS: usize = 9000;

/// How long one copy of the 1,000-thread store may take in a debug build on a busy machine
/// (it takes about a second).
const COPY_LIMIT: Duration = Duration::from_secs(30);

/// Runs `uwf args…` with the storage root `root` (outside any `Env`), asserting success.
fn uwf_at(env: &Env, root: &Path, args: &[&str]) -> String {
    let out = env
        .uwf()
        .env("UWF_STORAGE_ROOT", root)
        .args(args)
        .output()
        .expect("run uwf");
    assert!(
        out.status.success(),
        "uwf {args:?} at {} failed\nstdout: {}\nstderr: {}",
        root.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Runs `uwf store copy FROM TO`, asserting success; returns its JSON summary and how long it took.
/// Its `UWF_PROFILE` marks go to the test's stderr (shown with `--nocapture`).
fn copy(env: &Env, from: &str, to: &str) -> (Value, Duration) {
    let started = Instant::now();
    let out = env
        .uwf()
        .env("UWF_PROFILE", "1")
        .args(["store", "copy", from, to])
        .output()
        .expect("run uwf");
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "uwf store copy {from} {to} failed\nstderr: {stderr}"
    );
    eprint!("{stderr}");
    (json(String::from_utf8_lossy(&out.stdout).trim()), took)
}

/// Runs `uwf store copy FROM TO`, asserting exit 1 with no panic; returns stderr.
fn copy_fails(env: &Env, from: &str, to: &str) -> String {
    env.fails(&["store", "copy", from, to], 1)
}

/// Registers two versions of solve-issue (the second the example itself) and document.
fn register(env: &Env) {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let text = std::fs::read_to_string(examples.join("solve-issue.yaml")).expect("example");
    let draft = text.replacen(
        "description: >-\n",
        "description: >-\n  A first draft.\n",
        1,
    );
    assert_ne!(draft, text, "the example's description moved");
    let draft_path = env.dir.path().join("solve-issue-draft.yaml");
    std::fs::write(&draft_path, draft).expect("write draft");
    env.ok(&["workflow", "put", draft_path.to_str().expect("utf-8")]);
    common::put_example(env, "solve-issue");
    common::put_example(env, "document");
}

/// Makes the 1,000 threads of the big store (see [`DONE`]).
fn make_threads(env: &Env) {
    let next = AtomicUsize::new(0);
    let run_each = |count: usize, work: &(dyn Fn(usize) + Sync)| {
        next.store(0, Ordering::SeqCst);
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, Ordering::SeqCst);
                        if i >= count {
                            break;
                        }
                        work(i);
                    }
                });
            }
        });
    };
    let start = |prompt: String| common::start_thread(env, "solve-issue", &prompt);
    run_each(DONE, &|i| {
        let id = start(format!("Issue {i}: the login page times out"));
        env.ok(&["thread", "run", &id]);
    });
    run_each(PARTIAL, &|i| {
        let id = start(format!("Issue {i}: the export drops rows"));
        // Still active after two steps: exit 3 (`docs/cli.md#exit-codes`).
        let run = env.run(&["thread", "run", &id, "--max-steps", "2"]);
        assert_eq!(run.status.code(), Some(3), "{run:?}");
    });
    run_each(KILLED, &|i| {
        let id = start(format!("Issue {i}: nobody wants this"));
        env.ok(&["thread", "kill", &id]);
    });

    let root = env.root();
    let mut store = Store::open(&root).expect("store");
    store.set_durable(false);
    let workflow = index_files::read_registry(&root).expect("registry")["solve-issue"].hash;
    let partial: Vec<(String, Hash)> = uwf::engine::storage::threads::read_threads(&root)
        .expect("threads")
        .into_iter()
        .collect();
    assert_eq!(partial.len(), PARTIAL);
    let mut new = BTreeMap::new();
    for i in 0..STARTED {
        let start = store
            .put(
                builtin::hash_of("start"),
                &serde_json::json!({
                    "workflow": workflow.to_string(),
                    "prompt": format!("Issue {i}: the search is slow"),
                }),
            )
            .expect("start node");
        new.insert(index::new_id(), start);
    }
    for i in 0..FORKS {
        let (from, head) = &partial[i % partial.len()];
        let id = index::new_id();
        forks::record(&root, &id, Some(from), *head).expect("fork record");
        new.insert(id, *head);
    }
    let rows: Vec<index_db::Bulk> = new
        .into_iter()
        .map(|(id, head)| index_db::Bulk {
            id,
            workflow,
            head,
            parent: None,
            archived: None,
            steps: None,
            next: None,
            prompt: None,
            spent: None,
        })
        .collect();
    index_db::insert_many(&root, &rows).expect("thread index rows");
    for i in 0..LOOSE_TEXTS {
        store
            .put(
                builtin::hash_of("text"),
                &Value::String(format!("Output {i} of an agent that said a lot.")),
            )
            .expect("text node");
    }
}

/// Every node file under `root`: hash → bytes.
fn node_files(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let objects = root.join("cas/objects");
    for fanout in std::fs::read_dir(&objects).expect("objects dir") {
        let fanout = fanout.expect("entry").path();
        let prefix = fanout
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        for file in std::fs::read_dir(&fanout).expect("fanout dir") {
            let file = file.expect("entry").path();
            let name = file
                .file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned();
            let rest = name.strip_suffix(".json").expect("node file name");
            out.insert(
                format!("{prefix}{rest}"),
                std::fs::read(&file).expect("read node"),
            );
        }
    }
    out
}

/// The node file's type and payload, without the timestamp.
fn content(bytes: &[u8]) -> (Value, Value) {
    let node: Value = serde_json::from_slice(bytes).expect("node JSON");
    (node["type"].clone(), node["payload"].clone())
}

/// Active threads and their heads, from the thread index.
fn threads_yaml(root: &Path) -> BTreeMap<String, String> {
    uwf::engine::storage::threads::read_threads(root)
        .expect("thread index")
        .into_iter()
        .map(|(id, head)| (id, head.to_string()))
        .collect()
}

fn registry_yaml(root: &Path) -> serde_yaml::Value {
    let text = std::fs::read_to_string(root.join("registry.yaml")).expect("registry.yaml");
    serde_yaml::from_str(&text).expect("registry.yaml parses")
}

/// Archived threads, from the thread index.
fn history(root: &Path) -> BTreeSet<String> {
    uwf::engine::storage::threads::read_history(root)
        .expect("thread index")
        .into_iter()
        .map(|a| {
            format!(
                "{} {} {} {} {}",
                a.thread, a.workflow, a.head, a.status, a.completed_ms
            )
        })
        .collect()
}

/// A meta-schema or the bootstrap node: each store writes its own when it is created, so
/// their timestamps are the destination's.
fn is_schema_node(bytes: &[u8]) -> bool {
    let (type_hash, _) = content(bytes);
    type_hash == "F5VV55NBKX1R5" || type_hash == "0000000000000"
}

#[test]
fn a_thousand_threads_go_to_postgres_and_back_unchanged() {
    let name = "a_thousand_threads_go_to_postgres_and_back_unchanged";
    let Some(server) = pg_server::shared(name) else {
        return;
    };
    let env = Env::new();
    let built = Instant::now();
    register(&env);
    make_threads(&env);
    eprintln!("built {THREADS} threads in {:?}", built.elapsed());
    let source = env.root();
    let before = node_files(&source);
    assert_eq!(threads_yaml(&source).len(), ACTIVE);
    assert_eq!(history(&source).len(), ARCHIVED);

    // Directory → PostgreSQL.
    let url = server.fresh_db("copy_roundtrip");
    let (summary, took) = copy(&env, source.to_str().expect("utf-8"), &url);
    eprintln!("directory → postgres: {took:?} {summary}");
    assert!(took < COPY_LIMIT, "copy took {took:?}");
    assert_eq!(summary["nodes"], before.len());
    assert_eq!(summary["threads"], ACTIVE);
    assert_eq!(summary["archived"], ARCHIVED);
    assert_eq!(summary["workflows"], 2);
    assert_eq!(summary["versions"], 3);
    assert!(
        !summary.to_string().contains(pg_server::PASSWORD),
        "{summary}"
    );

    let mut client = pg_server::PgServer::raw(&url);
    let count = |client: &mut postgres::Client, sql: &str| -> i64 {
        client.query_one(sql, &[]).expect(sql).get(0)
    };
    assert_eq!(
        count(&mut client, "select count(*) from nodes") as usize,
        before.len()
    );
    assert_eq!(
        count(
            &mut client,
            "select count(*) from threads where parent is not null"
        ) as usize,
        FORKS,
        "every fork knows the thread it came from"
    );
    assert_eq!(
        count(
            &mut client,
            "select count(*) from history where status = 'killed'"
        ) as usize,
        KILLED
    );

    // Every row knows what a list shows, what its thread spent included (the source's rows,
    // or the source's nodes where its rows did not): a list of the copy reads no thread's
    // nodes.
    let unknown = "select (select count(*) from threads \
                           where steps is null or next is null or spent is null) + \
                   (select count(*) from history where steps is null or spent is null)";
    assert_eq!(
        count(&mut client, unknown),
        0,
        "copied rows know steps, next and what was spent"
    );
    let pg_list = || {
        let args = ["thread", "list", "--all", "--json"];
        let out = env
            .uwf()
            .env("UWF_STORAGE_ROOT", env.dir.path().join("pg-cache"))
            .env("UWF_STORAGE_URL", &url)
            .args(args)
            .output()
            .expect("run uwf");
        common::success_stdout(&args, &out).lines().count()
    };
    // Rows that do not know (as an older copy left them) learn it from the first list, which
    // writes it back: the next list reads rows alone.
    client
        .batch_execute(
            "update threads set steps = null, next = null, spent = null;
             update history set steps = null, spent = null",
        )
        .expect("forget steps");
    assert_eq!(pg_list(), THREADS);
    assert_eq!(
        count(&mut client, unknown),
        0,
        "a list writes back what it learns"
    );

    // PostgreSQL → a directory that does not exist yet.
    let back: PathBuf = env.dir.path().join("back");
    let (summary, took) = copy(&env, &url, back.to_str().expect("utf-8"));
    eprintln!("postgres → directory: {took:?} {summary}");
    assert!(took < COPY_LIMIT, "copy took {took:?}");
    assert_eq!(summary["threads"], ACTIVE);
    assert_eq!(summary["archived"], ARCHIVED);

    // The same nodes, byte for byte (timestamps kept) apart from the schema nodes each store
    // writes when it is created, which match in content.
    let after = node_files(&back);
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "the same node hashes"
    );
    for (hash, bytes) in &before {
        let copied = &after[hash];
        if is_schema_node(bytes) {
            assert_eq!(content(bytes), content(copied), "{hash}");
        } else {
            assert_eq!(
                String::from_utf8_lossy(bytes),
                String::from_utf8_lossy(copied),
                "{hash}"
            );
        }
    }
    assert_eq!(threads_yaml(&source), threads_yaml(&back));
    assert_eq!(history(&source), history(&back));
    assert_eq!(registry_yaml(&source), registry_yaml(&back));

    let db = rusqlite::Connection::open(back.join("index.db")).expect("index.db");
    let unknown: i64 = db
        .query_row(
            "select count(*) from threads where steps is null or spent is null \
             or (status = 'active' and next is null)",
            [],
            |r| r.get(0),
        )
        .expect("count");
    assert_eq!(
        unknown, 0,
        "rows copied back know steps, next and what was spent"
    );
    drop(db);
    let fsck = uwf_at(&env, &back, &["cas", "fsck"]);
    assert!(fsck.contains("no problems"), "{fsck}");
    let listed = uwf_at(&env, &back, &["thread", "list", "--all", "--json"]);
    assert_eq!(listed.lines().count(), THREADS);
    // A copied thread carries on in its new store.
    let (id, _) = threads_yaml(&back).into_iter().next().expect("a thread");
    // One step, after which it is still active (exit 3) or done (0).
    let run = env
        .uwf()
        .env("UWF_STORAGE_ROOT", &back)
        .args(["thread", "run", &id, "--max-steps", "1"])
        .output()
        .expect("run uwf");
    assert!(matches!(run.status.code(), Some(0 | 3)), "{run:?}");
}

#[test]
fn unreachable_or_refusing_databases_fail_naming_the_target_not_the_password() {
    let name = "unreachable_or_refusing_databases_fail_naming_the_target_not_the_password";
    let env = Env::new();
    common::put_example(&env, "solve-issue");
    let root = env.root();
    let root = root.to_str().expect("utf-8");
    let secret = "s3cret-Pw-0451";

    let err = copy_fails(
        &env,
        root,
        &format!("postgres://uwf:{secret}@db:notaport/uwf"),
    );
    assert!(err.contains("invalid storage URL"), "{err}");
    assert!(err.contains("postgres://uwf:***@db"), "{err}");
    assert!(!err.contains(secret), "{err}");

    let err = copy_fails(&env, &format!("mysql://uwf:{secret}@db/uwf"), root);
    assert!(
        err.contains("neither a directory nor a postgres:// or file:// URL"),
        "{err}"
    );
    assert!(!err.contains(secret), "{err}");

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let url = format!("postgres://uwf:{secret}@127.0.0.1:{port}/uwf");
    let err = copy_fails(&env, root, &url);
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
    assert!(err.contains("connection refused"), "{err}");
    assert!(!err.contains(secret), "{err}");
    let err = copy_fails(&env, &url, &env.dir.path().join("out").to_string_lossy());
    assert!(
        err.contains(&format!(
            "cannot open postgres://uwf:***@127.0.0.1:{port}/uwf"
        )),
        "{err}"
    );
    assert!(!err.contains(secret), "{err}");
    assert!(
        !env.dir.path().join("out").exists(),
        "nothing made for a failed copy"
    );

    let socket = env.dir.path().join("no-server");
    let url = format!(
        "postgres://uwf:{secret}@{}:5432/uwf",
        socket.to_string_lossy().replace('/', "%2F")
    );
    let err = copy_fails(&env, root, &url);
    assert!(
        err.contains(&format!("{}/.s.PGSQL.5432", socket.display())),
        "{err}"
    );
    assert!(!err.contains(secret), "{err}");

    let Some(server) = pg_server::shared(name) else {
        return;
    };
    let url = server
        .fresh_db("wrong_password")
        .replace(pg_server::PASSWORD, secret);
    let err = copy_fails(&env, root, &url);
    assert!(err.contains("refused the password of user `uwf`"), "{err}");
    assert!(
        err.contains(&server.socket_dir().display().to_string()),
        "{err}"
    );
    assert!(!err.contains(secret), "{err}");
}

#[test]
fn a_destination_with_threads_or_workflows_is_refused_and_left_alone() {
    let name = "a_destination_with_threads_or_workflows_is_refused_and_left_alone";
    let env = Env::new();
    common::put_example(&env, "solve-issue");
    let a = common::start_thread(&env, "solve-issue", "Fix the login bug");
    // Still active after one step: exit 3 (`docs/cli.md#exit-codes`).
    let run = env.run(&["thread", "run", &a, "--max-steps", "1"]);
    assert_eq!(run.status.code(), Some(3), "{run:?}");
    let root = env.root();
    let root_text = root.to_str().expect("utf-8");

    // A directory holding nodes only is fine: they are kept, the rest is added.
    let only_nodes = env.dir.path().join("only-nodes");
    uwf_at(
        &env,
        &only_nodes,
        &["cas", "put", "text", "\"already here\""],
    );
    let (summary, _) = copy(&env, root_text, only_nodes.to_str().expect("utf-8"));
    assert!(
        summary["newNodes"].as_u64() < summary["nodes"].as_u64(),
        "{summary}"
    );
    assert_eq!(threads_yaml(&only_nodes), threads_yaml(&root));

    // The same copy again: it now holds a thread and a workflow.
    let before = threads_yaml(&only_nodes);
    let err = copy_fails(&env, root_text, only_nodes.to_str().expect("utf-8"));
    assert!(
        err.contains("is not empty: it holds 1 active thread, 1 registered workflow"),
        "{err}"
    );
    assert_eq!(threads_yaml(&only_nodes), before, "left alone");

    // Into itself.
    let err = copy_fails(&env, root_text, root_text);
    assert!(err.contains("the same store"), "{err}");

    let Some(server) = pg_server::shared(name) else {
        return;
    };
    let url = server.fresh_db("occupied");
    copy(&env, root_text, &url);
    let mut client = pg_server::PgServer::raw(&url);
    let nodes: i64 = client
        .query_one("select count(*) from nodes", &[])
        .expect("count")
        .get(0);
    let err = copy_fails(&env, only_nodes.to_str().expect("utf-8"), &url);
    assert!(
        err.contains("is not empty: it holds 1 active thread, 1 registered workflow"),
        "{err}"
    );
    assert!(err.contains("postgres://uwf:***@"), "{err}");
    assert!(!err.contains(pg_server::PASSWORD), "{err}");
    let after: i64 = client
        .query_one("select count(*) from nodes", &[])
        .expect("count")
        .get(0);
    assert_eq!(after, nodes, "no node added to a refused destination");
}

#[test]
fn a_source_node_that_does_not_hash_to_its_name_stops_the_copy() {
    let env = Env::new();
    common::put_example(&env, "solve-issue");
    let id = common::start_thread(&env, "solve-issue", "Fix the login bug");
    let head = threads_yaml(&env.root())[&id].clone();
    let path = env.object_path(&head);
    common::make_writable(&path);
    let text = std::fs::read_to_string(&path).expect("node file");
    std::fs::write(
        &path,
        text.replace("Fix the login bug", "Fix the logout bug"),
    )
    .expect("tamper");

    let to = env.dir.path().join("copy");
    let err = copy_fails(
        &env,
        env.root().to_str().expect("utf-8"),
        to.to_str().expect("utf-8"),
    );
    assert!(err.contains("hash mismatch"), "{err}");
    assert!(err.contains(&head), "{err}");
    assert!(
        !to.join("index.db").exists(),
        "no thread index written for a failed copy"
    );
}

#[test]
fn file_urls_name_directories_and_other_hosts_are_refused() {
    let env = Env::new();
    common::put_example(&env, "solve-issue");
    common::start_thread(&env, "solve-issue", "Fix the login bug");
    let root = env.root();
    let into = env.dir.path().join("copy of store");
    let url = |p: &Path| format!("file://{}", p.to_str().expect("utf-8").replace(' ', "%20"));
    let (summary, _) = copy(&env, &url(&root), &url(&into));
    assert_eq!(summary["threads"], 1, "{summary}");
    assert_eq!(threads_yaml(&into), threads_yaml(&root));
    let err = copy_fails(&env, "file://backup-host/srv/uwf", &url(&into));
    assert!(err.contains("names another machine"), "{err}");
    assert!(err.contains("file:///ABSOLUTE/PATH"), "{err}");
}
