//! The thread index's conformance suite (issue #40): every invariant of
//! [`uwf::engine::storage::seam::ThreadIndex`] is written once, as a function over a root and
//! its storage handle, and run against a directory store (a temp dir) and a PostgreSQL store (a
//! fresh database in the private server of `tests/pg_server`, named by `storage:` in the root's
//! `config.yaml`). A backend that behaved otherwise fails here.
//!
//! Without PostgreSQL binaries the PostgreSQL half prints `SKIP …` and passes, unless
//! `UWF_REQUIRE_POSTGRES=1`.

mod pg_server;

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use serde_json::json;
use uwf::cas::canonical::node_bytes;
use uwf::cas::gc::GcOptions;
use uwf::cas::{Hash, Store, builtin};
use uwf::engine::storage::index_db::{Scan, TextFilter};
use uwf::engine::storage::{self, Storage};
use uwf::engine::thread::index::{self, State, Successor, ThreadIndexError};
use uwf::engine::upkeep::fsck;
use uwf::pg::{Learned, NewThread, RowFacts, SPENT_LINES_LIMIT, SpentChange};

/// Runs `check` over a directory root, then over a PostgreSQL root.
fn on_both(name: &str, check: impl Fn(&Path, &Arc<Storage>, &Store)) {
    let dir = tempfile::tempdir().expect("temp dir");
    run(dir.path(), &check);
    let Some(server) = pg_server::shared(name) else {
        return;
    };
    let url = server.fresh_db(name);
    let pg = tempfile::tempdir().expect("temp dir");
    std::fs::write(pg.path().join("config.yaml"), format!("storage: '{url}'\n"))
        .expect("config written");
    run(pg.path(), &check);
}

fn run(root: &Path, check: &impl Fn(&Path, &Arc<Storage>, &Store)) {
    let store = storage::open_store(root).expect("store opens");
    let handle = storage::handle(root).expect("handle opens");
    check(root, &handle, &store);
}

/// A stored text node (a head the index may point at).
fn node(store: &Store, text: &str) -> Hash {
    store
        .put(builtin::hash_of("text"), &json!(text))
        .expect("node stored")
}

/// Registers active thread `id` at `head`.
fn add(s: &Storage, id: &str, head: Hash, parent: Option<&str>) {
    s.index()
        .add(&NewThread {
            id,
            workflow: Hash::from_u64(1),
            head,
            parent,
            queued: false,
            steps: Some(0),
            prompt: Some(id),
            spent: None,
        })
        .expect("thread added");
}

fn head_of(s: &Storage, id: &str) -> Hash {
    match s.index().state(id).expect("thread known") {
        State::Active { head } => head,
        State::Archived(a) => panic!("{id} is archived: {a:?}"),
    }
}

