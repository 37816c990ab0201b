//! A directory store's thread records: `runs/<id>.context.json`, `forks.jsonl` (one JSON line per
//! fork), `runs/<child>.parent.json` and `runs/<parent>.children` (one child id per line).
//!
//! The file layout is public: a store copy and the mount read a directory store's files
//! whatever the backend of the root they run in.
//!
//! Architecture Invariant: append-only files (`forks.jsonl`, a parent's children) get one short
//! line per `write` on an `O_APPEND` descriptor, so concurrent writers never interleave.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::{Fork, ParentLink, ThreadContext, ThreadRecords};
use crate::engine::storage::index_files::{self, IndexError};

/// Where a directory store keeps the context of thread `id`.
pub(crate) fn context_path(root: &Path, id: &str) -> PathBuf {
    root.join("runs").join(format!("{id}.context.json"))
}

/// The forks file under `root`.
pub(crate) fn forks_path(root: &Path) -> PathBuf {
    root.join("forks.jsonl")
}

/// Where a directory store keeps the parent link of `child`.
pub(crate) fn parent_path(root: &Path, child: &str) -> PathBuf {
    root.join("runs").join(format!("{child}.parent.json"))
}

/// Where a directory store lists the children of `parent`.
pub(crate) fn children_path(root: &Path, parent: &str) -> PathBuf {
    root.join("runs").join(format!("{parent}.children"))
}

/// Every fork in `forks.jsonl` under `root`, oldest first (lines that do not parse, such as a
/// torn last line, are skipped).
pub(crate) fn read_forks(root: &Path) -> Result<Vec<Fork>, IndexError> {
    let path = forks_path(root);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(IndexError::Io { path, source }),
    };
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect())
}

/// The parent link in `runs/<child>.parent.json` under `root`.
pub(crate) fn read_parent(root: &Path, child: &str) -> Option<ParentLink> {
    let bytes = std::fs::read(parent_path(root, child)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The children listed in `runs/<parent>.children` under `root`, oldest first.
pub(crate) fn read_children(root: &Path, parent: &str) -> Vec<String> {
    std::fs::read_to_string(children_path(root, parent))
        .map(|text| {
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// A context record's text as a context; `place` names where it was read, for the error.
pub(super) fn parse_context(
    text: &str,
    place: impl Fn() -> PathBuf,
) -> Result<ThreadContext, IndexError> {
    serde_json::from_str(text).map_err(|e| IndexError::Damaged {
        path: place(),
        reason: format!("it is not a thread context: {e}"),
    })
}

/// Thread records in files under the root.
pub(super) struct Dir {
    root: PathBuf,
}

impl Dir {
    pub(super) fn new(root: &Path) -> Dir {
        Dir {
            root: root.to_path_buf(),
        }
    }

    /// Appends `line` to the file at `path` in one `write`, creating it if need be.
    fn append(path: &Path, line: &str) -> Result<(), IndexError> {
        let io = |source| IndexError::Append {
            path: path.to_path_buf(),
            source,
        };
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(io)?;
        file.write_all(line.as_bytes()).map_err(io)
    }
}

impl ThreadRecords for Dir {
    fn context(&self, id: &str) -> Result<ThreadContext, IndexError> {
        let file = context_path(&self.root, id);
        match std::fs::read_to_string(&file) {
            Ok(text) => parse_context(&text, || file.clone()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ThreadContext::default()),
            Err(source) => Err(IndexError::Io { path: file, source }),
        }
    }

    fn set_context(&self, id: &str, context: &ThreadContext) -> Result<(), IndexError> {
        let file = context_path(&self.root, id);
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir).map_err(|source| IndexError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let mut bytes = serde_json::to_vec_pretty(context).expect("a context serialises");
        bytes.push(b'\n');
        index_files::write_file(&self.root, &file, &bytes)
    }

    fn set_paused(&self, id: &str, paused: bool) -> Result<(), IndexError> {
        let mut context = self.context(id)?;
        context.paused = paused;
        self.set_context(id, &context)
    }

    fn record_fork(&self, fork: &Fork) -> Result<(), IndexError> {
        let mut line = serde_json::to_string(fork).expect("a fork serializes");
        line.push('\n');
        Dir::append(&forks_path(&self.root), &line)
    }

    fn forks(&self) -> Result<Vec<Fork>, IndexError> {
        read_forks(&self.root)
    }

    fn origin_of(&self, id: &str) -> Result<Option<Fork>, IndexError> {
        Ok(read_forks(&self.root)?.into_iter().find(|f| f.thread == id))
    }

    fn link_parent(&self, child: &str, link: &ParentLink) -> Result<(), IndexError> {
        let dir = self.root.join("runs");
        std::fs::create_dir_all(&dir).map_err(|source| IndexError::Append {
            path: dir.clone(),
            source,
        })?;
        let text = serde_json::to_vec(link).expect("a parent link serializes");
        index_files::write_file(&self.root, &parent_path(&self.root, child), &text)?;
        Dir::append(
            &children_path(&self.root, &link.thread),
            &format!("{child}\n"),
        )
    }

    fn parent(&self, child: &str) -> Option<ParentLink> {
        read_parent(&self.root, child)
    }

    fn children(&self, parent: &str) -> Vec<String> {
        read_children(&self.root, parent)
    }
}
