//! What a process that takes many steps keeps warm between them (issue #17): `uwf thread run`,
//! a sub-workflow's child steps, the mount's runs — any caller of [`crate::engine::cycle::step::step_warm`].
//!
//! A one-shot `uwf thread step` reads the thread's head, its cached history and its workflow,
//! re-reads and re-hashes the nodes the step builds on, compiles the moderator and converts the
//! whole moderator context (the chain's outputs) into the evaluator's values. A session keeps
//! all of that from the step it just published: the history and workflow at the new head, the
//! compiled moderator with its context (one step appended, not converted again), the decision
//! taken there, the role schemas it has checked and which agents it can run in-process. The
//! [`crate::cas::Store`] handle is shared, so its compiled schemas stay warm too.
//!
//! Architecture Invariant: the kept state is a pure function of the head it was built at
//! (nodes are immutable), and it is used only when the thread's head, read from the index under
//! the step lock at the start of the next step, is still that head. Anything else — another
//! process stepped or forked the thread meanwhile, the thread was archived, the step failed —
//! drops it and the step starts cold, exactly as a one-shot step does.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use crate::cas::{Hash, Store};
use crate::engine::agent::in_process::InProcess;
use crate::engine::agent::resolve::AgentSpec;
use crate::engine::chain::{self, History};
use crate::engine::thread::index;
use crate::engine::thread::run_files::RunFiles;
use crate::engine::thread::view::Current;
use crate::engine::workflow::decisions;
use crate::engine::workflow::jsonata::Input;
use crate::engine::workflow::moderator::Moderator;

/// What the steps of one process keep between them (see the module doc): a caller taking many
/// steps makes one (`Warm::default()`) and hands it to every
/// [`crate::engine::cycle::step::step_warm`]; dropping it writes the cache files it still owes.
#[derive(Default)]
pub struct Warm {
    /// Cache files are written as each step publishes, under its lock (a lone step, or a run
    /// whose thread is watched as it runs).
    write_through: bool,
    /// The thread published last, at its new head.
    kept: Option<Kept>,
    /// Role schemas read and verified by this process.
    schemas: HashSet<Hash>,
    /// Which agent command lines this process runs itself.
    agents: HashMap<(String, Vec<String>), Option<InProcess>>,
    /// The cache files of the last head published, not written yet.
    pending: Option<Pending>,
}

/// The cache files of a head just published ([`chain::save_history`],
/// [`decisions::write`]): the thread's history there and the moderator's decision.
pub(crate) struct Saved<'a> {
    pub(crate) thread: &'a str,
    /// The thread's previous head, whose cache files the new ones take over.
    pub(crate) retired: Hash,
    pub(crate) history: &'a History,
    /// The decision at the new head and the workflow's hash, when decisions of this workflow
    /// may be cached.
    pub(crate) decision: Option<(Hash, String)>,
}

impl Saved<'_> {
    /// Writes the cache files now under the storage root `root` (best effort: they only save
    /// time).
    pub(crate) fn write(&self, root: &Path) {
        let head = self.history.head();
        chain::save_history(root, self.thread, self.history, self.retired);
        match &self.decision {
            Some((workflow, next)) => {
                decisions::write(root, *workflow, head, next, (self.thread, self.retired))
            }
            None => decisions::forget_in(root, self.retired),
        }
    }
}

/// Cache files a session has yet to write: a thread taking many steps in this process saves the
/// history and decision of the head it ends at, not of every head on the way. They are derived
/// files: a reader that finds none for a head rebuilds them from the nodes (walking back to the
/// last head whose files were written), so writing them late, or never (a killed process),
/// costs time and never correctness.
struct Pending {
    root: PathBuf,
    thread: String,
    /// The head whose cache files are on disk: retired when the pending ones are written.
    retired: Hash,
    history: History,
    decision: Option<(Hash, String)>,
}

/// One thread as a step left it.
pub(crate) struct Kept {
    pub(crate) id: String,
    /// The history and workflow at the new head.
    pub(crate) view: Current,
    /// The compiled moderator and its context at the new head.
    pub(crate) prepared: (Moderator, Input),
    /// The moderator's decision at the new head, when it could decide.
    pub(crate) next: Option<String>,
}

