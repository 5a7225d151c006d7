//! The `Sealer` port: what turns a state into the bytes stored in the repository, and back.
//!
//! The protocol layer calls [`Sealer::seal`] before every write and [`Sealer::open`] after every
//! read; an adapter (sops with AWS KMS and age keys) implements it. Without a sealer, states are
//! stored exactly as POSTed.
//!
//! Every call names the [`Place`] of the state (repository and path): a sealed document is bound
//! to it, so one copied to another place is refused rather than served there.

use std::fmt;

use async_trait::async_trait;
use bytes::Bytes;

use crate::path::StatePath;

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
    #[error("encryption is unavailable: {0}")]
    Unavailable(String),
    /// No configured key opens the stored file; names the key ids tried, never key material (500).
    #[error("cannot decrypt the stored state: {0}")]
    NoKey(String),
    /// The stored file was modified outside gitstate or is corrupt; it is not served (500).
    #[error("the stored state fails its integrity check: {0}")]
    Tampered(String),
    /// The stored file was sealed for another place (repository or path) and was copied here;
    /// it is not served (500). The message names both places.
    #[error("{0}")]
    Misplaced(String),
    /// Encryption is enforced and the stored file is not a document this server sealed with its
    /// own keys (plaintext, or written by someone else); it is not served (500).
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
    /// bound to `at`. A state the client encrypted itself (OpenTofu's `encrypted_data`) may be
    /// returned unchanged.
    async fn seal(&self, at: &Place, plain: Bytes) -> Result<Bytes, SealError>;

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
    Ok(opened == *plain || same_json(&opened, plain))
}

/// Whether two JSON documents hold the same value.
pub fn same_json(a: &[u8], b: &[u8]) -> bool {
    match (
        serde_json::from_slice::<serde_json::Value>(a),
        serde_json::from_slice::<serde_json::Value>(b),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}
