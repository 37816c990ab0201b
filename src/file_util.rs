//! Writing files so that readers never see half of one: atomic replacement (temp file in the
//! same directory, write, fsync, rename), no-clobber publication of immutable files, in-place
//! overwrites, and writes that recycle inodes instead of creating and freeing them.
//!
//! Used by `cas` (node files, the type index) and `engine` (index files, run files, caches,
//! configuration, `.env`); it imports nothing from the crate. Every error names the file and
//! what was being done to it (`cannot write temp file for X`, `cannot rename … onto X`), so a
//! full disk never reads as "cannot read".
//!
//! Architecture Invariant: a file written by [`AtomicWrite`] is either its old content or its
//! complete new content, for any reader and after any crash; what a crash can leave is a temp
//! file named `.uwf-tmp-<pid>-…` beside it. The first atomic write of a process into a directory
//! removes such temp files older than [`STALE_TEMP_AGE`] (no writer takes that long), and
//! `uwf cas gc` removes those in `cas/tmp/` older than its grace period whose process is gone
//! ([`temp_of_live_process`]).

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// How the names of temp files start. Nothing else uses this prefix. The writer's pid and a
/// `-` follow (`.uwf-tmp-<pid>-<random>`), so that a collector can tell a live writer's file.
pub(crate) const TEMP_PREFIX: &str = ".uwf-tmp-";

/// This process's temp file prefix: [`TEMP_PREFIX`], its pid and a `-`.
fn own_temp_prefix() -> &'static str {
    static PREFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PREFIX.get_or_init(|| format!("{TEMP_PREFIX}{}-", std::process::id()))
}

/// Whether the temp file named `name` belongs to a process that is still running (by the pid
/// in its name; a name without one belongs to none). A recycled pid only keeps a file longer.
pub(crate) fn temp_of_live_process(name: &str) -> bool {
    let Some(pid) = name
        .strip_prefix(TEMP_PREFIX)
        .and_then(|rest| rest.split_once('-'))
        .and_then(|(pid, _)| pid.parse::<i32>().ok())
        .filter(|pid| *pid > 0)
    else {
        return false;
    };
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Ok(()) => true,
        // It exists, owned by someone else.
        Err(nix::errno::Errno::EPERM) => true,
        Err(_) => false,
    }
}

/// Temp files older than this are abandoned: no write takes an hour between creating its temp
/// file and renaming it.
pub(crate) const STALE_TEMP_AGE: Duration = Duration::from_secs(3600);

/// Why a file could not be written. Each variant names the file and the operation.
///
/// The I/O error is part of the message and deliberately not a `source()`: the CLI prints the
/// source chain as `caused by:` lines, which would repeat it.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot create directory {}: {error}", path.display())]
    CreateDir {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("cannot create a temp file in {} for {}: {error}", dir.display(), target.display())]
    CreateTemp {
        dir: PathBuf,
        target: PathBuf,
        error: std::io::Error,
    },
    #[error("cannot write temp file for {}: {error}", target.display())]
    WriteTemp {
        target: PathBuf,
        error: std::io::Error,
    },
    #[error("cannot fsync {}: {error}", path.display())]
    Sync {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("cannot fsync temp file for {}: {error}", target.display())]
    SyncTemp {
        target: PathBuf,
        error: std::io::Error,
    },
    #[error("cannot rename {} onto {}: {error}", from.display(), to.display())]
    Rename {
        from: PathBuf,
        to: PathBuf,
        error: std::io::Error,
    },
    #[error("cannot link {} into place as {}: {error}", from.display(), to.display())]
    Link {
        from: PathBuf,
        to: PathBuf,
        error: std::io::Error,
    },
    #[error("cannot overwrite {}: {error}", path.display())]
    Overwrite {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("cannot remove {}: {error}", path.display())]
    Remove {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("cannot list {}: {error}", path.display())]
    List {
        path: PathBuf,
        error: std::io::Error,
    },
}

impl FileError {
    /// The kind of the underlying I/O error (`StorageFull`, `NotFound`, …).
    pub(crate) fn kind(&self) -> ErrorKind {
        self.io().kind()
    }

