//! Lineage as the mount shows it: `forks.jsonl` (see `engine::thread::forks`) read into "where
//! was this thread forked from" (`threads/<id>/origin`) and "which threads were forked from this
//! one" (`threads/<id>/forks/`).
//!
//! Over PostgreSQL the forks are rows of the database (written by any machine): read again like
//! the thread index, after a notification or a change through the mount, and at least every
//! second while someone looks (`views/watch.rs`).
//!
//! Architecture Invariant: like the registry, the file is re-read whenever its stamp changes
//! (and at every look while its mtime is younger than [`super::SETTLE`]), and `forks/`
//! directories take their mtime from the same read, so a cached listing never outlives a fork.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use super::watch::PgRead;
use super::{Source, Stamp, Version, lock, stamp};
use crate::engine::thread::forks::{self, Fork};
use crate::fs::error::FsError;

/// The forks file, read.
#[derive(Debug, Default)]
struct Index {
    origin: HashMap<String, Fork>,
    /// Source thread → its forks, oldest first.
    forks: HashMap<String, Vec<Arc<str>>>,
}

impl Index {
    fn of(all: Vec<Fork>) -> Index {
        let mut index = Index::default();
        for fork in all {
            if let Some(from) = &fork.from {
                index
                    .forks
                    .entry(from.clone())
                    .or_default()
                    .push(Arc::from(fork.thread.as_str()));
            }
            index.origin.insert(fork.thread.clone(), fork);
        }
        index
    }
}

/// One read of the forks over PostgreSQL, and the index made of it.
type PgLineage = (PgRead<Vec<Fork>>, Arc<Index>);

/// One read of `forks.jsonl`: the file's stamp (`None`: absent), its version, what it said.
type Read = (Option<Stamp>, Version, Arc<Index>);

/// The cached read of `forks.jsonl`.
#[derive(Debug, Default)]
pub(super) struct Lineage {
    cached: Mutex<Option<Read>>,
    /// Over PostgreSQL: the last read of the forks and the index made of it.
    pg: Mutex<Option<PgLineage>>,
}

impl Source {
    fn lineage(&self) -> Result<(Arc<Index>, Version), FsError> {
        if self.watch.by_notification() {
            return self.pg_lineage();
        }
        let path = forks::path(&self.root);
        let read_at = SystemTime::now();
        let now = stamp(&path);
        let mut cached = lock(&self.lineage.cached);
        // An absent file (nothing ever forked) is a state too, cached like any other.
        if let Some((s, v @ Version::Settled(_), index)) = cached.as_ref()
            && *s == now
        {
            return Ok((index.clone(), *v));
        }
        let index = Arc::new(Index::of(
            forks::read(&self.root).map_err(FsError::internal)?,
        ));
        // No file yet: nothing was ever forked, a state as old as the store.
        let version = Version::of([now.map(|s| s.mtime)], read_at, SystemTime::UNIX_EPOCH);
        *cached = Some((now, version, index.clone()));
        Ok((index, version))
    }

    /// The forks over PostgreSQL, read again when the thread index would be.
    fn pg_lineage(&self) -> Result<(Arc<Index>, Version), FsError> {
        let counts = (
            self.threads.generation.load(Ordering::SeqCst),
            self.watch.notified(),
        );
        let mut cached = lock(&self.lineage.pg);
        if let Some((read, index)) = cached.as_ref()
            && read.fresh(counts.0, counts.1)
        {
            return Ok((index.clone(), read.version));
        }
        let read_at = SystemTime::now();
        let all = forks::read(&self.root).map_err(FsError::internal)?;
        let previous = cached.as_ref().map(|(r, _)| r);
        let read = PgRead::next(previous, all, read_at, counts);
        let index = match cached.as_ref() {
            Some((old, index)) if Arc::ptr_eq(&old.value, &read.value) => index.clone(),
            _ => Arc::new(Index::of(read.value.as_ref().clone())),
        };
        let found = (index.clone(), read.version);
        *cached = Some((read, index));
        Ok(found)
    }

    /// Where thread `id` was forked from, if it is a fork whose source is known.
    pub(crate) fn origin(&self, id: &str) -> Result<Option<Fork>, FsError> {
        let (index, _) = self.lineage()?;
        Ok(index.origin.get(id).filter(|f| f.from.is_some()).cloned())
    }

    /// The threads forked from `id`, oldest first. All of them: a fork is recorded just
    /// before it enters the thread index, and a listing that left it out for that moment would
    /// be kept by the kernel until the next fork.
    pub(crate) fn forks_of(&self, id: &str) -> Result<Vec<Arc<str>>, FsError> {
        let (index, _) = self.lineage()?;
        Ok(index.forks.get(id).cloned().unwrap_or_default())
    }

    /// The mtime of every `threads/<id>/forks/`: the version of `forks.jsonl` (stable while
    /// nothing is forked, so `tar` never sees the directory change under it).
    pub(crate) fn forks_mtime(&self) -> Result<SystemTime, FsError> {
        Ok(self.lineage()?.1.time())
    }
}
