//! What exists where: the directory layout of the tree, each entry's attributes and bytes.
//!
//! Generated entries are computed on every call from [`Source`] (cheap: it caches), scratch files
//! and drafts from the state, so what the kernel is told always reflects the store now.
//! Architecture Invariant: an entry is listed by [`Tree::listing`] exactly when
//! [`Tree::child`] finds it, and [`Tree::attr_of`]'s size is the length of [`Tree::content`].

use std::sync::Arc;
use std::time::SystemTime;

use super::{Attr, Caching, Owner, State, Tree, hash_name, is_dir};
use crate::cas::Hash;
use crate::fs::error::FsError;
use crate::fs::inode::{Ino, Key};
use crate::fs::views::{Listing, from_ms, versioned};

impl Tree {
    pub(super) fn key_of(st: &State, ino: Ino) -> Result<Key, FsError> {
        match st.inodes.key(ino) {
            Some(Key::Gone) | None => Err(FsError::NotFound),
            Some(k) => Ok(k.clone()),
        }
    }

    pub(super) fn dir_key(st: &State, ino: Ino) -> Result<Key, FsError> {
        let key = Self::key_of(st, ino)?;
        if !is_dir(&key) {
            return Err(FsError::NotDir);
        }
        Ok(key)
    }

    /// The entry called `name` in `dir`, if there is one.
    pub(super) fn child(&self, st: &State, dir: &Key, name: &str) -> Result<Option<Key>, FsError> {
        Ok(match dir {
            Key::Root => match name {
                "README.md" => Some(Key::Readme),
                "workflows" => Some(Key::Workflows),
                "threads" => Some(Key::Threads),
                "cas" => Some(Key::Cas),
                _ => None,
            },
            Key::Workflows => {
                if name == "error" {
                    return Ok(Some(Key::WorkflowsError));
                }
                let dir = Key::WfDir(Arc::from(name));
                if self.source.registry()?.contains_key(name)
                    || st.drafts.contains_key(name)
                    || st.scratch.any_in(&dir)
                {
                    Some(dir)
                } else {
                    st.scratch.find(&Key::Workflows, name).map(Key::Scratch)
                }
            }
            Key::WfDir(n) => {
                let registered = self.source.entry(n)?.is_some();
                match name {
                    "workflow.yaml" if registered || st.drafts.contains_key(n) => {
                        Some(Key::WfYaml(n.clone()))
                    }
                    "hash" if registered => Some(Key::WfHash(n.clone())),
                    "graph.mmd" if registered => Some(Key::WfGraph(n.clone())),
                    "versions" if registered => Some(Key::WfVersions(n.clone())),
                    "prompt" if registered => Some(Key::WfPrompt(n.clone())),
                    "threads" if registered => Some(Key::WfThreads(n.clone())),
                    "latest"
                        if registered && self.link_target(&Key::WfLatest(n.clone())).is_ok() =>
                    {
                        Some(Key::WfLatest(n.clone()))
                    }
                    _ => st.scratch.find(dir, name).map(Key::Scratch),
                }
            }
            Key::WfVersions(n) => hash_name(name, ".yaml")
                .filter(|h| self.is_version(n, *h))
                .map(|h| Key::WfVersion(n.clone(), h)),
            Key::Cas => {
                if name == "schemas" {
                    Some(Key::CasSchemas)
                } else {
                    Hash::parse(name)
                        .ok()
                        .filter(|h| self.source.has(*h))
                        .map(Key::CasNode)
                }
            }
            Key::CasSchemas => hash_name(name, ".json")
                .filter(|h| self.source.schema_json(*h).is_ok())
                .map(Key::CasSchema),
            Key::Threads
            | Key::Thread(_)
            | Key::Steps(_)
            | Key::StepDir(..)
            | Key::WfThreads(_) => {
                return self.thread_child(dir, name);
            }
            Key::Gone => return Err(FsError::NotFound),
            _ => return Err(FsError::NotDir),
        })
    }

    /// Whether a name missing from `dir` can never appear there.
    pub(super) fn never_appears(&self, dir: &Key, name: &str) -> bool {
        match dir {
            Key::Root => true,
            Key::Cas => Hash::parse(name).is_err(),
            Key::CasSchemas => hash_name(name, ".json").is_none(),
            Key::WfVersions(_) => hash_name(name, ".yaml").is_none(),
            _ => self.thread_never_appears(dir, name),
        }
    }

    pub(super) fn is_version(&self, name: &str, hash: Hash) -> bool {
        matches!(self.source.entry(name), Ok(Some(e))
            if e.hash == hash || e.history.iter().any(|v| v.hash == hash))
    }

    pub(super) fn current(&self, name: &str) -> Result<(Hash, SystemTime), FsError> {
        let entry = self.source.entry(name)?.ok_or(FsError::NotFound)?;
        Ok((entry.hash, from_ms(entry.registered_at)))
    }

