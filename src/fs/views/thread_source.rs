//! The read side of `threads/`: the thread index, chains, summaries, and the bytes of every
//! thread file, straight from the index files, the store and the run files under `runs/`.
//!
//! Architecture Invariant: everything cached here is either a pure function of a hash (chains by
//! head, rendered step files by step hash, transcripts by head + status line + id) or re-read when
//! its file's stamp changes (the index: `index.db` and its write-ahead log; over PostgreSQL, after
//! a notification or a second, see `views/watch.rs`), so the CLI's changes in other processes
//! (and machines) show within a second. Every cache is bounded by count or bytes; per-thread facts that
//! never change (a thread's workflow) are bounded by the number of threads.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, VecDeque};
use std::hash::{Hash as _, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

use crate::cas::Hash;
use crate::engine::chain::{self, Chain};
use crate::engine::cycle::lifecycle::{self, Summary};
use crate::engine::thread::render;
use crate::engine::thread::run_files::RunFiles;
use crate::engine::thread::view::ThreadView;
use crate::engine::workflow::Workflow;

use super::watch::PgRead;
use super::{Content, FsError, Render, Source, Stamp, Version, from_ms, lock, stamp};
use crate::fs::inode::{StepFile, step_dir_name};

/// How long the thread index is trusted before its files' stamps are looked at again. Changes
/// made through the mount bump [`Source::index_changed`] and are seen at once; changes by other
/// processes within this time (well inside the mount's "within a second"). Without it, two `stat`
/// calls on every request were a third of the daemon's time on warm reads.
const INDEX_RECHECK: Duration = Duration::from_millis(100);

/// How many chains (by head) stay in memory.
const CHAINS: usize = 256;
/// How many thread summaries (by head) stay in memory.
const SUMMARIES: usize = 4096;
/// How many parsed workflow versions stay in memory (for transcripts).
const WORKFLOWS: usize = 64;
/// Bytes (about) of parsed node payloads kept: a step's detail, raw output and body nodes,
/// each needed by several of its files and by its thread's transcript.
const PAYLOAD_BUDGET: usize = 8 << 20;

/// Where a thread stands in the index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ThreadRef {
    pub head: Hash,
    /// `done`, `killed` or `rebased` once archived; an archived thread never changes again.
    pub archived: Option<Arc<str>>,
    /// The workflow, when the index names it.
    workflow: Option<Hash>,
}

impl ThreadRef {
    pub(crate) fn finished(&self) -> bool {
        self.archived.is_some()
    }
}

/// The thread index: active and archived threads read together.
#[derive(Debug, Default, PartialEq)]
struct Index {
    /// Sorted (ULIDs sort by creation time).
    ids: Vec<Arc<str>>,
    map: HashMap<Arc<str>, ThreadRef>,
}

/// A map that forgets its oldest entries beyond `cap`.
struct Bounded<K, V> {
    map: HashMap<K, V>,
    order: VecDeque<K>,
    cap: usize,
}

impl<K: std::hash::Hash + Eq + Clone, V: Clone> Bounded<K, V> {
    fn new(cap: usize) -> Self {
        Bounded {
            map: HashMap::new(),
            order: VecDeque::new(),
            cap,
        }
    }

    fn get(&self, key: &K) -> Option<V> {
        self.map.get(key).cloned()
    }

    fn insert(&mut self, key: K, value: V) {
        if self.map.insert(key.clone(), value).is_none() {
            self.order.push_back(key);
        }
        while self.map.len() > self.cap {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            self.map.remove(&old);
        }
    }
}

type IndexStamps = (Option<Stamp>, Option<Stamp>);

/// The index as last read, with when and at which generation its stamps were checked.
struct IndexCache {
    stamps: IndexStamps,
    /// The version of the index files read (the mtime of `threads/`).
    version: Version,
    index: Arc<Index>,
    checked: Instant,
    generation: u64,
}
/// A summary's key: thread, head, and whether it is archived (archiving keeps the head).
type SummaryKey = (Arc<str>, Hash, bool);

