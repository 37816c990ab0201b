//! Store-level maintenance: checks and repairs that look at a whole store, not one thread.
//!
//! - [`fsck`]: `uwf cas fsck`, every node reachable from the index checked.
//! - [`doctor`]: `uwf doctor`, the configuration, secrets, backend and agents checked.
//! - [`retention`]: `cas gc --keep-logs`, old threads' logs and event feeds removed.
//! - [`store_copy`]: `uwf store copy`, a whole store from one backend to another, verified.
pub(crate) mod doctor;
pub mod fsck;
pub(crate) mod retention;
pub(crate) mod store_copy;
