//! Scratch files: what editors and tools create in writable directories, kept in memory.
//!
//! Editors make swap files, lock files, probe files (`4913`), backups and temp files next to the
//! file they save; none of that belongs in the store. A scratch file lives in memory until it is
//! deleted, renamed onto a meaningful name (which saves it), or the mount ends. Drafts of a
//! `workflow.yaml` being written are scratch files too, only without a name.
//!
//! Architecture Invariant: memory is bounded. One file may not grow past [`Limits::file`] (EFBIG,
//! checked *before* allocating, so `truncate -s 1T` costs nothing), all scratch data together
//! past [`Limits::total`], and there are at most [`Limits::count`] files (ENOSPC).

use std::collections::{BTreeMap, HashMap};
use std::time::SystemTime;

use super::error::FsError;
use super::inode::Key;

/// Memory bounds for scratch files.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Largest size of one file, in bytes.
    pub file: u64,
    /// Largest size of all scratch data together, in bytes.
    pub total: u64,
    /// Most files at once.
    pub count: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            file: 16 << 20,
            total: 256 << 20,
            count: 4096,
        }
    }
}

/// One scratch file.
#[derive(Debug, Clone)]
pub(crate) struct Scratch {
    /// The directory it is in, and its name there; `None` once unlinked (or for a draft).
    pub place: Option<(Key, String)>,
    pub data: Vec<u8>,
    pub mode: u16,
    pub uid: u32,
    pub gid: u32,
    pub atime: SystemTime,
    pub mtime: SystemTime,
    pub ctime: SystemTime,
    /// Open handles, and how many of them can write.
    pub handles: u32,
    pub writers: u32,
    /// Changed since it was last saved (or since it was created).
    pub dirty: bool,
}

/// All scratch files of a mount.
#[derive(Debug, Default)]
pub(crate) struct Scratches {
    files: HashMap<u64, Scratch>,
    /// (directory, name) → id, sorted so listings come out in a stable order.
    names: BTreeMap<(Key, String), u64>,
    next: u64,
    bytes: u64,
    limits: Limits,
}

impl Scratches {
    pub(crate) fn new(limits: Limits) -> Scratches {
        Scratches {
            limits,
            next: 1,
            ..Scratches::default()
        }
    }

    /// Creates an empty file; `place` is `None` for a draft.
    pub(crate) fn create(
        &mut self,
        place: Option<(Key, String)>,
        mode: u16,
        uid: u32,
        gid: u32,
    ) -> Result<u64, FsError> {
        if self.files.len() >= self.limits.count {
            return Err(FsError::NoSpace("too many scratch files; delete some"));
        }
        if let Some(p) = &place
            && self.names.contains_key(p)
        {
            return Err(FsError::Exists);
        }
        let id = self.next;
        self.next += 1;
        let now = SystemTime::now();
        if let Some(p) = &place {
            self.names.insert(p.clone(), id);
        }
        self.files.insert(
            id,
            Scratch {
                place,
                data: Vec::new(),
                mode,
                uid,
                gid,
                atime: now,
                mtime: now,
                ctime: now,
                handles: 0,
                writers: 0,
                dirty: false,
            },
        );
        Ok(id)
    }

    /// Creates a file holding `data` (a copy of a view, a draft).
    pub(crate) fn create_with(
        &mut self,
        place: Option<(Key, String)>,
        data: &[u8],
        mode: u16,
        uid: u32,
        gid: u32,
    ) -> Result<u64, FsError> {
        let id = self.create(place, mode, uid, gid)?;
        if let Err(e) = self.write(id, 0, data) {
            self.remove(id);
            return Err(e);
        }
        if let Some(f) = self.files.get_mut(&id) {
            f.dirty = false;
        }
        Ok(id)
    }

    pub(crate) fn get(&self, id: u64) -> Option<&Scratch> {
        self.files.get(&id)
    }

    pub(crate) fn get_mut(&mut self, id: u64) -> Option<&mut Scratch> {
        self.files.get_mut(&id)
    }

    /// The file at `name` in `dir`.
    pub(crate) fn find(&self, dir: &Key, name: &str) -> Option<u64> {
        self.names.get(&(dir.clone(), name.to_owned())).copied()
    }

    /// Names and ids of the files in `dir`, sorted by name.
    pub(crate) fn list(&self, dir: &Key) -> Vec<(String, u64)> {
        self.names
            .range((dir.clone(), String::new())..)
            .take_while(|((d, _), _)| d == dir)
            .map(|((_, n), id)| (n.clone(), *id))
            .collect()
    }

    /// Whether `dir` holds any scratch file.
    pub(crate) fn any_in(&self, dir: &Key) -> bool {
        self.names
            .range((dir.clone(), String::new())..)
            .next()
            .is_some_and(|((d, _), _)| d == dir)
    }

    /// Writes `data` at `offset`, growing the file (zero-filled) as needed.
    pub(crate) fn write(&mut self, id: u64, offset: u64, data: &[u8]) -> Result<u32, FsError> {
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or(FsError::TooBig {
                limit: self.limits.file,
            })?;
        self.reserve(id, end)?;
        let file = self.files.get_mut(&id).ok_or(FsError::BadHandle)?;
        let (offset, end) = (offset as usize, end as usize);
        if file.data.len() < end {
            file.data.resize(end, 0);
        }
        file.data[offset..end].copy_from_slice(data);
        touch(file);
        Ok(data.len() as u32)
    }