/// The caches of the thread views.
pub(super) struct Threads {
    index: Mutex<Option<IndexCache>>,
    /// The index over PostgreSQL (see `views/watch.rs`).
    pg_index: Mutex<Option<PgRead<Index>>>,
    /// Bumped by every change made through the mount (see [`Source::index_changed`]).
    pub(super) generation: Arc<AtomicU64>,
    chains: Mutex<Bounded<Hash, Arc<Chain>>>,
    summaries: Mutex<Bounded<SummaryKey, Summary>>,
    /// Thread → its workflow (never changes; bounded by the number of threads).
    workflow_of: Mutex<HashMap<Arc<str>, Hash>>,
    /// Workflow hash → name (bounded by the number of workflow versions).
    names: Mutex<HashMap<Hash, Arc<str>>>,
    workflows: Mutex<Bounded<Hash, Arc<Workflow>>>,
    payloads: Mutex<Payloads>,
}

/// Parsed node payloads, oldest dropped first beyond [`PAYLOAD_BUDGET`] bytes (a payload's size
/// is estimated from its strings; nodes are immutable, so eviction only costs a re-read).
#[derive(Default)]
struct Payloads {
    map: HashMap<Hash, (Arc<Value>, usize)>,
    order: VecDeque<Hash>,
    bytes: usize,
}

impl Payloads {
    fn get(&self, hash: Hash) -> Option<Arc<Value>> {
        self.map.get(&hash).map(|(v, _)| v.clone())
    }

    fn insert(&mut self, hash: Hash, value: Arc<Value>) {
        let size = approx_size(&value);
        if size > PAYLOAD_BUDGET / 4 || self.map.contains_key(&hash) {
            return;
        }
        self.bytes += size;
        self.map.insert(hash, (value, size));
        self.order.push_back(hash);
        while self.bytes > PAYLOAD_BUDGET {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some((_, size)) = self.map.remove(&old) {
                self.bytes -= size;
            }
        }
    }
}

/// About the bytes a JSON value holds in memory.
fn approx_size(v: &Value) -> usize {
    const NODE: usize = 32;
    NODE + match v {
        Value::String(s) => s.len(),
        Value::Array(items) => items.iter().map(approx_size).sum(),
        Value::Object(map) => map.iter().map(|(k, v)| k.len() + approx_size(v)).sum(),
        _ => 0,
    }
}

impl Default for Threads {
    fn default() -> Self {
        Threads {
            index: Mutex::new(None),
            pg_index: Mutex::new(None),
            generation: Arc::new(AtomicU64::new(0)),
            chains: Mutex::new(Bounded::new(CHAINS)),
            summaries: Mutex::new(Bounded::new(SUMMARIES)),
            workflow_of: Mutex::new(HashMap::new()),
            names: Mutex::new(HashMap::new()),
            workflows: Mutex::new(Bounded::new(WORKFLOWS)),
            payloads: Mutex::new(Payloads::default()),
        }
    }
}

fn internal(e: impl std::fmt::Display) -> FsError {
    FsError::internal(e)
}

fn text(s: String) -> Arc<[u8]> {
    Arc::from(s.into_bytes())
}

impl Source {
    /// The counter to bump after changing the thread index (shared with background steps).
    pub(crate) fn index_generation(&self) -> Arc<AtomicU64> {
        self.threads.generation.clone()
    }

    /// The thread index changed through the mount: look at it again at the next request.
    #[cfg(test)]
    pub(crate) fn index_changed(&self) {
        self.threads.generation.fetch_add(1, Ordering::SeqCst);
    }

    fn thread_index(&self) -> Result<Arc<Index>, FsError> {
        Ok(self.thread_index_version()?.0)
    }

