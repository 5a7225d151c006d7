//! An issuer's signing keys, from one of two places:
//! - a JWKS document on disk (`jwks_file`): read at start (an unreadable or empty document stops
//!   it), and read again when the file changes (its size or modification time), as credential
//!   files are; no outbound call is ever made;
//! - the issuer itself: its discovery document (`{issuer}/.well-known/openid-configuration`,
//!   whose `issuer` must be the configured one) names its `jwks_uri` (https), fetched on first
//!   use and kept per process (on Lambda, per container). A token whose `kid` the keys lack
//!   fetches them again, and so do keys older than [`KEYS_MAX_AGE`], at most once every
//!   [`MIN_REFETCH`]: keys rotate without a restart, and a flood of tokens with unknown kids
//!   cannot become a flood of fetches. Answers are bounded ([`MAX_DOCUMENT_BYTES`], timeouts).
//!
//! A document that turns unusable keeps the last keys, with a WARN.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

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

/// The keys of one `jwks_file`.
#[derive(Debug)]
pub(crate) struct KeyFile {
    path: PathBuf,
    state: Mutex<Loaded>,
}

#[derive(Debug)]
struct Loaded {
    seen: Option<(SystemTime, u64)>,
    keys: JwkSet,
}

impl KeyFile {
    /// Reads `path`; a sentence naming the file when it holds no usable key.
    pub(crate) fn open(path: &Path) -> Result<KeyFile, String> {
        let (seen, keys) = read(path)?;
        Ok(KeyFile {
            path: path.to_owned(),
            state: Mutex::new(Loaded {
                seen: Some(seen),
                keys,
            }),
        })
    }

    pub(crate) fn find(&self, kid: Option<&str>) -> Option<Jwk> {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = stamp(&self.path);
        if now.is_some() && now != state.seen {
            match read(&self.path) {
                Ok((seen, keys)) => {
                    state.seen = Some(seen);
                    state.keys = keys;
                }
                Err(e) => {
                    state.seen = now;
                    tracing::warn!(error = %e, "an OIDC key file changed and cannot be used: the last keys are kept until it changes again");
                }
            }
        }
        pick(&state.keys, kid)
    }
}

fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

fn read(path: &Path) -> Result<((SystemTime, u64), JwkSet), String> {
    let seen = stamp(path).ok_or_else(|| format!("jwks_file {} cannot be read", path.display()))?;
    let text = std::fs::read(path)
        .map_err(|e| format!("jwks_file {} cannot be read: {e}", path.display()))?;
    let keys = key_set(&text).map_err(|e| format!("jwks_file {}: {e}", path.display()))?;
    Ok((seen, keys))
}

/// A JWKS document with at least one key.
fn key_set(text: &[u8]) -> Result<JwkSet, String> {
    let keys: JwkSet = serde_json::from_slice(text)
        .map_err(|e| format!("not a JWKS document ({{\"keys\": [...]}}): {e}"))?;
    if keys.keys.is_empty() {
        return Err("it holds no key".into());
    }
    Ok(keys)
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