fn cas_race(_root: &Path, s: &Arc<Storage>, store: &Store) {
    const RACERS: usize = 8;
    let start = node(store, "start");
    add(s, "RACE", start, None);
    let heads: Vec<Hash> = (0..RACERS)
        .map(|i| node(store, &format!("step {i}")))
        .collect();
    let barrier = Arc::new(Barrier::new(RACERS));
    let outcomes: Vec<(Hash, Result<(), ThreadIndexError>)> = heads
        .iter()
        .map(|&new| {
            let (s, barrier) = (s.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                (
                    new,
                    s.index()
                        .compare_and_set("RACE", start, new, (None, SpentChange::Keep)),
                )
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().expect("racer ran"))
        .collect();
    let winners: Vec<Hash> = outcomes
        .iter()
        .filter(|(_, r)| r.is_ok())
        .map(|(h, _)| *h)
        .collect();
    assert_eq!(winners.len(), 1, "exactly one racer wins: {outcomes:?}");
    let winner = winners[0];
    assert_eq!(head_of(s, "RACE"), winner, "the head is the winner's");
    for (_, outcome) in outcomes.iter().filter(|(h, _)| *h != winner) {
        match outcome {
            Err(ThreadIndexError::HeadMoved {
                expected, actual, ..
            }) => {
                assert_eq!(*expected, start);
                assert_eq!(*actual, winner, "a loser is told where the head went");
            }
            other => panic!("a loser must be told the head moved: {other:?}"),
        }
    }
    // From the winner's head the next step goes through.
    let next = node(store, "next");
    s.index()
        .compare_and_set("RACE", winner, next, (Some("writer"), SpentChange::Keep))
        .expect("from the current head");
    assert_eq!(head_of(s, "RACE"), next);
}

#[test]
fn of_racing_compare_and_sets_exactly_one_wins() {
    on_both("of_racing_compare_and_sets_exactly_one_wins", cas_race);
}

fn archive(_root: &Path, s: &Arc<Storage>, store: &Store) {
    let (a, b, c) = (node(store, "a"), node(store, "b"), node(store, "c"));
    add(s, "DONE1", a, None);
    add(s, "KILLED1", b, None);
    add(s, "LIVE1", c, None);
    let done = s.index().archive("DONE1", "done").expect("archived");
    assert_eq!((done.thread.as_str(), done.head), ("DONE1", a));
    assert_eq!(done.status, "done");
    s.index().archive("KILLED1", "killed").expect("archived");
    let active = s.index().active().expect("active read");
    assert_eq!(
        active.keys().cloned().collect::<Vec<_>>(),
        ["LIVE1"],
        "archived threads leave the active set"
    );
    let archived: Vec<(String, String)> = s
        .index()
        .archived()
        .expect("history read")
        .into_iter()
        .map(|a| (a.thread, a.status))
        .collect();
    assert_eq!(
        archived,
        [
            ("DONE1".to_owned(), "done".to_owned()),
            ("KILLED1".to_owned(), "killed".to_owned())
        ]
    );
    match s.index().state("KILLED1").expect("known") {
        State::Archived(k) => assert_eq!((k.status.as_str(), k.head), ("killed", b)),
        other => panic!("killed thread is {other:?}"),
    }
    // A second archive finds nothing to archive, and says why.
    match s.index().archive("DONE1", "killed") {
        Err(ThreadIndexError::Archived { status, .. }) => assert_eq!(status, "done"),
        other => panic!("a second archive must fail as archived: {other:?}"),
    }
    assert!(matches!(
        s.index().archive("NOSUCH", "done"),
        Err(ThreadIndexError::Unknown(_))
    ));
    // An archived head no longer moves.
    assert!(matches!(
        s.index()
            .compare_and_set("DONE1", a, c, (None, SpentChange::Keep)),
        Err(ThreadIndexError::Archived { .. })
    ));
    let entries = s.index().entries().expect("entries");
    let mut seen: Vec<(String, Option<String>)> =
        entries.into_iter().map(|e| (e.id, e.archived)).collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("DONE1".to_owned(), Some("done".to_owned())),
            ("KILLED1".to_owned(), Some("killed".to_owned())),
            ("LIVE1".to_owned(), None)
        ]
    );
}

#[test]
fn archiving_takes_a_thread_out_of_the_active_set_once() {
    on_both(
        "archiving_takes_a_thread_out_of_the_active_set_once",
        archive,
    );
}

