//! The [`StoreRegistry`] the HTTP layer asks: the caller check ([`Access`]) in front of the
//! repositories ([`Stores`]), both built from [`Config`].

use std::sync::Arc;

use gitstate_core::{Authenticated, RegistryError, StateStore, StoreError, StoreRegistry};
use gitstate_url::Credentials;

use crate::access::Access;
use crate::config::{Config, ConfigError};
use crate::credentials::ServerCredential;
use crate::stores::Stores;

pub use crate::stores::adhoc_name;

/// The caller check and the stores of one deployment.
#[derive(Debug)]
pub struct Registry {
    access: Access,
    stores: Stores,
}

impl Registry {
    /// Checks the configuration's start-time rules, then opens every configured repository
    /// (with none configured, the embedded default at `{data_dir}/default.git`) with
    /// `credentials`, the deployment's own git credential (dropped in pass-through mode).
    pub fn from_config(
        config: &Config,
        credentials: ServerCredential,
    ) -> Result<Self, ConfigError> {
        let access = Access::from_config(&config.auth)?;
        let verifies_clients = config
            .tls
            .as_ref()
            .is_some_and(|tls| tls.client_ca_file.is_some());
        if !config.auth.certificates.is_empty() && !verifies_clients {
            return Err(ConfigError::BadValue(
                "auth.certificate maps client certificates to callers, so the server must require them: set tls { client_ca_file = … } (--tls-client-ca)".into(),
            ));
        }
        let stores = Stores::from_config(config, credentials)?;
        Ok(Registry { access, stores })
    }

    /// The configured repository names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.stores.names()
    }
}

#[async_trait::async_trait]
impl StoreRegistry for Registry {
    fn names(&self) -> Vec<String> {
        self.stores.names()
    }

    async fn authenticate(
        &self,
        caller: Option<&Credentials>,
    ) -> Result<Authenticated, RegistryError> {
        let mut authenticated = self.access.authenticate(caller).await?;
        authenticated.holder = caller.map(|caller| self.access.holder(caller));
        Ok(authenticated)
    }

    fn admit_operator(&self, caller: Option<&Credentials>) -> Result<(), RegistryError> {
        self.access.admit_operator(caller)
    }

    fn certificate_caller(&self, subject: &[(String, String)]) -> Option<Credentials> {
        self.access.certificate_caller(subject)
    }

    async fn check_repositories(&self) -> Vec<(String, Result<(), StoreError>)> {
        self.stores.check_all().await
    }

    fn named(
        &self,
        name: &str,
        caller: Option<&Credentials>,
    ) -> Result<Arc<dyn StateStore>, RegistryError> {
        // Checked again (from memory) so that no path to a store skips the caller check.
        self.access.admit(caller)?;
        self.stores.named(name, caller)
    }

    fn adhoc(
        &self,
        url: &str,
        git_ref: &str,
        caller: Option<&Credentials>,
    ) -> Result<Arc<dyn StateStore>, RegistryError> {
        self.access.admit(caller)?;
        self.stores.adhoc(url, git_ref, caller)
    }
}
