//! The one place that assembles a deployment from its [`Config`]: `gitstate serve`, `gitstate
//! wrap`, the operator commands and the Lambda handler all call [`Deployment::build`], and only
//! translate its result to their runtime (a listener, a child process, `lambda_http`).
//!
//! The order is part of the contract:
//! 1. the runtime's own rules (a Lambda has no disk for the embedded default; operator commands
//!    use the operator's credentials whatever `auth.mode` says);
//! 2. **encryption first**: an enforced configuration without a key stops here, before any
//!    repository (the embedded default included) is created or any remote is contacted;
//! 3. the deployment's own git credential (possibly KMS-encrypted, decrypted once);
//! 4. the registry: the start-time security rules (refs, pass-through URLs, team tokens), then
//!    every configured repository is opened;
//! 5. the catalog (optional; its failures never fail a request);
//! 6. the metrics exporter (`serve` and `wrap`: Prometheus at `/_/metrics`).

use std::sync::Arc;

use gitstate_core::{Backend, Catalog};
use gitstate_http::{AppState, RequestGuard};

use crate::config::{AuthMode, Config, ConfigError};
use crate::registry::Registry;

/// Lambda's synchronous request payload limit, in MB.
pub const LAMBDA_PAYLOAD_LIMIT_MB: u32 = 6;

/// Where the deployment runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    /// `gitstate serve`.
    Server,
    /// `gitstate wrap … -- terraform …`.
    Wrap,
    /// The Lambda handler.
    Lambda,
    /// Operator commands (`history`, `restore`, `locks`, `unlock`, `catalog`), in-process with
    /// the operator's own git credentials.
    Admin,
}

/// Why a deployment could not be assembled. Start-up errors only: request errors are
/// [`gitstate_core::RegistryError`] and [`gitstate_core::BackendError`].
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A value of the configuration is refused (the sentence names it).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A Lambda with no repository configured.
    #[error("no repository is configured: set GITSTATE_REPOSITORY=NAME=URL (a Lambda has no disk for the embedded default)")]
    NoRepository,
}

/// What a runtime serves: the protocol service, the repositories and the catalog.
pub struct Deployment {
    /// The configuration it was built from (after the runtime's rules).
    pub config: Config,
    /// The protocol service (limits, sealer, retry budget).
    pub backend: Backend,
    /// Callers and repositories.
    pub registry: Arc<Registry>,
    /// The catalog, when one is configured.
    pub catalog: Option<Arc<dyn Catalog>>,
    /// The Prometheus exporter (`serve` and `wrap` only; see [`crate::metrics`]).
    pub metrics: Option<crate::metrics::Prometheus>,
    /// The Embedded Metric Format exporter (Lambda only; see [`crate::metrics`]).
    pub emf: Option<crate::metrics::Emf>,
}

impl Deployment {
    /// Assembles the deployment `config` describes for `runtime`, in the order the module
    /// documentation gives.
    pub async fn build(config: &Config, runtime: Runtime) -> Result<Deployment, SetupError> {
        let mut config = config.clone();
        match runtime {
            Runtime::Admin => config.auth.mode = AuthMode::Server,
            Runtime::Lambda if config.repositories.is_empty() => {
                return Err(SetupError::NoRepository)
            }
            _ => {}
        }
        let mut backend = crate::sealing::backend_from_config(&config).await?;
        if runtime == Runtime::Lambda {
            backend.size_advice = Some(format!(
                "a Lambda request carries at most {LAMBDA_PAYLOAD_LIMIT_MB} MB, so states this large need the standalone server (gitstate serve); see README, \"On AWS Lambda\""
            ));
        }
        let credentials = crate::credentials::server_git_credentials().await?;
        let registry = Arc::new(Registry::from_config(&config, credentials)?);
        let catalog = crate::catalog::catalog_from_config(&config)
            .await
            .map(|c| c as Arc<dyn Catalog>);
        // 6. the metrics exporter: Prometheus where a server answers `/_/metrics`, EMF lines on
        // Lambda.
        let (metrics, emf) = match runtime {
            Runtime::Server | Runtime::Wrap => (crate::metrics::prometheus(), None),
            Runtime::Lambda => (None, crate::metrics::emf()),
            Runtime::Admin => (None, None),
        };
        Ok(Deployment {
            config,
            backend,
            registry,
            catalog,
            metrics,
            emf,
        })
    }

