//! Storage URLs (`postgres://user@host:port/db`), the password, and opening connections.
//!
//! The password comes from the URL or, when the URL has none, from `PGPASSWORD` (libpq's own
//! variable; uwf loads `<root>/.env` into its environment at start, so that is where it lives).
//!
//! Architecture Invariant: the password is never printed. [`PgConfig`]'s `Debug` and every error
//! show the URL through [`redact`], and connection errors name only the target and the user.
//!
//! TLS: this build connects without TLS. `sslmode=disable` and `sslmode=prefer` (the default,
//! which falls back to a plain connection) are accepted; `require` and the `verify-*` modes are
//! refused with a clear error instead of silently connecting in the clear. Use a Unix socket, a
//! trusted network or an SSH tunnel until TLS is added (`tokio-postgres-rustls` fits: rustls is
//! already in the tree through ureq).

use std::fmt;
use std::io::ErrorKind;
use std::time::Duration;

use postgres::config::{Host, SslMode};
use postgres::error::SqlState;
use postgres::{Client, NoTls};

use super::error::{PgError, describe};

/// How long a connection attempt may take unless the URL says otherwise (`connect_timeout`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A parsed, validated storage URL.
#[derive(Clone)]
pub struct PgConfig {
    inner: postgres::Config,
    redacted: String,
}

impl fmt::Debug for PgConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("PgConfig").field(&self.redacted).finish()
    }
}

impl PgConfig {
    /// Parses a `postgres://` or `postgresql://` URL; a missing password is looked up in
    /// `PGPASSWORD`.
    pub fn parse(url: &str) -> Result<PgConfig, PgError> {
        PgConfig::parse_with_env(url, |name| std::env::var(name).ok())
    }

    /// [`PgConfig::parse`] with the environment given as a function (for tests).
    pub fn parse_with_env(
        url: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<PgConfig, PgError> {
        let redacted = redact(url);
        let bad = |reason: String| PgError::BadUrl {
            url: redacted.clone(),
            reason,
        };
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(bad("expected a URL starting with postgres://".to_owned()));
        }
        let sslmode = url
            .split_once('?')
            .into_iter()
            .flat_map(|(_, query)| query.split('&'))
            .filter_map(|pair| pair.split_once('='))
            .find(|(key, _)| *key == "sslmode")
            .map(|(_, value)| value);
        if let Some(mode) = sslmode
            && mode != "disable"
            && mode != "prefer"
        {
            return Err(bad(format!(
                "sslmode={mode} needs TLS, which this build does not support yet (use sslmode=disable or prefer over a Unix socket or a trusted network)"
            )));
        }
        let mut inner: postgres::Config = url.parse().map_err(|e: postgres::Error| {
            // The client's parse errors can quote parts of the URL; keep only their kind.
            let reason = match std::error::Error::source(&e) {
                Some(cause) if !cause.to_string().contains(url) => cause.to_string(),
                _ => "it does not parse".to_owned(),
            };
            bad(redact_in(&reason, url))
        })?;
        if inner.get_hosts().is_empty() {
            return Err(bad("it names no host (or Unix socket directory)".to_owned()));
        }
        if inner.get_user().is_none_or(str::is_empty) {
            return Err(bad("it names no user".to_owned()));
        }
        if inner.get_password().is_none()
            && let Some(password) = env("PGPASSWORD").filter(|p| !p.is_empty())
        {
            inner.password(password);
        }
        if inner.get_connect_timeout().is_none() {
            inner.connect_timeout(CONNECT_TIMEOUT);
        }
        if sslmode.is_none() {
            inner.ssl_mode(SslMode::Prefer);
        }
        inner.application_name("uwf");
        Ok(PgConfig { inner, redacted })
    }

    /// The URL with its password replaced by `***`.
    pub fn redacted(&self) -> &str {
        &self.redacted
    }

    /// The user the connection logs in as.
    pub fn user(&self) -> &str {
        self.inner.get_user().unwrap_or("")
    }

    /// Where the server is: `host:port`, or the Unix socket's path.
    pub fn target(&self) -> String {
        let port = self.inner.get_ports().first().copied().unwrap_or(5432);
        match self.inner.get_hosts().first() {
            Some(Host::Tcp(host)) => format!("{host}:{port}"),
            Some(Host::Unix(dir)) => format!("{}/.s.PGSQL.{port}", dir.display()),
            None => format!("localhost:{port}"),
        }
    }

    /// Opens one connection, classifying the ways that fails.
    pub fn connect(&self) -> Result<Client, PgError> {
        self.inner
            .connect(NoTls)
            .map_err(|e| self.connect_error(&e))
    }

