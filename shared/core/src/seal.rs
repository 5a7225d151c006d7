//! The `Sealer` port: what turns a state into the bytes stored in the repository, and back.
//!
//! The protocol layer calls [`Sealer::seal`] before every write and [`Sealer::open`] after every
//! read; an adapter (sops with AWS KMS, age, PGP, Vault transit and GCP KMS keys) implements it. Without a sealer, states are
//! stored exactly as POSTed.
//!
//! Every call names the [`Place`] of the state (repository and path): a sealed document is bound
//! to it, so one copied to another place is refused rather than served there.

use std::fmt;

use async_trait::async_trait;
use bytes::Bytes;

use crate::path::StatePath;
use gitstate_statefile::CheckedState;

/// Where a state lives: the repository (its configured name, or the address of an ad-hoc
/// repository without credentials) and the path. Sealed documents are bound to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// The repository's name (see [`crate::StateStore::repository`]).
    pub repository: String,
    /// The state's path.
    pub path: StatePath,
}

impl Place {
    /// The place of `path` in `repository`.
    pub fn new(repository: impl Into<String>, path: &StatePath) -> Place {
        Place {
            repository: repository.into(),
            path: path.clone(),
        }
    }
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.repository, self.path)
    }
}

/// Why sealing or opening failed. The HTTP layer gives each kind one status code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// A key service (KMS) could not be reached or throttled; worth retrying (503).
    #[error("encryption is unavailable: {why}")]
    Unavailable {
        /// The key whose service failed: its kind and public id (`kms key ARN`), a caller may
        /// read it.
        key: String,
        /// What failed (the service's own text: for the log).
        why: String,
    },
    /// No configured key opens the stored file, or a key cannot be used for want of its
    /// credential (500).
    #[error("{sentence}{}", why.as_deref().map(|w| format!(" ({w})")).unwrap_or_default())]
    NoKey {
        /// One sentence a caller may read: the keys the file needs (ids, never key material) or
        /// the setting that gives them, and that it is not served.
        sentence: String,
        /// What the keys that were tried answered, when one failed rather than just not
        /// matching (a key service's own text: for the log).
        why: Option<String>,
    },
    /// The stored file was modified outside gitstate or is corrupt; it is not served (500). The
    /// text says what the check found (for the log).
    #[error("the stored state fails its integrity check: {0}")]
    Tampered(String),
    /// The stored file was sealed for another place (repository or path) and was copied here;
    /// it is not served (500). The message, one sentence a caller may read, names both places.
    #[error("{0}")]
    Misplaced(String),
    /// Encryption is enforced and the stored file is not a document this server sealed with its
    /// own keys (plaintext, or written by someone else); it is not served (500). The message is
    /// one sentence a caller may read.
    #[error("{0}")]
    NotSealedHere(String),
    /// The state cannot be sealed as sent (400).
    #[error("{0}")]
    BadInput(String),
    /// Encryption failed for another reason (500).
    #[error("encryption failed: {0}")]
    Internal(String),
}

/// Seals states for storage and opens stored states. Implementations must be deterministic in
/// meaning: `open(at, seal(at, x))` is `x` as a JSON value (formatting may differ).
///
/// Nothing of what is stored now goes into a seal: the previous version is not an input, so a
/// document planted in the repository (say, with a data key its author knows) cannot become the
/// basis of the next write.
#[async_trait]
pub trait Sealer: Send + Sync + fmt::Debug + 'static {
    /// The bytes to store for the state `plain` at `at`, sealed under fresh key material and
    /// bound to `at`. `plain` was read by [`gitstate_statefile::check`], whose reading the sealer
    /// takes as it is; a state of [`gitstate_statefile::Form::ClientEncrypted`] (OpenTofu's own
    /// encryption) may be returned unchanged.
    async fn seal(&self, at: &Place, plain: &CheckedState) -> Result<Bytes, SealError>;

    /// The state held in `stored` at `at`: a sealed document (refused when it is bound to
    /// another place), or plaintext written before sealing was configured (returned as it is,
    /// unless the adapter enforces sealing).
    async fn open(&self, at: &Place, stored: Bytes) -> Result<Bytes, SealError>;

    /// Whether `stored` already holds the state `plain` (a client retry must not make a commit).
    /// `false` may be answered for equal values in a different form (an extra commit, never a lost
    /// write); `true` only when they are equal. The default opens `stored` and compares JSON
    /// values; adapters can answer from a digest without decrypting every value.
    async fn holds(&self, at: &Place, stored: Bytes, plain: &Bytes) -> Result<bool, SealError> {
        holds_by_opening(self, at, stored, plain).await
    }
}

/// [`Sealer::holds`] the slow, always-correct way: open `stored` and compare JSON values.
pub async fn holds_by_opening<S: Sealer + ?Sized>(
    sealer: &S,
    at: &Place,
    stored: Bytes,
    plain: &Bytes,
) -> Result<bool, SealError> {
    let opened = sealer.open(at, stored).await?;
    Ok(opened == *plain || gitstate_statefile::same_json(&opened, plain))
}