fn rebase(root: &Path, s: &Arc<Storage>, store: &Store) {
    let (old, new, other) = (node(store, "old"), node(store, "new"), node(store, "x"));
    add(s, "OLD1", old, None);
    let successor = Successor {
        id: "NEW1",
        workflow: Hash::from_u64(2),
        head: new,
        steps: 3,
        prompt: "rebased",
    };
    // Not at the head it was read at: nothing happens.
    let moved = Successor {
        id: "NEVER",
        ..successor
    };
    match index::rebase(root, "OLD1", other, &moved) {
        Err(ThreadIndexError::HeadMoved { actual, .. }) => assert_eq!(actual, old),
        other => panic!("a rebase from a stale head must fail: {other:?}"),
    }
    assert!(matches!(
        s.index().state("NEVER"),
        Err(ThreadIndexError::Unknown(_))
    ));
    assert_eq!(head_of(s, "OLD1"), old, "the old thread is untouched");
    let archived = index::rebase(root, "OLD1", old, &successor).expect("rebased");
    assert_eq!(archived.status, index::REBASED);
    assert_eq!(archived.head, old);
    match s.index().state("OLD1").expect("known") {
        State::Archived(a) => assert_eq!(a.status, index::REBASED),
        other => panic!("the rebased thread is {other:?}"),
    }
    assert_eq!(head_of(s, "NEW1"), new);
    assert_eq!(
        s.index()
            .active()
            .expect("active")
            .keys()
            .collect::<Vec<_>>(),
        ["NEW1"]
    );
    // Once is all.
    let again = Successor {
        id: "NEW2",
        ..successor
    };
    assert!(matches!(
        index::rebase(root, "OLD1", old, &again),
        Err(ThreadIndexError::Archived { .. })
    ));
    assert!(!index::exists(root, "NEW2").expect("lookup"));
}

#[test]
fn a_rebase_archives_the_old_thread_and_adds_the_new_one_together() {
    on_both(
        "a_rebase_archives_the_old_thread_and_adds_the_new_one_together",
        rebase,
    );
}

fn successor(root: &Path, s: &Arc<Storage>, store: &Store) {
    let (h1, h2, h3) = (node(store, "1"), node(store, "2"), node(store, "3"));
    add(s, "FROM1", h1, None);
    add(s, "FORK1", h3, Some("FROM1"));
    let onto = Successor {
        id: "ONTO1",
        workflow: Hash::from_u64(2),
        head: h2,
        steps: 1,
        prompt: "onto",
    };
    assert_eq!(s.index().successor("FROM1").expect("read"), None);
    assert_eq!(index::rebased_from(root, "FORK1"), None);
    index::rebase(root, "FROM1", h1, &onto).expect("rebased");
    assert_eq!(
        s.index().successor("FROM1").expect("read").as_deref(),
        Some("ONTO1")
    );
    assert_eq!(s.index().successor("ONTO1").expect("read"), None);
    assert_eq!(s.index().parent("ONTO1").as_deref(), Some("FROM1"));
    assert_eq!(index::rebased_from(root, "ONTO1").as_deref(), Some("FROM1"));
    assert_eq!(index::rebased_from(root, "FROM1"), None);
    // A fork of the rebased thread has it as parent, but did not take its place.
    assert_eq!(s.index().parent("FORK1").as_deref(), Some("FROM1"));
    assert_eq!(index::rebased_from(root, "FORK1"), None);
    match index::active_head(root, "FROM1") {
        Err(ThreadIndexError::Archived { onto, status, .. }) => {
            assert_eq!(status, index::REBASED);
            assert_eq!(
                onto.as_deref(),
                Some("ONTO1"),
                "the error names the successor"
            );
        }
        other => panic!("a rebased thread has no active head: {other:?}"),
    }
}

#[test]
fn a_rebased_thread_names_its_successor_and_the_successor_its_origin() {
    on_both(
        "a_rebased_thread_names_its_successor_and_the_successor_its_origin",
        successor,
    );
}

