//! The core without FUSE: editors' and tools' exact op sequences (the kernel requests of vim's
//! backup-and-rename save, emacs' lock file and rename, `sed -i`'s temp file renamed over the
//! view, an in-place truncate and write) replayed against a [`Tree`], checking what got
//! registered and what the files show.
//!
//! Invariant: these tests drive the tree only through its public methods, the ones the adapter
//! calls, so what passes here is what a real mount does (`tests/fs_mount.rs` checks the wiring).

use std::sync::Arc;

use super::{Options, Tree};
use crate::cas::Store;
use crate::cas::store::now_ms;
use crate::engine::workflow::{self, registry};
use crate::fs::attr::{Caller, Kind, Lookup, RenameFlags, SetAttr, TimeSet};
use crate::fs::error::FsError;
use crate::fs::inode::{Ino, ROOT};
use crate::fs::scratch::Limits;
use crate::fs::views::Source;

mod thread_files;

const RW: i32 = libc::O_RDWR;
const WO: i32 = libc::O_WRONLY;
const ME: Caller = Caller { uid: 0, gid: 0 };

fn definition(description: &str) -> String {
    format!(
        "name: demo\ndescription: {description}\nroles:\n  planner:\n    goal: plan\n    meta:\n      \
         type: object\n      properties: {{ plan: {{ type: string }} }}\n      required: [plan]\n\
         graph:\n  $START: [ {{ role: planner, condition: null }} ]\n  planner: [ {{ role: $END, \
         condition: null }} ]\n"
    )
}

struct Fx {
    _dir: tempfile::TempDir,
    tree: Tree,
}

impl Fx {
    fn new() -> Fx {
        Fx::with(false, Limits::default())
    }

    fn with(read_only: bool, limits: Limits) -> Fx {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let checked = workflow::parse(&definition("first")).unwrap();
        let hash = checked.definition.store(&store).unwrap();
        registry::register(dir.path(), "demo", hash, now_ms()).unwrap();
        let tree = Tree::new(
            Source::new(store),
            Options {
                read_only,
                uid: 0,
                gid: 0,
                limits,
                workdir: dir.path().to_path_buf(),
                by: Some("mounter".to_owned()),
            },
        );
        Fx { _dir: dir, tree }
    }

    fn versions(&self) -> usize {
        let e = registry::entry(self._dir.path(), "demo").unwrap();
        e.history.len() + 1
    }

    fn find(&self, path: &str) -> Result<Ino, FsError> {
        let mut ino = ROOT;
        for part in path.split('/').filter(|p| !p.is_empty()) {
            match self.tree.lookup(ino, part)? {
                Lookup::Found(a) => ino = a.ino,
                Lookup::Missing { .. } => return Err(FsError::NotFound),
            }
        }
        Ok(ino)
    }

    fn split<'a>(&self, path: &'a str) -> (Ino, &'a str) {
        let (dir, name) = path.rsplit_once('/').unwrap();
        (self.find(dir).unwrap(), name)
    }

    fn cat(&self, path: &str) -> String {
        let ino = self.find(path).unwrap();
        let o = self.tree.open(ino, libc::O_RDONLY, ME).unwrap();
        let bytes = self.tree.read(ino, o.fh, 0, 1 << 20).unwrap();
        self.tree.release(o.fh);
        String::from_utf8(bytes).unwrap()
    }

    fn create(&self, path: &str, flags: i32) -> Result<(Ino, u64), FsError> {
        let (dir, name) = self.split(path);
        let (a, o) = self
            .tree
            .create(dir, name, 0o644, 0o022, flags | libc::O_CREAT, ME)?;
        Ok((a.ino, o.fh))
    }

    fn open(&self, path: &str, flags: i32) -> (Ino, u64) {
        let ino = self.find(path).unwrap();
        (ino, self.tree.open(ino, flags, ME).unwrap().fh)
    }

    fn truncate(&self, ino: Ino, fh: Option<u64>) -> Result<(), FsError> {
        let set = SetAttr {
            size: Some(0),
            ..SetAttr::default()
        };
        self.tree.setattr(ino, fh, set, ME).map(drop)
    }

    fn rename(&self, from: &str, to: &str, noreplace: bool) -> Result<(), FsError> {
        let (a, an) = self.split(from);
        let (b, bn) = self.split(to);
        let flags = if noreplace {
            RenameFlags::NOREPLACE
        } else {
            RenameFlags::NONE
        };
        self.tree.rename(a, an, b, bn, flags, ME)
    }

    fn unlink(&self, path: &str) -> Result<(), FsError> {
        let (dir, name) = self.split(path);
        self.tree.unlink(dir, name)
    }

    /// Closes a write handle the way a program does: flush, then release.
    fn close(&self, fh: u64) -> Result<(), FsError> {
        let r = self.tree.flush(fh);
        self.tree.release(fh);
        r
    }

    fn names(&self, path: &str) -> Vec<String> {
        let ino = self.find(path).unwrap();
        self.tree
            .readdir(ino, 0)
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .filter(|n| n != "." && n != "..")
            .collect()
    }
}

