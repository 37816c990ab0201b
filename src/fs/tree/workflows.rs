//! The `workflows/` subtree: `error`, `<name>/{workflow.yaml, hash, graph.mmd,
//! versions/<hash>.yaml, prompt, latest, threads/<id>}` — which entries exist, their listings,
//! attributes, bytes and symlink targets. Scratch files in the two writable directories are
//! listed here next to the generated entries (a generated name always wins).
//!
//! A workflow directory exists while the workflow is registered, or while a draft or a scratch
//! file lives in it. `workflow.yaml` shows the draft while there is one, else the text last saved
//! through the mount while it is still the current version, else the current version rendered.
//!
//! Architecture Invariant: an entry is listed by [`Tree::wf_listing`] exactly when
//! [`Tree::wf_child`] finds it, and [`Tree::wf_attr`]'s size is the length of
//! [`Tree::wf_content`].

use std::sync::Arc;
use std::time::SystemTime;

use super::Tree;
use super::state::State;
use crate::cas::Hash;
use crate::fs::attr::{Attr, Caching};
use crate::fs::error::FsError;
use crate::fs::inode::{Ino, Key, WfKey, hash_name, is_thread_id};
use crate::fs::views::{Content, Listing, from_ms, versioned};

impl Tree {
    /// The entry called `name` in a directory of `workflows/`.
    pub(super) fn wf_child(
        &self,
        st: &State,
        dir: &WfKey,
        name: &str,
    ) -> Result<Option<Key>, FsError> {
        let wf = |k: WfKey| Some(Key::Workflows(k));
        Ok(match dir {
            WfKey::Root => {
                if name == "error" {
                    return Ok(wf(WfKey::Error));
                }
                let sub = Key::Workflows(WfKey::Dir(Arc::from(name)));
                if self.source.registry()?.contains_key(name)
                    || st.drafts.contains_key(name)
                    || st.scratch.any_in(&sub)
                {
                    Some(sub)
                } else {
                    st.scratch
                        .find(&Key::Workflows(WfKey::Root), name)
                        .map(Key::Scratch)
                }
            }
            WfKey::Dir(n) => {
                let registered = self.source.entry(n)?.is_some();
                match name {
                    "workflow.yaml" if registered || st.drafts.contains_key(n) => {
                        wf(WfKey::Yaml(n.clone()))
                    }
                    "hash" if registered => wf(WfKey::Hash(n.clone())),
                    "graph.mmd" if registered => wf(WfKey::Graph(n.clone())),
                    "versions" if registered => wf(WfKey::Versions(n.clone())),
                    "prompt" if registered => wf(WfKey::Prompt(n.clone())),
                    "threads" if registered => wf(WfKey::Threads(n.clone())),
                    "latest"
                        if registered && self.wf_link_target(&WfKey::Latest(n.clone())).is_ok() =>
                    {
                        wf(WfKey::Latest(n.clone()))
                    }
                    _ => st
                        .scratch
                        .find(&Key::Workflows(dir.clone()), name)
                        .map(Key::Scratch),
                }
            }
            WfKey::Versions(n) => {
                let versions = self.versions(n)?;
                if name == "current" {
                    return Ok((!versions.is_empty())
                        .then(|| Key::Workflows(WfKey::CurrentVersion(n.clone()))));
                }
                // `NNN-<hash>.yaml` at its place in the order, or `<hash>.yaml` (never listed).
                let found = match version_name(name) {
                    Some((Some(i), h)) => versions.get(i).filter(|v| **v == h).copied(),
                    Some((None, h)) => versions.contains(&h).then_some(h),
                    None => None,
                };
                found.and_then(|h| wf(WfKey::Version(n.clone(), h)))
            }
            WfKey::Threads(n) => {
                if !is_thread_id(name) {
                    return Ok(None);
                }
                let Some(t) = self.source.thread(name)? else {
                    return Ok(None);
                };
                let (_, w) = self.source.thread_workflow(name, &t)?;
                if *w == **n {
                    wf(WfKey::ThreadLink(n.clone(), Arc::from(name)))
                } else {
                    None
                }
            }
            _ => return Err(FsError::NotDir),
        })
    }

    /// Whether a name missing from a directory of `workflows/` can never appear there.
    pub(super) fn wf_never_appears(dir: &WfKey, name: &str) -> bool {
        match dir {
            WfKey::Versions(_) => name != "current" && version_name(name).is_none(),
            WfKey::Threads(_) => !is_thread_id(name),
            _ => false,
        }
    }

