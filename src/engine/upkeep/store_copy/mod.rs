//! `uwf store copy FROM TO` (`docs/several-machines.md#reference`): moves a whole store between
//! backends — a directory store and a PostgreSQL database, either way (or directory to directory,
//! database to database) — verifying every hash.
//!
//! What is copied: every node (with its timestamp), the registry with every version and saved
//! source, the active threads with their heads (and the thread each was forked or spawned from,
//! when the source knows), and the archived threads with their status and completion time.
//! What is not: config, `.env`, run files and caches, which belong to a machine, not to the store
//! (caches are rebuilt from the nodes on first use). A PostgreSQL thread's run state (`failed`,
//! `awaiting`, queued) has no place in a directory store; copied threads start unqueued.
//!
//! Order: check that the destination holds no thread and no workflow (it may hold nodes: a
//! second copy of the same nodes is a no-op), copy the nodes a thousand at a time, then write the
//! registry, the archived threads and the active threads, each refusing again under its lock if
//! something appeared meanwhile; last, read everything back from the destination and compare.
//!
//! Architecture Invariant: nothing unverified crosses. Every node is re-hashed when read from
//! the source, refused by the destination if its content does not hash to its name or differs
//! from a node already stored under it (a collision is never overwritten), and re-read and
//! re-hashed from the destination at the end. The index files of a directory destination name
//! only nodes already on disk: the nodes are written without a per-file fsync and the whole
//! filesystem is synced (`syncfs`) before the index files are written, as durable as a
//! per-node fsync and far faster for thousands of nodes.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::PathBuf;

use crate::advice::Advice;
use crate::cas::{Hash, Node, Store, StoreError, builtin};
use crate::engine::storage::index_db;
use crate::engine::storage::index_files::{self, IndexError, Registry};
use crate::pg::{
    ArchivedThread, CopiedThread, Occupancy, PgConfig, PgError, PgStore, RegistryName, RowFacts,
};

mod convert;

use convert::{entry_of, name_of, read_dir_indexes, ref_field, syncfs};

/// How many nodes are read and written at a time.
const BATCH: usize = 1000;

/// How many threads write node files into a directory store at once.
const WRITERS: usize = 4;

/// One side of a copy: a directory store's root, or a PostgreSQL database.
#[derive(Debug, Clone)]
pub enum Endpoint {
    Dir(PathBuf),
    Pg(Box<PgConfig>),
}

impl Endpoint {
    /// `postgres://…` and `postgresql://…` are databases; any other `scheme://` is refused;
    /// anything else is a directory.
    pub fn parse(text: &str) -> Result<Endpoint, CopyError> {
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return Ok(Endpoint::Pg(Box::new(PgConfig::parse(text)?)));
        }
        if let Some(rest) = text.strip_prefix("file://") {
            // RFC 8089: file:///abs/path, or file://localhost/abs/path; another host is not here.
            let path = rest.strip_prefix("localhost").unwrap_or(rest);
            if !path.starts_with('/') {
                return Err(CopyError::FileHost(text.to_owned()));
            }
            return Ok(Endpoint::Dir(PathBuf::from(percent_decode(path))));
        }
        if let Some((scheme, _)) = text.split_once("://")
            && !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        {
            return Err(CopyError::UnknownScheme(crate::pg::redact(text)));
        }
        Ok(Endpoint::Dir(PathBuf::from(text)))
    }
}

/// `path` with its `%XX` escapes decoded (a `%` not followed by two hex digits stays).
fn percent_decode(path: &str) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStringExt;
    std::ffi::OsString::from_vec(percent_encoding::percent_decode_str(path).collect())
}

/// The endpoint as it may be shown: a path, or the URL without its password.
impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Dir(path) => write!(f, "{}", path.display()),
            Endpoint::Pg(config) => f.write_str(config.redacted()),
        }
    }
}

/// What a copy did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CopyReport {
    /// Nodes in the source, all now verified in the destination.
    pub nodes: usize,
    /// How many of them the destination did not have before.
    pub new_nodes: usize,
    pub threads: usize,
    pub archived: usize,
    /// Registered workflow names, and their versions (current and earlier).
    pub workflows: usize,
    pub versions: usize,
}

/// Where a copy is, for a progress display.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// `copying nodes`, `verifying nodes`.
    pub phase: &'static str,
    pub done: usize,
    pub total: usize,
}

