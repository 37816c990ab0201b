//! `uwf cas gc` and `uwf cas fsck` over PostgreSQL: the nodes table is the
//! store, and the node files under the root are only this machine's cache of it.
//!
//! GC marks from the same roots as the directory store (the registry, thread heads and the
//! history, which the seam reads from the database, plus the built-in schemas), reading nodes
//! through the [`Store`] (cache first, else fetched from the database). It then pages through
//! the table by hash and deletes the unmarked rows written before the grace period, in batches,
//! each delete re-checking the age itself; the cache files of deleted rows go with them, and
//! the rest of the cache is swept as a directory store's files are.
//!
//! Architecture Invariant: a row younger than the grace period is never deleted, so a writer
//! between its puts and the head that names them loses nothing; nor, whatever the grace, a row
//! written after the earliest pin of a writer on this machine (GC holds the local store lock
//! and reads the pins as [`gc::gc`] does). Writers on other machines rely on the grace period. As a node file's mtime is, a
//! row's `created_ms` is refreshed by a second put of the same node once the row is an hour old
//! (only the time; the bytes are write-once), so a writer that re-puts old garbage it is about
//! to refer to is spared by a GC that marked before its head moved.
//!
//! fsck re-hashes every row (page by page; only the set of hashes and the references stay in
//! memory), checks every data node against its schema and every reference against the table,
//! and gives [`crate::engine::upkeep::fsck`]'s walk from the roots the table's verdicts, so damage is
//! reported with the threads and workflows it reaches as in a directory store. Cache files that
//! do not hold their node, or hold one the table no longer has, are reported as derived files:
//! `--repair` removes them (they are fetched again when needed).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use super::nodes::{Condition, Derived, MaintenanceError, NodeTable};
use crate::cas::fsck::{self as node_fsck, FsckReport, Problem};
use crate::cas::gc::{self, GcOptions, GcReport};
use crate::cas::store::parse_node_file;
use crate::cas::{Hash, Node, Store, StoreError};
use crate::pg::maintenance::BATCH;
use crate::pg::{PgError, PgStore};

/// Collects garbage in the nodes table of `pg` and in the cache under `store`'s root. `roots`
/// reads the roots once this machine's writers are held off (see [`gc::gc`]).
///
/// Writers on this machine are protected as in a directory store (the store lock, held
/// exclusively here, and their pins); writers on other machines only by the grace period:
/// their pins are locks on their own machine.
pub fn gc<E: From<MaintenanceError>>(
    store: &Store,
    pg: &PgStore,
    roots: impl FnOnce() -> Result<Vec<Hash>, E>,
    options: &GcOptions,
) -> Result<GcReport, E> {
    let held = store
        .lock_exclusive()
        .and_then(|hold| Ok((hold, store.earliest_pin()?)));
    let (_hold, pin) = held.map_err(MaintenanceError::from)?;
    let cutoff = gc::Cutoff::new(options.grace, pin);
    let roots = roots()?;
    Ok(collect(store, pg, &roots, &cutoff, options)?)
}

fn collect(
    store: &Store,
    pg: &PgStore,
    roots: &[Hash],
    cutoff: &gc::Cutoff,
    options: &GcOptions,
) -> Result<GcReport, MaintenanceError> {
    let mut report = GcReport::default();
    let marked = gc::mark(store, roots, &mut report)?;
    let files_cutoff = cutoff;
    let cutoff = cutoff.as_ms();
    let mut doomed = Vec::new();
    let mut after = None;
    loop {
        let page = pg.node_ages(after, BATCH)?;
        let Some(&(last, _)) = page.last() else {
            break;
        };
        after = Some(last);
        for (hash, created_ms) in page {
            if marked.contains(&hash) {
                continue;
            }
            if created_ms >= cutoff {
                report.young += 1;
            } else {
                doomed.push(hash);
            }
        }
        if doomed.len() >= BATCH {
            sweep_rows(store, pg, &mut doomed, cutoff, options, &mut report)?;
        }
    }
    sweep_rows(store, pg, &mut doomed, cutoff, options, &mut report)?;
    // The rest of the cache: files of nodes the table no longer has (another machine's GC),
    // and abandoned temp files. Young cache files are counted above, as rows.
    let young = report.young;
    gc::sweep_locked(store, &marked, files_cutoff, options, &mut report)?;
    report.young = young;
    report.removed.sort();
    Ok(report)
}

