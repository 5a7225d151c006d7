//! Master keys: the trait that wraps/unwraps the data key, and the age X25519 implementation.

use std::io::{Read, Write};
use std::path::Path;
use std::str::FromStr;

use zeroize::Zeroizing;

use crate::tree::Node;
use crate::SopsError;

/// One master-key entry of the `sops` metadata (e.g. one element of `sops.age`), as read
/// from or written to the document.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyEntry {
    /// The metadata list it belongs to: `age`, `kms`, `pgp`, `gcp_kms`, `azure_kv`, `hc_vault`, ...
    pub kind: String,
    /// Its fields in document order (`recipient`, `enc`, `arn`, `context`, ...).
    pub fields: Vec<(String, Node)>,
}

impl KeyEntry {
    /// The string field `name`, if present.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.as_str())
    }

    /// A public identifier for messages: the recipient, ARN, fingerprint, GCP resource id, or
    /// for Vault transit the key's URI as sops takes it (never `enc`).
    pub fn id(&self) -> String {
        if let (Some(address), Some(engine), Some(name)) = (
            self.field("vault_address"),
            self.field("engine_path"),
            self.field("key_name"),
        ) {
            return format!(
                "{}/v1/{}/keys/{name}",
                address.trim_end_matches('/'),
                engine.trim_matches('/')
            );
        }
        for f in [
            "recipient",
            "arn",
            "fp",
            "resource_id",
            "key_id",
            "key_name",
            "name",
        ] {
            if let Some(v) = self.field(f) {
                return v.to_owned();
            }
        }
        "?".to_owned()
    }
}

/// A master key: wraps the data key when writing and tries to unwrap it when reading.
///
/// Implementations exist for age here; AWS KMS is meant to implement the same trait.
pub trait MasterKey: Send + Sync {
    /// The metadata list this key lives in (`"age"`, `"kms"`, ...).
    fn kind(&self) -> &'static str;
    /// A public identifier (age recipient, KMS ARN), used in metadata and error messages.
    fn id(&self) -> String;
    /// Wraps `data_key` and returns the metadata entry to store (its `kind` must be [`MasterKey::kind`]).
    fn wrap(&self, data_key: &[u8]) -> Result<KeyEntry, SopsError>;
    /// Tries to unwrap the data key from `entry` (whose `kind` equals [`MasterKey::kind`]).
    /// `Ok(None)` means "not mine" (e.g. a recipient-only key, or another identity). The key is
    /// zeroed when dropped.
    fn unwrap(&self, entry: &KeyEntry) -> Result<Option<Zeroizing<Vec<u8>>>, SopsError>;
}

/// An age X25519 key: a recipient (wrap only) or an identity (wrap to its own recipient and unwrap).
pub struct AgeKey {
    recipient: age::x25519::Recipient,
    identity: Option<age::x25519::Identity>,
}

impl std::fmt::Debug for AgeKey {
    /// Shows the recipient only, never the identity.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgeKey")
            .field("recipient", &self.recipient.to_string())
            .field("has_identity", &self.identity.is_some())
            .finish()
    }
}

impl AgeKey {
    /// A recipient (`age1…`), which can only wrap.
    pub fn recipient(recipient: &str) -> Result<AgeKey, SopsError> {
        let r = age::x25519::Recipient::from_str(recipient.trim()).map_err(|e| SopsError::Key {
            kind: "age".into(),
            id: recipient.to_owned(),
            reason: format!("not an age X25519 recipient: {e}"),
        })?;
        Ok(AgeKey {
            recipient: r,
            identity: None,
        })
    }

    /// An identity (`AGE-SECRET-KEY-1…`), which can wrap to its recipient and unwrap.
    pub fn identity(secret: &str) -> Result<AgeKey, SopsError> {
        let id = age::x25519::Identity::from_str(secret.trim()).map_err(|_| SopsError::Key {
            kind: "age".into(),
            id: "(identity)".into(),
            reason: "not an age X25519 identity (AGE-SECRET-KEY-1…)".into(),
        })?;
        Ok(AgeKey {
            recipient: id.to_public(),
            identity: Some(id),
        })
    }

