//! `uwf export`: the mount's tree written out as plain files, for machines without FUSE and as
//! the baseline the filesystem benchmark compares the mount against.
//!
//! Architecture Invariant: the export walks the very [`Tree`] the mount serves — the same
//! `lookup`, `readdir`, `read` and `readlink` answers — so the two cannot drift: every file the
//! export writes has the bytes a `cat` through the mount would show at that moment. Files keep
//! the mount's permissions and modification times; symbolic links keep their targets.

use std::fs::{File, FileTimes};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::attr::{Attr, Kind, Lookup};
use super::error::FsError;
use super::inode::{Ino, ROOT};
use super::scratch::Limits;
use super::tree::{Options, Tree};
use super::views::Source;

/// What to export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Selection {
    /// `threads/<id>/`
    Thread(String),
    /// `threads/` and `workflows/` (everything but `cas/`, which is the store itself, and
    /// the mount's README).
    All,
}

/// Errors of an export.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ExportError {
    #[error("cannot read {path} from the store: {source}")]
    Read {
        path: String,
        #[source]
        source: FsError,
    },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What an export wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Exported {
    pub dirs: usize,
    pub files: usize,
    pub links: usize,
    pub bytes: u64,
}

/// How much one read asks for.
const CHUNK: u32 = 1 << 20;

/// Writes `what` of the storage behind `source` under `dir` (created if missing).
pub(crate) fn export(
    source: Source,
    what: &Selection,
    dir: &Path,
) -> Result<Exported, ExportError> {
    let tree = Tree::new(
        source,
        Options {
            read_only: false,
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
            limits: Limits::default(),
            // An export only reads: no thread is started through it.
            workdir: std::path::PathBuf::from("/"),
            by: None,
        },
    );
    let mut walk = Walk {
        tree: &tree,
        out: Exported::default(),
    };
    let roots: Vec<Vec<&str>> = match what {
        Selection::Thread(id) => vec![vec!["threads", id.as_str()]],
        Selection::All => vec![vec!["threads"], vec!["workflows"]],
    };
    for parts in roots {
        let mut ino = ROOT;
        let mut rel = String::new();
        let mut attr = None;
        for part in &parts {
            rel = if rel.is_empty() {
                (*part).to_owned()
            } else {
                format!("{rel}/{part}")
            };
            let a = walk.lookup(ino, part, &rel)?;
            ino = a.ino;
            attr = Some(a);
        }
        if let Some(attr) = attr {
            walk.entry(&attr, &rel, &dir.join(&rel))?;
        }
    }
    Ok(walk.out)
}

struct Walk<'a> {
    tree: &'a Tree,
    out: Exported,
}

impl Walk<'_> {
    fn read_error(rel: &str) -> impl FnOnce(FsError) -> ExportError + '_ {
        move |source| ExportError::Read {
            path: rel.to_owned(),
            source,
        }
    }

    fn lookup(&self, parent: Ino, name: &str, rel: &str) -> Result<Attr, ExportError> {
        match self
            .tree
            .lookup(parent, name)
            .map_err(Self::read_error(rel))?
        {
            Lookup::Found(a) => Ok(a),
            Lookup::Missing { .. } => Err(ExportError::Read {
                path: rel.to_owned(),
                source: FsError::NotFound,
            }),
        }
    }

    fn entry(&mut self, attr: &Attr, rel: &str, dest: &Path) -> Result<(), ExportError> {
        let write = |source| ExportError::Write {
            path: dest.to_path_buf(),
            source,
        };
        match attr.kind {
            Kind::Dir => {
                std::fs::create_dir_all(dest).map_err(write)?;
                let mut offset = 0;
                let mut children = Vec::new();
                loop {
                    let page = self
                        .tree
                        .readdir(attr.ino, offset)
                        .map_err(Self::read_error(rel))?;
                    let Some(last) = page.last() else {
                        break;
                    };
                    offset = last.offset;
                    children.extend(
                        page.into_iter()
                            .map(|e| e.name)
                            .filter(|n| n != "." && n != ".."),
                    );
                }
                for name in children {
                    let child_rel = format!("{rel}/{name}");
                    let child = self.lookup(attr.ino, &name, &child_rel)?;
                    self.entry(&child, &child_rel, &dest.join(&name))?;
                    self.tree.forget(child.ino, 1);
                }
                set_times(dest, attr.mtime).map_err(write)?;
                self.out.dirs += 1;
            }
            Kind::File => {
                let mut bytes = Vec::new();
                loop {
                    let chunk = self
                        .tree
                        .read(attr.ino, 0, bytes.len() as u64, CHUNK)
                        .map_err(Self::read_error(rel))?;
                    let done = chunk.len() < CHUNK as usize;
                    bytes.extend_from_slice(&chunk);
                    if done {
                        break;
                    }
                }
                remove_existing(dest).map_err(write)?;
                std::fs::write(dest, &bytes).map_err(write)?;
                set_times(dest, attr.mtime).map_err(write)?;
                std::fs::set_permissions(dest, std::fs::Permissions::from_mode(attr.perm.into()))
                    .map_err(write)?;
                self.out.files += 1;
                self.out.bytes += bytes.len() as u64;
            }
            Kind::Symlink => {
                let target = self
                    .tree
                    .readlink(attr.ino)
                    .map_err(Self::read_error(rel))?;
                remove_existing(dest).map_err(write)?;
                std::os::unix::fs::symlink(target, dest).map_err(write)?;
                self.out.links += 1;
            }
        }
        Ok(())
    }
}

fn remove_existing(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

fn set_times(path: &Path, time: SystemTime) -> std::io::Result<()> {
    File::open(path)?.set_times(FileTimes::new().set_accessed(time).set_modified(time))
}

impl crate::advice::Advice for ExportError {}
