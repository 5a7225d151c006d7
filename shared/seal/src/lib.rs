//! gitstate's [`Sealer`] adapter: states at rest as sops v3 JSON documents (DESIGN §5) whose data
//! key is wrapped by AWS KMS keys and/or age recipients.
//!
//! - Modes: [`Mode::All`] encrypts every value; [`Mode::Structure`] keeps `version`, `serial`,
//!   `lineage` and each resource's `mode`/`type`/`name`/`provider` readable, so `git diff` shows
//!   which resources changed and no secret.
//! - Rotation: reading accepts the current and the fallback keys; writing uses the current key
//!   set. While the set is unchanged the previous version's data key and wrapped entries are
//!   reused (a warm write calls no KMS); when it changed, a new data key is wrapped for the new
//!   set only, so a removed key cannot open new versions.
//! - Unwrapped data keys stay in memory for a bounded time ([`DataKeyMemory`]).
//! - States an OpenTofu client encrypted itself (`encrypted_data`) are stored untouched.

mod kms;
mod memory;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use gitstate_core::{SealError, Sealer, StatePath};
use gitstate_sops::{
    encrypt_groups, key_fingerprint, key_groups, reusable_data_key, AgeKey, Document,
    EncryptOptions, KeyEntry, KeySource, MasterKey, Node, Rules, SopsError,
};

pub use kms::{arn_region, decrypt_secret, load_aws_config, KmsKey};
pub use memory::DataKeyMemory;

/// The `encrypted_regex` of [`Mode::Structure`]: values under these keys are encrypted, the rest
/// of the state (format version, serial, lineage, resource addresses and providers, output types)
/// stays readable. `value` is an output's value; the others are a resource instance's payload.
pub const STRUCTURE_ENCRYPTED_REGEX: &str =
    "^(value|attributes|attributes_flat|sensitive_attributes|sensitive_values|private|identity)$";

/// How much of a state is encrypted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// Every value, like sops' default.
    #[default]
    All,
    /// Values that can hold secrets; the structure stays readable (DESIGN §5).
    Structure,
}

impl std::str::FromStr for Mode {
    type Err = SealConfigError;
    fn from_str(s: &str) -> Result<Mode, SealConfigError> {
        match s {
            "all" => Ok(Mode::All),
            "structure" => Ok(Mode::Structure),
            other => Err(SealConfigError(format!(
                "encryption mode '{other}' is unknown; use \"all\" or \"structure\""
            ))),
        }
    }
}

impl Mode {
    fn rules(self) -> Rules {
        match self {
            Mode::All => EncryptOptions::default().rules,
            Mode::Structure => Rules {
                encrypted_regex: Some(STRUCTURE_ENCRYPTED_REGEX.to_owned()),
                ..Rules::default()
            },
        }
    }
}

/// A configuration that cannot work (bad ARN, bad age key, no key while enforced).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SealConfigError(pub String);

/// What the sealer is built from (the app maps `encryption { … }` and the sops variables here).
#[derive(Debug, Clone, Default)]
pub struct SealerConfig {
    /// How much to encrypt.
    pub mode: Mode,
    /// KMS keys new versions are wrapped for (and that can read).
    pub kms_arns: Vec<String>,
    /// Encryption context for wrapping with `kms_arns`.
    pub kms_context: BTreeMap<String, String>,
    /// KMS keys that may still read older versions but wrap nothing new.
    pub fallback_kms_arns: Vec<String>,
    /// age recipients new versions are wrapped for.
    pub age_recipients: Vec<String>,
    /// age identities (secret keys) for reading, e.g. from `SOPS_AGE_KEY_FILE`.
    pub age_identities: Vec<String>,
    /// How long an unwrapped data key is kept in memory.
    pub data_key_ttl: Duration,
}

impl SealerConfig {
    /// Whether any key would wrap new versions.
    pub fn has_write_keys(&self) -> bool {
        !self.kms_arns.is_empty() || !self.age_recipients.is_empty()
    }
}

/// The sops sealer. Cheap to clone.
#[derive(Clone)]
pub struct SopsSealer {
    inner: Arc<Inner>,
}

