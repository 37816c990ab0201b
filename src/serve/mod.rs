//! `uwf serve`: the web dashboard (`docs/dashboard.md`) — pages for threads, a thread, an answer, a
//! diff, workflows and node permalinks, over a JSON API that scripts can use too, with live streams
//! as server-sent events.
//!
//! Layering: like `fs`, a front end over `engine`. Every page and API call goes through the
//! engine's own functions (list, summary, step, answer, diff, fork); they block (files, the
//! PostgreSQL client), so handlers run them on tokio's blocking pool ([`blocking`]). The assets
//! are compiled into the binary; nothing is fetched from elsewhere.
//!
//! Architecture Invariant: every request passes [`security::guard`] first (host, token, origin,
//! read-only), and agent or model output only ever reaches the page as text (`textContent`),
//! never as HTML.

mod api;
mod assets;
mod author;
mod bulk;
pub(crate) mod error;
mod live;
mod markdown;
mod nodes;
pub(crate) mod people;
pub(crate) mod security;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};

use crate::cas::Store;
use error::ApiError;

/// How `uwf serve` was started.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub root: PathBuf,
    pub bind: SocketAddr,
    pub read_only: bool,
    /// Where the agents of threads started from the dashboard run.
    pub workdir: PathBuf,
}

/// What the handlers share.
#[derive(Debug)]
pub(crate) struct App {
    pub root: PathBuf,
    pub store: Arc<Store>,
    pub read_only: bool,
    /// Where the agents of threads started from the dashboard run.
    pub workdir: PathBuf,
    /// The token every request must carry (`None` on a loopback bind).
    pub token: Option<String>,
    /// The address actually bound (its port, when 0 was asked for).
    pub bind: SocketAddr,
    /// Becomes `true` when a stop signal arrives: live streams end on it, so that open tabs do
    /// not hold the server up.
    pub stopping: tokio::sync::watch::Receiver<bool>,
}

/// Where the server listens, as the CLI reports it.
#[derive(Debug, Clone)]
pub(crate) struct Started {
    pub url: String,
    /// The URL that logs a browser in (sets the token's cookie), when the shared token is
    /// needed.
    pub login_url: Option<String>,
    /// How many people have their own token ([`people`]); while any has, the shared token
    /// lets no one in.
    pub people: usize,
}

/// Errors starting the server.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ServeError {
    #[error("cannot listen on {bind}: {source}")]
    Bind {
        bind: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot make the token file in {}: {source}", root.display())]
    Token {
        root: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start the server's runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

impl crate::advice::Advice for ServeError {
    fn hints(&self) -> Vec<String> {
        match self {
            ServeError::Bind { .. } => vec![
                "another program may use that port: pick another with --bind 127.0.0.1:PORT (0 picks a free one)".into(),
            ],
            _ => Vec::new(),
        }
    }
}

/// Serves until Ctrl-C or SIGTERM, then returns within 2 s even with browser tabs open (their
/// live streams end on the signal); `started` is called once the port is bound.
pub(crate) fn serve(
    options: Options,
    store: Store,
    started: impl FnOnce(&Started),
) -> Result<(), ServeError> {
    let listener =
        std::net::TcpListener::bind(options.bind).map_err(|source| ServeError::Bind {
            bind: options.bind,
            source,
        })?;
    let bind = listener.local_addr().map_err(|source| ServeError::Bind {
        bind: options.bind,
        source,
    })?;
    let token = if bind.ip().is_loopback() {
        None
    } else {
        Some(
            security::token(&options.root).map_err(|source| ServeError::Token {
                root: options.root.clone(),
                source,
            })?,
        )
    };
    let shown = if bind.ip().is_unspecified() {
        SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), bind.port())
    } else {
        bind
    };
    let people = people::Roster::read(&options.root)
        .map(|r| r.people.len())
        .unwrap_or(0);
    let report = Started {
        url: format!("http://{shown}/"),
        login_url: token
            .as_ref()
            .filter(|_| people == 0)
            .map(|t| format!("http://{shown}/login?token={t}")),
        people,
    };
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let app = Arc::new(App {
        root: options.root,
        store: Arc::new(store),
        read_only: options.read_only,
        workdir: options.workdir,
        token,
        bind,
        stopping: stopping.clone(),
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(ServeError::Runtime)?;
    listener
        .set_nonblocking(true)
        .map_err(|source| ServeError::Bind { bind, source })?;
    started(&report);
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)
            .map_err(|source| ServeError::Bind { bind, source })?;
        let mut stopping = stopping;
        let server = axum::serve(listener, router(app))
            .with_graceful_shutdown(async move {
                let _ = stopping.wait_for(|s| *s).await;
            })
            .into_future();
        // On a stop signal: no new connections, live streams end, requests under way may
        // finish — for at most `GRACE`.
        let deadline = async move {
            stopped().await;
            let _ = stop.send(true);
            tokio::time::sleep(GRACE).await;
        };
        tokio::select! {
            served = server => served.map_err(|source| ServeError::Bind { bind, source }),
            () = deadline => Ok(()),
        }
    })?;
    // Whatever still runs on the blocking pool is left behind.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    Ok(())
}

/// How long requests under way may take to finish after a stop signal (live streams end at
/// once); the process is gone within 2 s of the signal.
const GRACE: std::time::Duration = std::time::Duration::from_millis(1500);

/// Resolves on Ctrl-C or SIGTERM.
async fn stopped() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
    }
}

/// Every route: pages (the one shell; the script draws the page its path names), node
/// permalinks, the API and its live streams.
fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/", get(assets::shell))
        .route("/threads/{id}", get(assets::shell))
        .route("/threads/{id}/answer", get(assets::shell))
        .route("/diff", get(assets::shell))
        .route("/workflows", get(assets::shell))
        .route("/workflows/{name}", get(assets::shell))
        .route("/login", get(assets::login))
        .route("/assets/{file}", get(assets::file))
        .route("/n/{hash}", get(nodes::node_page))
        .route("/api/threads", get(api::threads).post(api::start))
        .route("/api/threads/count", get(api::count))
        .route("/api/threads/{id}", get(api::thread))
        .route("/api/threads/{id}/steps", get(api::steps))
        .route("/api/threads/{id}/why", get(api::why))
        .route("/api/threads/{id}/question", get(api::question))
        .route("/api/threads/{id}/live", get(live::thread_live))
        .route("/api/threads/{id}/children", get(bulk::children))
        .route("/api/bulk/{action}", post(bulk::bulk))
        .route("/api/threads/{id}/{action}", post(api::act))
        .route("/api/steps/{step}/fork", post(api::fork))
        .route("/api/nodes/{hash}", get(nodes::node))
        .route("/api/diff", get(api::diff))
        .route("/api/workflows", get(api::workflows))
        .route(
            "/api/workflows/{name}",
            get(api::workflow).put(api::put_workflow),
        )
        .route("/api/events", get(live::events))
        .fallback(assets::not_found)
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            security::guard,
        ))
        .with_state(app)
}

/// Runs blocking engine code on tokio's blocking pool.
pub(crate) async fn blocking<T: Send + 'static>(
    app: &Arc<App>,
    f: impl FnOnce(&App) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let app = app.clone();
    tokio::task::spawn_blocking(move || f(&app))
        .await
        .unwrap_or_else(|e| {
            Err(ApiError::new(
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                format!("the request's worker failed: {e}"),
            ))
        })
}
