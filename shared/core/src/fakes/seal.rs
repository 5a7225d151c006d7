//! The fake [`Sealer`] and [`Opener`]: documents bound to their place, fresh key material per seal.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

use crate::seal::{Opener, Place, SealError, Sealer};
use gitstate_statefile::CheckedState;

/// The prefix of every document [`MemorySealer`] seals; anything else it reads is plaintext.
pub const FAKE_SEAL_PREFIX: &str = "fake-sealed ";

/// A [`Sealer`] that keeps the port's rules without cryptography: a sealed document is
/// `fake-sealed {place} {nonce} {state}`, bound to its place (opened elsewhere: `Misplaced`),
/// with a fresh nonce per seal (standing for a fresh data key). Plaintext reads as it is unless
/// `enforced`. It can be made to fail like an unreachable key service.
#[derive(Debug, Default)]
pub struct MemorySealer {
    enforced: bool,
    nonce: AtomicU64,
    outage: std::sync::atomic::AtomicBool,
    seals: AtomicU32,
    opens: AtomicU32,
}

impl MemorySealer {
    /// A sealer that also serves plaintext written before sealing was configured.
    pub fn new() -> Arc<MemorySealer> {
        Arc::new(MemorySealer::default())
    }

    /// A sealer that serves only what it sealed.
    pub fn enforced() -> Arc<MemorySealer> {
        Arc::new(MemorySealer {
            enforced: true,
            ..MemorySealer::default()
        })
    }

    /// Makes every call fail as when the key service cannot be reached (`true`), or work again.
    pub fn set_outage(&self, outage: bool) {
        self.outage.store(outage, Ordering::SeqCst);
    }

    /// How many documents it sealed.
    pub fn seals(&self) -> u32 {
        self.seals.load(Ordering::SeqCst)
    }

    /// How many sealed documents it opened.
    pub fn opens(&self) -> u32 {
        self.opens.load(Ordering::SeqCst)
    }

    fn available(&self) -> Result<(), SealError> {
        if self.outage.load(Ordering::SeqCst) {
            Err(SealError::Unavailable {
                key: "the fake key".into(),
                why: "the fake key service is unreachable".into(),
            })
        } else {
            Ok(())
        }
    }
}

#[async_trait]
impl Sealer for MemorySealer {
    async fn seal(&self, at: &Place, plain: &CheckedState) -> Result<Bytes, SealError> {
        self.available()?;
        let text = std::str::from_utf8(&plain.body)
            .map_err(|_| SealError::BadInput("the state is not UTF-8".into()))?;
        self.seals.fetch_add(1, Ordering::SeqCst);
        let nonce = self.nonce.fetch_add(1, Ordering::SeqCst);
        Ok(Bytes::from(format!(
            "{FAKE_SEAL_PREFIX}{at} {nonce} {text}"
        )))
    }

    async fn open(&self, at: &Place, stored: Bytes) -> Result<Bytes, SealError> {
        let Some(rest) = stored.strip_prefix(FAKE_SEAL_PREFIX.as_bytes()) else {
            if self.enforced {
                return Err(SealError::NotSealedHere(format!(
                    "the stored state at {at} was not sealed by this server"
                )));
            }
            return Ok(stored);
        };
        self.available()?;
        self.opens.fetch_add(1, Ordering::SeqCst);
        let mut parts = rest.splitn(3, |b| *b == b' ');
        let (Some(place), Some(_nonce), Some(state)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(SealError::Tampered(format!(
                "the sealed document at {at} is cut short"
            )));
        };
        if place != at.to_string().as_bytes() {
            return Err(SealError::Misplaced(format!(
                "the state at {at} was sealed for {}",
                String::from_utf8_lossy(place)
            )));
        }
        Ok(Bytes::copy_from_slice(state))
    }
}

/// An [`Opener`] without cryptography, standing for terraform-backend-git's legacy aes: a file
/// in its format is the byte 0xff, then `fake-aes {key} {state}` (binary: not JSON, not UTF-8);
/// it opens under its key only.
#[derive(Debug)]
pub struct MemoryOpener {
    key: String,
}

impl MemoryOpener {
    /// An opener of files sealed under `key`.
    pub fn new(key: &str) -> Arc<MemoryOpener> {
        Arc::new(MemoryOpener {
            key: key.to_owned(),
        })
    }

    /// `state` in the fake legacy format under `key`.
    pub fn seal(key: &str, state: &[u8]) -> Vec<u8> {
        let mut out = vec![0xff];
        out.extend_from_slice(format!("fake-aes {key} ").as_bytes());
        out.extend_from_slice(state);
        out
    }
}

impl Opener for MemoryOpener {
    fn format(&self) -> &str {
        "fake legacy aes"
    }

    fn key_source(&self) -> &str {
        "the configured fake passphrase"
    }

    fn open(&self, stored: &[u8]) -> Option<Bytes> {
        let prefix = MemoryOpener::seal(&self.key, b"");
        stored
            .strip_prefix(prefix.as_slice())
            .map(Bytes::copy_from_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::StatePath;

    fn path(p: &str) -> StatePath {
        StatePath::parse(p).expect("a valid path")
    }

    #[tokio::test]
    async fn the_sealer_binds_documents_to_their_place_and_never_reuses_a_nonce() {
        let sealer = MemorySealer::new();
        let here = Place::new("repo", &path("a.tfstate"));
        let there = Place::new("repo", &path("b.tfstate"));
        let state = gitstate_statefile::check(Bytes::from(r#"{"version":4}"#), false).unwrap();
        let one = sealer.seal(&here, &state).await.expect("seal");
        let two = sealer.seal(&here, &state).await.expect("seal");
        assert_ne!(one, two, "every seal uses fresh key material");
        assert_eq!(
            sealer.open(&here, one.clone()).await,
            Ok(state.body.clone())
        );
        assert!(matches!(
            sealer.open(&there, one).await,
            Err(SealError::Misplaced(_))
        ));
        assert_eq!(
            sealer.open(&here, Bytes::from("{\"plain\":1}")).await,
            Ok(Bytes::from("{\"plain\":1}"))
        );
        assert!(matches!(
            MemorySealer::enforced()
                .open(&here, Bytes::from("{}"))
                .await,
            Err(SealError::NotSealedHere(_))
        ));
        sealer.set_outage(true);
        assert!(matches!(
            sealer.seal(&here, &state).await,
            Err(SealError::Unavailable { .. })
        ));
    }
}
