//! The thread index at team scale: what `thread start`, `step`, `show`, `kill`, `answer`,
//! `list`, `list --all`, the dashboard's search and the mount's `ls threads` cost in stores of 1,000, 10,000 and
//! 100,000 threads (half of them archived), over the directory store and over PostgreSQL,
//! printed side by side in one run with a `uwf --version` spawn (the floor of any command) and
//! the size of the directory store's write-ahead log, `index.db-wal`.
//!
//! Every size is a store of its own, grown the way a team grows one. A few real threads of
//! solve-issue are run with the script agent; the index then gets rows at their heads (as forks
//! would have) up to 2,000 below the size, half archived, with ids spread over the past year;
//! the last 2,000 threads (all of them, for a size of 2,000 or less) are made by real `uwf`
//! processes, one `thread start` each, every other one then killed and every fourth stepped.
//! (Bulk rows alone hid a log that grew with every process: a store grown by processes had a
//! 298 MB log at 10,000 threads and a `thread start` of 172 ms.) Every timed command is a real
//! `uwf` process; a row is the median of several runs, and the runs visit the sizes in turn
//! (measured one size after another, the machine's drift over minutes moved the ratios between
//! sizes from 0.82× to 1.5×). The targets: start/step/show/kill/answer at
//! 10,000 and 100,000 threads ≤ 1.2× their cost at 1,000; a one-shot `thread start` ≤ 3× a
//! spawn; the log ≤ 8 MB; `list --all` (JSON lines) at 100,000 threads ≤ 1 s on both
//! backends; `ls threads` ≤ 1 s warm; a search ≤ 200 ms at 100,000 threads.
//!
//! The search is the dashboard's (`GET /api/threads?q=…`, the same listing query as
//! `thread list --all --search TEXT`), timed as that command with the dashboard's page of 50:
//! a text only the oldest threads' prompts hold (so every row is looked at, and the match is
//! the last), and a text no thread holds.
//!
//! Run: `cargo bench --bench index_scale` (env `INDEX_BENCH_SIZES`, default
//! `1000,10000,100000`; `INDEX_BENCH_BACKENDS=directory` for the directory store alone;
//! `UWF_BENCH_BIN` to time another build). Prints numbers, asserts nothing. Mounting needs root and /dev/fuse;
//! PostgreSQL needs Debian's `postgresql` (a row says when either is missing).

#[path = "../tests/pg_server/mod.rs"]
mod pg_server;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use uwf::cas::Hash;
use uwf::engine::storage::index_db::{self, Bulk};

/// A person's approval: `thread answer` is timed on threads stepped to the approver with the
/// `human` agent.
const ASK: &str = r#"
name: ask
roles:
  approver: { meta: { type: object, properties: { approved: { type: boolean } }, required: [approved] } }
graph:
  $START: [ { role: approver, condition: null } ]
  approver: [ { role: $END, condition: null } ]
"#;

/// The binary measured: this build's, or `UWF_BENCH_BIN` (a release build, with the bench
/// itself built quickly: `cargo bench --profile dev`).
fn bin() -> PathBuf {
    std::env::var_os("UWF_BENCH_BIN")
        .map(Into::into)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_uwf").into())
}

/// Threads made by real processes at the end of every size.
const BY_PROCESSES: usize = 2_000;

const SCRIPT: &str = r#"
planner:
  - { summary: "Fix the login bug", steps: ["reproduce", "fix the session check", "add a test"] }
developer:
  - { filesChanged: [src/login.rs], summary: "first attempt", testsPassing: false }
  - { filesChanged: [src/login.rs, tests/login.rs], summary: "second attempt", testsPassing: true }
reviewer:
  - { approved: false, replan: false, comments: [] }
  - { approved: true, replan: false, comments: [] }
"#;

/// Real threads whose heads the bulk rows share.
const TEMPLATES: usize = 8;
/// Runs of each per-thread command (the median is printed).
const RUNS: usize = 31;
/// Runs of each listing.
const LIST_RUNS: usize = 3;
/// What only the oldest bulk row's prompt (and the first template's) says: a search for it
/// looks at every row and finds the match last.
const NEEDLE: &str = "needle in the haystack";

