//! Request handlers: parse, call the backend, answer.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use bytes::Bytes;
use gitstate_core::backend::Caller;
use gitstate_core::lock_token::{Begun, LockToken};
use gitstate_core::scope::{Admitted, Use};
use gitstate_core::{Authenticated, StateStore, Written};
use gitstate_core::{BackendError, CatalogChange, LockFacts, Unlocked};
use gitstate_statefile::{outputs_only, OutputsError};
use gitstate_url::Credentials;
use md5::{Digest, Md5};
use tracing::Instrument;

use crate::address::{Address, Repository};
use crate::error::{chain, with_request_id, Advice, ApiError, REQUEST_ID_HEADER};
use crate::AppState;

/// Largest LOCK/UNLOCK body accepted; LockInfo is a few hundred bytes.
const MAX_LOCK_BODY: usize = 64 * 1024;

/// The header of a LOCK that took over an expired lock (`lock_ttl`): the old lock's ID.
const TOOK_OVER: &str = "x-gitstate-took-over";

/// The header of a GET answered to an outputs-only credential: the state's resources were left
/// out (DESIGN §6).
const OUTPUTS_ONLY: &str = "x-gitstate-outputs-only";

/// The protocol operation a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operation {
    Get,
    Write,
    Delete,
    Lock,
    Unlock,
}

impl Operation {
    /// Methods on `/state/...` and on the query-style address. `PUT` is accepted as a write for
    /// clients configured with `update_method = "PUT"`.
    fn on_state(method: &Method) -> Result<Self, ApiError> {
        match method.as_str() {
            "GET" | "HEAD" => Ok(Operation::Get),
            "POST" | "PUT" => Ok(Operation::Write),
            "DELETE" => Ok(Operation::Delete),
            "LOCK" => Ok(Operation::Lock),
            "UNLOCK" => Ok(Operation::Unlock),
            other => Err(method_not_allowed(
                other,
                "GET, POST, PUT, DELETE, LOCK, UNLOCK",
            )),
        }
    }

    /// The `operation` label of the request metrics (docs/METRICS.md): the Terraform protocol's
    /// names (`HEAD` counts as GET, `PUT` as POST, the `/lock/` alias as LOCK and UNLOCK).
    fn label(self) -> &'static str {
        match self {
            Operation::Get => "GET",
            Operation::Write => "POST",
            Operation::Delete => "DELETE",
            Operation::Lock => "LOCK",
            Operation::Unlock => "UNLOCK",
        }
    }

    /// Counts a request of this operation answered with `status` after `started`.
    fn observe(self, started: Instant, status: StatusCode) {
        use gitstate_core::metrics::LOCK_CONFLICTS;
        let operation = self.label();
        crate::request_metrics::observe_request(operation, started, status);
        if status == StatusCode::LOCKED {
            metrics::counter!(LOCK_CONFLICTS, "operation" => operation).increment(1);
        }
    }

    /// Methods on the `/lock/...` alias for gateways that refuse WebDAV verbs.
    fn on_lock_alias(method: &Method) -> Result<Self, ApiError> {
        match method.as_str() {
            "POST" | "PUT" | "LOCK" => Ok(Operation::Lock),
            "DELETE" | "UNLOCK" => Ok(Operation::Unlock),
            other => Err(method_not_allowed(other, "POST (lock), DELETE (unlock)")),
        }
    }
}

/// The status a handler's result is answered with.
fn status_of(result: &Result<Response, ApiError>) -> StatusCode {
    match result {
        Ok(response) => response.status(),
        Err(error) => error.status(),
    }
}

fn method_not_allowed(method: &str, allowed: &str) -> ApiError {
    ApiError::Message(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("method {method} is not supported here; use {allowed}"),
    )
}

/// Gives every request an id, a tracing span and an access-log line. Logs the path only: the
/// query of a query-style address can hold a repository URL, which may carry credentials.
pub async fn request_context(request: Request, next: Next) -> Response {
    let request_id = uuid::Uuid::new_v4().to_string();
    let span = tracing::info_span!(
        "request",
        request_id = %request_id,
        method = %request.method(),
        path = %request.uri().path(),
    );
    let started = Instant::now();
    let answer = next.run(request).instrument(span.clone());
    let mut response = with_request_id(Arc::from(request_id.as_str()), answer).await;
    span.in_scope(|| {
        tracing::info!(
            status = response.status().as_u16(),
            duration_ms = started.elapsed().as_secs_f64() * 1000.0,
            "request handled"
        );
    });
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(REQUEST_ID_HEADER, value);
    }
    response
}

