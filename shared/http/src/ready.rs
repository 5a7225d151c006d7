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

use crate::handlers::caller_credentials;
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
        for (name, failed) in report.iter() {
            if let Some(why) = failed {
                tracing::warn!(repository = %name, error = %why, "not ready");
            }
        }
        *last = Some((Instant::now(), report.clone()));
        (report, Duration::ZERO)
    }
}

/// `GET /_/ready`: 200 when every configured repository answered, else 503 with `Retry-After`.
/// Whoever may read what spans repositories (as for `/_/metrics`: a team token or user in team
/// mode, anyone in server mode) also gets each repository's result; other callers, such as an
/// anonymous load balancer probe, get the status only.
pub async fn ready(State(app): State<AppState>, headers: HeaderMap) -> Response {
    let (report, age) = app.readiness.report(app.registry.as_ref()).await;
    let ready = report.iter().all(|(_, failed)| failed.is_none());
    let mut body = serde_json::json!({
        "status": if ready { "ready" } else { "not ready" },
        "checked_seconds_ago": age.as_secs(),
    });
    if operator(&app, &headers).await {
        body["repositories"] = report
            .iter()
            .map(|(name, failed)| {
                let result = failed.clone().unwrap_or_else(|| "ok".to_owned());
                (name.clone(), serde_json::Value::String(result))
            })
            .collect::<serde_json::Map<_, _>>()
            .into();
    }
    let status = match ready {
        true => StatusCode::OK,
        false => StatusCode::SERVICE_UNAVAILABLE,
    };
    let mut response = (status, axum::Json(body)).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if !ready {
        let retry = READY_TTL.as_secs().to_string();
        if let Ok(value) = HeaderValue::from_str(&retry) {
            headers.insert(header::RETRY_AFTER, value);
        }
    }
    response
}

/// Whether the caller may see each repository's result.
async fn operator(app: &AppState, headers: &HeaderMap) -> bool {
    let Ok(credentials) = caller_credentials(headers) else {
        return false;
    };
    app.registry
        .authenticate(credentials.as_ref())
        .await
        .is_ok_and(|caller| !caller.expired() && caller.scope.admit_across_states().is_ok())
        && app.registry.admit_operator(credentials.as_ref()).is_ok()
}
