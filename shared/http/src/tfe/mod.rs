//! The workspace API (DESIGN §10): the subset of the HCP Terraform / Terraform Enterprise API
//! that Terraform's `cloud` block and `remote` backend use with local execution, translated to
//! the core's workspace rules ([`gitstate_core::workspace`]). This module routes and renders; it
//! decides nothing: `workspaces.rs` the workspace and lock endpoints and the list, `tags.rs` the
//! tags, `state_versions.rs` the state versions, `documents.rs` the JSON:API documents. Every
//! other `/api/v2/` address is a 404 naming what gitstate does not do.

mod documents;
mod state_versions;
mod tags;
mod workspaces;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::Router;
use gitstate_core::scope::Use;
use gitstate_core::workspace::{admit, Holder, WorkspaceError, WorkspaceName, Workspaces};
use gitstate_core::{Authenticated, LockToken, StatePath, StateStore};
use gitstate_url::Credentials;

use crate::error::ApiError;
use crate::handlers::{caller_credentials, read_body};
use crate::AppState;

/// The API version gitstate answers as (`TFP-API-Version`); Terraform's `cloud` block needs 2.5.
const API_VERSION: &str = "2.5";

/// The routes of the workspace API, added to the router every entrypoint serves.
pub(crate) fn routes(router: Router<AppState>) -> Router<AppState> {
    let api = |method: MethodRouter<AppState>| method.fallback(method_refused);
    router
        .route("/.well-known/terraform.json", api(get(discovery)))
        .route("/api/v2/ping", api(get(ping)))
        .route("/api/v2/organizations/{org}", api(get(organization)))
        .route(
            "/api/v2/organizations/{org}/entitlement-set",
            api(get(entitlements)),
        )
        .route(
            "/api/v2/organizations/{org}/workspaces",
            api(post(workspaces::create).get(workspaces::list)),
        )
        .route(
            "/api/v2/organizations/{org}/workspaces/{name}",
            api(get(workspaces::read_by_name).delete(workspaces::delete_by_name)),
        )
        .route(
            "/api/v2/organizations/{org}/workspaces/{name}/actions/safe-delete",
            api(post(workspaces::safe_delete_by_name)),
        )
        .route(
            "/api/v2/workspaces/{id}",
            api(get(workspaces::read_by_id)
                .patch(workspaces::update)
                .delete(workspaces::delete_by_id)),
        )
        .route(
            "/api/v2/workspaces/{id}/actions/safe-delete",
            api(post(workspaces::safe_delete_by_id)),
        )
        .route(
            "/api/v2/workspaces/{id}/relationships/tags",
            api(get(tags::list).post(tags::add).delete(tags::remove)),
        )
        .route(
            "/api/v2/workspaces/{id}/actions/lock",
            api(post(workspaces::lock)),
        )
        .route(
            "/api/v2/workspaces/{id}/actions/unlock",
            api(post(workspaces::unlock)),
        )
        .route(
            "/api/v2/workspaces/{id}/actions/force-unlock",
            api(post(workspaces::force_unlock)),
        )
        .route(
            "/api/v2/workspaces/{id}/current-state-version",
            api(get(state_versions::current)),
        )
        .route(
            "/api/v2/workspaces/{id}/current-state-version-outputs",
            api(get(state_versions::current_outputs)),
        )
        .route(
            "/api/v2/state-version-outputs/{id}",
            api(get(state_versions::output)),
        )
        .route(
            "/api/v2/workspaces/{id}/state-versions",
            api(post(state_versions::create)),
        )
        .route(
            "/api/v2/state-versions/{id}/download",
            api(get(state_versions::download)),
        )
        .route("/api/v2", axum::routing::any(not_served))
        .route("/api/v2/{*rest}", axum::routing::any(not_served))
        .route_layer(axum::middleware::from_fn(observed))
}

