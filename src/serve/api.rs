//! The JSON API (`docs/dashboard.md`; nodes are in `nodes.rs`): each handler is a thin wrapper
//! around the engine function the CLI uses for the same thing.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::author::by_of;
use super::error::ApiError;
use super::{App, blocking};
use crate::cas::{Hash, Store};
use crate::engine::chain;
use crate::engine::config;
use crate::engine::cycle::controls;
use crate::engine::cycle::human;
use crate::engine::cycle::lifecycle;
use crate::engine::cycle::step::{self, StepOptions};
use crate::engine::thread::author;
use crate::engine::thread::cost;
use crate::engine::thread::index;
use crate::engine::thread::listing::{self, STATUSES};
use crate::engine::thread::render;
use crate::engine::thread::view::ThreadView;
use crate::engine::workflow::moderator::Moderator;
use crate::engine::workflow::registry::{self, Registered};
use crate::engine::workflow::{self, Definition, Workflow};

type Answer = Result<Json<Value>, ApiError>;

/// Query of `GET /api/threads`.
#[derive(Debug, Deserialize)]
pub(super) struct ListParams {
    status: Option<String>,
    parent: Option<String>,
    workflow: Option<String>,
    q: Option<String>,
    /// Only threads started since: a date (`2026-11-27`, midnight UTC), a time, or a duration
    /// ago (`2h`).
    since: Option<String>,
    /// `1`: children of sub-workflows among the rest (else they are listed under their parent).
    children: Option<String>,
    cursor: Option<String>,
    limit: Option<usize>,
}

pub(super) fn filled(text: Option<String>) -> Option<String> {
    text.map(|t| t.trim().to_owned()).filter(|t| !t.is_empty())
}

/// `since` as ms since the epoch ([`listing::since_ms`]); a bad one is a 422.
pub(super) fn since_ms(text: &str) -> Result<u64, ApiError> {
    listing::since_ms(text).map_err(|e| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, e))
}

/// The start prompt of the thread at `head`, cut to `max` characters.
fn prompt_of(store: &Store, head: Hash, max: usize) -> String {
    let prompt = chain::start_of(store, head)
        .map(|s| s.prompt)
        .unwrap_or_default();
    if prompt.chars().count() > max {
        let cut: String = prompt.chars().take(max).collect();
        format!("{cut}…")
    } else {
        prompt
    }
}

pub(super) fn listing_query(
    status: Option<String>,
    workflow: Option<String>,
) -> Result<listing::Query, ApiError> {
    if let Some(s) = &status
        && !STATUSES.contains(&s.as_str())
    {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("unknown status `{s}`: one of {}", STATUSES.join(", ")),
        ));
    }
    Ok(listing::Query {
        all: true,
        workflow,
        status,
        since_ms: None,
        before: None,
        parent: None,
        top_level: false,
        text: None,
        usage: false,
    })
}

/// `GET /api/threads`: a page of threads, newest first → `{items, next}`.
pub(super) async fn threads(State(app): State<Arc<App>>, Query(p): Query<ListParams>) -> Answer {
    blocking(&app, move |app| {
        let limit = p.limit.unwrap_or(50).clamp(1, 200);
        let mut query = listing_query(filled(p.status), filled(p.workflow))?;
        query.before = filled(p.cursor).map(|c| c.to_ascii_uppercase());
        query.parent = match filled(p.parent) {
            Some(parent) => Some(resolve(app, &parent)?),
            None => None,
        };
        // The index finds the matches among every thread (`docs/dashboard.md#search`).
        query.text = filled(p.q);
        query.since_ms = filled(p.since).map(|s| since_ms(&s)).transpose()?;
        // Children are shown under their parent, unless asked for among the rest (or searched).
        query.top_level = query.parent.is_none()
            && query.text.is_none()
            && filled(p.children).is_none_or(|c| c != "1");
        let mut items = Vec::new();
        let (mut last, mut more) = (None::<String>, false);
        listing::list_page(&app.store, &query, |listed| {
            if items.len() >= limit {
                more = true;
                return false;
            }
            let s = &listed.summary;
            last = Some(s.id.clone());
            let prompt = prompt_of(&app.store, s.head, 200);
            let mut row = s.to_json();
            row["updatedAt"] = listed.updated_ms.into();
            row["prompt"] = prompt.into();
            if let Some(role) = &s.running_role {
                row["runningRole"] = role.clone().into();
            }
            row["children"] = lifecycle::family_json(&app.root, &s.id).1;
            items.push(row);
            true
        })
        .map_err(|e| ApiError::internal(&e))?;
        Ok(Json(
            json!({"items": items, "next": if more { last } else { None }}),
        ))
    })
    .await
}

