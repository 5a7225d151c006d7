//! The deployment's own git credential (server and team modes; pass-through holds none), and
//! where it comes from: fixed for the process, or files read again when they change.

use std::path::PathBuf;
use std::sync::Mutex;

use gitstate_url::Credentials;

use crate::config::{git_credentials_from_env, key_value_pairs, ConfigError};

/// The variables whose `*_FILE` form may hold the credential (see [`git_credentials_from_env`]).
const FILE_VARIABLES: [&str; 3] = ["GIT_PASSWORD", "GITHUB_TOKEN", "GIT_USERNAME"];

/// The deployment's own git credential and its source.
///
/// When it comes from `GIT_PASSWORD_FILE`, `GITHUB_TOKEN_FILE` or `GIT_USERNAME_FILE`, each use
/// ([`ServerCredential::changed`]) compares the files' identity and modification time with what
/// was read last, and reads them again when one changed: a sidecar or a CI step that refreshes a
/// token (GitHub App installation tokens last an hour) keeps a long-running server working. A file
/// that cannot be read, or reads empty (a writer between truncating and writing), keeps the last
/// credential until it changes again. The value is never logged.
#[derive(Debug)]
pub struct ServerCredential {
    initial: Option<Credentials>,
    /// The files, when the credential comes from files.
    files: Vec<PathBuf>,
    /// What the files looked like when last read, and the credential then.
    seen: Mutex<(Vec<Option<Stamp>>, Option<Credentials>)>,
}

/// A file's identity and modification time: a replaced file (a new inode, as Kubernetes' secret
/// volumes and `mv` make) or a rewritten one (a new mtime or length) differs.
type Stamp = (u64, u64, i64, i64, u64);

fn stamp(path: &PathBuf) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino(), m.mtime(), m.mtime_nsec(), m.len()))
}

impl ServerCredential {
    /// A credential that never changes (or none).
    pub fn fixed(credentials: Option<Credentials>) -> Self {
        ServerCredential {
            initial: credentials,
            files: Vec::new(),
            seen: Mutex::new((Vec::new(), None)),
        }
    }

    /// The credential [`git_credentials_from_env`] finds, watching the `*_FILE` variables it may
    /// read (only those whose plain variable is unset: a plain value wins and never changes).
    pub fn from_env() -> Result<Self, ConfigError> {
        let files: Vec<PathBuf> = FILE_VARIABLES
            .iter()
            .filter(|name| std::env::var_os(name).is_none())
            .filter_map(|name| std::env::var_os(format!("{name}_FILE")).map(PathBuf::from))
            .collect();
        let stamps = files.iter().map(stamp).collect();
        let initial = git_credentials_from_env()?;
        Ok(ServerCredential {
            seen: Mutex::new((stamps, initial.clone())),
            initial,
            files,
        })
    }

    /// The credential at start.
    pub fn initial(&self) -> Option<&Credentials> {
        self.initial.as_ref()
    }

    /// The new credential when a watched file changed since the last call and reads as another
    /// credential; `None` when nothing changed (or the change is not readable yet).
    pub fn changed(&self) -> Option<Credentials> {
        if self.files.is_empty() {
            return None;
        }
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let now: Vec<Option<Stamp>> = self.files.iter().map(stamp).collect();
        if now == seen.0 {
            return None;
        }
        // Looked at once per change: an unreadable or empty file is warned about once, and read
        // again when it changes again.
        seen.0 = now;
        match git_credentials_from_env() {
            Ok(Some(credentials)) => {
                if seen.1.as_ref() == Some(&credentials) {
                    return None;
                }
                seen.1 = Some(credentials.clone());
                tracing::info!(username = %credentials.username, "the git credential file changed: the next requests use the new credential");
                Some(credentials)
            }
            Ok(None) => {
                tracing::warn!("a git credential file changed and reads empty: the last credential is kept until it changes again");
                None
            }
            Err(e) => {
                tracing::warn!(error = %e, "a git credential file changed and cannot be read: the last credential is kept until it changes again");
                None
            }
        }
    }
}

/// The deployment's own git credential: `GIT_PASSWORD_KMS` (a KMS `CiphertextBlob`, base64;
/// decrypted once here, with `GIT_PASSWORD_KMS_CONTEXT` = `k=v,…` as encryption context when
/// set) with `GIT_USERNAME`, else what [`git_credentials_from_env`] finds, its files watched
/// ([`ServerCredential`]).
pub async fn server_git_credentials() -> Result<ServerCredential, ConfigError> {
    let Some(ciphertext) = std::env::var("GIT_PASSWORD_KMS")
        .ok()
        .filter(|v| !v.trim().is_empty())
    else {
        return ServerCredential::from_env();
    };
    let context = match std::env::var("GIT_PASSWORD_KMS_CONTEXT") {
        Ok(pairs) => key_value_pairs(pairs.split(','), "GIT_PASSWORD_KMS_CONTEXT")?,
        Err(_) => Default::default(),
    };
    let password = gitstate_seal::decrypt_secret(&ciphertext, &context)
        .await
        .map_err(|e| ConfigError::BadValue(format!("GIT_PASSWORD_KMS: {e}")))?;
    let username = std::env::var("GIT_USERNAME")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "git".to_owned());
    tracing::info!(%username, "git credential decrypted with KMS");
    Ok(ServerCredential::fixed(Some(Credentials {
        username,
        password,
    })))
}
