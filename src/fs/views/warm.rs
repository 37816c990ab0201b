//! Rendering ahead: a worker that fills [`Source`]'s caches with a thread's files while the FUSE
//! loop is still answering for the first of them.
//!
//! A cold read of a thread costs two things per file: the kernel's requests, answered one at a
//! time by the FUSE loop, and our own work (loading the chain, reading each step's nodes from
//! the store, rendering YAML, diffs and the transcript). The reader is sequential, so while the
//! loop answers, the machine's other CPU is mostly idle. When a reader first looks up a step file
//! or the transcript of `threads/<id>/` (the files that cost rendering), [`Warmer::thread`]
//! queues that thread, and the worker renders its transcript and every step file, then does the
//! same for the next thread in `threads/` (read-ahead by one, for readers that go through all
//! threads in listing order: `grep -r`, `cat` of a `find`; the previous thread when the reader's
//! last two threads went backwards, as a `find` of a copy on tmpfs lists them), so the loop finds
//! them ready.
//!
//! Architecture Invariant: the worker only fills caches that are keyed by hashes (chains by
//! head, rendered files by step hash, payloads by node hash), so it can never make anything
//! stale, and those caches are bounded as always; what it renders is what a reader of the
//! thread asks for next. A `find`, an `ls` or a `cat threads/*/status` queues nothing, each
//! thread is warmed once in a while at most, and the queue is short and drops work when full:
//! warming is an optimization, never a duty.

use std::collections::{HashSet, VecDeque};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

use super::{Source, lock};
use crate::fs::inode::StepFile;

/// Threads waiting to be warmed, at most.
const QUEUE: usize = 16;
/// Threads remembered as recently queued (not queued again).
const RECENT: usize = 256;

/// Queues threads for the warming worker.
pub(crate) struct Warmer {
    tx: SyncSender<Arc<str>>,
    recent: Mutex<Recent>,
}

impl std::fmt::Debug for Warmer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Warmer").finish_non_exhaustive()
    }
}

/// A set that forgets its oldest members beyond [`RECENT`].
#[derive(Default)]
struct Recent {
    set: HashSet<Arc<str>>,
    order: VecDeque<Arc<str>>,
}

impl Recent {
    /// Adds `id`; false when it was there already.
    fn insert(&mut self, id: &Arc<str>) -> bool {
        if !self.set.insert(id.clone()) {
            return false;
        }
        self.order.push_back(id.clone());
        while self.order.len() > RECENT {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
        true
    }
}

impl Warmer {
    /// Starts the worker; it ends when the warmer is dropped. Without a worker (the thread could
    /// not start) queued threads are simply dropped.
    pub(crate) fn start(source: Arc<Source>) -> Warmer {
        let (tx, rx) = mpsc::sync_channel::<Arc<str>>(QUEUE);
        let _ = std::thread::Builder::new()
            .name("uwf-warm".to_owned())
            .spawn(move || {
                let mut warmed = Recent::default();
                let mut last: Option<Arc<str>> = None;
                for id in rx {
                    // A reader going through the threads backwards (the order of a `find` on
                    // tmpfs or ext4 copies, newest first) gets the thread before next.
                    let backward = last.as_ref().is_some_and(|l| **l > *id);
                    last = Some(id.clone());
                    // A panic here must not end warming for good, nor anything else.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        // The reader is at this thread's first rendered file already.
                        if warmed.insert(&id) {
                            source.warm_thread(&id, Order::StepsFirst);
                        }
                        if let Some(next) = source.neighbour_thread(&id, backward)
                            && warmed.insert(&next)
                        {
                            source.warm_thread(&next, Order::Listing);
                        }
                    }));
                }
            });
        Warmer {
            tx,
            recent: Mutex::new(Recent::default()),
        }
    }

    /// A reader started on thread `id`'s rendered files: render them, and the next thread's,
    /// ahead (once in a while per thread).
    pub(crate) fn thread(&self, id: &Arc<str>) {
        if !lock(&self.recent).insert(id) {
            return;
        }
        match self.tx.try_send(id.clone()) {
            Ok(()) | Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {}
        }
    }
}

/// In which order to warm a thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Order {
    /// As `find` lists them: the transcript (in the thread directory), then `steps/`.
    Listing,
    /// The steps first: the reader is rendering the transcript itself right now.
    StepsFirst,
}

impl Source {
    /// The thread listed after `id` in `threads/` (before it when `backward`).
    pub(crate) fn neighbour_thread(&self, id: &str, backward: bool) -> Option<Arc<str>> {
        let ids = self.thread_ids().ok()?;
        let at = match (ids.binary_search_by(|t| (**t).cmp(id)), backward) {
            (Ok(i), false) => i + 1,
            (Err(i), false) => i,
            (Ok(i) | Err(i), true) => i.checked_sub(1)?,
        };
        ids.get(at).cloned()
    }

    /// Renders thread `id`'s transcript (a finished thread's; an active one's changes) and every
    /// file of its steps into the caches. Errors end the warming quietly: the reader will meet
    /// them itself.
    pub(crate) fn warm_thread(&self, id: &str, order: Order) {
        let Ok(Some(t)) = self.thread(id) else {
            return;
        };
        let Ok(chain) = self.chain(t.head) else {
            return;
        };
        // The run files are read and stat'ed live (never cached), but touching them brings
        // their inodes into the kernel's caches, which a cold store (after drop_caches, or
        // long idle) would otherwise make the FUSE loop wait for.
        let files = self.run_files(id);
        let _ = files.last_outcome();
        let _ = Source::run_file_stat(&files.log());
        let _ = Source::run_file_stat(&files.error());
        let summary = self.summary(id, &t);
        let transcript = || {
            if t.finished()
                && let Ok(summary) = &summary
            {
                let status = summary.status_line(&files);
                let _ = self.transcript(id, &t, &status);
            }
        };
        if order == Order::Listing {
            transcript();
        }
        for index in 0..chain.steps.len() {
            for file in StepFile::ALL {
                let _ = self.step_content(&chain, index, file);
            }
        }
        if order == Order::StepsFirst {
            transcript();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_threads_are_queued_once_until_forgotten() {
        let mut r = Recent::default();
        let a: Arc<str> = Arc::from("A");
        assert!(r.insert(&a));
        assert!(!r.insert(&a));
        for i in 0..RECENT {
            r.insert(&Arc::from(format!("t{i}")));
        }
        assert!(r.insert(&a), "forgotten after {RECENT} others");
        assert!(r.order.len() <= RECENT);
    }
}