struct Backend {
    name: &'static str,
    root: PathBuf,
    url: Option<String>,
    agent: String,
}

impl Backend {
    fn uwf(&self) -> Command {
        let mut cmd = Command::new(bin());
        cmd.env("UWF_STORAGE_ROOT", &self.root)
            .env_remove("UWF_STORAGE_URL")
            .stdin(Stdio::null());
        if let Some(url) = &self.url {
            cmd.env("UWF_STORAGE_URL", url);
        }
        cmd
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.uwf().args(args).output().expect("run uwf");
        // `thread run --max-steps` ends with 3 when the thread is still active (docs/cli.md).
        let stopped = args.starts_with(&["thread", "run"]) && out.status.code() == Some(3);
        assert!(
            out.status.success() || stopped,
            "uwf {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8")
    }

    /// Times one command (its output to /dev/null), in milliseconds.
    fn time(&self, args: &[&str]) -> f64 {
        let started = Instant::now();
        let status = self
            .uwf()
            .args(args)
            .stdout(Stdio::null())
            .status()
            .expect("run uwf");
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        assert!(status.success(), "uwf {args:?} failed");
        ms
    }

    fn start(&self, prompt: &str) -> String {
        let out = self.ok(&["thread", "start", "solve-issue", "-p", prompt]);
        let json: serde_json::Value = serde_json::from_str(out.trim()).expect("start JSON");
        json["thread"].as_str().expect("thread id").to_owned()
    }
}

/// Makes `count` threads as a team does, one process per command: a `thread start` each,
/// every other thread then killed and every fourth stepped (`n` numbers them across sizes).
fn grow_by_processes(b: &Backend, from: usize, count: usize) {
    let script = format!(
        "set -e; for i in $(seq {from} {to}); do \
           id=$(\"$UWF\" thread start solve-issue -p \"grown $i\" -q); \
           case $((i % 4)) in \
             1|3) \"$UWF\" thread kill \"$id\" -q >/dev/null ;; \
             2) \"$UWF\" thread step \"$id\" --agent \"$AGENT\" >/dev/null ;; \
           esac; \
         done",
        to = from + count - 1
    );
    let mut sh = Command::new("sh");
    sh.arg("-c")
        .arg(script)
        .env("UWF", bin())
        .env("AGENT", &b.agent)
        .env("UWF_STORAGE_ROOT", &b.root)
        .env_remove("UWF_STORAGE_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    if let Some(url) = &b.url {
        sh.env("UWF_STORAGE_URL", url);
    }
    let status = sh.status().expect("sh");
    assert!(status.success(), "growing by processes failed");
}

/// The write-ahead log's size in MB (the directory store).
fn log_mb(b: &Backend) -> Option<f64> {
    if b.url.is_some() {
        return None;
    }
    let len = std::fs::metadata(b.root.join("index.db-wal")).map_or(0, |m| m.len());
    Some(len as f64 / 1e6)
}