/// Everything that can stop a copy.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("`{0}` is neither a directory nor a postgres:// or file:// URL")]
    UnknownScheme(String),
    #[error("`{0}` names another machine; a file:// URL here is a directory on this one")]
    FileHost(String),
    #[error("no uwf store at {}", .0.display())]
    NoStore(PathBuf),
    #[error("FROM and TO are the same store ({0})")]
    SameStore(String),
    #[error("cannot open {endpoint}")]
    OpenPg {
        endpoint: String,
        #[source]
        source: PgError,
    },
    #[error("cannot open {endpoint}")]
    OpenDir {
        endpoint: String,
        #[source]
        source: StoreError,
    },
    #[error("the destination {endpoint} is not empty: it holds {what}")]
    NotEmpty { endpoint: String, what: String },
    #[error("{endpoint}: {what} names node {hash}, which is not in that store")]
    Dangling {
        endpoint: String,
        what: String,
        hash: Hash,
    },
    #[error("{endpoint}: thread {thread}: {reason}")]
    BadThread {
        endpoint: String,
        thread: String,
        reason: String,
    },
    #[error("verification of {endpoint} failed: {what}")]
    Verify { endpoint: String, what: String },
    #[error("cannot sync {}: {source}", path.display())]
    Sync {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Pg(#[from] PgError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Index(#[from] IndexError),
}

impl Advice for CopyError {
    fn hints(&self) -> Vec<String> {
        match self {
            CopyError::UnknownScheme(_) => vec![
                "give a directory (a storage root), file:///ABSOLUTE/PATH or postgres://USER@HOST:PORT/DB".to_owned(),
            ],
            CopyError::FileHost(_) => vec![
                "write file:///ABSOLUTE/PATH (three slashes), or mount the other machine's directory and give its path".to_owned(),
            ],
            CopyError::NoStore(_) => {
                vec!["give the storage root to copy from, e.g. ~/.uwf".to_owned()]
            }
            CopyError::NotEmpty { .. } => vec![
                "copy into a new directory or an empty database (e.g. `createdb uwf2`); nodes already there are fine, threads and workflows are not".to_owned(),
            ],
            CopyError::Dangling { .. } | CopyError::BadThread { .. } => {
                vec!["run `uwf cas fsck` on the source, and repair it before copying".to_owned()]
            }
            CopyError::OpenPg { source, .. } | CopyError::Pg(source) => source.hints(),
            CopyError::OpenDir { source, .. } | CopyError::Store(source) => source.hints(),
            CopyError::Index(source) => source.hints(),
            _ => Vec::new(),
        }
    }

    fn is_busy(&self) -> bool {
        match self {
            CopyError::OpenPg { source, .. } | CopyError::Pg(source) => source.is_busy(),
            _ => false,
        }
    }
}

/// Copies the store at `from` into `to` (see the module doc), calling `progress` as nodes are
/// copied and verified.
pub fn copy(
    from: &Endpoint,
    to: &Endpoint,
    progress: &mut dyn FnMut(Progress),
) -> Result<CopyReport, CopyError> {
    refuse_same(from, to)?;
    let source = Side::open_source(from)?;
    let dest = Side::open_destination(to)?;
    refuse_occupied(to, dest.occupancy()?)?;
    crate::profile::mark("store copy: opened both");

    let mut indexes = source.read_indexes(from)?;
    let hashes = source.list_all()?;
    indexes.check_refs(from, &hashes.iter().copied().collect())?;
    source.learn_unknown(&mut indexes);
    crate::profile::mark("store copy: source indexes and node list read");

    let mut report = CopyReport {
        nodes: hashes.len(),
        threads: indexes.active.len(),
        archived: indexes.archived.len(),
        workflows: indexes.registry.len(),
        versions: indexes.registry.values().map(|e| 1 + e.history.len()).sum(),
        ..CopyReport::default()
    };
    let total = hashes.len();
    let mut done = 0;
    for chunk in hashes.chunks(BATCH) {
        let nodes = source.read_nodes(chunk)?;
        report.new_nodes += dest.write_nodes(&nodes)?;
        done += chunk.len();
        progress(Progress {
            phase: "copying nodes",
            done,
            total,
        });
    }
    crate::profile::mark("store copy: nodes copied");
    dest.sync()?;
    crate::profile::mark("store copy: synced");
    dest.write_indexes(to, &indexes)?;
    crate::profile::mark("store copy: indexes written");

    let mut done = 0;
    for chunk in hashes.chunks(BATCH) {
        dest.read_nodes(chunk).map_err(|e| CopyError::Verify {
            endpoint: to.to_string(),
            what: e.to_string(),
        })?;
        done += chunk.len();
        progress(Progress {
            phase: "verifying nodes",
            done,
            total,
        });
    }
    crate::profile::mark("store copy: nodes verified");
    let written = dest.read_indexes(to)?;
    indexes.same_as(&written, to)?;
    crate::profile::mark("store copy: indexes verified");
    Ok(report)
}

fn refuse_same(from: &Endpoint, to: &Endpoint) -> Result<(), CopyError> {
    let same = match (from, to) {
        (Endpoint::Dir(a), Endpoint::Dir(b)) => match (a.canonicalize(), b.canonicalize()) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        },
        (Endpoint::Pg(a), Endpoint::Pg(b)) => a.redacted() == b.redacted(),
        _ => false,
    };
    if same {
        return Err(CopyError::SameStore(from.to_string()));
    }
    Ok(())
}