struct Inner {
    rules: Rules,
    write_keys: Vec<Box<dyn MasterKey>>,
    /// Identities of `write_keys` (sorted), to tell whether a stored version's key set is current.
    write_set: Vec<String>,
    read_keys: KeySource,
    memory: Arc<DataKeyMemory>,
}

impl std::fmt::Debug for SopsSealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SopsSealer")
            .field("write_keys", &self.inner.write_set)
            .field("rules", &self.inner.rules)
            .finish_non_exhaustive()
    }
}

impl SopsSealer {
    /// Builds the sealer; `None` when no key wraps new versions. KMS clients are created (and the
    /// AWS configuration loaded) only when KMS keys are configured.
    pub async fn from_config(config: &SealerConfig) -> Result<Option<SopsSealer>, SealConfigError> {
        if !config.has_write_keys() {
            return Ok(None);
        }
        let runtime = tokio::runtime::Handle::current();
        let sdk = if config.kms_arns.is_empty() && config.fallback_kms_arns.is_empty() {
            None
        } else {
            Some(load_aws_config().await)
        };
        let memory = Arc::new(DataKeyMemory::new(config.data_key_ttl, 4096));
        let mut write_keys: Vec<Box<dyn MasterKey>> = Vec::new();
        let mut write_set = Vec::new();
        let mut read_keys = KeySource::new().with_cache(memory.clone());
        if let Some(sdk) = &sdk {
            for arn in &config.kms_arns {
                let key = KmsKey::new(arn, config.kms_context.clone(), sdk, runtime.clone())?;
                write_set.push(KmsKey::identity(arn, &config.kms_context));
                read_keys.push(Box::new(key.clone()));
                write_keys.push(Box::new(key));
            }
            for arn in &config.fallback_kms_arns {
                read_keys.push(Box::new(KmsKey::new(
                    arn,
                    BTreeMap::new(),
                    sdk,
                    runtime.clone(),
                )?));
            }
        }
        for recipient in &config.age_recipients {
            let key = AgeKey::recipient(recipient.trim()).map_err(|e| {
                SealConfigError(format!("age recipient '{recipient}' is invalid: {e}"))
            })?;
            write_set.push(format!("age:{}", key.id()));
            write_keys.push(Box::new(key));
        }
        for text in &config.age_identities {
            let keys = AgeKey::parse_identities(text)
                .map_err(|e| SealConfigError(format!("an age identity is invalid: {e}")))?;
            for key in keys {
                read_keys.push(Box::new(key));
            }
        }
        write_set.sort();
        write_set.dedup();
        Ok(Some(SopsSealer {
            inner: Arc::new(Inner {
                rules: config.mode.rules(),
                write_keys,
                write_set,
                read_keys,
                memory,
            }),
        }))
    }

    /// Seals synchronously (KMS calls block; use from a blocking thread).
    pub fn seal_blocking(&self, plain: &[u8], previous: Option<&[u8]>) -> Result<Bytes, SealError> {
        let top = TopKeys::scan(plain)
            .map_err(|e| SealError::BadInput(format!("the state is not valid JSON: {e}")))?;
        if top.encrypted_data {
            // OpenTofu client-side encryption: already ciphertext, stored byte for byte.
            return Ok(Bytes::copy_from_slice(plain));
        }
        if top.sops {
            return Err(SealError::BadInput(
                "the state has a top-level \"sops\" key; gitstate does not seal a document that is already sops-encrypted".into(),
            ));
        }
        let inner = &self.inner;
        let reuse = match previous {
            Some(previous) => self.reusable(previous)?,
            None => None,
        };
        let mut options = EncryptOptions {
            rules: inner.rules.clone(),
            ..EncryptOptions::default()
        };
        let (data_key, fresh_key) = match &reuse {
            Some(reuse) => (reuse.data_key, None),
            None => {
                let key = new_data_key();
                (key, Some(key))
            }
        };
        options.data_key = fresh_key;
        options.reuse = reuse;
        options.extra_metadata.push((
            DIGEST_FIELD.to_owned(),
            Node::Str(plaintext_digest(&data_key, plain)?),
        ));
        let keys: Vec<&dyn MasterKey> = inner.write_keys.iter().map(|k| k.as_ref()).collect();
        let sealed = encrypt_groups(plain, &[&keys], &options).map_err(seal_error)?;
        if let Some(key) = fresh_key {
            tracing::info!(keys = ?inner.write_set, "new data key wrapped for the current key set");
            if let Ok((groups, threshold)) = key_groups(&sealed) {
                use gitstate_sops::DataKeyCache;
                inner
                    .memory
                    .put(key_fingerprint(&groups, threshold), key.to_vec());
            }
        }
        Ok(Bytes::from(sealed))
    }