/// A real thread's place, which bulk rows copy.
#[derive(Clone)]
struct Template {
    workflow: Hash,
    head: Hash,
    steps: u64,
    next: Option<String>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Runs the templates: solve-issue threads stepped three times each.
fn templates(b: &Backend) -> Vec<Template> {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/solve-issue.yaml");
    b.ok(&["workflow", "put", &example.to_string_lossy()]);
    let ask = b.root.join("ask.yaml");
    std::fs::write(&ask, ASK).expect("ask workflow");
    b.ok(&["workflow", "put", &ask.to_string_lossy()]);
    let mut ids = Vec::new();
    for i in 0..TEMPLATES {
        let id = if i == 0 {
            b.start(&format!("template {} {i}: the {NEEDLE}", b.name))
        } else {
            b.start(&format!("template {} {i}", b.name))
        };
        b.ok(&[
            "thread",
            "run",
            &id,
            "--max-steps",
            "3",
            "--agent",
            &b.agent,
        ]);
        ids.push(id);
    }
    let mut out = Vec::new();
    for line in b.ok(&["thread", "list", "--json"]).lines() {
        let json: serde_json::Value = serde_json::from_str(line).expect("list JSON");
        let id = json["thread"].as_str().unwrap();
        if !ids.iter().any(|t| t == id) {
            continue;
        }
        let head = Hash::parse(json["head"].as_str().unwrap()).unwrap();
        let workflow = match &b.url {
            None => index_db::get(&b.root, id).unwrap().unwrap().workflow,
            Some(url) => {
                let mut c = pg_server::PgServer::raw(url);
                let row = c
                    .query_one("select workflow from threads where id = $1", &[&id])
                    .unwrap();
                Hash::parse(row.get::<_, &str>(0)).unwrap()
            }
        };
        out.push(Template {
            workflow,
            head,
            steps: json["steps"].as_u64().unwrap(),
            next: json["next"].as_str().map(str::to_owned),
        });
    }
    out
}

/// Adds `count` rows (every other one archived) with ids from a year ago up to an hour ago.
fn grow(b: &Backend, templates: &[Template], from: usize, count: usize) {
    let now = now_ms();
    let year = 365 * 24 * 3_600_000u64;
    let rows: Vec<Bulk> = (from..from + count)
        .map(|i| {
            let t = &templates[i % templates.len()];
            let at = now - 3_600_000 - year + (i as u64 * 997) % year;
            let id = ulid::Ulid::from_parts(at, (i as u128) << 16 | 0xBE7C).to_string();
            Bulk {
                id,
                workflow: t.workflow,
                head: t.head,
                parent: None,
                archived: (i % 2 == 1).then(|| ("done".to_owned(), at + 60_000)),
                steps: Some(t.steps),
                next: t.next.clone(),
                // Row 0 is the oldest of every store (a year and an hour ago).
                prompt: Some(if i == 0 {
                    format!("bulk {i}: the {NEEDLE}")
                } else {
                    format!("bulk {i}: fix the login bug")
                }),
                // Not known, as for threads no listing of costs has read yet.
                spent: None,
            }
        })
        .collect();
    match &b.url {
        None => {
            index_db::insert_many(&b.root, &rows).expect("bulk rows");
            // Closed, as a command's would be: an index this process held open would keep the
            // log's shared index alive for every timed process (no log to rebuild).
            index_db::close_all();
        }
        Some(url) => {
            let mut c = pg_server::PgServer::raw(url);
            let mut tx = c.transaction().unwrap();
            let col = |f: &dyn Fn(&Bulk) -> String, archived: bool| -> Vec<String> {
                rows.iter()
                    .filter(|r| r.archived.is_some() == archived)
                    .map(f)
                    .collect()
            };
            let ids = |a| col(&|r| r.id.clone(), a);
            let wfs = |a| col(&|r| r.workflow.to_string(), a);
            let heads = |a| col(&|r| r.head.to_string(), a);
            let steps = |a: bool| -> Vec<i64> {
                rows.iter()
                    .filter(|r| r.archived.is_some() == a)
                    .map(|r| r.steps.unwrap_or(0) as i64)
                    .collect()
            };
            let nexts = col(&|r| r.next.clone().unwrap_or_default(), false);
            let prompts = |a| {
                col(
                    &|r| index_db::search_text(r.prompt.as_deref().unwrap_or("")),
                    a,
                )
            };
            tx.execute(
                "insert into threads (id, workflow, head, steps, next, prompt)
                 select * from unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[],
                                      $6::text[])",
                &[
                    &ids(false),
                    &wfs(false),
                    &heads(false),
                    &steps(false),
                    &nexts,
                    &prompts(false),
                ],
            )
            .unwrap();
            tx.execute(
                "insert into history (thread, workflow, head, status, steps, prompt)
                 select a, b, c, 'done', d, e
                 from unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[])
                      as u(a, b, c, d, e)",
                &[
                    &ids(true),
                    &wfs(true),
                    &heads(true),
                    &steps(true),
                    &prompts(true),
                ],
            )
            .unwrap();
            tx.commit().unwrap();
            c.batch_execute("analyze threads; analyze history").unwrap();
        }
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_millis() as u64
}

/// One size's costs, in ms.
#[derive(Clone)]
struct Costs {
    version: f64,
    start: f64,
    step: f64,
    show: f64,
    kill: f64,
    answer: f64,
    log_mb: Option<f64>,
    list: f64,
    list_all: f64,
    /// The dashboard's search: a text the oldest thread holds, and one no thread holds.
    search_hit: f64,
    search_miss: f64,
    ls: Option<f64>,
}