/// Deletes the `doomed` rows (still older than `cutoff`) and their cache files, or in a dry
/// run only notes them; empties `doomed`.
fn sweep_rows(
    store: &Store,
    pg: &PgStore,
    doomed: &mut Vec<Hash>,
    cutoff: i64,
    options: &GcOptions,
    report: &mut GcReport,
) -> Result<(), MaintenanceError> {
    if options.dry_run {
        report.removed.append(doomed);
        return Ok(());
    }
    let deleted = pg.delete_nodes_older_than(doomed, cutoff)?;
    // A row kept by the delete was written again meanwhile: young now.
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

/// What a check of the nodes table found, beyond the problems themselves: which rows exist,
/// and why the damaged ones are.
#[derive(Debug, Default)]
pub struct Rows {
    present: HashSet<Hash>,
    damaged: HashMap<Hash, String>,
}

/// Re-hashes and checks every row of the nodes table (see the module doc).
pub fn check_rows(store: &Store, pg: &PgStore) -> Result<(FsckReport, Rows), MaintenanceError> {
    let mut report = FsckReport::default();
    let mut rows = Rows::default();
    let mut refs: Vec<(Hash, String, Hash)> = Vec::new();
    let mut after = None;
    loop {
        let page = pg.scan_nodes(after, BATCH)?;
        let Some(last) = page.last() else {
            break;
        };
        after = Some(last.hash);
        for row in page {
            report.checked += 1;
            rows.present.insert(row.hash);
            let problem = |message: String| Problem {
                hash: Some(row.hash),
                path: PathBuf::new(),
                message,
            };
            let node = match row.node {
                Ok(node) => node,
                Err(e) => {
                    rows.damaged.insert(row.hash, e.to_string());
                    report.problems.push(problem(e.to_string()));
                    continue;
                }
            };
            let (problems, located) = node_fsck::check_node(store, &node);
            report.problems.extend(problems.into_iter().map(problem));
            refs.extend(located.into_iter().map(|(p, t)| (row.hash, p, t)));
        }
    }
    // References resolved once the table has been read: a row written during the scan below
    // the cursor is looked up on its own.
    for (hash, pointer, target) in refs {
        if !rows.present.contains(&target) && !pg.has_node(target)? {
            report.problems.push(Problem {
                hash: Some(hash),
                path: PathBuf::new(),
                message: node_fsck::dangling(&pointer, target),
            });
        }
    }
    report.problems.sort_by_key(|p| p.hash);
    Ok((report, rows))
}

/// The table's verdicts for [`crate::engine::upkeep::fsck::check_with`]'s walk.
pub struct Table<'a> {
    pub store: &'a Store,
    pub pg: std::sync::Arc<PgStore>,
    pub rows: Rows,
}

impl NodeTable for Table<'_> {
    fn read(&self, hash: Hash) -> Result<Node, Condition> {
        if let Some(why) = self.rows.damaged.get(&hash) {
            return Err(Condition::Corrupt(why.clone()));
        }
        if !self.rows.present.contains(&hash) && !self.pg.has_node(hash).unwrap_or(false) {
            return Err(Condition::Missing);
        }
        // The cache serves an intact row; a damaged cache file is not the node's damage
        // (`check_cache` reports it), so the row is read instead.
        match self.store.get(hash) {
            Ok(node) => Ok(node),
            Err(_) => match self.pg.get_node(hash) {
                Ok(node) => Ok(node),
                Err(PgError::NotFound(_)) => Err(Condition::Missing),
                Err(e) => Err(Condition::Corrupt(e.to_string())),
            },
        }
    }
}

/// The node files of the cache that do not hold their node, and those of nodes the table no
/// longer has: derived files, which `--repair` removes.
pub fn check_cache(
    store: &Store,
    pg: &PgStore,
    rows: &Rows,
) -> Result<Vec<Derived>, MaintenanceError> {
    let mut out = Vec::new();
    for (path, hash) in store.scan_objects()? {
        let Some(hash) = hash else {
            if path.is_file() {
                out.push(Derived {
                    path,
                    problem: "stray file in the node cache: the name is not a node hash".into(),
                });
            }
            continue;
        };
        let problem = match std::fs::read(&path) {
            Err(e) => format!("cached node file cannot be read: {e}"),
            Ok(bytes) => match parse_node_file(hash, &path, &bytes) {
                Err(e) => format!("cached node file: {e}"),
                Ok(_) if !rows.present.contains(&hash) && !pg.has_node(hash)? => {
                    "cached node is no longer in the database".to_owned()
                }
                Ok(_) => continue,
            },
        };
        out.push(Derived { path, problem });
    }
    Ok(out)
}
