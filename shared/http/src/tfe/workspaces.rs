//! The workspace endpoints of the workspace API (DESIGN §10): read by name or id, create, the
//! settings a client may set, lock, unlock and force-unlock. Each parses, calls the core's rule
//! ([`gitstate_core::workspace::Workspaces`]) and renders.

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use gitstate_core::scope::Use;
use gitstate_core::workspace::{
    parse_tags, PageRequest, Search, Workspace, WorkspaceError, Workspaces,
};
use gitstate_core::{CatalogChange, LockFacts, LockInfo};

use super::documents::{self, Request};
use super::{document, unprocessable, who, Called, Named, TfeError};
use crate::handlers::tell_catalog_at;
use crate::AppState;

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

/// `GET /api/v2/organizations/:org/workspaces`: the workspaces the credential may read,
/// searched by `search[name]`, `search[tags]` and `search[exclude-tags]` (comma-separated), one
/// page (`page[number]`, `page[size]`) at a time.
pub(super) async fn list(
    State(app): State<AppState>,
    Path(org): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, TfeError> {
    let params: Vec<(String, String)> =
        form_urlencoded::parse(query.as_deref().unwrap_or("").as_bytes())
            .into_owned()
            .collect();
    let called = Called::of(&app, &headers).await?;
    let store = super::organization_store(&app, &called, &org)?;
    let param = |key: &str| {
        params
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let tags = |key: &str| -> Result<Vec<String>, TfeError> {
        let given = param(key).unwrap_or("");
        let names = given.split(',').map(str::trim).filter(|t| !t.is_empty());
        Ok(parse_tags(names).map_err(WorkspaceError::from)?)
    };
    let search = Search {
        name: param("search[name]")
            .filter(|n| !n.is_empty())
            .map(str::to_owned),
        tags: tags("search[tags]")?,
        exclude_tags: tags("search[exclude-tags]")?,
    };
    let page =
        PageRequest::parse(param("page[number]"), param("page[size]")).map_err(unprocessable)?;
    let listed = Workspaces::on(&app.backend, store.as_ref())
        .list(&called.authenticated.scope, &search, page)
        .await?;
    // The links keep the search; the page parameters are each link's own.
    let kept: String = params
        .iter()
        .filter(|(k, _)| k.starts_with("search["))
        .map(|(k, v)| {
            form_urlencoded::Serializer::new(String::new())
                .append_pair(k, v)
                .finish()
                + "&"
        })
        .collect();
    let base = format!("/api/v2/organizations/{org}/workspaces");
    Ok(documents::answer(
        StatusCode::OK,
        documents::workspace_list(&listed, &called.authenticated.scope, &base, &kept),
    ))
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

/// `POST /api/v2/organizations/:org/workspaces`: a workspace with a name and its tags; nothing
/// else it would have to keep (a project, a VCS repository, remote execution) is accepted.
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
    let tags = super::tags::of_create(&request)?;
    let named = Named::resolve(&app, &called, &org, name, Use::Write).await?;
    let workspace = named
        .workspaces(&app)
        .create(&named.name, tags, &who(&called))
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
    if !super::tags::of_create(&request)?.is_empty() {
        return Err(unprocessable(
            "set a workspace's tags with POST /api/v2/workspaces/:id/relationships/tags, not with its settings",
        ));
    }
    if let Some(other) = request.attributes().find(|a| *a == "name") {
        return Err(unprocessable(format!(
            "gitstate cannot rename a workspace (the attribute {other}): its name is the path of its state"
        )));
    }
    let named = Named::by_id(&app, &called, &id, Use::Write).await?;
    read(&app, &called, &named).await
}

/// Refuses the attributes and relationships of a workspace that gitstate does not keep: only
/// `name`, the tags (`tag-names`, the `tags` and key-only `tag-bindings` relationships: a create
/// keeps them, [`super::tags`]), `terraform-version` (Terraform sets it; it decides nothing with
/// local execution), `execution-mode` "local", and what changes nothing (a description) are
/// accepted.
fn settable(request: &Request) -> Result<(), TfeError> {
    match request.string("execution-mode").map_err(unprocessable)? {
        None | Some("local") => {}
        Some(_) => {
            return Err(unprocessable(
                "gitstate runs no plans: a workspace's execution-mode is local, and Terraform runs where you run it",
            ))
        }
    }
    const ACCEPTED: [&str; 6] = [
        "name",
        "tag-names",
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
    if let Some(other) = request
        .relationships()
        .find(|r| !["tags", "tag-bindings"].contains(r))
    {
        return Err(unprocessable(format!(
            "gitstate does not keep a workspace's {} (it keeps its name, its tags and its state)",
            gitstate_core::text::escape_controls(other)
        )));
    }
    Ok(())
}

/// `DELETE /api/v2/organizations/:org/workspaces/:name`: the workspace, its state included.
pub(super) async fn delete_by_name(
    State(app): State<AppState>,
    Path((org, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, TfeError> {
    delete(&app, &headers, Which::Name(&org, &name), true).await
}

/// `POST /api/v2/organizations/:org/workspaces/:name/actions/safe-delete`: the workspace,
/// refused while its state manages resources.
pub(super) async fn safe_delete_by_name(
    State(app): State<AppState>,
    Path((org, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, TfeError> {
    delete(&app, &headers, Which::Name(&org, &name), false).await
}

/// `DELETE /api/v2/workspaces/:id`.
pub(super) async fn delete_by_id(
    State(app): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, TfeError> {
    delete(&app, &headers, Which::Id(&id), true).await
}

/// `POST /api/v2/workspaces/:id/actions/safe-delete`.
pub(super) async fn safe_delete_by_id(
    State(app): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, TfeError> {
    delete(&app, &headers, Which::Id(&id), false).await
}

/// How a request names a workspace: by organization and name, or by id.
enum Which<'a> {
    Name(&'a str, &'a str),
    Id(&'a str),
}

/// Deletes the workspace (its state too when `force`): 204.
async fn delete(
    app: &AppState,
    headers: &HeaderMap,
    which: Which<'_>,
    force: bool,
) -> Result<Response, TfeError> {
    let called = &Called::of(app, headers).await?;
    let named = &match which {
        Which::Name(org, name) => Named::resolve(app, called, org, name, Use::Write).await?,
        Which::Id(id) => Named::by_id(app, called, id, Use::Write).await?,
    };
    called.not_expired()?;
    let commit = named
        .workspaces(app)
        .delete(&named.name, force, &who(called))
        .await?;
    let repository = named.store.repository().to_owned();
    tell_catalog_at(app, &repository, &named.path, who(called), move || {
        CatalogChange::Delete {
            commit: Some(commit),
        }
    });
    Ok(axum::response::IntoResponse::into_response(
        StatusCode::NO_CONTENT,
    ))
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