/// Query of `GET /api/threads/count`.
#[derive(Debug, Deserialize)]
pub(super) struct CountParams {
    status: Option<String>,
    workflow: Option<String>,
}

/// `GET /api/threads/count?status=awaiting`: how many threads match.
pub(super) async fn count(State(app): State<Arc<App>>, Query(p): Query<CountParams>) -> Answer {
    blocking(&app, move |app| {
        let query = listing_query(filled(p.status), filled(p.workflow))?;
        let n = listing::list(&app.store, &query, |_| false).map_err(|e| ApiError::internal(&e))?;
        Ok(Json(json!({"count": n})))
    })
    .await
}

fn resolve(app: &App, id: &str) -> Result<String, ApiError> {
    lifecycle::resolve_id(&app.root, id).map_err(|e| ApiError::not_found(&e))
}

/// The thread at its head, active or archived.
fn view_of(app: &App, id: &str) -> Result<ThreadView, ApiError> {
    let summary = lifecycle::summary(&app.store, id).map_err(|e| ApiError::internal(&e))?;
    ThreadView::at(&app.store, id, summary.head).map_err(|e| ApiError::internal(&e))
}

/// The roles, transitions and condition expressions of a workflow, for drawing its graph.
fn graph_json(w: &Workflow) -> Value {
    let edges: Vec<Value> = w
        .graph
        .iter()
        .flat_map(|(from, ts)| {
            ts.iter()
                .map(move |t| json!({"from": from, "to": t.role, "condition": t.condition}))
        })
        .collect();
    let conditions: serde_json::Map<String, Value> = w
        .conditions
        .iter()
        .map(|(name, c)| (name.clone(), c.expression.clone().into()))
        .collect();
    json!({"roles": w.roles.keys().collect::<Vec<_>>(), "edges": edges, "conditions": conditions})
}

/// `GET /api/threads/<id>`: the thread as `thread show` reports it, with its prompt, lineage,
/// the roles its steps took, and its workflow's graph.
pub(super) async fn thread(State(app): State<Arc<App>>, Path(id): Path<String>) -> Answer {
    blocking(&app, move |app| {
        let id = resolve(app, &id)?;
        let summary = lifecycle::summary(&app.store, &id).map_err(|e| ApiError::internal(&e))?;
        let view =
            ThreadView::at(&app.store, &id, summary.head).map_err(|e| ApiError::internal(&e))?;
        let mut json = summary.to_json();
        let (parent, children) = lifecycle::family_json(&app.root, &id);
        json["parent"] = parent;
        json["children"] = children;
        crate::engine::cycle::rebase::show(&app.root, &summary, &mut json);
        author::show(&app.store, &id, summary.head, &mut json);
        // Who did what, the last hundred acts, oldest first.
        let acts = author::acts(&crate::engine::thread::run_files::RunFiles::new(
            app.store.root(),
            &id,
        ));
        let skip = acts.len().saturating_sub(100);
        json["acts"] = acts.iter().skip(skip).map(author::Act::to_json).collect();
        json["prompt"] = view.chain.start.prompt.clone().into();
        json["workflowHash"] = view.workflow_hash.to_string().into();
        json["path"] = view
            .chain
            .steps
            .iter()
            .map(|s| s.role.clone())
            .collect::<Vec<_>>()
            .into();
        json["graph"] = graph_json(&view.workflow);
        // What it spent (`cost`, `childrenCost`) and its `budget` (`docs/LLM.md`).
        let config = crate::engine::config::load(&app.root)
            .map(|l| l.config)
            .unwrap_or_default();
        let cost = cost::show_json(&app.store, &id, summary.head, &summary.workflow, &config);
        if let (Ok(Value::Object(cost)), Some(json)) = (cost, json.as_object_mut()) {
            json.extend(cost);
        }
        if let Some(role) = &summary.running_role {
            json["runningRole"] = role.clone().into();
        }
        let origin = crate::engine::thread::forks::origin_of(&app.root, &id)
            .ok()
            .flatten();
        json["origin"] = origin.map_or(
            Value::Null,
            |f| json!({"thread": f.from, "step": f.step.to_string()}),
        );
        Ok(Json(json))
    })
    .await
}

