//! The Lambda entrypoint: the router `Deployment::lambda_router` assembles, behind `lambda_http`
//! (Function URLs, API Gateway, ALB). The environment is read once per container; the git cache
//! in /tmp is reused by warm invocations.

use std::time::Duration;

use clap::Parser;
use gitstate_app::{Deployment, Runtime, Settings};

#[derive(Parser, Debug)]
struct Environment {
    #[command(flatten)]
    settings: Settings,
}

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    // SAFETY: umask only swaps the file mode creation mask (the cache in /tmp holds states).
    unsafe { libc::umask(0o077) };
    // JSON lines for CloudWatch, which adds the time.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_current_span(true)
        .without_time()
        .init();
    let config = Environment::parse_from(["gitstate-lambda"])
        .settings
        .resolve()?;
    // Init work once per container (KMS clients, the decrypted git credential).
    let deployment = Deployment::build(&config, Runtime::Lambda).await?;
    tracing::info!(repositories = ?deployment.registry.names(), "gitstate Lambda initialised");
    // Writes answered 503 3 s before the deadline; catalog changes recorded within 3 s.
    let deadline =
        |e: &gitstate_http::Extensions| e.get::<lambda_http::Context>().map(|c| c.deadline());
    let app = deployment.lambda_router(deadline, Duration::from_secs(3), Duration::from_secs(3));
    lambda_http::run(app).await
}
