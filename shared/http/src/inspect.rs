//! Read-only operational endpoints under `/_/` (JSON): a repository's states with their lock
//! holders, one state's history, the held locks, and the catalog's queries.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use gitstate_core::history::{LockListing, StateRow, VersionInfo, DEFAULT_HISTORY_LIMIT};
use gitstate_core::{AuditEntry, Catalog, Duplicate, ManagedBy, StateEntry, StatePath, StateStore};

use crate::error::ApiError;
use crate::handlers::authenticated_caller;
use crate::AppState;

/// Most versions one history request lists.
const MAX_HISTORY_LIMIT: usize = 10_000;

/// The store of the configured repository `repo`, opened with the caller's credentials.
pub(crate) async fn store_for(
    app: &AppState,
    repo: &str,
    headers: &HeaderMap,
) -> Result<Arc<dyn StateStore>, ApiError> {
    let credentials = authenticated_caller(app, headers).await?;
    Ok(app.registry.named(repo, credentials.as_ref())?)
}

/// A state path from an address segment; a bad one is a 400 naming the rule.
pub(crate) fn state_path(raw: &str) -> Result<StatePath, ApiError> {
    StatePath::parse(raw).map_err(|e| ApiError::bad_request(e.to_string()))
}

/// `?limit=N` (default [`DEFAULT_HISTORY_LIMIT`], at most [`MAX_HISTORY_LIMIT`]).
pub(crate) fn limit(query: &HashMap<String, String>) -> Result<usize, ApiError> {
    match query.get("limit") {
        None => Ok(DEFAULT_HISTORY_LIMIT),
        Some(raw) => match raw.parse::<usize>() {
            Ok(n) if (1..=MAX_HISTORY_LIMIT).contains(&n) => Ok(n),
            _ => Err(ApiError::bad_request(format!(
                "limit must be a number from 1 to {MAX_HISTORY_LIMIT}"
            ))),
        },
    }
}

/// `GET /_/states/{repo}`: every state with serial, size, last writer and lock holder.
pub async fn states(
    State(app): State<AppState>,
    Path(repo): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Vec<StateRow>>, ApiError> {
    let store = store_for(&app, &repo, &headers).await?;
    Ok(Json(app.backend.states(store.as_ref()).await?))
}

/// `GET /_/history/{repo}/{path}?limit=N`: the versions of one state, newest first.
pub async fn history(
    State(app): State<AppState>,
    Path((repo, path)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Json<Vec<VersionInfo>>, ApiError> {
    let path = state_path(&path)?;
    let limit = limit(&query)?;
    let store = store_for(&app, &repo, &headers).await?;
    Ok(Json(
        app.backend.history(store.as_ref(), &path, limit).await?,
    ))
}

/// `GET /_/locks/{repo}`: the held locks with their age.
pub async fn locks(
    State(app): State<AppState>,
    Path(repo): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Vec<LockListing>>, ApiError> {
    let store = store_for(&app, &repo, &headers).await?;
    Ok(Json(app.backend.locks(store.as_ref()).await?))
}

/// The catalog, when one is configured and the caller may read across repositories.
async fn catalog(app: &AppState, headers: &HeaderMap) -> Result<Arc<dyn Catalog>, ApiError> {
    let credentials = authenticated_caller(app, headers).await?;
    app.registry.admit_operator(credentials.as_ref())?;
    app.catalog.clone().ok_or_else(|| {
        ApiError::Message(
            StatusCode::NOT_FOUND,
            "no catalog is configured on this server (catalog { dynamodb_table = \"…\" }, --catalog-table or GITSTATE_CATALOG_TABLE)".into(),
        )
    })
}

/// `GET /_/catalog/states`: every state the catalog knows, with its lock holder.
pub async fn catalog_states(
    State(app): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<StateEntry>>, ApiError> {
    Ok(Json(catalog(&app, &headers).await?.states().await?))
}

/// `GET /_/catalog/audit/{repo}/{path}`: one state's audit trail, oldest first.
pub async fn catalog_audit(
    State(app): State<AppState>,
    Path((repo, path)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<Vec<AuditEntry>>, ApiError> {
    let path = state_path(&path)?;
    Ok(Json(
        catalog(&app, &headers)
            .await?
            .audit(&repo, path.as_str())
            .await?,
    ))
}

/// `GET /_/catalog/find?identifier=VALUE`: which states manage this identifier.
pub async fn catalog_find(
    State(app): State<AppState>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Json<Vec<ManagedBy>>, ApiError> {
    let identifier = query
        .get("identifier")
        .filter(|v| !v.is_empty())
        .ok_or_else(|| {
            ApiError::bad_request(
                "give the identifier to look for: /_/catalog/find?identifier=VALUE",
            )
        })?;
    Ok(Json(catalog(&app, &headers).await?.find(identifier).await?))
}

/// `GET /_/catalog/duplicates`: identifiers managed by more than one state.
pub async fn catalog_duplicates(
    State(app): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<Duplicate>>, ApiError> {
    Ok(Json(catalog(&app, &headers).await?.duplicates().await?))
}