    /// The index and the version of the files it was read from. While those files' mtime is
    /// recent (see [`super::SETTLE`]) an unchanged stamp proves nothing, so they are read again.
    fn thread_index_version(&self) -> Result<(Arc<Index>, Version), FsError> {
        if self.watch.by_notification() {
            return self.pg_thread_index_version();
        }
        let generation = self.threads.generation.load(Ordering::SeqCst);
        let mut cached = lock(&self.threads.index);
        if let Some(c) = cached.as_ref()
            && c.generation == generation
            && c.checked.elapsed() < INDEX_RECHECK
        {
            return Ok((c.index.clone(), c.version));
        }
        let read_at = SystemTime::now();
        let [db, log] = crate::engine::storage::index_db::watched_files(&self.root);
        let stamps = (stamp(&db), stamp(&log));
        let version = Version::of(
            [stamps.0.map(|s| s.mtime), stamps.1.map(|s| s.mtime)],
            read_at,
            self.mounted_at,
        );
        if let Some(c) = cached.as_mut()
            && c.stamps == stamps
            && matches!(c.version, Version::Settled(_))
        {
            c.checked = Instant::now();
            c.generation = generation;
            return Ok((c.index.clone(), c.version));
        }
        let index = Arc::new(self.read_index()?);
        *cached = Some(IndexCache {
            stamps,
            version,
            index: index.clone(),
            checked: Instant::now(),
            generation,
        });
        Ok((index, version))
    }

    /// The index over PostgreSQL: read again after a change through the mount, a notification
    /// (at most every [`super::watch::NOTIFIED_RECHECK`]) or [`super::watch::PG_RECHECK`].
    fn pg_thread_index_version(&self) -> Result<(Arc<Index>, Version), FsError> {
        // Loaded before reading: a change during the read is read again at the next look.
        let counts = (
            self.threads.generation.load(Ordering::SeqCst),
            self.watch.notified(),
        );
        let mut cached = lock(&self.threads.pg_index);
        if let Some(c) = cached.as_ref()
            && c.fresh(counts.0, counts.1)
        {
            return Ok((c.value.clone(), c.version));
        }
        let read_at = SystemTime::now();
        let read = PgRead::next(cached.as_ref(), self.read_index()?, read_at, counts);
        let found = (read.value.clone(), read.version);
        *cached = Some(read);
        Ok(found)
    }

    /// Reads the thread index through `index_files` (the files or the database).
    fn read_index(&self) -> Result<Index, FsError> {
        let mut map: HashMap<Arc<str>, ThreadRef> = HashMap::new();
        // Archived first, so that an active entry wins over an archived one (over PostgreSQL,
        // a read between archiving's two tables' changes).
        for e in crate::engine::storage::threads::read_entries(&self.root).map_err(internal)? {
            map.insert(
                Arc::from(e.id.as_str()),
                ThreadRef {
                    head: e.head,
                    archived: e.archived.as_deref().map(Arc::from),
                    workflow: Some(e.workflow),
                },
            );
        }
        let mut ids: Vec<Arc<str>> = map.keys().cloned().collect();
        ids.sort();
        Ok(Index { ids, map })
    }

    /// Every thread id, active and archived, oldest first.
    pub(crate) fn thread_ids(&self) -> Result<Vec<Arc<str>>, FsError> {
        Ok(self.thread_index()?.ids.clone())
    }

    /// Where thread `id` stands, if it exists.
    pub(crate) fn thread(&self, id: &str) -> Result<Option<ThreadRef>, FsError> {
        Ok(self.thread_index()?.map.get(id).cloned())
    }

    /// The mtime of `threads/`: the version of the index its listing comes from.
    pub(crate) fn threads_mtime(&self) -> Result<SystemTime, FsError> {
        Ok(self.thread_index_version()?.1.time())
    }

    /// The chain ending at `head`.
    pub(crate) fn chain(&self, head: Hash) -> Result<Arc<Chain>, FsError> {
        if let Some(chain) = lock(&self.threads.chains).get(&head) {
            return Ok(chain);
        }
        let chain = Arc::new(chain::load(&self.store, head).map_err(internal)?);
        lock(&self.threads.chains).insert(head, chain.clone());
        Ok(chain)
    }

