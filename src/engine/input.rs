//! Reading what a command is given to store (a prompt, an answer, an agent's output, a payload)
//! from stdin or a named file, within one size limit.
//!
//! Architecture Invariant: no input stream is read past its limit plus one byte, so endless
//! input (`yes | uwf cas put text -`, `-f /dev/zero`) costs at most the limit in memory, and an
//! input refused as too large is refused before anything is stored.
//!
//! The limit is [`DEFAULT_MAX_INPUT`] (16 MiB) unless `UWF_MAX_INPUT` (e.g. `64MiB`) or
//! `maxInput` in `config.yaml` says otherwise; the environment wins, as `UWF_STORAGE_URL` wins
//! over `storage:`. A workflow file keeps its own, smaller limit (1 MiB).

use std::io::Read;
use std::path::Path;

use crate::advice::Advice;
use crate::engine::config::Config;
use crate::engine::workflow::jsonata::{parse_size, show_size};

/// The default largest input: 16 MiB, far above any prompt or answer a person writes, far
/// below what would make a node, a transcript or a context unwieldy.
pub(crate) const DEFAULT_MAX_INPUT: u64 = 16 << 20;

/// The environment variable that sets the input limit, e.g. `UWF_MAX_INPUT=64MiB`.
pub(crate) const MAX_INPUT_ENV: &str = "UWF_MAX_INPUT";

/// Where an input comes from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Source<'a> {
    Stdin,
    File(&'a Path),
}

impl Source<'_> {
    /// `-` is stdin, anything else a file.
    pub(crate) fn of(arg: &str) -> Source<'_> {
        if arg == "-" {
            Source::Stdin
        } else {
            Source::File(Path::new(arg))
        }
    }

    fn name(&self) -> String {
        match self {
            Source::Stdin => "stdin".to_owned(),
            Source::File(path) => path.display().to_string(),
        }
    }
}

/// Errors reading an input.
#[derive(Debug, thiserror::Error)]
pub(crate) enum InputError {
    #[error("{source_name} is {} bytes; an input has at most {}", size.map_or_else(|| format!("more than {limit}"), |s| s.to_string()), limit_words(*limit))]
    TooLarge {
        source_name: String,
        /// The real size of a regular file; `None` for a stream, read only up to the limit.
        size: Option<u64>,
        limit: u64,
    },
    #[error("{source_name} is not UTF-8 text")]
    NotText { source_name: String },
    #[error("cannot read {source_name}: {source}")]
    Io {
        source_name: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{MAX_INPUT_ENV}={value} is not a size (e.g. 64MiB, 1GiB, 1048576)")]
    BadLimit { value: String },
}

impl Advice for InputError {
    fn hints(&self) -> Vec<String> {
        match self {
            InputError::TooLarge { .. } => vec![format!(
                "raise the limit for one command with {MAX_INPUT_ENV}=64MiB, or for the store \
                 with `maxInput: 64MiB` in config.yaml; nothing was stored"
            )],
            InputError::NotText { .. } => vec!["save it as UTF-8 text".to_owned()],
            InputError::BadLimit { .. } => vec![format!(
                "unset {MAX_INPUT_ENV} to use config.yaml's maxInput or the default {}",
                show_size(DEFAULT_MAX_INPUT as usize)
            )],
            InputError::Io { .. } => Vec::new(),
        }
    }
}

/// A limit in words: `16 MiB (16777216 bytes)`, or `1000 bytes`.
fn limit_words(limit: u64) -> String {
    let shown = show_size(limit as usize);
    if shown.ends_with(" bytes") {
        shown
    } else {
        format!("{shown} ({limit} bytes)")
    }
}

/// The input limit: `UWF_MAX_INPUT` → `maxInput` in `config` → [`DEFAULT_MAX_INPUT`].
pub(crate) fn max_input(config: &Config) -> Result<u64, InputError> {
    if let Ok(value) = std::env::var(MAX_INPUT_ENV) {
        return parse_limit(&value).ok_or(InputError::BadLimit { value });
    }
    Ok(config.max_input.unwrap_or(DEFAULT_MAX_INPUT))
}

/// A limit as `1048576`, `512KiB`, `16MiB`, `1GiB`; zero is not a limit.
pub(crate) fn parse_limit(text: &str) -> Option<u64> {
    parse_size(text).filter(|&n| n > 0).map(|n| n as u64)
}

/// Reads all of `source` as UTF-8 text, refusing it when it holds more than `limit` bytes.
pub(crate) fn read_text(source: Source, limit: u64) -> Result<String, InputError> {
    let bytes = read_bytes(source, limit)?;
    String::from_utf8(bytes).map_err(|_| InputError::NotText {
        source_name: source.name(),
    })
}

/// Reads all of `source`, refusing it when it holds more than `limit` bytes; reads at most
/// `limit + 1` bytes whatever the source holds.
pub(crate) fn read_bytes(source: Source, limit: u64) -> Result<Vec<u8>, InputError> {
    let io = |source_name: String| {
        move |source| InputError::Io {
            source_name,
            source,
        }
    };
    match source {
        Source::Stdin => {
            let stdin = std::io::stdin();
            read_capped(stdin.lock(), None, &source.name(), limit)
        }
        Source::File(path) => {
            let file = std::fs::File::open(path).map_err(io(source.name()))?;
            let size = file
                .metadata()
                .ok()
                .filter(|m| m.is_file())
                .map(|m| m.len());
            read_capped(file, size, &source.name(), limit)
        }
    }
}

/// Reads `reader` up to `limit + 1` bytes; more than `limit` is [`InputError::TooLarge`], which
/// reports `size` (a regular file's length) when known.
fn read_capped(
    reader: impl Read,
    size: Option<u64>,
    source_name: &str,
    limit: u64,
) -> Result<Vec<u8>, InputError> {
    let mut bytes = Vec::new();
    reader
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|source| InputError::Io {
            source_name: source_name.to_owned(),
            source,
        })?;
    if bytes.len() as u64 > limit {
        return Err(InputError::TooLarge {
            source_name: source_name.to_owned(),
            // A file that grew while read is at least as large as what was read.
            size: size.map(|s| s.max(bytes.len() as u64)),
            limit,
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_up_to_the_limit_and_refuses_one_byte_more() {
        let ok = read_capped(&b"abcd"[..], None, "stdin", 4).unwrap();
        assert_eq!(ok, b"abcd");
        let err = read_capped(&b"abcde"[..], None, "stdin", 4).unwrap_err();
        assert_eq!(
            err.to_string(),
            "stdin is more than 4 bytes; an input has at most 4 bytes"
        );
        let err = read_capped(&b"abcde"[..], Some(10_486_317), "big.md", 4).unwrap_err();
        assert_eq!(
            err.to_string(),
            "big.md is 10486317 bytes; an input has at most 4 bytes"
        );
        let err = read_capped(&[b'x'; 3000][..], None, "stdin", 2048).unwrap_err();
        assert!(
            err.to_string().contains("at most 2 KiB (2048 bytes)"),
            "{err}"
        );
    }

    #[test]
    fn an_endless_stream_is_read_only_to_the_limit() {
        let endless = std::io::repeat(b'y');
        let err = read_capped(endless, None, "stdin", 1 << 16).unwrap_err();
        assert!(matches!(err, InputError::TooLarge { size: None, .. }));
    }

    #[test]
    fn limits_parse_with_units() {
        assert_eq!(parse_limit("16MiB"), Some(16 << 20));
        assert_eq!(parse_limit("1048576"), Some(1 << 20));
        assert_eq!(parse_limit("0"), None);
        assert_eq!(parse_limit("lots"), None);
    }
}
