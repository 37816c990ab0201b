//! What an inode *is* ([`Key`], one nested key per subtree, and the names of the fixed files in
//! thread and step directories) and the table of inode numbers standing for keys.
//!
//! Entries are named by a [`Key`] (what the entry *is*: "the `hash` file of workflow
//! `solve-issue`", "scratch file 7"), not by a path, so a renamed scratch file keeps its inode and
//! a view keeps its inode across refreshes. Numbers are handed out on first sight and never
//! reused (a `u64` counter), so generation numbers are not needed. This file imports nothing else
//! from `fs`: every other file may name keys.
//!
//! Architecture Invariant: the table mirrors the kernel's view of identity. When a rename moves an
//! inode in the kernel's dentry cache, [`InodeTable::rebind`] moves the same inode number to the
//! entry now at that name, so what the kernel caches under a name and what the core answers for
//! that inode always agree. Entries the kernel has forgotten (lookup count back to zero) are
//! dropped, so the table stays as small as the kernel's cache.

use std::collections::HashMap;
use std::sync::Arc;

use crate::cas::Hash;

/// An inode number.
pub(crate) type Ino = u64;

/// The root directory's inode number (fixed by FUSE).
pub(crate) const ROOT: Ino = 1;

/// What an inode is. Views are named by what they show; scratch files by their id.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Key {
    Root,
    /// `README.md`
    Readme,
    /// `workflows/` and everything in it but scratch files.
    Workflows(WfKey),
    /// `threads/` and everything in it.
    Threads(ThreadKey),
    /// `cas/` and everything in it.
    Cas(CasKey),
    /// A file created by a user in a writable directory, kept in memory.
    Scratch(u64),
    /// An inode whose entry went away (replaced by a rename, or unlinked) while the kernel may
    /// still hold it: it answers ENOENT.
    Gone,
}

/// An entry of `workflows/`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum WfKey {
    /// `workflows/`
    Root,
    /// `workflows/error`
    Error,
    /// `workflows/<name>/`
    Dir(Arc<str>),
    /// `workflows/<name>/workflow.yaml`
    Yaml(Arc<str>),
    /// `workflows/<name>/hash`
    Hash(Arc<str>),
    /// `workflows/<name>/graph.mmd`
    Graph(Arc<str>),
    /// `workflows/<name>/versions/`
    Versions(Arc<str>),
    /// `workflows/<name>/versions/NNN-<hash>.yaml` (also found as `<hash>.yaml`)
    Version(Arc<str>, Hash),
    /// `workflows/<name>/versions/current` → `NNN-<hash>.yaml`
    CurrentVersion(Arc<str>),
    /// `workflows/<name>/prompt`: write a prompt and close → a new thread.
    Prompt(Arc<str>),
    /// `workflows/<name>/latest` → the newest thread of the workflow.
    Latest(Arc<str>),
    /// `workflows/<name>/threads/`
    Threads(Arc<str>),
    /// `workflows/<name>/threads/<id>` → `../../../threads/<id>`
    ThreadLink(Arc<str>, Arc<str>),
}

/// An entry of `threads/`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum ThreadKey {
    /// `threads/`
    Root,
    /// `threads/<id>/`
    Dir(Arc<str>),
    /// `threads/<id>/<file>` (`steps/` aside)
    File(Arc<str>, ThreadFile),
    /// `threads/<id>/steps/`
    Steps(Arc<str>),
    /// `threads/<id>/steps/latest` → `NNN-role`
    StepsLatest(Arc<str>),
    /// `threads/<id>/steps/NNN-role/` (0-based index)
    StepDir(Arc<str>, u32),
    /// `threads/<id>/steps/NNN-role/<file>`
    StepFile(Arc<str>, u32, StepFile),
    /// `threads/<id>/forks/`: the threads forked from this one.
    Forks(Arc<str>),
    /// `threads/<id>/forks/<fork>` → `../../<fork>`
    ForkLink(Arc<str>, Arc<str>),
}

