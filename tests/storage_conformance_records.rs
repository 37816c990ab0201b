//! The storage seam's conformance suite for thread records, run logs and coordination
//! (issue #40): each invariant is written once, as a function over a [`Site`] (two machines'
//! roots over one store), and run against a directory store and a PostgreSQL one.
//!
//! A directory store is one machine: both of its roots are the same directory. A PostgreSQL
//! store is two local roots (as on two machines) whose `config.yaml` names one fresh database,
//! so what one writes must reach the other through the database, not through a local file.
//!
//! The lease invariants race and kill real processes: this test binary started again with
//! [`HOLDER_ENV`] set runs only [`lease_holder_child`], which takes a thread's step lock from
//! the root it is given and holds it until killed.

mod pg_server;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tempfile::TempDir;
use uwf::cas::Hash;
use uwf::engine::cycle::worker::WorkerStatus;
use uwf::engine::storage::seam::runs::RunPaths;
use uwf::engine::storage::{self, Storage};
use uwf::engine::thread::context::{self, Binding, ThreadContext};
use uwf::engine::thread::family::{self, ParentLink};
use uwf::engine::thread::forks;
use uwf::engine::thread::index::ThreadIndexError;
use uwf::engine::thread::run_files::RunFiles;
use uwf::pg::RunFileKind;

/// How long a PostgreSQL site's leases last without renewal.
const LEASE: Duration = Duration::from_secs(2);

/// Set in a child's environment: the root it takes the step lock from.
const HOLDER_ENV: &str = "UWF_CONFORMANCE_HOLDER_ROOT";

/// The thread the lease invariants race for.
const RACED: &str = "01RACEDTHREAD0000000000000";

/// Two machines' roots over one store.
struct Site {
    _dirs: Vec<TempDir>,
    roots: [PathBuf; 2],
}

impl Site {
    /// A directory store: one machine, its root twice.
    fn directory() -> Site {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().to_path_buf();
        storage::open_store(&root).expect("directory store opens");
        Site {
            _dirs: vec![dir],
            roots: [root.clone(), root],
        }
    }

    /// Two roots over a fresh database of the shared test server (`None`: skipped).
    fn postgres(name: &str) -> Option<Site> {
        let server = pg_server::shared(name)?;
        let url = server.fresh_db(name);
        let dirs: Vec<TempDir> = (0..2)
            .map(|_| tempfile::tempdir().expect("tempdir"))
            .collect();
        for dir in &dirs {
            std::fs::write(
                dir.path().join("config.yaml"),
                format!("storage: {url}\nleaseSeconds: {}\n", LEASE.as_secs()),
            )
            .expect("config");
            storage::open_store(dir.path()).expect("postgres store opens");
        }
        let roots = [dirs[0].path().to_path_buf(), dirs[1].path().to_path_buf()];
        Some(Site { _dirs: dirs, roots })
    }

    /// The handle of machine `n`'s root.
    fn storage(&self, n: usize) -> Arc<Storage> {
        storage::handle(&self.roots[n]).expect("storage handle")
    }
}

/// Runs an invariant on a directory store and on a PostgreSQL store, as two tests.
macro_rules! on_both_backends {
    ($($invariant:ident),* $(,)?) => {$(
        mod $invariant {
            #[test]
            fn directory() {
                super::$invariant(&super::Site::directory());
            }

            #[test]
            fn postgres() {
                if let Some(site) = super::Site::postgres(stringify!($invariant)) {
                    super::$invariant(&site);
                }
            }
        }
    )*};
}

on_both_backends!(
    context_round_trips_with_its_pause_flag,
    forks_are_read_back_with_their_origin,
    parent_links_give_parents_and_children,
    a_run_log_reads_back_in_order_and_resumes_at_an_offset,
    a_step_lease_has_one_holder_is_renewed_and_is_taken_over_after_expiry,
    the_worker_registry_lists_a_worker_until_it_leaves,
);

