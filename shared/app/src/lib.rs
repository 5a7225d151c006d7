//! gitstate's wiring, shared by the standalone server, the wrapper and the Lambda handler:
//! the configuration model and the [`Registry`] that turns it into stores.

pub mod config;
pub mod registry;
pub mod settings;
pub mod tokens;
pub mod url_policy;

pub use config::{AuthMode, Config, ConfigError, RepositoryConfig};
pub use registry::Registry;
pub use settings::Settings;