const YAML: &str = "workflows/demo/workflow.yaml";

#[test]
fn the_tree_has_the_documented_shape() {
    let fx = Fx::new();
    assert_eq!(fx.names("/"), ["README.md", "workflows", "threads", "cas"]);
    assert_eq!(fx.names("workflows"), ["error", "demo"]);
    assert_eq!(
        fx.names("workflows/demo"),
        [
            "workflow.yaml",
            "hash",
            "graph.mmd",
            "versions",
            "prompt",
            "threads"
        ]
    );
    let hash = fx.cat("workflows/demo/hash");
    assert_eq!(hash.len(), 14);
    assert_eq!(
        fx.names("workflows/demo/versions"),
        [format!("001-{}.yaml", hash.trim()), "current".to_owned()]
    );
    // Found by the bare hash too, although only the ordered name is listed.
    assert_eq!(
        fx.cat(&format!("workflows/demo/versions/{}.yaml", hash.trim())),
        fx.cat(&format!("workflows/demo/versions/001-{}.yaml", hash.trim()))
    );
    assert!(fx.cat(YAML).contains("description: first"));
    assert!(
        fx.cat("workflows/demo/graph.mmd")
            .starts_with("flowchart TD")
    );
    assert!(fx.cat("README.md").contains("workflows/"));
    let lower = format!("cas/{}", hash.trim().to_lowercase());
    assert!(
        fx.cat(&lower).contains("\"payload\""),
        "case-insensitive cas lookup"
    );
    assert!(fx.names("cas").contains(&"schemas".to_owned()));
    assert!(
        fx.names("cas/schemas")
            .contains(&"F5VV55NBKX1R5.json".to_owned())
    );
    assert!(fx.names("threads").is_empty());
}

#[test]
fn attributes_follow_the_rules() {
    let fx = Fx::new();
    let attr = |p: &str| fx.tree.getattr(fx.find(p).unwrap(), None).unwrap();
    assert_eq!(attr("/").perm, 0o555);
    assert_eq!(attr("workflows").perm, 0o755);
    assert_eq!(attr("workflows/demo/hash").perm, 0o444);
    assert_eq!(attr(YAML).perm, 0o644);
    assert_eq!(attr("cas").kind, Kind::Dir);
    let yaml = attr(YAML);
    assert_eq!(
        yaml.size as usize,
        fx.cat(YAML).len(),
        "stat reports the true size"
    );
    // Names that can never appear are cached as missing for long; others briefly.
    assert_eq!(
        fx.tree
            .lookup(fx.find("cas").unwrap(), "not-a-hash")
            .unwrap(),
        Lookup::Missing { permanent: true }
    );
    assert_eq!(
        fx.tree
            .lookup(fx.find("workflows").unwrap(), "nope")
            .unwrap(),
        Lookup::Missing { permanent: false }
    );
    let long = "x".repeat(256);
    assert_eq!(fx.tree.lookup(ROOT, &long), Err(FsError::NameTooLong));
}

