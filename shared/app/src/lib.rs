//! gitstate's wiring, shared by the standalone server, the wrapper and the Lambda handler: the
//! configuration model, and [`Deployment::build`], the one place that turns it into what they
//! serve (the caller check in [`access`], the stores in [`stores`], sealing, the catalog).
//!
//! It never decides a protocol rule (gitstate-core does) and never speaks git or HTTP itself: it
//! reads configuration and assembles what the entrypoints serve.

pub mod access;
mod blocks;
pub mod boundary;
pub mod catalog;
pub mod compat;
pub mod config;
pub mod credentials;
mod identity;
pub mod metrics;
pub mod oidc;
pub mod registry;
pub mod run_key;
pub mod sealing;
pub mod settings;
pub mod setup;
pub mod stores;
pub mod tokens;
pub mod users;

pub use catalog::{catalog_from_config, catalog_index_kms_arn};
pub use config::{AuthMode, Config, ConfigError, EncryptionConfig, RepositoryConfig, TlsConfig};
pub use credentials::server_git_credentials;
pub use registry::Registry;
pub use sealing::{backend_from_config, sealer_from_config};
pub use settings::Settings;
pub use setup::{Deployment, Runtime, SetupError};