fn refuse_occupied(to: &Endpoint, found: Occupancy) -> Result<(), CopyError> {
    if found.is_empty() {
        return Ok(());
    }
    let mut parts = Vec::new();
    for (n, one, many) in [
        (found.threads, "active thread", "active threads"),
        (found.archived, "archived thread", "archived threads"),
        (
            found.workflows,
            "registered workflow",
            "registered workflows",
        ),
    ] {
        if n > 0 {
            parts.push(format!("{n} {}", if n == 1 { one } else { many }));
        }
    }
    Err(CopyError::NotEmpty {
        endpoint: to.to_string(),
        what: parts.join(", "),
    })
}

/// The mutable part of a store, in a form both backends map onto.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Indexes {
    registry: Registry,
    active: Vec<CopiedThread>,
    archived: Vec<ArchivedThread>,
    /// What rows know beyond heads (steps, an active thread's next role), by thread: copied,
    /// so that lists of the destination read no thread's nodes.
    known: HashMap<String, RowFacts>,
}

impl Indexes {
    /// Refuses an index that names a node the source does not hold (a damaged source).
    fn check_refs(&self, from: &Endpoint, hashes: &HashSet<Hash>) -> Result<(), CopyError> {
        let mut named: Vec<(String, Hash)> = Vec::new();
        for (name, e) in &self.registry {
            named.push((format!("workflow `{name}`"), e.hash));
            named.extend(
                e.source
                    .map(|s| (format!("the source of workflow `{name}`"), s)),
            );
            for v in &e.history {
                named.push((format!("a version of workflow `{name}`"), v.hash));
                named.extend(
                    v.source
                        .map(|s| (format!("a version of workflow `{name}`"), s)),
                );
            }
        }
        for t in &self.active {
            named.push((format!("thread {}", t.id), t.head));
            named.push((format!("thread {}", t.id), t.workflow));
        }
        for a in &self.archived {
            named.push((format!("archived thread {}", a.thread), a.head));
            named.push((format!("archived thread {}", a.thread), a.workflow));
        }
        match named.into_iter().find(|(_, h)| !hashes.contains(h)) {
            Some((what, hash)) => Err(CopyError::Dangling {
                endpoint: from.to_string(),
                what,
                hash,
            }),
            None => Ok(()),
        }
    }

    /// Compares what the destination holds now with what was copied: the registry exactly,
    /// threads by id, head and workflow, archived threads also by status and completion time.
    fn same_as(&self, written: &Indexes, to: &Endpoint) -> Result<(), CopyError> {
        let fail = |what: String| {
            Err(CopyError::Verify {
                endpoint: to.to_string(),
                what,
            })
        };
        if written.registry != self.registry {
            return fail("its registry differs from the source's".to_owned());
        }
        let key = |t: &CopiedThread| (t.id.clone(), t.workflow, t.head);
        let (mut a, mut b): (Vec<_>, Vec<_>) = (
            self.active.iter().map(key).collect(),
            written.active.iter().map(key).collect(),
        );
        a.sort();
        b.sort();
        if a != b {
            return fail(format!(
                "it holds {} active threads, not the {} copied, or at other heads",
                b.len(),
                a.len()
            ));
        }
        let key = |t: &ArchivedThread| {
            (
                t.thread.clone(),
                t.workflow,
                t.head,
                t.status.clone(),
                t.completed_ms,
            )
        };
        let (mut a, mut b): (Vec<_>, Vec<_>) = (
            self.archived.iter().map(key).collect(),
            written.archived.iter().map(key).collect(),
        );
        a.sort();
        b.sort();
        if a != b {
            return fail(format!(
                "it holds {} archived threads, not the {} copied, or with other heads, statuses or times",
                b.len(),
                a.len()
            ));
        }
        if written.known != self.known {
            return fail(format!(
                "its rows know the steps of {} threads, not the {} copied, or other ones",
                written.known.len(),
                self.known.len()
            ));
        }
        Ok(())
    }
}

