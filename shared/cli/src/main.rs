//! The `gitstate` command: `gitstate serve` runs the Terraform http backend on a git repository
//! (the embedded default `./.gitstate/default.git` when none is configured).

use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};
use gitstate_app::config::git_credentials_from_env;
use gitstate_app::{backend_from_config, Registry, Settings};
use gitstate_http::{router, AppState};

/// Terraform/OpenTofu remote state in git, with locking.
#[derive(Parser, Debug)]
#[command(name = "gitstate", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve the http backend.
    ///
    /// With no repository configured, states go to the embedded bare repository
    /// ./.gitstate/default.git, named "default":
    ///
    ///   gitstate serve
    ///   # terraform { backend "http" { address = "http://127.0.0.1:6061/state/default/prod.tfstate"
    ///   #   lock_address = "…same…"  unlock_address = "…same…" } }
    ///
    /// A remote repository (credentials from GIT_USERNAME + GIT_PASSWORD, or GITHUB_TOKEN):
    ///
    ///   gitstate serve --repository default=https://github.com/acme/tf-state.git
    #[command(verbatim_doc_comment)]
    Serve(ServeArgs),
}

#[derive(Args, Debug)]
struct ServeArgs {
    #[command(flatten)]
    settings: Settings,
    /// Log format: text or json.
    #[arg(long, env = "GITSTATE_LOG_FORMAT", default_value = "text")]
    log_format: String,
}

fn init_logging(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
    tracing::info!("shutting down: finishing requests in flight");
}

async fn serve(args: ServeArgs) -> Result<(), String> {
    let config = args.settings.resolve().map_err(|e| e.to_string())?;
    // Encryption first: an enforced configuration without a key must not create a repository.
    let backend = backend_from_config(&config)
        .await
        .map_err(|e| e.to_string())?;
    let credentials = git_credentials_from_env().map_err(|e| e.to_string())?;
    let registry = Registry::from_config(&config, credentials).map_err(|e| e.to_string())?;
    let names = registry.names();
    let app = router(AppState {
        registry: Arc::new(registry),
        backend,
    });
    let listener = tokio::net::TcpListener::bind(&config.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
    let local = listener
        .local_addr()
        .map_err(|e| format!("cannot read the listening address: {e}"))?;
    tracing::info!(address = %local, repositories = ?names, "gitstate is serving");
    eprintln!(
        "gitstate listening on http://{local} (repositories: {}); example address: http://{local}/state/{}/prod.tfstate",
        names.join(", "),
        names.first().map(String::as_str).unwrap_or("default"),
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await
        .map_err(|e| format!("the server failed: {e}"))
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => {
            init_logging(&args.log_format);
            match serve(args).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(message) => {
                    eprintln!("gitstate: {message}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
