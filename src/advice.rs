//! What an error says beyond its message: what the user can do instead (hints), and whether it
//! only means that another process holds what was needed (busy, exit 75).
//!
//! Every error enum of `cas` and `engine` implements [`Advice`]; wrapping variants delegate to
//! the error they wrap. Messages themselves never carry hint text: the CLI's error boundary
//! (`cli/error.rs`) prints the message, its causes and then every hint, and the mount writes the
//! same into its `error` files through [`with_hints`].

use std::fmt::Write;

/// Hints and busy-ness of an error, as data.
pub trait Advice {
    /// What to do instead, one suggestion each, most useful first.
    fn hints(&self) -> Vec<String> {
        Vec::new()
    }

    /// Whether the failure only means that another process holds the thread (exit 75).
    fn is_busy(&self) -> bool {
        false
    }
}

/// An error's message followed by its hints as `hint: …` lines, for text files.
pub(crate) fn with_hints<E: std::fmt::Display + Advice + ?Sized>(error: &E) -> String {
    let mut text = error.to_string();
    for hint in error.hints() {
        let _ = write!(text, "\nhint: {hint}");
    }
    text
}

impl Advice for std::io::Error {}
impl Advice for serde_json::Error {}
impl Advice for serde_yaml::Error {}
impl Advice for nix::errno::Errno {}
impl Advice for crate::file_util::FileError {}