/// `GET /api/threads/<id>/steps`: every step with its agent, time, output, its own duration
/// (`durationMs`, from its detail node; `null` when that does not say) and the time since the
/// previous step (or the start) was written (`sincePreviousMs`, which includes any waiting).
pub(super) async fn steps(State(app): State<Arc<App>>, Path(id): Path<String>) -> Answer {
    blocking(&app, move |app| {
        let id = resolve(app, &id)?;
        let view = view_of(app, &id)?;
        let mut before = view.chain.start_timestamp;
        let steps: Vec<Value> = view
            .chain
            .steps
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let since_previous = s.timestamp.saturating_sub(before);
                before = s.timestamp;
                // The step's own time, as its agent's run recorded it in the detail node.
                let detail = app.store.get_payload(s.detail).ok();
                let took = detail
                    .as_ref()
                    .and_then(|detail| detail.get("durationMs").and_then(Value::as_u64));
                // The tokens it spent, as its agent recorded them (`docs/LLM.md`).
                let tokens = detail
                    .as_ref()
                    .and_then(cost::Tokens::from_detail)
                    .map(|t| t.to_json());
                // The Markdown the agent wrote after its frontmatter, as text and as cleaned
                // HTML; the output also as YAML, where long strings read as blocks of text.
                let body = render::body_of(s.detail, |h| app.store.get_payload(h).ok())
                    .filter(|b| !b.trim().is_empty());
                let body_html = body.as_deref().map(super::markdown::to_html);
                let output = s.output();
                json!({
                    "index": i + 1,
                    "hash": s.hash.to_string(),
                    "role": s.role,
                    "agent": s.agent,
                    "at": s.timestamp,
                    "durationMs": took,
                    "tokens": tokens,
                    "sincePreviousMs": since_previous,
                    "outputYaml": render::output_yaml(&output),
                    "output": output,
                    "body": body,
                    "bodyHtml": body_html,
                    "error": s.error(),
                })
            })
            .collect();
        Ok(Json(json!({"thread": id, "steps": steps})))
    })
    .await
}

/// `GET /api/threads/<id>/why`: the moderator's trace for the next transition, as `thread why`.
pub(super) async fn why(State(app): State<Arc<App>>, Path(id): Path<String>) -> Answer {
    blocking(&app, move |app| {
        let id = resolve(app, &id)?;
        let view = view_of(app, &id)?;
        let context = view.chain.context();
        let position = crate::engine::workflow::moderator::position(&context).to_owned();
        let moderator =
            Moderator::new(view.workflow.clone()).map_err(|e| ApiError::internal(&e))?;
        let (trace, decision) = moderator
            .explain(&context)
            .map_err(|e| ApiError::internal(&e))?;
        let tried: Vec<Value> = trace.iter().map(|t| t.to_json()).collect();
        let (next, error) = match decision {
            Ok(next) => (Some(next), None),
            Err(e) => (None, Some(crate::advice::with_hints(&e))),
        };
        Ok(Json(
            json!({"position": position, "trace": tried, "next": next, "error": error}),
        ))
    })
    .await
}

/// `GET /api/threads/<id>/question`: what an awaiting thread asks, and the JSON Schema of the
/// answer.
pub(super) async fn question(State(app): State<Arc<App>>, Path(id): Path<String>) -> Answer {
    blocking(&app, move |app| {
        let id = resolve(app, &id)?;
        let q = human::question(&app.store, &id).map_err(|e| ApiError::refused(&e))?;
        // The role and the task, rendered, for the page; how to answer from a terminal apart.
        let at = q
            .prompt
            .find(crate::engine::agent::question::HOW_TO_ANSWER)
            .unwrap_or(q.prompt.len());
        let (asks, how) = q.prompt.split_at(at);
        let view = ThreadView::load(&app.store, &id).map_err(|e| ApiError::internal(&e))?;
        let schema = view
            .role_schema(&q.role)
            .ok()
            .and_then(|h| app.store.get_payload(h).ok())
            .unwrap_or(Value::Null);
        Ok(Json(
            json!({"thread": id, "role": q.role, "prompt": q.prompt, "schema": schema, "fields": q.fields,
                   "asksHtml": super::markdown::to_html(asks), "howToAnswer": how}),
        ))
    })
    .await
}

/// `POST /api/threads`: starts a thread → `{"thread", "workflow"}`.
pub(super) async fn start(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let result = blocking(&app, move |app| {
        let by = by_of(&headers, Some(&body))?;
        let workflow = body["workflow"].as_str().unwrap_or_default().to_owned();
        let prompt = body["prompt"].as_str().unwrap_or_default().to_owned();
        if workflow.is_empty() || prompt.trim().is_empty() {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "a thread needs a workflow and a prompt",
            ));
        }
        let loaded = config::load(&app.root).ok();
        let config = loaded.as_ref().map(|l| &l.config);
        let (workflow, id) = lifecycle::start_in(
            &app.store,
            &workflow,
            &prompt,
            (&app.workdir, config),
            Some(&by),
        )
        .map_err(|e| ApiError::refused(&e))?;
        if body["queue"].as_bool() == Some(true) {
            index::queue(&app.root, &id).map_err(|e| ApiError::internal(&e))?;
        }
        Ok(json!({"thread": id, "workflow": workflow}))
    })
    .await;
    match result {
        Ok(v) => (StatusCode::CREATED, Json(v)).into_response(),
        Err(e) => e.into_response(),
    }
}

