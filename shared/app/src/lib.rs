//! gitstate's wiring, shared by the standalone server, the wrapper and the Lambda handler:
//! the configuration model and the [`Registry`] that turns it into stores.

pub mod boundary;
pub mod config;
pub mod encryption;
pub mod registry;
pub mod settings;
pub mod tokens;
pub mod url_policy;

pub use config::{AuthMode, Config, ConfigError, EncryptionConfig, RepositoryConfig, TlsConfig};
pub use encryption::{
    backend_from_config, catalog_from_config, catalog_index_kms_arn, sealer_from_config,
    server_git_credentials,
};
pub use registry::Registry;
pub use settings::Settings;
