//! Tuning of the C allocator (glibc's malloc) for how uwf allocates: a step builds and frees a
//! JSONata context of the whole thread on its evaluation worker while the main thread works.
//!
//! With glibc's default top pad (128 KiB), each free at the top of a heap beyond it hands the
//! pages back (`MADV_DONTNEED`, or a smaller `brk`), which flushes the TLB of the other thread's
//! CPU too, and the next allocation faults fresh zeroed pages in again. A context of a thousand
//! steps churned through that many times a step. Keeping 1 MiB at the top made a one-shot step
//! at ~1,000 steps 0.44 ms faster (5.23 → 4.80 ms, `GLIBC_TUNABLES` A/B, interleaved), at ~300
//! steps 0.03 ms, and left peak RSS as it was (14 MB). `GLIBC_TUNABLES=glibc.malloc.top_pad=…`
//! in the environment still wins: it is read before this runs, and this only sets what it left
//! unset.

/// Bytes kept free at the top of a heap before memory goes back to the kernel.
const TOP_PAD: i32 = 1 << 20;

/// Applies the tuning; called first thing by the CLI. A no-op where the C library is not glibc.
pub(crate) fn apply() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if !std::env::var("GLIBC_TUNABLES").is_ok_and(|t| sets(&t, "glibc.malloc.top_pad")) {
        // SAFETY: `mallopt` takes two integers and only changes the allocator's parameters
        // (under its own lock); it may be called at any time, before or after allocations.
        unsafe {
            libc::mallopt(libc::M_TOP_PAD, TOP_PAD);
        }
    }
}

/// Whether a `GLIBC_TUNABLES` value (`name=value:name=value…`) sets `name`.
#[cfg_attr(not(all(target_os = "linux", target_env = "gnu")), allow(dead_code))]
fn sets(tunables: &str, name: &str) -> bool {
    tunables
        .split(':')
        .any(|kv| kv.split('=').next() == Some(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_top_pad_set_in_glibc_tunables_is_seen() {
        let pad = "glibc.malloc.top_pad";
        assert!(sets("glibc.malloc.top_pad=65536", pad));
        assert!(sets("glibc.malloc.arena_max=2:glibc.malloc.top_pad=0", pad));
        assert!(!sets("glibc.malloc.top_padding=1", pad));
        assert!(!sets("glibc.malloc.arena_max=2", pad));
        assert!(!sets("", pad));
    }
}
