//! `uwf cas gc` and `uwf cas fsck` over any node store, written once over [`Nodes`]: the
//! directory store's node files, or PostgreSQL's `nodes` table with this root's files as its
//! cache.
//!
//! GC holds this machine's writers off (the store lock, held exclusively, and their pins: see
//! [`gc::gc`]), reads the roots, marks what they reach through the [`Store`] (with a table, what
//! is not cached is fetched), then goes through every stored node in hash order and deletes the
//! unmarked ones written before the cutoff, a batch at a time, each delete re-checking the age
//! where a writer elsewhere could have re-put the node meanwhile; the local files of deleted
//! nodes go with them, and the rest of the local files (a cache's files of nodes another
//! machine's GC deleted, abandoned temp files) are swept as [`gc::sweep_locked`] does.
//!
//! fsck re-hashes every stored node (only the set of hashes and the references stay in
//! memory), checks every data node against its schema and every reference against the store,
//! and gives [`crate::engine::upkeep::fsck`]'s walk from the roots the verdicts ([`NodeTable`]),
//! so damage is reported with the threads and workflows it reaches. Cache files that do not
//! hold their node, or hold one the table no longer has, are derived files (`--repair` removes
//! them; they are fetched again when needed).
//!
//! Architecture Invariant: a node younger than the grace period, or written after the earliest
//! pin of a writer on this machine, is never deleted, whatever the store (writers on other
//! machines rely on the grace period); nor is any node a root reaches.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use crate::cas::fsck::{self as node_fsck, FsckReport, Problem};
use crate::cas::gc::{self, Cutoff, GcOptions, GcReport};
use crate::cas::{Hash, Node, Store, StoreError};

use super::{Condition, MaintenanceError, NodeCheck, NodeTable, Nodes, Stored};

/// How many unreachable nodes are deleted at a time.
const BATCH: usize = 1000;

/// Collects the garbage of `nodes`, whose local files (the nodes themselves, or their cache)
/// are `store`'s. `roots` reads the roots once this machine's writers are held off.
pub(crate) fn collect_garbage<E: From<MaintenanceError>>(
    store: &Store,
    nodes: &dyn Nodes,
    roots: impl FnOnce() -> Result<Vec<Hash>, E>,
    options: &GcOptions,
) -> Result<GcReport, E> {
    let held = store
        .lock_exclusive()
        .and_then(|hold| Ok((hold, store.earliest_pin()?)));
    let (_hold, pin) = held.map_err(MaintenanceError::from)?;
    let cutoff = Cutoff::new(options.grace, pin);
    let roots = roots()?;
    Ok(collect(store, nodes, &roots, &cutoff, options)?)
}

fn collect(
    store: &Store,
    nodes: &dyn Nodes,
    roots: &[Hash],
    cutoff: &Cutoff,
    options: &GcOptions,
) -> Result<GcReport, MaintenanceError> {
    let mut report = GcReport::default();
    let marked = gc::mark(store, roots, &mut report)?;
    let mut doomed = Vec::new();
    nodes.each_age(cutoff, &mut |hash, past| {
        if marked.contains(&hash) {
            return Ok(());
        }
        if !past {
            report.young += 1;
            return Ok(());
        }
        doomed.push(hash);
        if doomed.len() >= BATCH {
            sweep(store, nodes, &mut doomed, cutoff, options, &mut report)?;
        }
        Ok(())
    })?;
    sweep(store, nodes, &mut doomed, cutoff, options, &mut report)?;
    // The rest of the local files: a cache's files of nodes the table no longer has (another
    // machine's GC), and abandoned temp files; the type index is pruned. Young files were
    // counted above, as nodes.
    let young = report.young;
    gc::sweep_locked(store, &marked, cutoff, options, &mut report)?;
    report.young = young;
    report.removed.sort();
    Ok(report)
}

/// Deletes the `doomed` nodes (those still written before `cutoff`) and their local files,
/// or in a dry run only notes them; empties `doomed`.
fn sweep(
    store: &Store,
    nodes: &dyn Nodes,
    doomed: &mut Vec<Hash>,
    cutoff: &Cutoff,
    options: &GcOptions,
    report: &mut GcReport,
) -> Result<(), MaintenanceError> {
    if options.dry_run {
        report.removed.append(doomed);
        return Ok(());
    }
    let deleted = nodes.delete(doomed, cutoff)?;
    // A node kept by the delete was written again meanwhile: young now.
    report.young += doomed.len() - deleted.len();
    doomed.clear();
    for hash in deleted {
        let path = store.object_path(hash);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(StoreError::io("cannot remove", &path)(e).into()),
        }
        report.removed.push(hash);
    }
    Ok(())
}

/// What a check found beyond the problems themselves: which nodes are stored, and why the
/// damaged ones are.
#[derive(Debug, Default)]
struct Rows {
    present: HashSet<Hash>,
    damaged: HashMap<Hash, String>,
}

/// Re-hashes and checks every node of `nodes`, then the local cache if it is one (see the
/// module doc); the result's table is what the walk from the roots reads.
pub(crate) fn check_nodes<'a>(
    store: &'a Store,
    nodes: Box<dyn Nodes + 'a>,
) -> Result<NodeCheck<'a>, MaintenanceError> {
    let mut report = FsckReport::default();
    let mut rows = Rows::default();
    let mut refs: Vec<(Hash, PathBuf, String, Hash)> = Vec::new();
    nodes.each_stored(&mut |stored: Stored| {
        let Some(hash) = stored.hash else {
            report.problems.push(Problem {
                hash: None,
                path: stored.path,
                message: "stray file: the name is not a node hash".into(),
            });
            return;
        };
        report.checked += 1;
        rows.present.insert(hash);
        let path = stored.path;
        let problem = |message: String| Problem {
            hash: Some(hash),
            path: path.clone(),
            message,
        };
        let node = match stored.node {
            Ok(node) => node,
            Err(why) => {
                report.problems.push(problem(why.clone()));
                rows.damaged.insert(hash, why);
                return;
            }
        };
        let (problems, located) = node_fsck::check_node(store, &node);
        report.problems.extend(problems.into_iter().map(problem));
        refs.extend(
            located
                .into_iter()
                .map(|(pointer, target)| (hash, path.clone(), pointer, target)),
        );
    })?;
    // References resolved once every node has been read: one stored during the scan below
    // its cursor is looked up on its own.
    for (hash, path, pointer, target) in refs {
        if !rows.present.contains(&target) && !nodes.has(target)? {
            report.problems.push(Problem {
                hash: Some(hash),
                path,
                message: node_fsck::dangling(&pointer, target),
            });
        }
    }
    report.problems.sort_by_key(|p| p.hash);
    // The cache first: the walk reads through the store, which replaces a damaged cache file
    // it meets with the node.
    let cache = nodes.check_cache(&rows.present)?;
    Ok(NodeCheck {
        nodes: report,
        cache,
        table: Some(Box::new(Table { nodes, rows })),
    })
}

/// The check's verdicts, for the walk from the roots.
struct Table<'a> {
    nodes: Box<dyn Nodes + 'a>,
    rows: Rows,
}

impl NodeTable for Table<'_> {
    fn read(&self, hash: Hash) -> Result<Node, Condition> {
        if let Some(why) = self.rows.damaged.get(&hash) {
            return Err(Condition::Corrupt(why.clone()));
        }
        if !self.rows.present.contains(&hash) && !self.nodes.has(hash).unwrap_or(false) {
            return Err(Condition::Missing);
        }
        self.nodes.read_checked(hash)
    }
}
