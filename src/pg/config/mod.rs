//! Storage URLs (`postgres://user@host:port/db`), the password, and opening connections.
//!
//! The password comes from the URL or, when the URL has none, from `PGPASSWORD` (libpq's own
//! variable; uwf loads `<root>/.env` into its environment at start, so that is where it lives).
//!
//! Architecture Invariant: the password is never printed. [`PgConfig`]'s `Debug` and every error
//! show the URL through [`redact`], and connection errors name only the target and the user.
//!
//! TLS (rustls with the `ring` provider, as ureq uses): `sslmode` means what it means to libpq.
//! `disable` connects in the clear; `prefer` (the default) uses TLS when the server offers it and
//! falls back to a plain connection when it does not, checking no certificate (as libpq, whose
//! fallback would make a check moot); `require` insists on TLS but checks the certificate only
//! when a root certificate is given, then as `verify-ca` does; `verify-ca` checks that a trusted
//! CA signed the certificate; `verify-full` also checks that it names the host of the URL. The
//! trusted roots are the PEM file of `sslrootcert=FILE`, else of `PGSSLROOTCERT`, else Mozilla's
//! roots (webpki-roots; `sslrootcert=system` says so explicitly and, as in libpq, only goes with
//! `verify-full`). libpq's default `~/.postgresql/root.crt` is not read, client certificates
//! (`sslcert`, `sslkey`) and CRLs are not supported, and like libpq uwf ignores `sslmode` for a
//! Unix socket, which never carries TLS.

use std::fmt;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use postgres::config::{Host, SslMode};
use postgres::error::SqlState;
use postgres::{Client, NoTls};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::error::{PgError, describe};

mod tls;
use tls::*;

/// How long a connection attempt may take unless the URL says otherwise (`connect_timeout`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A parsed, validated storage URL.
#[derive(Clone)]
pub struct PgConfig {
    inner: postgres::Config,
    redacted: String,
    tls: Tls,
}

/// libpq's `sslmode`, of which the client crate knows only the first three.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SslModeArg {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslModeArg {
    fn parse(text: &str) -> Option<SslModeArg> {
        Some(match text {
            "disable" => SslModeArg::Disable,
            "prefer" => SslModeArg::Prefer,
            "require" => SslModeArg::Require,
            "verify-ca" => SslModeArg::VerifyCa,
            "verify-full" => SslModeArg::VerifyFull,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            SslModeArg::Disable => "disable",
            SslModeArg::Prefer => "prefer",
            SslModeArg::Require => "require",
            SslModeArg::VerifyCa => "verify-ca",
            SslModeArg::VerifyFull => "verify-full",
        }
    }

    /// What the client crate does before the handshake: whether it asks for TLS, and whether it
    /// may go on in the clear when the server says no.
    fn client_mode(self) -> SslMode {
        match self {
            SslModeArg::Disable => SslMode::Disable,
            SslModeArg::Prefer => SslMode::Prefer,
            SslModeArg::Require | SslModeArg::VerifyCa | SslModeArg::VerifyFull => SslMode::Require,
        }
    }
}

/// Where the CA certificates that may sign the server's certificate come from.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Roots {
    /// A PEM file (`sslrootcert=FILE` or `PGSSLROOTCERT`), read at each connection.
    File(PathBuf),
    /// Mozilla's roots as webpki-roots ships them.
    Builtin,
}

/// How the server's certificate is checked.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Check {
    /// No TLS at all.
    Plain,
    /// TLS with any certificate: `prefer`, and `require` without a root certificate.
    Unverified,
    /// The chain up to one of the roots, not the host name: `verify-ca`, and `require` given a
    /// root certificate.
    Chain(Roots),
    /// The chain and the host name: `verify-full`.
    Full(Roots),
}

