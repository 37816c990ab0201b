//! Writing to stdout without panicking on a closed pipe (`uwf cas list | head` exits 0), and in the
//! form the reader wants (`docs/cli.md#lists-colour-and-the-pager`): aligned tables with relative
//! times for a person at a terminal, JSON lines for scripts (`--json`, or any stdout that is not a
//! terminal), bare ids with `-q`.

use std::io::{self, IsTerminal, Write};

/// How list-like commands print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Aligned columns with a header and relative times (stdout is a terminal).
    Table,
    /// One JSON object per line.
    Json,
    /// Only the id or hash of each item (`-q`).
    Quiet,
}

/// The command's standard output.
pub(crate) struct Out {
    inner: Box<dyn Write>,
    /// The pager `inner` writes to, once [`Out::page`] started one.
    pager: Option<std::process::Child>,
    pub mode: Mode,
    /// `--json` was given (not only implied by a pipe).
    pub json_asked: bool,
}

impl Out {
    /// Standard output; `json` and `quiet` are the global flags.
    pub(crate) fn stdout(json: bool, quiet: bool) -> Out {
        let mode = if quiet {
            Mode::Quiet
        } else if json || !io::stdout().is_terminal() {
            Mode::Json
        } else {
            Mode::Table
        };
        Out {
            inner: Box::new(io::BufWriter::new(io::stdout().lock())),
            pager: None,
            mode,
            json_asked: json,
        }
    }

    /// Whether only ids are wanted.
    pub(crate) fn quiet(&self) -> bool {
        self.mode == Mode::Quiet
    }

    /// Writes one line.
    pub(crate) fn line(&mut self, text: impl std::fmt::Display) -> io::Result<()> {
        writeln!(self.inner, "{text}")
    }

    /// Writes text as is.
    pub(crate) fn text(&mut self, text: &str) -> io::Result<()> {
        self.inner.write_all(text.as_bytes())
    }

    /// A command's one result: its id or hash with `-q`, else `value` as one JSON line.
    pub(crate) fn result(
        &mut self,
        id: impl std::fmt::Display,
        value: &serde_json::Value,
    ) -> io::Result<()> {
        if self.quiet() {
            self.line(id)
        } else {
            self.line(value)
        }
    }

    /// A command's one result: `text` for a person at a terminal, its id or hash with `-q`,
    /// else `value` as one JSON line (also on a terminal with `--json`).
    pub(crate) fn said(
        &mut self,
        text: &str,
        id: impl std::fmt::Display,
        value: &serde_json::Value,
    ) -> io::Result<()> {
        match self.mode {
            Mode::Table => self.line(text),
            Mode::Quiet => self.line(id),
            Mode::Json => self.line(value),
        }
    }

    /// Writes a value as pretty JSON plus a newline.
    pub(crate) fn json_pretty(&mut self, value: &serde_json::Value) -> io::Result<()> {
        serde_json::to_writer_pretty(&mut self.inner, value)?;
        writeln!(self.inner)
    }

    /// Writes rows under `header` as aligned columns ([`format_table`]); for a person at a
    /// terminal, no rows is the header and `(none)`, so an empty list still says what it is.
    pub(crate) fn table(&mut self, header: &[&str], rows: &[Vec<String>]) -> io::Result<()> {
        if rows.is_empty() && self.mode == Mode::Table {
            let header = header.join("  ");
            return writeln!(self.inner, "{}\n(none)", header.trim_end());
        }
        self.inner.write_all(format_table(header, rows).as_bytes())
    }