fn prefix(_root: &Path, s: &Arc<Storage>, store: &Store) {
    let h = node(store, "p");
    for id in ["PFXB2", "PFXA1", "PFXA3", "PFXA2", "OTHER", "PFY"] {
        add(s, id, h, None);
    }
    s.index().archive("PFXA2", "done").expect("archived");
    assert_eq!(
        s.index().with_prefix("PFXA", 10).expect("lookup"),
        ["PFXA1", "PFXA2", "PFXA3"],
        "sorted, archived ones too"
    );
    assert_eq!(
        s.index().with_prefix("PFX", 2).expect("lookup"),
        ["PFXA1", "PFXA2"],
        "at most the limit"
    );
    assert_eq!(
        s.index().with_prefix("PFXB2", 10).expect("lookup"),
        ["PFXB2"]
    );
    assert!(
        s.index()
            .with_prefix("NONE", 10)
            .expect("lookup")
            .is_empty()
    );
    let mut at = s.index().active_at(h).expect("lookup");
    at.sort();
    assert_eq!(at, ["OTHER", "PFXA1", "PFXA3", "PFXB2", "PFY"]);
}

#[test]
fn ids_are_found_by_prefix_sorted_and_limited() {
    on_both("ids_are_found_by_prefix_sorted_and_limited", prefix);
}

fn queue(_root: &Path, s: &Arc<Storage>, store: &Store) {
    let h = node(store, "q");
    for id in ["Q1", "Q2", "Q3"] {
        add(s, id, h, None);
    }
    assert!(s.index().queued().expect("read").is_empty());
    s.index().queue("Q1").expect("queued");
    s.index().queue("Q1").expect("queued again");
    std::thread::sleep(Duration::from_millis(20));
    s.index().queue("Q2").expect("queued");
    assert_eq!(
        s.index().queued().expect("read"),
        ["Q1", "Q2"],
        "each queued thread once, not the unqueued one"
    );
    s.index().dequeue("Q1").expect("dequeued");
    s.index().dequeue("Q1").expect("not queued is no error");
    s.index().dequeue("Q3").expect("never queued is no error");
    assert_eq!(s.index().queued().expect("read"), ["Q2"]);
    // Archiving takes a thread off the queue.
    s.index().archive("Q2", "done").expect("archived");
    assert!(s.index().queued().expect("read").is_empty());
    assert!(matches!(
        s.index().queue("Q2"),
        Err(ThreadIndexError::Archived { .. })
    ));
    assert!(matches!(
        s.index().queue("NOSUCH"),
        Err(ThreadIndexError::Unknown(_))
    ));
    s.index()
        .dequeue("Q2")
        .expect("dequeuing an archived thread is no error");
}

#[test]
fn a_thread_queued_once_is_listed_once_until_dequeued() {
    on_both("a_thread_queued_once_is_listed_once_until_dequeued", queue);
}

fn gc_live(root: &Path, s: &Arc<Storage>, store: &Store) {
    let (live, done, killed, orphan) = (
        node(store, "live"),
        node(store, "done"),
        node(store, "killed"),
        node(store, "orphan"),
    );
    add(s, "GLIVE", live, None);
    add(s, "GDONE", done, None);
    add(s, "GKILL", killed, None);
    s.index().archive("GDONE", "done").expect("archived");
    s.index().archive("GKILL", "killed").expect("archived");
    let roots: HashSet<Hash> = storage::threads::gc_roots(root)
        .expect("roots")
        .into_iter()
        .collect();
    for head in [live, done, killed] {
        assert!(roots.contains(&head), "{head} is a GC root: {roots:?}");
    }
    assert!(!roots.contains(&orphan));
    // Nodes written just now are young; past the grace period the orphan alone goes.
    std::thread::sleep(Duration::from_millis(50));
    let options = GcOptions {
        grace: Duration::ZERO,
        dry_run: false,
    };
    let report = s
        .index()
        .collect_garbage(store, &options)
        .expect("collected");
    assert!(report.removed.contains(&orphan), "{report:?}");
    for head in [live, done, killed] {
        assert!(
            !report.removed.contains(&head),
            "{head} removed: {report:?}"
        );
        store.get(head).expect("a live head is still readable");
    }
    assert!(store.get(orphan).is_err(), "the orphan is gone");
}

#[test]
fn gc_keeps_the_heads_of_active_and_archived_threads() {
    on_both("gc_keeps_the_heads_of_active_and_archived_threads", gc_live);
}

