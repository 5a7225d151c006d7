//! gitstate's HTTP layer: the Terraform/OpenTofu `http` backend protocol (DESIGN §2) as one axum
//! router. It parses requests, calls [`gitstate_core::Backend`] on a store from the
//! [`StoreRegistry`], and maps results to status codes. It knows nothing of git.
//!
//! The same router is served by the standalone server (`axum::serve`) and by Lambda.

mod address;
mod error;
mod graph;
mod guard;
mod handlers;
mod inspect;
mod ready;
mod recorder;
mod request_metrics;
mod tfe;
mod ui;

use std::sync::Arc;

use axum::routing::{any, get};
use gitstate_core::{Backend, Catalog, StoreRegistry};

pub use address::Address;
/// The router type every entrypoint serves, and the request extensions a deadline is read from.
pub use axum::http::Extensions;
pub use axum::Router;
pub use error::ApiError;
pub use guard::RequestGuard;
pub use handlers::RequestDeadline;

/// What every request handler shares.
#[derive(Clone)]
pub struct AppState {
    /// Repository names (and allowed ad-hoc URLs) → stores.
    pub registry: Arc<dyn StoreRegistry>,
    /// Protocol policy (retries, maximum state size).
    pub backend: Backend,
    /// The catalog told about every successful change, off the request's path (`None`: off).
    pub catalog: Option<Arc<dyn Catalog>>,
    /// Records changes in the catalog in the order they were answered.
    recorder: Option<Arc<recorder::Recorder>>,
    /// The browser rules every request passes first (Host on loopback, cross-site changes).
    guard: Arc<RequestGuard>,
    /// Renders the metrics for `/_/metrics` (`None`: this runtime exports none).
    metrics: Option<MetricsRender>,
    /// The last `/_/ready` result.
    readiness: Arc<ready::Readiness>,
    /// The branch of a query-style address without `ref=` (`main`; terraform-backend-git's
    /// standalone server: `master`).
    pub query_default_ref: Arc<str>,
}

/// Renders the process's metrics as Prometheus text (the exporter's handle, installed by the
/// runtime; this crate records through the `metrics` facade only).
pub type MetricsRender = Arc<dyn Fn() -> String + Send + Sync>;

impl AppState {
    /// The state of a router over `registry` with `backend`'s policy, recording every change in
    /// `catalog` when there is one.
    pub fn new(
        registry: Arc<dyn StoreRegistry>,
        backend: Backend,
        catalog: Option<Arc<dyn Catalog>>,
    ) -> AppState {
        let recorder = catalog
            .clone()
            .map(|c| Arc::new(recorder::Recorder::new(c)));
        AppState {
            registry,
            backend,
            catalog,
            recorder,
            guard: Arc::new(RequestGuard::any_host()),
            metrics: None,
            readiness: Arc::default(),
            query_default_ref: Arc::from("main"),
        }
    }

    /// The same state with `git_ref` as the branch of query-style addresses without `ref=`.
    pub fn with_query_default_ref(mut self, git_ref: &str) -> AppState {
        self.query_default_ref = Arc::from(git_ref);
        self
    }

    /// The same state serving `render`'s text at `/_/metrics`.
    pub fn with_metrics(mut self, render: MetricsRender) -> AppState {
        self.metrics = Some(render);
        self
    }

    /// The same state with `guard`'s browser rules (by default: any `Host`, cross-site changes
    /// refused). A server on a loopback address passes [`RequestGuard::for_listener`].
    pub fn with_guard(mut self, guard: RequestGuard) -> AppState {
        self.guard = Arc::new(guard);
        self
    }

    /// Waits (at most `limit`) until the changes queued for the catalog are recorded; see
    /// [`recorder::Recorder::flush`]. Without a catalog, returns at once.
    pub async fn flush_catalog(&self, limit: std::time::Duration) {
        if let Some(recorder) = &self.recorder {
            recorder.flush(limit).await;
        }
    }
}