/// What no thread says: a search for it finds nothing after looking at every row.
const MISSING: &str = "no thread says this";

/// The dashboard's search for `text` as a command (a page of 50, as it asks).
fn search_args(text: &str) -> [&str; 8] {
    [
        "thread", "list", "--all", "--json", "--limit", "50", "--search", text,
    ]
}

/// Times every command over the stores of every size, interleaved: each run of a command
/// visits the sizes in turn, so a machine that gets busier or quieter during the bench moves
/// every size alike and the ratios between sizes compare like with like. `mounts` has an entry
/// per store (where to mount it, when mounting is possible).
fn measure(stores: &[Backend], mounts: &[Option<PathBuf>]) -> Vec<Costs> {
    let n = stores.len();
    // `runs` rounds of `f(round, store)`, the stores in turn within a round; the medians.
    let rounds = |runs: usize, f: &mut dyn FnMut(usize, usize) -> f64| -> Vec<f64> {
        let mut times = vec![Vec::with_capacity(runs); n];
        for round in 0..runs {
            for (k, t) in times.iter_mut().enumerate() {
                t.push(f(round, k));
            }
        }
        times.into_iter().map(median).collect()
    };
    let mut fresh: Vec<Vec<String>> = vec![Vec::new(); n];
    let starts = rounds(RUNS, &mut |i, k| {
        let b = &stores[k];
        let prompt = format!("bench {} {k} {i}", b.name);
        let started = Instant::now();
        fresh[k].push(b.start(&prompt));
        started.elapsed().as_secs_f64() * 1000.0
    });
    let steps = rounds(RUNS, &mut |i, k| {
        let b = &stores[k];
        b.time(&["thread", "step", &fresh[k][i], "--agent", &b.agent])
    });
    let shows = rounds(RUNS, &mut |i, k| {
        stores[k].time(&["thread", "show", &fresh[k][i]])
    });
    let versions = rounds(RUNS, &mut |_, k| stores[k].time(&["--version"]));
    // Threads waiting on a person, answered one process each.
    let asking: Vec<Vec<String>> = stores
        .iter()
        .map(|b| {
            (0..RUNS)
                .map(|i| {
                    let out = b.ok(&["thread", "start", "ask", "-p", &format!("ask {i}"), "-q"]);
                    let id = out.trim().to_owned();
                    b.ok(&["thread", "step", &id, "--agent", "human"]);
                    id
                })
                .collect()
        })
        .collect();
    let answer = stores[0].root.with_extension("answer.md");
    std::fs::write(&answer, "---\napproved: true\n---\n").expect("answer file");
    let answer = answer.to_string_lossy().into_owned();
    let answers = rounds(RUNS, &mut |i, k| {
        stores[k].time(&["thread", "answer", &asking[k][i], "-f", &answer])
    });
    let lists = rounds(LIST_RUNS, &mut |_, k| {
        stores[k].time(&["thread", "list", "--json"])
    });
    let lists_all = rounds(LIST_RUNS, &mut |_, k| {
        stores[k].time(&["thread", "list", "--all", "--json"])
    });
    for b in stores {
        let found = b.ok(&search_args(NEEDLE)).lines().count();
        assert!(found >= 1, "the search found no thread saying `{NEEDLE}`");
        let found = b.ok(&search_args(MISSING)).lines().count();
        assert_eq!(found, 0, "a search for what no thread says found some");
    }
    let hits = rounds(LIST_RUNS, &mut |_, k| stores[k].time(&search_args(NEEDLE)));
    let misses = rounds(LIST_RUNS, &mut |_, k| stores[k].time(&search_args(MISSING)));
    // Archive the fresh threads again so every size has the same active share (timed: `kill`).
    let kills = rounds(RUNS, &mut |i, k| {
        stores[k].time(&["thread", "kill", &fresh[k][i]])
    });
    (0..n)
        .map(|k| Costs {
            start: starts[k],
            step: steps[k],
            show: shows[k],
            version: versions[k],
            answer: answers[k],
            list: lists[k],
            list_all: lists_all[k],
            search_hit: hits[k],
            search_miss: misses[k],
            kill: kills[k],
            log_mb: log_mb(&stores[k]),
            ls: mounts[k]
                .as_deref()
                .and_then(|mnt| ls_threads(&stores[k], mnt)),
        })
        .collect()
}