    fn connect_error(&self, error: &postgres::Error) -> PgError {
        let target = self.target();
        let user = self.user().to_owned();
        if let Some(code) = error.code()
            && (*code == SqlState::INVALID_PASSWORD
                || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION)
        {
            return PgError::WrongPassword { target, user };
        }
        let text = describe(error);
        if text.contains("password missing") {
            return PgError::PasswordMissing { target, user };
        }
        match super::error::io_kind(error) {
            Some(ErrorKind::ConnectionRefused) => PgError::ServerDown {
                target,
                reason: "connection refused (is the server running?)".to_owned(),
            },
            Some(ErrorKind::NotFound) => PgError::ServerDown {
                target,
                reason: "no such socket (is the server running?)".to_owned(),
            },
            Some(ErrorKind::TimedOut) => PgError::ServerDown {
                target,
                reason: "timed out".to_owned(),
            },
            _ => PgError::Connect {
                target,
                reason: redact_in(&text, ""),
            },
        }
    }
}

/// A storage URL with the password of its user-info and any `password=` parameter replaced by
/// `***`. Pure text work, so it also redacts URLs that do not parse.
pub fn redact(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let mut out = match base.split_once("://") {
        Some((scheme, rest)) => {
            // The user-info ends at the last `@` before the path.
            let authority_end = rest.find('/').unwrap_or(rest.len());
            let (authority, path) = rest.split_at(authority_end);
            match authority.rsplit_once('@') {
                Some((userinfo, host)) => match userinfo.split_once(':') {
                    Some((user, _)) => format!("{scheme}://{user}:***@{host}{path}"),
                    None => base.to_owned(),
                },
                None => base.to_owned(),
            }
        }
        None => base.to_owned(),
    };
    if let Some(query) = query {
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((key, _)) if key.eq_ignore_ascii_case("password") => format!("{key}=***"),
                _ => pair.to_owned(),
            })
            .collect();
        out.push('?');
        out.push_str(&pairs.join("&"));
    }
    out
}

/// `text` with any occurrence of the password of `url` replaced by `***`.
fn redact_in(text: &str, url: &str) -> String {
    let secret = url
        .split_once("://")
        .and_then(|(_, rest)| rest.split('/').next())
        .and_then(|authority| authority.rsplit_once('@'))
        .and_then(|(userinfo, _)| userinfo.split_once(':'))
        .map(|(_, password)| password)
        .filter(|p| !p.is_empty());
    match secret {
        Some(secret) => text.replace(secret, "***"),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn redact_hides_passwords_in_userinfo_and_query() {
        let cases = [
            (
                "postgres://u:s3cret@db:5432/x",
                "postgres://u:***@db:5432/x",
            ),
            ("postgres://u@db/x", "postgres://u@db/x"),
            ("postgresql://u:p@ss@db/x", "postgresql://u:***@db/x"),
            (
                "postgres://u@db/x?password=s3cret&sslmode=disable",
                "postgres://u@db/x?password=***&sslmode=disable",
            ),
            ("not a url", "not a url"),
        ];
        for (url, expected) in cases {
            assert_eq!(redact(url), expected, "{url}");
        }
    }

    #[test]
    fn parse_refuses_bad_urls_without_the_password() {
        for url in [
            "mysql://u:s3cret@db/x",
            "postgres://u:s3cret@db:notaport/x",
            "postgres://:s3cret@db/x?user=",
            "postgres://u:s3cret@db/x?sslmode=require",
        ] {
            let err = PgConfig::parse_with_env(url, no_env).expect_err(url);
            let text = err.to_string();
            assert!(matches!(err, PgError::BadUrl { .. }), "{url}: {text}");
            assert!(!text.contains("s3cret"), "{text}");
        }
    }

    #[test]
    fn password_comes_from_pgpassword_when_the_url_has_none() {
        let env = |name: &str| (name == "PGPASSWORD").then(|| "fromenv".to_owned());
        let config = PgConfig::parse_with_env("postgres://u@db:6000/x", env).expect("parses");
        assert_eq!(config.inner.get_password(), Some(&b"fromenv"[..]));
        assert_eq!(config.target(), "db:6000");
        let config = PgConfig::parse_with_env("postgres://u:inurl@db/x", env).expect("parses");
        assert_eq!(config.inner.get_password(), Some(&b"inurl"[..]));
        assert!(!format!("{config:?}").contains("inurl"));
    }

    #[test]
    fn unix_socket_targets_name_the_socket() {
        let config =
            PgConfig::parse_with_env("postgres://u@%2Ftmp%2Fpg:5433/x", no_env).expect("parses");
        assert_eq!(config.target(), "/tmp/pg/.s.PGSQL.5433");
    }
}