/// Builds the router: `/state/{repo}/{path}`, `/lock/{repo}/{path}`, the query-style address on
/// `/`, `/_/health`, `/_/ready`, and the read-only operational endpoints under `/_/` (states, history,
/// locks, catalog).
pub fn router(state: AppState) -> Router {
    tfe::routes(Router::new())
        .route("/_/health", get(handlers::health))
        .route("/_/metrics", get(handlers::metrics))
        .route("/_/ready", get(ready::ready))
        .route("/_/states/{repo}", get(inspect::states))
        .route("/_/history/{repo}/{*path}", get(inspect::history))
        .route("/_/locks/{repo}", get(inspect::locks))
        .route("/_/catalog/states", get(inspect::catalog_states))
        .route(
            "/_/catalog/audit/{repo}/{*path}",
            get(inspect::catalog_audit),
        )
        .route("/_/catalog/find", get(inspect::catalog_find))
        .route("/_/catalog/duplicates", get(inspect::catalog_duplicates))
        .route(
            "/_/catalog/links/{repo}/{*path}",
            get(inspect::catalog_links),
        )
        .route("/_/catalog/order/{repo}", get(inspect::catalog_order))
        .route("/_/ui", get(ui::index))
        .route("/_/ui/graph", get(graph::graph))
        .route("/_/ui/{repo}/{*path}", get(ui::state))
        .route("/state/{*rest}", any(handlers::state_address))
        .route("/lock/{*rest}", any(handlers::state_address))
        .route("/", any(handlers::state_address))
        .fallback(handlers::not_found)
        // Inside the request span: a panic is logged with the request id and answered 500.
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            handlers::panic_answer,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.guard.clone(),
            guard::guard,
        ))
        .layer(axum::middleware::from_fn(handlers::request_context))
        .with_state(state)
}

/// Work a runtime does after each answer (Lambda: writing the invocation's metrics).
pub type AfterAnswer = Arc<dyn Fn() + Send + Sync>;

/// `router` calling `after` once each answer is ready (after every layer inside has recorded
/// what it counts), before it leaves.
pub fn after_each_answer(router: Router, after: AfterAnswer) -> Router {
    router.layer(axum::middleware::from_fn(
        move |request: axum::extract::Request, next: axum::middleware::Next| {
            let after = after.clone();
            async move {
                let response = next.run(request).await;
                after();
                response
            }
        },
    ))
}

/// [`router`] whose answers wait (at most `limit`) until the catalog has recorded their change:
/// for runtimes that freeze the process once it has answered (Lambda), where background work
/// would wait for the next invocation or be lost with the container.
pub fn router_recording_before_answering(state: AppState, limit: std::time::Duration) -> Router {
    let flushing = state.clone();
    router(state).layer(axum::middleware::from_fn(
        move |request: axum::extract::Request, next: axum::middleware::Next| {
            let flushing = flushing.clone();
            async move {
                let response = next.run(request).await;
                flushing.flush_catalog(limit).await;
                response
            }
        },
    ))
}