/// The size whose directory store is copied to PostgreSQL and listed there.
const COPIED_SIZE: usize = 10_000;

/// Copies the directory store into a fresh database with `uwf store copy` and times
/// `thread list --all --json` over it: the first listing, then the median of the next ones.
fn list_after_copy(b: &Backend, server: &pg_server::PgServer) -> (f64, f64, f64) {
    let url = server.fresh_db("index_bench_copy");
    let started = Instant::now();
    b.ok(&["store", "copy", &b.root.to_string_lossy(), &url]);
    let copy_ms = started.elapsed().as_secs_f64() * 1000.0;
    let copy = Backend {
        name: "copied",
        root: b.root.with_extension("copy-cache"),
        url: Some(url),
        agent: b.agent.clone(),
    };
    std::fs::create_dir_all(&copy.root).expect("cache root");
    let first = copy.time(&["thread", "list", "--all", "--json"]);
    let warm = median(
        (0..LIST_RUNS)
            .map(|_| copy.time(&["thread", "list", "--all", "--json"]))
            .collect(),
    );
    (copy_ms, first, warm)
}

/// `ls` of the mount's `threads/`, warm (after one cold listing): the median, in ms.
fn ls_threads(b: &Backend, mnt: &Path) -> Option<f64> {
    std::fs::create_dir_all(mnt).ok()?;
    let mounted = b
        .uwf()
        .args(["mount", "--background"])
        .arg(mnt)
        .stdout(Stdio::null())
        .status()
        .ok()?
        .success();
    if !mounted {
        return None;
    }
    let ls = || {
        let started = Instant::now();
        let out = Command::new("ls")
            .arg(mnt.join("threads"))
            .stdout(Stdio::piped())
            .output()
            .expect("ls");
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        (ms, out.stdout.iter().filter(|&&c| c == b'\n').count())
    };
    let (_, entries) = ls();
    let warm = median((0..LIST_RUNS).map(|_| ls().0).collect());
    let _ = b
        .uwf()
        .arg("umount")
        .arg(mnt)
        .stdout(Stdio::null())
        .status();
    if entries == 0 {
        return None;
    }
    Some(warm)
}

fn can_mount() -> Result<(), &'static str> {
    if !Path::new("/dev/fuse").exists() {
        return Err("no /dev/fuse");
    }
    if !nix::unistd::geteuid().is_root() {
        return Err("not root");
    }
    Ok(())
}

