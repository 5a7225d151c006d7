//! The tags of the workspace API (DESIGN §10, "Tags"): what a request names as tags (a create's
//! `tags` relationship, its `tag-names` attribute, key-only tag bindings), and the endpoints of
//! a workspace's tags, `GET`, `POST` and `DELETE /api/v2/workspaces/:id/relationships/tags`.
//! The core keeps them in the workspace's record.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use gitstate_core::scope::Use;
use gitstate_core::workspace::{parse_tags, WorkspaceError};
use serde_json::Value;

use super::documents::{self, Request};
use super::{document, unprocessable, who, Called, Named, TfeError};
use crate::AppState;

/// The name of one tag item: `{"type": "tags", "attributes": {"name": …}}`, or `{"id":
/// "tag-…"}` (a tag's id is `tag-` and its name).
fn item_name(item: &Value) -> Result<&str, TfeError> {
    let named = item
        .get("attributes")
        .and_then(|a| a.get("name"))
        .and_then(Value::as_str);
    let by_id = item
        .get("id")
        .and_then(Value::as_str)
        .and_then(|id| id.strip_prefix("tag-"));
    named.or(by_id).ok_or_else(|| {
        unprocessable("a tag must be given as {\"type\": \"tags\", \"attributes\": {\"name\": …}}")
    })
}

/// The tags a create names: the `tags` relationship, the `tag-names` attribute, and tag
/// bindings without values (a binding with a value is a key/value tag, which is not kept).
pub(super) fn of_create(request: &Request) -> Result<Vec<String>, TfeError> {
    let mut names: Vec<String> = Vec::new();
    for item in request.relationship_items("tags") {
        names.push(item_name(item)?.to_owned());
    }
    if let Some(value) = request.attribute("tag-names") {
        let Some(list) = value.as_array() else {
            return Err(unprocessable(
                "the attribute tag-names must be a list of strings",
            ));
        };
        for tag in list {
            let Some(tag) = tag.as_str() else {
                return Err(unprocessable(
                    "the attribute tag-names must be a list of strings",
                ));
            };
            names.push(tag.to_owned());
        }
    }
    for binding in request.relationship_items("tag-bindings") {
        names.push(binding_key(binding)?.to_owned());
    }
    Ok(parse_tags(names.iter().map(String::as_str)).map_err(WorkspaceError::from)?)
}

/// The key of a tag binding without a value.
fn binding_key(binding: &Value) -> Result<&str, TfeError> {
    let attributes = binding.get("attributes");
    let value = attributes
        .and_then(|a| a.get("value"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if !value.is_empty() {
        return Err(unprocessable(
            "gitstate keeps tags as names, not key/value tags: write the cloud block's tags as a list (tags = [\"app\"])",
        ));
    }
    attributes
        .and_then(|a| a.get("key"))
        .and_then(Value::as_str)
        .ok_or_else(|| unprocessable("a tag binding must have a key"))
}

/// The tags a `…/relationships/tags` request names: `{"data": [tag, …]}`.
async fn of_request(headers: &HeaderMap, body: Body) -> Result<Vec<String>, TfeError> {
    let body = document(headers, body).await?;
    let parsed: Value = serde_json::from_slice(&body).map_err(|e| {
        unprocessable(format!(
            "the request body is not a JSON:API document with a list of tags: {e}"
        ))
    })?;
    let Some(items) = parsed.get("data").and_then(Value::as_array) else {
        return Err(unprocessable(
            "the request body must hold the tags as a list in data",
        ));
    };
    let names = items.iter().map(item_name).collect::<Result<Vec<_>, _>>()?;
    Ok(parse_tags(names).map_err(WorkspaceError::from)?)
}

/// `GET /api/v2/workspaces/:id/relationships/tags`.
pub(super) async fn list(
    State(app): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, TfeError> {
    let called = Called::of(&app, &headers).await?;
    let named = Named::by_id(&app, &called, &id, Use::Read).await?;
    let workspace = named.workspaces(&app).read(&named.name, None).await?;
    let tags = workspace.record.map(|r| r.tags).unwrap_or_default();
    Ok(documents::answer(StatusCode::OK, documents::tags(&tags)))
}

/// `POST /api/v2/workspaces/:id/relationships/tags`: adds the tags (204).
pub(super) async fn add(
    State(app): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, TfeError> {
    change(app, id, headers, body, true).await
}

/// `DELETE /api/v2/workspaces/:id/relationships/tags`: removes the tags (204).
pub(super) async fn remove(
    State(app): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, TfeError> {
    change(app, id, headers, body, false).await
}

async fn change(
    app: AppState,
    id: String,
    headers: HeaderMap,
    body: Body,
    add: bool,
) -> Result<Response, TfeError> {
    let called = Called::of(&app, &headers).await?;
    called.not_expired()?;
    let named = Named::by_id(&app, &called, &id, Use::Write).await?;
    let tags = of_request(&headers, body).await?;
    let (added, removed) = match add {
        true => (tags, Vec::new()),
        false => (Vec::new(), tags),
    };
    named
        .workspaces(&app)
        .tag(&named.name, &added, &removed, &who(&called))
        .await?;
    Ok(axum::response::IntoResponse::into_response(
        StatusCode::NO_CONTENT,
    ))
}