    /// The entries of a directory of `workflows/`.
    pub(super) fn wf_listing(&self, st: &State, dir: &WfKey) -> Result<Listing, FsError> {
        let mut out: Listing = Vec::new();
        let mut push = |name: String, k: WfKey| out.push((name, Key::Workflows(k)));
        match dir {
            WfKey::Root => {
                push("error".to_owned(), WfKey::Error);
                let registry = self.source.registry()?;
                let mut names: Vec<&str> = registry.keys().map(String::as_str).collect();
                for d in st.drafts.keys() {
                    names.push(d);
                }
                names.sort_unstable();
                names.dedup();
                for n in names {
                    push(n.to_owned(), WfKey::Dir(Arc::from(n)));
                }
            }
            WfKey::Dir(n) => {
                let registered = self.source.entry(n)?.is_some();
                if registered || st.drafts.contains_key(n) {
                    push("workflow.yaml".to_owned(), WfKey::Yaml(n.clone()));
                }
                if registered {
                    push("hash".to_owned(), WfKey::Hash(n.clone()));
                    push("graph.mmd".to_owned(), WfKey::Graph(n.clone()));
                    push("versions".to_owned(), WfKey::Versions(n.clone()));
                    push("prompt".to_owned(), WfKey::Prompt(n.clone()));
                    if self.wf_link_target(&WfKey::Latest(n.clone())).is_ok() {
                        push("latest".to_owned(), WfKey::Latest(n.clone()));
                    }
                    push("threads".to_owned(), WfKey::Threads(n.clone()));
                }
            }
            WfKey::Versions(n) => {
                for (i, h) in self.versions(n)?.into_iter().enumerate() {
                    push(version_file(i, h), WfKey::Version(n.clone(), h));
                }
                push("current".to_owned(), WfKey::CurrentVersion(n.clone()));
                return Ok(out);
            }
            WfKey::Threads(n) => {
                for id in self.workflow_threads(n)? {
                    push(id.to_string(), WfKey::ThreadLink(n.clone(), id));
                }
                return Ok(out);
            }
            _ => return Err(FsError::NotDir),
        }
        // The two writable directories: scratch files, under names nothing generated took.
        for (name, id) in st.scratch.list(&Key::Workflows(dir.clone())) {
            if !out.iter().any(|(n, _)| *n == name) {
                out.push((name, Key::Scratch(id)));
            }
        }
        Ok(out)
    }

    /// Attributes of an entry of `workflows/`.
    pub(super) fn wf_attr(&self, st: &State, ino: Ino, key: &WfKey) -> Result<Attr, FsError> {
        let owner = self.owner();
        let dir = |perm: u16, time: SystemTime, caching: Caching| {
            Attr::dir(ino, owner, perm, time, caching)
        };
        let file = |size: usize, perm: u16, time: SystemTime, caching: Caching| {
            Attr::file(ino, owner, size as u64, perm, time, caching)
        };
        let link = |time: SystemTime, caching: Caching| -> Result<Attr, FsError> {
            let target = self.wf_link_target(key)?;
            Ok(Attr::symlink(
                ino,
                owner,
                target.len() as u64,
                time,
                caching,
            ))
        };
        Ok(match key {
            WfKey::Root => dir(
                0o755,
                self.source.registry_mtime()?.max(st.workflows_changed),
                Caching::Mutable,
            ),
            WfKey::Error => file(st.error.len(), 0o444, st.error_time, Caching::Volatile),
            WfKey::Dir(n) => {
                let time = match self.source.entry(n)? {
                    // Its listing changes with a registration, and when `latest` appears with
                    // the first thread (threads start after the version they run).
                    Some(e) => {
                        versioned(from_ms(e.registered_at), e.hash).max(self.newest_thread_time(n)?)
                    }
                    None if st.drafts.contains_key(n)
                        || st.scratch.any_in(&Key::Workflows(key.clone())) =>
                    {
                        self.source.mounted_at()
                    }
                    None => return Err(FsError::NotFound),
                };
                dir(0o755, time, Caching::Mutable)
            }
            WfKey::Yaml(n) => {
                let (text, time) = self.yaml_text(st, n)?;
                file(text.len(), 0o644, time, Caching::Mutable)
            }
            WfKey::Hash(n) => {
                let (_, time) = self.current(n)?;
                file(14, 0o444, time, Caching::Mutable)
            }
            WfKey::Graph(n) => {
                let (hash, time) = self.current(n)?;
                let graph = self.source.workflow_graph(hash)?;
                file(graph.bytes.len(), 0o444, time, Caching::Mutable)
            }
            WfKey::Versions(n) => {
                // Its listing changes with the current version, even two within a millisecond.
                let (hash, time) = self.current(n)?;
                dir(0o555, versioned(time, hash), Caching::Mutable)
            }
            WfKey::Version(n, h) => {
                let c = self.version_text(n, *h)?;
                file(c.bytes.len(), 0o444, c.time, Caching::Immutable)
            }
            WfKey::Prompt(n) => {
                let (_, time) = self.current(n)?;
                file(0, 0o644, time, Caching::Volatile)
            }
            WfKey::Latest(n) | WfKey::CurrentVersion(n) => {
                let (_, time) = self.current(n)?;
                link(time, Caching::Mutable)?
            }
            WfKey::Threads(n) => {
                let (_, time) = self.current(n)?;
                let time = time.max(self.source.threads_mtime()?);
                dir(0o555, time, Caching::Mutable)
            }
            WfKey::ThreadLink(_, id) => {
                let t = self.thread_ref(id)?;
                let started = from_ms(self.source.chain(t.head)?.start_timestamp);
                link(started, Caching::Immutable)?
            }
        })
    }

