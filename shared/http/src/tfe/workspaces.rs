//! The workspace endpoints of the workspace API (DESIGN §10): read by name or id, create, the
//! settings a client may set, lock, unlock and force-unlock. Each parses, calls the core's rule
//! ([`gitstate_core::workspace::Workspaces`]) and renders.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use gitstate_core::scope::Use;
use gitstate_core::workspace::Workspace;
use gitstate_core::{CatalogChange, LockFacts, LockInfo};

use super::documents::{self, Request};
use super::{unprocessable, Called, Named, TfeError};
use crate::handlers::{read_body, tell_catalog_at};
use crate::AppState;

/// Largest request document accepted here (a workspace's settings, a lock's reason).
const MAX_DOCUMENT: usize = 64 * 1024;

/// The request body, at most [`MAX_DOCUMENT`] bytes.
async fn document(headers: &HeaderMap, body: Body) -> Result<bytes::Bytes, TfeError> {
    let refuse = |size: Option<u64>| {
        crate::ApiError::Message(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the request body is {} bytes, over the maximum of {MAX_DOCUMENT} bytes for this request",
                size.map_or_else(|| "more than that".to_owned(), |s| s.to_string())
            ),
        )
    };
    Ok(read_body(headers, body, MAX_DOCUMENT, refuse).await?)
}

/// The answer holding `workspace`, as `called` may use it.
fn answer(status: StatusCode, workspace: &Workspace, called: &Called) -> Response {
    documents::answer(
        status,
        documents::workspace(workspace, &called.authenticated.scope),
    )
}

