//! The one error type of the filesystem core, and its one mapping to errno.
//!
//! Architecture Invariant: every errno the mount returns comes from [`FsError::errno`], an
//! exhaustive `match`, so adding a variant forces a decision about what the user sees. A user
//! mistake (a refused save, an unsupported rename flag, a name too long) maps to a specific errno;
//! only failures of the storage itself map to `EIO`.

/// Everything a filesystem operation can fail with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FsError {
    #[error("no such file or directory")]
    NotFound,
    #[error("file exists")]
    Exists,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    /// Writing a read-only file, or creating in a read-only directory.
    #[error("permission denied: {0}")]
    ReadOnly(&'static str),
    /// An operation this view does not allow on this entry (renaming a generated file, mkdir…).
    #[error("operation not permitted: {0}")]
    NotPermitted(&'static str),
    #[error("file name longer than 255 bytes")]
    NameTooLong,
    /// A file would grow past the in-memory size limit.
    #[error("file too large (limit {limit} bytes)")]
    TooBig { limit: u64 },
    /// The in-memory budget for scratch files is used up.
    #[error("no space left for scratch files: {0}")]
    NoSpace(&'static str),
    /// The engine refused what was saved (the full text is in the nearest `error` file).
    #[error("{0}")]
    Refused(String),
    /// A request the core understands but cannot honour as asked (e.g. `RENAME_EXCHANGE`).
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    /// A step is running on the thread (the full text is in its `error` file).
    #[error("{0}")]
    Busy(String),
    #[error("bad file handle")]
    BadHandle,
    /// The operation is not implemented at all (xattrs): the kernel stops asking.
    #[error("not implemented")]
    Unsupported,
    /// `ioctl` on a file that is not a terminal.
    #[error("not a terminal")]
    NotATty,
    /// A write on a mount made with `--read-only`.
    #[error("read-only file system")]
    ReadOnlyMount,
    /// A blocked read ended because the reader caught a signal.
    #[error("interrupted")]
    Interrupted,
    /// The storage failed underneath (I/O, damaged index files). Never a user mistake.
    #[error("storage error: {0}")]
    Internal(String),
}

impl FsError {
    /// The errno this error is reported as.
    pub(crate) fn errno(&self) -> i32 {
        match self {
            FsError::NotFound => libc::ENOENT,
            FsError::Exists => libc::EEXIST,
            FsError::NotDir => libc::ENOTDIR,
            FsError::IsDir => libc::EISDIR,
            FsError::ReadOnly(_) => libc::EACCES,
            FsError::NotPermitted(_) => libc::EPERM,
            FsError::NameTooLong => libc::ENAMETOOLONG,
            FsError::TooBig { .. } => libc::EFBIG,
            FsError::NoSpace(_) => libc::ENOSPC,
            FsError::Refused(_) => libc::EINVAL,
            FsError::Invalid(_) => libc::EINVAL,
            FsError::Busy(_) => libc::EBUSY,
            FsError::BadHandle => libc::EBADF,
            FsError::Unsupported => libc::ENOSYS,
            FsError::NotATty => libc::ENOTTY,
            FsError::ReadOnlyMount => libc::EROFS,
            FsError::Interrupted => libc::EINTR,
            FsError::Internal(_) => libc::EIO,
        }
    }

    /// A storage failure, with its message kept for the log and the `error` file.
    pub(crate) fn internal(err: impl std::fmt::Display) -> FsError {
        FsError::Internal(err.to_string())
    }
}

impl crate::advice::Advice for FsError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_mistakes_never_map_to_eio() {
        let mistakes = [
            FsError::Refused("bad yaml".into()),
            FsError::Invalid("RENAME_EXCHANGE"),
            FsError::NameTooLong,
            FsError::TooBig { limit: 1 },
            FsError::ReadOnly("generated file"),
            FsError::NotPermitted("rename"),
            FsError::Exists,
            FsError::NotFound,
            FsError::Busy("a step is running".into()),
        ];
        for e in mistakes {
            assert_ne!(e.errno(), libc::EIO, "{e:?}");
        }
        assert_eq!(FsError::internal("disk").errno(), libc::EIO);
    }
}
