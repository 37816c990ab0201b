//! Throughput of `uwf worker`: steps per second with 1, 2 and 4 worker processes
//! over PostgreSQL against the same over a directory store, side by side in one run.
//!
//! Each run queues the same threads of solve-issue (five steps each with the script agent, run
//! in the worker process) and times the workers from start until the queue is empty. Over
//! PostgreSQL each worker has its own storage root, as it would on its own machine; over the
//! directory store they share one root (file locks), as they would on one machine. The
//! PostgreSQL server is a private one started here (Debian's `postgresql`, as the tests do),
//! with `fsync` on: a commit is as durable as a directory store's step.
//!
//! A second table runs the agent as a program of its own, quiet and chatty (2,000
//! lines, ~110 KB, on stderr every step, all of which reach the thread log and, over
//! PostgreSQL, the database): the chatty column should stay within noise of the quiet one, and
//! the rows of `run_text` per step show how the lines were batched, and the server's CPU time per
//! chatty step (`db ms/step`, from `/proc`) what storing them costs the database.
//!
//! With `UWF_BENCH_BASELINE=/path/to/an/older/uwf`, the chatty agent over PostgreSQL also runs
//! with that binary's workers (e.g. one from before logs went to the database), side by side.
//!
//! Run: `cargo bench --bench workers` (env `WORKER_BENCH_THREADS`, default 200). Prints
//! numbers, asserts nothing. On a machine with fewer cores than workers the extra workers
//! mostly wait for a core: compare the columns, not the rows, across machines.

#[path = "../tests/pg_server/mod.rs"]
mod pg_server;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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

/// A command of binary `bin` (this build's, or for the baseline column another one).
fn uwf_of(bin: &str, root: &Path, url: Option<&str>) -> Command {
    let mut cmd = Command::new(bin);
    cmd.env("UWF_STORAGE_ROOT", root).stdin(Stdio::null());
    match url {
        Some(url) => cmd.env("UWF_STORAGE_URL", url),
        None => cmd.env_remove("UWF_STORAGE_URL"),
    };
    cmd
}

