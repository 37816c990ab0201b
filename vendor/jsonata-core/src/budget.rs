//! The host's memory budget, asked before the engine builds a large string in one go (uwf patch).
//!
//! A host that counts an evaluation's allocations (uwf's counting allocator) can only stop the
//! evaluation at the engine's next check, after the allocation in progress: `$s & $s` of a
//! 128 MB string makes a 256 MB `String` and then a 256 MB `Rc<str>` copy of it before anything
//! can look. The engine therefore asks the host, through the hook set with [`set_hook`], before
//! it builds such a value: the hook answers whether `bytes` more fit, and a refusal fails the
//! evaluation (the host knows why, and says so). Without a hook nothing is asked.

use std::sync::OnceLock;

/// Below this, a value is built without asking: the host's count catches it right after, so
/// this is all it can overshoot by.
const ASK_FROM: usize = 64 * 1024;

static HOOK: OnceLock<fn(usize) -> bool> = OnceLock::new();

/// Sets the hook, once per process: `hook(bytes)` says whether the evaluation running on the
/// calling thread may allocate `bytes` more.
pub fn set_hook(hook: fn(usize) -> bool) {
    let _ = HOOK.set(hook);
}

/// The message of a refusal; the host reports its own limit instead.
pub const REFUSED: &str = "U1010: The evaluation would exceed its memory budget";

/// Whether `bytes` more may be allocated now.
#[inline]
pub(crate) fn fits(bytes: usize) -> bool {
    bytes < ASK_FROM || HOOK.get().is_none_or(|hook| hook(bytes))
}

/// [`fits`], as the evaluator's error.
#[inline]
pub(crate) fn reserve(bytes: usize) -> Result<(), crate::evaluator::EvaluatorError> {
    if fits(bytes) {
        Ok(())
    } else {
        Err(crate::evaluator::EvaluatorError::EvaluationError(
            REFUSED.to_string(),
        ))
    }
}

/// A string built piece by piece asks the budget at every [`ASK_FROM`] bytes of growth for
/// room to double once more and to be copied into its `Rc<str>`.
pub(crate) struct Growth {
    next: usize,
}

impl Growth {
    pub(crate) fn new() -> Growth {
        Growth { next: ASK_FROM }
    }

    /// Whether a string now `len` bytes long may go on growing.
    #[inline]
    pub(crate) fn check(&mut self, len: usize) -> Result<(), crate::functions::FunctionError> {
        if len < self.next {
            return Ok(());
        }
        self.next = len.saturating_add(ASK_FROM);
        reserve_fn(string_cost(len))
    }
}

/// [`fits`], as the functions' error.
#[inline]
pub(crate) fn reserve_fn(bytes: usize) -> Result<(), crate::functions::FunctionError> {
    if fits(bytes) {
        Ok(())
    } else {
        Err(crate::functions::FunctionError::RuntimeError(
            REFUSED.to_string(),
        ))
    }
}

/// What building a string of `len` bytes costs at its peak: the `String` and the `Rc<str>`
/// that `JValue::string` copies it into.
#[inline]
pub(crate) fn string_cost(len: usize) -> usize {
    len.saturating_mul(2)
}

/// What adding `n` values to an array costs at most: the values, twice for the doubling of
/// the array's capacity.
#[inline]
pub(crate) fn items_cost(n: usize) -> usize {
    n.saturating_mul(std::mem::size_of::<crate::value::JValue>())
        .saturating_mul(2)
}