/// Counts each request of the workspace API (docs/METRICS.md): its `operation` label is `API`,
/// the method and the routed address's pattern (`API POST /api/v2/workspaces/{id}/actions/lock`),
/// a fixed set: an address the API does not serve counts as `/api/v2/{*rest}`, and a method
/// outside the API's as `OTHER`.
async fn observed(
    matched: Option<axum::extract::MatchedPath>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let started = std::time::Instant::now();
    let method = match request.method().as_str() {
        known @ ("GET" | "HEAD" | "POST" | "PATCH" | "PUT" | "DELETE") => known,
        _ => "OTHER",
    };
    let pattern = matched.as_ref().map_or("/api/v2/{*rest}", |m| m.as_str());
    let operation: metrics::SharedString = format!("API {method} {pattern}").into();
    let response = gitstate_core::operation::serving(operation.clone(), next.run(request)).await;
    crate::request_metrics::observe_request(operation, started, response.status());
    response
}

/// An error answer of the workspace API: an [`ApiError`] rendered in the JSON:API error shape.
pub(crate) struct TfeError(ApiError);

impl IntoResponse for TfeError {
    fn into_response(self) -> Response {
        self.0.into_jsonapi_response()
    }
}

/// Each error the handlers meet, as its API answer.
macro_rules! answered_as_api_errors {
    ($($error:ty),*) => {$(
        impl From<$error> for TfeError {
            fn from(e: $error) -> Self {
                TfeError(e.into())
            }
        }
    )*};
}

answered_as_api_errors!(
    ApiError,
    WorkspaceError,
    gitstate_core::RegistryError,
    gitstate_core::BackendError
);

/// The status of each refusal of the core's workspace rules.
impl From<WorkspaceError> for ApiError {
    fn from(e: WorkspaceError) -> Self {
        match e {
            WorkspaceError::NotFound(s) => ApiError::Message(StatusCode::NOT_FOUND, s),
            e @ WorkspaceError::Name(_) => {
                ApiError::Message(StatusCode::UNPROCESSABLE_ENTITY, e.to_string())
            }
            e @ WorkspaceError::Tag(_) => {
                ApiError::Message(StatusCode::UNPROCESSABLE_ENTITY, e.to_string())
            }
            WorkspaceError::Taken(s) => ApiError::Message(StatusCode::UNPROCESSABLE_ENTITY, s),
            WorkspaceError::Forbidden(s) => ApiError::Message(StatusCode::FORBIDDEN, s),
            WorkspaceError::Locked { sentence, .. } => {
                ApiError::Message(StatusCode::CONFLICT, sentence)
            }
            WorkspaceError::NotLocked(s)
            | WorkspaceError::Unwritable(s)
            | WorkspaceError::HasState(s) => ApiError::Message(StatusCode::CONFLICT, s),
            WorkspaceError::Backend(e) => e.into(),
        }
    }
}

/// The 404 of `id`, which is no `kind` id (`workspace`, `state version`, ...) of this gitstate.
pub(crate) fn unknown_id(kind: &str, id: &str) -> TfeError {
    TfeError(ApiError::Message(
        StatusCode::NOT_FOUND,
        format!(
            "{} is not a {kind} id of this gitstate",
            gitstate_core::text::escape_controls(id)
        ),
    ))
}

/// A 422 with `sentence`.
pub(crate) fn unprocessable(sentence: impl Into<String>) -> TfeError {
    TfeError(ApiError::Message(
        StatusCode::UNPROCESSABLE_ENTITY,
        sentence.into(),
    ))
}

/// Largest request document accepted here (a workspace's settings, a lock's reason).
const MAX_DOCUMENT: usize = 64 * 1024;

