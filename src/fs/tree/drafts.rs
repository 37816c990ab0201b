//! Drafts and saves: the part of [`Tree`] that turns written text into registered versions.
//!
//! A draft is a nameless scratch file behind `workflows/<name>/workflow.yaml` while it is being
//! written (or after its text was refused). Saving goes through [`registration::register`], the same
//! engine calls as `uwf workflow put`; the outcome updates the text shown, `workflows/error`, and
//! the kernel caches to invalidate.
//!
//! Architecture Invariant: no written text is lost: a refused draft stays (and is what
//! `workflow.yaml` shows) until it is saved or deleted, and a draft that leaves its view keeps
//! its open handles' data as a nameless scratch file.

use std::sync::Arc;
use std::time::SystemTime;

use super::Tree;
use super::state::{Draft, Open, State};
use crate::fs::attr::{Caller, Inval};
use crate::fs::error::FsError;
use crate::fs::inode::{Key, WfKey};
use crate::fs::registration::{self, Saved, Target};

impl Tree {
    /// The draft of `name`, made from the current text when there is none.
    pub(super) fn ensure_draft(
        &self,
        st: &mut State,
        name: &Arc<str>,
        caller: Caller,
    ) -> Result<u64, FsError> {
        if let Some(d) = st.drafts.get(name) {
            return Ok(d.id);
        }
        let (text, _) = self.yaml_text(st, name)?;
        let id = st
            .scratch
            .create_with(None, &text, 0o644, caller.uid, caller.gid)?;
        st.drafts.insert(
            name.clone(),
            Draft {
                id,
                writers: 0,
                refused: false,
            },
        );
        Ok(id)
    }

    /// No writer is left on a draft: save what no flush saved, then drop the draft unless its
    /// text was refused (a refused text stays visible so no edit is lost).
    pub(super) fn finish_draft(&self, st: &mut State, name: &Arc<str>) -> Result<(), FsError> {
        let result = self.save_draft(st, name);
        if let Some(d) = st.drafts.get(name).copied()
            && !d.refused
            && d.writers == 0
        {
            st.drafts.remove(name);
            st.scratch.remove(d.id);
            if let Some(ino) = st
                .inodes
                .existing(&Key::Workflows(WfKey::Yaml(name.clone())))
            {
                st.inval.push(Inval::Inode(ino));
            }
        }
        result
    }

    /// Registers a draft if it changed since it was last saved.
    pub(super) fn save_draft(&self, st: &mut State, name: &Arc<str>) -> Result<(), FsError> {
        let Some(draft) = st.drafts.get(name).copied() else {
            return Ok(());
        };
        let Some(f) = st.scratch.get_mut(draft.id) else {
            st.drafts.remove(name);
            return Ok(());
        };
        if !f.dirty {
            return Ok(());
        }
        f.dirty = false;
        let text: Arc<[u8]> = Arc::from(f.data.as_slice());
        let path = format!("workflows/{name}/workflow.yaml");
        let target = Target::Workflow(name.clone());
        let result = registration::register(&self.source, &text, &target);
        if let Some(d) = st.drafts.get_mut(name) {
            d.refused = result.is_err();
        }
        match result {
            Ok(saved) => {
                self.saved_ok(st, saved, text);
                Ok(())
            }
            Err(e) => {
                self.record_error(st, &path, &e.to_string(), &kept_note(&path, &target));
                Err(e)
            }
        }
    }

    /// Registers a scratch file with a meaningful name if it changed since it was last saved.
    /// An empty or blank file is not a save (`touch new.yaml` prepares a file).
    pub(super) fn save_scratch(&self, st: &mut State, id: u64) -> Result<(), FsError> {
        let Some(f) = st.scratch.get_mut(id) else {
            return Ok(());
        };
        let Some((dir, name)) = f.place.clone() else {
            return Ok(());
        };
        let Some(target) = registration::target_of(&dir, &name) else {
            return Ok(());
        };
        if !f.dirty || f.data.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        f.dirty = false;
        let text: Arc<[u8]> = Arc::from(f.data.as_slice());
        let path = place_path(&dir, &name);
        match registration::register(&self.source, &text, &target) {
            Ok(saved) => {
                self.saved_ok(st, saved, text);
                Ok(())
            }
            Err(e) => {
                self.record_error(st, &path, &e.to_string(), &kept_note(&path, &target));
                Err(e)
            }
        }
    }