    /// Sets the size, cutting or zero-filling.
    pub(crate) fn truncate(&mut self, id: u64, size: u64) -> Result<(), FsError> {
        self.reserve(id, size)?;
        let file = self.files.get_mut(&id).ok_or(FsError::BadHandle)?;
        let old = file.data.len() as u64;
        if size < old {
            self.bytes -= old - size;
        }
        file.data.resize(size as usize, 0);
        file.data.shrink_to(file.data.len().max(4096));
        touch(file);
        Ok(())
    }

    /// Checks the limits for growing `id` to `size` and books the growth.
    fn reserve(&mut self, id: u64, size: u64) -> Result<(), FsError> {
        if size > self.limits.file {
            return Err(FsError::TooBig {
                limit: self.limits.file,
            });
        }
        let old = self.files.get(&id).ok_or(FsError::BadHandle)?.data.len() as u64;
        if size > old {
            let grow = size - old;
            if self.bytes + grow > self.limits.total {
                return Err(FsError::NoSpace(
                    "scratch files use all the memory allowed; delete some",
                ));
            }
            self.bytes += grow;
        }
        Ok(())
    }

    /// Removes the name of a file; the data stays while handles are open.
    pub(crate) fn unlink(&mut self, id: u64) {
        if let Some(file) = self.files.get_mut(&id)
            && let Some(place) = file.place.take()
        {
            self.names.remove(&place);
            file.ctime = SystemTime::now();
        }
        self.collect(id);
    }

    /// Gives a file a new name (the caller has removed whatever was there).
    pub(crate) fn rename(&mut self, id: u64, place: (Key, String)) {
        let Some(file) = self.files.get_mut(&id) else {
            return;
        };
        if let Some(old) = file.place.take() {
            self.names.remove(&old);
        }
        self.names.insert(place.clone(), id);
        file.place = Some(place);
        file.ctime = SystemTime::now();
    }

    /// Drops a file whatever its state.
    pub(crate) fn remove(&mut self, id: u64) -> Option<Scratch> {
        let file = self.files.remove(&id)?;
        if let Some(place) = &file.place {
            self.names.remove(place);
        }
        self.bytes -= file.data.len() as u64;
        Some(file)
    }

    /// Drops a file that has neither a name nor open handles.
    pub(crate) fn collect(&mut self, id: u64) {
        if self
            .files
            .get(&id)
            .is_some_and(|f| f.place.is_none() && f.handles == 0)
        {
            self.remove(id);
        }
    }

    /// Bytes held by all scratch files.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }
}

fn touch(file: &mut Scratch) {
    let now = SystemTime::now();
    file.mtime = now;
    file.ctime = now;
    file.dirty = true;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::inode::{CasKey, WfKey};

    fn small() -> Scratches {
        Scratches::new(Limits {
            file: 100,
            total: 150,
            count: 3,
        })
    }

    #[test]
    fn writes_grow_and_truncate_cuts() {
        let mut s = small();
        let id = s
            .create(Some((Key::Workflows(WfKey::Root), "a".into())), 0o644, 0, 0)
            .unwrap();
        s.write(id, 3, b"xy").unwrap();
        assert_eq!(s.get(id).unwrap().data, b"\0\0\0xy");
        s.truncate(id, 1).unwrap();
        assert_eq!(s.get(id).unwrap().data, b"\0");
        assert_eq!(s.bytes(), 1);
    }

    #[test]
    fn limits_refuse_before_allocating() {
        let mut s = small();
        let a = s
            .create(Some((Key::Workflows(WfKey::Root), "a".into())), 0o644, 0, 0)
            .unwrap();
        assert_eq!(s.truncate(a, 1 << 50), Err(FsError::TooBig { limit: 100 }));
        assert!(matches!(
            s.write(a, u64::MAX - 1, b"xx"),
            Err(FsError::TooBig { .. })
        ));
        s.truncate(a, 100).unwrap();
        let b = s
            .create(Some((Key::Workflows(WfKey::Root), "b".into())), 0o644, 0, 0)
            .unwrap();
        assert!(matches!(s.truncate(b, 60), Err(FsError::NoSpace(_))));
        s.create(None, 0o644, 0, 0).unwrap();
        assert!(matches!(
            s.create(None, 0o644, 0, 0),
            Err(FsError::NoSpace(_))
        ));
    }

    #[test]
    fn unlinked_files_live_until_the_last_handle_closes() {
        let mut s = small();
        let id = s
            .create(Some((Key::Workflows(WfKey::Root), "a".into())), 0o644, 0, 0)
            .unwrap();
        s.get_mut(id).unwrap().handles = 1;
        s.unlink(id);
        assert!(s.get(id).is_some());
        assert_eq!(s.find(&Key::Workflows(WfKey::Root), "a"), None);
        s.get_mut(id).unwrap().handles = 0;
        s.collect(id);
        assert!(s.get(id).is_none());
    }

    #[test]
    fn listing_is_per_directory_and_sorted() {
        let mut s = small();
        let d = Key::Workflows(WfKey::Dir("x".into()));
        s.create(Some((d.clone(), "b".into())), 0o644, 0, 0)
            .unwrap();
        s.create(Some((Key::Workflows(WfKey::Root), "z".into())), 0o644, 0, 0)
            .unwrap();
        s.create(Some((d.clone(), "a".into())), 0o644, 0, 0)
            .unwrap();
        let names: Vec<_> = s.list(&d).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["a", "b"]);
        assert!(s.any_in(&Key::Workflows(WfKey::Root)));
        assert!(!s.any_in(&Key::Cas(CasKey::Root)));
    }
}