/// The request body, at most [`MAX_DOCUMENT`] bytes.
pub(crate) async fn document(headers: &HeaderMap, body: Body) -> Result<bytes::Bytes, TfeError> {
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

/// The name a commit message and a lock's `Who` give the caller.
pub(crate) fn who(called: &Called) -> String {
    let name = called.name();
    if name.is_empty() {
        "workspace API".to_owned()
    } else {
        name
    }
}

/// The checked caller of a request.
pub(crate) struct Called {
    credentials: Option<Credentials>,
    authenticated: Authenticated,
}

impl Called {
    /// The caller of a request with `headers`, checked by the registry as every request is
    /// (team mode: anonymous and unknown credentials are 401).
    async fn of(app: &AppState, headers: &HeaderMap) -> Result<Called, TfeError> {
        let credentials = caller_credentials(headers)?;
        let authenticated = app.registry.authenticate(credentials.as_ref()).await?;
        Ok(Called {
            credentials,
            authenticated,
        })
    }

    /// Refuses an expired OIDC token: it may only finish the run whose lock it took.
    fn not_expired(&self) -> Result<(), TfeError> {
        if self.authenticated.expired() {
            return Err(gitstate_core::BackendError::from_expired_token().into());
        }
        Ok(())
    }

    /// The caller's name: its credential's own (an OIDC rule's), else a basic-auth user's; a
    /// Bearer token names no one (empty).
    fn name(&self) -> String {
        self.authenticated
            .name
            .clone()
            .or_else(|| {
                self.credentials
                    .as_ref()
                    .map(|c| c.username.clone())
                    .filter(|user| user != "bearer")
            })
            .unwrap_or_default()
    }

    /// The caller as a lock holder: its name and its credential's mark. A request without a
    /// credential holds no lock (401): Terraform always sends its host's token.
    fn holder(&self) -> Result<Holder, TfeError> {
        let Some(mark) = self.authenticated.holder.clone() else {
            return Err(TfeError(ApiError::Message(
                StatusCode::UNAUTHORIZED,
                "the workspace API needs a token to lock a workspace or write its state: give Terraform one for this host (a credentials block or TF_TOKEN_<host>)".into(),
            )));
        };
        Ok(Holder {
            name: self.name(),
            token: LockToken {
                mark,
                expired: self.authenticated.expired(),
            },
        })
    }

    /// The caller's OIDC token, when it presented one.
    fn token(&self) -> Option<&LockToken> {
        self.authenticated.token.as_ref()
    }
}

/// A workspace a request names, with the store of its organization and what the caller may
/// do with it.
pub(crate) struct Named {
    store: std::sync::Arc<dyn StateStore>,
    name: WorkspaceName,
    path: StatePath,
    admitted: gitstate_core::scope::Admitted,
}

impl Named {
    /// The workspace `name` of the organization `org` for `called`, who would `used` it: an
    /// organization is a configured repository (404 otherwise); a workspace outside the
    /// credential's paths is answered as one that does not exist.
    async fn resolve(
        app: &AppState,
        called: &Called,
        org: &str,
        name: &str,
        used: Use,
    ) -> Result<Named, TfeError> {
        let name = WorkspaceName::parse(name).map_err(WorkspaceError::from)?;
        let store = organization_store(app, called, org)?;
        let path = Workspaces::on(&app.backend, store.as_ref()).path(&name)?;
        let admitted = admit(&called.authenticated.scope, org, &name, &path, used)?;
        Ok(Named {
            store,
            name,
            path,
            admitted,
        })
    }

    /// The workspace of the id `id` (404 when it is no workspace id).
    async fn by_id(
        app: &AppState,
        called: &Called,
        id: &str,
        used: Use,
    ) -> Result<Named, TfeError> {
        let Some(id) = gitstate_core::workspace::WorkspaceId::parse(id) else {
            return Err(unknown_id("workspace", id));
        };
        Named::resolve(app, called, &id.repository, id.name.as_str(), used).await
    }

    /// The workspace's id.
    fn id(&self) -> gitstate_core::workspace::WorkspaceId {
        gitstate_core::workspace::WorkspaceId::new(self.store.repository(), &self.name)
    }

    fn workspaces<'a>(&'a self, app: &'a AppState) -> Workspaces<'a> {
        Workspaces::on(&app.backend, self.store.as_ref())
    }
}

/// The store of the organization `org`: the configured repository of that name.
pub(crate) fn organization_store(
    app: &AppState,
    called: &Called,
    org: &str,
) -> Result<std::sync::Arc<dyn StateStore>, TfeError> {
    match app.registry.named(org, called.credentials.as_ref()) {
        Err(gitstate_core::RegistryError::UnknownRepository(_)) => {
            Err(TfeError(ApiError::Message(
                StatusCode::NOT_FOUND,
                format!(
                    "the organization {} does not exist here: an organization is a repository configured in gitstate (default for the embedded one)",
                    gitstate_core::text::escape_controls(org)
                ),
            )))
        }
        other => Ok(other?),
    }
}

/// `GET /.well-known/terraform.json`: service discovery, the API at `/api/v2/`.
async fn discovery() -> Response {
    axum::Json(serde_json::json!({
        "tfe.v2": "/api/v2/",
        "tfe.v2.1": "/api/v2/",
        "tfe.v2.2": "/api/v2/",
    }))
    .into_response()
}

/// `GET /api/v2/ping`: the API's version in `TFP-API-Version` (read by the client before
/// anything else; nothing is checked).
async fn ping() -> Response {
    let mut response = StatusCode::NO_CONTENT.into_response();
    response
        .headers_mut()
        .insert("tfp-api-version", HeaderValue::from_static(API_VERSION));
    response
}

/// `GET /api/v2/organizations/:org`.
async fn organization(
    State(app): State<AppState>,
    Path(org): Path<String>,
    headers: HeaderMap,
) -> Result<Response, TfeError> {
    let called = Called::of(&app, &headers).await?;
    organization_store(&app, &called, &org)?;
    Ok(documents::answer(
        StatusCode::OK,
        documents::organization(&org),
    ))
}

/// `GET /api/v2/organizations/:org/entitlement-set`: state storage, no remote operations.
async fn entitlements(
    State(app): State<AppState>,
    Path(org): Path<String>,
    headers: HeaderMap,
) -> Result<Response, TfeError> {
    let called = Called::of(&app, &headers).await?;
    organization_store(&app, &called, &org)?;
    Ok(documents::answer(
        StatusCode::OK,
        documents::entitlements(&org),
    ))
}

/// A method a routed address of the API does not take.
async fn method_refused(method: Method, uri: Uri) -> TfeError {
    TfeError(ApiError::Message(
        StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "{method} {} is not part of the workspace API that gitstate serves",
            uri.path()
        ),
    ))
}

