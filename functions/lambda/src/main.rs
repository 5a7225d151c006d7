//! The Lambda entrypoint: the same router as `gitstate serve`, behind `lambda_http` (Function
//! URLs, API Gateway HTTP and REST APIs, ALB). Configuration comes from the environment
//! (`GITSTATE_REPOSITORY`, `GITSTATE_REF`, `GITSTATE_CONFIG`, `GIT_USERNAME`/`GIT_PASSWORD`, …)
//! and is read once per container; the git object cache lives in /tmp and is reused by warm
//! invocations.

use std::sync::Arc;

use clap::Parser;
use gitstate_app::{backend_from_config, Registry, Settings};
use gitstate_http::{router_recording_before_answering, AppState, RequestGuard};

/// Lambda's synchronous request payload limit.
const LAMBDA_PAYLOAD_LIMIT_MB: u32 = 6;

/// The Lambda reads only its environment.
#[derive(Parser, Debug)]
struct Environment {
    #[command(flatten)]
    settings: Settings,
}

/// What a write leaves of the invocation's remaining time for its answer: past the Lambda
/// deadline minus this, a write is answered 503 (nothing written) instead of being cut off.
const DEADLINE_MARGIN: std::time::Duration = std::time::Duration::from_secs(3);

/// Longest an answer waits for the catalog to record its change.
const CATALOG_FLUSH_LIMIT: std::time::Duration = std::time::Duration::from_secs(3);

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    // The git cache in /tmp holds states: files readable by this user only (gix creates them
    // with the process's umask).
    // SAFETY: umask only swaps the process's file mode creation mask; it cannot fail.
    unsafe {
        libc::umask(0o077);
    }
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_current_span(true)
        .without_time()
        .init();
    let environment = Environment::parse_from(["gitstate-lambda"]);
    let config = environment.settings.resolve()?;
    if config.repositories.is_empty() {
        return Err("no repository is configured: set GITSTATE_REPOSITORY=NAME=URL (a Lambda has no disk for the embedded default)".into());
    }
    // Init work once per container: AWS clients for KMS are built here, not per request.
    let mut backend = backend_from_config(&config).await?;
    backend.size_advice = Some(format!(
        "a Lambda request carries at most {LAMBDA_PAYLOAD_LIMIT_MB} MB, so states this large need the standalone server (gitstate serve); see README, \"On AWS Lambda\""
    ));
    // Team mode's own git credential may arrive KMS-encrypted (GIT_PASSWORD_KMS): decrypted here,
    // once per container.
    let credentials = gitstate_app::server_git_credentials().await?;
    let registry = Registry::from_config(&config, credentials)?;
    tracing::info!(repositories = ?registry.names(), "gitstate Lambda initialised");
    let catalog = gitstate_app::catalog_from_config(&config)
        .await
        .map(|c| c as Arc<dyn gitstate_core::Catalog>);
    // No Host rule unless names are configured (GITSTATE_ALLOWED_HOSTS): the names are AWS's or
    // a custom domain; the cross-site rules always apply.
    let state = AppState::new(Arc::new(registry), backend, catalog)
        .with_guard(RequestGuard::for_names(&config.allowed_hosts));
    // Lambda freezes the function once it has answered: the catalog's changes are recorded
    // before the answer leaves (bounded), not in the background as on the server.
    let app = router_recording_before_answering(state, CATALOG_FLUSH_LIMIT);
    let app = gitstate_http::with_request_deadline(
        app,
        |extensions| {
            extensions
                .get::<lambda_http::Context>()
                .map(|context| context.deadline())
        },
        DEADLINE_MARGIN,
    );
    lambda_http::run(app).await
}