    /// The previous version's data key when its key set is the current one.
    fn reusable(&self, previous: &[u8]) -> Result<Option<gitstate_sops::Reuse>, SealError> {
        let Ok((groups, _)) = key_groups(previous) else {
            return Ok(None);
        };
        let [group] = groups.as_slice() else {
            return Ok(None);
        };
        let mut set: Vec<String> = group.iter().map(entry_identity).collect();
        set.sort();
        set.dedup();
        if set != self.inner.write_set {
            tracing::info!(stored = ?set, current = ?self.inner.write_set, "key set changed: a new data key will be wrapped");
            return Ok(None);
        }
        match reusable_data_key(previous, &self.inner.read_keys) {
            Ok(reuse) => Ok(Some(reuse)),
            Err(e @ SopsError::Unavailable { .. }) => Err(SealError::Unavailable(e.to_string())),
            Err(e) => {
                tracing::warn!(error = %e, "the previous version's data key cannot be reused");
                Ok(None)
            }
        }
    }

    /// Whether `stored` holds exactly the bytes `plain`, answered from the digest gitstate wrote
    /// into the sops metadata (keyed with the data key, so it reveals nothing without it);
    /// `None` when the document has no digest (real sops wrote it, or it is not sealed).
    pub fn holds_blocking(&self, stored: &[u8], plain: &[u8]) -> Result<Option<bool>, SealError> {
        let Ok(Some(raw)) = gitstate_sops::sops_member(stored) else {
            return Ok(None);
        };
        let Ok(meta) = Node::parse(raw.get().as_bytes()) else {
            return Ok(None);
        };
        let Some(digest) = meta.get(DIGEST_FIELD).and_then(Node::as_str) else {
            return Ok(None);
        };
        match reusable_data_key(stored, &self.inner.read_keys) {
            Ok(reuse) => Ok(Some(plaintext_digest(&reuse.data_key, plain)? == digest)),
            Err(e @ SopsError::Unavailable { .. }) => Err(SealError::Unavailable(e.to_string())),
            Err(e) => Err(open_error(e)),
        }
    }

    /// Opens synchronously (KMS calls block; use from a blocking thread).
    pub fn open_blocking(&self, stored: &[u8]) -> Result<Option<Bytes>, SealError> {
        match TopKeys::scan(stored) {
            Ok(top) if top.sops => {}
            _ => return Ok(None),
        }
        let doc = Document::decrypt(stored, &self.inner.read_keys).map_err(open_error)?;
        Ok(Some(Bytes::from(doc.tree.to_json())))
    }
}

#[async_trait]
impl Sealer for SopsSealer {
    async fn seal(
        &self,
        path: &StatePath,
        plain: Bytes,
        previous: Option<&Bytes>,
    ) -> Result<Bytes, SealError> {
        let this = self.clone();
        let previous = previous.cloned();
        let span = tracing::info_span!("seal", %path);
        tokio::task::spawn_blocking(move || {
            let _span = span.enter();
            this.seal_blocking(&plain, previous.as_deref())
        })
        .await
        .map_err(|e| SealError::Internal(format!("the sealing task failed: {e}")))?
    }