/// Every other address under `/api/v2/`: a 404 naming what gitstate does not do.
async fn not_served(method: Method, uri: Uri) -> TfeError {
    let path = uri.path();
    let rest = path.trim_start_matches("/api/v2").trim_start_matches('/');
    let segments: Vec<&str> = rest.split('/').collect();
    let family = |names: &[&str]| segments.iter().any(|s| names.contains(s));
    let what = if family(&[
        "runs",
        "plans",
        "applies",
        "configuration-versions",
        "run-triggers",
        "task-stages",
        "policy-checks",
        "cost-estimates",
    ]) {
        "gitstate runs no plans or applies: its workspaces use local execution, and Terraform runs on your machine"
    } else if family(&["vars", "varsets", "variables"]) {
        "gitstate keeps no variables: give them to Terraform where it runs"
    } else if family(&["policies", "policy-sets", "policy-evaluations"]) {
        "gitstate evaluates no policies"
    } else if family(&["outputs"]) {
        "gitstate serves the outputs of a workspace's current state (/api/v2/workspaces/:id/current-state-version-outputs), not those of older state versions"
    } else if family(&["tag-bindings", "effective-tag-bindings"]) {
        "gitstate keeps a workspace's tags as names (GET or POST /api/v2/workspaces/:id/relationships/tags), not as key/value tag bindings"
    } else if family(&["tags", "relationships"]) {
        "gitstate keeps a workspace's tags (/api/v2/workspaces/:id/relationships/tags) and no other relationship or organization tag"
    } else if family(&[
        "teams",
        "users",
        "account",
        "organization-memberships",
        "team-workspaces",
        "oauth-clients",
        "ssh-keys",
        "agent-pools",
        "projects",
        "registry-modules",
        "registry-providers",
    ]) {
        "gitstate manages no teams, users, projects, agents or registries: access is configured in gitstate (team tokens, users, OIDC)"
    } else {
        "gitstate serves only the workspace, state-version and lock endpoints of this API"
    };
    TfeError(ApiError::Message(
        StatusCode::NOT_FOUND,
        format!("{what} ({method} {path} is not served)"),
    ))
}
