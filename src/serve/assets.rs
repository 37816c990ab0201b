//! The dashboard's pages: one HTML shell for every page path (the script draws the page its path
//! names), its script and style, all compiled into the binary; the login and 404 pages.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};

use super::App;
use super::security::{COOKIE, token_path};

const SHELL: &str = include_str!("../../assets/dashboard/index.html");
const SCRIPT: &str = include_str!("../../assets/dashboard/app.js");
const STYLE: &str = include_str!("../../assets/dashboard/style.css");

/// Text made safe to put into HTML.
pub(super) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A page of its own (not drawn by the script): `body` is HTML made by the caller.
pub(super) fn page(title: &str, body: &str) -> Html<String> {
    Html(format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{} · uwf</title>\
         <link rel=\"icon\" href=\"data:,\"><link rel=\"stylesheet\" href=\"/assets/style.css\"></head><body><nav><a href=\"/\">Threads</a> \
         <a href=\"/workflows\">Workflows</a> <a href=\"/diff\">Diff</a></nav><main>{body}</main></body></html>",
        escape(title)
    ))
}

/// Every page path: the shell, whose script reads the path. Marked read-only when the server
/// is, so the script hides what would write.
pub(super) async fn shell(State(app): State<Arc<App>>) -> Response {
    let mode = if app.read_only {
        "read-only"
    } else {
        "read-write"
    };
    let html = SHELL.replace("data-mode=\"read-write\"", &format!("data-mode=\"{mode}\""));
    let mut response = Html(html).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// `/assets/<file>`: the script and the style.
pub(super) async fn file(Path(file): Path<String>) -> Response {
    let (body, kind) = match file.as_str() {
        "app.js" => (SCRIPT, "text/javascript; charset=utf-8"),
        "style.css" => (STYLE, "text/css; charset=utf-8"),
        _ => return not_found().await,
    };
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    // The binary is the version: revalidate, but cheaply.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// `/login?token=…`: sets the token's cookie and goes to the threads. A person's own token
/// logs in on any server (on a loopback one it names who acts); the shared token only on a
/// server that needs one and while no one has a personal token.
pub(super) async fn login(
    State(app): State<Arc<App>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let given = q.get("token").map(String::as_str).unwrap_or("");
    let roster = super::people::Roster::read(&app.root).unwrap_or_default();
    let person = !given.is_empty() && roster.who(given).is_some();
    let shared = app
        .token
        .as_deref()
        .is_some_and(|t| roster.is_empty() && super::people::same(t, given));
    if !person && !shared {
        if app.token.is_none() {
            return Redirect::to("/").into_response();
        }
        let whose = if roster.is_empty() {
            format!(
                "Open the login URL <code>uwf serve</code> printed; the token is in <code>{}</code> on the serving machine.",
                escape(&token_path(&app.root).display().to_string())
            )
        } else {
            "Open the login URL <code>uwf serve token add YOUR-NAME</code> printed for you."
                .to_owned()
        };
        let body = page(
            "Login",
            &format!("<h1>Wrong or missing token</h1><p>{whose}</p>"),
        );
        return (StatusCode::UNAUTHORIZED, body).into_response();
    }
    let token = given;
    let mut response = Redirect::to("/").into_response();
    if let Ok(cookie) = HeaderValue::from_str(&format!(
        "{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict"
    )) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

/// An API error as a page for a person (a permalink opened in the browser): the same status,
/// message and hints, escaped.
pub(super) fn error_page(error: super::error::ApiError) -> Response {
    let hints: String = error
        .hints
        .iter()
        .map(|h| format!("<li>{}</li>", escape(h)))
        .collect();
    let title = error.status.canonical_reason().unwrap_or("Error");
    let body = format!(
        "<h1>{}</h1><p class=\"error\" id=\"error\">{}</p>{}<p><a href=\"/\">Threads</a></p>",
        escape(title),
        escape(&error.message),
        if hints.is_empty() {
            String::new()
        } else {
            format!("<ul class=\"muted\">{hints}</ul>")
        }
    );
    (error.status, page(title, &body)).into_response()
}

/// Anything else.
pub(super) async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        page(
            "Not found",
            "<h1>Not found</h1><p><a href=\"/\">Threads</a></p>",
        ),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_leaves_no_markup() {
        assert_eq!(
            escape("<script>alert('x')</script> & \"y\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;y&quot;"
        );
    }
}