fn a_context() -> ThreadContext {
    ThreadContext {
        workdir: Some("/work/project".into()),
        bindings: BTreeMap::from([(
            "coder".to_owned(),
            Binding {
                name: "claude".into(),
                command: "claude-agent".into(),
                args: vec!["--fast".into()],
                timeout: 600,
                env: BTreeMap::from([("TOKEN".into(), "${CLAUDE_TOKEN}".into())]),
            },
        )]),
        paused: false,
        // A thread's own budget (`thread budget`) is kept with its context on both backends.
        budget: Some(uwf::engine::config::budget::Budget {
            max_tokens: Some(200_000),
            max_cost: Some(5.5),
        }),
    }
}

/// A context written on one machine is read back whole on the other; pausing changes only the
/// flag, and resuming gives the context back as written; a context written paused reads paused.
fn context_round_trips_with_its_pause_flag(site: &Site) {
    let (here, there) = (site.storage(0), site.storage(1));
    assert_eq!(
        there.records().context("T1").unwrap(),
        ThreadContext::default(),
        "a thread without a record has the default context"
    );
    let written = a_context();
    here.records().set_context("T1", &written).unwrap();
    assert_eq!(there.records().context("T1").unwrap(), written);

    here.records().set_paused("T1", true).unwrap();
    let paused = there.records().context("T1").unwrap();
    assert!(paused.paused, "paused on the other machine");
    assert!(context::is_paused(&site.roots[1], "T1").unwrap());
    assert_eq!(paused.for_fork(), written, "pausing kept the rest");

    // Writing the context again (a rebind) keeps a paused thread paused.
    here.records().set_context("T1", &paused).unwrap();
    assert!(there.records().context("T1").unwrap().paused);

    context::set_paused(&site.roots[0], "T1", false).unwrap();
    assert_eq!(there.records().context("T1").unwrap(), written);
    assert!(!context::is_paused(&site.roots[1], "T1").unwrap());

    let born_paused = ThreadContext {
        paused: true,
        ..a_context()
    };
    context::write(&site.roots[0], "T2", &born_paused).unwrap();
    assert_eq!(context::read(&site.roots[1], "T2").unwrap(), born_paused);
    assert_eq!(
        there.records().context("T1").unwrap(),
        written,
        "another thread's record is its own"
    );
}

/// Forks recorded on one machine are read back on the other, oldest first, each with the
/// thread it was taken from; a thread that is no fork has no origin.
fn forks_are_read_back_with_their_origin(site: &Site) {
    let step = Hash::parse("EYHPV6X8XHTCS").unwrap();
    assert!(forks::read(&site.roots[1]).unwrap().is_empty());
    forks::record(&site.roots[0], "B", Some("A"), step).unwrap();
    forks::record(&site.roots[0], "C", None, Hash::META).unwrap();

    let all = forks::read(&site.roots[1]).unwrap();
    let seen: Vec<_> = all
        .iter()
        .map(|f| (f.thread.as_str(), f.from.as_deref(), f.step))
        .collect();
    assert_eq!(
        seen,
        [("B", Some("A"), step), ("C", None, Hash::META)],
        "in the order recorded"
    );
    let records = site.storage(1);
    let b = records
        .records()
        .origin_of("B")
        .unwrap()
        .expect("B is a fork");
    assert_eq!((b.from.as_deref(), b.step), (Some("A"), step));
    assert_eq!(
        forks::origin_of(&site.roots[1], "C").unwrap().unwrap().from,
        None
    );
    assert_eq!(forks::origin_of(&site.roots[1], "A").unwrap(), None);
}

/// Children linked on one machine give their parent, and the parent its children in the order
/// they started, on the other.
fn parent_links_give_parents_and_children(site: &Site) {
    let link = ParentLink {
        thread: "P".into(),
        head: Hash::parse("EYHPV6X8XHTCS").unwrap(),
        role: "developer".into(),
    };
    assert_eq!(family::parent(&site.roots[1], "C1"), None);
    assert!(family::children(&site.roots[1], "P").is_empty());
    family::link(&site.roots[0], "C1", &link).unwrap();
    site.storage(0).records().link_parent("C2", &link).unwrap();

    assert_eq!(family::parent(&site.roots[1], "C1"), Some(link.clone()));
    assert_eq!(site.storage(1).records().parent("C2"), Some(link));
    assert_eq!(family::children(&site.roots[1], "P"), ["C1", "C2"]);
    assert_eq!(
        family::parent(&site.roots[1], "P"),
        None,
        "a top-level thread"
    );
    assert!(family::children(&site.roots[1], "C1").is_empty());
}

