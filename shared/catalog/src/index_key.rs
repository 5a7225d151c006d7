//! The key of the resource index: identifiers are stored as keyed hashes (HMAC-SHA256), and the
//! values and addresses a report shows are stored encrypted (AES-256-GCM), so the table holds no
//! value the state's encryption would have sealed. "Who manages X?" hashes the question.
//!
//! The key is one random 32-byte secret per table, made by KMS `GenerateDataKey` under the
//! deployment's KMS key and kept in the table wrapped (item `pk = CONFIG`, `sk = index-key`):
//! whoever reads the index needs `kms:Decrypt` on that key as well as the table. A process
//! unwraps it once and keeps it (zeroed when dropped).

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use gitstate_core::CatalogError;
use hmac::Mac;
use zeroize::Zeroizing;

/// What the KMS encryption context of the wrapped index key says (it opens under no other).
pub const INDEX_KEY_CONTEXT: (&str, &str) = ("gitstate_purpose", "catalog-index-key");

/// The two keys derived from the index secret.
pub struct IndexKeys {
    mac: Zeroizing<[u8; 32]>,
    enc: Zeroizing<[u8; 32]>,
}

impl std::fmt::Debug for IndexKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IndexKeys(<redacted>)")
    }
}

/// What a hashed or sealed text is (kept apart so a value's hash never equals an address's).
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// An identifier's value (`id`, `arn`, `self_link`, `name`).
    Value,
    /// A resource instance's address.
    Address,
    /// A link across states: its identity (hashed) and its two sides (sealed).
    Link,
}

impl Kind {
    fn label(self) -> &'static [u8] {
        match self {
            Kind::Value => b"value",
            Kind::Address => b"address",
            Kind::Link => b"link",
        }
    }
}

fn hmac(key: &[u8], parts: &[&[u8]]) -> Result<[u8; 32], CatalogError> {
    let mut mac = <hmac::Hmac<sha2::Sha256> as Mac>::new_from_slice(key)
        .map_err(|e| CatalogError(format!("HMAC setup failed: {e}")))?;
    for part in parts {
        mac.update(&(part.len() as u64).to_be_bytes());
        mac.update(part);
    }
    Ok(mac.finalize().into_bytes().into())
}

impl IndexKeys {
    /// The keys derived from the 32-byte index secret.
    pub fn from_secret(secret: &[u8]) -> Result<IndexKeys, CatalogError> {
        if secret.len() != 32 {
            return Err(CatalogError(format!(
                "the resource index key must be 32 bytes, got {}",
                secret.len()
            )));
        }
        Ok(IndexKeys {
            mac: Zeroizing::new(hmac(secret, &[b"gitstate catalog index mac v1"])?),
            enc: Zeroizing::new(hmac(secret, &[b"gitstate catalog index enc v1"])?),
        })
    }

    /// The keyed hash of `text` (lower-case hex): equal texts give equal hashes, and nobody
    /// without the key can compute one or test a guess.
    pub fn hash(&self, kind: Kind, text: &str) -> Result<String, CatalogError> {
        Ok(hex(&hmac(
            self.mac.as_slice(),
            &[kind.label(), text.as_bytes()],
        )?))
    }

    /// `text` encrypted, bound to its hash (a sealed text moved to another item does not open):
    /// `v1:` and base64 of the 12-byte nonce, the ciphertext and the tag.
    pub fn seal(&self, kind: Kind, hash: &str, text: &str) -> Result<String, CatalogError> {
        use rand::RngCore;
        let cipher = Aes256Gcm::new_from_slice(self.enc.as_slice())
            .map_err(|_| CatalogError("the index encryption key is malformed".into()))?;
        let mut nonce = [0u8; 12];
        rand::rng().fill_bytes(&mut nonce);
        let aad = aad(kind, hash);
        let sealed = cipher
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: text.as_bytes(),
                    aad: &aad,
                },
            )
            .map_err(|_| CatalogError("encrypting an index entry failed".into()))?;
        let mut out = nonce.to_vec();
        out.extend(sealed);
        Ok(format!("v1:{}", B64.encode(out)))
    }

    /// The text [`IndexKeys::seal`] sealed.
    pub fn open(&self, kind: Kind, hash: &str, sealed: &str) -> Result<String, CatalogError> {
        let bad = || {
            CatalogError(format!("an index entry ({hash}) does not decrypt with the index key: it was changed, or written under another key"))
        };
        let bytes = sealed
            .strip_prefix("v1:")
            .and_then(|b| B64.decode(b).ok())
            .filter(|b| b.len() > 12)
            .ok_or_else(bad)?;
        let cipher = Aes256Gcm::new_from_slice(self.enc.as_slice())
            .map_err(|_| CatalogError("the index encryption key is malformed".into()))?;
        let aad = aad(kind, hash);
        let plain = cipher
            .decrypt(
                Nonce::from_slice(&bytes[..12]),
                Payload {
                    msg: &bytes[12..],
                    aad: &aad,
                },
            )
            .map_err(|_| bad())?;
        String::from_utf8(plain).map_err(|_| bad())
    }
}

fn aad(kind: Kind, hash: &str) -> Vec<u8> {
    let mut aad = b"gitstate-catalog-v1\0".to_vec();
    aad.extend_from_slice(kind.label());
    aad.push(0);
    aad.extend_from_slice(hash.as_bytes());
    aad
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_keyed_and_sealed_texts_bound_to_them() {
        let a = IndexKeys::from_secret(&[7; 32]).unwrap();
        let b = IndexKeys::from_secret(&[8; 32]).unwrap();
        let h = a.hash(Kind::Value, "i-0123").unwrap();
        assert_eq!(h, a.hash(Kind::Value, "i-0123").unwrap());
        assert_eq!(h.len(), 64);
        assert_ne!(h, b.hash(Kind::Value, "i-0123").unwrap(), "unkeyed");
        assert_ne!(h, a.hash(Kind::Address, "i-0123").unwrap(), "kinds mixed");
        let sealed = a.seal(Kind::Value, &h, "i-0123").unwrap();
        assert!(!sealed.contains("i-0123"));
        assert_ne!(
            sealed,
            a.seal(Kind::Value, &h, "i-0123").unwrap(),
            "nonce reused"
        );
        assert_eq!(a.open(Kind::Value, &h, &sealed).unwrap(), "i-0123");
        let other = a.hash(Kind::Value, "i-9999").unwrap();
        assert!(
            a.open(Kind::Value, &other, &sealed).is_err(),
            "moved to another hash"
        );
        assert!(
            a.open(Kind::Address, &h, &sealed).is_err(),
            "kind not bound"
        );
        assert!(
            b.open(Kind::Value, &h, &sealed).is_err(),
            "another key opens it"
        );
        assert!(IndexKeys::from_secret(&[1; 16]).is_err());
    }
}
