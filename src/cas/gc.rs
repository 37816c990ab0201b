//! Garbage collection: mark from the roots along refs, sweep old unmarked nodes.
//!
//! Architecture Invariant: GC never deletes a node a head reaches, nor a live writer's file,
//! whatever the grace period. It holds the store exclusively (`cas/index/lock`) from before it
//! reads the roots until the sweep is done, so no node is written, touched or indexed
//! meanwhile (puts hold the lock shared, and wait). Before the roots it reads the earliest
//! live writer's pin (`store/pins.rs`): a writer that publishes a head after GC read the roots
//! held its pin since before it wrote or touched any node that head names, so sparing every
//! node younger than that pin (less [`PIN_SLACK`]) spares them all. Unpinned, unreachable nodes
//! go once older than the grace period. A re-put of an existing node refreshes its mtime (see
//! `store/mod.rs`), which resets its age. A node that cannot be read during marking stops the
//! collection: sweeping past it could delete what it references. Temp files of a live process
//! (their names carry its pid) are never removed.

use std::collections::HashSet;
use std::fs;
use std::path::Path;
use std::time::{Duration, SystemTime};

use super::builtin;
use super::error::StoreError;
use super::id::Hash;
use super::store::{PIN_SLACK, Store};
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
    /// Unreachable nodes kept because they are younger than the grace period or than the
    /// earliest live writer's pin.
    pub young: usize,
    /// Roots that name no stored node (reported, not fatal).
    pub missing_roots: Vec<Hash>,
    /// Abandoned temp files in `cas/tmp/` removed (or that would be): those older than the
    /// grace period or an hour, whichever is shorter.
    pub temp_files: usize,
}

/// The moment before which an unreachable node may go: its age is at least the grace period,
/// and it is older than the earliest live writer's pin (less [`PIN_SLACK`]).
#[derive(Debug, Clone, Copy)]
pub struct Cutoff {
    now: SystemTime,
    grace: Duration,
    /// The earliest live pin less the slack, if a writer holds one.
    pinned: Option<SystemTime>,
}

impl Cutoff {
    /// The cutoff of a collection starting now, with the earliest live pin `pin` (ms).
    pub(crate) fn new(grace: Duration, pin: Option<u64>) -> Cutoff {
        let pinned = pin.map(|ms| {
            let at = SystemTime::UNIX_EPOCH + Duration::from_millis(ms);
            at.checked_sub(PIN_SLACK).unwrap_or(SystemTime::UNIX_EPOCH)
        });
        Cutoff {
            now: SystemTime::now(),
            grace,
            pinned,
        }
    }

    /// Whether something last modified at `modified` may go.
    pub(crate) fn passed(&self, modified: SystemTime) -> bool {
        let old = self
            .now
            .duration_since(modified)
            .is_ok_and(|age| age >= self.grace);
        old && self.pinned.is_none_or(|pin| modified < pin)
    }

    /// The same in ms since the epoch (a database row's `created_ms`): rows created before it
    /// may go.
    pub(crate) fn as_ms(&self) -> i64 {
        let by_grace = self
            .now
            .checked_sub(self.grace)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let until = self.pinned.map_or(by_grace, |pin| pin.min(by_grace));
        until
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }
}

/// Collects garbage. `roots` reads the roots from the engine's index files (called once the
/// store is held, see the module doc); built-in schemas are always roots.
pub fn gc<E: From<StoreError>>(
    store: &Store,
    roots: impl FnOnce() -> Result<Vec<Hash>, E>,
    options: &GcOptions,
) -> Result<GcReport, E> {
    let mut report = GcReport::default();
    let _hold = store.lock_exclusive()?;
    let cutoff = Cutoff::new(options.grace, store.earliest_pin()?);
    let roots = roots()?;
    let marked = mark(store, &roots, &mut report)?;
    sweep_locked(store, &marked, &cutoff, options, &mut report)?;
    Ok(report)
}

/// Marks every node reachable from `roots` and the built-in schemas (reading through `store`,
/// so with a remote, what is not cached is fetched); notes the count and the roots that name
/// no node in `report`.
pub(crate) fn mark(
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

/// Removes the node files under `cas/objects/` that are not `marked` and modified before
/// `cutoff`, and abandoned temp files; prunes the type index. The caller holds the store
/// exclusively ([`Store::lock_exclusive`]) since before it read the pins and the roots. With a
/// remote these files are only this machine's cache, so this frees disk and decides nothing
/// for others. Hashes already in `report.removed` are not counted twice.
pub(crate) fn sweep_locked(
    store: &Store,
    marked: &HashSet<Hash>,
    cutoff: &Cutoff,
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
        if !modified(&path).is_some_and(|m| cutoff.passed(m)) {
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
    // period, or than an hour (no write takes that long), whichever is shorter, and not of a
    // process still running (a node's temp file exists only under the store lock GC holds,
    // but index files and caches are written outside it).
    let temp_age = options.grace.min(file_util::STALE_TEMP_AGE);
    let abandoned = |name: &str| !file_util::temp_of_live_process(name);
    if options.dry_run {
        for entry in fs::read_dir(store.tmp_dir())
            .map_err(StoreError::io("cannot list", store.tmp_dir()))?
            .flatten()
        {
            let name = entry.file_name();
            let old = modified(&entry.path())
                .is_some_and(|m| now.duration_since(m).is_ok_and(|age| age >= temp_age));
            if old && name.to_str().is_some_and(abandoned) {
                report.temp_files += 1;
            }
        }
    } else {
        report.temp_files = file_util::remove_old_files(store.tmp_dir(), temp_age, abandoned)?;
    }
    if !options.dry_run && (removed_files || !report.removed.is_empty()) {
        store.prune_index_locked()?;
    }
    Ok(())
}

fn modified(path: &Path) -> Option<SystemTime> {
    fs::symlink_metadata(path).and_then(|m| m.modified()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cas::builtin;
    use serde_json::json;

    fn no_grace() -> GcOptions {
        GcOptions {
            grace: Duration::ZERO,
            dry_run: false,
        }
    }

    fn collect(store: &Store) -> GcReport {
        gc(store, || Ok::<_, StoreError>(Vec::new()), &no_grace()).unwrap()
    }

    #[test]
    fn a_live_pin_keeps_what_was_written_after_it_whatever_the_grace() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let writer = Store::open(dir.path()).unwrap();
        let text = builtin::hash_of("text");
        let before = store.put(text, &json!("before the pin")).unwrap();
        // Old enough to pass the pin's slack.
        let old = SystemTime::now() - PIN_SLACK * 2;
        fs::File::open(store.object_path(before))
            .unwrap()
            .set_modified(old)
            .unwrap();
        let pin = writer.pin().unwrap();
        let after = writer.put(text, &json!("after the pin")).unwrap();
        let report = collect(&store);
        assert_eq!(report.removed, vec![before]);
        assert_eq!(report.young, 1);
        assert!(store.has(after));
        drop(pin);
        assert_eq!(collect(&store).removed, vec![after]);
    }

    #[test]
    fn temp_files_of_live_processes_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let ours = store.tmp_dir().join(format!(
            "{}{}-busy",
            file_util::TEMP_PREFIX,
            std::process::id()
        ));
        let unnamed = store
            .tmp_dir()
            .join(format!("{}busy00", file_util::TEMP_PREFIX));
        for path in [&ours, &unnamed] {
            fs::write(path, "partial").unwrap();
        }
        assert_eq!(collect(&store).temp_files, 1);
        assert!(ours.exists() && !unnamed.exists());
    }
}
