//! The process's global allocator: the system allocator, counting what a JSONata evaluation
//! allocates on its worker thread, so that the evaluation stops at its memory limit.
//!
//! jsonata-core bounds time, depth and sequence lengths, not memory: `[1..10000].([1..10000])`
//! builds 10^8 values within its one-second limit (1 GB here). During an evaluation the worker
//! thread carries a [`Scope`]; every allocation on that thread adds its size (rounded up the
//! way glibc's malloc rounds a chunk, so the count follows the real footprint) and every free
//! on it subtracts. Past the limit the scope cancels the evaluation's token: the engine stops at
//! its next check (between expression nodes and loop iterations, so a little past the limit)
//! and the evaluation reports [`super::JsonataError::MemoryLimit`].
//!
//! Allocations of other threads, and of a worker outside an evaluation, pay one thread-local
//! read. Memory the evaluation allocates and another thread frees is never subtracted, which can
//! only make the count too high. What the count alone cannot stop is one huge allocation in a
//! single built-in call: it is made before anything can check. So the engine asks first
//! ([`fits`], installed as jsonata-core's budget hook) before it builds a large value in one go,
//! and a refusal ends the evaluation as going past the limit does.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use jsonata_core::evaluator::CancelToken;

/// The system allocator, counting for the evaluation in scope on the calling thread.
pub(super) struct Counting;

#[global_allocator]
static GLOBAL: Counting = Counting;

#[derive(Clone, Copy)]
struct Budget {
    used: usize,
    limit: usize,
    exceeded: bool,
    /// The evaluation's token, alive as long as the [`Scope`] that set it.
    cancel: *const CancelToken,
}

thread_local! {
    // `const` and free of destructors, so the allocator may touch it at any time, even while
    // the thread starts or ends.
    static BUDGET: Cell<Option<Budget>> = const { Cell::new(None) };
}

/// What an allocation of `size` bytes costs: glibc's chunk for it (a word of header, 16-byte
/// granules, 32 bytes at least).
fn cost(size: usize) -> usize {
    size.saturating_add(8).next_multiple_of(16).max(32)
}

fn charge(add: usize, sub: usize) {
    let _ = BUDGET.try_with(|cell| {
        let Some(mut budget) = cell.get() else {
            return;
        };
        budget.used = budget.used.saturating_add(add).saturating_sub(sub);
        if budget.used > budget.limit && !budget.exceeded {
            budget.exceeded = true;
            // SAFETY: `cancel` points at the token owned by the `Scope` in force on this
            // thread, which clears the budget before the token can go away; `cancel()` is one
            // atomic store and allocates nothing.
            unsafe { (*budget.cancel).cancel() };
        }
        cell.set(Some(budget));
    });
}

/// The engine's question before it builds a large value in one go (`jsonata_core::budget`): do
/// `bytes` more fit in the evaluation in scope on this thread? A refusal marks the budget as
/// exceeded and cancels, as going past it does, so the evaluation reports its memory limit
/// without having made the value: the count alone would stop it only after the allocation.
pub(super) fn fits(bytes: usize) -> bool {
    BUDGET
        .try_with(|cell| {
            let Some(mut budget) = cell.get() else {
                return true;
            };
            if budget.used.saturating_add(cost(bytes)) <= budget.limit {
                return true;
            }
            if !budget.exceeded {
                budget.exceeded = true;
                // SAFETY: as in `charge`: the token outlives the scope that set the budget.
                unsafe { (*budget.cancel).cancel() };
                cell.set(Some(budget));
            }
            false
        })
        .unwrap_or(true)
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; the
// counting touches only a thread-local `Cell` and never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        charge(cost(layout.size()), 0);
        // SAFETY: forwarded as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        charge(cost(layout.size()), 0);
        // SAFETY: forwarded as is.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        charge(0, cost(layout.size()));
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        charge(cost(new_size), cost(layout.size()));
        // SAFETY: forwarded as is.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Counts this thread's allocations against `limit` bytes until dropped; past the limit,
/// cancels `cancel` (once).
pub(super) struct Scope<'a> {
    _cancel: &'a CancelToken,
}

impl<'a> Scope<'a> {
    pub(super) fn enter(limit: usize, cancel: &'a CancelToken) -> Scope<'a> {
        jsonata_core::budget::set_hook(fits);
        BUDGET.with(|cell| {
            cell.set(Some(Budget {
                used: 0,
                limit,
                exceeded: false,
                cancel: std::ptr::from_ref(cancel),
            }))
        });
        Scope { _cancel: cancel }
    }

    /// Whether the evaluation went past its limit.
    pub(super) fn exceeded(&self) -> bool {
        BUDGET.with(|cell| cell.get().is_some_and(|b| b.exceeded))
    }
}

impl Drop for Scope<'_> {
    fn drop(&mut self) {
        BUDGET.with(|cell| cell.set(None));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_cancels_once_past_its_limit_and_counts_frees() {
        let token = CancelToken::new();
        let scope = Scope::enter(1 << 20, &token);
        let small = vec![0u8; 512 << 10];
        drop(small);
        let again = vec![0u8; 700 << 10];
        assert!(!token.is_cancelled(), "frees are subtracted");
        let over = vec![0u8; 700 << 10];
        assert!(token.is_cancelled());
        assert!(scope.exceeded());
        drop((again, over));
        drop(scope);
        // Out of scope nothing is counted.
        let token = CancelToken::new();
        let big = vec![0u8; 4 << 20];
        drop(big);
        assert!(!token.is_cancelled());
    }
}