/// An opened endpoint.
// A copy holds two of these, so their size does not matter.
#[allow(clippy::large_enum_variant)]
enum Side {
    Dir(Store),
    Pg(PgStore),
}

impl Side {
    /// Opens the store to copy from; a directory must already be a store.
    fn open_source(endpoint: &Endpoint) -> Result<Side, CopyError> {
        if let Endpoint::Dir(path) = endpoint
            && !path.join("cas").join("objects").is_dir()
        {
            return Err(CopyError::NoStore(path.clone()));
        }
        Side::open(endpoint)
    }

    /// Opens (creating a directory store if need be) the store to copy into.
    fn open_destination(endpoint: &Endpoint) -> Result<Side, CopyError> {
        let mut side = Side::open(endpoint)?;
        if let Side::Dir(store) = &mut side {
            // Synced as a whole before the index files are written (see the module doc).
            store.set_durable(false);
        }
        Ok(side)
    }

    fn open(endpoint: &Endpoint) -> Result<Side, CopyError> {
        let name = || endpoint.to_string();
        match endpoint {
            Endpoint::Dir(path) => {
                // Its index files are this directory's, whatever the environment names.
                crate::engine::storage::pin_directory(path);
                Store::open(path)
                    .map(Side::Dir)
                    .map_err(|source| CopyError::OpenDir {
                        endpoint: name(),
                        source,
                    })
            }
            Endpoint::Pg(config) => {
                PgStore::open(config)
                    .map(Side::Pg)
                    .map_err(|source| CopyError::OpenPg {
                        endpoint: name(),
                        source,
                    })
            }
        }
    }

    fn occupancy(&self) -> Result<Occupancy, CopyError> {
        match self {
            Side::Dir(store) => {
                let root = store.root();
                let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
                Ok(Occupancy {
                    threads: count(index_db::counts(root)?.0 as usize),
                    archived: count(index_db::counts(root)?.1 as usize),
                    workflows: count(index_files::read_registry(root)?.len()),
                })
            }
            Side::Pg(pg) => Ok(pg.occupancy()?),
        }
    }

    fn list_all(&self) -> Result<Vec<Hash>, CopyError> {
        Ok(match self {
            Side::Dir(store) => store.list_all()?,
            Side::Pg(pg) => pg.list_all()?,
        })
    }

    fn get(&self, hash: Hash) -> Result<Node, CopyError> {
        Ok(match self {
            Side::Dir(store) => store.get(hash)?,
            Side::Pg(pg) => pg.get_node(hash)?,
        })
    }

    /// The nodes `hashes`, each re-hashed as read.
    fn read_nodes(&self, hashes: &[Hash]) -> Result<Vec<Node>, CopyError> {
        match self {
            Side::Dir(store) => Ok(hashes
                .iter()
                .map(|h| store.get(*h))
                .collect::<Result<_, _>>()?),
            Side::Pg(pg) => Ok(pg.nodes_by_hash(hashes)?),
        }
    }

    /// Writes copied nodes; returns how many were new.
    fn write_nodes(&self, nodes: &[Node]) -> Result<usize, CopyError> {
        match self {
            Side::Dir(store) => {
                // Each node is a handful of system calls on its own file: a few writers at
                // once keep the disk busy while one of them waits.
                let per_writer = nodes.len().div_ceil(WRITERS).max(1);
                std::thread::scope(|s| {
                    let writers: Vec<_> = nodes
                        .chunks(per_writer)
                        .map(|part| {
                            s.spawn(move || {
                                part.iter().try_fold(0, |new, node| {
                                    Ok::<_, StoreError>(new + usize::from(store.put_copied(node)?))
                                })
                            })
                        })
                        .collect();
                    let mut new = 0;
                    for writer in writers {
                        new += writer.join().expect("a node writer panicked")?;
                    }
                    Ok(new)
                })
            }
            Side::Pg(pg) => Ok(pg.put_copied_nodes(nodes)?),
        }
    }