    /// The underlying I/O error.
    pub(crate) fn io(&self) -> &std::io::Error {
        match self {
            FileError::CreateDir { error, .. }
            | FileError::CreateTemp { error, .. }
            | FileError::WriteTemp { error, .. }
            | FileError::SyncTemp { error, .. }
            | FileError::Sync { error, .. }
            | FileError::Rename { error, .. }
            | FileError::Link { error, .. }
            | FileError::Overwrite { error, .. }
            | FileError::Remove { error, .. }
            | FileError::List { error, .. } => error,
        }
    }
}

/// What [`AtomicWrite::create_new`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Created {
    /// The file was written.
    New,
    /// A file of that name already existed; it was left alone and nothing was written.
    Existed,
}

/// One atomic write of a whole file: the bytes go to a temp file (in the target's directory
/// unless [`AtomicWrite::temp_in`] says otherwise, which must be on the same filesystem), which
/// is fsynced and then renamed onto the target, or linked to it without clobbering.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AtomicWrite<'a> {
    target: &'a Path,
    temp_dir: Option<&'a Path>,
    durable: bool,
    mode: Option<u32>,
}

impl<'a> AtomicWrite<'a> {
    /// A durable write of `target` with a temp file beside it and the default mode.
    pub(crate) fn new(target: &'a Path) -> AtomicWrite<'a> {
        AtomicWrite {
            target,
            temp_dir: None,
            durable: true,
            mode: None,
        }
    }

    /// Creates the temp file in `dir` (same filesystem as the target).
    pub(crate) fn temp_in(self, dir: &'a Path) -> Self {
        AtomicWrite {
            temp_dir: Some(dir),
            ..self
        }
    }

    /// Skips the fsync: for derived files that are rebuilt when lost.
    pub(crate) fn without_fsync(self) -> Self {
        AtomicWrite {
            durable: false,
            ..self
        }
    }

    /// Creates the file with these permission bits (`0o444` read-only, `0o600` private), so it
    /// never exists with wider ones, not even as a temp file.
    pub(crate) fn mode(self, mode: u32) -> Self {
        AtomicWrite {
            mode: Some(mode),
            ..self
        }
    }

    /// Replaces the target with `bytes` (creating its directory if missing).
    pub(crate) fn replace(&self, bytes: &[u8]) -> Result<(), FileError> {
        let temp = self.write_temp(bytes)?;
        temp.persist(self.target).map_err(|e| FileError::Rename {
            from: e.file.path().to_path_buf(),
            to: self.target.to_path_buf(),
            error: e.error,
        })?;
        Ok(())
    }

    /// Writes the target only if no file of that name exists (`link`, which never clobbers);
    /// an existing file is [`Created::Existed`]. Creates the target's directory if missing.
    #[cfg(test)]
    pub(crate) fn create_new(&self, bytes: &[u8]) -> Result<Created, FileError> {
        let temp = self.write_temp(bytes)?;
        self.link_new(temp)
    }

    /// The first half of [`AtomicWrite::create_new`]: writes the temp file and starts its
    /// writeback without waiting for it; [`Staged::create_new`] does the rest. Staging several
    /// writes before finishing any lets their disk writes overlap: four small files staged
    /// together took 0.42 ms here against 0.78 ms one after another, and three 0.33 against
    /// 0.58 (`sync_file_range` then `fsync` each, against `fsync` each in turn).
    pub(crate) fn stage(&self, bytes: &[u8]) -> Result<Staged<'a>, FileError> {
        let temp = self.fill_temp(bytes)?;
        if self.durable {
            start_writeback(temp.as_file());
        }
        Ok(Staged {
            write: *self,
            temp,
            synced: false,
        })
    }

