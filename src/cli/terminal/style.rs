//! Colour and paging for a person at a terminal, as git and jj do: colour when the stream is a
//! terminal (`--color=auto`, the default), never with `NO_COLOR` set or `TERM=dumb`, always with
//! `--color=always`; long output of `thread read`, `thread log` and `thread diff` goes through
//! `$PAGER` (default `less -FRX`, which quits when it fits on one screen) unless `--no-pager`.
//! Scripts and pipes get plain text: nothing here changes what a non-terminal reads.

use std::io::IsTerminal;
use std::sync::OnceLock;

/// `--color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum When {
    /// On a terminal, unless `NO_COLOR` is set or `TERM=dumb`.
    #[default]
    Auto,
    Always,
    Never,
}

/// The choices made once, from the command line.
#[derive(Debug, Clone, Copy)]
struct Choice {
    color: When,
    pager: bool,
}

static CHOICE: OnceLock<Choice> = OnceLock::new();

/// Records `--color` and `--no-pager` (first call wins).
pub(crate) fn init(color: When, no_pager: bool) {
    let _ = CHOICE.set(Choice {
        color,
        pager: !no_pager,
    });
}

fn choice() -> Choice {
    CHOICE.get().copied().unwrap_or(Choice {
        color: When::Auto,
        pager: true,
    })
}

fn wanted(is_terminal: bool) -> bool {
    match choice().color {
        When::Always => true,
        When::Never => false,
        When::Auto => {
            is_terminal
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                && std::env::var_os("TERM").is_none_or(|t| t != "dumb")
        }
    }
}

/// Whether what goes to stderr is coloured.
pub(crate) fn stderr_color() -> bool {
    wanted(std::io::stderr().is_terminal())
}

/// Whether what goes to stdout is coloured.
pub(crate) fn stdout_color() -> bool {
    wanted(std::io::stdout().is_terminal())
}

/// A colour of this module's few.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Paint {
    /// `error:`, removed lines, failed checks.
    Red,
    /// Added lines, passed checks.
    Green,
    /// `hint:`, hunk headers.
    Cyan,
    /// `caused by:`.
    Yellow,
}

impl Paint {
    fn code(self) -> &'static str {
        match self {
            Paint::Red => "1;31",
            Paint::Green => "32",
            Paint::Cyan => "36",
            Paint::Yellow => "33",
        }
    }

    /// `text` in this colour when `on`, else as is.
    pub(crate) fn on(self, text: &str, on: bool) -> String {
        if on {
            format!("\x1b[{}m{text}\x1b[0m", self.code())
        } else {
            text.to_owned()
        }
    }
}

/// A unified diff with removed lines red, added lines green and hunk headers cyan.
pub(crate) fn diff(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for line in text.split_inclusive('\n') {
        let (body, end) = match line.strip_suffix('\n') {
            Some(body) => (body, "\n"),
            None => (line, ""),
        };
        let paint = if body.starts_with("+++") || body.starts_with("---") {
            None
        } else if body.starts_with('+') {
            Some(Paint::Green)
        } else if body.starts_with('-') {
            Some(Paint::Red)
        } else if body.starts_with("@@") {
            Some(Paint::Cyan)
        } else {
            None
        };
        match paint {
            Some(p) => out.push_str(&p.on(body, true)),
            None => out.push_str(body),
        }
        out.push_str(end);
    }
    out
}

/// The pager to run for output on a terminal: `None` with `--no-pager`, when stdout is not a
/// terminal, or when `$PAGER` is set empty or to `cat`.
pub(crate) fn pager() -> Option<String> {
    if !choice().pager || !std::io::stdout().is_terminal() {
        return None;
    }
    match std::env::var("PAGER") {
        Ok(p) if p.trim().is_empty() || p.trim() == "cat" => None,
        Ok(p) => Some(p),
        Err(_) => Some("less -FRX".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_diff_is_painted_by_line_kind() {
        let text = "--- a\n+++ b\n@@ -1 +1 @@\n-old\n+new\n same";
        let painted = diff(text);
        assert!(painted.contains("\x1b[1;31m-old\x1b[0m\n"), "{painted:?}");
        assert!(painted.contains("\x1b[32m+new\x1b[0m\n"), "{painted:?}");
        assert!(
            painted.contains("\x1b[36m@@ -1 +1 @@\x1b[0m\n"),
            "{painted:?}"
        );
        assert!(painted.starts_with("--- a\n+++ b\n"), "{painted:?}");
        assert!(painted.ends_with(" same"), "{painted:?}");
        assert_eq!(Paint::Red.on("x", false), "x");
    }
}
