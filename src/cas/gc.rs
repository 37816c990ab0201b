//! Garbage collection: mark from the roots along refs, sweep old unmarked nodes.
//!
//! Architecture Invariant: only nodes older than the grace period are swept, so a writer that
//! has put nodes but not yet published the head naming them never loses them. A re-put of an
//! existing node refreshes its mtime (see `store.rs`), which resets its age. A node that cannot be
//! read during marking stops the collection: sweeping past it could delete what it references.

use std::collections::HashSet;
use std::fs;
use std::path::Path;
use std::time::{Duration, SystemTime};

use super::builtin;
use super::error::StoreError;
use super::id::Hash;
use super::store::Store;
use crate::file_util;

/// What a GC run should do.
#[derive(Debug, Clone)]
pub struct GcOptions {
    /// Unreachable nodes younger than this are kept.
    pub grace: Duration,
    /// Report what would be removed without removing anything.
    pub dry_run: bool,
}

impl Default for GcOptions {
    fn default() -> Self {
        GcOptions {
            grace: Duration::from_secs(24 * 3600),
            dry_run: false,
        }
    }
}

/// What a GC run found and did.
#[derive(Debug, Default)]
pub struct GcReport {
    /// Nodes reachable from the roots.
    pub reachable: usize,
    /// Unreachable nodes removed (or that would be, in a dry run).
    pub removed: Vec<Hash>,
    /// Unreachable nodes kept because they are younger than the grace period.
    pub young: usize,
    /// Roots that name no stored node (reported, not fatal).
    pub missing_roots: Vec<Hash>,
    /// Abandoned temp files in `cas/tmp/` removed (or that would be): those older than the
    /// grace period or an hour, whichever is shorter.
    pub temp_files: usize,
}

/// Collects garbage. `roots` come from the engine's index files; built-in schemas are always roots.
pub fn gc(store: &Store, roots: &[Hash], options: &GcOptions) -> Result<GcReport, StoreError> {
    let mut report = GcReport::default();
    let marked = mark(store, roots, &mut report)?;
    sweep_files(store, &marked, options, &mut report)?;
    Ok(report)
}

/// Marks every node reachable from `roots` and the built-in schemas (reading through `store`,
/// so with a remote, what is not cached is fetched); notes the count and the roots that name
/// no node in `report`.
pub fn mark(
    store: &Store,
    roots: &[Hash],
    report: &mut GcReport,
) -> Result<HashSet<Hash>, StoreError> {
    let mut marked: HashSet<Hash> = HashSet::new();
    let mut stack: Vec<Hash> = builtin::all().iter().map(|b| b.hash).collect();
    stack.push(Hash::META);
    for &root in roots {
        if store.has(root) {
            stack.push(root);
        } else {
            report.missing_roots.push(root);
        }
    }
    while let Some(hash) = stack.pop() {
        if !marked.insert(hash) {
            continue;
        }
        match store.refs(hash) {
            Ok(refs) => stack.extend(refs.into_iter().filter(|r| !marked.contains(r))),
            // A dangling ref is fsck's to report; there is nothing below it to keep.
            Err(StoreError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    report.reachable = marked.len();
    Ok(marked)
}

/// Removes the node files under `cas/objects/` that are not `marked` and older than the grace
/// period (by mtime), and abandoned temp files; prunes the type index. With a remote these
/// files are only this machine's cache, so this frees disk and decides nothing for others.
/// Hashes already in `report.removed` are not counted twice.
pub fn sweep_files(
    store: &Store,
    marked: &HashSet<Hash>,
    options: &GcOptions,
    report: &mut GcReport,
) -> Result<(), StoreError> {
    let now = SystemTime::now();
    let already: HashSet<Hash> = report.removed.iter().copied().collect();
    let mut removed_files = false;
    for (path, hash) in store.scan_objects()? {
        let Some(hash) = hash else { continue };
        if marked.contains(&hash) {
            continue;
        }
        if !is_older_than(&path, now, options.grace) {
            if !already.contains(&hash) {
                report.young += 1;
            }
            continue;
        }
        if !options.dry_run {
            match fs::remove_file(&path) {
                Ok(()) => removed_files = true,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(StoreError::io("cannot remove", &path)(e)),
            }
        }
        if !already.contains(&hash) {
            report.removed.push(hash);
        }
    }
    // Temp files of writes that never finished (a killed writer): older than the grace
    // period, or than an hour (no write takes that long), whichever is shorter.
    let temp_age = options.grace.min(file_util::STALE_TEMP_AGE);
    if options.dry_run {
        for entry in fs::read_dir(store.tmp_dir())
            .map_err(StoreError::io("cannot list", store.tmp_dir()))?
            .flatten()
        {
            if is_older_than(&entry.path(), now, temp_age) {
                report.temp_files += 1;
            }
        }
    } else {
        report.temp_files = file_util::remove_old_files(store.tmp_dir(), temp_age, |_| true)?;
    }
    if !options.dry_run && (removed_files || !report.removed.is_empty()) {
        store.prune_index()?;
    }
    Ok(())
}

fn is_older_than(path: &Path, now: SystemTime, grace: Duration) -> bool {
    let modified = fs::symlink_metadata(path).and_then(|m| m.modified());
    match modified {
        Ok(t) => now
            .duration_since(t)
            .map(|age| age >= grace)
            .unwrap_or(false),
        Err(_) => false,
    }
}