/// An entry of `cas/`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum CasKey {
    /// `cas/`
    Root,
    /// `cas/<hash>`
    Node(Hash),
    /// `cas/schemas/`
    Schemas,
    /// `cas/schemas/<hash>.json`
    Schema(Hash),
}

impl Key {
    /// Whether the entry is a directory.
    pub(crate) fn is_dir(&self) -> bool {
        match self {
            Key::Root => true,
            Key::Workflows(k) => matches!(
                k,
                WfKey::Root | WfKey::Dir(_) | WfKey::Versions(_) | WfKey::Threads(_)
            ),
            Key::Threads(k) => matches!(
                k,
                ThreadKey::Root
                    | ThreadKey::Dir(_)
                    | ThreadKey::Steps(_)
                    | ThreadKey::StepDir(..)
                    | ThreadKey::Forks(_)
            ),
            Key::Cas(k) => matches!(k, CasKey::Root | CasKey::Schemas),
            Key::Readme | Key::Scratch(_) | Key::Gone => false,
        }
    }

    /// Whether the entry is a symbolic link.
    pub(crate) fn is_link(&self) -> bool {
        matches!(
            self,
            Key::Workflows(WfKey::Latest(_) | WfKey::ThreadLink(..) | WfKey::CurrentVersion(_))
                | Key::Threads(
                    ThreadKey::StepsLatest(_)
                        | ThreadKey::ForkLink(..)
                        | ThreadKey::File(
                            _,
                            ThreadFile::Workflow | ThreadFile::Origin | ThreadFile::Parent
                        )
                        | ThreadKey::StepFile(_, _, StepFile::Child)
                )
        )
    }

    /// Whether files can be created, deleted and renamed in this directory.
    pub(crate) fn is_writable_dir(&self) -> bool {
        matches!(self, Key::Workflows(WfKey::Root | WfKey::Dir(_)))
    }

    /// The directory holding this directory (the root for the root and for files, whose `..`
    /// is never asked for).
    pub(crate) fn parent(&self) -> Key {
        match self {
            Key::Workflows(WfKey::Dir(_)) => Key::Workflows(WfKey::Root),
            Key::Workflows(WfKey::Versions(n) | WfKey::Threads(n)) => {
                Key::Workflows(WfKey::Dir(n.clone()))
            }
            Key::Cas(CasKey::Schemas) => Key::Cas(CasKey::Root),
            Key::Threads(ThreadKey::Dir(_)) => Key::Threads(ThreadKey::Root),
            Key::Threads(ThreadKey::Steps(id) | ThreadKey::Forks(id)) => {
                Key::Threads(ThreadKey::Dir(id.clone()))
            }
            Key::Threads(ThreadKey::StepDir(id, _)) => Key::Threads(ThreadKey::Steps(id.clone())),
            _ => Key::Root,
        }
    }
}

/// The entries of `threads/<id>/` other than `steps/` and `forks/`, in listing order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum ThreadFile {
    Prompt,
    Head,
    Status,
    /// Symlink to `../../workflows/<name>`.
    Workflow,
    /// Symlink to the step a fork was made from, `../<source>/steps/NNN-role` (forks only).
    Origin,
    Step,
    Run,
    /// Blocks until no step runs; never listed (see `tree/threads.rs`).
    Wait,
    Kill,
    Log,
    /// The change feed: one JSON line per step event.
    Events,
    Error,
    Transcript,
    /// Symlink to the parent thread (`../<parent>`), for a sub-workflow's child only.
    Parent,
    /// What a person is asked while the thread awaits a human step (empty otherwise).
    Question,
    /// Write a complete answer and close: the human step completes.
    Answer,
    /// What the thread spent (tokens, dollars), its sub-workflows' and its budget, as text.
    Cost,
}

