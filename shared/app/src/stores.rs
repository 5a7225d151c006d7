//! Repository names and ad-hoc URLs → stores (no caller check here: see [`crate::access`]).
//! Stores are built once and kept, so caches and connections are reused (built again when the
//! deployment's credential file changes); pass-through builds one per request, holding only that
//! caller's credential.

use std::collections::{BTreeMap, HashMap};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, RwLock};

use gitstate_core::{NamedStore, RegistryError, StateStore, StoreError};
use gitstate_git::{Committer, LocalStore, RemoteConfig, RemoteStore};
use gitstate_url::{redact_in_text, Credentials, RepoUrl, Scheme, UrlPolicy};

use crate::config::{
    AuthMode, Config, ConfigError, RepositoryConfig, DEFAULT_REF, DEFAULT_REPOSITORY,
};
use crate::credentials::ServerCredential;
use crate::identity::Identities;

/// The deployment's repositories.
pub struct Stores {
    /// The deployment's credential and the stores built with it (server and team modes).
    current: RwLock<Arc<Current>>,
    /// Where the deployment's credential comes from (a file is read again when it changes).
    source: ServerCredential,
    /// The configured repositories (pass-through mode builds a store per request from these).
    repositories: BTreeMap<String, RepositoryConfig>,
    policy: UrlPolicy,
    passthrough: bool,
    config: Config,
    /// Who writes each repository's commits, with the keys that sign them.
    identities: Identities,
    /// Stores of ad-hoc repositories (server and team modes), the most recently used kept.
    adhoc: Mutex<lru::LruCache<AdHocKey, Arc<dyn StateStore>>>,
}

impl std::fmt::Debug for Stores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stores")
            .field(
                "repositories",
                &self.repositories.keys().collect::<Vec<_>>(),
            )
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

/// The deployment's credential and the configured repositories' stores holding it.
struct Current {
    credentials: Option<Credentials>,
    named: HashMap<String, Arc<dyn StateStore>>,
    /// Counts the credential's changes (ad-hoc stores holding it are kept under it).
    generation: u64,
}

/// An ad-hoc store's identity: URL (as given to the transport), branch, and the generation of the
/// deployment's credential it holds (`None`: it holds none).
type AdHocKey = (String, String, Option<u64>);

/// How many ad-hoc repositories keep a store (and its cache handle) between requests.
const ADHOC_STORES: NonZeroUsize = match NonZeroUsize::new(256) {
    Some(n) => n,
    None => NonZeroUsize::MIN,
};

/// A URL (or scp-like address) rather than a local path.
fn is_url(url: &str) -> bool {
    url.contains("://") || url.starts_with("git@")
}

/// The name an ad-hoc repository goes by (what its sealed states are bound to, and what the
/// catalog records): its URL without credentials, with the branch when it is not the default.
pub fn adhoc_name(display_url: &str, git_ref: &str) -> String {
    let mut name = display_url.to_owned();
    if git_ref != DEFAULT_REF {
        name.push_str("?ref=");
        name.push_str(git_ref);
    }
    name
}

/// The store of `repository`, named `name` (see [`gitstate_core::StateStore::repository`]).
fn open_store(
    name: &str,
    repository: &RepositoryConfig,
    config: &Config,
    identities: &Identities,
    credentials: Option<&Credentials>,
) -> Result<Arc<dyn StateStore>, RegistryError> {
    let store = open_unnamed_store(repository, config, identities.of(name), credentials)?;
    // The deployment's state guard applies unless the repository turns it off for itself; its
    // lock_ttl unless the repository has its own.
    let guard = repository.state_guard.unwrap_or(true);
    let ttl = repository.lock_ttl.or(config.lock_ttl);
    Ok(Arc::new(
        NamedStore::new(name, store)
            .with_state_guard(guard)
            .with_lock_ttl(ttl)
            .with_workspace_path(repository.workspace_path.clone().unwrap_or_default()),
    ))
}

fn open_unnamed_store(
    repository: &RepositoryConfig,
    config: &Config,
    committer: Committer,
    credentials: Option<&Credentials>,
) -> Result<Arc<dyn StateStore>, RegistryError> {
    let url = repository.url.as_str();
    if !is_url(url) {
        // A plain path is a bare repository on this machine: written directly, no git binary.
        let store = LocalStore::open_or_init(std::path::Path::new(url), &repository.git_ref)?
            .with_committer(committer);
        return Ok(Arc::new(store));
    }
    // A configuration mistake, told as one (not as a store failure).
    RepoUrl::parse(url).map_err(|e| {
        RegistryError::BadAddress(format!(
            "the repository URL {} cannot be used: {e}",
            redact_in_text(url)
        ))
    })?;
    let store = RemoteStore::new(RemoteConfig {
        url: url.to_owned(),
        git_ref: repository.git_ref.clone(),
        credentials: credentials.cloned(),
        cache_dir: config.cache_dir.clone(),
        timeout: config.git_timeout(),
    })?
    .with_answer_limit(config.max_answer_bytes)
    .with_committer(committer);
    Ok(Arc::new(store))
}