fn step_options(by: &str) -> StepOptions {
    StepOptions {
        agent: None,
        passthrough: false,
        from_queue: false,
        by: Some(by.to_owned()),
    }
}

/// `POST /api/threads/<id>/{step,run,queue,kill,answer}`, as the `X-Uwf-By` header names (else
/// `dashboard`).
pub(super) async fn act(
    State(app): State<Arc<App>>,
    Path((id, action)): Path<(String, String)>,
    headers: HeaderMap,
    body: String,
) -> Answer {
    blocking(&app, move |app| {
        let by = by_of(&headers, None)?;
        let id = resolve(app, &id)?;
        act_on(app, &id, &action, &by, &body).map(Json)
    })
    .await
}

/// One action on one thread, as `POST /api/threads/<id>/<action>` and the bulk actions do it.
pub(super) fn act_on(
    app: &App,
    id: &str,
    action: &str,
    by: &str,
    body: &str,
) -> Result<Value, ApiError> {
    let (id, by) = (id.to_owned(), by.to_owned());
    {
        let loaded = || config::load(&app.root).map_err(|e| ApiError::refused(&e));
        let value = match action {
            "step" => step::step(&app.store, &loaded()?, &id, &step_options(&by))
                .map_err(|e| ApiError::refused(&e))?
                .to_json(),
            "run" => {
                let config = loaded()?;
                let store = app.store.clone();
                let thread = id.clone();
                // A run may take long: it goes on after the answer, one warm step after another;
                // the page follows it live.
                std::thread::Builder::new()
                    .name("uwf-serve-run".into())
                    .spawn(move || {
                        let mut warm = step::Warm::default();
                        for _ in 0..100 {
                            match step::step_warm(
                                &store,
                                &config,
                                &thread,
                                &step_options(&by),
                                &mut warm,
                            ) {
                                Ok(s) if !s.done && !s.awaiting => {}
                                _ => break,
                            }
                        }
                    })
                    .map_err(|e| ApiError::internal(&e))?;
                json!({"thread": id, "running": true})
            }
            "queue" => {
                index::queue(&app.root, &id).map_err(|e| ApiError::refused(&e))?;
                json!({"thread": id, "queued": true})
            }
            "kill" => {
                let head = lifecycle::kill(&app.store, &id, Some(&by))
                    .map_err(|e| ApiError::refused(&e))?;
                json!({"thread": id, "head": head.to_string(), "status": "killed"})
            }
            "pause" | "resume" => {
                let paused = action == "pause";
                controls::set_paused(&app.store, &id, paused, Some(&by))
                    .map_err(|e| ApiError::refused(&e))?;
                json!({"thread": id, "paused": paused})
            }
            "answer" => {
                let config = loaded()?;
                human::answer(&app.store, &config.config, &id, body, Some(&by))
                    .map_err(|e| ApiError::refused(&e))?
                    .to_json()
            }
            other => {
                return Err(ApiError::new(
                    StatusCode::NOT_FOUND,
                    format!("no action `{other}`: step, run, queue, kill, pause, resume or answer"),
                ));
            }
        };
        Ok(value)
    }
}

/// `POST /api/steps/<ref>/fork`: a new thread from a step → `{"thread", "workflow", "head"}`.
pub(super) async fn fork(
    State(app): State<Arc<App>>,
    Path(step): Path<String>,
    headers: HeaderMap,
) -> Answer {
    blocking(&app, move |app| {
        let by = by_of(&headers, None)?;
        let from =
            lifecycle::resolve_step(&app.store, &step).map_err(|e| ApiError::not_found(&e))?;
        let (workflow, id, head) =
            lifecycle::fork(&app.store, from, Some(&by)).map_err(|e| ApiError::refused(&e))?;
        Ok(Json(
            json!({"thread": id, "workflow": workflow, "head": head.to_string()}),
        ))
    })
    .await
}

/// Query of `GET /api/diff`.
#[derive(Debug, Deserialize)]
pub(super) struct DiffParams {
    a: String,
    b: String,
}