/// `GET /api/v2/organizations/:org/workspaces/:name`.
pub(super) async fn read_by_name(
    State(app): State<AppState>,
    Path((org, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, TfeError> {
    let called = Called::of(&app, &headers).await?;
    let named = Named::resolve(&app, &called, &org, &name, Use::Read).await?;
    read(&app, &called, &named).await
}

/// `GET /api/v2/workspaces/:id`.
pub(super) async fn read_by_id(
    State(app): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, TfeError> {
    let called = Called::of(&app, &headers).await?;
    let named = Named::by_id(&app, &called, &id, Use::Read).await?;
    read(&app, &called, &named).await
}

async fn read(app: &AppState, called: &Called, named: &Named) -> Result<Response, TfeError> {
    let holder = called.holder().ok();
    let workspace = named
        .workspaces(app)
        .read(&named.name, holder.as_ref())
        .await?;
    Ok(answer(StatusCode::OK, &workspace, called))
}

/// `POST /api/v2/organizations/:org/workspaces`: a workspace with a name, nothing else it
/// would have to keep (tags, a project, a VCS repository, remote execution) is accepted yet.
pub(super) async fn create(
    State(app): State<AppState>,
    Path(org): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, TfeError> {
    let called = Called::of(&app, &headers).await?;
    called.not_expired()?;
    let request = Request::parse(&document(&headers, body).await?).map_err(unprocessable)?;
    let Some(name) = request.string("name").map_err(unprocessable)? else {
        return Err(unprocessable(
            "a workspace needs a name: the attribute name is missing",
        ));
    };
    settable(&request)?;
    let named = Named::resolve(&app, &called, &org, name, Use::Write).await?;
    let workspace = named
        .workspaces(&app)
        .create(&named.name, &who(&called))
        .await?;
    Ok(answer(StatusCode::CREATED, &workspace, &called))
}

/// `PATCH /api/v2/workspaces/:id`: only what changes nothing here is accepted (Terraform sets
/// the workspace's `terraform-version` after creating it; execution stays local).
pub(super) async fn update(
    State(app): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, TfeError> {
    let called = Called::of(&app, &headers).await?;
    called.not_expired()?;
    let request = Request::parse(&document(&headers, body).await?).map_err(unprocessable)?;
    settable(&request)?;
    if let Some(other) = request.attributes().find(|a| *a == "name") {
        return Err(unprocessable(format!(
            "gitstate cannot rename a workspace (the attribute {other}): its name is the path of its state"
        )));
    }
    let named = Named::by_id(&app, &called, &id, Use::Write).await?;
    read(&app, &called, &named).await
}

/// Refuses the attributes and relationships of a workspace that gitstate does not keep: only
/// `name`, `terraform-version` (Terraform sets it; it decides nothing with local execution),
/// `execution-mode` "local", and what changes nothing (an empty description) are accepted.
fn settable(request: &Request) -> Result<(), TfeError> {
    match request.string("execution-mode").map_err(unprocessable)? {
        None | Some("local") => {}
        Some(_) => {
            return Err(unprocessable(
                "gitstate runs no plans: a workspace's execution-mode is local, and Terraform runs where you run it",
            ))
        }
    }
    const ACCEPTED: [&str; 5] = [
        "name",
        "terraform-version",
        "execution-mode",
        "description",
        "source-name",
    ];
    if let Some(other) = request.attributes().find(|a| !ACCEPTED.contains(a)) {
        return Err(unprocessable(format!(
            "gitstate does not keep the workspace attribute {} (it keeps a workspace's name and its state only)",
            gitstate_core::text::escape_controls(other)
        )));
    }
    if let Some(other) = request.relationships().next() {
        return Err(unprocessable(format!(
            "gitstate does not keep a workspace's {} (tags, projects and the rest are not kept yet)",
            gitstate_core::text::escape_controls(other)
        )));
    }
    Ok(())
}

/// The name a commit message and a lock's `Who` give the caller.
fn who(called: &Called) -> String {
    let name = called.name();
    if name.is_empty() {
        "workspace API".to_owned()
    } else {
        name
    }
}

/// `POST /api/v2/workspaces/:id/actions/lock`.
pub(super) async fn lock(
    State(app): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, TfeError> {
    let called = Called::of(&app, &headers).await?;
    called.not_expired()?;
    let body = document(&headers, body).await?;
    // `{"reason": "..."}`; a body that says nothing gives no reason.
    let reason = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get("reason").and_then(|r| r.as_str()).map(str::to_owned))
        .unwrap_or_default();
    let named = Named::by_id(&app, &called, &id, Use::Write).await?;
    let holder = called.holder()?;
    let workspace = named
        .workspaces(&app)
        .lock(&named.name, &holder, &reason)
        .await?;
    if let Some(lock) = &workspace.lock {
        let facts = LockFacts::from(&LockInfo::stored(lock));
        tell_catalog_at(
            &app,
            &workspace.id.repository,
            &named.path,
            facts.who.clone(),
            move || CatalogChange::Lock(facts),
        );
    }
    Ok(answer(StatusCode::OK, &workspace, &called))
}

/// `POST /api/v2/workspaces/:id/actions/unlock`: the caller's own lock.
pub(super) async fn unlock(
    State(app): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, TfeError> {
    let called = Called::of(&app, &headers).await?;
    let named = Named::by_id(&app, &called, &id, Use::Write).await?;
    let holder = called.holder()?;
    let workspace = named.workspaces(&app).unlock(&named.name, &holder).await?;
    tell_catalog_at(
        &app,
        &workspace.id.repository,
        &named.path,
        who(&called),
        || CatalogChange::Unlock { force: false },
    );
    Ok(answer(StatusCode::OK, &workspace, &called))
}

/// `POST /api/v2/workspaces/:id/actions/force-unlock`: whatever lock is held, an http LOCK
/// included.
pub(super) async fn force_unlock(
    State(app): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, TfeError> {
    let called = Called::of(&app, &headers).await?;
    called.not_expired()?;
    let named = Named::by_id(&app, &called, &id, Use::Write).await?;
    let workspace = named
        .workspaces(&app)
        .force_unlock(&named.name, called.token())
        .await?;
    tell_catalog_at(
        &app,
        &workspace.id.repository,
        &named.path,
        who(&called),
        || CatalogChange::Unlock { force: true },
    );
    Ok(answer(StatusCode::OK, &workspace, &called))
}