    /// Puts a written (and, if durable, synced) temp file in place without clobbering.
    fn link_new(&self, temp: tempfile::NamedTempFile) -> Result<Created, FileError> {
        let mut temp = temp.into_temp_path();
        let mut made_dir = false;
        loop {
            match temp.persist_noclobber(self.target) {
                Ok(()) => return Ok(Created::New),
                Err(e) if e.error.kind() == ErrorKind::AlreadyExists => {
                    // The temp file is dropped (deleted) with `e`.
                    return Ok(Created::Existed);
                }
                // The target's directory is missing: make it, once. A second NotFound means the
                // temp file itself is gone (a GC with no grace removed it).
                Err(e) if e.error.kind() == ErrorKind::NotFound && !made_dir => {
                    temp = e.path;
                    create_parent(self.target)?;
                    made_dir = true;
                }
                Err(e) => {
                    return Err(FileError::Link {
                        from: e.path.to_path_buf(),
                        to: self.target.to_path_buf(),
                        error: e.error,
                    });
                }
            }
        }
    }

    fn write_temp(&self, bytes: &[u8]) -> Result<tempfile::NamedTempFile, FileError> {
        let temp = self.fill_temp(bytes)?;
        if self.durable {
            self.sync_temp(&temp)?;
        }
        Ok(temp)
    }

    fn sync_temp(&self, temp: &tempfile::NamedTempFile) -> Result<(), FileError> {
        temp.as_file()
            .sync_all()
            .map_err(|error| FileError::SyncTemp {
                target: self.target.to_path_buf(),
                error,
            })
    }

    /// The temp file with `bytes` in it and its mode set, not synced.
    fn fill_temp(&self, bytes: &[u8]) -> Result<tempfile::NamedTempFile, FileError> {
        let dir = match self.temp_dir {
            Some(dir) => dir,
            None => self.target.parent().unwrap_or(Path::new(".")),
        };
        let mut temp = match self.create_temp(dir) {
            Err(e) if e.kind() == ErrorKind::NotFound => {
                fs::create_dir_all(dir).map_err(|error| FileError::CreateDir {
                    path: dir.to_path_buf(),
                    error,
                })?;
                self.create_temp(dir)?
            }
            other => other?,
        };
        let write_err = |error| FileError::WriteTemp {
            target: self.target.to_path_buf(),
            error,
        };
        temp.write_all(bytes).map_err(write_err)?;
        if let Some(mode) = self.mode {
            // Exactly these bits, whatever the umask took from them at creation.
            temp.as_file()
                .set_permissions(fs::Permissions::from_mode(mode))
                .map_err(write_err)?;
        }
        Ok(temp)
    }

    fn create_temp(&self, dir: &Path) -> Result<tempfile::NamedTempFile, FileError> {
        sweep_once(dir);
        let mut builder = tempfile::Builder::new();
        builder.prefix(own_temp_prefix());
        if let Some(mode) = self.mode {
            builder.permissions(fs::Permissions::from_mode(mode));
        }
        builder
            .tempfile_in(dir)
            .map_err(|error| FileError::CreateTemp {
                dir: dir.to_path_buf(),
                target: self.target.to_path_buf(),
                error,
            })
    }
}

/// A write [`AtomicWrite::stage`]d: its temp file is written and on its way to disk, not yet
/// synced or in place. Dropped unfinished, the temp file is removed.
#[derive(Debug)]
pub(crate) struct Staged<'a> {
    write: AtomicWrite<'a>,
    temp: tempfile::NamedTempFile,
    synced: bool,
}

impl Staged<'_> {
    /// Waits until the temp file is on disk (if durable). Syncing all of several staged files
    /// before linking any is cheapest: a link dirties the inode table block the next file's
    /// fsync would then write again.
    pub(crate) fn sync(&mut self) -> Result<(), FileError> {
        if self.write.durable && !self.synced {
            self.write.sync_temp(&self.temp)?;
        }
        self.synced = true;
        Ok(())
    }

    /// Finishes [`AtomicWrite::create_new`]: syncs the temp file (if durable and not yet
    /// synced) and links it to the target without clobbering.
    pub(crate) fn create_new(mut self) -> Result<Created, FileError> {
        self.sync()?;
        self.write.link_new(self.temp)
    }
}