/// The answer to a request whose handler panicked (a bug: the backstop, not the fix). The panic
/// is logged at ERROR inside the request's span, so the log line carries its request id; the
/// caller gets a 500 with one sentence and nothing of the panic's text.
pub fn panic_answer(panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let message = panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("(no message)");
    ApiError::bug(
        "gitstate hit a bug while answering this request, which is safe to retry",
        format!("a request handler panicked: {message}"),
    )
    .into_response()
}

/// `GET /_/health`.
pub async fn health() -> Response {
    axum::Json(serde_json::json!({
        "status": "ok",
        "service": "gitstate",
        "version": env!("CARGO_PKG_VERSION"),
    }))
    .into_response()
}

/// `GET /_/metrics`: the Prometheus text of this process's metrics (docs/METRICS.md), to the
/// callers the API admits that may read what spans repositories: in team mode a team token or
/// user (anonymous: 401), in server mode whoever reached the server. In pass-through mode the git
/// server decides per repository and nothing here can check a caller, so it is not served (403).
pub async fn metrics(
    State(app): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let credentials = authenticated_caller(&app, &headers).await?;
    match app.registry.admit_operator(credentials.as_ref()) {
        Err(gitstate_core::RegistryError::NotAllowed(_)) => {
            return Err(ApiError::Message(
                StatusCode::FORBIDDEN,
                "this deployment passes each caller's credentials to the git server, so it cannot tell who may read its metrics; they are served in team and server mode".into(),
            ))
        }
        other => other?,
    }
    let Some(render) = &app.metrics else {
        return Err(ApiError::Message(
            StatusCode::NOT_FOUND,
            "this runtime does not collect metrics; gitstate serve and gitstate wrap serve them here".into(),
        ));
    };
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        render(),
    )
        .into_response())
}

/// Anything unrouted.
pub async fn not_found(uri: Uri) -> ApiError {
    ApiError::Message(
        StatusCode::NOT_FOUND,
        format!(
            "nothing is served at {}; state addresses look like /state/{{repository}}/{{path}}",
            uri.path()
        ),
    )
}

/// Every state address: `/state/{repo}/{path}`, its alias `/lock/{repo}/{path}` where `POST` locks
/// and `DELETE` unlocks, and the query-style `/?type=git&repository=URL&ref=REF&state=PATH`
/// (terraform-backend-git compatible; `/` alone describes the service).
pub async fn state_address(
    State(app): State<AppState>,
    method: Method,
    uri: Uri,
    deadline: Option<Extension<RequestDeadline>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let deadline = deadline.map(|Extension(d)| d.0);
    let (address, operation) = match uri.path() {
        "/" if uri.query().is_none() && method == Method::GET => {
            return Ok(axum::Json(serde_json::json!({
                "service": "gitstate",
                "state_address": "/state/{repository}/{path}",
                "health": "/_/health",
                "ready": "/_/ready",
            }))
            .into_response())
        }
        "/" => {
            // A bad address is answered before a bad method; with a method that is an
            // operation, both are counted under it.
            let address = Address::from_query(uri.query(), &app.query_default_ref);
            match Operation::on_state(&method) {
                Ok(operation) => (address, operation),
                Err(e) => return Err(address.err().unwrap_or(e)),
            }
        }
        path => match path.strip_prefix("/lock/") {
            Some(rest) => (
                Address::from_path(rest, uri.query()),
                Operation::on_lock_alias(&method)?,
            ),
            None => (
                Address::from_path(
                    path.strip_prefix("/state/").unwrap_or_default(),
                    uri.query(),
                ),
                Operation::on_state(&method)?,
            ),
        },
    };
    let started = Instant::now();
    let result = match address {
        // What the request costs further down (the git server's requests) counts under its
        // operation too.
        Ok(address) => {
            let answer = dispatch(&app, address, operation, deadline, &headers, body);
            gitstate_core::operation::serving(operation.label(), answer).await
        }
        Err(e) => Err(e),
    };
    operation.observe(started, status_of(&result));
    result
}