fn ok(bin: &str, root: &Path, url: Option<&str>, args: &[&str]) {
    let out = uwf_of(bin, root, url).args(args).output().expect("run uwf");
    assert!(
        out.status.success(),
        "uwf {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// CPU time the server has used so far, in ms: the postmaster, the backends it reaped and the
/// ones still running (from `/proc`).
fn server_cpu_ms(server: &pg_server::PgServer) -> f64 {
    let ticks = |pid: u32, children: bool| -> u64 {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return 0;
        };
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        // After the command: state is field 0, utime 11, stime 12, cutime 13, cstime 14.
        let take = if children { 11..15 } else { 11..13 };
        fields
            .get(take)
            .map(|f| f.iter().filter_map(|v| v.parse::<u64>().ok()).sum())
            .unwrap_or(0)
    };
    let total: u64 = server
        .pids()
        .iter()
        .enumerate()
        .map(|(i, &pid)| ticks(pid, i == 0))
        .sum();
    // Clock ticks are 1/100 s on Linux.
    total as f64 * 10.0
}

fn fresh_root(base: &Path, name: &str) -> PathBuf {
    let root = base.join(name);
    std::fs::create_dir_all(&root).expect("root");
    root
}

/// The script agent as `uwf agent script` in the worker's process.
const IN_PROCESS: &str = "in process";
/// The script agent as a program of its own.
const QUIET: &str = "quiet";
/// The script agent as a program of its own that first prints 2,000 lines to stderr.
const CHATTY: &str = "chatty";

/// This build's binary.
const THIS: &str = env!("CARGO_BIN_EXE_uwf");

/// Queues `threads` solve-issue threads, then runs `workers` workers with the script agent
/// (`IN_PROCESS`, `QUIET` or `CHATTY`) until the queue is empty; returns the steps per second.
/// Binary `bin` does all of it, the setup too (an older binary refuses a newer schema).
fn run(
    bin: &str,
    base: &Path,
    tag: &str,
    url: Option<&str>,
    (workers, threads): (usize, usize),
    kind: &str,
) -> f64 {
    let setup = fresh_root(base, &format!("{tag}-setup"));
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/solve-issue.yaml");
    ok(
        bin,
        &setup,
        url,
        &["workflow", "put", &example.to_string_lossy()],
    );
    for i in 0..threads {
        let prompt = format!("issue {i}");
        ok(
            bin,
            &setup,
            url,
            &["thread", "start", "solve-issue", "-p", &prompt, "--queue"],
        );
    }
    let script = base.join("solve.yaml");
    std::fs::write(&script, SCRIPT).expect("script");
    let agent = match kind {
        IN_PROCESS => format!("uwf agent script --file {}", script.display()),
        QUIET => format!(
            "sh -c 'exec {bin} agent script --file {} \"$@\"' agent",
            script.display()
        ),
        _ => format!(
            "sh -c 'i=0; while [ $i -lt 2000 ]; do echo \"line $i of a chatty agent, as fast as it \
             can print\"; i=$((i+1)); done >&2; exec {bin} agent script --file {} \"$@\"' agent",
            script.display()
        ),
    };
    let started = Instant::now();
    let children: Vec<Child> = (0..workers)
        .map(|w| {
            // Over PostgreSQL a root per worker ("machine"); over files the one root.
            let root = match url {
                Some(_) => fresh_root(base, &format!("{tag}-w{w}")),
                None => setup.clone(),
            };
            uwf_of(bin, &root, url)
                .args(["worker", "--until-idle", "--agent", &agent])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn worker")
        })
        .collect();
    for mut child in children {
        assert!(child.wait().expect("wait").success(), "a worker failed");
    }
    (threads * 5) as f64 / started.elapsed().as_secs_f64()
}

fn main() {
    let threads: usize = std::env::var("WORKER_BENCH_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    // A server that syncs its commits, as the directory store syncs each step.
    let Some(server) = pg_server::PgServer::private_durable("workers bench") else {
        eprintln!("no PostgreSQL: install Debian's postgresql to run this bench");
        return;
    };
    let base = tempfile::tempdir().expect("temp dir");
    println!(
        "uwf worker throughput: {threads} threads × 5 steps, script agent in process, {} cores",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!(
        "{:>8}  {:>16}  {:>16}  {:>8}",
        "workers", "directory st/s", "postgres st/s", "pg/dir"
    );
    for workers in [1, 2, 4] {
        let url = server.fresh_db(&format!("bench_{workers}"));
        // Interleaved: the directory store, then PostgreSQL, at each size.
        let size = (workers, threads);
        let dir = run(
            THIS,
            base.path(),
            &format!("dir{workers}"),
            None,
            size,
            IN_PROCESS,
        );
        let pg = run(
            THIS,
            base.path(),
            &format!("pg{workers}"),
            Some(&url),
            size,
            IN_PROCESS,
        );
        println!("{workers:>8}  {dir:>16.0}  {pg:>16.0}  {:>7.2}×", pg / dir);
        std::thread::sleep(Duration::from_millis(200));
    }

    // Spawned agents, quiet and chatty, side by side at each size.
    let threads = (threads / 2).max(1);
    println!();
    println!(
        "agent as its own program: {threads} threads × 5 steps; chatty prints 2,000 lines a step"
    );
    let baseline = std::env::var("UWF_BENCH_BASELINE")
        .ok()
        .filter(|b| !b.is_empty());
    if let Some(b) = &baseline {
        println!("chatty before: the same chatty runs with {b}");
    }
    println!(
        "{:>8}  {:>10}  {:>10}  {:>8}  {:>10}  {:>10}  {:>8}  {:>13}  {:>9}  {:>14}  {:>12}  {:>12}",
        "workers",
        "dir quiet",
        "dir chatty",
        "chatty/q",
        "pg quiet",
        "pg chatty",
        "chatty/q",
        "chatty before",
        "now/bef.",
        "log rows/step",
        "db ms/step",
        "db ms before"
    );
    for workers in [1, 2, 4] {
        let size = (workers, threads);
        let quiet_url = server.fresh_db(&format!("quiet_{workers}"));
        let chatty_url = server.fresh_db(&format!("chatty_{workers}"));
        let dir_q = run(
            THIS,
            base.path(),
            &format!("dq{workers}"),
            None,
            size,
            QUIET,
        );
        let pg_q = run(
            THIS,
            base.path(),
            &format!("pq{workers}"),
            Some(&quiet_url),
            size,
            QUIET,
        );
        let dir_c = run(
            THIS,
            base.path(),
            &format!("dc{workers}"),
            None,
            size,
            CHATTY,
        );
        let cpu = server_cpu_ms(&server);
        let pg_c = run(
            THIS,
            base.path(),
            &format!("pc{workers}"),
            Some(&chatty_url),
            size,
            CHATTY,
        );
        let steps = (threads * 5) as f64;
        let db_now = (server_cpu_ms(&server) - cpu) / steps;
        let before = baseline.as_deref().map(|bin| {
            let url = server.fresh_db(&format!("before_{workers}"));
            let cpu = server_cpu_ms(&server);
            let tag = format!("pb{workers}");
            let rate = run(bin, base.path(), &tag, Some(&url), size, CHATTY);
            (rate, (server_cpu_ms(&server) - cpu) / steps)
        });
        let rows: i64 = pg_server::PgServer::raw(&chatty_url)
            .query_one("select count(*) from run_text where file = 'log'", &[])
            .expect("count run text")
            .get(0);
        let (before_text, ratio, db_before) = match before {
            Some((b, cpu)) => (
                format!("{b:.0}"),
                format!("{:.2}×", pg_c / b),
                format!("{cpu:.2}"),
            ),
            None => ("-".to_owned(), "-".to_owned(), "-".to_owned()),
        };
        println!(
            "{workers:>8}  {dir_q:>10.0}  {dir_c:>10.0}  {:>7.2}×  {pg_q:>10.0}  {pg_c:>10.0}  {:>7.2}×  {before_text:>13}  {ratio:>9}  {:>14.2}  {db_now:>12.2}  {db_before:>12}",
            dir_c / dir_q,
            pg_c / pg_q,
            rows as f64 / steps
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