/// Starts writing `file`'s dirty pages to disk without waiting (`sync_file_range(2)` with
/// `SYNC_FILE_RANGE_WRITE`): a later fsync then waits for writes already under way. Best
/// effort: where the call fails, the fsync does all the work, as without it.
fn start_writeback(file: &File) {
    use std::os::fd::AsRawFd;
    // SAFETY: `file` is an open descriptor for the duration of the call, which takes only that
    // descriptor and integers and touches none of this process's memory.
    let _ = unsafe { libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
}

/// Opens `path` with `options`, creating its directory first only when it is missing: the
/// common case, a directory that exists, costs one `open` instead of a `mkdir` that fails and a
/// `stat` before it.
pub(crate) fn open_in_dir(options: &OpenOptions, path: &Path) -> std::io::Result<File> {
    match options.open(path) {
        Err(e) if e.kind() == ErrorKind::NotFound => {
            if let Some(dir) = path.parent() {
                fs::create_dir_all(dir)?;
            }
            options.open(path)
        }
        other => other,
    }
}

fn create_parent(path: &Path) -> Result<(), FileError> {
    let Some(dir) = path.parent() else {
        return Ok(());
    };
    fs::create_dir_all(dir).map_err(|error| FileError::CreateDir {
        path: dir.to_path_buf(),
        error,
    })
}

/// Removes abandoned temp files in `dir` the first time this process writes one there.
///
/// Best effort: a directory that cannot be listed is left for the write itself to report.
fn sweep_once(dir: &Path) {
    static SWEPT: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);
    let first = {
        let mut swept = SWEPT.lock().unwrap_or_else(|p| p.into_inner());
        swept
            .get_or_insert_with(HashSet::new)
            .insert(dir.to_path_buf())
    };
    if first {
        let _ = remove_stale_temps(dir, STALE_TEMP_AGE);
    }
}

/// Removes the temp files (named [`TEMP_PREFIX`]…) in `dir` last modified at least `age` ago.
/// Returns how many were removed. A missing directory has none.
pub(crate) fn remove_stale_temps(dir: &Path, age: Duration) -> Result<usize, FileError> {
    remove_old_files(dir, age, |name| name.starts_with(TEMP_PREFIX))
}

/// Removes the files in `dir` whose names `select` picks and that were last modified at least
/// `age` ago. Returns how many were removed (or vanished meanwhile). A missing `dir` has none.
pub(crate) fn remove_old_files(
    dir: &Path,
    age: Duration,
    select: impl Fn(&str) -> bool,
) -> Result<usize, FileError> {
    let list_err = |error| FileError::List {
        path: dir.to_path_buf(),
        error,
    };
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(list_err(e)),
    };
    let now = SystemTime::now();
    let mut removed = 0;
    for entry in entries {
        let entry = entry.map_err(list_err)?;
        if !entry.file_name().to_str().is_some_and(&select) {
            continue;
        }
        let path = entry.path();
        let old = fs::symlink_metadata(&path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| now.duration_since(t).ok())
            .is_some_and(|elapsed| elapsed >= age);
        if !old {
            continue;
        }
        match fs::remove_file(&path) {
            Ok(()) => removed += 1,
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(error) => return Err(FileError::Remove { path, error }),
        }
    }
    Ok(removed)
}

/// Replaces a small file's content in place (creating it if missing): write from offset 0, then
/// cut to the new length.
///
/// Not `std::fs::write`: truncating a file to zero and writing it again makes ext4 flush the new
/// data when the file is closed (its `auto_da_alloc` heuristic), ~160 µs a write here. A reader
/// racing the write may see a torn text, and a failed write (a full disk) leaves one, so this is
/// only for files nobody but the writer reads as a whole: the spares of
/// [`write_recycling`] and [`replace_recycling`].
#[cfg(test)]
pub(crate) fn overwrite(path: &Path, bytes: &[u8]) -> Result<(), FileError> {
    overwrite_open(path, bytes).map(drop)
}