/// The caller's credentials from `Authorization`: `Basic` (user and password, what Terraform's
/// http backend sends) or `Bearer` (OpenTofu's `headers = { Authorization = "Bearer …" }`), which
/// stands for the user `bearer` with the token as its password (team mode checks the token; in
/// pass-through mode the git server gets that pair). Anything else is a 401.
pub(crate) fn caller_credentials(headers: &HeaderMap) -> Result<Option<Credentials>, ApiError> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let unauthorized = || {
        ApiError::Message(
            StatusCode::UNAUTHORIZED,
            "the Authorization header is neither a valid Basic credential nor a Bearer token"
                .into(),
        )
    };
    let value = value.to_str().map_err(|_| unauthorized())?;
    let (scheme, rest) = value.split_once(' ').ok_or_else(unauthorized)?;
    if scheme.eq_ignore_ascii_case("bearer") {
        let token = rest.trim();
        if token.is_empty() {
            return Err(unauthorized());
        }
        return Ok(Some(Credentials {
            username: "bearer".to_owned(),
            password: token.to_owned(),
        }));
    }
    if !scheme.eq_ignore_ascii_case("basic") {
        return Err(unauthorized());
    }
    // The decoded pair is a secret: every copy is zeroed when dropped.
    let decoded = zeroize::Zeroizing::new(BASE64.decode(rest.trim()).map_err(|_| unauthorized())?);
    let decoded = zeroize::Zeroizing::new(
        std::str::from_utf8(&decoded)
            .map_err(|_| unauthorized())?
            .to_owned(),
    );
    let (username, password) = decoded.split_once(':').ok_or_else(unauthorized)?;
    Ok(Some(Credentials {
        username: username.to_owned(),
        password: password.to_owned(),
    }))
}

/// Reads a body of at most `max` bytes; a longer one is refused by `refuse` (given its declared
/// length, or `None` when it went on past `max`) without reading the rest.
pub(crate) async fn read_body(
    headers: &HeaderMap,
    body: Body,
    max: usize,
    refuse: impl Fn(Option<u64>) -> ApiError,
) -> Result<Bytes, ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(length) = declared {
        if length > max as u64 {
            discard_in_background(body);
            return Err(refuse(Some(length)));
        }
    }
    match axum::body::to_bytes(body, max).await {
        Ok(bytes) => Ok(bytes),
        Err(e) => {
            let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
            while let Some(err) = source {
                if err.is::<http_body_util::LengthLimitError>() {
                    return Err(refuse(None));
                }
                source = err.source();
            }
            Err(ApiError::failed(
                StatusCode::BAD_REQUEST,
                "the request body could not be read to its end (the connection broke, or its framing was malformed); send the request again",
                Advice::Nothing,
                format!("reading the request body failed: {}", chain(&e)),
            ))
        }
    }
}

/// The 413 of a LOCK or UNLOCK body over [`MAX_LOCK_BODY`].
fn lock_body_too_large(size: Option<u64>) -> ApiError {
    let size = size.map_or_else(|| "more than that".to_owned(), |s| s.to_string());
    ApiError::Message(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the request body is {size} bytes, over the maximum of {MAX_LOCK_BODY} bytes for a lock"),
    )
}

/// Most bytes of a refused body read and thrown away after the answer, and for how long.
const DISCARD_LIMIT: u64 = 1 << 30;
const DISCARD_TIME: std::time::Duration = std::time::Duration::from_secs(60);

/// Reads and throws away a body that was refused unread (413 from its Content-Length), so the
/// connection stays open while the client is still sending: closing a socket with unread data
/// makes the kernel reset it, and the reset can destroy the answer before the client reads it.
/// Nothing is kept; past [`DISCARD_LIMIT`] bytes or [`DISCARD_TIME`] the connection is dropped.
fn discard_in_background(body: Body) {
    use http_body_util::BodyExt;
    tokio::spawn(async move {
        let mut body = body;
        let mut discarded = 0u64;
        let started = Instant::now();
        while discarded <= DISCARD_LIMIT && started.elapsed() < DISCARD_TIME {
            match tokio::time::timeout(DISCARD_TIME, body.frame()).await {
                Ok(Some(Ok(frame))) => {
                    discarded += frame.data_ref().map_or(0, |d| d.len() as u64);
                }
                _ => break,
            }
        }
    });
}

