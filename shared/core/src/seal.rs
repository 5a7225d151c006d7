//! The `Sealer` port: what turns a state into the bytes stored in the repository, and back.
//!
//! The protocol layer calls [`Sealer::seal`] before every write and [`Sealer::open`] after every
//! read; an adapter (sops with AWS KMS and age keys) implements it. Without a sealer, states are
//! stored exactly as POSTed.

use std::fmt;

use async_trait::async_trait;
use bytes::Bytes;

use crate::path::StatePath;

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
    /// The state cannot be sealed as sent (400).
    #[error("{0}")]
    BadInput(String),
    /// Encryption failed for another reason (500).
    #[error("encryption failed: {0}")]
    Internal(String),
}

/// Seals states for storage and opens stored states. Implementations must be deterministic in
/// meaning: `open(seal(x))` is `x` as a JSON value (formatting may differ).
#[async_trait]
pub trait Sealer: Send + Sync + fmt::Debug + 'static {
    /// The bytes to store for the state `plain`. `previous` is what is stored at `path` now (the
    /// version this write replaces), so an adapter can keep its data key while its key set is
    /// unchanged. A state the client encrypted itself (OpenTofu's `encrypted_data`) must be
    /// returned unchanged.
    async fn seal(
        &self,
        path: &StatePath,
        plain: Bytes,
        previous: Option<&Bytes>,
    ) -> Result<Bytes, SealError>;

    /// The state held in `stored` (a sealed document, or plaintext written before sealing was
    /// configured, which is returned as it is).
    async fn open(&self, path: &StatePath, stored: Bytes) -> Result<Bytes, SealError>;

    /// Whether `stored` already holds the state `plain` (a client retry must not make a commit).
    /// `false` may be answered for equal values in a different form (an extra commit, never a lost
    /// write); `true` only when they are equal. The default opens `stored` and compares JSON
    /// values; adapters can answer from a digest without decrypting every value.
    async fn holds(
        &self,
        path: &StatePath,
        stored: Bytes,
        plain: &Bytes,
    ) -> Result<bool, SealError> {
        holds_by_opening(self, path, stored, plain).await
    }
}

/// [`Sealer::holds`] the slow, always-correct way: open `stored` and compare JSON values.
pub async fn holds_by_opening<S: Sealer + ?Sized>(
    sealer: &S,
    path: &StatePath,
    stored: Bytes,
    plain: &Bytes,
) -> Result<bool, SealError> {
    let opened = sealer.open(path, stored).await?;
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
