//! A directory store's nodes: the files under `cas/objects`, written by a few threads at once
//! when copied and made durable with one `syncfs` of the whole filesystem.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::path::Path;
use std::time::SystemTime;

use crate::cas::gc::Cutoff;
use crate::cas::{Hash, Node, Store, StoreError};

use super::{Condition, Derived, MaintenanceError, Nodes, Stored};

/// How many threads write node files at once.
const WRITERS: usize = 4;

/// The node files of a [`Store`] (owned, or borrowed from the caller).
pub(in crate::engine::storage::seam) struct DirNodes<S>(pub S);

impl<S: Borrow<Store> + Send + Sync> Nodes for DirNodes<S> {
    fn list_all(&self) -> Result<Vec<Hash>, MaintenanceError> {
        Ok(self.0.borrow().list_all()?)
    }

    fn read(&self, hash: Hash) -> Result<Node, MaintenanceError> {
        Ok(self.0.borrow().get(hash)?)
    }

    fn read_many(&self, hashes: &[Hash]) -> Result<Vec<Node>, MaintenanceError> {
        let store = self.0.borrow();
        Ok(hashes
            .iter()
            .map(|h| store.get(*h))
            .collect::<Result<_, _>>()?)
    }

    fn write_copied(&self, nodes: &[Node]) -> Result<usize, MaintenanceError> {
        let store = self.0.borrow();
        // Each node is a handful of system calls on its own file: a few writers at once keep
        // the disk busy while one of them waits.
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

    fn sync(&self) -> Result<(), MaintenanceError> {
        syncfs(self.0.borrow().root())
    }

    fn local(&self) -> Option<&Store> {
        Some(self.0.borrow())
    }

    /// A file's age is its mtime (a re-put refreshes it).
    fn each_age(
        &self,
        cutoff: &Cutoff,
        each: &mut dyn FnMut(Hash, bool) -> Result<(), MaintenanceError>,
    ) -> Result<(), MaintenanceError> {
        for (path, hash) in self.0.borrow().scan_objects()? {
            if let Some(hash) = hash {
                each(hash, modified(&path).is_some_and(|m| cutoff.passed(m)))?;
            }
        }
        Ok(())
    }

    /// Nothing re-puts a file while the store is held exclusively, so no age is re-checked.
    fn delete(&self, hashes: &[Hash], _cutoff: &Cutoff) -> Result<Vec<Hash>, MaintenanceError> {
        let store = self.0.borrow();
        for hash in hashes {
            let path = store.object_path(*hash);
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(StoreError::io("cannot remove", &path)(e).into()),
            }
        }
        Ok(hashes.to_vec())
    }

    fn each_stored(&self, each: &mut dyn FnMut(Stored)) -> Result<(), MaintenanceError> {
        let store = self.0.borrow();
        for (path, hash) in store.scan_objects()? {
            let node = match hash {
                Some(hash) => store.get(hash).map_err(|e| e.to_string()),
                None => Err(String::new()),
            };
            each(Stored { hash, path, node });
        }
        Ok(())
    }

    fn has(&self, hash: Hash) -> Result<bool, MaintenanceError> {
        Ok(self.0.borrow().has(hash))
    }

    fn read_checked(&self, hash: Hash) -> Result<Node, Condition> {
        match self.0.borrow().get(hash) {
            Ok(node) => Ok(node),
            Err(StoreError::NotFound(_)) => Err(Condition::Missing),
            Err(e) => Err(Condition::Corrupt(e.to_string())),
        }
    }

    /// The files are the nodes: nothing caches them.
    fn check_cache(&self, _present: &HashSet<Hash>) -> Result<Vec<Derived>, MaintenanceError> {
        Ok(Vec::new())
    }
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .ok()
}

/// Flushes the filesystem holding `root` to disk (`syncfs(2)`).
fn syncfs(root: &std::path::Path) -> Result<(), MaintenanceError> {
    use std::os::fd::AsRawFd;
    let sync_error = |source| MaintenanceError::Sync {
        path: root.to_path_buf(),
        source,
    };
    let dir = std::fs::File::open(root).map_err(sync_error)?;
    // SAFETY: `dir` is an open descriptor for the duration of the call; syncfs only reads it.
    let rc = unsafe { libc::syncfs(dir.as_raw_fd()) };
    if rc != 0 {
        return Err(sync_error(std::io::Error::last_os_error()));
    }
    Ok(())
}