impl Drop for Warm {
    fn drop(&mut self) {
        self.settle();
    }
}

impl Warm {
    /// The state of one lone step (`uwf thread step`): nothing is kept past it, so its cache
    /// files are written before it lets go of the thread.
    pub(crate) fn lone() -> Warm {
        Warm::watched()
    }

    /// For a run whose thread others watch step by step (the mount's `run`, whose views are
    /// read as it goes): everything is kept warm but the cache files, which are written at
    /// every step, so a reader of a new head finds them instead of rebuilding them (and leaving
    /// a file behind for every head it looked at).
    pub(crate) fn watched() -> Warm {
        Warm {
            write_through: true,
            kept: None,
            schemas: HashSet::new(),
            agents: HashMap::new(),
            pending: None,
        }
    }

    /// What was kept for thread `id`, if its head is still `head`. Taken: a step that fails
    /// midway leaves nothing behind. Pending cache files of any other head are settled now.
    pub(crate) fn take(&mut self, id: &str, head: Hash) -> Option<Kept> {
        if self
            .pending
            .as_ref()
            .is_some_and(|p| p.thread != id || p.history.head() != head)
        {
            self.settle();
        }
        let kept = self.kept.take()?;
        (kept.id == id && kept.view.head() == head).then_some(kept)
    }

    /// Leaves the cache files of a head just published to [`Warm::flush`] (a lone step's are
    /// written now).
    pub(crate) fn defer(&mut self, store: &Store, saved: Saved<'_>) {
        if self.write_through {
            saved.write(store.root());
            return;
        }
        let continues = self
            .pending
            .as_ref()
            .is_some_and(|p| p.thread == saved.thread && p.history.head() == saved.retired);
        let retired = match &self.pending {
            Some(p) if continues => p.retired,
            _ => {
                self.settle();
                saved.retired
            }
        };
        self.pending = Some(Pending {
            root: store.root().to_path_buf(),
            thread: saved.thread.to_owned(),
            retired,
            history: saved.history.clone(),
            decision: saved.decision,
        });
    }

    /// Writes the pending cache files under their thread's step lock, as a step writes them
    /// (the thread's spare files are shared with any other process stepping it), when not
    /// under it already. A thread that is busy (our own step holding it included), archived or
    /// at another head by now is left as it is: its readers rebuild what they miss.
    fn settle(&mut self) {
        let Some(p) = &self.pending else { return };
        let files = RunFiles::new(&p.root, &p.thread);
        let still_ours = files
            .try_lock()
            .ok()
            .filter(|_| index::active_head(&p.root, &p.thread).ok() == Some(p.history.head()));
        match still_ours {
            Some(_lock) => self.flush(),
            None => self.pending = None,
        }
    }

    /// Writes the pending cache files; the caller holds their thread's step lock.
    pub(crate) fn flush(&mut self) {
        if let Some(p) = self.pending.take() {
            let saved = Saved {
                thread: &p.thread,
                retired: p.retired,
                history: &p.history,
                decision: p.decision,
            };
            saved.write(&p.root);
        }
    }

    /// Keeps `kept` for the next step.
    pub(crate) fn keep(&mut self, kept: Kept) {
        self.kept = Some(kept);
    }

    /// Whether this process has verified the schema node `hash` already.
    pub(crate) fn schema_checked(&self, hash: Hash) -> bool {
        self.schemas.contains(&hash)
    }

    pub(crate) fn schema_ok(&mut self, hash: Hash) {
        self.schemas.insert(hash);
    }

