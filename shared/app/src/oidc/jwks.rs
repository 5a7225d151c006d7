//! An issuer's signing keys, from one of two places:
//! - a JWKS document on disk (`jwks_file`): read at start (an unreadable document, or one that is
//!   no JWKS, stops it), and read again when the file changes (its identity, size or times,
//!   looked at most once every [`FILE_RECHECK`] on use), as credential files are; no outbound
//!   call is ever made. The file is the truth: removed, unreadable or no JWKS, it admits no token
//!   until it is fixed (an ERROR line, once per change of the file), and an empty set
//!   (`{"keys": []}`) admits none either: deleting or emptying the file revokes the issuer's
//!   keys within seconds, without a restart;
//! - the issuer itself: its discovery document (`{issuer}/.well-known/openid-configuration`,
//!   whose `issuer` must be the configured one) names its `jwks_uri` (https), fetched on first
//!   use and kept per process (on Lambda, per container). A token whose `kid` the keys lack
//!   fetches them again, and so do keys older than [`KEYS_MAX_AGE`], at most once every
//!   [`MIN_REFETCH`]: keys rotate without a restart, and a flood of tokens with unknown kids
//!   cannot become a flood of fetches. Answers are bounded ([`MAX_DOCUMENT_BYTES`], timeouts).
//!   An answer with an empty set admits no token; a fetch that fails (network, HTTP status, too
//!   large, no JWKS) keeps the last keys, with a WARN: an issuer that cannot be reached for a
//!   moment does not stop its callers.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{Jwk, JwkSet};

/// Fetched keys are fetched again when a token needs them and they are this old.
pub(crate) const KEYS_MAX_AGE: Duration = Duration::from_secs(600);
/// At most one fetch of an issuer's keys in this long.
pub(crate) const MIN_REFETCH: Duration = Duration::from_secs(10);
/// The largest discovery or JWKS document read.
const MAX_DOCUMENT_BYTES: usize = 1 << 20;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Where an issuer's keys come from.
#[derive(Debug)]
pub(crate) enum Keys {
    File(KeyFile),
    Issuer(Fetched),
}

impl Keys {
    /// The key `kid` names (or, for a token without `kid`, the one key when there is one), from
    /// what is at hand: the file as it is now, or the keys fetched last. Never a network call.
    pub(crate) fn find(&self, kid: Option<&str>) -> Option<Jwk> {
        match self {
            Keys::File(file) => file.find(kid),
            Keys::Issuer(fetched) => fetched.find(kid),
        }
    }

    /// Fetches the issuer's keys again when they may have changed and the last fetch is long
    /// enough ago: `true` when new keys are at hand.
    pub(crate) async fn refresh(&self) -> bool {
        match self {
            Keys::File(_) => false,
            Keys::Issuer(fetched) => fetched.refresh().await,
        }
    }

    /// Whether keys fetched from the issuer are old enough to be fetched again before use.
    pub(crate) fn stale(&self) -> bool {
        match self {
            Keys::File(_) => false,
            Keys::Issuer(fetched) => fetched.stale(),
        }
    }
}

fn pick(keys: &JwkSet, kid: Option<&str>) -> Option<Jwk> {
    match kid {
        Some(kid) => keys.find(kid).cloned(),
        None if keys.keys.len() == 1 => keys.keys.first().cloned(),
        None => None,
    }
}

/// A `jwks_file` is looked at (its metadata) at most this often, on use.
pub(crate) const FILE_RECHECK: Duration = Duration::from_secs(1);

/// The keys of one `jwks_file`.
#[derive(Debug)]
pub(crate) struct KeyFile {
    issuer: String,
    path: PathBuf,
    state: Mutex<Loaded>,
}

/// What the file held when it was last read.
#[derive(Debug)]
struct Loaded {
    /// When its metadata was last looked at.
    checked: Instant,
    /// Its size and modification time then (`None`: it could not be read).
    seen: Option<Stamp>,
    /// Its keys, or why it is unusable (then no token is admitted).
    keys: Result<JwkSet, String>,
}

/// A file's identity, size and times: a file replaced (a new inode, as Kubernetes' volumes and
/// `mv` make), rewritten (its mtime or size) or made unreadable (its ctime) differs.
type Stamp = (u64, u64, i64, i64, i64, i64, u64);

impl KeyFile {
    /// Reads `path`, the keys of `issuer`; a sentence naming the file when it cannot be read
    /// or holds no JWKS. An empty set starts (it admits no token), with a WARN.
    pub(crate) fn open(issuer: &str, path: &Path) -> Result<KeyFile, String> {
        let (seen, keys) = read(path);
        let keys = keys?;
        let file = KeyFile {
            issuer: issuer.to_owned(),
            path: path.to_owned(),
            state: Mutex::new(Loaded {
                checked: Instant::now(),
                seen,
                keys: Ok(keys),
            }),
        };
        let state = file.lock();
        file.report(&state.keys, None);
        drop(state);
        Ok(file)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Loaded> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn find(&self, kid: Option<&str>) -> Option<Jwk> {
        let mut state = self.lock();
        if state.checked.elapsed() >= FILE_RECHECK {
            state.checked = Instant::now();
            let now = stamp(&self.path).ok();
            if now.is_none() || now != state.seen {
                let (seen, keys) = read(&self.path);
                if seen != state.seen || keys.as_ref().err() != state.keys.as_ref().err() {
                    self.report(&keys, Some(&state.keys));
                }
                state.seen = seen;
                state.keys = keys;
            }
        }
        pick(state.keys.as_ref().ok()?, kid)
    }

    /// Logs what the file now holds, when it is worth a line: unusable (ERROR), empty (WARN),
    /// usable again (INFO).
    fn report(&self, keys: &Result<JwkSet, String>, before: Option<&Result<JwkSet, String>>) {
        let (issuer, file) = (&self.issuer, self.path.display());
        match keys {
            Err(e) => {
                tracing::error!(%issuer, %file, error = %e, "the OIDC key file cannot be used: every token of its issuer is refused until it is fixed")
            }
            Ok(set) if set.keys.is_empty() => {
                tracing::warn!(%issuer, %file, "the OIDC key file holds no key: every token of its issuer is refused")
            }
            Ok(_) if before.is_some_and(Result::is_err) => {
                tracing::info!(%issuer, %file, "the OIDC key file can be used again")
            }
            Ok(_) => {}
        }
    }
}

fn stamp(path: &Path) -> std::io::Result<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path)?;
    Ok((
        m.dev(),
        m.ino(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec(),
        m.len(),
    ))
}

