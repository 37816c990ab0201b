//! Who may use the dashboard (`docs/dashboard.md#security`): loopback by default; any other bind
//! needs the token (a 0600 file in the storage root, shown once as a login URL); the `Host` header
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

/// The cookie that carries the token after a login.
pub const COOKIE: &str = "uwf_token";

/// The content security policy of every response: only this server's own scripts, styles,
/// images and connections; no inline script, no frames.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// The token file of `root`.
pub fn token_path(root: &Path) -> PathBuf {
    root.join("serve.token")
}

/// The token of `root`, made (random, mode 0600) on first use.
pub fn token(root: &Path) -> std::io::Result<String> {
    let path = token_path(root);
    if let Ok(text) = std::fs::read_to_string(&path) {
        let text = text.trim();
        if text.len() >= 32 {
            return Ok(text.to_owned());
        }
    }
    let mut bytes = [0u8; 24];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))?;
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
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

/// Compares two tokens in time independent of where they differ.
fn same_token(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// Whether a write's `Origin` is this server's own pages at `host`: over plain HTTP, or over
/// HTTPS through a TLS-terminating proxy that forwards the browser's `Host`.
fn same_site(origin: &str, host: &str) -> bool {
    ["http://", "https://"]
        .iter()
        .any(|scheme| origin.strip_prefix(scheme) == Some(host))
}

/// The checks every request passes, and the headers every response gets.
pub async fn guard(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let mut response = match check(&app, &request) {
        Ok(()) => next.run(request).await,
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

fn check(app: &App, request: &Request) -> Result<(), ApiError> {
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
    if let Some(token) = &app.token {
        let login = request.uri().path() == "/login";
        let carried = carried_token(headers);
        if !login && !carried.is_some_and(|c| same_token(&c, token)) {
            let mut refusal = ApiError::new(
                StatusCode::UNAUTHORIZED,
                "this server needs its token: open the login URL it printed when it started",
            );
            refusal.hints.push(format!(
                "the token is in {} on the serving machine",
                token_path(&app.root).display()
            ));
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
    Ok(())
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