/// The stores of every configured repository, holding `credentials`.
fn open_all(
    repositories: &BTreeMap<String, RepositoryConfig>,
    config: &Config,
    identities: &Identities,
    credentials: Option<&Credentials>,
) -> Result<HashMap<String, Arc<dyn StateStore>>, RegistryError> {
    repositories
        .iter()
        .map(|(name, repository)| {
            let store = open_store(name, repository, config, identities, credentials)?;
            Ok((name.clone(), store))
        })
        .collect()
}

/// How long a readiness check waits for a repository's answer.
pub const READINESS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// `store`'s check, within [`READINESS_TIMEOUT`].
async fn check_one(store: &dyn StateStore) -> Result<(), StoreError> {
    match tokio::time::timeout(READINESS_TIMEOUT, store.check()).await {
        Ok(checked) => checked,
        Err(_) => Err(StoreError::Unavailable(format!(
            "the repository did not answer within {} s",
            READINESS_TIMEOUT.as_secs()
        ))),
    }
}

impl Stores {
    /// Opens every configured repository; with none configured, the embedded default at
    /// `{data_dir}/default.git`.
    pub fn from_config(config: &Config, source: ServerCredential) -> Result<Self, ConfigError> {
        // The security boundary's start-time rules (refs, pass-through URLs): docs/SECURITY.md.
        crate::boundary::check_config(config).map_err(|e| ConfigError::BadValue(e.to_string()))?;
        // Objects a git server sends may inflate to at most this much (zip bombs): every cache
        // repository of the process is opened with it.
        gitstate_git::set_max_object_bytes(gitstate_git::object_limit(
            config.max_state_bytes as u64,
        ));
        // Pass-through holds no credential of its own: whatever the environment provides
        // (GIT_USERNAME/GIT_PASSWORD, GITHUB_TOKEN) is dropped here, so no request can use it.
        let source = match config.auth.mode {
            AuthMode::Passthrough => ServerCredential::fixed(None),
            _ => source,
        };
        let credentials = source.initial().cloned();
        let mut repositories = config.repositories.clone();
        if repositories.is_empty() {
            repositories.insert(
                DEFAULT_REPOSITORY.to_owned(),
                RepositoryConfig {
                    url: config
                        .data_dir
                        .join("default.git")
                        .to_string_lossy()
                        .into_owned(),
                    git_ref: DEFAULT_REF.to_owned(),
                    state_guard: None,
                    lock_ttl: None,
                    workspace_path: None,
                    committer_name: None,
                    committer_email: None,
                    signing_key: None,
                },
            );
        }
        let passthrough = config.auth.mode == AuthMode::Passthrough;
        for (name, repository) in &repositories {
            if passthrough && !is_url(&repository.url) {
                return Err(ConfigError::BadValue(format!(
                    "repository '{name}' is a local path, which pass-through authentication cannot protect; configure a remote URL or use auth mode \"server\""
                )));
            }
            tracing::info!(repository = %name, url = %redact_in_text(&repository.url), git_ref = %repository.git_ref, passthrough, "repository configured");
        }
        let identities = Identities::load(config, &repositories)?;
        let named = match passthrough {
            true => HashMap::new(),
            false => open_all(&repositories, config, &identities, credentials.as_ref())
                .map_err(|e| ConfigError::BadValue(e.to_string()))?,
        };
        let policy = UrlPolicy::new(&config.allow, &config.allow_with_credential)
            .map_err(ConfigError::BadValue)?;
        Ok(Stores {
            current: RwLock::new(Arc::new(Current {
                credentials,
                named,
                generation: 0,
            })),
            source,
            repositories,
            policy,
            passthrough,
            config: config.clone(),
            identities,
            adhoc: Mutex::new(lru::LruCache::new(ADHOC_STORES)),
        })
    }

    /// The deployment's credential and the stores holding it; when its file changed, both built
    /// again first (ad-hoc stores holding the old credential are dropped). A store that cannot be
    /// built again (it was built at start) keeps the old credential, and says so.
    fn current(&self) -> Result<Arc<Current>, RegistryError> {
        let poisoned = || {
            RegistryError::Store(StoreError::Internal(
                "the registry's store map is poisoned (a bug)".into(),
            ))
        };
        if let Some(credentials) = self.source.changed() {
            match open_all(
                &self.repositories,
                &self.config,
                &self.identities,
                Some(&credentials),
            ) {
                Ok(named) => {
                    let mut current = self.current.write().map_err(|_| poisoned())?;
                    *current = Arc::new(Current {
                        credentials: Some(credentials),
                        named,
                        generation: current.generation + 1,
                    });
                    drop(current);
                    self.adhoc.lock().map_err(|_| poisoned())?.clear();
                }
                Err(e) => {
                    tracing::error!(error = %e, "the stores could not be built with the new git credential: the old one stays in use");
                }
            }
        }
        Ok(self.current.read().map_err(|_| poisoned())?.clone())
    }