/// Checks a `Content-MD5` request header against the body, when the client sent one.
fn check_content_md5(headers: &HeaderMap, body: &[u8]) -> Result<(), ApiError> {
    let Some(value) = headers.get("content-md5") else {
        return Ok(());
    };
    let expected = BASE64.encode(Md5::digest(body));
    if value.as_bytes() != expected.as_bytes() {
        return Err(ApiError::bad_request(
            "the body does not match its Content-MD5 header; it was damaged on the way",
        ));
    }
    Ok(())
}

/// The caller's basic-auth pair, checked by the registry where the deployment checks callers
/// itself (team mode; bcrypt off the async workers). Nothing is opened or read before this.
/// The caller of an endpoint that spans states (everything under `/_/`): authenticated, and with
/// a credential whose scope has no limit that such an endpoint could cross (403 otherwise, see
/// [`Scope::admit_across_states`]).
pub(crate) async fn authenticated_caller(
    app: &AppState,
    headers: &HeaderMap,
) -> Result<Option<Credentials>, ApiError> {
    let credentials = caller_credentials(headers)?;
    let caller = app.registry.authenticate(credentials.as_ref()).await?;
    if caller.expired() {
        return Err(BackendError::from_expired_token().into());
    }
    caller.scope.admit_across_states()?;
    Ok(credentials)
}

/// When a request must be answered by, as a request extension: the Lambda entrypoint sets it
/// from the invocation's deadline minus a margin (DESIGN §9.3); writes give up (503) before it.
#[derive(Debug, Clone, Copy)]
pub struct RequestDeadline(pub std::time::Instant);

async fn dispatch(
    app: &AppState,
    address: Address,
    operation: Operation,
    deadline: Option<std::time::Instant>,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let credentials = caller_credentials(headers)?;
    let Authenticated {
        scope, name, token, ..
    } = app.registry.authenticate(credentials.as_ref()).await?;
    // What an expired OIDC token may begin is core's rule (the backend then checks the lock is
    // that token's).
    let begun = match operation {
        Operation::Write | Operation::Delete => Begun::Write {
            names_lock: address.lock_id.is_some(),
        },
        Operation::Get => Begun::Read {
            version: address.version.is_some(),
        },
        Operation::Unlock => Begun::Unlock,
        Operation::Lock => Begun::Lock,
    };
    if !LockToken::may_begin(token.as_ref(), begun) {
        return Err(BackendError::from_expired_token().into());
    }
    let used = match operation {
        Operation::Get => Use::Read,
        _ => Use::Write,
    };
    let repository = match &address.repository {
        Repository::Named(name) => Some(name.as_str()),
        Repository::AdHoc { .. } => None,
    };
    let admitted = scope.admit_in(used, repository, &address.path)?;
    let store = match &address.repository {
        Repository::Named(name) => app.registry.named(name, credentials.as_ref())?,
        Repository::AdHoc { url, git_ref } => {
            app.registry
                .adhoc(url, git_ref.as_str(), credentials.as_ref())?
        }
    };
    let store: &dyn StateStore = store.as_ref();
    let caller = Caller {
        // The credential's own name (an OIDC rule's), else the basic-auth user name.
        name: name
            .or_else(|| credentials.as_ref().map(|c| c.username.clone()))
            .unwrap_or_default(),
        deadline,
        force: address.force,
        token,
        sealed_by: None,
    };
    if address.version.is_some() && operation != Operation::Get {
        return Err(ApiError::bad_request(
            "?version= only applies to GET; restore an earlier version with `gitstate restore`",
        ));
    }
    let (backend, path, lock_id) = (&app.backend, &address.path, address.lock_id.as_deref());
    match operation {
        Operation::Get => get(app, store, &address, admitted, &caller).await,
        Operation::Write => write(app, store, &address, &caller, headers, body).await,
        Operation::Delete => {
            let written = backend.delete(store, path, lock_id, &caller).await?;
            let (commit, who) = written_by(written, &caller);
            tell_catalog(app, &address, who, move || CatalogChange::Delete { commit });
            Ok(StatusCode::OK.into_response())
        }
        Operation::Lock => {
            let body = read_body(headers, body, MAX_LOCK_BODY, lock_body_too_large).await?;
            let acquired = match backend.lock(store, path, body, caller.token.as_ref()).await {
                Ok(acquired) => acquired,
                Err(BackendError::Conflict(sentence)) => {
                    return Err(ApiError::Unwritable(sentence))
                }
                Err(e) => return Err(e.into()),
            };
            Ok(locked(app, &address, acquired))
        }
        Operation::Unlock => {
            let body = read_body(headers, body, MAX_LOCK_BODY, lock_body_too_large).await?;
            let Unlocked { force, who, .. } = backend
                .unlock_body(store, path, &body, caller.token.as_ref())
                .await?;
            let who = who.unwrap_or_else(|| caller.name.clone());
            tell_catalog(app, &address, who, move || CatalogChange::Unlock { force });
            Ok(StatusCode::OK.into_response())
        }
    }
}

