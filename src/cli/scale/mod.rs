//! The commands of a store shared by many machines: `uwf worker` and `uwf store`.

pub mod store;
pub mod worker;