/// vim (nocompatible): swap file, the 4913 probe, backup by rename, create, ftruncate, write,
/// fsync, chmod, close, delete the backup.
#[test]
fn vim_saves_once() {
    let fx = Fx::new();
    let (_, swp) = fx
        .create("workflows/demo/.workflow.yaml.swp", RW | libc::O_EXCL)
        .unwrap();
    fx.tree.write(swp, 0, &[0; 4096]).unwrap();
    let (probe_ino, probe) = fx.create("workflows/demo/4913", WO | libc::O_EXCL).unwrap();
    let same_owner = SetAttr {
        uid: Some(0),
        gid: Some(0),
        ..SetAttr::default()
    };
    fx.tree.setattr(probe_ino, None, same_owner, ME).unwrap();
    fx.close(probe).unwrap();
    fx.unlink("workflows/demo/4913").unwrap();
    fx.rename(YAML, "workflows/demo/workflow.yaml~", false)
        .unwrap();
    assert!(fx.cat("workflows/demo/workflow.yaml~").contains("first"));
    // The kernel's dentry moved with the inode: the name resolves to a fresh inode of the view.
    let (ino, fh) = fx.create(YAML, WO).unwrap();
    fx.truncate(ino, Some(fh)).unwrap();
    fx.tree
        .write(fh, 0, definition("by vim").as_bytes())
        .unwrap();
    fx.tree.fsync(fh).unwrap();
    let chmod = SetAttr {
        mode: Some(0o100644),
        ..SetAttr::default()
    };
    fx.tree.setattr(ino, None, chmod, ME).unwrap();
    assert_eq!(fx.versions(), 1, "nothing registers before the close");
    fx.close(fh).unwrap();
    assert_eq!(fx.versions(), 2);
    fx.unlink("workflows/demo/workflow.yaml~").unwrap();
    fx.close(swp).unwrap();
    fx.unlink("workflows/demo/.workflow.yaml.swp").unwrap();
    assert_eq!(fx.versions(), 2);
    assert!(fx.cat(YAML).contains("by vim"));
    assert_eq!(fx.names("workflows/demo").len(), 6, "no scratch file left");
    assert_eq!(fx.tree.scratch_bytes(), 0);
}

/// nano, `cp` over, `echo >`: open write-only, truncate without a handle, write, close.
#[test]
fn in_place_truncate_saves_once() {
    let fx = Fx::new();
    let (ino, fh) = fx.open(YAML, WO);
    fx.truncate(ino, None).unwrap();
    // bash flushes once between the truncate and the write (dup2 + close): no refusal there.
    fx.tree.flush(fh).unwrap();
    fx.tree
        .write(fh, 0, definition("by nano").as_bytes())
        .unwrap();
    fx.tree.fsync(fh).unwrap();
    fx.close(fh).unwrap();
    assert_eq!(fx.versions(), 2);
    assert!(fx.cat(YAML).contains("by nano"));
}

/// `sed -i` and python's write-temp-then-`os.replace`: a scratch file renamed over the view.
#[test]
fn rename_over_the_view_saves_once() {
    let fx = Fx::new();
    let (tmp_ino, tmp) = fx
        .create("workflows/demo/sedX1", RW | libc::O_EXCL)
        .unwrap();
    fx.tree
        .setattr(
            tmp_ino,
            None,
            SetAttr {
                mode: Some(0o644),
                ..SetAttr::default()
            },
            ME,
        )
        .unwrap();
    fx.tree
        .write(tmp, 0, definition("by sed").as_bytes())
        .unwrap();
    fx.close(tmp).unwrap();
    assert_eq!(fx.versions(), 1, "a scratch name never registers");
    fx.rename("workflows/demo/sedX1", YAML, false).unwrap();
    assert_eq!(fx.versions(), 2);
    assert!(fx.cat(YAML).contains("by sed"));
    assert_eq!(fx.find("workflows/demo/sedX1"), Err(FsError::NotFound));
    // The renamed inode now is the view.
    assert_eq!(fx.find(YAML).unwrap(), tmp_ino);
}