    /// The bytes of a file of `workflows/`.
    pub(super) fn wf_content(&self, st: &State, key: &WfKey) -> Result<Arc<[u8]>, FsError> {
        Ok(match key {
            WfKey::Error => st.error.clone(),
            WfKey::Yaml(n) => self.yaml_text(st, n)?.0,
            WfKey::Hash(n) => Arc::from(format!("{}\n", self.current(n)?.0).into_bytes()),
            WfKey::Graph(n) => self.source.workflow_graph(self.current(n)?.0)?.bytes,
            WfKey::Version(n, h) => self.version_text(n, *h)?.bytes,
            WfKey::Prompt(_) => Arc::from(Vec::new()),
            _ => return Err(FsError::NotFound),
        })
    }

    /// The target of a symbolic link of `workflows/`.
    pub(super) fn wf_link_target(&self, key: &WfKey) -> Result<String, FsError> {
        match key {
            WfKey::Latest(n) => {
                let newest = self.workflow_threads(n)?.pop().ok_or(FsError::NotFound)?;
                Ok(format!("../../threads/{newest}"))
            }
            WfKey::ThreadLink(_, id) => Ok(format!("../../../threads/{id}")),
            WfKey::CurrentVersion(n) => {
                let versions = self.versions(n)?;
                let last = versions.len().checked_sub(1).ok_or(FsError::NotFound)?;
                Ok(version_file(last, versions[last]))
            }
            _ => Err(FsError::Invalid("not a symbolic link")),
        }
    }

    /// The versions of workflow `name` in the order they became current (the current one
    /// last): the registry's history, oldest first, then the current version.
    fn versions(&self, name: &str) -> Result<Vec<Hash>, FsError> {
        let entry = self.source.entry(name)?.ok_or(FsError::NotFound)?;
        let mut out: Vec<Hash> = entry.history.iter().map(|v| v.hash).collect();
        out.push(entry.hash);
        Ok(out)
    }

    /// The text of version `hash` of workflow `name`: as it was saved (comments kept) when
    /// the registry kept it, else the definition rendered. `NotFound` for other hashes.
    fn version_text(&self, name: &str, hash: Hash) -> Result<Content, FsError> {
        let entry = self.source.entry(name)?.ok_or(FsError::NotFound)?;
        let source = if entry.hash == hash {
            entry.source
        } else {
            let v = entry.history.iter().find(|v| v.hash == hash);
            v.ok_or(FsError::NotFound)?.source
        };
        match source {
            Some(text) => self.source.text(text),
            None => self.source.workflow_yaml(hash),
        }
    }

    /// The current version of workflow `name` and when it was registered.
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
        Ok((self.version_text(name, hash)?.bytes, time))
    }

    /// The threads of workflow `name`, oldest first.
    fn workflow_threads(&self, name: &str) -> Result<Vec<Arc<str>>, FsError> {
        let mut out = Vec::new();
        for id in self.source.thread_ids()? {
            let Some(t) = self.source.thread(&id)? else {
                continue;
            };
            // A damaged thread is left out of its workflow's list, not fatal to the listing.
            if let Ok((_, w)) = self.source.thread_workflow(&id, &t)
                && *w == *name
            {
                out.push(id);
            }
        }
        Ok(out)
    }

    /// When the newest thread of workflow `name` started (the epoch when it has none).
    fn newest_thread_time(&self, name: &str) -> Result<SystemTime, FsError> {
        Ok(match self.workflow_threads(name)?.last() {
            Some(id) => ulid::Ulid::from_string(id)
                .map(|u| from_ms(u.timestamp_ms()))
                .unwrap_or(SystemTime::UNIX_EPOCH),
            None => SystemTime::UNIX_EPOCH,
        })
    }
}

/// `NNN-<hash>.yaml`: the version's 1-based place in the order, zero-padded to width 3.
fn version_file(index: usize, hash: Hash) -> String {
    format!("{:03}-{hash}.yaml", index + 1)
}

/// A version file name: `NNN-<hash>.yaml` (0-based place, hash) or `<hash>.yaml` (no place).
fn version_name(name: &str) -> Option<(Option<usize>, Hash)> {
    if let Some(h) = hash_name(name, ".yaml") {
        return Some((None, h));
    }
    let (number, rest) = name.split_once('-')?;
    let hash = hash_name(rest, ".yaml")?;
    let n: usize = number.parse().ok()?;
    (n >= 1 && format!("{n:03}") == number).then_some((Some(n - 1), hash))
}
