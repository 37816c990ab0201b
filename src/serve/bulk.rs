//! The list page's other routes (`docs/dashboard.md#the-list`): a thread's sub-workflow
//! children for nesting them under it, and actions on many threads at once — the rows a person
//! ticked, or every thread a filter matches (as Temporal's batch operations do), each acted on
//! as `POST /api/threads/<id>/<action>` would, every one recorded with its author.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};

use super::api::{act_on, filled, listing_query, since_ms};
use super::author::by_of;
use super::error::ApiError;
use super::{App, blocking};
use crate::engine::cycle::lifecycle;
use crate::engine::thread::listing;

type Answer = Result<Json<Value>, ApiError>;

/// The actions that may be taken on many threads at once.
pub(super) const ACTIONS: [&str; 4] = ["queue", "pause", "resume", "kill"];

/// How many threads one bulk action over a filter takes at most; more are counted, not acted
/// on, and the answer says so.
pub(super) const MAX_THREADS: usize = 1000;

/// `GET /api/threads/<id>/children`: the sub-workflow children under a thread, deepest
/// included, each with its `depth` (1 for a child).
pub(super) async fn children(State(app): State<Arc<App>>, Path(id): Path<String>) -> Answer {
    blocking(&app, move |app| {
        let id = lifecycle::resolve_id(&app.root, &id).map_err(|e| ApiError::not_found(&e))?;
        let items: Vec<Value> = lifecycle::descendants(&app.store, &id)
            .into_iter()
            .map(|(depth, s)| {
                let mut row = s.to_json();
                row["depth"] = depth.into();
                row["children"] = lifecycle::family_json(&app.root, &s.id).1;
                row
            })
            .collect();
        Ok(Json(json!({"thread": id, "items": items})))
    })
    .await
}

/// The body of `POST /api/bulk/<action>`: the threads ticked, or a filter as the list's.
#[derive(Debug, Deserialize)]
pub(super) struct BulkBody {
    threads: Option<Vec<String>>,
    filter: Option<Filter>,
}

/// A filter of the list page.
#[derive(Debug, Deserialize)]
pub(super) struct Filter {
    status: Option<String>,
    workflow: Option<String>,
    q: Option<String>,
    since: Option<String>,
    parent: Option<String>,
}

/// `POST /api/bulk/<action>` with `{"threads": [...]}` or `{"filter": {...}}` → `{action,
/// matched, done, refused: [{thread, error}], more}`. A thread that refuses (already killed,
/// not paused) is named and the rest go on.
pub(super) async fn bulk(
    State(app): State<Arc<App>>,
    Path(action): Path<String>,
    headers: HeaderMap,
    Json(body): Json<BulkBody>,
) -> Answer {
    blocking(&app, move |app| {
        if !ACTIONS.contains(&action.as_str()) {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                format!("no bulk action `{action}`: {}", ACTIONS.join(", ")),
            ));
        }
        let by = by_of(&headers, None)?;
        let (ids, matched) = match (body.threads, body.filter) {
            (Some(ids), None) => {
                let n = ids.len();
                (ids, n)
            }
            (None, Some(filter)) => matching(app, filter)?,
            _ => {
                return Err(ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "give either `threads` (a list of ids) or `filter` (as the list's)",
                ));
            }
        };
        let mut done = 0;
        let mut refused = Vec::new();
        for id in ids.iter().take(MAX_THREADS) {
            let acted = lifecycle::resolve_id(&app.root, id)
                .map_err(|e| ApiError::not_found(&e))
                .and_then(|id| act_on(app, &id, &action, &by, ""));
            match acted {
                Ok(_) => done += 1,
                Err(e) => refused.push(json!({"thread": id, "error": e.message})),
            }
        }
        Ok(Json(json!({
            "action": action,
            "matched": matched,
            "done": done,
            "refused": refused,
            "more": matched.saturating_sub(MAX_THREADS),
        })))
    })
    .await
}

/// The ids a filter matches (at most [`MAX_THREADS`]), and how many it matches in all.
fn matching(app: &App, filter: Filter) -> Result<(Vec<String>, usize), ApiError> {
    let mut query = listing_query(filled(filter.status), filled(filter.workflow))?;
    query.text = filled(filter.q);
    query.since_ms = filled(filter.since).map(|s| since_ms(&s)).transpose()?;
    query.parent = match filled(filter.parent) {
        Some(p) => Some(lifecycle::resolve_id(&app.root, &p).map_err(|e| ApiError::not_found(&e))?),
        None => None,
    };
    let mut ids = Vec::new();
    let matched = listing::list(&app.store, &query, |listed| {
        if ids.len() >= MAX_THREADS {
            return false;
        }
        ids.push(listed.summary.id);
        true
    })
    .map_err(|e| ApiError::internal(&e))?;
    Ok((ids, usize::try_from(matched).unwrap_or(usize::MAX)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_a_date_a_time_or_a_duration() {
        assert_eq!(since_ms("2026-11-27").unwrap(), 1_795_737_600_000);
        assert_eq!(since_ms("2026-11-27T09:00:00Z").unwrap(), 1_795_770_000_000);
        // Two hours before the moment it was read, between these two clock reads.
        let before = crate::cas::store::now_ms();
        let two_hours = since_ms("2h").unwrap();
        let after = crate::cas::store::now_ms();
        assert!(
            (before - 7_200_000..=after - 7_200_000).contains(&two_hours),
            "{before} {two_hours} {after}"
        );
        assert!(since_ms("last tuesday").is_err());
    }
}