impl ThreadFile {
    pub(crate) const ALL: [ThreadFile; 17] = [
        ThreadFile::Prompt,
        ThreadFile::Head,
        ThreadFile::Status,
        ThreadFile::Workflow,
        ThreadFile::Origin,
        ThreadFile::Step,
        ThreadFile::Run,
        ThreadFile::Wait,
        ThreadFile::Kill,
        ThreadFile::Log,
        ThreadFile::Events,
        ThreadFile::Error,
        ThreadFile::Transcript,
        ThreadFile::Parent,
        ThreadFile::Question,
        ThreadFile::Answer,
        ThreadFile::Cost,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            ThreadFile::Prompt => "prompt",
            ThreadFile::Head => "head",
            ThreadFile::Status => "status",
            ThreadFile::Workflow => "workflow",
            ThreadFile::Origin => "origin",
            ThreadFile::Step => "step",
            ThreadFile::Run => "run",
            ThreadFile::Wait => "wait",
            ThreadFile::Kill => "kill",
            ThreadFile::Log => "log",
            ThreadFile::Events => "events",
            ThreadFile::Error => "error",
            ThreadFile::Transcript => "transcript.md",
            ThreadFile::Parent => "parent",
            ThreadFile::Question => "question",
            ThreadFile::Answer => "answer",
            ThreadFile::Cost => "cost",
        }
    }

    pub(crate) fn from_name(name: &str) -> Option<ThreadFile> {
        ThreadFile::ALL.into_iter().find(|f| f.name() == name)
    }

    /// Files whose write is an action (`step`, `run`, `kill`).
    pub(crate) fn is_control(self) -> bool {
        matches!(self, ThreadFile::Step | ThreadFile::Run | ThreadFile::Kill)
    }
}

/// The entries of `threads/<id>/steps/NNN-role/`, in listing order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum StepFile {
    OutputYaml,
    OutputJson,
    Body,
    Detail,
    Hash,
    Role,
    Agent,
    Diff,
    Fork,
    /// Symlink to the child thread that played this step (`../../../<child>`), for steps a
    /// sub-workflow took only.
    Child,
}

