//! `GET /_/ready`: readiness, apart from liveness (`/_/health`). Each configured repository
//! must answer a ref advertisement with the deployment's credential
//! ([`StoreRegistry::check_repositories`]). The result is kept for [`READY_TTL`], and one check
//! runs at a time however many probes arrive, so an anonymous caller cannot make this process
//! call its git servers more often than that.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use gitstate_core::StoreRegistry;

use crate::error::{Advice, ApiError};
use crate::handlers::authenticated_caller;
use crate::AppState;

/// How long a readiness result is served before the repositories are asked again.
pub const READY_TTL: Duration = Duration::from_secs(10);

/// One check's outcome: each repository by name, `None` when it answered, else why not.
type Report = Vec<(String, Option<String>)>;

/// The last readiness result, and the lock that makes checks run one at a time.
#[derive(Default)]
pub struct Readiness {
    last: tokio::sync::Mutex<Option<(Instant, Arc<Report>)>>,
}

impl Readiness {
    /// The result at most [`READY_TTL`] old, checking again when it is older, and its age.
    async fn report(&self, registry: &dyn StoreRegistry) -> (Arc<Report>, Duration) {
        let mut last = self.last.lock().await;
        if let Some((at, report)) = last.as_ref() {
            if at.elapsed() < READY_TTL {
                return (report.clone(), at.elapsed());
            }
        }
        let report: Arc<Report> = Arc::new(
            registry
                .check_repositories()
                .await
                .into_iter()
                .map(|(name, checked)| (name, checked.err().map(|e| e.to_string())))
                .collect(),
        );
        *last = Some((Instant::now(), report.clone()));
        (report, Duration::ZERO)
    }
}

/// `GET /_/ready`: 200 when every configured repository answered, else 503 with `Retry-After`,
/// an error answer like any other (one sentence and the request id; each repository's reason is
/// logged under that id). Whoever may read what spans repositories (as for `/_/metrics`: a team
/// token or user in team mode, anyone in server mode) also gets each repository's name (with
/// 200: `"ok"`, with 503: in the sentence); other callers, such as an anonymous load balancer
/// probe, get the status only.
pub async fn ready(State(app): State<AppState>, headers: HeaderMap) -> Response {
    let (report, age) = app.readiness.report(app.registry.as_ref()).await;
    let failed: Vec<(&str, &str)> = report
        .iter()
        .filter_map(|(name, failed)| Some((name.as_str(), failed.as_deref()?)))
        .collect();
    let operator = operator(&app, &headers).await;
    let mut response = if failed.is_empty() {
        let mut body = serde_json::json!({
            "status": "ready",
            "checked_seconds_ago": age.as_secs(),
        });
        if operator {
            body["repositories"] = report
                .iter()
                .map(|(name, _)| (name.clone(), serde_json::Value::from("ok")))
                .collect::<serde_json::Map<_, _>>()
                .into();
        }
        (StatusCode::OK, axum::Json(body)).into_response()
    } else {
        not_ready(&failed, age, operator).into_response()
    };
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if !failed.is_empty() {
        let retry = READY_TTL.as_secs().to_string();
        if let Ok(value) = HeaderValue::from_str(&retry) {
            headers.insert(header::RETRY_AFTER, value);
        }
    }
    response
}

/// The 503 of a check some repositories (`failed`: name and why) did not pass `age` ago; their
/// names in the sentence for an `operator`.
fn not_ready(failed: &[(&str, &str)], age: Duration, operator: bool) -> ApiError {
    let which = match (operator, failed) {
        (false, _) => "a configured repository did not answer its check".to_owned(),
        (true, [(name, _)]) => format!("the repository {name} did not answer its check"),
        (true, _) => format!(
            "the repositories {} did not answer their check",
            failed
                .iter()
                .map(|(name, _)| *name)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let cause = failed
        .iter()
        .map(|(name, why)| format!("repository {name}: {why}"))
        .collect::<Vec<_>>()
        .join("; ");
    ApiError::failed(
        StatusCode::SERVICE_UNAVAILABLE,
        format!(
            "gitstate is not ready, because {which} (checked {} s ago)",
            age.as_secs()
        ),
        Advice::SeeLog,
        format!("not ready: {cause}"),
    )
}

/// Whether the caller may see each repository's result: an operator's credential, checked as
/// every request across states is ([`authenticated_caller`]).
async fn operator(app: &AppState, headers: &HeaderMap) -> bool {
    match authenticated_caller(app, headers).await {
        Ok(credentials) => app.registry.admit_operator(credentials.as_ref()).is_ok(),
        Err(_) => false,
    }
}
