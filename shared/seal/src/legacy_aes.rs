//! terraform-backend-git's legacy `aes` encryption provider, read-only: gitstate opens what it
//! stored and never writes the format.
//!
//! The format, as its source defines it (`crypt/aes.go` and `crypt/crypt.go` of
//! plumber-cd/terraform-backend-git, unchanged since 2020): the key is the 32 ASCII characters of
//! the lower-case hex MD5 of the passphrase, used as an AES-256 key; the stored file is the
//! 12-byte GCM nonce, then the AES-256-GCM ciphertext with its 16-byte tag, without associated
//! data. The whole state file is one binary blob. Test vectors made with Python's `cryptography`
//! are in `tests/vectors/legacy-aes/`.

use aes_gcm::aead::{Aead, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce};
use bytes::Bytes;
use gitstate_core::Opener;
use gitstate_sops::Zeroizing;
use md5::{Digest, Md5};

/// GCM's standard nonce size, which Go's `cipher.NewGCM` uses.
const NONCE_BYTES: usize = 12;
/// GCM's tag size.
const TAG_BYTES: usize = 16;

/// A passphrase (terraform-backend-git's `TF_BACKEND_HTTP_ENCRYPTION_PASSPHRASE`): zeroed when
/// dropped, never printed by `Debug`. `source` names where it came from (a setting's name).
#[derive(Clone, PartialEq, Eq)]
pub struct Passphrase {
    value: Zeroizing<String>,
    /// Where it was configured, e.g. `environment TF_BACKEND_HTTP_ENCRYPTION_PASSPHRASE`.
    pub source: String,
}

impl Passphrase {
    /// `value`, configured by `source`.
    pub fn new(value: Zeroizing<String>, source: impl Into<String>) -> Passphrase {
        Passphrase {
            value,
            source: source.into(),
        }
    }
}

impl std::fmt::Debug for Passphrase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Passphrase")
            .field("value", &"<redacted>")
            .field("source", &self.source)
            .finish()
    }
}

/// Opens terraform-backend-git's legacy aes files under one passphrase.
pub struct LegacyAes {
    cipher: Aes256Gcm,
    key_source: String,
}

impl std::fmt::Debug for LegacyAes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LegacyAes")
            .field("key", &"<redacted>")
            .field("key_source", &self.key_source)
            .finish()
    }
}

impl LegacyAes {
    /// The opener of files written under `passphrase`.
    pub fn new(passphrase: &Passphrase) -> LegacyAes {
        let digest = Md5::digest(passphrase.value.as_bytes());
        let mut key = Zeroizing::new([0u8; 32]);
        for (i, byte) in digest.iter().enumerate() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            key[2 * i] = HEX[usize::from(byte >> 4)];
            key[2 * i + 1] = HEX[usize::from(byte & 0x0f)];
        }
        LegacyAes {
            cipher: Aes256Gcm::new(aes_gcm::Key::<Aes256Gcm>::from_slice(key.as_slice())),
            key_source: format!("the passphrase in {}", passphrase.source),
        }
    }
}

impl Opener for LegacyAes {
    fn format(&self) -> &str {
        "terraform-backend-git's legacy aes"
    }

    fn key_source(&self) -> &str {
        &self.key_source
    }

    fn open(&self, stored: &[u8]) -> Option<Bytes> {
        if stored.len() < NONCE_BYTES + TAG_BYTES {
            return None;
        }
        let (nonce, sealed) = stored.split_at(NONCE_BYTES);
        self.cipher
            .decrypt(Nonce::from_slice(nonce), sealed)
            .ok()
            .map(Bytes::from)
    }
}
