//! The Lambda entrypoint: the same router as `gitstate serve`, behind `lambda_http` (Function
//! URLs, API Gateway HTTP and REST APIs, ALB). Configuration comes from the environment
//! (`GITSTATE_REPOSITORY`, `GITSTATE_REF`, `GITSTATE_CONFIG`, `GIT_USERNAME`/`GIT_PASSWORD`, …)
//! and is read once per container; the git object cache lives in /tmp and is reused by warm
//! invocations.

use clap::Parser;
use gitstate_app::{Deployment, Runtime, Settings};
use gitstate_http::{router_recording_before_answering, RequestGuard};

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
    init_json_logging();
    let config = Environment::parse_from(["gitstate-lambda"])
        .settings
        .resolve()?;
    // Init work once per container (KMS clients, the decrypted git credential), not per request.
    let deployment = Deployment::build(&config, Runtime::Lambda).await?;
    tracing::info!(repositories = ?deployment.registry.names(), "gitstate Lambda initialised");
    // No Host rule unless names are configured (GITSTATE_ALLOWED_HOSTS): the names are AWS's or
    // a custom domain; the cross-site rules always apply.
    let state = deployment.app_state(RequestGuard::for_names(&config.allowed_hosts));
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
    // The invocation's metrics, as one EMF line on stdout once it is answered.
    let app = match deployment.after_each_answer() {
        Some(after) => gitstate_http::after_each_answer(app, after),
        None => app,
    };
    lambda_http::run(app).await
}

/// JSON log lines (CloudWatch parses them), `RUST_LOG` or `info`; no time (CloudWatch adds it).
fn init_json_logging() {
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_current_span(true)
        .without_time()
        .init();
}
