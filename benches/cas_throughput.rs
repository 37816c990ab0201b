//! CAS throughput: put/get of many small nodes in-process, and the time of fsck and GC over them.
//!
//! Run: `cargo bench --bench cas_throughput` (set `UWF_BENCH_NODES` to change the count from
//! 100,000). Prints numbers, asserts nothing: machines are noisy, so compare ratios within a run.
//!
//! The store fsyncs every node file before publishing it, and one fsync costs milliseconds on a
//! virtual disk, so the durable run uses at most 10,000 nodes (`UWF_BENCH_DURABLE_NODES`) and is
//! reported per node; the full count runs with fsync off to show the store's own overhead.

use std::time::{Duration, Instant};

use serde_json::json;
use uwf::cas::gc::{GcOptions, gc};
use uwf::cas::{Hash, Store, fsck};

fn main() {
    let n: usize = std::env::var("UWF_BENCH_NODES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    // Under target/, on the same disk as the build, not a tmpfs.
    let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-cas");
    std::fs::create_dir_all(&base).expect("bench dir");
    let dir = tempfile::tempdir_in(&base).expect("temp dir");

    println!(
        "cas_throughput: {n} small nodes, storage under {}",
        base.display()
    );
    let n_durable: usize = std::env::var("UWF_BENCH_DURABLE_NODES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
        .min(n);
    let fast = run(&dir.path().join("no-fsync"), n, false);
    let durable = run(&dir.path().join("durable"), n_durable, true);
    println!();
    println!(
        "fsync cost: a put with fsync takes {:.1}x the time of one without",
        (durable.as_secs_f64() / n_durable as f64) / (fast.as_secs_f64() / n as f64)
    );
}

/// Returns the put time.
fn run(root: &std::path::Path, n: usize, durable: bool) -> Duration {
    let mut store = Store::open(root).expect("open store");
    store.set_durable(durable);
    let schema = store
        .put(
            Hash::META,
            &json!({
                "type": "object",
                "required": ["i", "name"],
                "properties": {
                    "i": {"type": "integer"},
                    "name": {"type": "string"},
                    "prev": {"type": "string", "format": "cas_ref"}
                }
            }),
        )
        .expect("schema");

    // Even nodes form a chain (reachable from a root); odd nodes are garbage.
    let started = Instant::now();
    let mut hashes = Vec::with_capacity(n);
    let mut head: Option<Hash> = None;
    for i in 0..n {
        let payload = match (i % 2, head) {
            (0, Some(prev)) => {
                json!({"i": i, "name": format!("node-{i}"), "prev": prev.to_string()})
            }
            _ => json!({"i": i, "name": format!("node-{i}")}),
        };
        let h = store.put(schema, &payload).expect("put");
        if i % 2 == 0 {
            head = Some(h);
        }
        hashes.push(h);
    }
    let put = started.elapsed();

    let started = Instant::now();
    for h in &hashes {
        store.get(*h).expect("get");
    }
    let get = started.elapsed();

    let started = Instant::now();
    let listed = store.list_type(schema).expect("list");
    let list = started.elapsed();
    assert_eq!(listed.len(), n);

    let started = Instant::now();
    let report = fsck::fsck(&store).expect("fsck");
    let fsck_time = started.elapsed();
    assert!(report.problems.is_empty());

    let head = head.expect("n > 0");
    std::fs::write(root.join("threads.yaml"), format!("bench: {head}\n")).expect("threads.yaml");
    let roots = uwf::engine::storage::threads::gc_roots(root).expect("roots");
    let options = GcOptions {
        grace: Duration::ZERO,
        dry_run: false,
    };
    let started = Instant::now();
    let gc_report = gc(&store, || Ok::<_, uwf::cas::StoreError>(roots), &options).expect("gc");
    let gc_time = started.elapsed();

    let rate = |d: Duration| n as f64 / d.as_secs_f64();
    println!();
    println!(
        "[{}]",
        if durable {
            "fsync on (default)"
        } else {
            "fsync off"
        }
    );
    println!(
        "  put   {n} nodes: {:>8.2} s  {:>9.0} nodes/s",
        put.as_secs_f64(),
        rate(put)
    );
    println!(
        "  get   {n} nodes: {:>8.2} s  {:>9.0} nodes/s (hash verified)",
        get.as_secs_f64(),
        rate(get)
    );
    println!("  list --type   : {:>8.3} s", list.as_secs_f64());
    println!(
        "  fsck          : {:>8.2} s  ({} nodes checked)",
        fsck_time.as_secs_f64(),
        report.checked
    );
    println!(
        "  gc --grace 0s : {:>8.2} s  ({} reachable, {} removed)",
        gc_time.as_secs_f64(),
        gc_report.reachable,
        gc_report.removed.len()
    );
    put
}