/// Makes node `hash` hold other content than its hash names: its file in a directory store,
/// its row in a database (whose cached file still holds the good copy).
fn corrupt(root: &Path, store: &Store, hash: Hash) {
    let bad = node_bytes(builtin::hash_of("text"), &json!("tampered by hand"));
    match std::fs::read_to_string(root.join("config.yaml")) {
        Ok(config) => {
            let url = config
                .trim()
                .trim_start_matches("storage: '")
                .trim_end_matches('\'');
            let changed = pg_server::PgServer::raw(url)
                .execute(
                    "update nodes set bytes = $1 where hash = $2",
                    &[&bad, &hash.to_string()],
                )
                .expect("row tampered");
            assert_eq!(changed, 1);
        }
        Err(_) => {
            let path = store.object_path(hash);
            std::fs::remove_file(&path).expect("node file removed");
            std::fs::write(&path, &bad).expect("node file tampered");
        }
    }
}

fn gc_reach_and_fsck(root: &Path, s: &Arc<Storage>, store: &Store) {
    // A head that names a node below it, through a schema of its own.
    let schema = store
        .put(
            Hash::META,
            &json!({"type": "object", "properties": {"next": {"type": "string", "format": "cas_ref"}}, "required": ["next"]}),
        )
        .expect("schema stored");
    let below = node(store, "below the head");
    let head = store
        .put(schema, &json!({"next": below.to_string()}))
        .expect("head stored");
    let orphan = node(store, "reached by nothing");
    add(s, "GREACH", head, None);
    std::thread::sleep(Duration::from_millis(50));
    let options = GcOptions {
        grace: Duration::ZERO,
        dry_run: false,
    };
    let report = s
        .index()
        .collect_garbage(store, &options)
        .expect("collected");
    assert!(report.removed.contains(&orphan), "{report:?}");
    for kept in [head, below, schema] {
        assert!(
            !report.removed.contains(&kept),
            "{kept} removed: {report:?}"
        );
        store.get(kept).expect("a reachable node is still readable");
    }
    assert!(store.get(orphan).is_err(), "the unreachable node is gone");

    // fsck names the node whose content no longer matches its hash, and the thread it hurts.
    corrupt(root, store, below);
    let check = s.index().check_nodes(store).expect("checked");
    assert!(
        check.nodes.problems.iter().any(|p| p.hash == Some(below)),
        "{:?}",
        check.nodes.problems
    );
    let walked = fsck::check_with(store, check.table.as_deref()).expect("walked");
    let damaged = walked
        .damaged
        .iter()
        .find(|d| d.hash == below)
        .expect("the corrupted node is named");
    assert!(
        matches!(damaged.condition, fsck::Condition::Corrupt(_)),
        "{damaged:?}"
    );
    assert!(
        damaged.reached_from.contains("thread GREACH"),
        "{damaged:?}"
    );
}

#[test]
fn gc_keeps_what_a_root_reaches_and_fsck_names_a_corrupted_node() {
    on_both(
        "gc_keeps_what_a_root_reaches_and_fsck_names_a_corrupted_node",
        gc_reach_and_fsck,
    );
}

fn registry(_root: &Path, s: &Arc<Storage>, store: &Store) {
    let w = node(store, "workflow");
    assert!(s.index().registry().expect("read").is_empty());
    // A refused change writes nothing.
    s.index()
        .update_registry(&mut |r| {
            r.insert(
                "refused".to_owned(),
                uwf::engine::storage::index_files::RegistryEntry {
                    hash: w,
                    registered_at: 1,
                    source: None,
                    history: Vec::new(),
                },
            );
            false
        })
        .expect("no error");
    assert!(s.index().registry().expect("read").is_empty());
    s.index()
        .update_registry(&mut |r| {
            r.insert(
                "kept".to_owned(),
                uwf::engine::storage::index_files::RegistryEntry {
                    hash: w,
                    registered_at: 1,
                    source: None,
                    history: Vec::new(),
                },
            );
            true
        })
        .expect("written");
    let registry = s.index().registry().expect("read");
    assert_eq!(registry.keys().collect::<Vec<_>>(), ["kept"]);
    assert_eq!(registry["kept"].hash, w);
}