    /// [`InProcess::of`] for `spec`, decided once per command line.
    pub(crate) fn in_process(&mut self, spec: &AgentSpec) -> Option<InProcess> {
        self.agents
            .entry((spec.program.clone(), spec.args.clone()))
            .or_insert_with(|| InProcess::of(spec))
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cas::store::now_ms;
    use crate::engine::chain;
    use crate::engine::config::Loaded;
    use crate::engine::cycle::lifecycle;
    use crate::engine::cycle::step::{self, StepOptions, Stepped};
    use crate::engine::workflow::{self, registry};

    const COUNTER: &str = "name: c\nroles:\n  tick:\n    goal: count\n    \
meta: { type: object, properties: { n: { type: integer } }, required: [n] }\n\
conditions:\n  more: { expression: \"$count(steps) < 4\" }\n\
graph:\n  $START: [ { role: tick, condition: null } ]\n  \
tick: [ { role: tick, condition: more }, { role: $END, condition: null } ]\n";

    #[test]
    fn a_session_starts_cold_when_the_head_moved_and_decides_on_its_kept_context() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let hash = workflow::parse(COUNTER)
            .unwrap()
            .definition
            .store(&store)
            .unwrap();
        registry::register(dir.path(), "c", hash, now_ms()).unwrap();
        let id = lifecycle::start(&store, "c", "count to four").unwrap().1;
        let config = Loaded::default();
        // This test binary's own `agent dry`: it runs inside the step.
        let options = StepOptions {
            agent: Some("uwf agent dry".into()),
            passthrough: false,
            from_queue: false,
            by: None,
        };
        let prev = |stepped: &Stepped| {
            chain::read_step(&store.get(stepped.head).unwrap())
                .unwrap()
                .prev
        };

        let mut warm = Warm::default();
        let first = step::step_warm(&store, &config, &id, &options, &mut warm).unwrap();
        assert_eq!(prev(&first), None);
        // Another process steps the thread: the session's kept head is stale and must not be
        // built on (its step would continue the first step and lose the race for the head).
        let second = step::step(&store, &config, &id, &options).unwrap();
        assert_eq!(prev(&second), Some(first.head));
        let third = step::step_warm(&store, &config, &id, &options, &mut warm).unwrap();
        assert_eq!(prev(&third), Some(second.head));
        // The fourth step is taken warm, and the decision after it reads the context the
        // session kept with the new step appended: `$count(steps) < 4` is false there.
        let fourth = step::step_warm(&store, &config, &id, &options, &mut warm).unwrap();
        assert_eq!(prev(&fourth), Some(third.head));
        assert!(fourth.done, "{fourth:?}");
        assert_eq!(
            chain::load_from_nodes(&store, fourth.head)
                .unwrap()
                .steps
                .len(),
            4
        );
    }