    /// What `workflows/<name>/workflow.yaml` holds now: the draft, the text last saved here while
    /// it is still the current version, or the current version rendered.
    pub(super) fn yaml_text(
        &self,
        st: &State,
        name: &str,
    ) -> Result<(Arc<[u8]>, SystemTime), FsError> {
        if let Some(d) = st.drafts.get(name)
            && let Some(f) = st.scratch.get(d.id)
        {
            return Ok((Arc::from(f.data.as_slice()), f.mtime));
        }
        let (hash, time) = self.current(name)?;
        if let Some((h, text)) = st.saved.get(name)
            && *h == hash
        {
            return Ok((text.clone(), time));
        }
        Ok((self.source.workflow_yaml(hash)?.bytes, time))
    }

    /// The bytes of a generated file.
    pub(super) fn content(&self, st: &State, key: &Key) -> Result<Arc<[u8]>, FsError> {
        Ok(match key {
            Key::Readme => self.readme.clone(),
            Key::WorkflowsError => st.error.clone(),
            Key::WfYaml(n) => self.yaml_text(st, n)?.0,
            Key::WfHash(n) => Arc::from(format!("{}\n", self.current(n)?.0).into_bytes()),
            Key::WfGraph(n) => self.source.workflow_graph(self.current(n)?.0)?.bytes,
            Key::WfVersion(n, h) if self.is_version(n, *h) => self.source.workflow_yaml(*h)?.bytes,
            Key::CasNode(h) => self.source.node_json(*h)?.bytes,
            Key::CasSchema(h) => self.source.schema_json(*h)?.bytes,
            Key::ThreadFile(..) | Key::StepFile(..) | Key::WfPrompt(_) => {
                self.thread_content(key)?
            }
            Key::Scratch(id) => Arc::from(
                st.scratch
                    .get(*id)
                    .ok_or(FsError::NotFound)?
                    .data
                    .as_slice(),
            ),
            k if is_dir(k) => return Err(FsError::IsDir),
            _ => return Err(FsError::NotFound),
        })
    }

    pub(super) fn attr_of(&self, st: &State, ino: Ino, key: &Key) -> Result<Attr, FsError> {
        let t0 = self.source.mounted_at();
        let owner = self.owner();
        let dir = |perm: u16, time: SystemTime, caching: Caching| {
            Attr::dir(ino, owner, perm, time, caching)
        };
        let file = |size: usize, perm: u16, time: SystemTime, caching: Caching| {
            Attr::file(ino, owner, size as u64, perm, time, caching)
        };
        let mut attr = match key {
            // Its four entries never change.
            Key::Root => dir(0o555, t0, Caching::Immutable),
            Key::Readme => file(self.readme.len(), 0o444, t0, Caching::Immutable),
            Key::Workflows => dir(
                0o755,
                self.source.registry_mtime()?.max(st.workflows_changed),
                Caching::Mutable,
            ),
            Key::WorkflowsError => file(st.error.len(), 0o444, st.error_time, Caching::Volatile),
            Key::WfDir(n) => {
                let time = match self.source.entry(n)? {
                    // Its listing changes with a registration, and when `latest` appears with
                    // the first thread (threads start after the version they run).
                    Some(e) => {
                        versioned(from_ms(e.registered_at), e.hash).max(self.newest_thread_time(n)?)
                    }
                    None if st.drafts.contains_key(n) || st.scratch.any_in(key) => t0,
                    None => return Err(FsError::NotFound),
                };
                dir(0o755, time, Caching::Mutable)
            }
            Key::WfYaml(n) => {
                let (text, time) = self.yaml_text(st, n)?;
                file(text.len(), 0o644, time, Caching::Mutable)
            }
            Key::WfHash(n) => {
                let (_, time) = self.current(n)?;
                file(14, 0o444, time, Caching::Mutable)
            }
            Key::WfGraph(n) => {
                let (hash, time) = self.current(n)?;
                let graph = self.source.workflow_graph(hash)?;
                file(graph.bytes.len(), 0o444, time, Caching::Mutable)
            }
            Key::WfVersions(n) => {
                // Its listing changes with the current version, even two within a millisecond.
                let (hash, time) = self.current(n)?;
                dir(0o555, versioned(time, hash), Caching::Mutable)
            }
            Key::WfVersion(n, h) => {
                if !self.is_version(n, *h) {
                    return Err(FsError::NotFound);
                }
                let c = self.source.workflow_yaml(*h)?;
                file(c.bytes.len(), 0o444, c.time, Caching::Immutable)
            }
            Key::Cas => dir(0o555, self.source.cas_mtime(), Caching::Mutable),
            Key::CasNode(h) => {
                let c = self.source.node_json(*h)?;
                file(c.bytes.len(), 0o444, c.time, Caching::Immutable)
            }
            Key::CasSchemas => dir(0o555, self.source.cas_mtime(), Caching::Mutable),
            Key::CasSchema(h) => {
                let c = self.source.schema_json(*h)?;
                file(c.bytes.len(), 0o444, c.time, Caching::Immutable)
            }
            Key::Threads
            | Key::Thread(_)
            | Key::ThreadFile(..)
            | Key::Steps(_)
            | Key::StepsLatest(_)
            | Key::StepDir(..)
            | Key::StepFile(..)
            | Key::WfPrompt(_)
            | Key::WfLatest(_)
            | Key::WfThreads(_)
            | Key::WfThreadLink(..) => self.thread_attr(st, ino, key)?,
            Key::Scratch(id) => {
                let f = st.scratch.get(*id).ok_or(FsError::NotFound)?;
                let owner = Owner {
                    uid: f.uid,
                    gid: f.gid,
                };
                let size = f.data.len() as u64;
                Attr {
                    // An unlinked scratch file still open has no name left.
                    nlink: u32::from(f.place.is_some()),
                    atime: f.atime,
                    ctime: f.ctime,
                    ..Attr::file(ino, owner, size, f.mode & 0o7777, f.mtime, Caching::Mutable)
                }
            }
            Key::Gone => return Err(FsError::NotFound),
        };
        if self.opts.read_only {
            attr.perm &= !0o222;
            if matches!(attr.caching, Caching::Volatile | Caching::Blocking) {
                // No opens here, so no direct I/O: a new mtime at every refresh (at most once a
                // second, the attribute TTL) makes the kernel drop the pages and read again.
                attr.mtime = SystemTime::now();
                attr.ctime = attr.mtime;
                attr.caching = Caching::Volatile;
            }
        }
        Ok(attr)
    }