#[test]
fn the_registry_changes_only_when_the_change_is_kept() {
    on_both(
        "the_registry_changes_only_when_the_change_is_kept",
        registry,
    );
}

/// The ids `scan` selects with `text` (and the workflow versions whose name holds it), in
/// order.
fn found(s: &Storage, text: &str, workflows: Vec<Hash>, scan: Scan) -> Vec<String> {
    let scan = Scan {
        text: Some(TextFilter {
            text: text.to_owned(),
            workflows,
        }),
        ..scan
    };
    let mut ids = Vec::new();
    s.index()
        .scan(&scan, &mut |row| {
            ids.push(row.id);
            true
        })
        .expect("scan");
    ids
}

fn search(_root: &Path, s: &Arc<Storage>, store: &Store) {
    let head = node(store, "h");
    let add_with = |id: &str, prompt: Option<&str>, workflow: u64| {
        s.index()
            .add(&NewThread {
                id,
                workflow: Hash::from_u64(workflow),
                head,
                parent: None,
                queued: false,
                steps: Some(0),
                prompt,
                spent: None,
            })
            .expect("thread added");
    };
    // The oldest thread is the match: every other row is read before it, newest first.
    add_with(
        "S0000OLDEST",
        Some("Fix the FLAKY 100%_done test in Größe"),
        1,
    );
    add_with("S0001PERCENT", Some("100 x done, flaky too"), 1);
    add_with("S0002BARE", None, 1);
    add_with("S0003WORKFLOW", Some("nothing to see"), 3);
    for i in 0..2_100 {
        add_with(
            &format!("S1{i:05}"),
            Some(&format!("routine thread {i}")),
            1,
        );
    }
    let all = Scan {
        all: true,
        ..Scan::default()
    };
    assert_eq!(
        found(s, "the flaky", vec![], all.clone()),
        ["S0000OLDEST"],
        "a match past any page is found"
    );
    assert_eq!(
        found(s, "tHe FlAkY", vec![], all.clone()),
        ["S0000OLDEST"],
        "in any case"
    );
    assert_eq!(
        found(s, "GRÖSSE", vec![], all.clone()),
        Vec::<String>::new()
    );
    assert_eq!(found(s, "GRÖßE", vec![], all.clone()), ["S0000OLDEST"]);
    assert_eq!(
        found(s, "flaky", vec![], all.clone()),
        ["S0001PERCENT", "S0000OLDEST"],
        "newest first"
    );
    assert_eq!(
        found(
            s,
            "flaky",
            vec![],
            Scan {
                before_id: Some("S0001PERCENT".to_owned()),
                ..all.clone()
            }
        ),
        ["S0000OLDEST"],
        "paged by the same cursor"
    );
    // `%` and `_` are characters, not wildcards.
    assert_eq!(found(s, "100%_done", vec![], all.clone()), ["S0000OLDEST"]);
    assert_eq!(found(s, "%", vec![], all.clone()), ["S0000OLDEST"]);
    assert!(found(s, "0_0", vec![], all.clone()).is_empty());
    // An id, or a workflow whose name holds the text, matches too.
    assert_eq!(found(s, "s0001perc", vec![], all.clone()), ["S0001PERCENT"]);
    assert_eq!(
        found(s, "no such text", vec![Hash::from_u64(3)], all.clone()),
        ["S0003WORKFLOW"]
    );
    // With a status: archived threads only when asked for, and with the workflow filter.
    s.index().archive("S0000OLDEST", "done").expect("archived");
    assert_eq!(
        found(s, "flaky", vec![], Scan::default()),
        ["S0001PERCENT"],
        "active only"
    );
    assert_eq!(
        found(s, "flaky", vec![], all.clone()),
        ["S0001PERCENT", "S0000OLDEST"]
    );
    assert!(
        found(
            s,
            "flaky",
            vec![],
            Scan {
                workflows: Some(vec![Hash::from_u64(2)]),
                ..all.clone()
            }
        )
        .is_empty()
    );
    // A row that does not keep its prompt is named until one is noted, then found by it.
    assert!(found(s, "bare prompt", vec![], all.clone()).is_empty());
    let missing = s.index().unsearchable(100).expect("unsearchable");
    assert_eq!(missing, [("S0002BARE".to_owned(), head)]);
    s.index()
        .note_prompts(&[("S0002BARE".to_owned(), "A Bare Prompt".to_owned())])
        .expect("noted");
    assert!(
        s.index()
            .unsearchable(100)
            .expect("unsearchable")
            .is_empty()
    );
    s.index()
        .note_prompts(&[
            ("S0002BARE".to_owned(), "another".to_owned()),
            ("S0001PERCENT".to_owned(), "another".to_owned()),
        ])
        .expect("noted");
    assert_eq!(found(s, "bare prompt", vec![], all.clone()), ["S0002BARE"]);
    assert!(
        found(s, "another", vec![], all.clone()).is_empty(),
        "a kept prompt is never replaced"
    );
}