    pub(super) fn saved_ok(&self, st: &mut State, saved: Saved, text: Arc<[u8]>) {
        st.saved.insert(saved.name.clone(), (saved.hash, text));
        st.error = Arc::from(Vec::new());
        st.error_time = SystemTime::now();
        if let Some(ino) = st.inodes.existing(&Key::Workflows(WfKey::Error)) {
            st.inval.push(Inval::Inode(ino));
        }
        self.invalidate_workflow(st, &saved.name);
        st.workflows_changed = SystemTime::now();
    }

    pub(super) fn invalidate_workflow(&self, st: &mut State, name: &Arc<str>) {
        let ino = st.inodes.ino(&Key::Workflows(WfKey::Root));
        st.inval.push(Inval::Inode(ino));
        st.inval.push(Inval::Entry(ino, name.to_string()));
        for key in [
            Key::Workflows(WfKey::Dir(name.clone())),
            Key::Workflows(WfKey::Hash(name.clone())),
            Key::Workflows(WfKey::Graph(name.clone())),
            Key::Workflows(WfKey::Versions(name.clone())),
        ] {
            if let Some(ino) = st.inodes.existing(&key) {
                st.inval.push(Inval::Inode(ino));
            }
        }
    }

    /// After a write to scratch file `id`: when its text so far is a whole workflow document
    /// (see [`whole_document`]) that `uwf workflow put` would refuse, the write itself fails
    /// (EINVAL, which `echo … > x.yaml` reports) and `workflows/error` says why. A text that is
    /// no whole document yet waits for the close, which registers it.
    pub(super) fn check_written(
        &self,
        st: &mut State,
        id: u64,
        draft: Option<&Arc<str>>,
        last: &[u8],
    ) -> Result<(), FsError> {
        let Some(f) = st.scratch.get(id) else {
            return Ok(());
        };
        let (path, target) = match (draft, f.place.clone()) {
            (Some(name), _) => (
                format!("workflows/{name}/workflow.yaml"),
                Target::Workflow(name.clone()),
            ),
            (None, Some((dir, name))) => match registration::target_of(&dir, &name) {
                Some(target) => (place_path(&dir, &name), target),
                None => return Ok(()),
            },
            (None, None) => return Ok(()),
        };
        if !whole_document(&f.data, last) {
            return Ok(());
        }
        match registration::check(&f.data, &target) {
            Ok(_) => Ok(()),
            Err(reason) => {
                self.record_error(st, &path, &reason, &kept_note(&path, &target));
                Err(FsError::Refused(reason))
            }
        }
    }

    /// A refused save of `path`: `workflows/error` explains it. The text stays in `path`
    /// (deleting that file reverts, and clears the error: see [`Tree::reverted`]).
    pub(super) fn record_error(&self, st: &mut State, path: &str, reason: &str, kept: &str) {
        st.error = Arc::from(registration::error_text(path, reason, kept).into_bytes());
        st.error_time = SystemTime::now();
        st.error_about = Some(path.to_owned());
        if let Some(ino) = st.inodes.existing(&Key::Workflows(WfKey::Error)) {
            st.inval.push(Inval::Inode(ino));
        }
    }

    /// The file at `path` (mount-relative) was deleted: if it held the text of the refusal
    /// `workflows/error` explains, the user reverted, and the explanation goes too.
    pub(super) fn reverted(&self, st: &mut State, path: &str) {
        if st.error_about.as_deref() != Some(path) {
            return;
        }
        st.error = Arc::from(Vec::new());
        st.error_time = SystemTime::now();
        st.error_about = None;
        if let Some(ino) = st.inodes.existing(&Key::Workflows(WfKey::Error)) {
            st.inval.push(Inval::Inode(ino));
        }
    }