/// The TLS settings of a URL.
#[derive(Clone, Debug)]
struct Tls {
    mode: SslModeArg,
    check: Check,
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
        // `sslmode` and `sslrootcert` are read here (the client crate knows neither
        // `verify-*` nor `sslrootcert`) and taken out of what the client parses.
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut sslmode = None;
        let mut rootcert = None;
        let mut rest = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("sslmode", value)) => sslmode = Some(percent_decode(value)),
                Some(("sslrootcert", value)) => rootcert = Some(percent_decode(value)),
                Some((
                    key @ ("sslcert" | "sslkey" | "sslpassword" | "sslcrl" | "sslcrldir"),
                    _,
                )) => {
                    return Err(bad(format!(
                        "{key} is not supported (uwf has no client certificates or CRLs; sslmode and sslrootcert are)"
                    )));
                }
                _ => rest.push(pair),
            }
        }
        let mode = match sslmode.as_deref() {
            None => SslModeArg::Prefer,
            Some(text) => SslModeArg::parse(text).ok_or_else(|| {
                bad(format!(
                    "sslmode={text} is not one of disable, prefer, require, verify-ca, verify-full"
                ))
            })?,
        };
        let rootcert = rootcert
            .filter(|r| !r.is_empty())
            .or_else(|| env("PGSSLROOTCERT").filter(|r| !r.is_empty()));
        let check = certificate_check(mode, rootcert).map_err(bad)?;
        let for_client = if rest.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", rest.join("&"))
        };
        let mut inner: postgres::Config = for_client.parse().map_err(|e: postgres::Error| {
            // The client's parse errors can quote parts of the URL; keep only their kind.
            let reason = match std::error::Error::source(&e) {
                Some(cause) if !cause.to_string().contains(&for_client) => cause.to_string(),
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
        // libpq ignores sslmode for Unix sockets (the server never offers TLS there).
        let all_unix = inner.get_hosts().iter().all(|h| matches!(h, Host::Unix(_)));
        let tls = if all_unix {
            Tls {
                mode: SslModeArg::Disable,
                check: Check::Plain,
            }
        } else {
            Tls { mode, check }
        };
        inner.ssl_mode(tls.mode.client_mode());
        inner.application_name("uwf");
        Ok(PgConfig {
            inner,
            redacted,
            tls,
        })
    }

    /// The URL with its password replaced by `***`.
    pub(crate) fn redacted(&self) -> &str {
        &self.redacted
    }

    /// The user the connection logs in as.
    pub(crate) fn user(&self) -> &str {
        self.inner.get_user().unwrap_or("")
    }

    /// Where the server is: `host:port`, or the Unix socket's path.
    pub(crate) fn target(&self) -> String {
        let port = self.inner.get_ports().first().copied().unwrap_or(5432);
        match self.inner.get_hosts().first() {
            Some(Host::Tcp(host)) => format!("{host}:{port}"),
            Some(Host::Unix(dir)) => format!("{}/.s.PGSQL.{port}", dir.display()),
            None => format!("localhost:{port}"),
        }
    }

    /// Opens one connection, classifying the ways that fails.
    pub fn connect(&self) -> Result<Client, PgError> {
        let result = match &self.tls.check {
            Check::Plain => self.inner.connect(NoTls),
            check => {
                let tls = self.tls_config(check)?;
                self.inner.connect(MakeRustlsConnect::new(tls))
            }
        };
        result.map_err(|e| self.connect_error(&e))
    }

    /// The rustls client configuration for `check`, reading the root certificate file if any.
    fn tls_config(&self, check: &Check) -> Result<ClientConfig, PgError> {
        let tls_error = |reason: String, hint: &'static str| PgError::Tls {
            target: self.target(),
            reason,
            hint,
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| tls_error(e.to_string(), HINT_TLS_SETTINGS))?;
        let verifier: Arc<dyn ServerCertVerifier> = match check {
            Check::Plain | Check::Unverified => Arc::new(AnyCertificate(Arc::clone(&provider))),
            Check::Chain(roots) | Check::Full(roots) => {
                let roots =
                    load_roots(roots).map_err(|reason| tls_error(reason, HINT_ROOT_CERT))?;
                let webpki = WebPkiServerVerifier::builder_with_provider(
                    Arc::new(roots),
                    Arc::clone(&provider),
                )
                .build()
                .map_err(|e| tls_error(e.to_string(), HINT_ROOT_CERT))?;
                if matches!(check, Check::Full(_)) {
                    webpki
                } else {
                    Arc::new(ChainOnly(webpki))
                }
            }
        };
        Ok(builder
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth())
    }

    /// The TLS failure of a connection attempt, if that is what it was, in one line.
    fn tls_failure(&self, error: &postgres::Error) -> Option<PgError> {
        let target = self.target();
        let mode = self.tls.mode.name();
        if describe(error).contains("server does not support TLS") {
            return Some(PgError::Tls {
                target,
                reason: format!("the server does not offer TLS, and sslmode={mode} requires it"),
                hint: HINT_SERVER_TLS,
            });
        }
        let rustls_error = rustls_error(error)?;
        let host = match self.inner.get_hosts().first() {
            Some(Host::Tcp(host)) => host.clone(),
            _ => String::new(),
        };
        let (reason, hint) = match rustls_error {
            rustls::Error::InvalidCertificate(cert) => match cert {
                CertificateError::UnknownIssuer => (
                    format!(
                        "the server's certificate is not signed by a trusted CA (sslmode={mode}; trusted roots: {})",
                        self.roots_name()
                    ),
                    HINT_ROOT_CERT,
                ),
                CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. } => {
                    let names = match cert {
                        CertificateError::NotValidForNameContext { presented, .. } => {
                            let names: Vec<&str> =
                                presented.iter().map(|p| plain_name(p)).collect();
                            format!(" (it names {})", names.join(", "))
                        }
                        _ => String::new(),
                    };
                    (
                        format!(
                            "the server's certificate is not valid for host `{host}`{names}; sslmode={mode} checks the host name"
                        ),
                        HINT_HOST_NAME,
                    )
                }
                CertificateError::Expired | CertificateError::ExpiredContext { .. } => (
                    "the server's certificate has expired".to_owned(),
                    HINT_TLS_SETTINGS,
                ),
                other => (
                    format!("the server's certificate is refused: {other:?}"),
                    HINT_TLS_SETTINGS,
                ),
            },
            other => (format!("TLS handshake failed: {other}"), HINT_TLS_SETTINGS),
        };
        Some(PgError::Tls {
            target,
            reason,
            hint,
        })
    }

    /// Where the trusted roots come from (for messages).
    fn roots_name(&self) -> String {
        match &self.tls.check {
            Check::Chain(Roots::File(path)) | Check::Full(Roots::File(path)) => {
                path.display().to_string()
            }
            _ => "Mozilla's built-in ones, as neither sslrootcert nor PGSSLROOTCERT is set"
                .to_owned(),
        }
    }

    fn connect_error(&self, error: &postgres::Error) -> PgError {
        let target = self.target();
        let user = self.user().to_owned();
        if let Some(tls) = self.tls_failure(error) {
            return tls;
        }
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
pub(crate) fn redact(url: &str) -> String {
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
            "postgres://u:s3cret@db/x?sslmode=verify-maybe",
            "postgres://u:s3cret@db/x?sslmode=require&sslrootcert=system",
            "postgres://u:s3cret@db/x?sslmode=verify-full&sslcert=%2Fc.pem",
            "postgres://u:s3cret@db/x?sslmode=verify-full&nosuch=1",
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

    /// The certificate check and the client crate's mode that `url` parses to.
    fn check_tls(url: &str, env: impl Fn(&str) -> Option<String>, check: Check, mode: SslMode) {
        let config = PgConfig::parse_with_env(url, env).expect(url);
        assert_eq!(config.tls.check, check, "{url}");
        assert_eq!(config.inner.get_ssl_mode(), mode, "{url}");
    }

    #[test]
    fn sslmode_and_sslrootcert_choose_the_certificate_check() {
        let file = |p: &str| Roots::File(PathBuf::from(p));
        let cases = [
            ("postgres://u@db/x", Check::Unverified, SslMode::Prefer),
            (
                "postgres://u@db/x?sslmode=disable",
                Check::Plain,
                SslMode::Disable,
            ),
            (
                "postgres://u@db/x?sslmode=prefer&sslrootcert=/ca",
                Check::Unverified,
                SslMode::Prefer,
            ),
            (
                "postgres://u@db/x?sslmode=require",
                Check::Unverified,
                SslMode::Require,
            ),
            (
                "postgres://u@db/x?sslmode=require&sslrootcert=/ca",
                Check::Chain(file("/ca")),
                SslMode::Require,
            ),
            (
                "postgres://u@db/x?sslmode=verify-ca",
                Check::Chain(Roots::Builtin),
                SslMode::Require,
            ),
            (
                "postgres://u@db/x?sslmode=verify-full&sslrootcert=/x",
                Check::Full(file("/x")),
                SslMode::Require,
            ),
            (
                "postgres://u@db/x?sslrootcert=%2Fetc%2Fca.pem&sslmode=verify-full&connect_timeout=3",
                Check::Full(file("/etc/ca.pem")),
                SslMode::Require,
            ),
            (
                "postgres://u@db/x?sslmode=verify-full&sslrootcert=system",
                Check::Full(Roots::Builtin),
                SslMode::Require,
            ),
            // A Unix socket never carries TLS; libpq ignores sslmode there.
            (
                "postgres://u@%2Ftmp%2Fpg/x?sslmode=verify-full",
                Check::Plain,
                SslMode::Disable,
            ),
        ];
        for (url, check, mode) in cases {
            check_tls(url, no_env, check, mode);
        }
        let env = |name: &str| (name == "PGSSLROOTCERT").then(|| "/env/ca.pem".to_owned());
        check_tls(
            "postgres://u@db/x?sslmode=verify-full",
            env,
            Check::Full(file("/env/ca.pem")),
            SslMode::Require,
        );
        check_tls(
            "postgres://u@db/x?sslmode=verify-ca&sslrootcert=/url.pem",
            env,
            Check::Chain(file("/url.pem")),
            SslMode::Require,
        );
    }

    #[test]
    fn a_bad_sslmode_names_the_modes() {
        let err = PgConfig::parse_with_env("postgres://u:pw@db/x?sslmode=verify", no_env)
            .expect_err("refused");
        let text = err.to_string();
        assert!(text.contains("verify-ca, verify-full"), "{text}");
        assert!(text.contains("u:***@db"), "{text}");
    }

    #[test]
    fn unix_socket_targets_name_the_socket() {
        let config =
            PgConfig::parse_with_env("postgres://u@%2Ftmp%2Fpg:5433/x", no_env).expect("parses");
        assert_eq!(config.target(), "/tmp/pg/.s.PGSQL.5433");
    }
}