/// [`overwrite`], keeping the file open (to sync it without opening it again).
fn overwrite_open(path: &Path, bytes: &[u8]) -> Result<File, FileError> {
    use std::os::unix::fs::FileExt;
    let err = |error| FileError::Overwrite {
        path: path.to_path_buf(),
        error,
    };
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(err)?;
    file.write_all_at(bytes, 0).map_err(err)?;
    file.set_len(bytes.len() as u64).map_err(err)?;
    Ok(file)
}

/// Writes `bytes` as the new file `target` and retires the file `retired`, creating and freeing
/// no inode in the steady state: the bytes go into `spare` (overwritten in place), `spare` is
/// renamed to `target`, and `retired` is renamed to `spare` for next time. For derived cache
/// files that readers validate (a reader holding the retired file open may see it rewritten);
/// the caller serialises writers of one `spare`. A missing `spare` (and its directory) is
/// created, a missing `retired` is skipped.
///
/// Why not temp file + rename + unlink: ext4 without a journal does not reuse an inode freed in
/// the last minute and checks them one by one at every allocation, so a store that freed a few
/// inodes per step created files ~5× slower after a few hundred steps.
pub(crate) fn write_recycling(
    spare: &Path,
    target: &Path,
    bytes: &[u8],
    retired: Option<&Path>,
) -> Result<(), FileError> {
    drop(fill_spare(spare, bytes)?);
    rename(spare, target)?;
    if let Some(retired) = retired
        && retired != target
    {
        match fs::rename(retired, spare) {
            Err(e) if e.kind() != ErrorKind::NotFound => {
                return Err(FileError::Rename {
                    from: retired.to_path_buf(),
                    to: spare.to_path_buf(),
                    error: e,
                });
            }
            _ => {}
        }
    }
    Ok(())
}

/// Replaces `target` atomically with `bytes` without creating or freeing an inode in the steady
/// state: the bytes go into `spare` (overwritten in place), then `spare` and `target` swap
/// names in one `renameat2(RENAME_EXCHANGE)`, so the old content becomes the next spare.
///
/// Readers of `target` see the old or the new content, never a torn or empty file, and a
/// failed write (a full disk) leaves `target` as it was. The caller serialises writers of one
/// `spare`. No fsync: for small informational files whose loss in a power cut costs nothing.
/// Where the filesystem cannot exchange, a plain rename replaces the target (and the spare is
/// created again next time).
pub(crate) fn replace_recycling(
    spare: &Path,
    target: &Path,
    bytes: &[u8],
) -> Result<(), FileError> {
    drop(fill_spare(spare, bytes)?);
    exchange(spare, target)
}

/// [`replace_recycling`] made durable: the spare's new content is on disk (fsync) before it
/// takes the target's name, so after a crash the target is the old or the new content, like
/// [`AtomicWrite::replace`], at less than half its cost here (no inode is allocated or freed:
/// ~150–230 µs against ~450 µs a write on this store's ext4). For index files, read with
/// [`read_settled`]: a reader holding the old file open may see it rewritten as the next spare,
/// and `read_settled` notices and reads again.
pub(crate) fn replace_recycling_durable(
    spare: &Path,
    target: &Path,
    bytes: &[u8],
) -> Result<(), FileError> {
    // Said of the target: the spare is how it is written, not what the user knows.
    let file = fill_spare(spare, bytes).map_err(|e| match e {
        FileError::Overwrite { error, .. } => FileError::WriteTemp {
            target: target.to_path_buf(),
            error,
        },
        other => other,
    })?;
    file.sync_all().map_err(|error| FileError::Sync {
        path: spare.to_path_buf(),
        error,
    })?;
    exchange(spare, target)
}

