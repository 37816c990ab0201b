//! The FUSE view of the store (`uwf mount`, SPEC §7).
//!
//! Not built yet: this module is where the protocol-free tree and the thin fuser adapter will
//! live. Nothing outside it depends on it.
