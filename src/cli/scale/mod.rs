//! The commands of a store shared by many machines (SPEC §12): `uwf worker` and `uwf store`.

pub mod store;
pub mod worker;