    /// The time of a chain's head node: the thread's last activity.
    pub(crate) fn head_time(chain: &Chain) -> SystemTime {
        from_ms(
            chain
                .steps
                .last()
                .map(|s| s.timestamp)
                .unwrap_or(chain.start_timestamp),
        )
    }

    /// The workflow (hash and name) a thread runs.
    pub(crate) fn thread_workflow(
        &self,
        id: &str,
        t: &ThreadRef,
    ) -> Result<(Hash, Arc<str>), FsError> {
        let known = lock(&self.threads.workflow_of).get(id).copied();
        let hash = match known.or(t.workflow) {
            Some(h) => h,
            None => self.chain(t.head)?.start.workflow,
        };
        if known.is_none() {
            lock(&self.threads.workflow_of).insert(Arc::from(id), hash);
        }
        Ok((hash, self.workflow_name(hash)?))
    }

    /// A workflow version, parsed.
    fn workflow(&self, hash: Hash) -> Result<Arc<Workflow>, FsError> {
        if let Some(w) = lock(&self.threads.workflows).get(&hash) {
            return Ok(w);
        }
        let w = Arc::new(Workflow::load(&self.store, hash).map_err(internal)?);
        lock(&self.threads.workflows).insert(hash, w.clone());
        Ok(w)
    }

    /// A node's payload, read once for the several files that show it.
    fn payload(&self, hash: Hash) -> Result<Arc<Value>, FsError> {
        if let Some(v) = lock(&self.threads.payloads).get(hash) {
            return Ok(v);
        }
        let v = Arc::new(self.store.get_payload(hash).map_err(internal)?);
        lock(&self.threads.payloads).insert(hash, v.clone());
        Ok(v)
    }

    /// `body.md`: [`render::body_of`] through the payload cache.
    fn body_of(&self, detail: Hash) -> Option<String> {
        render::body_of(detail, |h| self.payload(h).ok())
    }

    /// `detail.yaml`: [`render::detail_yaml`] through the payload cache.
    fn detail_yaml(&self, detail: Hash) -> Result<String, FsError> {
        let detail = Value::clone(&*self.payload(detail)?);
        Ok(render::detail_yaml_of(detail, |h| self.payload(h).ok()))
    }

    /// The `name` of a workflow version.
    pub(crate) fn workflow_name(&self, hash: Hash) -> Result<Arc<str>, FsError> {
        if let Some(name) = lock(&self.threads.names).get(&hash) {
            return Ok(name.clone());
        }
        let name: Arc<str> = Arc::from(self.workflow(hash)?.name.as_str());
        lock(&self.threads.names).insert(hash, name.clone());
        Ok(name)
    }

    /// The thread's summary (`uwf thread show`) now: the part that depends on the head is
    /// cached by head, the live part (running / failed) re-read from the run files.
    pub(crate) fn summary(&self, id: &str, t: &ThreadRef) -> Result<Summary, FsError> {
        let key = (Arc::from(id), t.head, t.finished());
        let cached = lock(&self.threads.summaries).get(&key);
        let mut summary = match cached {
            Some(s) => s,
            None => {
                let archived = t.archived.as_deref().map(str::to_owned);
                let s =
                    lifecycle::summary_at(&self.store, id, t.head, archived).map_err(internal)?;
                lock(&self.threads.summaries).insert(key, s.clone());
                s
            }
        };
        summary.refresh(&RunFiles::new(&self.root, id));
        Ok(summary)
    }