    /// Makes the nodes written so far durable (a directory's filesystem; a database commits
    /// each batch already).
    fn sync(&self) -> Result<(), CopyError> {
        match self {
            Side::Dir(store) => syncfs(store.root()),
            Side::Pg(_) => Ok(()),
        }
    }

    /// Works out, from a directory source's nodes, what its rows did not know (rows of the
    /// first layout, or copied without it), so the destination's rows know it all. Best
    /// effort: a thread whose nodes cannot be read is left unknown (its lists read it).
    /// A database source's rows always know (threads are started and stepped with them).
    fn learn_unknown(&self, indexes: &mut Indexes) {
        let Side::Dir(store) = self else { return };
        let threads = indexes.active.iter().map(|t| (&t.id, t.head, None));
        let archived = indexes
            .archived
            .iter()
            .map(|a| (&a.thread, a.head, Some(a.status.clone())));
        let mut learned = Vec::new();
        for (id, head, status) in threads.chain(archived) {
            let active = status.is_none();
            match indexes.known.get(id) {
                Some(f) if f.next.is_some() || !active => continue,
                _ => {}
            }
            if let Ok(s) = crate::engine::thread::summary::summary_at(store, id, head, status) {
                let next = s.next.filter(|_| active);
                learned.push((
                    id.clone(),
                    RowFacts {
                        steps: s.steps as u64,
                        next,
                    },
                ));
            }
        }
        indexes.known.extend(learned);
    }

    fn read_indexes(&self, endpoint: &Endpoint) -> Result<Indexes, CopyError> {
        match self {
            Side::Dir(store) => read_dir_indexes(self, store.root(), endpoint),
            Side::Pg(pg) => {
                let registry = pg
                    .registry_names()?
                    .into_iter()
                    .map(|n| (n.name.clone(), entry_of(&n)))
                    .collect();
                let mut starts = pg.thread_starts()?;
                let active = pg
                    .active_threads(None)?
                    .into_iter()
                    .map(|t| CopiedThread {
                        started_ms: starts.remove(&t.id),
                        id: t.id,
                        workflow: t.workflow,
                        head: t.head,
                        parent: t.parent,
                    })
                    .collect();
                Ok(Indexes {
                    registry,
                    active,
                    archived: pg.archived_threads()?,
                    known: pg.row_facts()?,
                })
            }
        }
    }

    /// The workflow and start time of the thread at `head` (a step or its start node), from
    /// its start node; a reason in words when `head` is not one of those.
    fn start_of(&self, head: Hash) -> Result<(Hash, i64), String> {
        let get = |hash: Hash| self.get(hash).map_err(|e| e.to_string());
        let mut node = get(head)?;
        if node.type_hash == builtin::hash_of("step") {
            let start = ref_field(&node, "start")?;
            node = get(start)?;
        }
        if !builtin::is_start(node.type_hash) {
            return Err(format!(
                "{} is a {} node, not a step or start node",
                node.hash,
                builtin::name_of(node.type_hash).unwrap_or("data")
            ));
        }
        let workflow = ref_field(&node, "workflow")?;
        Ok((workflow, i64::try_from(node.timestamp).unwrap_or(i64::MAX)))
    }