/// emacs: backup by rename, create with O_TRUNC, two writes, fsync, then an extra empty open.
#[test]
fn emacs_saves_once() {
    let fx = Fx::new();
    let (_, lock) = fx
        .create("workflows/demo/.#-emacs1234", RW | libc::O_EXCL)
        .unwrap();
    fx.tree.write(lock, 0, b"root@vm.1").unwrap();
    fx.close(lock).unwrap();
    fx.rename(
        "workflows/demo/.#-emacs1234",
        "workflows/demo/.#workflow.yaml",
        true,
    )
    .unwrap();
    fx.rename(YAML, "workflows/demo/workflow.yaml~", false)
        .unwrap();
    let (_, fh) = fx.create(YAML, WO | libc::O_TRUNC).unwrap();
    let text = definition("by emacs");
    let (a, b) = text.split_at(10);
    fx.tree.write(fh, 0, a.as_bytes()).unwrap();
    fx.tree.write(fh, a.len() as u64, b.as_bytes()).unwrap();
    fx.close(fh).unwrap();
    let (_, again) = fx.open(YAML, WO);
    fx.close(again).unwrap();
    fx.unlink("workflows/demo/.#workflow.yaml").unwrap();
    assert_eq!(fx.versions(), 2);
    assert!(fx.cat(YAML).contains("by emacs"));
}

#[test]
fn touch_and_append_of_the_same_text_register_nothing_new() {
    let fx = Fx::new();
    let (ino, fh) = fx.open(YAML, WO | libc::O_NONBLOCK);
    let now = SetAttr {
        atime: Some(TimeSet::Now),
        mtime: Some(TimeSet::Now),
        ..SetAttr::default()
    };
    fx.tree.setattr(ino, Some(fh), now, ME).unwrap();
    fx.close(fh).unwrap();
    assert_eq!(fx.versions(), 1);
    let size = fx.tree.getattr(ino, None).unwrap().size;
    let (_, fh) = fx.open(YAML, WO | libc::O_APPEND);
    fx.tree.write(fh, size, b"# a comment\n").unwrap();
    fx.close(fh).unwrap();
    assert_eq!(fx.versions(), 1, "a comment does not change the definition");
}

#[test]
fn a_new_yaml_file_registers_under_its_name_and_stays() {
    let fx = Fx::new();
    let text = definition("copied").replace("name: demo", "name: other");
    let (_, fh) = fx.create("workflows/new.yaml", WO | libc::O_EXCL).unwrap();
    fx.tree.write(fh, 0, text.as_bytes()).unwrap();
    fx.close(fh).unwrap();
    assert!(fx.names("workflows").contains(&"other".to_owned()));
    assert_eq!(fx.cat("workflows/new.yaml"), text);
    assert_eq!(
        fx.cat("workflows/other/workflow.yaml"),
        text,
        "the saved text is shown"
    );
    // Editors' side files next to it never register.
    let (_, lock) = fx.create("workflows/.#new.yaml", WO).unwrap();
    fx.tree.write(lock, 0, b"user@host.1").unwrap();
    fx.close(lock).unwrap();
    assert!(fx.cat("workflows/error").is_empty());
}

#[test]
fn a_refused_save_keeps_the_text_and_explains() {
    let fx = Fx::new();
    let bad = "name: demo\nroles: {}\n";
    let (ino, fh) = fx.open(YAML, WO);
    fx.truncate(ino, None).unwrap();
    fx.tree.write(fh, 0, bad.as_bytes()).unwrap();
    let err = fx.close(fh).unwrap_err();
    assert_eq!(err.errno(), libc::EINVAL, "{err}");
    assert_eq!(fx.versions(), 1);
    assert_eq!(fx.cat(YAML), bad, "no edit lost");
    let error = fx.cat("workflows/error");
    assert!(error.contains("workflows/demo/workflow.yaml"), "{error}");
    assert!(error.contains("graph"), "{error}");
    // Fixing it and saving again registers and clears the error.
    let (ino, fh) = fx.open(YAML, WO);
    fx.truncate(ino, Some(fh)).unwrap();
    fx.tree
        .write(fh, 0, definition("fixed").as_bytes())
        .unwrap();
    fx.close(fh).unwrap();
    assert_eq!(fx.versions(), 2);
    assert!(fx.cat("workflows/error").is_empty());
    // A refused draft can also be deleted to go back to the registered text.
    let (ino, fh) = fx.open(YAML, WO);
    fx.truncate(ino, Some(fh)).unwrap();
    fx.tree.write(fh, 0, b"name: [").unwrap();
    assert!(fx.close(fh).is_err());
    fx.unlink(YAML).unwrap();
    assert!(fx.cat(YAML).contains("fixed"));
    assert_eq!(fx.unlink(YAML).unwrap_err().errno(), libc::EPERM);
}