/// The lines of an event feed.
fn events(bytes: &[u8]) -> Vec<Value> {
    String::from_utf8(bytes.to_vec())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Events appended on one machine are read back on the other in the order appended, whole or
/// from an offset (a follower resuming where it stopped), and the feed's size counts them all.
fn a_run_log_reads_back_in_order_and_resumes_at_an_offset(site: &Site) {
    let id = "01RUNLOGTHREAD000000000000";
    let (writer, reader) = (
        RunFiles::new(&site.roots[0], id),
        RunFiles::new(&site.roots[1], id),
    );
    let flush = || {
        site.storage(0)
            .runs()
            .flush(&RunPaths::new(&site.roots[0], id), Duration::from_secs(5))
    };
    assert!(
        reader
            .read_text_all(RunFileKind::Events)
            .unwrap()
            .is_empty()
    );
    assert_eq!(reader.text_stat(RunFileKind::Events).0, 0);
    for n in 0..3 {
        uwf::engine::thread::events::append(&writer, id, "started", json!({ "n": n }));
    }
    flush();

    let all = reader.read_text_all(RunFileKind::Events).unwrap();
    let read: Vec<_> = events(&all).iter().map(|e| e["n"].clone()).collect();
    assert_eq!(read, [json!(0), json!(1), json!(2)], "in order");
    assert_eq!(reader.text_stat(RunFileKind::Events).0, all.len() as u64);

    let first = all.iter().position(|&b| b == b'\n').unwrap() as u64 + 1;
    let rest = reader
        .read_text(RunFileKind::Events, first, usize::MAX >> 1)
        .unwrap();
    assert_eq!(rest, all[first as usize..], "resumed after the first line");
    let capped = reader.read_text(RunFileKind::Events, first, 5).unwrap();
    assert_eq!(
        capped,
        all[first as usize..first as usize + 5],
        "at most max"
    );

    // A follower at the end sees only what came after.
    uwf::engine::thread::events::append(&writer, id, "finished", json!({ "n": 3 }));
    flush();
    let more = reader
        .read_text(RunFileKind::Events, all.len() as u64, usize::MAX >> 1)
        .unwrap();
    let more = events(&more);
    assert_eq!(more.len(), 1, "{more:?}");
    assert_eq!(
        (more[0]["event"].as_str(), more[0]["n"].as_u64()),
        (Some("finished"), Some(3))
    );
}

/// Run by the lease invariant in a process of its own (a test binary started again with
/// [`HOLDER_ENV`]): takes [`RACED`]'s step lock from the given root, says `won` or `busy` on
/// stdout, and holds a won lock until killed. Does nothing in an ordinary run.
#[test]
#[ignore = "a helper process of the lease invariant"]
fn lease_holder_child() {
    let Some(root) = std::env::var_os(HOLDER_ENV) else {
        return;
    };
    let files = RunFiles::new(Path::new(&root), RACED);
    match files.try_lock() {
        Ok(lock) => {
            println!("won");
            std::thread::sleep(Duration::from_secs(60));
            drop(lock);
        }
        Err(ThreadIndexError::Busy { .. }) => println!("busy"),
        Err(e) => println!("error {e}"),
    }
}

/// A child process taking the raced lock from `root`.
struct Racer {
    child: Child,
    machine: usize,
}

impl Racer {
    fn start(root: &Path, machine: usize) -> Racer {
        let child = Command::new(std::env::current_exe().expect("test binary"))
            .args(["--exact", "lease_holder_child", "--ignored", "--nocapture"])
            .args(["--test-threads", "1"])
            .env(HOLDER_ENV, root)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("racer starts");
        Racer { child, machine }
    }

    /// What it said: `won`, `busy` or `error …`.
    fn verdict(&mut self) -> String {
        let out = self.child.stdout.take().expect("stdout");
        BufReader::new(out)
            .lines()
            .map_while(Result::ok)
            // After libtest's `test lease_holder_child ... ` on the same line.
            .find_map(|l| {
                ["won", "busy"]
                    .into_iter()
                    .find(|v| l.ends_with(v))
                    .map(str::to_owned)
                    .or_else(|| l.contains("error ").then_some(l))
            })
            .unwrap_or_else(|| "no verdict".to_owned())
    }
}

impl Drop for Racer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Racing processes on both machines: exactly one takes the step lease. It stays held for
/// longer than a lease lasts (renewed by its holder), and when its holder dies another takes it
/// over once the lease expired.
fn a_step_lease_has_one_holder_is_renewed_and_is_taken_over_after_expiry(site: &Site) {
    let mut racers: Vec<Racer> = (0..6)
        .map(|n| Racer::start(&site.roots[n % 2], n % 2))
        .collect();
    let verdicts: Vec<String> = racers.iter_mut().map(Racer::verdict).collect();
    let winners: Vec<usize> = (0..racers.len())
        .filter(|&n| verdicts[n] == "won")
        .collect();
    assert_eq!(winners.len(), 1, "exactly one holder: {verdicts:?}");
    assert!(
        verdicts.iter().all(|v| v == "won" || v == "busy"),
        "{verdicts:?}"
    );
    let winner = racers.remove(winners[0]);
    drop(racers);
    let winner_machine = winner.machine;
    let other = RunFiles::new(&site.roots[1 - winner_machine], RACED);

    // Held well past a lease's time: its holder renews it.
    std::thread::sleep(LEASE * 5 / 2);
    assert!(
        matches!(other.check_idle(), Err(ThreadIndexError::Busy { .. })),
        "still held after {:?}",
        LEASE * 5 / 2
    );
    assert!(matches!(
        other.try_lock(),
        Err(ThreadIndexError::Busy { .. })
    ));

    // Its holder dies; the lease is taken over once it expired.
    drop(winner);
    let deadline = Instant::now() + LEASE + Duration::from_secs(5);
    let taken = loop {
        match other.try_lock() {
            Ok(lock) => break lock,
            Err(ThreadIndexError::Busy { .. }) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("not taken over after the holder died: {e}"),
        }
    };
    // And the new holder holds it against a newcomer on the dead holder's machine.
    let mut late = Racer::start(&site.roots[winner_machine], winner_machine);
    assert_eq!(late.verdict(), "busy");
    drop(taken);
}

/// A worker that reported is listed on every machine, with what it said, until it leaves.
fn the_worker_registry_lists_a_worker_until_it_leaves(site: &Site) {
    let status = WorkerStatus {
        holder: storage::holder().to_owned(),
        machine: storage::machine().to_owned(),
        pid: std::process::id(),
        workflow: None,
        threads: vec!["T1".into()],
        steps: 3,
        state: "running".into(),
        started_at: 1,
        seen_at: uwf::cas::store::now_ms(),
    };
    let mine = |list: Vec<WorkerStatus>| {
        list.into_iter()
            .filter(|w| w.holder == status.holder)
            .collect::<Vec<_>>()
    };
    assert!(mine(site.storage(1).coordination().workers().unwrap()).is_empty());
    site.storage(0).coordination().worker_beat(&status).unwrap();
    let listed = mine(site.storage(1).coordination().workers().unwrap());
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(
        (listed[0].steps, listed[0].threads.clone(), listed[0].pid),
        (3, vec!["T1".to_owned()], status.pid)
    );

    // A later report replaces the earlier one.
    let later = WorkerStatus {
        steps: 4,
        state: "idle".into(),
        threads: Vec::new(),
        ..status.clone()
    };
    site.storage(0).coordination().worker_beat(&later).unwrap();
    let listed = mine(site.storage(1).coordination().workers().unwrap());
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!((listed[0].steps, listed[0].state.as_str()), (4, "idle"));

    site.storage(0).coordination().worker_gone();
    assert!(
        mine(site.storage(1).coordination().workers().unwrap()).is_empty(),
        "gone once it left"
    );
}
