//! The fake [`StoreRegistry`]: named repositories of [`super::MemoryStore`]s, and team tokens.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use gitstate_url::Credentials;

use super::MemoryStore;
use crate::scope::Scope;
use crate::store::{Authenticated, RegistryError, StateStore, StoreRegistry};

/// A [`StoreRegistry`] of named [`MemoryStore`]s that admits every caller and refuses every
/// ad-hoc address (a deployment without an `allow` list).
#[derive(Debug, Default)]
pub struct MemoryRegistry {
    stores: BTreeMap<String, Arc<MemoryStore>>,
    /// Team mode: only callers with this password are admitted (anonymous ones get 401).
    token: Option<String>,
    /// Team mode: further passwords, each with the scope it grants.
    scoped: Vec<(String, Scope)>,
    /// Pass-through mode: what spans repositories is refused to everyone.
    passthrough: bool,
}

impl MemoryRegistry {
    /// A registry of one store per name that admits every caller (server mode).
    pub fn with(names: &[&str]) -> Arc<MemoryRegistry> {
        Arc::new(MemoryRegistry::of(names))
    }

    /// [`MemoryRegistry::with`] in team mode: only the password `token` is admitted.
    pub fn team(names: &[&str], token: &str) -> Arc<MemoryRegistry> {
        Arc::new(MemoryRegistry {
            token: Some(token.to_owned()),
            ..MemoryRegistry::of(names)
        })
    }

    /// [`MemoryRegistry::with`] in pass-through mode: nothing that spans repositories is
    /// served.
    pub fn passthrough(names: &[&str]) -> Arc<MemoryRegistry> {
        Arc::new(MemoryRegistry {
            passthrough: true,
            ..MemoryRegistry::of(names)
        })
    }

    fn of(names: &[&str]) -> MemoryRegistry {
        MemoryRegistry {
            stores: names
                .iter()
                .map(|name| ((*name).to_owned(), MemoryStore::named(name)))
                .collect(),
            token: None,
            scoped: Vec::new(),
            passthrough: false,
        }
    }

    /// [`MemoryRegistry::team`] that also admits the password `token` with `scope`.
    pub fn team_with_scoped(
        names: &[&str],
        token: &str,
        scoped: &[(&str, Scope)],
    ) -> Arc<MemoryRegistry> {
        Arc::new(MemoryRegistry {
            token: Some(token.to_owned()),
            scoped: scoped
                .iter()
                .map(|(token, scope)| ((*token).to_owned(), scope.clone()))
                .collect(),
            ..MemoryRegistry::of(names)
        })
    }

    /// The store named `name`.
    pub fn store(&self, name: &str) -> Option<Arc<MemoryStore>> {
        self.stores.get(name).cloned()
    }
}

#[async_trait]
impl StoreRegistry for MemoryRegistry {
    async fn authenticate(
        &self,
        caller: Option<&Credentials>,
    ) -> Result<Authenticated, RegistryError> {
        let scoped = caller.and_then(|c| self.scoped.iter().find(|(t, _)| *t == c.password));
        let scope = match (&self.token, caller, scoped) {
            (None, _, _) => Scope::full(),
            (Some(_), _, Some((_, scope))) => scope.clone(),
            (Some(token), Some(c), None) if c.password == *token => Scope::full(),
            (Some(_), _, _) => {
                return Err(RegistryError::Unauthenticated("send the team token".into()))
            }
        };
        Ok(Authenticated {
            holder: caller.map(|c| fake_mark(&c.password)),
            ..Authenticated::scoped(scope)
        })
    }

    fn named(
        &self,
        name: &str,
        _caller: Option<&Credentials>,
    ) -> Result<Arc<dyn StateStore>, RegistryError> {
        match self.stores.get(name) {
            Some(store) => Ok(store.clone()),
            None => Err(RegistryError::UnknownRepository(name.to_owned())),
        }
    }

    fn adhoc(
        &self,
        _url: &str,
        _git_ref: &str,
        _caller: Option<&Credentials>,
    ) -> Result<Arc<dyn StateStore>, RegistryError> {
        Err(RegistryError::NotAllowed(
            "this deployment allows no ad-hoc repository addresses".into(),
        ))
    }

    fn names(&self) -> Vec<String> {
        self.stores.keys().cloned().collect()
    }

    fn admit_operator(&self, _caller: Option<&Credentials>) -> Result<(), RegistryError> {
        if self.passthrough {
            return Err(RegistryError::NotAllowed("spans repositories".into()));
        }
        Ok(())
    }
}

/// The fake's mark of a credential: SHA-256 of it (a deployment's is keyed by its run key).
pub fn fake_mark(credential: &str) -> crate::Mark {
    use sha2::Digest;
    crate::Mark::new(sha2::Sha256::digest(credential.as_bytes()).into())
}