fn main() {
    let sizes: Vec<usize> = std::env::var("INDEX_BENCH_SIZES")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1_000, 10_000, 100_000]);
    let base = tempfile::tempdir().expect("temp dir");
    let script = base.path().join("solve.yaml");
    std::fs::write(&script, SCRIPT).expect("script");
    let agent = format!("uwf agent script --file {}", script.display());
    // `INDEX_BENCH_BACKENDS=directory` leaves PostgreSQL out.
    let server = match std::env::var("INDEX_BENCH_BACKENDS").as_deref() {
        Ok("directory") => None,
        _ => pg_server::PgServer::private_durable("index bench"),
    };
    let mount_ok = can_mount();
    // The kinds of store measured: the directory store, and PostgreSQL when there is one.
    let mut kinds = vec!["directory"];
    match &server {
        Some(_) => kinds.push("postgres"),
        None if std::env::var("INDEX_BENCH_BACKENDS").as_deref() == Ok("directory") => {
            println!("(PostgreSQL left out: INDEX_BENCH_BACKENDS=directory)")
        }
        None => println!("(no PostgreSQL: install Debian's postgresql for its rows)"),
    }
    if let Err(why) = mount_ok {
        println!("(ls threads skipped: {why})");
    }
    // A store of its own for every size, so that the sizes can be measured interleaved.
    let mut results: Vec<Vec<(usize, Costs)>> = Vec::new();
    let mut copied = None;
    for &kind in &kinds {
        let stores: Vec<Backend> = sizes
            .iter()
            .map(|size| Backend {
                name: kind,
                root: base.path().join(format!("{kind}-{size}")),
                url: server
                    .as_ref()
                    .filter(|_| kind == "postgres")
                    .map(|s| s.fresh_db(&format!("index_bench_{size}"))),
                agent: agent.clone(),
            })
            .collect();
        for (b, &size) in stores.iter().zip(&sizes) {
            std::fs::create_dir_all(&b.root).expect("root");
            let templates = templates(b);
            // Bulk rows up to 2,000 below the size, then real processes for the rest.
            let by_processes = BY_PROCESSES.min(size);
            grow(b, &templates, 0, size - by_processes);
            grow_by_processes(b, size - by_processes, by_processes);
            eprintln!("{kind} {size}: grown");
        }
        // Let the bulk rows reach the disk first: the timed commands fsync, and would
        // otherwise queue behind the write-back of tens of megabytes.
        let _ = Command::new("sync").status();
        std::thread::sleep(std::time::Duration::from_secs(2));
        let mounts: Vec<Option<PathBuf>> = sizes
            .iter()
            .map(|size| {
                mount_ok
                    .is_ok()
                    .then(|| base.path().join(format!("mnt-{kind}-{size}")))
            })
            .collect();
        let costs = measure(&stores, &mounts);
        eprintln!("{kind}: measured");
        // The documented way onto PostgreSQL: `store copy` of the directory store, then the
        // first listings of the copy (no row may need its thread's nodes).
        let copied_at = sizes.iter().position(|&s| s == COPIED_SIZE);
        if let (Some(server), Some(k), "directory") = (&server, copied_at, kind) {
            copied = Some(list_after_copy(&stores[k], server));
        }
        results.push(sizes.iter().copied().zip(costs).collect());
    }
    println!(
        "thread index at scale: median ms of {RUNS} runs (lists: {LIST_RUNS}); half of each store archived; \
         the last {BY_PROCESSES} threads of each size made by real processes"
    );
    for (kind, rows) in kinds.iter().zip(&results) {
        println!("\n{kind} (every size its own store, measured interleaved):");
        println!(
            "{:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>11} {:>11} {:>11} {:>10} {:>8}",
            "threads",
            "spawn",
            "start",
            "step",
            "show",
            "kill",
            "answer",
            "list",
            "list --all",
            "search hit",
            "search miss",
            "ls threads",
            "log MB"
        );
        let first = rows[0].1.clone();
        for (size, c) in rows {
            println!(
                "{:>8} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>9.1} {:>11.1} {:>11.1} {:>11.1} {:>10} {:>8}",
                size,
                c.version,
                c.start,
                c.step,
                c.show,
                c.kill,
                c.answer,
                c.list,
                c.list_all,
                c.search_hit,
                c.search_miss,
                c.ls.map_or("-".to_owned(), |v| format!("{v:.1}")),
                c.log_mb.map_or("-".to_owned(), |v| format!("{v:.2}"))
            );
        }
        for (size, c) in rows.iter().skip(1) {
            println!(
                "{:>8} {:>8} {:>7.2}× {:>7.2}× {:>7.2}× {:>7.2}× {:>7.2}×   (cost at {size} over cost at {})",
                "ratio",
                "",
                c.start / first.start,
                c.step / first.step,
                c.show / first.show,
                c.kill / first.kill,
                c.answer / first.answer,
                rows[0].0
            );
        }
        for (size, c) in rows {
            println!(
                "{:>8} one-shot start = {:.2}× a spawn (target ≤ 3×); search {:.1} / {:.1} ms \
                 (target ≤ 200 ms at 100,000)",
                size,
                c.start / c.version,
                c.search_hit,
                c.search_miss
            );
        }
    }
    if let Some((copy, first, warm)) = copied {
        println!(
            "\npostgres made by `store copy` of the directory store at {COPIED_SIZE} threads: \
             copy {copy:.0} ms; `thread list --all --json` first {first:.1} ms, then {warm:.1} ms \
             (target ≤ 500 ms)"
        );
    }
}