/// Opens a format gitstate reads but never writes: terraform-backend-git's legacy `aes` output
/// (AES-256-GCM under a passphrase, binary). The [`crate::Backend`] asks it first when it reads a
/// stored file; what it opens is then handled like plaintext (served, and sealed with the
/// configured keys, or stored as plaintext without keys, on the next write).
pub trait Opener: Send + Sync + fmt::Debug + 'static {
    /// What the format is called in messages, e.g. `terraform-backend-git's legacy aes`.
    fn format(&self) -> &str;

    /// Where the key comes from, for the sentence of a file it cannot open (a setting's name,
    /// never its value), e.g. `the passphrase in TF_BACKEND_HTTP_ENCRYPTION_PASSPHRASE`.
    fn key_source(&self) -> &str;

    /// The plaintext held in `stored` when it is in this format and opens with the configured
    /// key (its integrity checked); `None` otherwise: another format, or another key.
    fn open(&self, stored: &[u8]) -> Option<Bytes>;
}

/// Whether `state` is one JSON value that serde_json reads completely (nesting deeper than its
/// recursion limit counts as JSON: the sealer refuses that depth with its own sentence).
pub fn is_json(state: &[u8]) -> bool {
    match serde_json::from_slice::<serde::de::IgnoredAny>(state) {
        Ok(_) => true,
        Err(e) => e.to_string().contains("recursion limit exceeded"),
    }
}

/// Whether `state` is a sops document (a top-level `sops` object with a `mac` or `version`).
pub fn is_sops_document(state: &[u8]) -> bool {
    memchr::memmem::find(state, b"\"sops\"").is_some() && sops_keys(state).is_some()
}

/// Refuses to hand out, as a Terraform state, a stored file that is still sealed: a sops document
/// this server could not open (no sealer, or one without its keys passed it through), or a file
/// that is not JSON at all (terraform-backend-git's legacy `aes` output is binary). The error names
/// the keys the document needs. Anything else (plaintext JSON) passes.
pub fn refuse_sealed(at: &Place, state: &[u8]) -> Result<(), SealError> {
    let first = state.iter().find(|b| !b.is_ascii_whitespace());
    // A legacy aes file starts with a random byte: `{` one time in 256, so JSON is checked whole.
    if first.is_some() && (first != Some(&b'{') || !is_json(state)) {
        return Err(SealError::NoKey {
            sentence: format!(
                "the stored file at {at} is not JSON ({} bytes), so it is not served as a state; if terraform-backend-git wrote it with TF_BACKEND_HTTP_ENCRYPTION_PROVIDER=aes, it needs that passphrase (TF_BACKEND_HTTP_ENCRYPTION_PASSPHRASE)",
                state.len()
            ),
            why: None,
        });
    }
    // Cheap first: a sops document holds both of these; a plain state almost never does.
    if memchr::memmem::find(state, b"\"sops\"").is_none()
        || memchr::memmem::find(state, b"ENC[").is_none()
    {
        return Ok(());
    }
    let Some(keys) = sops_keys(state) else {
        return Ok(());
    };
    Err(SealError::NoKey {
        sentence: format!(
            "the stored state at {at} is encrypted (a sops document) and this server has no key to open it, so it is not served; {}",
            if keys.is_empty() {
                "the document names no key it needs".to_owned()
            } else {
                format!("it needs one of the keys {}", keys.join(", "))
            }
        ),
        why: None,
    })
}

/// The master keys a sops document's metadata names (`kms:ARN`, `age:RECIPIENT`, `pgp:FP`, …),
/// or `None` when `state` is not a document with a top-level `sops` object.
fn sops_keys(state: &[u8]) -> Option<Vec<String>> {
    #[derive(serde::Deserialize)]
    struct Top {
        sops: Option<serde_json::Map<String, serde_json::Value>>,
    }
    let sops = serde_json::from_slice::<Top>(state).ok()?.sops?;
    if !sops.contains_key("mac") && !sops.contains_key("version") {
        return None;
    }
    let fields: [(&str, &[&str]); 6] = [
        ("kms", &["arn"]),
        ("age", &["recipient"]),
        ("pgp", &["fp"]),
        ("gcp_kms", &["resource_id"]),
        ("azure_kv", &["vault_url", "name"]),
        ("hc_vault", &["vault_address", "engine_path", "key_name"]),
    ];
    let groups = match sops.get("key_groups").and_then(|g| g.as_array()) {
        Some(groups) => groups.iter().filter_map(|g| g.as_object()).collect(),
        None => vec![&sops],
    };
    let mut keys = Vec::new();
    for group in groups {
        for (kind, names) in fields {
            for entry in group
                .get(kind)
                .and_then(|v| v.as_array())
                .into_iter()
                .flatten()
            {
                let id: Vec<&str> = names
                    .iter()
                    .filter_map(|n| entry.get(*n).and_then(|v| v.as_str()))
                    .collect();
                if !id.is_empty() {
                    keys.push(format!(
                        "{kind}:{}",
                        crate::text::escape_controls(&id.join("/"))
                    ));
                }
            }
        }
    }
    keys.dedup();
    Some(keys)
}