    pub(crate) fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }

    /// One object: aligned `key: value` lines for a person at a terminal, else one JSON line
    /// (`--json` gives the line on a terminal too).
    pub(crate) fn object(&mut self, value: &serde_json::Value) -> io::Result<()> {
        let (Mode::Table, Some(fields)) = (self.mode, value.as_object()) else {
            return self.line(value);
        };
        let width = fields.keys().map(|k| k.chars().count()).max().unwrap_or(0);
        for (key, v) in fields {
            let shown = match v {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Null => "—".to_owned(),
                other => other.to_string(),
            };
            // A multi-line value (an error with its hints) keeps its lines under the first.
            let shown = shown.replace('\n', &format!("\n{}", " ".repeat(width + 2)));
            writeln!(self.inner, "{key:<width$}  {shown}")?;
        }
        Ok(())
    }

    /// Sends the rest of the output through the pager, when a person reads it at a terminal
    /// (see [`super::style::pager`]); a pager that cannot start leaves the output as it was.
    pub(crate) fn page(&mut self) {
        let Some(command) = super::style::pager() else {
            return;
        };
        let _ = self.inner.flush();
        let child = std::process::Command::new("sh")
            .args(["-c", &command])
            .env(
                "LESS",
                std::env::var("LESS").unwrap_or_else(|_| "FRX".into()),
            )
            .stdin(std::process::Stdio::piped())
            .spawn();
        if let Ok(mut child) = child
            && let Some(stdin) = child.stdin.take()
        {
            self.inner = Box::new(io::BufWriter::new(stdin));
            self.pager = Some(child);
        }
    }

    /// Whether what is written here is coloured (stdout is a terminal, or a pager reads it
    /// for one, and colour is on).
    pub(crate) fn color(&self) -> bool {
        super::style::stdout_color()
    }
}

impl Drop for Out {
    fn drop(&mut self) {
        let _ = self.inner.flush();
        if let Some(mut pager) = self.pager.take() {
            // Closing its input lets the pager end once the reader is done.
            self.inner = Box::new(io::sink());
            let _ = pager.wait();
        }
    }
}

/// Rows under `header` as aligned columns, two spaces apart, the last column not padded;
/// nothing at all for no rows, so an empty list stays empty.
pub(crate) fn format_table(header: &[&str], rows: &[Vec<String>]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let header: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    let mut text = String::new();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if i + 1 < row.len() {
                let pad = widths[i].saturating_sub(cell.chars().count());
                line.push_str(&" ".repeat(pad + 2));
            }
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

/// How long ago `ms` (milliseconds since the epoch) was, for people: `just now`, `42s ago`,
/// `5 min ago`, `3 h ago`, `1 day ago`, `12 days ago`.
pub(crate) fn ago(ms: u64, now_ms: u64) -> String {
    let secs = now_ms.saturating_sub(ms) / 1000;
    match secs {
        0..=4 => "just now".to_owned(),
        5..=59 => format!("{secs}s ago"),
        60..=3599 => format!("{} min ago", secs / 60),
        3600..=86_399 => format!("{} h ago", secs / 3600),
        _ => {
            let days = secs / 86_400;
            format!("{days} day{} ago", if days == 1 { "" } else { "s" })
        }
    }
}

/// `text` cut to `max` characters, with `…` when cut.
pub(crate) fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() > max {
        format!("{}…", text.chars().take(max - 1).collect::<String>())
    } else {
        text.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_aligns_its_columns_and_an_empty_one_prints_nothing() {
        let rows = vec![
            vec![
                "1".into(),
                "FTP86G6C2PWQ6".into(),
                "planner".into(),
                "just now".into(),
            ],
            vec!["10".into(), "BP23JYCCHWACM".into(), "dev".into(), "".into()],
        ];
        assert_eq!(
            format_table(&["#", "STEP", "ROLE", "WHEN"], &rows),
            "\
#   STEP           ROLE     WHEN
1   FTP86G6C2PWQ6  planner  just now
10  BP23JYCCHWACM  dev
"
        );
        assert_eq!(format_table(&["#"], &[]), "");
    }

    #[test]
    fn relative_times_read_like_speech() {
        let now = 10_000_000_000;
        assert_eq!(ago(now, now), "just now");
        assert_eq!(ago(now - 42_000, now), "42s ago");
        assert_eq!(ago(now - 300_000, now), "5 min ago");
        assert_eq!(ago(now - 3 * 3_600_000, now), "3 h ago");
        assert_eq!(ago(now - 86_400_000, now), "1 day ago");
        assert_eq!(ago(now - 12 * 86_400_000, now), "12 days ago");
        assert_eq!(
            ago(now + 5_000, now),
            "just now",
            "a clock ahead is not negative"
        );
    }
}