    async fn holds(
        &self,
        path: &StatePath,
        stored: Bytes,
        plain: &Bytes,
    ) -> Result<bool, SealError> {
        let this = self.clone();
        let input = (stored.clone(), plain.clone());
        let by_digest =
            tokio::task::spawn_blocking(move || this.holds_blocking(&input.0, &input.1))
                .await
                .map_err(|e| SealError::Internal(format!("the comparing task failed: {e}")))??;
        match by_digest {
            Some(held) => Ok(held),
            None => gitstate_core::seal::holds_by_opening(self, path, stored, plain).await,
        }
    }

    async fn open(&self, path: &StatePath, stored: Bytes) -> Result<Bytes, SealError> {
        let this = self.clone();
        let span = tracing::info_span!("open", %path);
        let input = stored.clone();
        let opened = tokio::task::spawn_blocking(move || {
            let _span = span.enter();
            this.open_blocking(&input)
        })
        .await
        .map_err(|e| SealError::Internal(format!("the opening task failed: {e}")))??;
        Ok(opened.unwrap_or(stored))
    }
}

/// `kind:id` of a stored key entry, comparable with the identities of configured write keys.
fn entry_identity(entry: &KeyEntry) -> String {
    if entry.kind == "kms" {
        let context: BTreeMap<String, String> = entry
            .fields
            .iter()
            .find(|(k, _)| k == "context")
            .and_then(|(_, v)| match v {
                Node::Object(fields) => Some(
                    fields
                        .iter()
                        .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                        .collect(),
                ),
                _ => None,
            })
            .unwrap_or_default();
        KmsKey::identity(entry.field("arn").unwrap_or(""), &context)
    } else {
        format!("{}:{}", entry.kind, entry.id())
    }
}

/// The `sops` metadata field holding gitstate's plaintext digest.
pub const DIGEST_FIELD: &str = "gitstate_plaintext_hmac";

/// `hmac-sha256:<hex>` of the state bytes as POSTed, keyed with the document's data key: lets a
/// replayed POST be recognised without decrypting every value.
fn plaintext_digest(data_key: &[u8; 32], plain: &[u8]) -> Result<String, SealError> {
    use hmac::Mac;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(data_key)
        .map_err(|e| SealError::Internal(format!("HMAC setup failed: {e}")))?;
    mac.update(plain);
    let tag = mac.finalize().into_bytes();
    let hex: String = tag.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("hmac-sha256:{hex}"))
}

fn new_data_key() -> [u8; 32] {
    use rand::RngCore;
    let mut key = [0u8; 32];
    rand::rng().fill_bytes(&mut key);
    key
}

fn seal_error(e: SopsError) -> SealError {
    match e {
        e @ SopsError::Unavailable { .. } => SealError::Unavailable(e.to_string()),
        SopsError::Json(m) => SealError::BadInput(format!("the state is not valid JSON: {m}")),
        e => SealError::Internal(e.to_string()),
    }
}

fn open_error(e: SopsError) -> SealError {
    match e {
        e @ SopsError::Unavailable { .. } => SealError::Unavailable(e.to_string()),
        e @ SopsError::NoKey { .. } => SealError::NoKey(e.to_string()),
        e @ (SopsError::MacMismatch
        | SopsError::Decrypt { .. }
        | SopsError::Value { .. }
        | SopsError::Metadata(_)
        | SopsError::Json(_)
        | SopsError::NotSops(_)) => SealError::Tampered(e.to_string()),
        e @ SopsError::Key { .. } => SealError::NoKey(e.to_string()),
        e => SealError::Internal(e.to_string()),
    }
}

/// Which of the top-level keys that matter here a JSON object has.
#[derive(Debug, Default)]
struct TopKeys {
    sops: bool,
    encrypted_data: bool,
}

impl TopKeys {
    fn scan(json: &[u8]) -> Result<TopKeys, serde_json::Error> {
        serde_json::from_slice(json)
    }
}

impl<'de> serde::Deserialize<'de> for TopKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<TopKeys, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = TopKeys;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<TopKeys, A::Error> {
                let mut top = TopKeys::default();
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    match key.as_ref() {
                        "sops" => top.sops = true,
                        "encrypted_data" => top.encrypted_data = true,
                        _ => {}
                    }
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
                Ok(top)
            }
        }
        d.deserialize_map(Visitor)
    }
}
