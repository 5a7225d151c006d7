//! Read-only operational endpoints under `/_/` (JSON): a repository's states with their lock
//! holders, one state's history, the held locks, and the catalog's queries.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use gitstate_core::history::{LockListing, VersionInfo, DEFAULT_HISTORY_LIMIT};
use gitstate_core::links::{Links, Order, StateRef};
use gitstate_core::{AuditEntry, Catalog, Duplicate, ListQuery, ManagedBy, StatePath, StateStore};

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
    limit_within(query, DEFAULT_HISTORY_LIMIT, MAX_HISTORY_LIMIT)
}

/// `?limit=N`, from 1 to `max` (`default` when absent).
fn limit_within(
    query: &HashMap<String, String>,
    default: usize,
    max: usize,
) -> Result<usize, ApiError> {
    match query.get("limit") {
        None => Ok(default),
        Some(raw) => match raw.parse::<usize>() {
            Ok(n) if (1..=max).contains(&n) => Ok(n),
            _ => Err(ApiError::bad_request(format!(
                "limit must be a number from 1 to {max}"
            ))),
        },
    }
}

/// States one page of `/_/states` lists unless `limit` says otherwise.
pub const DEFAULT_STATES_PAGE: usize = 1_000;
/// Most states one page of `/_/states` lists.
const MAX_STATES_PAGE: usize = 10_000;
/// Longest `prefix` or `after` accepted (longer than any state path).
const MAX_LISTING_TEXT: usize = 1_024;

/// The listing query of `?prefix=P&after=CURSOR&limit=N` (`default_limit` when absent).
pub(crate) fn list_query(
    query: &HashMap<String, String>,
    default_limit: usize,
) -> Result<ListQuery, ApiError> {
    let text = |key: &str| -> Result<Option<String>, ApiError> {
        match query.get(key) {
            Some(value) if value.len() > MAX_LISTING_TEXT => Err(ApiError::bad_request(format!(
                "{key} must be at most {MAX_LISTING_TEXT} bytes"
            ))),
            value => Ok(value.cloned()),
        }
    };
    Ok(ListQuery {
        prefix: text("prefix")?.unwrap_or_default(),
        after: text("after")?.filter(|a| !a.is_empty()),
        limit: limit_within(query, default_limit, MAX_STATES_PAGE)?,
    })
}

/// `?prefix=…&after=…&limit=…` of `query`, URL-encoded, for a link to another page.
pub(crate) fn query_string(query: &ListQuery, after: &str) -> String {
    let mut out = form_urlencoded::Serializer::new(String::new());
    if !query.prefix.is_empty() {
        out.append_pair("prefix", &query.prefix);
    }
    out.append_pair("after", after);
    out.append_pair("limit", &query.limit.to_string());
    out.finish()
}

/// `GET /_/states/{repo}?prefix=P&after=CURSOR&limit=N`: one page of the states (at most
/// [`DEFAULT_STATES_PAGE`] unless `limit` says otherwise), in path order, with serial, size,
/// last writer and lock holder. `X-Total-Count` gives the states under the prefix; `Link`
/// with `rel="next"` the next page, when one follows.
pub async fn states(
    State(app): State<AppState>,
    Path(repo): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let query = list_query(&query, DEFAULT_STATES_PAGE)?;
    let store = store_for(&app, &repo, &headers).await?;
    let page = app.backend.states(store.as_ref(), &query).await?;
    let mut response = Json(&page.rows).into_response();
    response
        .headers_mut()
        .insert("x-total-count", HeaderValue::from(page.total));
    let at = format!("/_/states/{}", url_part(&repo));
    link_next(&mut response, &at, &query, page.next.as_deref());
    Ok(response)
}

/// Adds to `response` a `Link` to the next page (`rel="next"`) at the address `at`, when one
/// follows (`next`: its cursor).
fn link_next(response: &mut Response, at: &str, query: &ListQuery, next: Option<&str>) {
    let Some(next) = next else { return };
    let link = format!("<{at}?{}>; rel=\"next\"", query_string(query, next));
    if let Ok(value) = HeaderValue::from_str(&link) {
        response
            .headers_mut()
            .insert(axum::http::header::LINK, value);
    }
}

/// What a path in a link or an address leaves as it is: letters, digits, `-_./`.
const PATH_KEEPS: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'/');

/// A repository name or a state path made safe for a URL (its `/` kept).
pub(crate) fn url_part(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, PATH_KEEPS).to_string()
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
pub(crate) async fn catalog(
    app: &AppState,
    headers: &HeaderMap,
) -> Result<Arc<dyn Catalog>, ApiError> {
    let credentials = authenticated_caller(app, headers).await?;
    app.registry.admit_operator(credentials.as_ref())?;
    app.catalog.clone().ok_or_else(|| {
        ApiError::Message(
            StatusCode::NOT_FOUND,
            "no catalog is configured on this server (catalog { dynamodb_table = \"…\" }, --catalog-table or GITSTATE_CATALOG_TABLE)".into(),
        )
    })
}

/// `GET /_/catalog/states?prefix=REPO/PATH&after=REPO/PATH&limit=N`: one page of the states the
/// catalog knows (1,000 unless `limit` says otherwise), with their lock holders, in (repository,
/// path) order; `Link` with `rel="next"` gives the next page, when one follows.
pub async fn catalog_states(
    State(app): State<AppState>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let query = list_query(&query, DEFAULT_STATES_PAGE)?;
    let page = catalog(&app, &headers).await?.states(&query).await?;
    let mut response = Json(&page.states).into_response();
    link_next(
        &mut response,
        "/_/catalog/states",
        &query,
        page.next().as_deref(),
    );
    Ok(response)
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

/// `GET /_/catalog/links/{repo}/{path}`: what this state uses of other states and what uses it.
pub async fn catalog_links(
    State(app): State<AppState>,
    Path((repo, path)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<Links>, ApiError> {
    let path = state_path(&path)?;
    let state = StateRef {
        repository: repo,
        path: path.as_str().to_owned(),
    };
    Ok(Json(catalog(&app, &headers).await?.links(&state).await?))
}

/// `GET /_/catalog/order/{repo}`: the repository's states in an order for applies, and circles.
pub async fn catalog_order(
    State(app): State<AppState>,
    Path(repo): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Order>, ApiError> {
    Ok(Json(catalog(&app, &headers).await?.order(&repo).await?))
}