#[test]
fn search_finds_any_thread_in_any_case_with_filters_and_literal_wildcards() {
    on_both(
        "search_finds_any_thread_in_any_case_with_filters_and_literal_wildcards",
        search,
    );
}

/// What thread `id`'s row says it spent (`None`: not known).
fn spent_of(s: &Storage, id: &str) -> Option<String> {
    let mut spent = None;
    let all = Scan {
        all: true,
        ..Scan::default()
    };
    s.index()
        .scan(&all, &mut |row| {
            if row.id == id {
                spent = Some(row.spent);
            }
            true
        })
        .expect("scan");
    spent.expect("the thread is listed")
}

fn spending(_root: &Path, s: &Arc<Storage>, store: &Store) {
    let start = node(store, "start");
    s.index()
        .add(&NewThread {
            id: "SPENT",
            workflow: Hash::from_u64(1),
            head: start,
            parent: None,
            queued: false,
            steps: Some(0),
            prompt: None,
            spent: Some("{}"),
        })
        .expect("thread added");
    assert_eq!(
        spent_of(s, "SPENT").as_deref(),
        Some("{}"),
        "kept as started"
    );

    // Each step adds its own line as it moves the head; one that spent nothing keeps the row.
    let moves = |from: &str, to: &str, change: SpentChange<'_>| {
        let (from, to) = (node(store, from), node(store, to));
        s.index()
            .compare_and_set("SPENT", from, to, (Some("work"), change))
            .expect("moved");
        to
    };
    moves("start", "a", SpentChange::Add(r#"{"n":1}"#));
    assert_eq!(
        spent_of(s, "SPENT").as_deref(),
        Some("{}\n{\"n\":1}"),
        "a step's line added"
    );
    moves("a", "b", SpentChange::Keep);
    assert_eq!(
        spent_of(s, "SPENT").as_deref(),
        Some("{}\n{\"n\":1}"),
        "a step that spent nothing keeps what the row knew"
    );
    moves("b", "c", SpentChange::Forget);
    assert_eq!(spent_of(s, "SPENT"), None, "forgotten");
    moves("c", "d", SpentChange::Add(r#"{"n":1}"#));
    assert_eq!(
        spent_of(s, "SPENT"),
        None,
        "a row that did not know still does not"
    );
    // A budget check that worked it out writes it back: only at the head, only if unknown.
    s.index()
        .note_spent("SPENT", node(store, "c"), r#"{"n":3}"#);
    assert_eq!(spent_of(s, "SPENT"), None, "not at a head the thread left");
    s.index()
        .note_spent("SPENT", node(store, "d"), r#"{"n":4}"#);
    assert_eq!(spent_of(s, "SPENT").as_deref(), Some(r#"{"n":4}"#));
    s.index()
        .note_spent("SPENT", node(store, "d"), r#"{"n":5}"#);
    assert_eq!(
        spent_of(s, "SPENT").as_deref(),
        Some(r#"{"n":4}"#),
        "what the row knows is kept"
    );

    let long = format!("{{\"n\":\"{}\"}}", "x".repeat(SPENT_LINES_LIMIT));
    s.index().note_derived(&[Learned {
        id: "SPENT".to_owned(),
        head: node(store, "d"),
        facts: RowFacts {
            steps: 4,
            next: Some("work".to_owned()),
            spent: Some(long.clone()),
        },
    }]);
    assert_eq!(spent_of(s, "SPENT"), Some(long));
    let one = moves("d", "one", SpentChange::Add(r#"{"n":1}"#));
    assert_eq!(
        spent_of(s, "SPENT"),
        None,
        "past the limit, the row forgets (the next reader writes one line)"
    );

    let learned = |head: Hash, spent: Option<&str>| Learned {
        id: "SPENT".to_owned(),
        head,
        facts: RowFacts {
            steps: 1,
            next: Some("work".to_owned()),
            spent: spent.map(str::to_owned),
        },
    };
    // Worked out at a head the thread has left: not kept.
    s.index().note_derived(&[learned(start, Some("stale"))]);
    assert_eq!(spent_of(s, "SPENT"), None);
    s.index().note_derived(&[learned(one, Some(r#"{"n":1}"#))]);
    assert_eq!(spent_of(s, "SPENT").as_deref(), Some(r#"{"n":1}"#));
    // What a step's budget check reads: the row's, only at its head.
    assert_eq!(
        s.index().spent_at("SPENT", one).expect("read").as_deref(),
        Some(r#"{"n":1}"#)
    );
    assert_eq!(s.index().spent_at("SPENT", start).expect("read"), None);
    // Steps learned without the spending leave what the row knows.
    s.index().note_derived(&[learned(one, None)]);
    assert_eq!(spent_of(s, "SPENT").as_deref(), Some(r#"{"n":1}"#));

    // Archived at the same head, the row keeps it; learned again, it is replaced.
    s.index().archive("SPENT", "done").expect("archived");
    assert_eq!(spent_of(s, "SPENT").as_deref(), Some(r#"{"n":1}"#));
    s.index().note_derived(&[learned(one, Some(r#"{"n":2}"#))]);
    assert_eq!(spent_of(s, "SPENT").as_deref(), Some(r#"{"n":2}"#));
    s.index().note_derived(&[learned(start, Some("stale"))]);
    assert_eq!(spent_of(s, "SPENT").as_deref(), Some(r#"{"n":2}"#));
}

#[test]
fn what_a_thread_spent_is_kept_until_its_head_moves_and_learned_only_at_its_head() {
    on_both(
        "what_a_thread_spent_is_kept_until_its_head_moves_and_learned_only_at_its_head",
        spending,
    );
}

#[test]
fn only_a_shared_database_says_other_machines_move_heads() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = storage::open_store(dir.path()).expect("store");
    assert!(
        !storage::handle(dir.path())
            .expect("handle")
            .index()
            .shared()
    );
    assert!(!store.files_are_cache());
    let name = "only_a_shared_database_says_other_machines_move_heads";
    let Some(server) = pg_server::shared(name) else {
        return;
    };
    let url = server.fresh_db(name);
    let pg = tempfile::tempdir().expect("temp dir");
    std::fs::write(pg.path().join("config.yaml"), format!("storage: '{url}'\n"))
        .expect("config written");
    let store = storage::open_store(pg.path()).expect("store");
    assert!(storage::handle(pg.path()).expect("handle").index().shared());
    assert!(store.files_are_cache());
}
