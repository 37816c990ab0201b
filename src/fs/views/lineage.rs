//! Lineage as the mount shows it: `forks.jsonl` (see `engine::thread::forks`) read into "where
//! was this thread forked from" (`threads/<id>/origin`) and "which threads were forked from this
//! one" (`threads/<id>/forks/`).
//!
//! Architecture Invariant: like the registry, the file is re-read whenever its stamp changes
//! (and at every look while its mtime is younger than [`super::SETTLE`]), and `forks/`
//! directories take their mtime from the same read, so a cached listing never outlives a fork.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

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

/// One read of `forks.jsonl`: the file's stamp (`None`: absent), its version, what it said.
type Read = (Option<Stamp>, Version, Arc<Index>);

/// The cached read of `forks.jsonl`.
#[derive(Debug, Default)]
pub(super) struct Lineage {
    cached: Mutex<Option<Read>>,
}

impl Source {
    fn lineage(&self) -> Result<(Arc<Index>, Version), FsError> {
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
        let mut index = Index::default();
        for fork in forks::read(&self.root).map_err(FsError::internal)? {
            if let Some(from) = &fork.from {
                index
                    .forks
                    .entry(from.clone())
                    .or_default()
                    .push(Arc::from(fork.thread.as_str()));
            }
            index.origin.insert(fork.thread.clone(), fork);
        }
        let index = Arc::new(index);
        // No file yet: nothing was ever forked, a state as old as the store.
        let version = Version::of([now.map(|s| s.mtime)], read_at, SystemTime::UNIX_EPOCH);
        *cached = Some((now, version, index.clone()));
        Ok((index, version))
    }

    /// Where thread `id` was forked from, if it is a fork whose source is known.
    pub fn origin(&self, id: &str) -> Result<Option<Fork>, FsError> {
        let (index, _) = self.lineage()?;
        Ok(index.origin.get(id).filter(|f| f.from.is_some()).cloned())
    }

    /// The threads forked from `id`, oldest first. All of them: a fork is recorded just
    /// before it enters the thread index, and a listing that left it out for that moment would
    /// be kept by the kernel until the next fork.
    pub fn forks_of(&self, id: &str) -> Result<Vec<Arc<str>>, FsError> {
        let (index, _) = self.lineage()?;
        Ok(index.forks.get(id).cloned().unwrap_or_default())
    }

    /// The mtime of every `threads/<id>/forks/`: the version of `forks.jsonl` (stable while
    /// nothing is forked, so `tar` never sees the directory change under it).
    pub fn forks_mtime(&self) -> Result<SystemTime, FsError> {
        Ok(self.lineage()?.1.time())
    }
}
