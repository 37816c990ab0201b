//! `uwf cas fsck` from the roots: walks every root the index files name (registered workflows
//! and their earlier versions, active thread heads, archived heads) along every reference (a
//! chain's `prev` back to its start, outputs, details, texts, workflows, schemas), and reports
//! each node that is missing or corrupt with its kind and the threads and workflows that reach
//! it. Then checks the derived files (`cache/chains`, `cache/decisions`, the type index)
//! against the store, and with `repair` rebuilds only those: it removes cache files that
//! disagree (they are rebuilt from the nodes when next needed) and rebuilds the type index. It
//! never writes, guesses or removes a node. (Over PostgreSQL the node files under the root are
//! themselves a cache of the database, [`NodeTable`]: a bad one is removed and fetched again.)
//!
//! The node-by-node check of every file (hash, schema, dangling refs) is [`crate::cas::fsck`];
//! this one adds what only the roots know: which damage matters, and to whom.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

use crate::cas::{Hash, Store, StoreError};
use crate::engine::chain;
use crate::engine::storage::index_files::{self, IndexError};
use crate::engine::workflow::decisions;

pub use crate::engine::storage::seam::nodes::{Condition, Derived, NodeTable};

/// Errors that stop the check itself (damage is reported, not returned).
#[derive(Debug, thiserror::Error)]
pub enum FsckError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Index(#[from] IndexError),
    #[error("cannot read {}: {error}", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("cannot remove {}: {error}", path.display())]
    Remove {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// A reachable node that is missing or corrupt.
#[derive(Debug, Clone)]
pub struct Damaged {
    pub hash: Hash,
    /// `start`, `step`, `output`, `detail`, `text`, `workflow`, `schema`, `head`, `node`.
    pub kind: &'static str,
    pub condition: Condition,
    /// `thread <id>` and `workflow <name>` for every root that reaches it.
    pub reached_from: BTreeSet<String>,
}

/// The outcome of a check from the roots.
#[derive(Debug, Default)]
pub struct Report {
    /// How many roots were walked.
    pub roots: usize,
    /// How many distinct nodes the walk reached.
    pub reached: usize,
    pub damaged: Vec<Damaged>,
    pub derived: Vec<Derived>,
}

impl Report {
    pub(crate) fn missing(&self) -> usize {
        self.damaged
            .iter()
            .filter(|d| d.condition == Condition::Missing)
            .count()
    }

    pub(crate) fn corrupt(&self) -> usize {
        self.damaged.len() - self.missing()
    }
}

/// [`check`], reading the nodes from `table` when there is one.
pub fn check_with(store: &Store, table: Option<&dyn NodeTable>) -> Result<Report, FsckError> {
    let root = store.root();
    let mut roots: Vec<(String, Hash, &'static str)> = Vec::new();
    for (name, entry) in index_files::read_registry(root)? {
        for version in std::iter::once(entry.hash).chain(entry.history.iter().map(|v| v.hash)) {
            roots.push((format!("workflow {name}"), version, "workflow"));
        }
    }
    for (id, head) in crate::engine::storage::threads::read_threads(root)? {
        roots.push((format!("thread {id}"), head, "head"));
    }
    for archived in crate::engine::storage::threads::read_history(root)? {
        roots.push((format!("thread {}", archived.thread), archived.head, "head"));
    }

    let mut walker = Walker {
        store,
        table,
        status: HashMap::new(),
        damaged: BTreeMap::new(),
    };
    for (label, hash, kind) in &roots {
        walker.walk(label, *hash, kind);
    }
    let mut report = Report {
        roots: roots.len(),
        reached: walker.status.len(),
        damaged: walker.damaged.into_values().collect(),
        derived: Vec::new(),
    };
    check_caches(store, "chains", &mut report.derived, |head, bytes| {
        let text = String::from_utf8(bytes).map_err(|_| "damaged: not UTF-8".to_owned())?;
        chain::check_cache_file(store, head, text)
    })?;
    check_caches(store, "decisions", &mut report.derived, |head, bytes| {
        decisions::check_file(store, head, &bytes)
    })?;
    let types = root.join("cas").join("index").join("types");
    for problem in store.check_index()? {
        report.derived.push(Derived {
            path: types.clone(),
            problem,
        });
    }
    Ok(report)
}

/// What [`repair`] did.
#[derive(Debug, Default)]
pub(crate) struct Repaired {
    /// Cache files removed (rebuilt from the nodes when next needed).
    pub removed: Vec<PathBuf>,
    /// Nodes in the rebuilt type index, when it was rebuilt.
    pub reindexed: Option<usize>,
}

/// Rebuilds the derived data `report` found disagreeing with the store: removes those cache
/// files and rebuilds the type index. Never touches a node or an index file.
pub(crate) fn repair(store: &Store, report: &Report) -> Result<Repaired, FsckError> {
    let mut repaired = Repaired::default();
    let types = store.root().join("cas").join("index").join("types");
    let objects = store.root().join("cas").join("objects");
    let mut reindex = false;
    for d in &report.derived {
        if d.path == types {
            if repaired.reindexed.is_none() {
                repaired.reindexed = Some(store.reindex()?);
            }
            continue;
        }
        match std::fs::remove_file(&d.path) {
            Ok(()) => {
                repaired.removed.push(d.path.clone());
                // A node file of a cache (PostgreSQL): the type index must not list it.
                if d.path.starts_with(&objects) {
                    reindex = true;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => {
                return Err(FsckError::Remove {
                    path: d.path.clone(),
                    error,
                });
            }
        }
    }
    if reindex {
        repaired.reindexed = Some(store.reindex()?);
    }
    Ok(repaired)
}

/// Checks every `<head>.json` in `cache/<kind>/` with `check` (spares are not caches of any
/// head and are skipped).
fn check_caches(
    store: &Store,
    kind: &str,
    out: &mut Vec<Derived>,
    check: impl Fn(Hash, Vec<u8>) -> Result<(), String>,
) -> Result<(), FsckError> {
    let dir = store.root().join("cache").join(kind);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(FsckError::Read { path: dir, error }),
    };
    let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    for path in paths {
        let Some(head) = cache_head(&path) else {
            continue;
        };
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(error) => return Err(FsckError::Read { path, error }),
        };
        if let Err(problem) = check(head, bytes) {
            out.push(Derived { path, problem });
        }
    }
    Ok(())
}

/// The head a cache file is filed under (`<head>.json`), or `None` for spares and strays.
fn cache_head(path: &Path) -> Option<Hash> {
    let name = path.file_name()?.to_str()?;
    Hash::parse(name.strip_suffix(".json")?).ok()
}

/// A node as the walk found it: its references (with the kind each names) or its damage.
enum Status {
    Intact(Vec<(Hash, &'static str)>),
    Damaged(Condition),
}

struct Walker<'a> {
    store: &'a Store,
    table: Option<&'a dyn NodeTable>,
    /// Every node reached so far, read once.
    status: HashMap<Hash, Status>,
    damaged: BTreeMap<Hash, Damaged>,
}

impl Walker<'_> {
    /// Walks everything reachable from `start` (named by the root `label`), noting the damage
    /// it reaches. Each root is walked on its own so damage names every root that reaches it;
    /// nodes are read once for all of them.
    fn walk(&mut self, label: &str, start: Hash, kind: &'static str) {
        let mut seen = HashSet::new();
        let mut stack = vec![(start, kind)];
        while let Some((hash, kind)) = stack.pop() {
            if !seen.insert(hash) {
                continue;
            }
            if !self.status.contains_key(&hash) {
                let status = self.read(hash);
                self.status.insert(hash, status);
            }
            match &self.status[&hash] {
                Status::Intact(refs) => stack.extend(refs.iter().copied()),
                Status::Damaged(condition) => {
                    let entry = self.damaged.entry(hash).or_insert_with(|| Damaged {
                        hash,
                        kind,
                        condition: condition.clone(),
                        reached_from: BTreeSet::new(),
                    });
                    entry.reached_from.insert(label.to_owned());
                }
            }
        }
    }

    fn read(&self, hash: Hash) -> Status {
        let read = match self.table {
            Some(table) => table.read(hash),
            None => match self.store.get(hash) {
                Ok(node) => Ok(node),
                Err(StoreError::NotFound(_)) => Err(Condition::Missing),
                Err(e) => Err(Condition::Corrupt(e.to_string())),
            },
        };
        let node = match read {
            Ok(node) => node,
            Err(condition) => return Status::Damaged(condition),
        };
        if node.type_hash == Hash::ZERO {
            return Status::Intact(Vec::new());
        }
        if node.is_schema() {
            return Status::Intact(vec![(Hash::META, "schema")]);
        }
        let mut refs = vec![(node.type_hash, "schema")];
        // A type that cannot be used is itself reached (as a schema) and reported there.
        if let Ok(schema) = self.store.schema(node.type_hash) {
            for (pointer, target) in schema.located_refs(&node.payload) {
                refs.push((target, kind_of_field(&pointer)));
            }
        }
        Status::Intact(refs)
    }
}

/// The kind of node a `cas_ref` field names, from the field's name in the built-in schemas.
fn kind_of_field(pointer: &str) -> &'static str {
    match pointer.rsplit('/').next().unwrap_or("") {
        "start" => "start",
        "prev" => "step",
        "output" => "output",
        "detail" => "detail",
        "raw" | "body" => "text",
        "workflow" => "workflow",
        "meta" => "schema",
        _ => "node",
    }
}

impl crate::advice::Advice for FsckError {
    fn hints(&self) -> Vec<String> {
        match self {
            FsckError::Store(e) => e.hints(),
            FsckError::Index(e) => e.hints(),
            _ => Vec::new(),
        }
    }
}
