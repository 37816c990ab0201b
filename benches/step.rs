//! The cost of a step, measured side by side in one run against spawning `uwf --version` (the
//! floor of any process; LangGraph's warm per-step cost was about one such spawn here):
//!
//! - one-shot `uwf thread step` with a built-in agent (`script`, run inside the step process):
//!   target ≤ 2.5× one spawn (a step also keeps its thread's row in the index up to date);
//! - one-shot `uwf thread step` with an external agent program (the same `uwf agent script`,
//!   forced to spawn): target ≤ 2× two spawns (the step and the agent are two processes);
//! - per step inside one `uwf thread run` process with the built-in agent: target ≤ 0.4× one
//!   spawn; printed twice, as a 20-step run's time over 20 (its process start included) and as
//!   the cost of one more step (a 40-step run minus a 20-step run, over 20), which is what
//!   LangGraph's per-step figure measures;
//! - one-shot step at chain length ~300 vs ~20: target ≤ 1.1× (the context cache keeps a step's
//!   cost flat);
//! - one-shot step at chain length ~1000 vs ~20: no target (how the whole-thread JSONata context
//!   grows a step past what the issue asks);
//! - peak RSS of the step processes: target ≤ 30 MB at chain length 300.
//! - the floor of a one-shot step (no target): one spawn plus the two synced writes no durable
//!   step can skip (its node, then the head), timed in this process; what is left between the
//!   floor and the step row is all a step does beyond them.
//!
//! Run: `cargo bench --bench step`. Prints numbers, asserts nothing. To measure an earlier
//! build on the same machine: `UWF_BENCH_BIN=path/to/uwf STEP_BENCH_DIR=target/bench-step-old
//! cargo bench --bench step`. The LangGraph side of the
//! comparison is `scripts/langgraph/bench.sh`.
//!
//! Every row runs the same binary file, so the ratios compare like with like. To compare two
//! builds, copy both binaries at the same moment: on this machine kind the same binary ran a
//! step 0.7 ms slower (and `--version` 0.13 ms) from a copy made 40 minutes earlier than from a
//! fresh one, the page cache holding the older file differently.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const WORKFLOW: &str = r#"
name: counter
roles:
  tick:
    goal: Count.
    meta: { type: object, properties: { n: { type: integer }, note: { type: string } }, required: [n] }
conditions:
  more: { expression: "$count(steps) < 1000000" }
graph:
  $START: [ { role: tick, condition: null } ]
  tick: [ { role: tick, condition: more }, { role: $END, condition: null } ]
"#;

const SCRIPT: &str = "tick:\n  - { n: 1, note: \"a short note of realistic length for a step's structured output\" }\n";

fn uwf(root: &Path, args: &[&str]) -> String {
    uwf_env(root, args, &[])
}

fn uwf_env(root: &Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let out = Command::new(bin())
        .args(args)
        .env("UWF_STORAGE_ROOT", root)
        .envs(env.iter().copied())
        .stderr(Stdio::null())
        .output()
        .expect("run uwf");
    // `thread run --max-steps` ends with 3 when the thread is still active (docs/cli.md).
    let stopped = args.first() == Some(&"thread") && args.get(1) == Some(&"run");
    assert!(
        out.status.success() || (stopped && out.status.code() == Some(3)),
        "uwf {args:?} failed"
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The binary measured: this build's, or `UWF_BENCH_BIN` (an earlier build, for before/after
/// numbers from one machine and one run of this bench).
fn bin() -> std::path::PathBuf {
    std::env::var_os("UWF_BENCH_BIN")
        .map(Into::into)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_uwf").into())
}

/// The bytes of every file under `dir` (apparent sizes).
fn bytes_under(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => bytes_under(&e.path()),
            _ => e.metadata().map_or(0, |m| m.len()),
        })
        .sum()
}

/// What a step adds to a store, in bytes: a fresh store's growth over a 300-step
/// `thread run` (nodes, caches, run files and the index with its log), over 300.
fn bytes_per_step(dir: &Path, agent: &str) -> f64 {
    let root = dir.join("bytes-store");
    let _ = std::fs::remove_dir_all(&root);
    let wf = dir.join("counter.yaml");
    uwf(&root, &["workflow", "put", wf.to_str().expect("utf-8")]);
    let id = thread_id(&uwf(&root, &["thread", "start", "counter", "-p", "bytes"]));
    let before = bytes_under(&root);
    uwf(
        &root,
        &["thread", "run", &id, "--max-steps", "300", "--agent", agent],
    );
    let after = bytes_under(&root);
    let _ = std::fs::remove_dir_all(&root);
    (after - before) as f64 / 300.0
}

