//! Nodes over HTTP: `GET /api/nodes/<hash>` (JSON) and `GET /n/<hash>` (a permalink page), both
//! immutable, answered 304 when the browser holds the hash already (`docs/dashboard.md`).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::error::ApiError;
use super::{App, blocking};
use crate::cas::{Hash, Store, builtin};

fn parse_hash(text: &str) -> Result<Hash, ApiError> {
    text.parse::<Hash>()
        .map_err(|e| ApiError::new(StatusCode::NOT_FOUND, e.to_string()))
}

/// Immutable content: cached by browsers for good, named by its hash.
fn immutable(hash: Hash, mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=31536000, immutable"),
    );
    if let Ok(tag) = HeaderValue::from_str(&format!("\"{hash}\"")) {
        headers.insert(header::ETAG, tag);
    }
    response
}

fn not_modified(headers: &HeaderMap, hash: Hash) -> bool {
    headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains(&hash.to_string()))
}

fn node_json(store: &Store, hash: Hash) -> Result<Value, ApiError> {
    let node = store.get(hash).map_err(|e| ApiError::not_found(&e))?;
    Ok(json!({
        "hash": hash.to_string(),
        "type": node.type_hash.to_string(),
        "typeName": builtin::name_of(node.type_hash),
        "payload": node.payload,
    }))
}

/// Answers a request for node `hash`: 304 when the browser has it, else `render` of the node,
/// marked immutable either way.
async fn immutable_node(
    app: Arc<App>,
    hash: &str,
    headers: &HeaderMap,
    render: impl FnOnce(Hash, Value) -> Response,
    fail: impl FnOnce(ApiError) -> Response,
) -> Response {
    let hash = match parse_hash(hash) {
        Ok(h) => h,
        Err(e) => return fail(e),
    };
    if not_modified(headers, hash) {
        return immutable(hash, StatusCode::NOT_MODIFIED.into_response());
    }
    match blocking(&app, move |app| node_json(&app.store, hash)).await {
        Ok(v) => immutable(hash, render(hash, v)),
        Err(e) => fail(e),
    }
}

/// `GET /api/nodes/<hash>`: a node, immutable.
pub(super) async fn node(
    State(app): State<Arc<App>>,
    Path(hash): Path<String>,
    headers: HeaderMap,
) -> Response {
    immutable_node(
        app,
        &hash,
        &headers,
        |_, v| Json(v).into_response(),
        IntoResponse::into_response,
    )
    .await
}

/// `GET /n/<hash>`: a node's permalink page, immutable (`Cache-Control: immutable`, the hash as
/// its ETag). The page is made here, the node as escaped text.
pub(super) async fn node_page(
    State(app): State<Arc<App>>,
    Path(hash): Path<String>,
    headers: HeaderMap,
) -> Response {
    immutable_node(app, &hash, &headers, |hash, v| {
        let kind = v["typeName"].as_str().unwrap_or("node").to_owned();
        let text = serde_json::to_string_pretty(&v["payload"]).unwrap_or_default();
        super::assets::page(
            &format!("{kind} {hash}"),
            &format!(
                "<h1>{kind} <code>{hash}</code></h1><p>type <code>{}</code></p><pre id=\"node\">{}</pre>",
                super::assets::escape(v["type"].as_str().unwrap_or("")),
                super::assets::escape(&text)
            ),
        )
        .into_response()
    }, super::assets::error_page)
    .await
}
