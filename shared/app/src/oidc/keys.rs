//! An issuer's signing keys, from a JWKS document on disk (`jwks_file`): read at start (an
//! unreadable or empty document stops it), and read again when the file changes (its size or
//! modification time), as credential files are, so keys rotate without a restart. A document
//! that turns unreadable keeps the last keys, with a WARN.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use jsonwebtoken::jwk::{Jwk, JwkSet};

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

    /// The key `kid` names (or, for a token without `kid`, the one key when there is one),
    /// from the file as it is now.
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
        match kid {
            Some(kid) => state.keys.find(kid).cloned(),
            None if state.keys.keys.len() == 1 => state.keys.keys.first().cloned(),
            None => None,
        }
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
    let keys: JwkSet = serde_json::from_slice(&text).map_err(|e| {
        format!(
            "jwks_file {} is not a JWKS document ({{\"keys\": [...]}}): {e}",
            path.display()
        )
    })?;
    if keys.keys.is_empty() {
        return Err(format!("jwks_file {} holds no key", path.display()));
    }
    Ok((seen, keys))
}