/// Reads a whole file that writers replace with [`replace_recycling_durable`]: the bytes of
/// one version, never a torn mix. A read is kept when the file did not change while it was
/// read (same inode, size and change time before and after) and is still the one at `path`;
/// otherwise it is read again. `None` when there is no such file.
pub(crate) fn read_settled(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let stamp = |m: &fs::Metadata| (m.dev(), m.ino(), m.size(), m.ctime(), m.ctime_nsec());
    let mut last = Vec::new();
    for _ in 0..16 {
        let mut file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let before = stamp(&file.metadata()?);
        last.clear();
        file.read_to_end(&mut last)?;
        let current = match fs::metadata(path) {
            Ok(m) => (m.dev(), m.ino()),
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let after = stamp(&file.metadata()?);
        if before == after && current == (after.0, after.1) {
            return Ok(Some(last));
        }
    }
    // Rewritten sixteen times while being read: a writer is far faster than this reader; the
    // last bytes read are as good as any.
    Ok(Some(last))
}

/// Swaps `spare` and `target` by name; where there is no target yet or the filesystem cannot
/// exchange, renames `spare` to `target`.
fn exchange(spare: &Path, target: &Path) -> Result<(), FileError> {
    use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};
    match renameat2(
        AT_FDCWD,
        spare,
        AT_FDCWD,
        target,
        RenameFlags::RENAME_EXCHANGE,
    ) {
        Ok(()) => Ok(()),
        // No target yet, or a filesystem that cannot exchange: a plain rename.
        Err(nix::errno::Errno::ENOENT | nix::errno::Errno::EINVAL | nix::errno::Errno::ENOSYS) => {
            rename(spare, target)
        }
        Err(e) => Err(FileError::Rename {
            from: spare.to_path_buf(),
            to: target.to_path_buf(),
            error: e.into(),
        }),
    }
}

/// Puts `bytes` into `spare`, creating it (and its directory) when missing.
/// Writes `bytes` into `spare` in place (creating it and its directory if missing); returns it
/// open.
fn fill_spare(spare: &Path, bytes: &[u8]) -> Result<File, FileError> {
    match overwrite_open(spare, bytes) {
        Err(e) if e.kind() == ErrorKind::NotFound => {
            create_parent(spare)?;
            overwrite_open(spare, bytes)
        }
        other => other,
    }
}