fn timed(root: &Path, args: &[&str]) -> Duration {
    let t = Instant::now();
    uwf(root, args);
    t.elapsed()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// What a step cannot do without, timed in this process: a node file written, synced and linked
/// into place, then the head file written, synced and renamed over the old one (two device flushes,
/// so that a `kill -9` never leaves a torn node or head). Added to a `--version` spawn, the floor
/// of a one-shot step that keeps them.
fn two_synced_writes(dir: &Path, i: usize) -> Duration {
    use std::io::Write;
    let floor = dir.join("floor");
    std::fs::create_dir_all(&floor).expect("floor dir");
    let node = floor.join(format!("node-{i}.json"));
    let _ = std::fs::remove_file(&node);
    let t = Instant::now();
    let temp = floor.join("node.tmp");
    let mut file = std::fs::File::create(&temp).expect("temp");
    file.write_all(
        format!(
            "{{\"payload\":{{\"n\":{i}}},\"pad\":\"{}\"}}",
            "x".repeat(160)
        )
        .as_bytes(),
    )
    .expect("write");
    file.sync_all().expect("fsync");
    std::fs::hard_link(&temp, &node).expect("link");
    std::fs::remove_file(&temp).expect("unlink");
    let spare = floor.join("head.spare");
    let mut file = std::fs::File::create(&spare).expect("spare");
    file.write_all(format!("thread: {i}\n").as_bytes())
        .expect("write");
    file.sync_all().expect("fsync");
    std::fs::rename(&spare, floor.join("head")).expect("rename");
    t.elapsed()
}

fn thread_id(json: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(json).expect("JSON");
    v["thread"].as_str().expect("thread").to_owned()
}

fn main() {
    // One store, kept from run to run (each run adds two threads; `rm -rf target/bench-step`
    // starts over). Deleting a store of thousands of files right before measuring would time
    // the filesystem instead: ext4 without a journal (this machine's) skips inodes freed in
    // the last minutes when it allocates new ones, so every file a step creates got slower
    // run after run (6.9 → 8.3 ms a step over five back-to-back runs).
    // `STEP_BENCH_DIR` keeps another binary's store apart (`UWF_BENCH_BIN`).
    let dir = std::env::var_os("STEP_BENCH_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-step"),
        Into::into,
    );
    let dir = dir.as_path();
    std::fs::create_dir_all(dir).expect("bench dir");
    let root = dir.join("store");
    let script = dir.join("script.yaml");
    std::fs::write(&script, SCRIPT).expect("script");
    let wf = dir.join("counter.yaml");
    std::fs::write(&wf, WORKFLOW).expect("workflow");
    uwf(&root, &["workflow", "put", wf.to_str().expect("utf-8")]);
    std::fs::write(root.join("config.yaml"), "defaultAgent: dry\n").expect("config");
    let agent = format!("uwf agent script --file {}", script.display());
    let step = |id: &str| timed(&root, &["thread", "step", id, "--agent", &agent]);
    const SAMPLES: usize = 41;

    // Every thread gets a prompt of its own. A start node names only the workflow and the
    // prompt, so threads started with the same prompt (in this run or an earlier one, the store
    // being kept) share their start and, the script's outputs being canned, every step node
    // after it: their steps would write no new node and sync none, which no real step does.
    let run_tag = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos();
    let threads = std::cell::Cell::new(0u32);
    let start_thread = |name: &str| {
        threads.set(threads.get() + 1);
        let prompt = format!("{name} (run {run_tag}, thread {})", threads.get());
        thread_id(&uwf(&root, &["thread", "start", "counter", "-p", &prompt]))
    };
    let short = start_thread("short");
    uwf(
        &root,
        &[
            "thread",
            "run",
            &short,
            "--max-steps",
            "20",
            "--agent",
            &agent,
        ],
    );
    let long = start_thread("long");
    uwf(
        &root,
        &[
            "thread",
            "run",
            &long,
            "--max-steps",
            "300",
            "--agent",
            &agent,
        ],
    );
    // Past what the issue asks: how a step's cost grows with a long thread (its JSONata context
    // is the whole thread, converted on the evaluation worker while the agent runs).
    let longer = start_thread("longer");
    uwf(
        &root,
        &[
            "thread",
            "run",
            &longer,
            "--max-steps",
            "1000",
            "--agent",
            &agent,
        ],
    );
    let ext = start_thread("external");
    let spawned = [("UWF_SPAWN_BUILTINS", "1")];
    let external = |id: &str| {
        let t = Instant::now();
        uwf_env(&root, &["thread", "step", id, "--agent", &agent], &spawned);
        t.elapsed()
    };
    const RUN: usize = 20;
    let run_steps = |id: &str, steps: usize| {
        let n = steps.to_string();
        let t = Instant::now();
        uwf(
            &root,
            &["thread", "run", id, "--max-steps", &n, "--agent", &agent],
        );
        t.elapsed()
    };
    let mut started = Vec::new();
    // Interleaved, so a burst of load on this shared machine lands on every series alike.
    let mut at_1000 = Vec::new();
    let (mut version, mut at_20, mut at_300, mut ext_steps, mut in_run, mut marginal) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    let mut synced_writes = Vec::new();
    for i in 0..SAMPLES {
        version.push(timed(&root, &["--version"]));
        synced_writes.push(two_synced_writes(dir, i));
        at_20.push(step(&short));
        at_300.push(step(&long));
        at_1000.push(step(&longer));
        ext_steps.push(external(&ext));
        // Fresh threads each time, so both runs step at the same chain lengths.
        let (first, second) = (start_thread("runs"), start_thread("runs"));
        let run = run_steps(&first, RUN);
        in_run.push(run / RUN as u32);
        // The cost of one more step once the process runs (what LangGraph's per-step figure
        // is: its process start and imports are not in it): 2N steps minus N steps, over N.
        let twice = run_steps(&second, 2 * RUN);
        started.extend([first, second]);
        marginal.push(twice.saturating_sub(run) / RUN as u32);
    }

    // Every thread this run started is archived, so the next run's steps find `threads.yaml`
    // as short as this one's did: a step reads and rewrites the whole file (all the active
    // threads), and 684 threads left active by earlier runs had made a step 2–3× slower.
    started.extend([short, long, longer, ext]);
    for id in &started {
        uwf(&root, &["thread", "kill", id]);
    }

    let rss_kib = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        .map(|u| u.max_rss())
        .unwrap_or(0);

    let (version, at_20, at_300) = (median(version), median(at_20), median(at_300));
    let floor = version + median(synced_writes);
    let at_1000 = median(at_1000);
    let (ext_step, in_run, marginal) = (median(ext_steps), median(in_run), median(marginal));
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    let bytes = bytes_per_step(dir, &agent);
    println!("binary: {}", bin().display());
    println!("steps (script agent), medians of {SAMPLES} interleaved samples:");
    println!("  1 x `uwf --version`                      {version:>10.2?}");
    println!(
        "  floor: a spawn + a step's two synced writes {floor:>7.2?}  = {:.2}x one spawn (no step can cost less)",
        ratio(floor, version)
    );
    println!(
        "  `thread step`, built-in in-process       {at_20:>10.2?}  = {:.2}x one spawn (target <= 2.5x)",
        ratio(at_20, version)
    );
    println!(
        "  `thread step`, agent spawned             {ext_step:>10.2?}  = {:.2}x two spawns (target <= 2x)",
        ratio(ext_step, version * 2)
    );
    println!(
        "  per step inside `thread run` ({RUN} steps) {in_run:>10.2?}  = {:.2}x one spawn (target <= 0.4x)",
        ratio(in_run, version)
    );
    println!(
        "  one more step inside `thread run`        {marginal:>10.2?}  = {:.2}x one spawn (target <= 0.4x)",
        ratio(marginal, version)
    );
    println!(
        "  `thread step` at chain ~300 vs ~20       {at_300:>10.2?}  = {:.2}x (target <= 1.1x)",
        ratio(at_300, at_20)
    );
    println!(
        "  `thread step` at chain ~1000 vs ~20      {at_1000:>10.2?}  = {:.2}x (no target)",
        ratio(at_1000, at_20)
    );
    println!("  bytes a step adds to the store (300-step run) {bytes:>7.0} B (target <= 1.5 KB)");
    println!(
        "  peak RSS of any uwf process              {:>7.1} MB (target <= 30 MB at chain 300; chains here reach ~1000)",
        rss_kib as f64 / 1024.0
    );
}
