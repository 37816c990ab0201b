//! A cache of routing decisions: the role the moderator picks for a thread at a given head.
//!
//! A decision is a pure function of the workflow and the chain ending at the head (both
//! immutable), unless a condition reads the clock or a random number. So the decision a step
//! computes after publishing its head (to know whether the thread is done) is kept under
//! `<root>/cache/decisions/<head>.json` and reused by the next step and by status queries,
//! which then need no JSONata evaluation at all. Workflows whose conditions call `$now`,
//! `$millis` or `$random` are never cached.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::cas::{Hash, Store};

use crate::engine::workflow::Workflow;

/// A cached decision. It names its head: files are recycled (see [`remember`]), so a reader
/// holding an old one open could read another head's decision.
#[derive(Debug, Serialize, Deserialize)]
struct Cached {
    head: Hash,
    workflow: Hash,
    next: String,
}

fn path(store: &Store, head: Hash) -> PathBuf {
    crate::engine::chain::cache_file(store, "decisions", &format!("{head}.json"))
}

/// Whether decisions of this workflow may be cached (no clock or randomness in its conditions).
pub(crate) fn cacheable(workflow: &Workflow) -> bool {
    !workflow.conditions.values().any(|c| {
        ["$now", "$millis", "$random"]
            .iter()
            .any(|f| c.expression.contains(f))
    })
}

/// The cached next role of `workflow` at `head`, if any.
pub(crate) fn cached_next(
    store: &Store,
    workflow_hash: Hash,
    workflow: &Workflow,
    head: Hash,
) -> Option<String> {
    if !cacheable(workflow) {
        return None;
    }
    let bytes = std::fs::read(path(store, head)).ok()?;
    let cached: Cached = serde_json::from_slice(&bytes).ok()?;
    (cached.head == head && cached.workflow == workflow_hash).then_some(cached.next)
}

/// Remembers a decision (best effort: the cache only saves time). `retired` is the thread's
/// previous head, which no thread has as its head any more: its decision file is dropped and
/// its inode reused through the thread's spare file ([`crate::file_util::write_recycling`]).
#[cfg(test)]
pub(crate) fn remember(
    store: &Store,
    workflow_hash: Hash,
    workflow: &Workflow,
    head: Hash,
    next: &str,
    (thread, retired): (&str, Hash),
) {
    if cacheable(workflow) {
        write(store.root(), workflow_hash, head, next, (thread, retired));
    }
}

/// [`remember`] for a workflow known to be [`cacheable`].
pub(crate) fn write(
    root: &std::path::Path,
    workflow_hash: Hash,
    head: Hash,
    next: &str,
    (thread, retired): (&str, Hash),
) {
    let Ok(bytes) = serde_json::to_vec(&Cached {
        head,
        workflow: workflow_hash,
        next: next.to_owned(),
    }) else {
        return;
    };
    let file = |name: String| crate::engine::chain::cache_file_in(root, "decisions", &name);
    let _ = crate::file_util::write_recycling(
        &file(format!("{thread}.spare")),
        &file(format!("{head}.json")),
        &bytes,
        Some(&file(format!("{retired}.json"))),
    );
}

/// The file whose inode a thread's next step reuses for its decision.
fn spare_path(store: &Store, thread: &str) -> PathBuf {
    crate::engine::chain::cache_file(store, "decisions", &format!("{thread}.spare"))
}

/// Removes `thread`'s spare decision file (an archived thread takes no more steps).
pub(crate) fn drop_spare(store: &Store, thread: &str) {
    let _ = std::fs::remove_file(spare_path(store, thread));
}

/// Checks a decision file against the store: it parses, names the head it is filed under, and
/// says what the moderator decides now from the nodes alone. The error says how it disagrees.
pub(crate) fn check_file(store: &Store, head: Hash, bytes: &[u8]) -> Result<(), String> {
    let cached: Cached = serde_json::from_slice(bytes).map_err(|e| format!("damaged: {e}"))?;
    if cached.head != head {
        return Err(format!("it holds the decision at {}", cached.head));
    }
    let workflow = Workflow::load(store, cached.workflow)
        .map_err(|e| format!("its workflow cannot be read: {e}"))?;
    let chain = crate::engine::chain::load_from_nodes(store, head)
        .map_err(|e| format!("the store cannot rebuild its chain: {e}"))?;
    let moderator = crate::engine::workflow::moderator::Moderator::new(workflow)
        .map_err(|e| format!("its workflow's moderator: {e}"))?;
    match moderator.decide_chain(&chain) {
        Ok(d) if d.next == cached.next => Ok(()),
        Ok(d) => Err(format!(
            "it says `{}`, the moderator now says `{}`",
            cached.next, d.next
        )),
        Err(e) => Err(format!("the moderator cannot decide there now: {e}")),
    }
}

/// Drops the decision of a head that is no longer any thread's head.
#[cfg(test)]
pub(crate) fn forget(store: &Store, head: Hash) {
    forget_in(store.root(), head);
}

/// [`forget`] under the storage root `root`.
pub(crate) fn forget_in(root: &std::path::Path, head: Hash) {
    let file = crate::engine::chain::cache_file_in(root, "decisions", &format!("{head}.json"));
    let _ = std::fs::remove_file(file);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::workflow;

    fn wf(expression: &str) -> Workflow {
        let yaml = format!(
            "name: w\nroles:\n  a: {{ meta: {{ type: object }} }}\nconditions:\n  c: {{ expression: \"{expression}\" }}\n\
             graph:\n  $START: [ {{ role: a, condition: null }} ]\n  a: [ {{ role: a, condition: c }}, {{ role: $END, condition: null }} ]\n"
        );
        workflow::parse(&yaml).unwrap().definition.workflow
    }

    #[test]
    fn decisions_round_trip_per_workflow_and_skip_clock_conditions() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let w = wf("$count(steps) < 3");
        let (wh, head) = (Hash::from_u64(1), Hash::from_u64(2));
        assert_eq!(cached_next(&store, wh, &w, head), None);
        remember(&store, wh, &w, head, "a", ("T", Hash::from_u64(99)));
        assert_eq!(cached_next(&store, wh, &w, head).as_deref(), Some("a"));
        // Another workflow version at the same head does not see it.
        assert_eq!(cached_next(&store, Hash::from_u64(3), &w, head), None);
        forget(&store, head);
        assert_eq!(cached_next(&store, wh, &w, head), None);

        // A step's decision takes over its previous head's file; one spare per thread.
        let (h2, h3) = (Hash::from_u64(4), Hash::from_u64(5));
        remember(&store, wh, &w, h2, "a", ("T", head));
        remember(&store, wh, &w, h3, "$END", ("T", h2));
        assert_eq!(cached_next(&store, wh, &w, h3).as_deref(), Some("$END"));
        assert_eq!(cached_next(&store, wh, &w, h2), None);
        let mut names: Vec<_> = std::fs::read_dir(dir.path().join("cache/decisions"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, [format!("{h3}.json"), "T.spare".into()]);
        drop_spare(&store, "T");
        assert!(!spare_path(&store, "T").exists());
        // A file read under another head's name is not that head's decision.
        std::fs::copy(path(&store, h3), path(&store, h2)).unwrap();
        assert_eq!(cached_next(&store, wh, &w, h2), None);

        let timed = wf("$millis() > 0");
        assert!(!cacheable(&timed));
        remember(&store, wh, &timed, head, "a", ("T", h3));
        assert_eq!(cached_next(&store, wh, &timed, head), None);
    }
}