/// `router` with a [`RequestDeadline`] on every request whose extensions yield an end time
/// (`end`), minus `margin`: on Lambda the invocation's deadline, so a write answers 503 before
/// the function is stopped (DESIGN §9.3).
pub fn with_request_deadline<F>(router: Router, end: F, margin: std::time::Duration) -> Router
where
    F: Fn(&axum::http::Extensions) -> Option<std::time::SystemTime> + Clone + Send + Sync + 'static,
{
    router.layer(axum::middleware::from_fn(
        move |mut request: axum::extract::Request, next: axum::middleware::Next| {
            let end = end.clone();
            async move {
                // An end already past on arrival is no real deadline (an emulator without one
                // reports 0): ignored, the write budget alone applies then.
                let left = end(request.extensions())
                    .and_then(|end| end.duration_since(std::time::SystemTime::now()).ok());
                if let Some(left) = left {
                    let left = left.saturating_sub(margin);
                    request
                        .extensions_mut()
                        .insert(RequestDeadline(std::time::Instant::now() + left));
                }
                next.run(request).await
            }
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use gitstate_core::{RegistryError, StateStore};
    use gitstate_url::Credentials;
    use tower::ServiceExt;

    /// A registry with a bug: every lookup panics.
    struct Panicking;

    impl StoreRegistry for Panicking {
        fn named(
            &self,
            _: &str,
            _: Option<&Credentials>,
        ) -> Result<Arc<dyn StateStore>, RegistryError> {
            panic!("a bug in the registry");
        }

        fn adhoc(
            &self,
            _: &str,
            _: &str,
            _: Option<&Credentials>,
        ) -> Result<Arc<dyn StateStore>, RegistryError> {
            panic!("a bug in the registry");
        }
    }

    #[tokio::test]
    async fn a_panicking_handler_is_a_500_with_a_sentence_and_a_request_id() {
        let app = router(AppState::new(Arc::new(Panicking), Backend::default(), None));
        let response = app
            .oneshot(
                Request::builder()
                    .method("LOCK")
                    .uri("/state/default/prod.tfstate")
                    .body(Body::from(r#"{"ID":"x"}"#))
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let id = response.headers()["x-request-id"]
            .to_str()
            .unwrap()
            .to_owned();
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["request_id"], id.as_str(), "{json}");
        let sentence = json["error"].as_str().unwrap();
        assert!(sentence.contains("bug"), "{sentence}");
        assert!(sentence.contains(&id), "{sentence}");
        assert!(!sentence.contains("a bug in the registry"), "{sentence}");
    }

    /// A registry whose repository `b` does not answer; counts its checks.
    #[derive(Default)]
    struct HalfDown {
        checks: std::sync::atomic::AtomicUsize,
    }

    #[async_trait::async_trait]
    impl StoreRegistry for HalfDown {
        fn named(
            &self,
            name: &str,
            _: Option<&Credentials>,
        ) -> Result<Arc<dyn StateStore>, RegistryError> {
            Err(RegistryError::UnknownRepository(name.to_owned()))
        }

        fn adhoc(
            &self,
            url: &str,
            _: &str,
            _: Option<&Credentials>,
        ) -> Result<Arc<dyn StateStore>, RegistryError> {
            Err(RegistryError::UnknownRepository(url.to_owned()))
        }

        async fn check_repositories(&self) -> Vec<(String, Result<(), gitstate_core::StoreError>)> {
            self.checks
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            vec![
                ("a".to_owned(), Ok(())),
                (
                    "b".to_owned(),
                    Err(gitstate_core::StoreError::Unavailable(
                        "git.example did not answer within 5 s".into(),
                    )),
                ),
            ]
        }
    }

    /// `/_/ready` is 503 while a repository does not answer, an error answer like any other
    /// (one sentence and the request id) naming it to an operator (server mode: anyone who
    /// reached the server), its reason left to the log; the repositories are asked once however
    /// many probes arrive within the cache time.
    #[tokio::test]
    async fn ready_is_503_while_a_repository_does_not_answer_and_checks_are_cached() {
        let registry = Arc::new(HalfDown::default());
        let app = router(AppState::new(registry.clone(), Backend::default(), None));
        for _ in 0..3 {
            let response = app
                .clone()
                .oneshot(request("GET", "/_/ready", "", false))
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(response.headers()["retry-after"], "10");
            let id = response.headers()["x-request-id"]
                .to_str()
                .unwrap()
                .to_owned();
            let body = axum::body::to_bytes(response.into_body(), 1 << 16)
                .await
                .unwrap();
            let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(json["request_id"], id.as_str(), "{json}");
            assert_eq!(json.as_object().map(|o| o.len()), Some(2), "{json}");
            let sentence = json["error"].as_str().unwrap_or_default();
            assert!(
                sentence
                    .starts_with("gitstate is not ready, because the repository b did not answer"),
                "{sentence}"
            );
            assert!(!sentence.contains("git.example"), "{sentence}");
        }
        assert_eq!(registry.checks.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    /// In team mode an anonymous probe gets the status only; a team token also gets each
    /// repository's result.
    #[tokio::test]
    async fn ready_shows_repositories_only_to_a_caller_team_mode_admits() {
        let registry = gitstate_core::fakes::MemoryRegistry::team(&["default"], "team-token");
        let app = router(AppState::new(registry, Backend::default(), None));
        let (status, body) = answer(&app, request("GET", "/_/ready", "", false)).await;
        let json: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            (status, json["status"].as_str()),
            (StatusCode::OK, Some("ready"))
        );
        assert!(json.get("repositories").is_none(), "{body}");
        let (status, body) = answer(&app, request("GET", "/_/ready", "", true)).await;
        let json: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(status, StatusCode::OK);
        assert!(json["repositories"].is_object(), "{body}");
    }

    /// Scoped tokens (DESIGN §6): outputs-only reads get the state without its resources and
    /// say so; read-only reads get it whole; neither writes or locks; a path limit is a 403
    /// outside it; and a limited token reaches nothing under `/_/` that spans states.
    #[tokio::test]
    async fn scoped_tokens_read_what_their_scope_says_and_nothing_more() {
        use gitstate_core::{Rights, Scope};
        let outputs = Scope::new(Rights::OutputsOnly, &["teams/a/**".into()]).unwrap();
        let read_only = Scope::new(Rights::ReadOnly, &[]).unwrap();
        let registry = gitstate_core::fakes::MemoryRegistry::team_with_scoped(
            &["default"],
            "team-token",
            &[("outputs-token", outputs), ("read-token", read_only)],
        );
        let app = router(AppState::new(registry, Backend::default(), None));
        let url = "/state/default/teams/a/app.tfstate";
        let state = r#"{"version":4,"serial":1,"lineage":"l","outputs":{"endpoint":{"value":"db:5432","type":"string"}},"resources":[{"mode":"managed","type":"terraform_data","name":"db","provider":"provider[\"terraform.io/builtin/terraform\"]","instances":[{"schema_version":0,"attributes":{"input":"resource-secret"}}]}]}"#;
        let (status, body) = answer(&app, request("POST", url, state, true)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let bearer = |method: &str, uri: &str, body: &str, token: &str| {
            Request::builder()
                .method(method)
                .uri(uri)
                .header("authorization", format!("Bearer {token}"))
                .body(Body::from(body.to_owned()))
                .unwrap()
        };

        let response = app
            .clone()
            .oneshot(bearer("GET", url, "", "outputs-token"))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["x-gitstate-outputs-only"], "true");
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["outputs"]["endpoint"]["value"], "db:5432");
        assert_eq!(json["resources"], serde_json::json!([]));
        assert!(!String::from_utf8_lossy(&body).contains("resource-secret"));

        for (method, uri, body, token) in [
            ("POST", url, state, "outputs-token"),
            ("LOCK", url, r#"{"ID":"x"}"#, "outputs-token"),
            ("DELETE", url, "", "outputs-token"),
            (
                "GET",
                "/state/default/teams/b/app.tfstate",
                "",
                "outputs-token",
            ),
            ("GET", "/_/states/default", "", "outputs-token"),
            (
                "GET",
                "/_/history/default/teams/a/app.tfstate",
                "",
                "outputs-token",
            ),
            ("GET", "/_/ui", "", "outputs-token"),
            (
                "GET",
                "/_/catalog/links/default/teams/a/app.tfstate",
                "",
                "outputs-token",
            ),
            ("GET", "/_/catalog/order/default", "", "outputs-token"),
            ("POST", url, state, "read-token"),
            ("UNLOCK", url, r#"{"ID":"x"}"#, "read-token"),
        ] {
            let (status, sentence) = answer(&app, bearer(method, uri, body, token)).await;
            assert_eq!(
                status,
                StatusCode::FORBIDDEN,
                "{method} {uri} with {token}: {sentence}"
            );
            assert!(sentence.contains("this credential"), "{sentence}");
        }
        let (status, body) = answer(&app, bearer("GET", "/_/ready", "", "outputs-token")).await;
        assert_eq!(status, StatusCode::OK);
        assert!(!body.contains("repositories"), "{body}");

        let response = app
            .clone()
            .oneshot(bearer("GET", url, "", "read-token"))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert!(!response.headers().contains_key("x-gitstate-outputs-only"));
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        assert!(String::from_utf8_lossy(&body).contains("resource-secret"));
        let (status, body) =
            answer(&app, bearer("GET", "/_/states/default", "", "read-token")).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert!(body.contains("teams/a/app.tfstate"), "{body}");
    }

    /// A request with the team token as basic-auth password (`token`) or none.
    fn request(method: &str, uri: &str, body: &str, token: bool) -> Request<Body> {
        let mut builder = Request::builder().method(method).uri(uri);
        if token {
            // "bot:team-token"
            builder = builder.header("authorization", "Basic Ym90OnRlYW0tdG9rZW4=");
        }
        builder.body(Body::from(body.to_owned())).unwrap()
    }

    async fn answer(app: &Router, request: Request<Body>) -> (StatusCode, String) {
        let response = app.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    /// Every state request is counted by operation and status (with its latency), 423s also as
    /// lock conflicts, locks as acquisitions and releases; `/_/metrics` serves the text only to
    /// callers the API admits (an anonymous caller of a team deployment gets 401).
    #[test]
    fn requests_are_counted_by_operation_and_status_and_metrics_need_the_apis_auth() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let registry = gitstate_core::fakes::MemoryRegistry::team(&["default"], "team-token");
        let state = AppState::new(registry, Backend::default(), None)
            .with_metrics(Arc::new(move || handle.render()));
        let app = router(state);
        let url = "/state/default/prod.tfstate";
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (text, anonymous) = metrics::with_local_recorder(&recorder, || {
            runtime.block_on(async {
                let steps = [
                    (
                        "LOCK",
                        url.to_owned(),
                        r#"{"ID":"a","Who":"me","Created":"2020-01-01T00:00:00Z"}"#,
                        200,
                    ),
                    ("GET", url.to_owned(), "", 204),
                    (
                        "POST",
                        format!("{url}?ID=a"),
                        r#"{"version":4,"serial":1,"lineage":"l","outputs":{},"resources":[]}"#,
                        200,
                    ),
                    ("GET", url.to_owned(), "", 200),
                    ("LOCK", url.to_owned(), r#"{"ID":"b","Who":"you"}"#, 423),
                    ("UNLOCK", url.to_owned(), r#"{"ID":"a","Who":"me"}"#, 200),
                ];
                for (method, uri, body, expected) in steps {
                    let (status, text) = answer(&app, request(method, &uri, body, true)).await;
                    assert_eq!(status.as_u16(), expected, "{method} {uri}: {text}");
                }
                let (status, _) = answer(&app, request("GET", url, "", false)).await;
                assert_eq!(status, StatusCode::UNAUTHORIZED, "an anonymous GET");
                let anonymous = app
                    .clone()
                    .oneshot(request("GET", "/_/metrics", "", false))
                    .await
                    .unwrap();
                let (status, text) = answer(&app, request("GET", "/_/metrics", "", true)).await;
                assert_eq!(status, StatusCode::OK, "{text}");
                (text, anonymous)
            })
        });
        assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
        assert!(anonymous
            .headers()
            .contains_key(axum::http::header::WWW_AUTHENTICATE));
        for line in [
            r#"gitstate_requests_total{operation="LOCK",status="200"} 1"#,
            r#"gitstate_requests_total{operation="LOCK",status="423"} 1"#,
            r#"gitstate_requests_total{operation="GET",status="204"} 1"#,
            r#"gitstate_requests_total{operation="GET",status="200"} 1"#,
            r#"gitstate_requests_total{operation="GET",status="401"} 1"#,
            r#"gitstate_requests_total{operation="POST",status="200"} 1"#,
            r#"gitstate_requests_total{operation="UNLOCK",status="200"} 1"#,
            r#"gitstate_request_duration_seconds_count{operation="POST",status="200"} 1"#,
            r#"gitstate_lock_conflicts_total{operation="LOCK"} 1"#,
            "gitstate_lock_acquisitions_total 1",
            "gitstate_lock_releases_total 1",
            "gitstate_locks_held 0",
            r#"gitstate_lock_age_seconds_count{event="conflict"} 1"#,
            r#"gitstate_lock_age_seconds_count{event="release"} 1"#,
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        // The refusing lock was created in 2020: its age is years.
        let conflict_age: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix(r#"gitstate_lock_age_seconds_sum{event="conflict"} "#))
            .and_then(|v| v.parse().ok())
            .unwrap_or_default();
        assert!(conflict_age > 1.5e8, "{conflict_age}\n{text}");
        assert!(
            !text.contains("prod.tfstate") && !text.contains("default"),
            "no path or repository in a label:\n{text}"
        );
    }

    /// Pass-through mode cannot check a scraper: 403 with a sentence saying where metrics are
    /// served; a runtime without an exporter answers 404.
    #[tokio::test]
    async fn metrics_are_refused_in_passthrough_mode_and_absent_without_an_exporter() {
        use gitstate_core::fakes::MemoryRegistry;
        let passthrough = router(
            AppState::new(
                MemoryRegistry::passthrough(&["default"]),
                Backend::default(),
                None,
            )
            .with_metrics(Arc::new(String::new)),
        );
        let (status, text) = answer(&passthrough, request("GET", "/_/metrics", "", true)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{text}");
        assert!(text.contains("team and server mode"), "{text}");
        let without = router(AppState::new(
            MemoryRegistry::with(&["default"]),
            Backend::default(),
            None,
        ));
        let (status, text) = answer(&without, request("GET", "/_/metrics", "", false)).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{text}");
    }
}
