//! Live streams as server-sent events: a thread's log and events as they arrive
//! (`/api/threads/<id>/live`, resumable with `Last-Event-ID`, the log offset), and the changes
//! of the thread index (`/api/events`: the ids of threads that changed).
//!
//! Each stream is fed by a thread of its own that reads through the engine (blocking) and
//! waits between looks the way `uwf thread live` does: on PostgreSQL notifications, else a
//! short poll. It ends as soon as the browser goes away, and every stream ends when the server is
//! stopping (`App::stopping`), so that open tabs never hold up a Ctrl-C or SIGTERM.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::Stream;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use super::App;
use super::error::ApiError;
use crate::engine::cycle::lifecycle;
use crate::engine::storage::notify::ThreadWaker;
use crate::engine::storage::seam::Feed;
use crate::engine::thread::run_files::RunFiles;
use crate::pg::RunFileKind;

/// How often a directory store's files are looked at.
const POLL: Duration = Duration::from_millis(150);

/// The most log a stream sends at its start: the end of a long log.
const BACKLOG: u64 = 256 << 10;

/// The events of `rx` until it ends or the server is stopping.
fn stream_of(
    rx: mpsc::Receiver<Event>,
    stopping: watch::Receiver<bool>,
) -> impl Stream<Item = Result<Event, Infallible>> {
    futures_util::stream::unfold((rx, stopping), |(mut rx, mut stopping)| async move {
        if *stopping.borrow_and_update() {
            return None;
        }
        tokio::select! {
            event = rx.recv() => event.map(|event| (Ok(event), (rx, stopping))),
            // A change is the stop (or the server gone): the stream ends, so does its feeder.
            _ = stopping.changed() => None,
        }
    })
}

fn sse(app: &App, rx: mpsc::Receiver<Event>) -> Response {
    Sse::new(stream_of(rx, app.stopping.clone()))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// `GET /api/threads/<id>/live`: `log` events (text, id = the log offset after them), `event`
/// events (a line of the change feed), `thread` events (the summary after a change) and `end`
/// when the thread is done, killed or rebased.
pub(super) async fn thread_live(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    // The engine blocks (files, the PostgreSQL client): never on the runtime's own threads.
    let resolved = super::blocking(&app, move |app| {
        lifecycle::resolve_id(&app.root, &id).map_err(|e| ApiError::not_found(&e))
    })
    .await;
    let id = match resolved {
        Ok(id) => id,
        Err(e) => return e.into_response(),
    };
    let resume: Option<u64> = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let (tx, rx) = mpsc::channel(64);
    let feeder = app.clone();
    let spawned = std::thread::Builder::new()
        .name("uwf-serve-live".into())
        .spawn(move || follow_thread(&feeder, &id, resume, &tx));
    if let Err(e) = spawned {
        return ApiError::internal(&e).into_response();
    }
    sse(&app, rx)
}

fn follow_thread(app: &App, id: &str, resume: Option<u64>, tx: &mpsc::Sender<Event>) {
    let files = RunFiles::new(&app.root, id);
    let mut waker = ThreadWaker::new(&app.root, id, POLL);
    let size = files.text_stat(RunFileKind::Log).0;
    let mut offset = resume.unwrap_or(size.saturating_sub(BACKLOG));
    let mut events_at = files.text_stat(RunFileKind::Events).0;
    let mut partial: Vec<u8> = Vec::new();
    let mut last_summary = None;
    loop {
        if tx.is_closed() {
            return;
        }
        // The log since the last look, whole characters only.
        while let Ok(chunk) = files.read_text(RunFileKind::Log, offset, 64 << 10) {
            if chunk.is_empty() {
                break;
            }
            offset += chunk.len() as u64;
            partial.extend_from_slice(&chunk);
            let text = crate::engine::thread::log::whole_chars(&mut partial);
            // As a JSON string: the text exactly as written, carriage returns included (a
            // progress line rewriting itself), which SSE's own lines would turn into breaks.
            let event = Event::default()
                .event("log")
                .id((offset - partial.len() as u64).to_string())
                .data(Value::String(text).to_string());
            if tx.blocking_send(event).is_err() {
                return;
            }
        }
        if let Ok(chunk) = files.read_text(RunFileKind::Events, events_at, 1 << 20) {
            // Whole lines only.
            let end = chunk.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            events_at += end as u64;
            for line in String::from_utf8_lossy(&chunk[..end]).lines() {
                if tx
                    .blocking_send(Event::default().event("event").data(line))
                    .is_err()
                {
                    return;
                }
            }
        }
        let summary = lifecycle::summary(&app.store, id).ok();
        if let Some(s) = &summary {
            let mut json = s.to_json();
            if let Some(role) = &s.running_role {
                json["runningRole"] = role.clone().into();
            }
            if last_summary.as_ref() != Some(&json) {
                let event = Event::default().event("thread").data(json.to_string());
                if tx.blocking_send(event).is_err() {
                    return;
                }
                last_summary = Some(json);
            }
            if s.done() {
                let _ = tx.blocking_send(Event::default().event("end").data(s.status.clone()));
                return;
            }
        }
        waker.wait();
    }
}

/// `GET /api/events`: `changed` events whose data is `{"threads": [ids…]}`, for the threads
/// list to patch its rows.
pub(super) async fn events(State(app): State<Arc<App>>) -> Response {
    let (tx, rx) = mpsc::channel(64);
    let feeder = app.clone();
    let spawned = std::thread::Builder::new()
        .name("uwf-serve-events".into())
        .spawn(move || follow_index(&feeder, &tx));
    if let Err(e) = spawned {
        return ApiError::internal(&e).into_response();
    }
    sse(&app, rx)
}

fn follow_index(app: &App, tx: &mpsc::Sender<Event>) {
    let send = |ids: Vec<String>| -> bool {
        if ids.is_empty() {
            return true;
        }
        let event = Event::default()
            .event("changed")
            .data(json!({"threads": ids}).to_string());
        tx.blocking_send(event).is_ok()
    };
    let storage = crate::engine::storage::handle(&app.root).ok();
    match storage.filter(|s| s.coordination().notifies_changes()) {
        Some(storage) => {
            // Every start, head move, status change and archive names its thread.
            let mut listener = None;
            loop {
                if tx.is_closed() {
                    return;
                }
                if listener.is_none() {
                    listener = storage
                        .coordination()
                        .listen(Feed::ThreadsAndRuns)
                        .ok()
                        .flatten();
                }
                let Some(l) = listener.as_mut() else {
                    std::thread::sleep(Duration::from_secs(1));
                    continue;
                };
                match l.wait(Duration::from_secs(1)) {
                    Ok(Some(id)) => {
                        if !send(vec![id]) {
                            return;
                        }
                    }
                    Ok(None) => {}
                    Err(_) => listener = None,
                }
            }
        }
        None => {
            let mut since = crate::cas::store::now_ms();
            let mut stamps = None;
            loop {
                if tx.is_closed() {
                    return;
                }
                let now: Vec<_> = crate::engine::storage::index_db::watched_files(&app.root)
                    .iter()
                    .map(|p| {
                        std::fs::metadata(p)
                            .ok()
                            .map(|m| (m.len(), m.modified().ok()))
                    })
                    .collect();
                if stamps.as_ref() != Some(&now) {
                    stamps = Some(now);
                    if let Ok((ids, latest)) =
                        crate::engine::storage::index_db::changed_since(&app.root, since)
                    {
                        since = latest;
                        if !send(ids) {
                            return;
                        }
                    }
                }
                std::thread::sleep(POLL);
            }
        }
    }
}
