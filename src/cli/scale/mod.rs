//! The commands of a store shared by many machines: `uwf worker` and `uwf store`.

pub(crate) mod store;
pub(crate) mod worker;