#[test]
fn a_refused_rename_leaves_everything_in_place() {
    let fx = Fx::new();
    let (_, fh) = fx.create("workflows/demo/tmp", WO).unwrap();
    fx.tree
        .write(
            fh,
            0,
            definition("x")
                .replace("name: demo", "name: other")
                .as_bytes(),
        )
        .unwrap();
    fx.close(fh).unwrap();
    let err = fx.rename("workflows/demo/tmp", YAML, false).unwrap_err();
    assert_eq!(err.errno(), libc::EINVAL);
    assert!(fx.cat("workflows/error").contains("does not match"));
    assert!(fx.cat("workflows/demo/tmp").contains("name: other"));
    assert!(fx.cat(YAML).contains("first"));
}

#[test]
fn errno_for_what_the_tree_does_not_allow() {
    let fx = Fx::new();
    let errno = |r: Result<(), FsError>| r.unwrap_err().errno();
    let hash = fx.find("workflows/demo/hash").unwrap();
    assert_eq!(
        fx.tree.open(hash, WO, ME).unwrap_err().errno(),
        libc::EACCES
    );
    assert_eq!(errno(fx.unlink("workflows/demo/hash")), libc::EPERM);
    assert_eq!(
        errno(fx.rename("workflows/demo/hash", "workflows/demo/x", false)),
        libc::EPERM
    );
    let cas = fx.find("cas").unwrap();
    assert_eq!(
        fx.tree
            .create(cas, "x", 0o644, 0, WO | libc::O_CREAT, ME)
            .unwrap_err()
            .errno(),
        libc::EACCES
    );
    let (_, a) = fx.create("workflows/a", WO).unwrap();
    fx.close(a).unwrap();
    let (_, b) = fx.create("workflows/b", WO).unwrap();
    fx.close(b).unwrap();
    assert_eq!(
        errno(fx.rename("workflows/a", "workflows/b", true)),
        libc::EEXIST
    );
    let w = fx.find("workflows").unwrap();
    assert_eq!(
        fx.tree
            .rename(w, "a", w, "b", RenameFlags::EXCHANGE, ME)
            .unwrap_err()
            .errno(),
        libc::EINVAL,
        "RENAME_EXCHANGE"
    );
    assert_eq!(
        fx.create("workflows/a", WO | libc::O_EXCL)
            .unwrap_err()
            .errno(),
        libc::EEXIST
    );
    let other_owner = SetAttr {
        uid: Some(1000),
        ..SetAttr::default()
    };
    assert_eq!(
        fx.tree
            .setattr(hash, None, other_owner, ME)
            .unwrap_err()
            .errno(),
        libc::EPERM
    );
}

#[test]
fn scratch_files_are_size_limited() {
    let fx = Fx::with(
        false,
        Limits {
            file: 1000,
            total: 1500,
            count: 10,
        },
    );
    let (ino, fh) = fx.create("workflows/big", WO).unwrap();
    let huge = SetAttr {
        size: Some(999_999_999_999_999),
        ..SetAttr::default()
    };
    assert_eq!(
        fx.tree
            .setattr(ino, Some(fh), huge, ME)
            .unwrap_err()
            .errno(),
        libc::EFBIG
    );
    assert_eq!(
        fx.tree.write(fh, 990, &[1; 20]).unwrap_err().errno(),
        libc::EFBIG
    );
    fx.close(fh).unwrap();
}

#[test]
fn a_read_only_tree_writes_nothing_and_tracks_no_opens() {
    let fx = Fx::with(true, Limits::default());
    let yaml = fx.find(YAML).unwrap();
    assert_eq!(fx.tree.getattr(yaml, None).unwrap().perm, 0o444);
    assert_eq!(fx.tree.open(yaml, 0, ME), Err(FsError::Unsupported));
    // No-open mode: reads arrive with handle 0.
    assert!(
        String::from_utf8(fx.tree.read(yaml, 0, 0, 4096).unwrap())
            .unwrap()
            .contains("name: demo")
    );
    let w = fx.find("workflows").unwrap();
    assert_eq!(
        fx.tree
            .create(w, "x.yaml", 0o644, 0, WO | libc::O_CREAT, ME)
            .unwrap_err()
            .errno(),
        libc::EROFS
    );
}

