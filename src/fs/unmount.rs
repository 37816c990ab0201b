//! Unmounting, including after the serving process died or hung.
//!
//! A FUSE mount whose daemon was killed stays in the mount table and answers ENOTCONN; one whose
//! daemon hangs leaves callers stuck in uninterruptible sleep. `unmount` handles both: plain
//! `umount(2)`, lazy detach when files are still open, and (with `force`) aborting the kernel
//! connection through fusectl first (writing to `/sys/fs/fuse/connections/<n>/abort` fails every
//! pending and future request of that connection with ENOTCONN), which releases every stuck process.
//! Mount points are matched in `/proc/self/mountinfo` lexically, because `stat` on a dead mount
//! fails.
//!
//! Architecture Invariant: nothing here touches the daemon or the tree: it works on a mount
//! whose process is gone, from the mount table alone.

use std::io;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::mount::{MntFlags, umount2};

/// One FUSE mount from `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FuseMount {
    pub mount_point: PathBuf,
    /// The minor device number: the connection's name under `/sys/fs/fuse/connections/`.
    pub minor: u32,
    pub fs_type: String,
    pub source: String,
}

/// How an unmount went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unmounted {
    /// Gone at once.
    Clean,
    /// Files were open: detached now, the kernel finishes when they are closed.
    Lazy,
}

/// Why an unmount failed.
#[derive(Debug, thiserror::Error)]
pub enum UnmountError {
    #[error("{} is not a FUSE mount point", .0.display())]
    NotMounted(PathBuf),
    #[error("cannot unmount {}: {source}", path.display())]
    Failed {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// `path` made absolute and normalized without touching the filesystem (a dead mount point
/// cannot be stat'ed).
pub(crate) fn lexical_absolute(path: &Path) -> io::Result<PathBuf> {
    let abs = std::path::absolute(path)?;
    let mut out = PathBuf::new();
    for c in abs.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    Ok(out)
}

/// Undoes mountinfo's octal escapes (`\040` for a space, …).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && let Ok(v) = u8::from_str_radix(&field[i + 1..i + 4], 8)
        {
            out.push(v);
            i += 4;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses the FUSE mounts out of mountinfo text.
pub fn parse_mountinfo(text: &str) -> Vec<FuseMount> {
    let mut out = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(sep) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        let (Some(dev), Some(mp), Some(fs_type), Some(source)) = (
            fields.get(2),
            fields.get(4),
            fields.get(sep + 1),
            fields.get(sep + 2),
        ) else {
            continue;
        };
        if !(fs_type.starts_with("fuse") && *fs_type != "fusectl") {
            continue;
        }
        let Some(minor) = dev.split(':').nth(1).and_then(|m| m.parse().ok()) else {
            continue;
        };
        out.push(FuseMount {
            mount_point: PathBuf::from(unescape(mp)),
            minor,
            fs_type: (*fs_type).to_owned(),
            source: unescape(source),
        });
    }
    out
}

/// The FUSE mount at `dir`, if any (the most recent one when stacked).
pub fn find(dir: &Path) -> io::Result<Option<FuseMount>> {
    let dir = lexical_absolute(dir)?;
    let text = std::fs::read_to_string("/proc/self/mountinfo")?;
    Ok(parse_mountinfo(&text)
        .into_iter()
        .rfind(|m| m.mount_point == dir))
}

/// Aborts a FUSE connection: every request in flight fails with ENOTCONN, stuck callers wake up.
pub(crate) fn abort_connection(minor: u32) -> io::Result<()> {
    let base = Path::new("/sys/fs/fuse/connections");
    let conn = base.join(minor.to_string());
    if !conn.exists() {
        // fusectl is not mounted on every machine; mount it (root only) and try again.
        let _ = nix::mount::mount(
            Some("fusectl"),
            base,
            Some("fusectl"),
            nix::mount::MsFlags::empty(),
            None::<&str>,
        );
    }
    std::fs::write(conn.join("abort"), b"1")
}

/// Unmounts the FUSE mount at `dir`: plain unmount, or lazy detach when busy; `force` aborts the
/// connection first (for a hung daemon).
pub fn unmount(dir: &Path, force: bool) -> Result<Unmounted, UnmountError> {
    let failed = |source: io::Error| UnmountError::Failed {
        path: dir.to_path_buf(),
        source,
    };
    let mount = find(dir)
        .map_err(failed)?
        .ok_or_else(|| UnmountError::NotMounted(dir.to_path_buf()))?;
    if force {
        let _ = abort_connection(mount.minor);
    }
    match umount2(&mount.mount_point, MntFlags::empty()) {
        Ok(()) => Ok(Unmounted::Clean),
        Err(Errno::EBUSY) => {
            umount2(&mount.mount_point, MntFlags::MNT_DETACH)
                .map_err(|e| failed(io::Error::from(e)))?;
            Ok(Unmounted::Lazy)
        }
        Err(e) => Err(failed(io::Error::from(e))),
    }
}

impl crate::advice::Advice for UnmountError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_are_parsed_with_escapes() {
        let text = "36 35 98:0 /mnt1 /mnt1 rw,noatime master:1 - ext3 /dev/root rw\n\
                    50 28 0:61 / /work/t\\040x/m rw,nosuid,nodev,relatime shared:1 - fuse uwf rw,user_id=0,group_id=0\n\
                    51 28 0:62 / /sys/fs/fuse/connections rw - fusectl fusectl rw\n";
        let mounts = parse_mountinfo(text);
        assert_eq!(
            mounts,
            vec![FuseMount {
                mount_point: PathBuf::from("/work/t x/m"),
                minor: 61,
                fs_type: "fuse".into(),
                source: "uwf".into(),
            }]
        );
    }

    #[test]
    fn paths_are_normalized_without_stat() {
        assert_eq!(
            lexical_absolute(Path::new("/a/./b/../c")).unwrap(),
            PathBuf::from("/a/c")
        );
    }
}