    /// A draft leaves its view (deleted, or replaced): open handles keep their data as a
    /// nameless scratch file, which goes away with the last of them.
    pub(super) fn drop_draft(&self, st: &mut State, name: &Arc<str>, draft: Draft) {
        self.detach_draft(st, name, draft);
        self.collect(st, draft.id);
    }

    /// Turns a draft into a nameless scratch file, moving its open handles along.
    pub(super) fn detach_draft(&self, st: &mut State, name: &Arc<str>, draft: Draft) {
        let mut handles = 0;
        let mut writers = 0;
        for h in st.handles.values_mut() {
            if matches!(&h.open, Open::Draft(n) if n == name) {
                h.open = Open::Scratch(draft.id);
                handles += 1;
                writers += u32::from(h.write);
            }
        }
        if let Some(f) = st.scratch.get_mut(draft.id) {
            f.handles = handles;
            f.writers = writers;
            f.place = None;
        }
    }

    /// A scratch file became the view `name` by a rename: if it is still open it carries on as
    /// the view's draft (already saved); otherwise its data is no longer needed.
    pub(super) fn adopt_as_draft_if_open(&self, st: &mut State, name: &Arc<str>, id: u64) {
        let open = st.scratch.get(id).map_or(0, |f| f.handles);
        if open == 0 {
            st.scratch.remove(id);
            return;
        }
        st.scratch.unlink(id);
        let mut writers = 0;
        for h in st.handles.values_mut() {
            if matches!(h.open, Open::Scratch(i) if i == id) {
                h.open = Open::Draft(name.clone());
                writers += u32::from(h.write);
            }
        }
        if let Some(f) = st.scratch.get_mut(id) {
            f.handles = 0;
            f.writers = 0;
            f.dirty = false;
        }
        st.drafts.insert(
            name.clone(),
            Draft {
                id,
                writers,
                refused: false,
            },
        );
    }

    /// Drops a scratch file that has neither a name nor handles, and retires its inode.
    pub(super) fn collect(&self, st: &mut State, id: u64) {
        st.scratch.collect(id);
        if st.scratch.get(id).is_none()
            && let Some(ino) = st.inodes.existing(&Key::Scratch(id))
        {
            st.inodes.retire(ino);
        }
    }
}

/// Whether `text`, whose last write was `last`, is a whole workflow document: it parses as YAML,
/// and is either no mapping (`printf 'bad' > x.yaml`) or a mapping with both `roles` and
/// `graph`; and the last write is not a whole number of pages (the kernel splits a long write
/// into such pieces, and the next piece may still come).
fn whole_document(text: &[u8], last: &[u8]) -> bool {
    if last.is_empty() || last.len().is_multiple_of(4096) {
        return false;
    }
    let Ok(text) = std::str::from_utf8(text) else {
        return false;
    };
    if text.trim().is_empty() {
        return false;
    }
    match serde_yaml::from_str::<serde_yaml::Value>(text) {
        Ok(serde_yaml::Value::Mapping(m)) => m.contains_key("roles") && m.contains_key("graph"),
        Ok(_) => true,
        Err(_) => false,
    }
}

/// The path of a scratch file relative to the mount.
pub(super) fn place_path(dir: &Key, name: &str) -> String {
    match dir {
        Key::Workflows(WfKey::Dir(n)) => format!("workflows/{n}/{name}"),
        _ => format!("workflows/{name}"),
    }
}

pub(super) fn kept_note(path: &str, target: &Target) -> String {
    match target {
        Target::Workflow(_) => format!(
            "Your text is kept in {path}: fix it and save again, or delete that file to go back to \
             the registered version."
        ),
        Target::Any => format!("Your text is kept in {path}: fix it and save again."),
    }
}
