//! A directory store's thread records: `runs/<id>.context.json`, `forks.jsonl` (one JSON line per
//! fork), `runs/<child>.parent.json` and `runs/<parent>.children` (one child id per line).
//!
//! Architecture Invariant: append-only files (`forks.jsonl`, a parent's children) get one short
//! line per `write` on an `O_APPEND` descriptor, so concurrent writers never interleave.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::ThreadRecords;
use crate::engine::storage::index_files::{self, IndexError};
use crate::engine::thread::context::{self, ThreadContext};
use crate::engine::thread::family::{self, ParentLink};
use crate::engine::thread::forks::{self, Fork};

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
        let file = context::path(&self.root, id);
        match std::fs::read_to_string(&file) {
            Ok(text) => context::parse(&text, || file.clone()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ThreadContext::default()),
            Err(source) => Err(IndexError::Io { path: file, source }),
        }
    }

    fn set_context(&self, id: &str, context: &ThreadContext) -> Result<(), IndexError> {
        let file = context::path(&self.root, id);
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
        Dir::append(&forks::path(&self.root), &line)
    }

    fn forks(&self) -> Result<Vec<Fork>, IndexError> {
        forks::read_file(&self.root)
    }

    fn origin_of(&self, id: &str) -> Result<Option<Fork>, IndexError> {
        Ok(forks::read_file(&self.root)?
            .into_iter()
            .find(|f| f.thread == id))
    }

    fn link_parent(&self, child: &str, link: &ParentLink) -> Result<(), IndexError> {
        let dir = self.root.join("runs");
        std::fs::create_dir_all(&dir).map_err(|source| IndexError::Append {
            path: dir.clone(),
            source,
        })?;
        let text = serde_json::to_vec(link).expect("a parent link serializes");
        index_files::write_file(&self.root, &family::parent_file(&self.root, child), &text)?;
        Dir::append(
            &family::children_file(&self.root, &link.thread),
            &format!("{child}\n"),
        )
    }

    fn parent(&self, child: &str) -> Option<ParentLink> {
        family::parent_file_link(&self.root, child)
    }

    fn children(&self, parent: &str) -> Vec<String> {
        family::children_file_list(&self.root, parent)
    }
}