    /// Writes the registry, then the archived and active threads, each under its lock and only
    /// into an empty index.
    fn write_indexes(&self, to: &Endpoint, indexes: &Indexes) -> Result<(), CopyError> {
        let occupied = |what: String| CopyError::NotEmpty {
            endpoint: to.to_string(),
            what,
        };
        match self {
            Side::Dir(store) => {
                let root = store.root();
                index_files::update_yaml(root, "registry.yaml", |reg: &mut Registry| {
                    if !reg.is_empty() {
                        return Err(occupied(format!("{} registered workflows", reg.len())));
                    }
                    *reg = indexes.registry.clone();
                    Ok(())
                })?;
                let threads: Vec<index_db::Bulk> = indexes
                    .archived
                    .iter()
                    .map(|a| index_db::Bulk {
                        id: a.thread.clone(),
                        workflow: a.workflow,
                        head: a.head,
                        parent: a.parent.clone(),
                        archived: Some((
                            a.status.clone(),
                            u64::try_from(a.completed_ms).unwrap_or(0),
                        )),
                        steps: indexes.known.get(&a.thread).map(|f| f.steps),
                        next: None,
                        // Filled by the first search (`index_db::search`).
                        prompt: None,
                    })
                    .chain(indexes.active.iter().map(|t| index_db::Bulk {
                        id: t.id.clone(),
                        workflow: t.workflow,
                        head: t.head,
                        parent: t.parent.clone(),
                        archived: None,
                        steps: indexes.known.get(&t.id).map(|f| f.steps),
                        next: indexes.known.get(&t.id).and_then(|f| f.next.clone()),
                        prompt: None,
                    }))
                    .collect();
                match index_db::insert_all(root, &threads)? {
                    Ok(()) => Ok(()),
                    Err((active, archived)) => Err(refuse_occupied(
                        to,
                        Occupancy {
                            threads: active as i64,
                            archived: archived as i64,
                            workflows: 0,
                        },
                    )
                    .expect_err("not empty")),
                }
            }
            Side::Pg(pg) => {
                let names: Vec<RegistryName> = indexes
                    .registry
                    .iter()
                    .map(|(name, e)| name_of(name, e))
                    .collect();
                pg.update_registry(|current| {
                    if !current.is_empty() {
                        return Err(current.len());
                    }
                    *current = names;
                    Ok(())
                })?
                .map_err(|n| occupied(format!("{n} registered workflows")))?;
                pg.insert_copied_threads(&indexes.active, &indexes.archived, &indexes.known)?
                    .or_else(|found| refuse_occupied(to, found))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::storage::index_files::{RegistryEntry, Version};

    #[test]
    fn endpoints_are_directories_or_postgres_urls() {
        assert!(matches!(
            Endpoint::parse("/tmp/x").expect("path"),
            Endpoint::Dir(_)
        ));
        assert!(matches!(
            Endpoint::parse("relative/dir").expect("path"),
            Endpoint::Dir(_)
        ));
        let pg = Endpoint::parse("postgresql://u:s3cret@db:5432/x").expect("url");
        assert_eq!(pg.to_string(), "postgresql://u:***@db:5432/x");
        for bad in ["mysql://u:s3cret@db/x", "postgres://u:s3cret@db:port/x"] {
            let err = Endpoint::parse(bad).expect_err(bad).to_string();
            assert!(!err.contains("s3cret"), "{err}");
            assert!(err.contains("db"), "{err}");
        }
    }

    #[test]
    fn file_urls_are_directories_on_this_machine() {
        let dir = |text: &str| match Endpoint::parse(text).expect(text) {
            Endpoint::Dir(path) => path,
            Endpoint::Pg(_) => panic!("{text} is no database"),
        };
        assert_eq!(dir("file:///srv/uwf"), PathBuf::from("/srv/uwf"));
        assert_eq!(dir("file://localhost/srv/uwf"), PathBuf::from("/srv/uwf"));
        assert_eq!(
            dir("file:///srv/my%20store/"),
            PathBuf::from("/srv/my store/")
        );
        assert_eq!(dir("file:///a%zz"), PathBuf::from("/a%zz"));
        for other in ["file://server/srv/uwf", "file://relative", "file://"] {
            let err = Endpoint::parse(other).expect_err(other);
            assert!(matches!(err, CopyError::FileHost(_)), "{other}: {err}");
            assert!(err.hints()[0].contains("file:///"), "{other}");
        }
    }

    #[test]
    fn registry_entries_survive_the_database_form() {
        let h = |n: u64| Hash::from_u64(n);
        let entry = RegistryEntry {
            hash: h(1),
            registered_at: 30,
            source: Some(h(2)),
            history: vec![
                Version {
                    hash: h(3),
                    registered_at: 10,
                    source: None,
                },
                Version {
                    hash: h(4),
                    registered_at: 20,
                    source: Some(h(5)),
                },
            ],
        };
        assert_eq!(entry_of(&name_of("demo", &entry)), entry);
    }

    #[test]
    fn an_occupied_destination_is_described() {
        let err = refuse_occupied(
            &Endpoint::Dir(PathBuf::from("/s")),
            Occupancy {
                threads: 1,
                archived: 0,
                workflows: 2,
            },
        )
        .expect_err("occupied")
        .to_string();
        assert_eq!(
            err,
            "the destination /s is not empty: it holds 1 active thread, 2 registered workflows"
        );
    }
}
