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

use std::collections::HashSet;

use crate::advice::Advice;
use crate::cas::Hash;
use crate::engine::storage::index_files::{IndexError, Registry};
use crate::engine::storage::seam::{
    EndpointError, ExportError, Exported, MaintenanceError, Occupancy, Opened, RowFacts,
};

pub(crate) use crate::engine::storage::seam::Endpoint;

/// How many nodes are read and written at a time.
const BATCH: usize = 1000;

/// What a copy did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CopyReport {
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
pub(crate) struct Progress {
    /// `copying nodes`, `verifying nodes`.
    pub phase: &'static str,
    pub done: usize,
    pub total: usize,
}

/// Everything that can stop a copy.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CopyError {
    #[error("FROM and TO are the same store ({0})")]
    SameStore(String),
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
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    #[error(transparent)]
    Nodes(#[from] MaintenanceError),
    #[error(transparent)]
    Index(#[from] IndexError),
}

impl Advice for CopyError {
    fn hints(&self) -> Vec<String> {
        match self {
            CopyError::NotEmpty { .. } => vec![
                "copy into a new directory or an empty database (e.g. `createdb uwf2`); nodes already there are fine, threads and workflows are not".to_owned(),
            ],
            CopyError::Dangling { .. } | CopyError::BadThread { .. } => {
                vec!["run `uwf cas fsck` on the source, and repair it before copying".to_owned()]
            }
            CopyError::Endpoint(source) => source.hints(),
            CopyError::Nodes(source) => source.hints(),
            CopyError::Index(source) => source.hints(),
            _ => Vec::new(),
        }
    }

    fn is_busy(&self) -> bool {
        match self {
            CopyError::Endpoint(source) => source.is_busy(),
            CopyError::Nodes(source) => source.is_busy(),
            CopyError::Index(source) => source.is_busy(),
            _ => false,
        }
    }
}

/// Copies the store at `from` into `to` (see the module doc), calling `progress` as nodes are
/// copied and verified.
pub(crate) fn copy(
    from: &Endpoint,
    to: &Endpoint,
    progress: &mut dyn FnMut(Progress),
) -> Result<CopyReport, CopyError> {
    if from.same_as(to) {
        return Err(CopyError::SameStore(from.to_string()));
    }
    let source = from.open_source()?;
    let dest = to.open_destination()?;
    refuse_occupied(to, dest.storage.index().occupancy()?)?;
    crate::profile::mark("store copy: opened both");

    let mut indexes = Indexes::read(&source, from)?;
    let hashes = source.nodes.list_all()?;
    indexes.check_refs(from, &hashes.iter().copied().collect())?;
    learn_unknown(&source, &mut indexes.threads);
    crate::profile::mark("store copy: source indexes and node list read");

    let mut report = CopyReport {
        nodes: hashes.len(),
        threads: indexes.threads.active.len(),
        archived: indexes.threads.archived.len(),
        workflows: indexes.registry.len(),
        versions: indexes.registry.values().map(|e| 1 + e.history.len()).sum(),
        ..CopyReport::default()
    };
    let total = hashes.len();
    let mut done = 0;
    for chunk in hashes.chunks(BATCH) {
        let nodes = source.nodes.read_many(chunk)?;
        report.new_nodes += dest.nodes.write_copied(&nodes)?;
        done += chunk.len();
        progress(Progress {
            phase: "copying nodes",
            done,
            total,
        });
    }
    crate::profile::mark("store copy: nodes copied");
    dest.nodes.sync()?;
    crate::profile::mark("store copy: synced");
    indexes.write(&dest, to)?;
    crate::profile::mark("store copy: indexes written");

    let mut done = 0;
    for chunk in hashes.chunks(BATCH) {
        dest.nodes.read_many(chunk).map_err(|e| CopyError::Verify {
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
    let written = Indexes::read(&dest, to)?;
    indexes.same_as(&written, to)?;
    crate::profile::mark("store copy: indexes verified");
    Ok(report)
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
    /// The threads, with what rows know beyond heads (copied, so that lists of the
    /// destination read no thread's nodes).
    threads: Exported,
}

impl Indexes {
    /// The registry and every thread of an opened store.
    fn read(side: &Opened, endpoint: &Endpoint) -> Result<Indexes, CopyError> {
        let index = side.storage.index();
        let threads = index
            .export_threads(side.storage.records(), side.nodes.as_ref())
            .map_err(|e| match e {
                ExportError::BadThread { thread, reason } => CopyError::BadThread {
                    endpoint: endpoint.to_string(),
                    thread,
                    reason,
                },
                ExportError::Index(e) => e.into(),
                ExportError::Nodes(e) => e.into(),
            })?;
        Ok(Indexes {
            registry: index.registry()?,
            threads,
        })
    }

    /// Writes the registry, then the threads, each under its lock and only into an empty
    /// index.
    fn write(&self, side: &Opened, to: &Endpoint) -> Result<(), CopyError> {
        let index = side.storage.index();
        let mut found = 0;
        index.update_registry(&mut |registry| {
            if !registry.is_empty() {
                found = registry.len();
                return false;
            }
            *registry = self.registry.clone();
            true
        })?;
        if found > 0 {
            return Err(CopyError::NotEmpty {
                endpoint: to.to_string(),
                what: format!("{found} registered workflows"),
            });
        }
        index
            .import_threads(&self.threads)?
            .or_else(|found| refuse_occupied(to, found))
    }

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
        for t in &self.threads.active {
            named.push((format!("thread {}", t.id), t.head));
            named.push((format!("thread {}", t.id), t.workflow));
        }
        for a in &self.threads.archived {
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
        let (ours, theirs) = (&self.threads, &written.threads);
        let key =
            |t: &crate::engine::storage::seam::ActiveThread| (t.id.clone(), t.workflow, t.head);
        let (mut a, mut b): (Vec<_>, Vec<_>) = (
            ours.active.iter().map(key).collect(),
            theirs.active.iter().map(key).collect(),
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
        let key = |t: &crate::engine::storage::seam::ArchivedThread| {
            (
                t.thread.clone(),
                t.workflow,
                t.head,
                t.status.clone(),
                t.completed_ms,
            )
        };
        let (mut a, mut b): (Vec<_>, Vec<_>) = (
            ours.archived.iter().map(key).collect(),
            theirs.archived.iter().map(key).collect(),
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
        if theirs.known != ours.known {
            return fail(format!(
                "its rows know the steps of {} threads, not the {} copied, or other ones",
                theirs.known.len(),
                ours.known.len()
            ));
        }
        Ok(())
    }
}

/// Works out, from a directory source's nodes, what its rows did not know (rows of the first
/// layout, copied without it, or moved since they last were listed with their costs), so the
/// destination's rows know it all. Best effort: a thread whose nodes cannot be read is left
/// unknown (its lists read it). A database source's rows know their steps (threads are started
/// and stepped with them), and it has no local store: what they spent is worked out by the
/// destination's first listing of costs.
fn learn_unknown(source: &Opened, threads: &mut Exported) {
    let Some(store) = source.nodes.local() else {
        return;
    };
    let active = threads.active.iter().map(|t| (&t.id, t.head, None));
    let archived = threads
        .archived
        .iter()
        .map(|a| (&a.thread, a.head, Some(a.status.clone())));
    let mut learned = Vec::new();
    for (id, head, status) in active.chain(archived) {
        let active = status.is_none();
        let known = threads.known.get(id);
        let facts = match known {
            Some(f) if f.spent.is_some() && (f.next.is_some() || !active) => continue,
            Some(f) if f.next.is_some() || !active => f.clone(),
            _ => match crate::engine::thread::summary::summary_at(store, id, head, status) {
                Ok(s) => RowFacts {
                    steps: s.steps as u64,
                    next: s.next.filter(|_| active),
                    spent: known.and_then(|f| f.spent.clone()),
                },
                Err(_) => continue,
            },
        };
        let spent = facts.spent.clone().or_else(|| {
            crate::engine::thread::cost::usage_at(store, head)
                .ok()
                .map(|usage| usage.to_row())
        });
        learned.push((id.clone(), RowFacts { spent, ..facts }));
    }
    threads.known.extend(learned);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_occupied_destination_is_described() {
        let err = refuse_occupied(
            &Endpoint::parse("/s").expect("a path"),
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
