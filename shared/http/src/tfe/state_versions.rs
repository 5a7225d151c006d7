//! The state versions of the workspace API (DESIGN §10): the current one, its download, its
//! outputs, and a new one. A new state version carries its state inline (the `state` attribute, base64): one
//! request, one commit. A create without it (go-tfe's upload flow, which needs a second request to
//! an upload address) is answered with the API's own refusal of a missing `state`, on which
//! Terraform sends the state inline.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use gitstate_core::backend::Caller;
use gitstate_core::scope::{Admitted, Use};
use gitstate_core::workspace::{outputs_of, Current, OutputId, StateVersionId, WorkspaceError};
use gitstate_core::CatalogChange;

use super::documents::{self, Request};
use super::{unknown_id, unprocessable, Called, Named, TfeError};
use crate::handlers::{
    outputs_response, read_body, state_response, tell_catalog_at, RequestDeadline,
};
use crate::AppState;

/// The refusal go-tfe reads as "this server takes the state inline" (its words are matched).
const STATE_MISSING: &str = "param is missing or the value is empty: state";

/// `GET /api/v2/workspaces/:id/current-state-version`: 404 while the workspace has no state.
pub(super) async fn current(
    State(app): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, TfeError> {
    let called = Called::of(&app, &headers).await?;
    let named = Named::by_id(&app, &called, &id, Use::Read).await?;
    let current = named
        .workspaces(&app)
        .current(&named.name, called.token())
        .await?;
    Ok(documents::answer(
        StatusCode::OK,
        documents::state_version(&named.id(), &current),
    ))
}

/// The workspace of `version` and its current state, while that is the state `version` names
/// (from the store's memory when it holds that very state: [`gitstate_core::workspace::Workspaces::version`]);
/// otherwise a 404 whose sentence names the workspace and says `stale`.
async fn still_current(
    app: &AppState,
    called: &Called,
    version: &StateVersionId,
    stale: &str,
) -> Result<(Named, Current), TfeError> {
    let workspace = &version.workspace;
    let named = Named::resolve(
        app,
        called,
        &workspace.repository,
        workspace.name.as_str(),
        Use::Read,
    )
    .await?;
    let current = named
        .workspaces(app)
        .version(&named.name, &version.digest, called.token())
        .await?;
    match current {
        Some(current) => Ok((named, current)),
        None => {
            Err(WorkspaceError::NotFound(format!("the workspace {}: {stale}", named.name)).into())
        }
    }
}

/// `GET /api/v2/state-versions/:id/download`: the state that version named, while it is the
/// workspace's current one (an outputs-only credential gets its outputs only).
pub(super) async fn download(
    State(app): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, TfeError> {
    let called = Called::of(&app, &headers).await?;
    let Some(version) = StateVersionId::parse(&id) else {
        return Err(unknown_id("state version", &id));
    };
    let (named, current) = still_current(
        &app,
        &called,
        &version,
        "this state version is no longer its current state; read the current state version again",
    )
    .await?;
    Ok(match named.admitted {
        Admitted::Whole => state_response(current.state),
        Admitted::OutputsOnly => outputs_response(&named.path, &current.state)?,
    })
}

/// `GET /api/v2/workspaces/:id/current-state-version-outputs`: the current state's outputs,
/// sensitive values hidden (an outputs-only credential gets these too); none while the workspace
/// has no state.
pub(super) async fn current_outputs(
    State(app): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, TfeError> {
    let called = Called::of(&app, &headers).await?;
    let named = Named::by_id(&app, &called, &id, Use::Read).await?;
    let current = named
        .workspaces(&app)
        .current_for_outputs(&named.name, called.token())
        .await?;
    let outputs = match current {
        Some(current) => {
            let version = StateVersionId {
                workspace: named.id(),
                digest: current.digest.clone(),
            };
            outputs_of(&version, &current.state, true)
        }
        None => Vec::new(),
    };
    Ok(documents::answer(
        StatusCode::OK,
        documents::outputs(&outputs),
    ))
}

/// `GET /api/v2/state-version-outputs/:id`: one output of the current state, its value even
/// when sensitive (as the API gives it); 404 once that state is no longer current.
pub(super) async fn output(
    State(app): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, TfeError> {
    let called = Called::of(&app, &headers).await?;
    let Some(wanted) = OutputId::parse(&id) else {
        return Err(unknown_id("state version output", &id));
    };
    let (named, current) = still_current(
        &app,
        &called,
        &wanted.version,
        "this output belongs to a state that is no longer its current state; read its current outputs again",
    )
    .await?;
    let found = outputs_of(&wanted.version, &current.state, false)
        .into_iter()
        .find(|o| o.name() == wanted.name);
    let Some(found) = found else {
        return Err(WorkspaceError::NotFound(format!(
            "the current state of the workspace {} has no output named {}",
            named.name,
            gitstate_core::text::escape_controls(&wanted.name)
        ))
        .into());
    };
    Ok(documents::answer(
        StatusCode::OK,
        serde_json::json!({ "data": documents::output(&found) }),
    ))
}

/// `POST /api/v2/workspaces/:id/state-versions`: the state, written under the caller's own
/// lock of the workspace (the API's rule), as a POST of the http protocol is.
pub(super) async fn create(
    State(app): State<AppState>,
    Path(id): Path<String>,
    deadline: Option<axum::Extension<RequestDeadline>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, TfeError> {
    let called = Called::of(&app, &headers).await?;
    let named = Named::by_id(&app, &called, &id, Use::Write).await?;
    let backend = &app.backend;
    // The state in base64 and its JSON rendering beside it: about three times the state.
    let max = backend
        .max_state_bytes
        .saturating_mul(3)
        .saturating_add(1 << 20);
    let refuse = |size: Option<u64>| crate::ApiError::from(backend.too_large(size.map(|s| s / 3)));
    let body = read_body(&headers, body, max, refuse).await?;
    let request = Request::parse(&body).map_err(unprocessable)?;
    let Some(encoded) = request.string("state").map_err(unprocessable)? else {
        return Err(unprocessable(format!(
            "{STATE_MISSING} (gitstate takes the state inline, base64 in the attribute state, and offers no upload address)"
        )));
    };
    let state = BASE64
        .decode(encoded)
        .map_err(|_| unprocessable("the attribute state is not base64"))?;
    if let Some(md5) = request.string("md5").map_err(unprocessable)? {
        if !md5.eq_ignore_ascii_case(&documents::md5_hex(&state)) {
            return Err(unprocessable(
                "the attribute md5 does not match the state: it was damaged on the way, and nothing was written",
            ));
        }
    }
    let force = match request.attribute("force") {
        None => false,
        Some(value) => value
            .as_bool()
            .ok_or_else(|| unprocessable("the attribute force must be true or false"))?,
    };
    let holder = called.holder()?;
    let checked = backend.check(bytes::Bytes::from(state), app.recorder.is_some())?;
    let caller = Caller {
        name: holder.name.clone(),
        deadline: deadline.map(|axum::Extension(d)| d.0),
        force,
        token: called.token().cloned(),
        sealed_by: None,
    };
    let spaces = named.workspaces(&app);
    let written = spaces
        .write_state(&named.name, &checked, &holder, &caller)
        .await?;
    let (commit, who) = match written {
        Some(w) => (Some(w.commit), w.who),
        None => (None, caller.name.clone()),
    };
    let facts = checked.facts.clone();
    let repository = named.store.repository().to_owned();
    tell_catalog_at(&app, &repository, &named.path, who, move || {
        let mut facts = facts.unwrap_or_default();
        facts.commit = commit;
        CatalogChange::Write(facts)
    });
    let current = Current::of(checked.body.clone());
    Ok(documents::answer(
        StatusCode::CREATED,
        documents::state_version(&named.id(), &current),
    ))
}