    /// A new random identity (for tests and key generation; its secret never leaves the process
    /// through this crate).
    pub fn generate() -> AgeKey {
        let id = age::x25519::Identity::generate();
        AgeKey {
            recipient: id.to_public(),
            identity: Some(id),
        }
    }

    /// Parses a list of recipients separated by commas and/or whitespace, as in
    /// `SOPS_AGE_RECIPIENTS` or `sops --age`.
    pub fn parse_recipients(list: &str) -> Result<Vec<AgeKey>, SopsError> {
        list.split(|c: char| c == ',' || c.is_whitespace())
            .filter(|r| !r.is_empty())
            .map(AgeKey::recipient)
            .collect()
    }

    /// Parses the identities of an age key file (`SOPS_AGE_KEY_FILE` format: one
    /// `AGE-SECRET-KEY-1…` a line, `#` comments and blank lines ignored).
    pub fn parse_identities(text: &str) -> Result<Vec<AgeKey>, SopsError> {
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .enumerate()
            .map(|(n, l)| {
                AgeKey::identity(l).map_err(|_| SopsError::Key {
                    kind: "age".into(),
                    id: format!("key file line {}", n + 1),
                    reason: "not an age X25519 identity (AGE-SECRET-KEY-1…)".into(),
                })
            })
            .collect()
    }

    /// Reads the identities of an age key file.
    pub fn read_identities(path: &Path) -> Result<Vec<AgeKey>, SopsError> {
        let text = std::fs::read_to_string(path).map_err(|source| SopsError::Io {
            path: path.display().to_string(),
            source,
        })?;
        AgeKey::parse_identities(&text)
    }

    /// A 32-byte secret for `purpose`, derived from this key's identity (HMAC-SHA256 keyed with
    /// the identity's secret text); `None` for a recipient-only key. Only the holder of the
    /// identity can compute it, so it can authenticate what this holder wrote.
    pub fn derive_secret(&self, purpose: &[u8]) -> Option<Zeroizing<[u8; 32]>> {
        use age::secrecy::ExposeSecret;
        use hmac::Mac;
        let identity = self.identity.as_ref()?;
        let secret = identity.to_string();
        let mut mac =
            hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.expose_secret().as_bytes()).ok()?;
        mac.update(purpose);
        let mut out = Zeroizing::new([0u8; 32]);
        out.copy_from_slice(&mac.finalize().into_bytes());
        Some(out)
    }

    fn err(&self, reason: String) -> SopsError {
        SopsError::Key {
            kind: "age".into(),
            id: self.recipient.to_string(),
            reason,
        }
    }
}

impl MasterKey for AgeKey {
    fn kind(&self) -> &'static str {
        "age"
    }
    fn id(&self) -> String {
        self.recipient.to_string()
    }
    fn wrap(&self, data_key: &[u8]) -> Result<KeyEntry, SopsError> {
        use age::armor::{ArmoredWriter, Format};
        let enc = age::Encryptor::with_recipients(std::iter::once(
            &self.recipient as &dyn age::Recipient,
        ))
        .map_err(|e| self.err(format!("age encryption failed: {e}")))?;
        let io = |e: std::io::Error| self.err(format!("age encryption failed: {e}"));
        let armored = ArmoredWriter::wrap_output(Vec::new(), Format::AsciiArmor).map_err(io)?;
        let mut w = enc.wrap_output(armored).map_err(io)?;
        w.write_all(data_key).map_err(io)?;
        let out = w.finish().map_err(io)?.finish().map_err(io)?;
        let text = String::from_utf8(out).map_err(|_| self.err("armor is not UTF-8".into()))?;
        Ok(KeyEntry {
            kind: "age".into(),
            fields: vec![
                ("recipient".into(), Node::Str(self.recipient.to_string())),
                ("enc".into(), Node::Str(text)),
            ],
        })
    }
    fn unwrap(&self, entry: &KeyEntry) -> Result<Option<Zeroizing<Vec<u8>>>, SopsError> {
        let Some(identity) = &self.identity else {
            return Ok(None);
        };
        let enc = entry.field("enc").ok_or_else(|| {
            SopsError::Metadata(format!("age entry for {} has no enc", entry.id()))
        })?;
        let reader = age::armor::ArmoredReader::new(enc.trim_start().as_bytes());
        let dec = age::Decryptor::new(reader)
            .map_err(|e| self.err(format!("enc of {} is not an age file: {e}", entry.id())))?;
        match dec.decrypt(std::iter::once(identity as &dyn age::Identity)) {
            Ok(mut r) => {
                // room for a data key or a Shamir share, so reading does not reallocate (a
                // reallocation would leave a copy behind)
                let mut key = Zeroizing::new(Vec::with_capacity(128));
                r.read_to_end(&mut key)
                    .map_err(|e| self.err(format!("reading the age payload failed: {e}")))?;
                Ok(Some(key))
            }
            Err(age::DecryptError::NoMatchingKeys) => Ok(None),
            Err(e) => Err(self.err(format!("age decryption failed: {e}"))),
        }
    }
}