#[test]
fn directories_are_listed_without_being_opened() {
    // ENOSYS (once per connection) makes the kernel cache every listing; readdir needs no handle.
    let fx = Fx::new();
    let w = fx.find("workflows").unwrap();
    assert_eq!(fx.tree.opendir(w), Err(FsError::Unsupported));
    assert_eq!(fx.tree.opendir(ROOT), Err(FsError::Unsupported));
    assert!(!fx.tree.readdir(w, 0).unwrap().is_empty());
}

#[test]
fn directory_mtimes_move_with_their_listings_even_within_one_millisecond() {
    let fx = Fx::new();
    let mtime = |path: &str| {
        let ino = fx.find(path).unwrap();
        fx.tree.getattr(ino, None).unwrap().mtime
    };
    let versions = "workflows/demo/versions";
    let before = (mtime(versions), mtime("workflows/demo"));
    assert_eq!((mtime(versions), mtime("workflows/demo")), before);
    // A second version registered at the same millisecond as the first: same registration
    // time, yet both directories' mtimes move (versions/ lists one more name).
    let e = registry::entry(fx._dir.path(), "demo").unwrap();
    let store = Store::open(fx._dir.path()).unwrap();
    let hash = workflow::parse(&definition("second"))
        .unwrap()
        .definition
        .store(&store)
        .unwrap();
    registry::register(fx._dir.path(), "demo", hash, e.registered_at).unwrap();
    assert_ne!(mtime(versions), before.0);
    assert_ne!(mtime("workflows/demo"), before.1);
    assert_eq!(fx.names(versions).len(), 3, "two versions and `current`");
    // Registry files younger than SETTLE stand for nothing: workflows/ reports a new mtime at
    // every look until then, then a stable one.
    std::thread::sleep(crate::fs::views::SETTLE * 2);
    let settled = mtime("workflows");
    assert_eq!(mtime("workflows"), settled);
}

#[test]
fn readdir_pages_with_offsets() {
    let fx = Fx::new();
    for i in 0..30 {
        let (_, fh) = fx.create(&format!("workflows/f{i:02}"), WO).unwrap();
        fx.close(fh).unwrap();
    }
    let w = fx.find("workflows").unwrap();
    let all = fx.tree.readdir(w, 0).unwrap();
    assert_eq!(all.len(), 2 + 2 + 30);
    // Resuming from any entry's offset continues right after it.
    let rest = fx.tree.readdir(w, all[10].offset).unwrap();
    assert_eq!(rest[0], all[11]);
    let names: Arc<[String]> = all.iter().map(|e| e.name.clone()).collect();
    assert_eq!(names.iter().filter(|n| n.starts_with('f')).count(), 30);
}

#[test]
fn files_renamed_or_deleted_while_open_keep_working() {
    let fx = Fx::new();
    // A writer has workflow.yaml open when it is renamed away: its handle follows the inode.
    let (ino, fh) = fx.open(YAML, WO);
    fx.truncate(ino, Some(fh)).unwrap();
    // Not a whole document yet (the `[` is open), so the write does not check it.
    fx.tree.write(fh, 0, b"roles: [half a definition").unwrap();
    fx.rename(YAML, "workflows/demo/moved", false).unwrap();
    fx.tree.write(fh, 25, b", finished").unwrap();
    fx.close(fh).unwrap();
    assert_eq!(
        fx.cat("workflows/demo/moved"),
        "roles: [half a definition, finished"
    );
    assert!(
        fx.cat(YAML).contains("first"),
        "the view is back to the registered text"
    );
    assert_eq!(fx.versions(), 1);
    // A scratch file deleted while open stays readable through its handle until closed.
    let (ino, fh) = fx.create("workflows/tmp", RW).unwrap();
    fx.tree.write(fh, 0, b"data").unwrap();
    fx.unlink("workflows/tmp").unwrap();
    assert_eq!(fx.tree.getattr(ino, Some(fh)).unwrap().size, 4);
    assert_eq!(fx.tree.read(ino, fh, 0, 10).unwrap(), b"data");
    fx.close(fh).unwrap();
    assert_eq!(fx.tree.getattr(ino, None), Err(FsError::NotFound));
    assert_eq!(
        fx.tree.scratch_bytes(),
        "roles: [half a definition, finished".len() as u64
    );
}