fn rename(from: &Path, to: &Path) -> Result<(), FileError> {
    fs::rename(from, to).map_err(|error| FileError::Rename {
        from: from.to_path_buf(),
        to: to.to_path_buf(),
        error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn age(path: &Path, by: Duration) {
        let file = File::options().write(true).open(path).unwrap();
        file.set_modified(SystemTime::now() - by).unwrap();
    }

    #[test]
    fn replace_writes_whole_files_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("sub").join("a.yaml");
        AtomicWrite::new(&target).replace(b"one").unwrap();
        AtomicWrite::new(&target).replace(b"two").unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"two");
        let private = dir.path().join("secret");
        AtomicWrite::new(&private)
            .mode(0o600)
            .replace(b"x")
            .unwrap();
        assert_eq!(fs::metadata(&private).unwrap().mode() & 0o777, 0o600);
        let names: Vec<_> = fs::read_dir(dir.path().join("sub"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["a.yaml"]);
    }

    #[test]
    fn create_new_never_clobbers() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("ab").join("node.json");
        let write = AtomicWrite::new(&target).mode(0o444);
        assert_eq!(write.create_new(b"first").unwrap(), Created::New);
        assert_eq!(write.create_new(b"second").unwrap(), Created::Existed);
        assert_eq!(fs::read(&target).unwrap(), b"first");
        assert_eq!(fs::metadata(&target).unwrap().mode() & 0o777, 0o444);
    }

    #[test]
    fn a_staged_write_appears_only_when_finished_and_never_clobbers() {
        let dir = tempfile::tempdir().unwrap();
        let temps = dir.path().join("tmp");
        let (a, b) = (dir.path().join("a.json"), dir.path().join("b.json"));
        fn stage<'a>(target: &'a Path, temps: &'a Path, bytes: &[u8]) -> Staged<'a> {
            AtomicWrite::new(target)
                .temp_in(temps)
                .mode(0o444)
                .stage(bytes)
                .unwrap()
        }
        let first = stage(&a, &temps, b"a");
        let second = stage(&b, &temps, b"b");
        // Staged: written to temp files, nothing at the targets yet.
        assert!(!a.exists() && !b.exists());
        assert_eq!(fs::read_dir(&temps).unwrap().count(), 2);
        assert_eq!(first.create_new().unwrap(), Created::New);
        assert_eq!(fs::read(&a).unwrap(), b"a");
        assert_eq!(fs::metadata(&a).unwrap().mode() & 0o777, 0o444);
        // Dropped unfinished: its temp file goes, its target never appears.
        drop(second);
        assert!(!b.exists());
        assert_eq!(fs::read_dir(&temps).unwrap().count(), 0);
        // A target that exists meanwhile is kept.
        let third = stage(&a, &temps, b"other");
        assert_eq!(third.create_new().unwrap(), Created::Existed);
        assert_eq!(fs::read(&a).unwrap(), b"a");
        assert_eq!(fs::read_dir(&temps).unwrap().count(), 0);
    }

    #[test]
    fn errors_name_the_operation_and_the_file() {
        let dir = tempfile::tempdir().unwrap();
        // The target's directory is a file: the temp file cannot be created there.
        let blocker = dir.path().join("blocker");
        fs::write(&blocker, "").unwrap();
        let target = blocker.join("threads.yaml");
        let err = AtomicWrite::new(&target).replace(b"x").unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("cannot "), "{text}");
        assert!(!text.contains("cannot read"), "{text}");
        assert!(text.contains("threads.yaml"), "{text}");
        // Renaming onto a directory fails with both names.
        let onto = dir.path().join("d");
        fs::create_dir(&onto).unwrap();
        fs::write(onto.join("f"), "").unwrap();
        let text = AtomicWrite::new(&onto)
            .replace(b"x")
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("cannot rename") && text.contains("onto"),
            "{text}"
        );
        // A full disk: the temp write fails, named as a write.
        if Path::new("/dev/full").exists() {
            let err = overwrite(Path::new("/dev/full"), b"x").unwrap_err();
            assert_eq!(err.kind(), ErrorKind::StorageFull);
            assert!(err.to_string().starts_with("cannot overwrite /dev/full"));
        }
    }

    #[test]
    fn the_first_write_into_a_directory_removes_stale_temps() {
        let dir = tempfile::tempdir().unwrap();
        let stale = dir.path().join(format!("{TEMP_PREFIX}dead"));
        let young = dir.path().join(format!("{TEMP_PREFIX}busy"));
        let other = dir.path().join("keep.yaml");
        for p in [&stale, &young, &other] {
            fs::write(p, "").unwrap();
        }
        age(&stale, STALE_TEMP_AGE + Duration::from_secs(5));
        age(&other, STALE_TEMP_AGE * 2);
        AtomicWrite::new(&dir.path().join("t"))
            .replace(b"x")
            .unwrap();
        assert!(!stale.exists(), "an abandoned temp file is removed");
        assert!(young.exists(), "a temp file being written is kept");
        assert!(other.exists(), "other files are never touched");
        assert_eq!(remove_stale_temps(dir.path(), Duration::ZERO).unwrap(), 1);
        assert!(!young.exists());
    }

    #[test]
    fn temp_files_name_their_writer_and_tell_whether_it_runs() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("t");
        let temp = AtomicWrite::new(&target).stage(b"x").unwrap();
        let name = temp
            .temp
            .path()
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            name.starts_with(&format!("{TEMP_PREFIX}{}-", std::process::id())),
            "{name}"
        );
        assert!(temp_of_live_process(&name));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id();
        child.wait().unwrap();
        assert!(!temp_of_live_process(&format!(
            "{TEMP_PREFIX}{gone}-AbC123"
        )));
        for other in [
            ".uwf-tmp-AbC123",
            ".uwf-tmp--1-x",
            "config.yaml",
            ".uwf-tmp-0-x",
        ] {
            assert!(!temp_of_live_process(other), "{other}");
        }
    }

    #[test]
    fn replace_recycling_swaps_inodes_and_never_shows_a_torn_file() {
        let dir = tempfile::tempdir().unwrap();
        let (spare, target) = (dir.path().join("t.spare"), dir.path().join("t.json"));
        replace_recycling(&spare, &target, b"{\"first\":1}").unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"{\"first\":1}");
        replace_recycling(&spare, &target, b"{}").unwrap();
        let inodes = [&spare, &target].map(|p| fs::metadata(p).unwrap().ino());
        replace_recycling(&spare, &target, b"{\"third\":3}").unwrap();
        replace_recycling(&spare, &target, b"{}").unwrap();
        assert_eq!(
            fs::read(&target).unwrap(),
            b"{}",
            "shorter: nothing left over"
        );
        assert_eq!(
            [&spare, &target].map(|p| fs::metadata(p).unwrap().ino()),
            inodes,
            "two files, the same two inodes"
        );
    }

    #[test]
    fn a_durable_recycling_write_swaps_two_inodes_and_settled_reads_never_tear() {
        let dir = tempfile::tempdir().unwrap();
        let (spare, target) = (dir.path().join("locks/t.spare"), dir.path().join("t.yaml"));
        assert_eq!(read_settled(&target).unwrap(), None);
        replace_recycling_durable(&spare, &target, b"first\n").unwrap();
        replace_recycling_durable(&spare, &target, b"second, longer\n").unwrap();
        let inodes = [&spare, &target].map(|p| fs::metadata(p).unwrap().ino());
        assert_eq!(read_settled(&target).unwrap().unwrap(), b"second, longer\n");
        // A writer alternating a long and a short text as fast as it can; every settled read
        // is one of the two whole.
        let (long, short) = (vec![b'l'; 3000], vec![b's'; 1000]);
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
        let (stop, writes) = (
            std::sync::Arc::new(AtomicBool::new(false)),
            std::sync::Arc::new(AtomicU64::new(0)),
        );
        let writer = {
            let (spare, target) = (spare.clone(), target.clone());
            let (stop, writes) = (stop.clone(), writes.clone());
            let (long, short) = (long.clone(), short.clone());
            std::thread::spawn(move || {
                while !stop.load(Relaxed) {
                    let n = writes.load(Relaxed);
                    let bytes = if n % 2 == 0 { &long } else { &short };
                    replace_recycling(&spare, &target, bytes).unwrap();
                    writes.store(n + 1, Relaxed);
                }
            })
        };
        let started = std::time::Instant::now();
        let mut reads = 0;
        while reads < 2000 || writes.load(Relaxed) < 500 {
            let got = read_settled(&target).unwrap().unwrap();
            let whole = got == long || got == short || got == b"second, longer\n";
            assert!(whole, "a torn read of {} bytes", got.len());
            reads += 1;
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "too slow to tell"
            );
        }
        stop.store(true, Relaxed);
        writer.join().unwrap();
        let mut now = [&spare, &target].map(|p| fs::metadata(p).unwrap().ino());
        let mut before = inodes;
        now.sort();
        before.sort();
        assert_eq!(now, before, "two files, the same two inodes");
    }

    #[test]
    fn write_recycling_reuses_the_retired_inode() {
        let dir = tempfile::tempdir().unwrap();
        let at = |name: &str| dir.path().join("cache").join(name);
        let ino = |name: &str| fs::metadata(at(name)).unwrap().ino();
        // First write: the directory and the spare are created, nothing to retire.
        write_recycling(&at("t.spare"), &at("a"), b"first, long", Some(&at("none"))).unwrap();
        assert_eq!(fs::read(at("a")).unwrap(), b"first, long");
        assert!(!at("t.spare").exists());
        let a = ino("a");
        write_recycling(&at("t.spare"), &at("b"), b"second", Some(&at("a"))).unwrap();
        assert!(!at("a").exists());
        assert_eq!(ino("t.spare"), a, "the retired file became the spare");
        write_recycling(&at("t.spare"), &at("c"), b"third", Some(&at("b"))).unwrap();
        assert_eq!(ino("c"), a, "the new file took the retired inode");
        assert_eq!(
            fs::read(at("c")).unwrap(),
            b"third",
            "shorter text: no leftover bytes"
        );
    }
}
