//! Who may use the dashboard (`docs/dashboard.md#security`): loopback by default; any other bind
//! needs a token: a person's own ([`super::people`]), or, while no one has one, the shared token
//! (a 0600 file in the storage root, shown once as a login URL). A request that carries a
//! person's token acts as that person, whatever it says of itself. The `Host` header
//! is checked against DNS rebinding and the `Origin` of every write against cross-site requests;
//! `--read-only` answers writes with 405; every response carries a strict CSP.
//!
//! Architecture Invariant: every request passes [`guard`] before any handler runs, so no page or
//! API call can skip these checks.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::App;
use super::error::ApiError;
use super::people::Roster;

/// The cookie that carries the token after a login.
pub(crate) const COOKIE: &str = "uwf_token";

/// The content security policy of every response: only this server's own scripts, styles,
/// images and connections; no inline script, no frames.
pub(crate) const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// The token file of `root`.
pub(crate) fn token_path(root: &Path) -> PathBuf {
    root.join("serve.token")
}

/// The token of `root`, made (random, mode 0600) on first use.
pub(crate) fn token(root: &Path) -> std::io::Result<String> {
    let path = token_path(root);
    if let Ok(text) = std::fs::read_to_string(&path) {
        let text = text.trim();
        if text.len() >= 32 {
            return Ok(text.to_owned());
        }
    }
    let token = super::people::random_token()?;
    std::fs::create_dir_all(root)?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode_0600()
        .open(&path)?;
    writeln!(file, "{token}")?;
    Ok(token)
}

trait Mode0600 {
    fn mode_0600(&mut self) -> &mut Self;
}

impl Mode0600 for std::fs::OpenOptions {
    fn mode_0600(&mut self) -> &mut Self {
        std::os::unix::fs::OpenOptionsExt::mode(self, 0o600)
    }
}

/// Whether `method` changes something.
fn is_write(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// The host names a loopback server answers to, with its port.
fn loopback_hosts(bind: SocketAddr) -> Vec<String> {
    let port = bind.port();
    vec![
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
    ]
}

/// The token a request carries: its cookie, or `Authorization: Bearer …`.
fn carried_token(headers: &HeaderMap) -> Option<String> {
    if let Some(auth) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        && let Some(token) = auth.strip_prefix("Bearer ")
    {
        return Some(token.trim().to_owned());
    }
    let cookies = headers.get(header::COOKIE)?.to_str().ok()?;
    cookies.split(';').find_map(|c| {
        let (name, value) = c.trim().split_once('=')?;
        (name == COOKIE).then(|| value.to_owned())
    })
}

use super::people::same as same_token;

/// Whether a write's `Origin` is this server's own pages at `host`: over plain HTTP, or over
/// HTTPS through a TLS-terminating proxy that forwards the browser's `Host`.
fn same_site(origin: &str, host: &str) -> bool {
    ["http://", "https://"]
        .iter()
        .any(|scheme| origin.strip_prefix(scheme) == Some(host))
}

/// The checks every request passes, and the headers every response gets.
pub(crate) async fn guard(
    State(app): State<Arc<App>>,
    mut request: Request,
    next: Next,
) -> Response {
    let mut response = match check(&app, &request) {
        Ok(person) => {
            if let Some(name) = person {
                // The token names the author: what the page says of itself does not count.
                let encoded = percent_encoding::utf8_percent_encode(
                    &name,
                    percent_encoding::NON_ALPHANUMERIC,
                )
                .to_string();
                if let Ok(value) = HeaderValue::from_str(&encoded) {
                    request.headers_mut().insert("x-uwf-by", value);
                }
            }
            next.run(request).await
        }
        Err(refusal) => refusal.into_response(),
    };
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

/// Passes `request` or says why not; the person whose token it carries, if any.
fn check(app: &App, request: &Request) -> Result<Option<String>, ApiError> {
    let headers = request.headers();
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    if app.bind.ip().is_loopback() && !loopback_hosts(app.bind).iter().any(|h| h == host) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "this server answers to 127.0.0.1:{} only, not to host `{host}`",
                app.bind.port()
            ),
        ));
    }
    let roster = Roster::read(&app.root)
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let carried = carried_token(headers);
    let person = carried
        .as_deref()
        .and_then(|c| roster.who(c))
        .map(str::to_owned);
    if let Some(token) = &app.token
        && person.is_none()
        && request.uri().path() != "/login"
    {
        let shared = roster.is_empty() && carried.is_some_and(|c| same_token(&c, token));
        if !shared {
            let mut refusal = if roster.is_empty() {
                ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "this server needs its token: open the login URL it printed when it started",
                )
            } else {
                ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "this server needs your own token: open the login URL `uwf serve token add NAME` printed for you",
                )
            };
            refusal.hints.push(if roster.is_empty() {
                format!(
                    "the token is in {} on the serving machine",
                    token_path(&app.root).display()
                )
            } else {
                "whoever runs the server gives you one with `uwf serve token add YOUR-NAME`"
                    .to_owned()
            });
            return Err(refusal);
        }
    }
    if is_write(request.method()) {
        if let Some(origin) = headers.get(header::ORIGIN).and_then(|o| o.to_str().ok())
            && !same_site(origin, host)
        {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                format!("a write from another site (origin `{origin}`) is refused"),
            ));
        }
        if app.read_only {
            return Err(ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "this server is read-only (`uwf serve --read-only`)",
            ));
        }
    }
    Ok(person)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_come_from_a_cookie_or_a_bearer_header() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=b; uwf_token=xyz"),
        );
        assert_eq!(carried_token(&h).as_deref(), Some("xyz"));
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer abc"),
        );
        assert_eq!(carried_token(&h).as_deref(), Some("abc"));
        assert!(same_token("abc", "abc"));
        assert!(!same_token("abc", "abd"));
        assert!(!same_token("abc", "ab"));
    }

    #[test]
    fn own_pages_over_http_or_https_are_the_same_site() {
        assert!(same_site("http://127.0.0.1:7420", "127.0.0.1:7420"));
        assert!(same_site("https://dash.example", "dash.example"));
        assert!(!same_site("https://evil.example", "dash.example"));
        assert!(!same_site("ftp://dash.example", "dash.example"));
        assert!(!same_site("https://dash.example.evil", "dash.example"));
        assert!(!same_site("https://dash.example", ""));
    }

    #[test]
    fn the_token_file_is_private_and_kept() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let first = token(dir.path()).unwrap();
        assert_eq!(first.len(), 48);
        assert_eq!(token(dir.path()).unwrap(), first);
        let mode = std::fs::metadata(token_path(dir.path()))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