    #[test]
    fn a_session_writes_the_cache_files_of_the_head_it_ends_at() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let parsed = workflow::parse(COUNTER).unwrap().definition;
        let hash = parsed.store(&store).unwrap();
        registry::register(dir.path(), "c", hash, now_ms()).unwrap();
        let id = lifecycle::start(&store, "c", "count").unwrap().1;
        let config = Loaded::default();
        let options = StepOptions {
            agent: Some("uwf agent dry".into()),
            passthrough: false,
            from_queue: false,
            by: None,
        };
        let cached = |kind: &str| {
            let mut names: Vec<String> = std::fs::read_dir(dir.path().join("cache").join(kind))
                .map(|d| {
                    d.map(|e| e.unwrap().file_name().into_string().unwrap())
                        .collect()
                })
                .unwrap_or_default();
            names.sort();
            names
        };
        let file = |head: Hash| format!("{head}.json");
        // A lone step writes its head's files before it returns.
        let first = step::step(&store, &config, &id, &options).unwrap();
        assert!(cached("chains").contains(&file(first.head)));
        let mut warm = Warm::default();
        step::step_warm(&store, &config, &id, &options, &mut warm).unwrap();
        let third = step::step_warm(&store, &config, &id, &options, &mut warm).unwrap();
        // Mid-run the files on disk are still the first head's ...
        assert!(cached("chains").contains(&file(first.head)));
        assert!(!cached("chains").contains(&file(third.head)));
        assert!(!cached("decisions").contains(&file(third.head)));
        // ... and when the session ends they are the last head's, and the spare.
        drop(warm);
        let mut expected = vec![file(third.head), format!("{id}.spare")];
        expected.sort();
        assert_eq!(cached("chains"), expected);
        assert_eq!(cached("decisions"), expected);
        assert_eq!(chain::history(&store, third.head).unwrap().len(), 3);
        let next = decisions::cached_next(&store, hash, &parsed.workflow, third.head);
        assert_eq!(next.as_deref(), Some("tick"));
    }

    #[test]
    fn a_dropped_session_leaves_a_thread_that_moved_on_alone() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let hash = workflow::parse(COUNTER)
            .unwrap()
            .definition
            .store(&store)
            .unwrap();
        registry::register(dir.path(), "c", hash, now_ms()).unwrap();
        let id = lifecycle::start(&store, "c", "count").unwrap().1;
        let config = Loaded::default();
        let options = StepOptions {
            agent: Some("uwf agent dry".into()),
            passthrough: false,
            from_queue: false,
            by: None,
        };
        let chains = || {
            let mut names: Vec<String> = std::fs::read_dir(dir.path().join("cache/chains"))
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            names.sort();
            names
        };
        let mut warm = Warm::default();
        step::step_warm(&store, &config, &id, &options, &mut warm).unwrap();
        let second = step::step_warm(&store, &config, &id, &options, &mut warm).unwrap();
        // Another process takes the next step: the session's pending files are of an old head,
        // and the thread's spare is that process's now.
        let third = step::step(&store, &config, &id, &options).unwrap();
        let before = chains();
        assert!(
            before.contains(&format!("{}.json", third.head)),
            "{before:?}"
        );
        drop(warm);
        assert_eq!(chains(), before);
        assert!(!chains().contains(&format!("{}.json", second.head)));
    }

    #[test]
    fn a_watched_run_writes_the_cache_files_at_every_step() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let parsed = workflow::parse(COUNTER).unwrap().definition;
        let hash = parsed.store(&store).unwrap();
        registry::register(dir.path(), "c", hash, now_ms()).unwrap();
        let id = lifecycle::start(&store, "c", "count").unwrap().1;
        let config = Loaded::default();
        let options = StepOptions {
            agent: Some("uwf agent dry".into()),
            passthrough: false,
            from_queue: false,
            by: None,
        };
        let mut watched = Warm::watched();
        for _ in 0..2 {
            let stepped = step::step_warm(&store, &config, &id, &options, &mut watched).unwrap();
            let file = |kind: &str| {
                dir.path()
                    .join("cache")
                    .join(kind)
                    .join(format!("{}.json", stepped.head))
            };
            assert!(file("chains").exists());
            assert!(file("decisions").exists());
        }
    }

    #[test]
    fn pending_files_of_another_thread_are_written_only_under_its_lock() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let hash = workflow::parse(COUNTER)
            .unwrap()
            .definition
            .store(&store)
            .unwrap();
        registry::register(dir.path(), "c", hash, now_ms()).unwrap();
        let config = Loaded::default();
        let options = StepOptions {
            agent: Some("uwf agent dry".into()),
            passthrough: false,
            from_queue: false,
            by: None,
        };
        let cached = |head: Hash| dir.path().join(format!("cache/chains/{head}.json"));
        let (a, b, c) = (
            lifecycle::start(&store, "c", "a").unwrap().1,
            lifecycle::start(&store, "c", "b").unwrap().1,
            lifecycle::start(&store, "c", "c").unwrap().1,
        );
        let mut warm = Warm::default();
        let a1 = step::step_warm(&store, &config, &a, &options, &mut warm).unwrap();
        // Stepping another thread settles A's files: A is idle at that head, so they are written.
        step::step_warm(&store, &config, &b, &options, &mut warm).unwrap();
        assert!(cached(a1.head).exists());
        let b2 = step::step_warm(&store, &config, &b, &options, &mut warm).unwrap();
        assert!(!cached(b2.head).exists());
        // Another process is stepping B now: B's spare is its, and B's files are left alone.
        let busy = RunFiles::new(dir.path(), &b).try_lock().unwrap();
        step::step_warm(&store, &config, &c, &options, &mut warm).unwrap();
        assert!(!cached(b2.head).exists());
        drop(busy);
    }
}
