//! The inode table: which inode number stands for which entry of the tree.
//!
//! Entries are named by a [`Key`] (what the entry *is*: "the `hash` file of workflow
//! `solve-issue`", "scratch file 7"), not by a path, so a renamed scratch file keeps its inode and
//! a view keeps its inode across refreshes. Numbers are handed out on first sight and never
//! reused (a `u64` counter), so generation numbers are not needed.
//!
//! Architecture Invariant: the table mirrors the kernel's view of identity. When a rename moves an
//! inode in the kernel's dentry cache, [`InodeTable::rebind`] moves the same inode number to the
//! entry now at that name, so what the kernel caches under a name and what the core answers for
//! that inode always agree. Entries the kernel has forgotten (lookup count back to zero) are
//! dropped, so the table stays as small as the kernel's cache.

use std::collections::HashMap;
use std::sync::Arc;

use crate::cas::Hash;

use super::views::{StepFile, ThreadFile};

/// An inode number.
pub type Ino = u64;

/// The root directory's inode number (fixed by FUSE).
pub const ROOT: Ino = 1;

/// What an inode is. Views are named by what they show; scratch files by their id.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Key {
    Root,
    Readme,
    Workflows,
    WorkflowsError,
    /// `workflows/<name>/`
    WfDir(Arc<str>),
    /// `workflows/<name>/workflow.yaml`
    WfYaml(Arc<str>),
    /// `workflows/<name>/hash`
    WfHash(Arc<str>),
    /// `workflows/<name>/graph.mmd`
    WfGraph(Arc<str>),
    /// `workflows/<name>/versions/`
    WfVersions(Arc<str>),
    /// `workflows/<name>/versions/<hash>.yaml`
    WfVersion(Arc<str>, Hash),
    Cas,
    /// `cas/<hash>`
    CasNode(Hash),
    CasSchemas,
    /// `cas/schemas/<hash>.json`
    CasSchema(Hash),
    /// `workflows/<name>/prompt`: write a prompt and close → a new thread.
    WfPrompt(Arc<str>),
    /// `workflows/<name>/latest` → the newest thread of the workflow.
    WfLatest(Arc<str>),
    /// `workflows/<name>/threads/`
    WfThreads(Arc<str>),
    /// `workflows/<name>/threads/<id>` → `../../../threads/<id>`
    WfThreadLink(Arc<str>, Arc<str>),
    /// `threads/`
    Threads,
    /// `threads/<id>/`
    Thread(Arc<str>),
    /// `threads/<id>/<file>` (`steps/` aside)
    ThreadFile(Arc<str>, ThreadFile),
    /// `threads/<id>/steps/`
    Steps(Arc<str>),
    /// `threads/<id>/steps/latest` → `NNN-role`
    StepsLatest(Arc<str>),
    /// `threads/<id>/steps/NNN-role/` (0-based index)
    StepDir(Arc<str>, u32),
    /// `threads/<id>/steps/NNN-role/<file>`
    StepFile(Arc<str>, u32, StepFile),
    /// A file created by a user in a writable directory, kept in memory.
    Scratch(u64),
    /// An inode whose entry went away (replaced by a rename, or unlinked) while the kernel may
    /// still hold it: it answers ENOENT.
    Gone,
}

#[derive(Debug)]
struct Slot {
    key: Key,
    lookups: u64,
    /// The kernel's page cache for this inode was filled (see [`InodeTable::first_fill`]).
    filled: bool,
}

/// Inode numbers ↔ keys.
#[derive(Debug)]
pub struct InodeTable {
    by_key: HashMap<Key, Ino>,
    by_ino: HashMap<Ino, Slot>,
    next: Ino,
}

impl Default for InodeTable {
    fn default() -> Self {
        InodeTable::new()
    }
}

impl InodeTable {
    pub fn new() -> InodeTable {
        let mut table = InodeTable {
            by_key: HashMap::new(),
            by_ino: HashMap::new(),
            next: ROOT + 1,
        };
        table.by_key.insert(Key::Root, ROOT);
        table.by_ino.insert(
            ROOT,
            Slot {
                key: Key::Root,
                lookups: 1,
                filled: false,
            },
        );
        table
    }

    /// The inode of `key`, allocated on first use.
    pub fn ino(&mut self, key: &Key) -> Ino {
        if let Some(ino) = self.by_key.get(key) {
            return *ino;
        }
        let ino = self.next;
        self.next += 1;
        self.by_key.insert(key.clone(), ino);
        self.by_ino.insert(
            ino,
            Slot {
                key: key.clone(),
                lookups: 0,
                filled: false,
            },
        );
        ino
    }

    /// The inode of `key` if it has one already.
    pub fn existing(&self, key: &Key) -> Option<Ino> {
        self.by_key.get(key).copied()
    }

