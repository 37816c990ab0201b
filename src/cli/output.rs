//! Writing to stdout without panicking on a closed pipe (`uwf cas list | head` exits 0).

use std::io::{self, Write};

/// The command's standard output.
pub struct Out {
    inner: Box<dyn Write>,
}

impl Out {
    pub fn stdout() -> Out {
        Out {
            inner: Box::new(io::BufWriter::new(io::stdout().lock())),
        }
    }

    /// Writes one line.
    pub fn line(&mut self, text: impl std::fmt::Display) -> io::Result<()> {
        writeln!(self.inner, "{text}")
    }

    /// Writes text as is.
    pub fn text(&mut self, text: &str) -> io::Result<()> {
        self.inner.write_all(text.as_bytes())
    }

    /// Writes a value as pretty JSON plus a newline.
    pub fn json_pretty(&mut self, value: &serde_json::Value) -> io::Result<()> {
        serde_json::to_writer_pretty(&mut self.inner, value)?;
        writeln!(self.inner)
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl Drop for Out {
    fn drop(&mut self) {
        let _ = self.inner.flush();
    }
}