    /// What runs after each answer (Lambda: the EMF metrics of the invocation go to stdout), if
    /// anything.
    pub fn after_each_answer(&self) -> Option<gitstate_http::AfterAnswer> {
        let collector = self.emf?;
        Some(Arc::new(move || crate::metrics::flush_emf(collector)))
    }

    /// What the Lambda function serves: the router with the browser rules (a Host rule only when
    /// names are configured, `GITSTATE_ALLOWED_HOSTS`: the names are AWS's or a custom domain),
    /// the catalog's changes recorded before each answer leaves (Lambda freezes the function once
    /// it has answered; at most `catalog_limit`), writes answered 503 `deadline_margin` before
    /// the invocation's deadline (`deadline_of` reads it from a request), and the invocation's
    /// EMF metrics after each answer.
    pub fn lambda_router<F>(
        &self,
        deadline_of: F,
        deadline_margin: std::time::Duration,
        catalog_limit: std::time::Duration,
    ) -> gitstate_http::Router
    where
        F: Fn(&gitstate_http::Extensions) -> Option<std::time::SystemTime>
            + Clone
            + Send
            + Sync
            + 'static,
    {
        let state = self.app_state(RequestGuard::for_names(&self.config.allowed_hosts));
        let app = gitstate_http::router_recording_before_answering(state, catalog_limit);
        let app = gitstate_http::with_request_deadline(app, deadline_of, deadline_margin);
        match self.after_each_answer() {
            Some(after) => gitstate_http::after_each_answer(app, after),
            None => app,
        }
    }

    /// The state of the HTTP router serving this deployment behind `guard`'s browser rules.
    pub fn app_state(&self, guard: RequestGuard) -> AppState {
        let state = AppState::new(
            self.registry.clone(),
            self.backend.clone(),
            self.catalog.clone(),
        )
        .with_guard(guard)
        .with_query_default_ref(&self.config.query_default_ref);
        match &self.metrics {
            Some(handle) => state.with_metrics(crate::metrics::render(handle)),
            None => state,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_in(dir: &std::path::Path) -> Config {
        Config {
            data_dir: dir.join("data"),
            cache_dir: dir.join("cache"),
            ..Config::default()
        }
    }

    #[tokio::test]
    async fn encryption_is_checked_before_any_repository_is_created() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut config = config_in(dir.path());
        config.encryption.enforced = true;
        let refused = Deployment::build(&config, Runtime::Server).await;
        assert!(
            matches!(&refused, Err(SetupError::Config(e)) if e.to_string().contains("no key is configured")),
            "{:?}",
            refused.err()
        );
        assert!(
            !config.data_dir.join("default.git").exists(),
            "the embedded default must not be created by a deployment that does not start"
        );
        config.encryption.enforced = false;
        let deployment = Deployment::build(&config, Runtime::Server)
            .await
            .expect("the embedded default");
        assert_eq!(deployment.registry.names(), ["default"]);
        assert!(config.data_dir.join("default.git").exists());
    }

    #[tokio::test]
    async fn a_lambda_needs_a_configured_repository() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let refused = Deployment::build(&config_in(dir.path()), Runtime::Lambda).await;
        assert!(matches!(refused, Err(SetupError::NoRepository)));
        assert!(!dir.path().join("data").exists());
    }

    #[tokio::test]
    async fn operator_commands_use_the_operators_credentials_whatever_the_auth_mode() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut config = config_in(dir.path());
        config.auth.mode = AuthMode::Team;
        assert!(
            Deployment::build(&config, Runtime::Server).await.is_err(),
            "team mode without a token does not serve"
        );
        let admin = Deployment::build(&config, Runtime::Admin)
            .await
            .expect("operator commands do not need a team token");
        assert_eq!(admin.config.auth.mode, AuthMode::Server);
    }
}