    /// The entries of a directory, without `.` and `..`.
    pub(super) fn listing(&self, st: &State, dir: &Key) -> Result<Arc<Listing>, FsError> {
        let mut out: Listing = Vec::new();
        match dir {
            Key::Root => {
                for (name, key) in [
                    ("README.md", Key::Readme),
                    ("workflows", Key::Workflows),
                    ("threads", Key::Threads),
                    ("cas", Key::Cas),
                ] {
                    out.push((name.to_owned(), key));
                }
            }
            Key::Workflows => {
                out.push(("error".to_owned(), Key::WorkflowsError));
                let registry = self.source.registry()?;
                let mut names: Vec<&str> = registry.keys().map(String::as_str).collect();
                for d in st.drafts.keys() {
                    names.push(d);
                }
                names.sort_unstable();
                names.dedup();
                for n in names {
                    out.push((n.to_owned(), Key::WfDir(Arc::from(n))));
                }
                for (name, id) in st.scratch.list(&Key::Workflows) {
                    if !out.iter().any(|(n, _)| *n == name) {
                        out.push((name, Key::Scratch(id)));
                    }
                }
            }
            Key::WfDir(n) => {
                let registered = self.source.entry(n)?.is_some();
                if registered || st.drafts.contains_key(n) {
                    out.push(("workflow.yaml".to_owned(), Key::WfYaml(n.clone())));
                }
                if registered {
                    out.push(("hash".to_owned(), Key::WfHash(n.clone())));
                    out.push(("graph.mmd".to_owned(), Key::WfGraph(n.clone())));
                    out.push(("versions".to_owned(), Key::WfVersions(n.clone())));
                    out.push(("prompt".to_owned(), Key::WfPrompt(n.clone())));
                    if self.link_target(&Key::WfLatest(n.clone())).is_ok() {
                        out.push(("latest".to_owned(), Key::WfLatest(n.clone())));
                    }
                    out.push(("threads".to_owned(), Key::WfThreads(n.clone())));
                }
                for (name, id) in st.scratch.list(dir) {
                    if !out.iter().any(|(n, _)| *n == name) {
                        out.push((name, Key::Scratch(id)));
                    }
                }
            }
            Key::WfVersions(n) => {
                let entry = self.source.entry(n)?.ok_or(FsError::NotFound)?;
                out.push((
                    format!("{}.yaml", entry.hash),
                    Key::WfVersion(n.clone(), entry.hash),
                ));
                for v in entry.history.iter().rev() {
                    out.push((
                        format!("{}.yaml", v.hash),
                        Key::WfVersion(n.clone(), v.hash),
                    ));
                }
            }
            Key::Cas | Key::CasSchemas => return self.source.cas_listing(dir),
            Key::Threads
            | Key::Thread(_)
            | Key::Steps(_)
            | Key::StepDir(..)
            | Key::WfThreads(_) => {
                out = self.thread_listing(dir)?;
            }
            Key::Gone => return Err(FsError::NotFound),
            _ => return Err(FsError::NotDir),
        }
        Ok(Arc::new(out))
    }
}
