//! The PostgreSQL storage backend (`docs/several-machines.md#reference`): nodes, heads, history,
//! registry, step leases and the run queue in one database, so many machines can share one store.
//!
//! This module is the backend's core, usable on its own; the storage seam (traits that the
//! directory store and this backend both implement) comes next. Layering: like `cas`, it
//! imports only `cas` (ids, canonical bytes, built-in schemas) and `advice`.
//!
//! Architecture Invariant: the same node has the same hash and the same canonical bytes here as
//! in the directory store; rows are write-once and verified on read; heads move only by
//! compare-and-set; a step lease is taken in one race-safe statement.
pub(crate) mod config;
pub(crate) mod context;
pub(crate) mod copy;
pub(crate) mod error;
pub(crate) mod leases;
pub(crate) mod listen;
pub(crate) mod maintenance;
pub(crate) mod registry;
pub(crate) mod rows;
pub(crate) mod runs;
pub(crate) mod schema;
pub(crate) mod store;
pub(crate) mod threads;
pub(crate) mod workers;

pub use config::PgConfig;
pub(crate) use config::redact;
pub(crate) use copy::Occupancy;
pub use error::PgError;
pub use leases::Holder;
pub(crate) use leases::Lease;
pub use listen::Listener;
pub use registry::Registered;
pub(crate) use registry::{RegistryName, RegistryVersion};
pub(crate) use rows::{ActiveThread, ArchivedThread, Entry, Exported, IndexRow};
pub use rows::{
    Learned, NOTHING_SPENT, NewThread, RowFacts, SPENT_LINES_LIMIT, SpentChange, Successor,
    search_text,
};
pub(crate) use runs::LineageRow;
pub use runs::{RunAppend, RunFileKind, RunStateChange};
pub(crate) use schema::CHANNEL;
pub use schema::{RUNS_CHANNEL, SCHEMA_VERSION};
pub use store::PgStore;
pub(crate) use threads::ListPage;
pub use threads::ThreadState;
pub(crate) use workers::WorkerRow;