    /// What `ino` stands for.
    pub fn key(&self, ino: Ino) -> Option<&Key> {
        self.by_ino.get(&ino).map(|s| &s.key)
    }

    /// Counts one kernel reference (a lookup or create reply) on `ino`.
    pub fn remember(&mut self, ino: Ino) {
        if let Some(slot) = self.by_ino.get_mut(&ino) {
            slot.lookups += 1;
        }
    }

    /// Whether this is the first call for `ino` since the kernel learned of it (marks it).
    ///
    /// A number is never reused and a forgotten inode leaves the table, so the first time is
    /// while the kernel's inode is new, with nothing in its page cache and no file open on it.
    pub fn first_fill(&mut self, ino: Ino) -> bool {
        match self.by_ino.get_mut(&ino) {
            Some(slot) if !slot.filled => {
                slot.filled = true;
                true
            }
            _ => false,
        }
    }

    /// The kernel dropped `n` references; the inode is forgotten when none remain.
    pub fn forget(&mut self, ino: Ino, n: u64) {
        if ino == ROOT {
            return;
        }
        let Some(slot) = self.by_ino.get_mut(&ino) else {
            return;
        };
        slot.lookups = slot.lookups.saturating_sub(n);
        if slot.lookups == 0 {
            let key = slot.key.clone();
            self.by_ino.remove(&ino);
            if self.by_key.get(&key) == Some(&ino) {
                self.by_key.remove(&key);
            }
        }
    }

    /// Makes `ino` stand for `key` from now on (a rename moved it there). Whatever inode stood
    /// for `key` before becomes [`Key::Gone`]; `ino`'s old key gets a fresh inode when next seen.
    pub fn rebind(&mut self, ino: Ino, key: Key) {
        if let Some(old) = self.by_key.get(&key).copied()
            && old != ino
        {
            self.retire(old);
        }
        if let Some(slot) = self.by_ino.get_mut(&ino) {
            let previous = std::mem::replace(&mut slot.key, key.clone());
            if self.by_key.get(&previous) == Some(&ino) {
                self.by_key.remove(&previous);
            }
        } else {
            self.by_ino.insert(
                ino,
                Slot {
                    key: key.clone(),
                    lookups: 0,
                    // What the kernel holds for an inode it already had is not known.
                    filled: true,
                },
            );
        }
        if key != Key::Gone {
            self.by_key.insert(key, ino);
        }
    }

    /// Marks `ino` as gone: its entry no longer exists, the number is never reused.
    pub fn retire(&mut self, ino: Ino) {
        if let Some(slot) = self.by_ino.get_mut(&ino) {
            let previous = std::mem::replace(&mut slot.key, Key::Gone);
            if self.by_key.get(&previous) == Some(&ino) {
                self.by_key.remove(&previous);
            }
        }
    }

    /// How many inodes the table holds (for tests and bounds).
    pub fn len(&self) -> usize {
        self.by_ino.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_ino.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> Arc<str> {
        Arc::from(s)
    }

    #[test]
    fn numbers_are_stable_and_never_reused() {
        let mut t = InodeTable::new();
        let a = t.ino(&Key::Readme);
        assert_eq!(t.ino(&Key::Readme), a);
        t.remember(a);
        t.forget(a, 1);
        assert_eq!(t.key(a), None);
        let b = t.ino(&Key::Readme);
        assert!(b > a, "a forgotten number is not reused");
    }

    #[test]
    fn rebind_moves_identity_like_a_rename() {
        let mut t = InodeTable::new();
        let view = t.ino(&Key::WfYaml(name("demo")));
        let scratch = t.ino(&Key::Scratch(7));
        // `mv scratch workflow.yaml`: the scratch inode now is the view; the old view inode is gone.
        t.rebind(scratch, Key::WfYaml(name("demo")));
        assert_eq!(t.key(scratch), Some(&Key::WfYaml(name("demo"))));
        assert_eq!(t.key(view), Some(&Key::Gone));
        assert_eq!(t.existing(&Key::Scratch(7)), None);
        assert_eq!(t.ino(&Key::WfYaml(name("demo"))), scratch);
    }

    #[test]
    fn an_inode_is_filled_once_per_kernel_lifetime() {
        let mut t = InodeTable::new();
        let a = t.ino(&Key::Readme);
        t.remember(a);
        assert!(t.first_fill(a));
        assert!(!t.first_fill(a));
        t.remember(a);
        assert!(!t.first_fill(a), "another lookup is the same kernel inode");
        t.forget(a, 2);
        assert!(!t.first_fill(a), "forgotten");
        let b = t.ino(&Key::Readme);
        t.remember(b);
        assert!(t.first_fill(b), "a new kernel inode");
    }

    #[test]
    fn root_is_never_forgotten() {
        let mut t = InodeTable::new();
        t.forget(ROOT, 100);
        assert_eq!(t.key(ROOT), Some(&Key::Root));
    }
}