/// GET: the state (or `?version=`'s), whole or, for an outputs-only credential, reduced to its
/// outputs and marked so.
async fn get(
    app: &AppState,
    store: &dyn StateStore,
    address: &Address,
    admitted: Admitted,
    caller: &Caller,
) -> Result<Response, ApiError> {
    let (backend, path) = (&app.backend, &address.path);
    let (state, version) = match &address.version {
        Some(spec) => {
            let (info, state) = backend.get_version(store, path, spec).await?;
            let Some(state) = state else {
                return Err(ApiError::Message(
                    StatusCode::NOT_FOUND,
                    format!(
                        "version {spec} of {path} is its deletion (commit {}); it holds no state",
                        info.commit
                    ),
                ));
            };
            (state, Some(info))
        }
        None => match backend.get(store, path, caller.token.as_ref()).await? {
            Some(state) => (state, None),
            None => return Ok(StatusCode::NO_CONTENT.into_response()),
        },
    };
    let mut response = match admitted {
        Admitted::Whole => state_response(state),
        Admitted::OutputsOnly => outputs_response(path, &state)?,
    };
    if let Some(info) = version {
        let headers = response.headers_mut();
        if let Ok(commit) = HeaderValue::from_str(&info.commit) {
            headers.insert("x-gitstate-commit", commit);
        }
        if let Some(serial) = info.serial {
            headers.insert("x-gitstate-serial", HeaderValue::from(serial));
        }
    }
    Ok(response)
}

/// POST (or PUT): the body checked once (with the catalog's facts when there is a catalog),
/// written, and told to the catalog off the answer's path.
async fn write(
    app: &AppState,
    store: &dyn StateStore,
    address: &Address,
    caller: &Caller,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let backend = &app.backend;
    // Read no further than the backend's size rule admits; its 413 answers a longer body.
    let refuse = |size| ApiError::from(backend.too_large(size));
    let body = read_body(headers, body, backend.max_state_bytes, refuse).await?;
    check_content_md5(headers, &body)?;
    let lock_id = address.lock_id.as_deref();
    let state = backend.check(body, app.recorder.is_some())?;
    let written = backend
        .post(store, &address.path, &state, lock_id, caller)
        .await?;
    let (commit, who) = written_by(written, caller);
    if address.amend {
        tracing::info!(
            commit = commit.as_deref().unwrap_or("none (unchanged)"),
            "?amend=true: written as a normal commit (gitstate never amends or force-pushes)"
        );
    }
    // The facts were read by the one check of the body; they are recorded in the background.
    tell_catalog(app, address, who, move || {
        let mut facts = state.facts.unwrap_or_default();
        facts.commit = commit;
        CatalogChange::Write(facts)
    });
    Ok(StatusCode::OK.into_response())
}

/// The answer to a LOCK that succeeded, and what the catalog is told: the lock, after a
/// force-unlock by the new holder when an expired lock was taken over (`lock_ttl`; the old ID in
/// `X-Gitstate-Took-Over`).
fn locked(app: &AppState, address: &Address, acquired: gitstate_core::Acquired) -> Response {
    let facts = LockFacts::from(&acquired.info);
    let who = facts.who.clone();
    let mut response = StatusCode::OK.into_response();
    if let Some(taken) = &acquired.took_over {
        tell_catalog(app, address, who.clone(), || CatalogChange::Unlock {
            force: true,
        });
        let id = gitstate_core::text::escape_controls(&taken.id);
        if let Ok(value) = HeaderValue::from_str(&id) {
            response.headers_mut().insert(TOOK_OVER, value);
        }
    }
    tell_catalog(app, address, who, move || CatalogChange::Lock(facts));
    response
}

