//! Pins: how a writer tells GC "I am about to publish a head naming nodes I write or touch from
//! now on", and how GC learns the earliest such moment of any live writer, without a file per
//! writer.
//!
//! Every pin is an open-file-description read lock (`F_OFD_SETLK`, `F_RDLCK`) on one byte of
//! `cas/index/pins`, at the offset of the pin's start in milliseconds since the epoch. The
//! kernel keeps the locks and drops them when the holder dies (`kill -9` included), so a pin
//! never outlives its process. GC finds the earliest live pin by asking `F_OFD_GETLK` whether a
//! write lock on `[0, t)` would conflict, halving `t` (about 40 questions, no file read): the
//! answer is never later than the start of a pin that stayed live while it asked.
//!
//! Architecture Invariant: a writer takes its pin before it writes or touches any node that a
//! head it publishes will name, and keeps it until that head is published (or it gives up).
//! Every node file it writes or touches meanwhile has an mtime at or after the pin's start, so a
//! GC that spares nodes younger than the earliest live pin (less [`PIN_SLACK`]) never deletes
//! them. A pin costs a step two `fcntl` calls (and one `open` per process).

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::path::Path;
use std::time::Duration;

use super::Store;
use super::now_ms;
use crate::cas::error::StoreError;

/// How much older than the earliest live pin a node must be for GC to delete it: node files'
/// mtimes come from the kernel's coarse clock, a tick or so behind the clock a pin's start is
/// read from.
pub(crate) const PIN_SLACK: Duration = Duration::from_secs(2);

/// The pins a [`Store`] handle holds, by start (ms); several at one start share one lock byte.
#[derive(Debug, Default)]
pub(super) struct Pins {
    file: Option<File>,
    held: BTreeMap<u64, usize>,
    /// The start of the latest pin taken through this handle (0: none yet).
    latest: u64,
}

/// A held pin; released when dropped (or by the kernel when the process dies).
#[derive(Debug)]
#[must_use = "a pin protects nodes only while it is held"]
pub(crate) struct Pin<'a> {
    store: &'a Store,
    at: u64,
}

impl Pin<'_> {
    /// When this pin was taken (ms since the epoch).
    #[cfg(test)]
    pub(crate) fn at(&self) -> u64 {
        self.at
    }
}

impl Drop for Pin<'_> {
    fn drop(&mut self) {
        self.store.unpin(self.at);
    }
}

/// A lock request on the one byte at `at` (or, with `len` 0, from `at` to the end).
fn byte_range(kind: libc::c_int, at: u64, len: u64) -> libc::flock {
    libc::flock {
        l_type: kind as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: at.min(i64::MAX as u64) as libc::off_t,
        l_len: len.min(i64::MAX as u64) as libc::off_t,
        l_pid: 0,
    }
}

fn open_pins(path: &Path) -> Result<File, StoreError> {
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(path)
        .map_err(StoreError::io("cannot open the pin file", path))
}

impl Store {
    /// Pins the store for a writer about to publish (see the module doc): until the pin is
    /// dropped, GC keeps every node written or touched after now.
    pub(crate) fn pin(&self) -> Result<Pin<'_>, StoreError> {
        let mut pins = self.pins.lock().unwrap_or_else(|p| p.into_inner());
        let at = now_ms().max(pins.latest);
        if pins.file.is_none() {
            pins.file = Some(open_pins(&self.pins_path)?);
        }
        let count = pins.held.get(&at).copied().unwrap_or(0);
        if count == 0 {
            let file = pins.file.as_ref().expect("opened above");
            let lock = byte_range(libc::F_RDLCK, at, 1);
            nix::fcntl::fcntl(file, nix::fcntl::FcntlArg::F_OFD_SETLK(&lock))
                .map_err(|e| StoreError::io("cannot pin", &self.pins_path)(e.into()))?;
        }
        pins.held.insert(at, count + 1);
        pins.latest = at;
        Ok(Pin { store: self, at })
    }

    fn unpin(&self, at: u64) {
        let mut pins = self.pins.lock().unwrap_or_else(|p| p.into_inner());
        let Some(count) = pins.held.get_mut(&at) else {
            return;
        };
        *count -= 1;
        if *count == 0 {
            pins.held.remove(&at);
            if let Some(file) = &pins.file {
                let unlock = byte_range(libc::F_UNLCK, at, 1);
                // Failing to unlock leaves the pin to the process's exit: GC keeps more.
                let _ = nix::fcntl::fcntl(file, nix::fcntl::FcntlArg::F_OFD_SETLK(&unlock));
            }
        }
    }

    /// The start of the latest pin this handle took (0 when none): a node this handle wrote
    /// or touched at or after it is protected by that pin while it is held.
    pub(super) fn latest_pin(&self) -> u64 {
        self.pins.lock().unwrap_or_else(|p| p.into_inner()).latest
    }

    /// The start (ms) of the earliest pin any process holds on this store, or `None` when no
    /// writer holds one. Pins of this very handle count too (they are locks of another open
    /// file description).
    pub(crate) fn earliest_pin(&self) -> Result<Option<u64>, StoreError> {
        let file = open_pins(&self.pins_path)?;
        let path = &self.pins_path;
        // Whether some other open file description holds a pin in `[0, end)`.
        let pinned_before = |end: u64| -> Result<bool, StoreError> {
            let mut probe = byte_range(libc::F_WRLCK, 0, end);
            nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_OFD_GETLK(&mut probe))
                .map_err(|e| StoreError::io("cannot read the pins of", path)(e.into()))?;
            Ok(probe.l_type != libc::F_UNLCK as libc::c_short)
        };
        let mut hi = i64::MAX as u64;
        if !pinned_before(hi)? {
            return Ok(None);
        }
        // The least `end` with a pin below it: that pin's start is `end - 1`.
        let mut lo = 1;
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if pinned_before(mid)? {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        Ok(Some(lo - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gc_sees_the_earliest_live_pin_of_any_handle() {
        let dir = tempfile::tempdir().unwrap();
        let a = Store::open(dir.path()).unwrap();
        let b = Store::open(dir.path()).unwrap();
        assert_eq!(a.earliest_pin().unwrap(), None);
        let first = a.pin().unwrap();
        std::thread::sleep(Duration::from_millis(3));
        let second = b.pin().unwrap();
        let nested = b.pin().unwrap();
        assert!(second.at() > first.at());
        assert_eq!(b.earliest_pin().unwrap(), Some(first.at()));
        drop(first);
        assert_eq!(a.earliest_pin().unwrap(), Some(second.at()));
        // Pins taken in one millisecond share a lock byte: it stays until both are dropped.
        drop(second);
        assert_eq!(a.earliest_pin().unwrap(), Some(nested.at()));
        drop(nested);
        assert_eq!(a.earliest_pin().unwrap(), None);
    }
}