/// `GET /api/diff?a=<ref>&b=<ref>`: the unified diff of two steps, as `uwf thread diff`.
pub(super) async fn diff(State(app): State<Arc<App>>, Query(p): Query<DiffParams>) -> Answer {
    blocking(&app, move |app| {
        let a = lifecycle::resolve_step(&app.store, &p.a).map_err(|e| ApiError::not_found(&e))?;
        let b = lifecycle::resolve_step(&app.store, &p.b).map_err(|e| ApiError::not_found(&e))?;
        let diff = render::step_diff(&app.store, a, b).map_err(|e| ApiError::refused(&e))?;
        Ok(Json(
            json!({"a": a.to_string(), "b": b.to_string(), "diff": diff}),
        ))
    })
    .await
}

/// What the threads of workflow `name` spent (the newest page of them), or null.
fn workflow_cost(app: &App, name: &str) -> Value {
    let prices = crate::engine::config::load(&app.root)
        .map(|l| l.config.prices)
        .unwrap_or_default();
    listing::workflow_spent(&app.store, name, &prices, listing::WORKFLOW_SPENT_PAGE)
        .map(|w| w.to_json())
        .unwrap_or(Value::Null)
}

/// `GET /api/workflows`: every registered workflow, with what its threads spent.
pub(super) async fn workflows(State(app): State<Arc<App>>) -> Answer {
    blocking(&app, move |app| {
        let list = registry::list(&app.root).map_err(|e| ApiError::internal(&e))?;
        let items: Vec<Value> = list
            .iter()
            .map(|(name, e)| {
                json!({"name": name, "hash": e.hash.to_string(), "registeredAt": e.registered_at,
                       "versions": e.history.len() + 1, "cost": workflow_cost(app, name)})
            })
            .collect();
        Ok(Json(json!({"items": items})))
    })
    .await
}

/// `GET /api/workflows/<name>`: its YAML as saved, graph, versions and what its threads spent.
pub(super) async fn workflow(State(app): State<Arc<App>>, Path(name): Path<String>) -> Answer {
    blocking(&app, move |app| {
        let entry = registry::entry(&app.root, &name).map_err(|e| ApiError::not_found(&e))?;
        let yaml = match registry::source_text(&app.store, entry.hash) {
            Some(text) => text,
            None => Definition::load(&app.store, entry.hash)
                .map_err(|e| ApiError::internal(&e))?
                .to_yaml(),
        };
        let w = Workflow::load(&app.store, entry.hash).map_err(|e| ApiError::internal(&e))?;
        let mut versions =
            vec![json!({"hash": entry.hash.to_string(), "registeredAt": entry.registered_at})];
        versions.extend(
            entry
                .history
                .iter()
                .rev()
                .map(|v| json!({"hash": v.hash.to_string(), "registeredAt": v.registered_at})),
        );
        Ok(Json(
            json!({"name": name, "hash": entry.hash.to_string(), "yaml": yaml,
                       "graph": graph_json(&w), "versions": versions,
                       "cost": workflow_cost(app, &name)}),
        ))
    })
    .await
}

/// `PUT /api/workflows/<name>` with the YAML as the body: checks and registers it, as
/// `uwf workflow put`.
pub(super) async fn put_workflow(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
    body: String,
) -> Answer {
    blocking(&app, move |app| {
        if body.len() > workflow::MAX_FILE_BYTES {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                workflow::too_large(Some(body.len() as u64)).to_string(),
            ));
        }
        let checked = workflow::parse_bytes(body.as_bytes()).map_err(|problems| {
            ApiError::refused(&workflow::WorkflowError::Invalid { problems })
        })?;
        let found = checked.definition.workflow.name.clone();
        if found != name {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("the YAML names workflow `{found}`, not `{name}`"),
            ));
        }
        let _pin = app.store.pin().map_err(|e| ApiError::internal(&e))?;
        let hash = checked
            .definition
            .store(&app.store)
            .map_err(|e| ApiError::refused(&e))?;
        let source =
            registry::store_source(&app.store, &body).map_err(|e| ApiError::internal(&e))?;
        let status = registry::register_source(
            &app.root,
            &name,
            hash,
            Some(source),
            crate::cas::store::now_ms(),
        )
        .map_err(|e| ApiError::internal(&e))?;
        let status = match status {
            Registered::New => "new",
            Registered::Updated { .. } => "updated",
            Registered::Unchanged => "unchanged",
        };
        Ok(Json(
            json!({"name": name, "hash": hash.to_string(), "status": status}),
        ))
    })
    .await
}