impl StepFile {
    pub(crate) const ALL: [StepFile; 10] = [
        StepFile::OutputYaml,
        StepFile::OutputJson,
        StepFile::Body,
        StepFile::Detail,
        StepFile::Hash,
        StepFile::Role,
        StepFile::Agent,
        StepFile::Diff,
        StepFile::Fork,
        StepFile::Child,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            StepFile::OutputYaml => "output.yaml",
            StepFile::OutputJson => "output.json",
            StepFile::Body => "body.md",
            StepFile::Detail => "detail.yaml",
            StepFile::Hash => "hash",
            StepFile::Role => "role",
            StepFile::Agent => "agent",
            StepFile::Diff => "diff",
            StepFile::Fork => "fork",
            StepFile::Child => "child",
        }
    }

    pub(crate) fn from_name(name: &str) -> Option<StepFile> {
        StepFile::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// `NNN-role`: the step's 1-based index, zero-padded to width 3 (wider past 999), and its role.
pub(crate) fn step_dir_name(index: usize, role: &str) -> String {
    format!("{:03}-{role}", index + 1)
}

/// The 0-based index a step directory name claims, if it has the shape `NNN-role`.
pub(crate) fn parse_step_dir(name: &str) -> Option<(usize, &str)> {
    let (number, role) = name.split_once('-')?;
    if number.len() < 3 || !number.bytes().all(|b| b.is_ascii_digit()) || role.is_empty() {
        return None;
    }
    let n: usize = number.parse().ok()?;
    // Exactly the canonical spelling: `0001-x` or `000-x` never name a step.
    (n >= 1 && format!("{n:03}") == number).then(|| (n - 1, role))
}

/// Whether `name` is spelled like a thread id (an uppercase ULID).
pub(crate) fn is_thread_id(name: &str) -> bool {
    ulid::Ulid::from_string(name).is_ok_and(|u| u.to_string() == name)
}

/// `<13 symbols><suffix>` → the hash (`cas/schemas/<hash>.json`, `versions/<hash>.yaml`).
pub(crate) fn hash_name(name: &str, suffix: &str) -> Option<Hash> {
    Hash::parse(name.strip_suffix(suffix)?).ok()
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
pub(crate) struct InodeTable {
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
    pub(crate) fn new() -> InodeTable {
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
    pub(crate) fn ino(&mut self, key: &Key) -> Ino {
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
    pub(crate) fn existing(&self, key: &Key) -> Option<Ino> {
        self.by_key.get(key).copied()
    }

    /// What `ino` stands for.
    pub(crate) fn key(&self, ino: Ino) -> Option<&Key> {
        self.by_ino.get(&ino).map(|s| &s.key)
    }

    /// Counts one kernel reference (a lookup or create reply) on `ino`.
    pub(crate) fn remember(&mut self, ino: Ino) {
        if let Some(slot) = self.by_ino.get_mut(&ino) {
            slot.lookups += 1;
        }
    }

    /// Whether this is the first call for `ino` since the kernel learned of it (marks it).
    ///
    /// A number is never reused and a forgotten inode leaves the table, so the first time is
    /// while the kernel's inode is new, with nothing in its page cache and no file open on it.
    pub(crate) fn first_fill(&mut self, ino: Ino) -> bool {
        match self.by_ino.get_mut(&ino) {
            Some(slot) if !slot.filled => {
                slot.filled = true;
                true
            }
            _ => false,
        }
    }

    /// The kernel dropped `n` references; the inode is forgotten when none remain.
    pub(crate) fn forget(&mut self, ino: Ino, n: u64) {
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
    pub(crate) fn rebind(&mut self, ino: Ino, key: Key) {
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
    pub(crate) fn retire(&mut self, ino: Ino) {
        if let Some(slot) = self.by_ino.get_mut(&ino) {
            let previous = std::mem::replace(&mut slot.key, Key::Gone);
            if self.by_key.get(&previous) == Some(&ino) {
                self.by_key.remove(&previous);
            }
        }
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
        let view = t.ino(&Key::Workflows(WfKey::Yaml(name("demo"))));
        let scratch = t.ino(&Key::Scratch(7));
        // `mv scratch workflow.yaml`: the scratch inode now is the view; the old view inode is gone.
        t.rebind(scratch, Key::Workflows(WfKey::Yaml(name("demo"))));
        assert_eq!(
            t.key(scratch),
            Some(&Key::Workflows(WfKey::Yaml(name("demo"))))
        );
        assert_eq!(t.key(view), Some(&Key::Gone));
        assert_eq!(t.existing(&Key::Scratch(7)), None);
        assert_eq!(t.ino(&Key::Workflows(WfKey::Yaml(name("demo")))), scratch);
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
    fn step_dir_names_round_trip_and_grow_past_999() {
        assert_eq!(step_dir_name(0, "planner"), "001-planner");
        assert_eq!(step_dir_name(999, "dev"), "1000-dev");
        assert_eq!(parse_step_dir("001-planner"), Some((0, "planner")));
        assert_eq!(parse_step_dir("1000-dev"), Some((999, "dev")));
        assert_eq!(parse_step_dir("a-b-c"), None);
        for bad in [
            "1-planner",
            "0001-planner",
            "000-x",
            "001-",
            "latest",
            "01x-a",
        ] {
            assert_eq!(parse_step_dir(bad), None, "{bad}");
        }
        // Roles may contain dashes.
        assert_eq!(parse_step_dir("012-code-review"), Some((11, "code-review")));
    }

    #[test]
    fn root_is_never_forgotten() {
        let mut t = InodeTable::new();
        t.forget(ROOT, 100);
        assert_eq!(t.key(ROOT), Some(&Key::Root));
    }
}
