//! Who writes each repository's commits (DESIGN §6): the committer name and e-mail
//! (`committer_name`/`committer_email`) and the key that signs them (`signing_key`), the
//! repository's own over the deployment's. Resolved, checked and loaded once when the stores
//! are built; a key file that cannot be read or used stops the start with a sentence naming the
//! file, never its content.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use gitstate_git::{Committer, Signer};
use zeroize::Zeroizing;

use crate::config::{Config, ConfigError, RepositoryConfig};

/// The committers of the deployment and of each configured repository.
#[derive(Debug, Clone, Default)]
pub(crate) struct Identities {
    deployment: Committer,
    repositories: HashMap<String, Committer>,
}

impl Identities {
    /// Checks the names and e-mails and reads each signing key (one read per file).
    pub(crate) fn load(
        config: &Config,
        repositories: &BTreeMap<String, RepositoryConfig>,
    ) -> Result<Identities, ConfigError> {
        config.check_committers()?;
        let mut keys: HashMap<PathBuf, Arc<Signer>> = HashMap::new();
        let mut signer = |path: Option<&PathBuf>| -> Result<Option<Arc<Signer>>, ConfigError> {
            let Some(path) = path else { return Ok(None) };
            if let Some(signer) = keys.get(path) {
                return Ok(Some(signer.clone()));
            }
            let signer = Arc::new(read_key(path)?);
            tracing::info!(
                key = %path.display(),
                fingerprint = %signer.fingerprint(),
                "commits are signed with this key"
            );
            keys.insert(path.clone(), signer.clone());
            Ok(Some(signer))
        };
        let deployment = Committer {
            signer: signer(config.signing_key.as_ref())?,
            ..config.committer()
        };
        let repositories = repositories
            .iter()
            .map(|(name, repository)| {
                let key = repository
                    .signing_key
                    .as_ref()
                    .or(config.signing_key.as_ref());
                let committer = Committer {
                    signer: signer(key)?,
                    ..repository.committer(config)
                };
                Ok((name.clone(), committer))
            })
            .collect::<Result<_, ConfigError>>()?;
        Ok(Identities {
            deployment,
            repositories,
        })
    }

    /// The committer of the configured repository `name` (the deployment's when it has none).
    pub(crate) fn of(&self, name: &str) -> Committer {
        self.repositories
            .get(name)
            .unwrap_or(&self.deployment)
            .clone()
    }

    /// The committer of ad-hoc repositories: the deployment's.
    pub(crate) fn deployment(&self) -> Committer {
        self.deployment.clone()
    }
}

/// The signing key in `path`.
fn read_key(path: &Path) -> Result<Signer, ConfigError> {
    let text = Zeroizing::new(std::fs::read_to_string(path).map_err(|e| {
        ConfigError::BadValue(format!(
            "signing_key {}: the file cannot be read: {e}",
            path.display()
        ))
    })?);
    Signer::from_text(&text).map_err(|why| {
        ConfigError::BadValue(format!("signing_key {}: the file {why}", path.display()))
    })
}