    /// One file of step `index` of `chain`.
    pub(crate) fn step_content(
        &self,
        chain: &Chain,
        index: usize,
        file: StepFile,
    ) -> Result<Content, FsError> {
        let entry = chain.steps.get(index).ok_or(FsError::NotFound)?;
        let time = from_ms(entry.timestamp);
        let small = |s: String| {
            Ok(Content {
                bytes: text(s),
                time,
            })
        };
        match file {
            StepFile::Hash => return small(format!("{}\n", entry.hash)),
            StepFile::Role => return small(format!("{}\n", entry.role)),
            StepFile::Agent => return small(format!("{}\n", entry.agent)),
            // A symbolic link (`tree/threads.rs` answers it): no bytes of its own.
            StepFile::Fork | StepFile::Child => return small(String::new()),
            _ => {}
        }
        self.rendered(Render::Step(file), entry.hash, || {
            let bytes = match file {
                StepFile::OutputYaml => render::output_yaml(&entry.output()),
                StepFile::OutputJson => render::output_json(&entry.output()),
                StepFile::Body => self.body_of(entry.detail).unwrap_or_default(),
                StepFile::Detail => self.detail_yaml(entry.detail)?,
                StepFile::Diff => {
                    let before = chain.steps[..index]
                        .iter()
                        .enumerate()
                        .rev()
                        .find(|(_, s)| s.role == entry.role);
                    match before {
                        None => String::new(),
                        // Both sides are the steps' `output.yaml`, rendered once each.
                        Some((j, prev)) => render::unified_diff(
                            &format!("{}/output.yaml", step_dir_name(j, &prev.role)),
                            &self.output_yaml(chain, j)?,
                            &format!("{}/output.yaml", step_dir_name(index, &entry.role)),
                            &self.output_yaml(chain, index)?,
                        ),
                    }
                }
                StepFile::Hash
                | StepFile::Role
                | StepFile::Agent
                | StepFile::Fork
                | StepFile::Child => String::new(),
            };
            Ok((bytes.into_bytes(), entry.timestamp))
        })
    }

    /// The text of step `index`'s `output.yaml`.
    fn output_yaml(&self, chain: &Chain, index: usize) -> Result<String, FsError> {
        let c = self.step_content(chain, index, StepFile::OutputYaml)?;
        Ok(String::from_utf8_lossy(&c.bytes).into_owned())
    }

    /// `transcript.md`: `uwf thread read` of the thread at its head, with `status` as the
    /// status line.
    pub(crate) fn transcript(
        &self,
        id: &str,
        t: &ThreadRef,
        status: &str,
    ) -> Result<Content, FsError> {
        let mut h = DefaultHasher::new();
        id.hash(&mut h);
        status.hash(&mut h);
        let chain = self.chain(t.head)?;
        self.rendered(Render::Transcript(h.finish()), t.head, || {
            let (workflow_hash, _) = self.thread_workflow(id, t)?;
            let view = ThreadView {
                id: id.to_owned(),
                head: t.head,
                chain: (*chain).clone(),
                workflow_hash,
                workflow: Workflow::clone(&*self.workflow(workflow_hash)?),
            };
            let body_of = |e: &chain::Entry| self.body_of(e.detail);
            let len = view.chain.steps.len();
            let text = render::transcript(&view, status, len, None, &body_of);
            let time = chain
                .steps
                .last()
                .map(|s| s.timestamp)
                .unwrap_or(chain.start_timestamp);
            Ok((text.into_bytes(), time))
        })
    }

    /// The run files of a thread (`runs/<id>.*`).
    pub(crate) fn run_files(&self, id: &str) -> RunFiles {
        RunFiles::new(&self.root, id)
    }

    /// Size and time of a file under `runs/` (0 and `None` when absent).
    pub(crate) fn run_file_stat(path: &std::path::Path) -> (u64, Option<SystemTime>) {
        match stamp(path) {
            Some(s) => (s.len, Some(s.mtime)),
            None => (0, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_map_forgets_the_oldest() {
        let mut b = Bounded::new(2);
        b.insert(1, "a");
        b.insert(2, "b");
        b.insert(3, "c");
        assert_eq!(b.get(&1), None);
        assert_eq!(b.get(&3), Some("c"));
    }
}
