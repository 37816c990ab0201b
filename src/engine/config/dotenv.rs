//! `<root>/.env`: the secrets file (`docs/LLM.md#secrets-rootenv`).
//!
//! `KEY=VALUE` lines (an optional `export ` prefix, `#` comments, values optionally in single or
//! double quotes). uwf loads it at start into its own environment without overriding variables
//! already set, so a provider's `apiKeyEnv` finds its key there, and so do the agents uwf runs.
//!
//! Architecture Invariant: values read from or written to this file never appear in an error
//! message; errors name the file and the line number only. The file is written 0600 through a
//! temporary file and a rename, so it is never readable by others, even for a moment.

use crate::advice::Advice;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Errors reading or writing `.env`.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DotenvError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Write(#[from] crate::file_util::FileError),
    #[error(
        "{} line {line}: expected KEY=VALUE (KEY: letters, digits, `_`)",
        path.display()
    )]
    Syntax { path: PathBuf, line: usize },
}

impl Advice for DotenvError {
    fn hints(&self) -> Vec<String> {
        match self {
            DotenvError::Syntax { .. } => vec!["fix or delete that line; `uwf setup --api-key-env NAME --api-key -` rewrites a key".to_owned()],
            _ => Vec::new(),
        }
    }
}

/// The path of the secrets file.
pub(crate) fn path(root: &Path) -> PathBuf {
    root.join(".env")
}

/// Reads `<root>/.env` (absent → nothing).
pub(crate) fn read(root: &Path) -> Result<Vec<(String, String)>, DotenvError> {
    let path = path(root);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(DotenvError::Read { path, source }),
    };
    parse(&text).map_err(|line| DotenvError::Syntax { path, line })
}

/// Parses `.env` text; the error is the 1-based number of the first bad line.
pub(crate) fn parse(text: &str) -> Result<Vec<(String, String)>, usize> {
    let mut pairs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line).trim_start();
        let (key, value) = line.split_once('=').ok_or(i + 1)?;
        let key = key.trim();
        if !crate::engine::config::is_env_name(key) {
            return Err(i + 1);
        }
        pairs.push((key.to_owned(), unquote(value.trim()).ok_or(i + 1)?));
    }
    Ok(pairs)
}

/// A value without its quotes; `None` when a quote is not closed.
fn unquote(value: &str) -> Option<String> {
    if let Some(rest) = value.strip_prefix('\'') {
        let end = rest.find('\'')?;
        return Some(rest[..end].to_owned());
    }
    if let Some(rest) = value.strip_prefix('"') {
        let mut out = String::new();
        let mut chars = rest.chars();
        while let Some(c) = chars.next() {
            match c {
                '"' => return Some(out),
                '\\' => match chars.next()? {
                    'n' => out.push('\n'),
                    other => out.push(other),
                },
                c => out.push(c),
            }
        }
        return None;
    }
    // An unquoted value ends at ` #` (a trailing comment).
    let value = match value.find(" #") {
        Some(at) => value[..at].trim_end(),
        None => value,
    };
    Some(value.to_owned())
}

/// A value as written to the file: bare when that reads back the same, else double-quoted.
fn quote(value: &str) -> String {
    let bare = !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.:/+@%,=~".contains(c));
    if bare {
        value.to_owned()
    } else {
        let escaped = value
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n");
        format!("\"{escaped}\"")
    }
}

/// Sets `updates` in `<root>/.env`, keeping its other lines (and comments), creating the root
/// and the file as needed. The file ends up mode 0600.
pub(crate) fn set(root: &Path, updates: &[(&str, &str)]) -> Result<(), DotenvError> {
    let path = path(root);
    let old = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(source) => return Err(DotenvError::Read { path, source }),
    };
    let mut pending: Vec<(&str, &str)> = updates.to_vec();
    let mut lines: Vec<String> = Vec::new();
    for line in old.lines() {
        let trimmed = line.trim();
        let key = trimmed
            .strip_prefix("export ")
            .unwrap_or(trimmed)
            .split_once('=')
            .map(|(k, _)| k.trim());
        match key.and_then(|k| pending.iter().position(|(name, _)| *name == k)) {
            Some(at) => {
                let (name, value) = pending.remove(at);
                lines.push(format!("{name}={}", quote(value)));
            }
            None => lines.push(line.to_owned()),
        }
    }
    for (name, value) in pending {
        lines.push(format!("{name}={}", quote(value)));
    }
    let mut text = lines.join("\n");
    text.push('\n');
    crate::file_util::AtomicWrite::new(&path)
        .mode(0o600)
        .replace(text.as_bytes())?;
    Ok(())
}

/// Whether the file exists and can be read by others than its owner.
pub(crate) fn too_open(root: &Path) -> bool {
    std::fs::metadata(path(root)).is_ok_and(|m| m.permissions().mode() & 0o077 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_usual_forms() {
        let text = "# keys\n\nOPENAI_API_KEY=sk-abc123\nexport B = 'x y' \nC=\"a \\\"q\\\"\\nb\"\nD=v # note\nE=\n";
        assert_eq!(
            parse(text).unwrap(),
            [
                ("OPENAI_API_KEY".to_owned(), "sk-abc123".to_owned()),
                ("B".to_owned(), "x y".to_owned()),
                ("C".to_owned(), "a \"q\"\nb".to_owned()),
                ("D".to_owned(), "v".to_owned()),
                ("E".to_owned(), String::new()),
            ]
        );
        assert_eq!(parse("A=1\nnot a pair\n"), Err(2));
        assert_eq!(parse("1A=x\n"), Err(1));
        assert_eq!(parse("A=\"open\n"), Err(1));
    }

    #[test]
    fn set_merges_keeps_comments_and_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        set(&root, &[("A", "1"), ("B", "two words")]).unwrap();
        std::fs::write(
            path(&root),
            format!("# mine\n{}", std::fs::read_to_string(path(&root)).unwrap()),
        )
        .unwrap();
        std::fs::set_permissions(path(&root), std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(too_open(&root));
        set(&root, &[("B", "x\"y"), ("C", "sk-1")]).unwrap();
        let text = std::fs::read_to_string(path(&root)).unwrap();
        assert_eq!(text, "# mine\nA=1\nB=\"x\\\"y\"\nC=sk-1\n");
        assert_eq!(
            read(&root).unwrap(),
            [
                ("A".to_owned(), "1".to_owned()),
                ("B".to_owned(), "x\"y".to_owned()),
                ("C".to_owned(), "sk-1".to_owned()),
            ]
        );
        let mode = std::fs::metadata(path(&root)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(!too_open(&root));
    }

    #[test]
    fn syntax_errors_name_the_line_not_the_value() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(path(dir.path()), "A=1\nsk-secret-value\n").unwrap();
        let err = read(dir.path()).unwrap_err().to_string();
        assert!(err.contains(".env line 2: expected KEY=VALUE"), "{err}");
        assert!(!err.contains("sk-secret-value"), "{err}");
    }
}
