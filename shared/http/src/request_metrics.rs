//! The request metrics (docs/METRICS.md): `gitstate_requests_total` and
//! `gitstate_request_duration_seconds` by `operation` and `status`, for the http protocol's
//! operations (`handlers.rs`) and the workspace API's (`tfe/`), each label from a fixed set.

use std::time::Instant;

use axum::http::StatusCode;

/// Counts a request of `operation` (a label from a fixed set, docs/METRICS.md) answered with
/// `status` after `started`.
pub(crate) fn observe_request(
    operation: impl Into<metrics::SharedString>,
    started: Instant,
    status: StatusCode,
) {
    use gitstate_core::metrics::{REQUESTS, REQUEST_SECONDS};
    let (operation, status_label) = (operation.into(), status_label(status));
    metrics::counter!(REQUESTS, "operation" => operation.clone(), "status" => status_label.clone())
        .increment(1);
    metrics::histogram!(REQUEST_SECONDS, "operation" => operation, "status" => status_label)
        .record(started.elapsed().as_secs_f64());
}

/// The `status` label: the code's three digits, from a fixed set (no allocation per request).
fn status_label(status: StatusCode) -> metrics::SharedString {
    match status.as_u16() {
        200 => "200".into(),
        204 => "204".into(),
        400 => "400".into(),
        401 => "401".into(),
        403 => "403".into(),
        404 => "404".into(),
        409 => "409".into(),
        413 => "413".into(),
        423 => "423".into(),
        500 => "500".into(),
        502 => "502".into(),
        503 => "503".into(),
        other => other.to_string().into(),
    }
}