/// The file's stamp before it was read, and its keys or why it is unusable (naming the file).
fn read(path: &Path) -> (Option<Stamp>, Result<JwkSet, String>) {
    let unreadable =
        |e: std::io::Error| format!("jwks_file {} cannot be read: {e}", path.display());
    let seen = match stamp(path) {
        Ok(seen) => seen,
        Err(e) => return (None, Err(unreadable(e))),
    };
    let keys = std::fs::read(path)
        .map_err(unreadable)
        .and_then(|text| key_set(&text).map_err(|e| format!("jwks_file {}: {e}", path.display())));
    (Some(seen), keys)
}

/// A JWKS document (`{"keys": [...]}`; an empty set is one).
fn key_set(text: &[u8]) -> Result<JwkSet, String> {
    serde_json::from_slice(text)
        .map_err(|e| format!("not a JWKS document ({{\"keys\": [...]}}): {e}"))
}

/// The keys of an issuer, fetched through its discovery document.
#[derive(Debug)]
pub(crate) struct Fetched {
    issuer: String,
    client: reqwest::Client,
    state: Mutex<Remote>,
    /// One fetch at a time; the others use what it brought.
    fetching: tokio::sync::Mutex<()>,
}

#[derive(Debug, Default)]
struct Remote {
    keys: Option<JwkSet>,
    fetched: Option<Instant>,
    attempted: Option<Instant>,
}

impl Fetched {
    pub(crate) fn new(issuer: &str) -> Result<Fetched, String> {
        let client = reqwest::Client::builder()
            .https_only(true)
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|e| format!("no HTTP client for the issuer: {e}"))?;
        Ok(Fetched {
            issuer: issuer.to_owned(),
            client,
            state: Mutex::new(Remote::default()),
            fetching: tokio::sync::Mutex::new(()),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Remote> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn find(&self, kid: Option<&str>) -> Option<Jwk> {
        pick(self.state().keys.as_ref()?, kid)
    }

    fn stale(&self) -> bool {
        let state = self.state();
        state.fetched.is_none_or(|at| at.elapsed() >= KEYS_MAX_AGE)
    }

    async fn refresh(&self) -> bool {
        let _one = self.fetching.lock().await;
        {
            let mut state = self.state();
            if state.attempted.is_some_and(|at| at.elapsed() < MIN_REFETCH) {
                // Fetched (or tried) a moment ago, perhaps by the request that waited before
                // this one: what it brought is what there is.
                return false;
            }
            state.attempted = Some(Instant::now());
        }
        match self.fetch().await {
            Ok(keys) => {
                if keys.keys.is_empty() {
                    tracing::warn!(issuer = %self.issuer, "the OIDC issuer publishes no key: every token of it is refused");
                }
                let mut state = self.state();
                state.keys = Some(keys);
                state.fetched = Some(Instant::now());
                true
            }
            Err(e) => {
                tracing::warn!(issuer = %self.issuer, error = %e, "the OIDC issuer's keys could not be fetched; the last keys are kept");
                false
            }
        }
    }

    async fn fetch(&self) -> Result<JwkSet, String> {
        let discovery_url = format!(
            "{}/.well-known/openid-configuration",
            self.issuer.trim_end_matches('/')
        );
        let discovery: serde_json::Value = serde_json::from_slice(&self.get(&discovery_url).await?)
            .map_err(|e| format!("its discovery document is not JSON: {e}"))?;
        if discovery.get("issuer").and_then(|v| v.as_str()) != Some(self.issuer.as_str()) {
            return Err("its discovery document names another issuer".into());
        }
        let jwks_uri = discovery
            .get("jwks_uri")
            .and_then(|v| v.as_str())
            .filter(|uri| uri.starts_with("https://"))
            .ok_or("its discovery document names no https jwks_uri")?;
        key_set(&self.get(jwks_uri).await?).map_err(|e| format!("its jwks_uri: {e}"))
    }

    /// The body of a GET of `url`, at most [`MAX_DOCUMENT_BYTES`].
    async fn get(&self, url: &str) -> Result<Vec<u8>, String> {
        let mut response = self
            .client
            .get(url)
            .send()
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        if !response.status().is_success() {
            return Err(format!("{url} answered {}", response.status()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| format!("{url}: {e}"))? {
            if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
                return Err(format!(
                    "{url} answered more than {MAX_DOCUMENT_BYTES} bytes"
                ));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}