    /// The configured repository names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.repositories.keys().cloned().collect()
    }

    /// Readiness: every configured repository checked at once, each within
    /// [`READINESS_TIMEOUT`], with the deployment's credential. Pass-through holds none: its
    /// check has no credential, and a repository that answers by asking for one is ready.
    pub async fn check_all(&self) -> Vec<(String, Result<(), StoreError>)> {
        let mut checks = tokio::task::JoinSet::new();
        for (name, repository) in &self.repositories {
            let store = match self.passthrough {
                true => open_store(name, repository, &self.config, &self.identities, None),
                false => self.named(name, None),
            };
            let (name, passthrough) = (name.clone(), self.passthrough);
            checks.spawn(async move {
                let checked = match store {
                    Ok(store) => check_one(store.as_ref()).await,
                    Err(e) => Err(StoreError::Internal(e.to_string())),
                };
                let checked = match checked {
                    Err(StoreError::Unauthorized(_)) if passthrough => Ok(()),
                    other => other,
                };
                (name, checked)
            });
        }
        let mut results = Vec::new();
        while let Some(joined) = checks.join_next().await {
            match joined {
                Ok(result) => results.push(result),
                Err(e) => tracing::error!(error = %e, "a readiness check failed to run"),
            }
        }
        results.sort_by(|a, b| a.0.cmp(&b.0));
        results
    }

    /// The configured repository `name`; in pass-through mode, a store holding `caller`'s
    /// credential.
    pub fn named(
        &self,
        name: &str,
        caller: Option<&Credentials>,
    ) -> Result<Arc<dyn StateStore>, RegistryError> {
        if self.passthrough {
            // A store per request, holding only this caller's credential (the object cache
            // behind it is shared, but every request first asks the remote with its own
            // credential, and nothing is served unless the remote accepted it).
            let repository = self
                .repositories
                .get(name)
                .ok_or_else(|| RegistryError::UnknownRepository(name.to_owned()))?;
            return open_store(name, repository, &self.config, &self.identities, caller);
        }
        self.current()?
            .named
            .get(name)
            .cloned()
            .ok_or_else(|| RegistryError::UnknownRepository(name.to_owned()))
    }

    /// An ad-hoc repository, if the `allow` list permits it, with the credential the policy
    /// gives it: the caller's (pass-through), the deployment's (an `allow_with_credential`
    /// match), or none.
    pub fn adhoc(
        &self,
        url: &str,
        git_ref: &str,
        caller: Option<&Credentials>,
    ) -> Result<Arc<dyn StateStore>, RegistryError> {
        let admission = self.policy.admit(url).map_err(RegistryError::NotAllowed)?;
        let shown = admission.url.display();
        let scheme = admission.url.scheme();
        // Whose credential goes to the remote: the caller's (pass-through), the deployment's
        // (only where an allow_with_credential pattern says so), or none.
        let (credentials, generation) = if self.passthrough {
            if !scheme.carries_basic_auth() {
                return Err(RegistryError::NotAllowed(format!(
                    "the repository {shown} is refused: this deployment passes the caller's basic-auth credential to the git server, which a {}:// transport cannot carry",
                    scheme.as_str()
                )));
            }
            (caller.cloned(), None)
        } else if admission.server_credential {
            let current = self.current()?;
            (current.credentials.clone(), Some(current.generation))
        } else if scheme == Scheme::Ssh {
            return Err(RegistryError::NotAllowed(format!(
                "the repository {shown} is refused: ssh would use this deployment's own key, which only repositories matching 'allow_with_credential' get"
            )));
        } else {
            (None, None)
        };
        let open =
            |credentials: Option<Credentials>| -> Result<Arc<dyn StateStore>, RegistryError> {
                let store = RemoteStore::new(RemoteConfig {
                    url: admission.url.transport_url(),
                    git_ref: git_ref.to_owned(),
                    credentials,
                    cache_dir: self.config.cache_dir.clone(),
                    timeout: self.config.git_timeout(),
                })?
                .with_network(admission.network)
                .with_answer_limit(self.config.max_answer_bytes)
                .with_committer(self.identities.deployment());
                Ok(Arc::new(NamedStore::new(
                    adhoc_name(&shown, git_ref),
                    Arc::new(store),
                )))
            };
        if self.passthrough {
            return open(credentials);
        }
        let key = (
            admission.url.transport_url(),
            git_ref.to_owned(),
            generation,
        );
        let mut adhoc = self.adhoc.lock().map_err(|_| {
            RegistryError::Store(gitstate_core::StoreError::Internal(
                "the registry's store map is poisoned (a bug)".into(),
            ))
        })?;
        if let Some(store) = adhoc.get(&key) {
            return Ok(store.clone());
        }
        let store = open(credentials)?;
        adhoc.put(key, store.clone());
        Ok(store)
    }
}