/// The commit of a write and the writer its message names (the caller for a replay, which made
/// no commit).
fn written_by(written: Option<Written>, caller: &Caller) -> (Option<String>, String) {
    match written {
        Some(w) => (Some(w.commit), w.who),
        None => (None, caller.name.clone()),
    }
}

/// The answer to an outputs-only credential's read of the state at `path`: the state reduced to
/// its outputs (DESIGN §6), marked so.
pub(crate) fn outputs_response(
    path: &gitstate_core::StatePath,
    state: &[u8],
) -> Result<Response, ApiError> {
    let reduced = outputs_only(state).map_err(|e| match e {
        OutputsError::ClientEncrypted => ApiError::Message(StatusCode::FORBIDDEN, e.to_string()),
        OutputsError::NotAState(why) => ApiError::failed(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the stored state of {path} could not be reduced to its outputs, because it is not a state Terraform could read"),
            Advice::TellOperator,
            format!("reducing the stored state of {path} to its outputs: {why}"),
        ),
    })?;
    let mut response = state_response(Bytes::from(reduced));
    response
        .headers_mut()
        .insert(OUTPUTS_ONLY, HeaderValue::from_static("true"));
    Ok(response)
}

/// A state body with its `Content-MD5`.
pub(crate) fn state_response(state: Bytes) -> Response {
    let md5 = BASE64.encode(Md5::digest(&state));
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "application/json".to_owned()),
            (header::HeaderName::from_static("content-md5"), md5),
        ],
        state,
    )
        .into_response()
}

/// Records a successful change in the catalog, in the background and in the order of the
/// answers (see [`crate::recorder`]); a catalog failure is logged and counted, never returned.
fn tell_catalog(
    app: &AppState,
    address: &Address,
    who: String,
    change: impl FnOnce() -> CatalogChange + Send + 'static,
) {
    let Some(recorder) = &app.recorder else {
        return;
    };
    let repository = match &address.repository {
        Repository::Named(name) => name.clone(),
        Repository::AdHoc { url, .. } => gitstate_url::RepoUrl::parse(url)
            .map(|u| u.display())
            .unwrap_or_else(|_| gitstate_url::redact_in_text(url)),
    };
    recorder.tell(repository, address.path.as_str().to_owned(), who, change);
}

/// [`tell_catalog`] for a change of the state at `path` of the configured `repository` (the
/// workspace API's changes).
pub(crate) fn tell_catalog_at(
    app: &AppState,
    repository: &str,
    path: &gitstate_core::StatePath,
    who: String,
    change: impl FnOnce() -> CatalogChange + Send + 'static,
) {
    if let Some(recorder) = &app.recorder {
        recorder.tell(repository.to_owned(), path.as_str().to_owned(), who, change);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(value).expect("a header value"),
        );
        headers
    }

    #[test]
    fn basic_and_bearer_credentials_are_read_and_anything_else_is_a_401() {
        let basic = caller_credentials(&with("Basic YWxpY2U6czNjcjN0")).expect("basic");
        assert_eq!(
            basic.map(|c| (c.username.clone(), c.password.clone())),
            Some(("alice".into(), "s3cr3t".into()))
        );
        let bearer = caller_credentials(&with("Bearer team-token")).expect("bearer");
        assert_eq!(
            bearer.map(|c| (c.username.clone(), c.password.clone())),
            Some(("bearer".into(), "team-token".into()))
        );
        for bad in [
            "Bearer ",
            "Digest x",
            "Basic !!!",
            "Basic YWxpY2U=",
            "token",
        ] {
            let refused = caller_credentials(&with(bad));
            assert!(
                matches!(&refused, Err(e) if e.status() == StatusCode::UNAUTHORIZED),
                "{bad:?}"
            );
        }
        assert!(matches!(caller_credentials(&HeaderMap::new()), Ok(None)));
    }
}