/// A memory of unwrapped data keys, so reading the same document again calls no master key.
/// Entries are looked up by [`key_fingerprint`] of a document's wrapped entries.
pub trait DataKeyCache: Send + Sync {
    /// The data key stored for `fingerprint`, if still held.
    fn get(&self, fingerprint: &[u8; 32]) -> Option<Zeroizing<Vec<u8>>>;
    /// Remembers `data_key` for `fingerprint`.
    fn put(&self, fingerprint: [u8; 32], data_key: Zeroizing<Vec<u8>>);
}

/// SHA-256 over the wrapped entries (every field of each, group by group: `kind`, `enc`, and what
/// the master key unwraps under, such as a KMS encryption context) and the threshold: the same
/// entries always unwrap to the same data key, so this names a data key without revealing it.
/// An entry whose context was edited is another entry (its key comes from the master key, which
/// checks the context, never from a cache).
pub fn key_fingerprint(groups: &[Vec<KeyEntry>], threshold: usize) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    let mut field = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    field(&(threshold as u64).to_le_bytes());
    for group in groups {
        field(b"\x01group");
        for entry in group {
            field(b"\x02entry");
            field(entry.kind.as_bytes());
            for (name, value) in &entry.fields {
                field(name.as_bytes());
                field(&value.to_json());
            }
        }
    }
    h.finalize().into()
}

/// The keys available for decryption.
#[derive(Default)]
pub struct KeySource {
    keys: Vec<Box<dyn MasterKey>>,
    cache: Option<std::sync::Arc<dyn DataKeyCache>>,
}

impl KeySource {
    /// An empty key source.
    pub fn new() -> KeySource {
        KeySource::default()
    }

    /// Adds a key.
    pub fn with(mut self, key: Box<dyn MasterKey>) -> KeySource {
        self.keys.push(key);
        self
    }

    /// Adds a key.
    pub fn push(&mut self, key: Box<dyn MasterKey>) {
        self.keys.push(key);
    }

    /// The age identities of a key file.
    pub fn from_age_key_file(path: &Path) -> Result<KeySource, SopsError> {
        let mut ks = KeySource::new();
        for k in AgeKey::read_identities(path)? {
            ks.push(Box::new(k));
        }
        Ok(ks)
    }

    /// The age identities named by the environment like sops does: `SOPS_AGE_KEY`
    /// (identities inline) and `SOPS_AGE_KEY_FILE` (a key file).
    pub fn from_env() -> Result<KeySource, SopsError> {
        let mut ks = KeySource::new();
        if let Ok(text) = std::env::var("SOPS_AGE_KEY") {
            for k in AgeKey::parse_identities(&text)? {
                ks.push(Box::new(k));
            }
        }
        if let Ok(path) = std::env::var("SOPS_AGE_KEY_FILE") {
            for k in AgeKey::read_identities(Path::new(&path))? {
                ks.push(Box::new(k));
            }
        }
        Ok(ks)
    }

    /// The configured keys.
    pub fn keys(&self) -> &[Box<dyn MasterKey>] {
        &self.keys
    }

    /// Remembers unwrapped data keys in `cache` (and looks there first).
    pub fn with_cache(mut self, cache: std::sync::Arc<dyn DataKeyCache>) -> KeySource {
        self.cache = Some(cache);
        self
    }

    /// The data-key cache, if any.
    pub fn cache(&self) -> Option<&dyn DataKeyCache> {
        self.cache.as_deref()
    }
}
