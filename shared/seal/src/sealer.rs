//! [`SopsSealer`]: seals states as sops documents bound to their place, opens them, and tells a
//! replay from a new state (the crate's documentation says what it guarantees).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use gitstate_core::{Place, SealError, Sealer};
use gitstate_sops::{
    encrypt_groups, key_fingerprint, key_groups, reusable_data_key, AgeKey, DataKeyCache, Document,
    EncryptOptions, KeyEntry, KeySource, MasterKey, Node, Rules, SopsError,
};
use gitstate_statefile::{CheckedState, Form, StateFile};

use crate::{
    load_aws_config, DataKeyMemory, GcpKmsKey, KmsKey, PgpKey, RecentlySealed, SealConfigError,
    SealerConfig, VaultKey, Zeroizing, BOUND_PATH, BOUND_REPOSITORY, DIGEST_FIELD, SEAL_FIELD,
};

/// The sops sealer. Cheap to clone.
#[derive(Clone)]
pub struct SopsSealer {
    inner: Arc<Inner>,
}

/// A secret derived from one of the server's age identities, to seal what it writes.
struct SealKey {
    /// The identity's recipient (`age1…`), named in the seal.
    recipient: String,
    key: Zeroizing<[u8; 32]>,
}

struct Inner {
    rules: Rules,
    /// KMS keys new versions are wrapped for, with the configured context.
    kms_write: Vec<KmsKey>,
    /// age recipients new versions are wrapped for.
    age_write: Vec<AgeKey>,
    /// PGP, Vault transit and GCP KMS keys new versions are wrapped for.
    other_write: Vec<Arc<dyn MasterKey>>,
    /// Identities of the write keys, for logs.
    write_set: Vec<String>,
    /// Every key that reads (KMS current and fallback, age identities), with the key memory.
    read_keys: KeySource,
    /// KMS keys (current and fallback) by ARN, to unwrap one bound entry.
    kms_by_arn: BTreeMap<String, KmsKey>,
    /// Seal keys of every age identity (verifying); the first whose recipient is a write
    /// recipient seals new versions.
    seal_keys: Vec<SealKey>,
    sealing_with: Option<usize>,
    memory: Arc<DataKeyMemory>,
    /// What this process sealed lately, with its plaintext (opened again without decrypting).
    recent: RecentlySealed,
    enforced: bool,
}

impl std::fmt::Debug for SopsSealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SopsSealer")
            .field("write_keys", &self.inner.write_set)
            .field("rules", &self.inner.rules)
            .field("enforced", &self.inner.enforced)
            .finish_non_exhaustive()
    }
}

/// What the seal of an age identity is derived for (a label, so the secret serves nothing else).
const SEAL_KEY_PURPOSE: &[u8] = b"gitstate seal key v1";

/// The most bytes (sealed documents and their plaintext) kept by [`RecentlySealed`]: a 1 MiB
/// state takes about 4.5 MB with `mode = "all"`, a 10 KiB one about 45 KB.
const RECENTLY_SEALED_BYTES: usize = 32 * 1024 * 1024;

impl SopsSealer {
    /// Builds the sealer; `None` when no key wraps new versions. KMS clients are created (and the
    /// AWS configuration loaded) only when KMS keys are configured.
    pub async fn from_config(config: &SealerConfig) -> Result<Option<SopsSealer>, SealConfigError> {
        if !config.has_write_keys() {
            return Ok(None);
        }
        for reserved in [BOUND_REPOSITORY, BOUND_PATH] {
            if config.kms_context.contains_key(reserved) {
                return Err(SealConfigError(format!(
                    "the KMS encryption context key '{reserved}' is reserved: gitstate binds every document to its place with it"
                )));
            }
        }
        let runtime = tokio::runtime::Handle::current();
        let sdk = if config.kms_arns.is_empty() && config.fallback_kms_arns.is_empty() {
            None
        } else {
            Some(load_aws_config().await)
        };
        let memory = Arc::new(DataKeyMemory::new(config.data_key_ttl, 4096));
        let mut kms_write = Vec::new();
        let mut age_write = Vec::new();
        let mut write_set = Vec::new();
        let mut kms_by_arn = BTreeMap::new();
        let mut read_keys = KeySource::new().with_cache(memory.clone());
        if let Some(sdk) = &sdk {
            for arn in &config.kms_arns {
                let key = KmsKey::new(arn, config.kms_context.clone(), sdk, runtime.clone())?;
                write_set.push(KmsKey::identity(arn, &config.kms_context));
                read_keys.push(Box::new(key.clone()));
                kms_by_arn.insert(arn.clone(), key.clone());
                kms_write.push(key);
            }
            for arn in &config.fallback_kms_arns {
                let key = KmsKey::new(arn, BTreeMap::new(), sdk, runtime.clone())?;
                read_keys.push(Box::new(key.clone()));
                kms_by_arn.entry(arn.clone()).or_insert(key);
            }
        }
        let mut recipients = BTreeSet::new();
        for recipient in &config.age_recipients {
            let key = AgeKey::recipient(recipient.trim()).map_err(|e| {
                SealConfigError(format!("age recipient '{recipient}' is invalid: {e}"))
            })?;
            write_set.push(format!("age:{}", key.id()));
            recipients.insert(key.id());
            age_write.push(key);
        }
        let mut other_write: Vec<Arc<dyn MasterKey>> = Vec::new();
        for fp in &config.pgp_fingerprints {
            let key = PgpKey::new(fp)?;
            write_set.push(format!("pgp:{}", key.id()));
            read_keys.push(Box::new(key.clone()));
            other_write.push(Arc::new(key));
        }
        for uri in &config.vault_uris {
            let key = VaultKey::new(uri, runtime.clone())?;
            write_set.push(format!("hc_vault:{}", key.id()));
            read_keys.push(Box::new(key.clone()));
            other_write.push(Arc::new(key));
        }
        for id in &config.gcp_kms_keys {
            let key = GcpKmsKey::new(id, runtime.clone())?;
            write_set.push(format!("gcp_kms:{}", key.id()));
            read_keys.push(Box::new(key.clone()));
            other_write.push(Arc::new(key));
        }
        let mut seal_keys = Vec::new();
        for text in &config.age_identities {
            let keys = AgeKey::parse_identities(text)
                .map_err(|e| SealConfigError(format!("an age identity is invalid: {e}")))?;
            for key in keys {
                if let Some(secret) = key.derive_secret(SEAL_KEY_PURPOSE) {
                    seal_keys.push(SealKey {
                        recipient: key.id(),
                        key: secret,
                    });
                }
                read_keys.push(Box::new(key));
            }
        }
        let sealing_with = seal_keys
            .iter()
            .position(|k| recipients.contains(&k.recipient));
        if config.enforced
            && kms_write.is_empty()
            && sealing_with.is_none()
            && !other_write.is_empty()
        {
            return Err(SealConfigError(
                "encryption is enforced, but none of the keys can vouch for what this server wrote: PGP, Vault transit and GCP KMS entries do not bind a document to its place, so enforcement needs a KMS key (its encryption context binds) or an age recipient whose identity the server holds (its seal binds) besides them".into(),
            ));
        }
        write_set.sort();
        write_set.dedup();
        Ok(Some(SopsSealer {
            inner: Arc::new(Inner {
                rules: config.mode.rules(),
                kms_write,
                age_write,
                other_write,
                write_set,
                read_keys,
                kms_by_arn,
                seal_keys,
                sealing_with,
                memory,
                recent: RecentlySealed::new(config.data_key_ttl, RECENTLY_SEALED_BYTES),
                enforced: config.enforced,
            }),
        }))
    }

    /// Seals synchronously (KMS calls block; use from a blocking thread): a fresh data key,
    /// wrapped for the current key set with KMS contexts bound to `at`. `file` is what the one
    /// check of `plain` read ([`gitstate_statefile::check`]): an envelope OpenTofu
    /// encrypted itself is already ciphertext, stored byte for byte.
    pub fn seal_blocking(
        &self,
        at: &Place,
        plain: &[u8],
        file: &StateFile,
    ) -> Result<Bytes, SealError> {
        let inner = &self.inner;
        if file.form == Form::ClientEncrypted && !inner.enforced {
            return Ok(Bytes::copy_from_slice(plain));
        }
        if file.sops_key {
            return Err(SealError::BadInput(
                "the state has a top-level \"sops\" key; gitstate does not seal a document that is already sops-encrypted".into(),
            ));
        }
        let data_key = new_data_key();
        let bound: Vec<KmsKey> = inner.kms_write.iter().map(|k| k.bound_to(at)).collect();
        let mut keys: Vec<&dyn MasterKey> = bound.iter().map(|k| k as &dyn MasterKey).collect();
        keys.extend(inner.age_write.iter().map(|k| k as &dyn MasterKey));
        keys.extend(inner.other_write.iter().map(|k| k.as_ref()));
        let mut options = EncryptOptions {
            rules: inner.rules.clone(),
            data_key: Some(data_key.clone()),
            ..EncryptOptions::default()
        };
        options.extra_metadata.extend([
            (
                BOUND_REPOSITORY.to_owned(),
                Node::Str(at.repository.clone()),
            ),
            (
                BOUND_PATH.to_owned(),
                Node::Str(at.path.as_str().to_owned()),
            ),
            (
                DIGEST_FIELD.to_owned(),
                Node::Str(plaintext_digest(data_key.as_slice(), plain)?),
            ),
        ]);
        if let Some(seal) = inner.sealing_with.and_then(|i| inner.seal_keys.get(i)) {
            options.extra_metadata.push((
                SEAL_FIELD.to_owned(),
                Node::Str(seal_of(seal, at, data_key.as_slice())?),
            ));
        }
        let sealed = encrypt_groups(plain, &[&keys], &options).map_err(seal_error)?;
        tracing::debug!(keys = ?inner.write_set, "sealed under a fresh data key");
        // Remember the key: by all entries (how the codec looks it up) and by each KMS entry
        // bound here (how an enforced read looks it up).
        if let Ok((groups, threshold)) = key_groups(&sealed) {
            let key = Zeroizing::new(data_key.to_vec());
            inner
                .memory
                .put(key_fingerprint(&groups, threshold), key.clone());
            for entry in groups.iter().flatten().filter(|e| e.kind == "kms") {
                inner.memory.put(entry_fingerprint(entry), key.clone());
            }
        }
        Ok(Bytes::from(sealed))
    }

    /// The data key of `stored` at `at`, after the checks that decide whether it may be opened
    /// here: a document bound to another place is refused; when sealing is enforced the key
    /// must come from a KMS entry of a configured key bound to `at`, or the document must carry a
    /// valid seal of one of the server's age identities.
    fn trusted_data_key(&self, at: &Place, stored: &[u8]) -> Result<Zeroizing<Vec<u8>>, SealError> {
        let meta = metadata_of(stored)?;
        let (groups, _) = key_groups(stored).map_err(open_error)?;
        check_place(at, &meta, &groups)?;
        if !self.inner.enforced {
            return reusable_data_key(stored, &self.inner.read_keys)
                .map(|reuse| Zeroizing::new(reuse.data_key.to_vec()))
                .map_err(open_error);
        }
        let not_ours = |why: &str| {
            SealError::NotSealedHere(format!(
                "the stored state at {at} was not sealed by this server ({why}), and encryption is enforced, so it is not served; someone wrote it outside gitstate, so check the repository's history and write the state again from a trusted copy (terraform state push) to replace it"
            ))
        };
        if groups.len() != 1 {
            return Err(not_ours(
                "it has Shamir key groups, gitstate writes one group",
            ));
        }
        let mut unavailable = None;
        for entry in groups.iter().flatten() {
            let Some(key) = self.bound_kms_key(at, entry) else {
                continue;
            };
            let fingerprint = entry_fingerprint(entry);
            if let Some(data_key) = self.inner.memory.get(&fingerprint) {
                return Ok(data_key);
            }
            match key.unwrap(entry) {
                Ok(Some(data_key)) => {
                    self.inner.memory.put(fingerprint, data_key.clone());
                    return Ok(data_key);
                }
                Ok(None) => {}
                Err(e @ SopsError::Unavailable { .. }) => {
                    unavailable.get_or_insert(e);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "a KMS entry bound to this place does not open");
                }
            }
        }
        // No KMS entry opened it: an age identity's seal must vouch for the data key.
        match meta.get(SEAL_FIELD).and_then(Node::as_str) {
            Some(seal) => {
                let data_key = match reusable_data_key(stored, &self.inner.read_keys) {
                    Ok(reuse) => Zeroizing::new(reuse.data_key.to_vec()),
                    Err(e) => return Err(unavailable.map_or_else(|| open_error(e), unavailable_error)),
                };
                if self.seal_matches(seal, at, &data_key)? {
                    return Ok(data_key);
                }
                Err(not_ours("its gitstate_seal does not match any of the server's age identities"))
            }
            None => match unavailable {
                Some(e) => Err(unavailable_error(e)),
                None => Err(not_ours(
                    "no entry of the server's KMS keys is bound to this place, and it carries no seal of the server's age identities",
                )),
            },
        }
    }

    /// The configured KMS key of `entry` when the entry is bound to `at`.
    fn bound_kms_key(&self, at: &Place, entry: &KeyEntry) -> Option<&KmsKey> {
        if entry.kind != "kms" {
            return None;
        }
        let context = entry_context(entry);
        let bound = context.get(BOUND_REPOSITORY).map(String::as_str)
            == Some(at.repository.as_str())
            && context.get(BOUND_PATH).map(String::as_str) == Some(at.path.as_str());
        if !bound {
            return None;
        }
        self.inner.kms_by_arn.get(entry.field("arn")?)
    }

    /// Whether `seal` (a `gitstate_seal` value) is the seal of one of the server's identities
    /// over `at` and `data_key`.
    fn seal_matches(&self, seal: &str, at: &Place, data_key: &[u8]) -> Result<bool, SealError> {
        let Some((recipient, _)) = seal
            .strip_prefix("hmac-sha256:")
            .and_then(|rest| rest.split_once(':'))
        else {
            return Ok(false);
        };
        for key in self
            .inner
            .seal_keys
            .iter()
            .filter(|k| k.recipient == recipient)
        {
            if subtle_eq(seal_of(key, at, data_key)?.as_bytes(), seal.as_bytes()) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Whether `stored` holds exactly the bytes `plain`, answered from the digest gitstate wrote
    /// into the sops metadata (keyed with the data key, so it reveals nothing without it);
    /// `None` when the document has no digest (real sops wrote it, or it is not sealed).
    pub fn holds_blocking(
        &self,
        at: &Place,
        stored: &[u8],
        plain: &[u8],
    ) -> Result<Option<bool>, SealError> {
        let Ok(meta) = metadata_of(stored) else {
            return Ok(None);
        };
        let Some(digest) = meta.get(DIGEST_FIELD).and_then(Node::as_str) else {
            return Ok(None);
        };
        let data_key = self.trusted_data_key(at, stored)?;
        Ok(Some(plaintext_digest(&data_key, plain)? == digest))
    }

    /// Opens synchronously (KMS calls block; use from a blocking thread). `None`: plaintext,
    /// served as it is (refused when sealing is enforced).
    pub fn open_blocking(&self, at: &Place, stored: &[u8]) -> Result<Option<Bytes>, SealError> {
        match TopKeys::scan(stored) {
            Ok(top) if top.sops => {}
            Err(e @ SopsError::TooDeep { .. }) => {
                return Err(SealError::Tampered(format!(
                    "the stored state at {at} cannot be read: {e}"
                )))
            }
            _ if self.inner.enforced => {
                return Err(SealError::NotSealedHere(format!(
                    "the stored state at {at} is not encrypted, and encryption is enforced, so it is not served (gitstate serves only what it sealed itself); it was written before encryption was enforced or outside gitstate, so write it again (terraform state push) to have it sealed"
                )))
            }
            _ => return Ok(None),
        }
        let data_key = self.trusted_data_key(at, stored)?;
        let doc = Document::decrypt_with_data_key(stored, &data_key).map_err(open_error)?;
        Ok(Some(Bytes::from(doc.tree.to_json())))
    }
}

#[async_trait]
impl Sealer for SopsSealer {
    async fn seal(&self, at: &Place, plain: &CheckedState) -> Result<Bytes, SealError> {
        let this = self.clone();
        let at = at.clone();
        let (file, plain) = (plain.file.clone(), plain.body.clone());
        let span = tracing::info_span!("seal", %at);
        let started = std::time::Instant::now();
        let sealed = tokio::task::spawn_blocking(move || {
            let _span = span.enter();
            let sealed = this.seal_blocking(&at, &plain, &file)?;
            // (An OpenTofu-encrypted state is stored as it came: nothing to remember.)
            if sealed != plain {
                this.inner.recent.remember(&at, &sealed, &plain);
            }
            Ok(sealed)
        })
        .await
        .map_err(|e| SealError::Internal(format!("the sealing task failed: {e}")))
        .and_then(|sealed| sealed);
        observe("seal", started, sealed.is_ok());
        sealed
    }

    async fn holds(&self, at: &Place, stored: Bytes, plain: &Bytes) -> Result<bool, SealError> {
        let this = self.clone();
        let input = (at.clone(), stored.clone(), plain.clone());
        let by_digest =
            tokio::task::spawn_blocking(move || this.holds_blocking(&input.0, &input.1, &input.2))
                .await
                .map_err(|e| SealError::Internal(format!("the comparing task failed: {e}")))??;
        match by_digest {
            Some(held) => Ok(held),
            None => gitstate_core::seal::holds_by_opening(self, at, stored, plain).await,
        }
    }

    async fn open(&self, at: &Place, stored: Bytes) -> Result<Bytes, SealError> {
        if let Some(plain) = self.inner.recent.recall(at, &stored) {
            observe("open", std::time::Instant::now(), true);
            return Ok(plain);
        }
        let this = self.clone();
        let span = tracing::info_span!("open", %at);
        let input = (at.clone(), stored.clone());
        let started = std::time::Instant::now();
        let opened = tokio::task::spawn_blocking(move || {
            let _span = span.enter();
            this.open_blocking(&input.0, &input.1)
        })
        .await
        .map_err(|e| SealError::Internal(format!("the opening task failed: {e}")))
        .and_then(|opened| opened);
        observe("open", started, opened.is_ok());
        Ok(opened?.unwrap_or(stored))
    }
}

/// Counts one seal or open call and its time (docs/METRICS.md).
fn observe(operation: &'static str, started: std::time::Instant, ok: bool) {
    use gitstate_core::metrics::{SEAL_CALLS, SEAL_SECONDS};
    let result = if ok { "ok" } else { "error" };
    metrics::counter!(SEAL_CALLS, "operation" => operation, "result" => result).increment(1);
    metrics::histogram!(SEAL_SECONDS, "operation" => operation)
        .record(started.elapsed().as_secs_f64());
}

/// The `sops` metadata of a document.
fn metadata_of(stored: &[u8]) -> Result<Node, SealError> {
    let raw = gitstate_sops::sops_member(stored)
        .map_err(open_error)?
        .ok_or_else(|| SealError::Tampered("the stored file has no \"sops\" metadata".into()))?;
    Node::parse(raw.get().as_bytes()).map_err(open_error)
}

/// The encryption context of a KMS entry.
fn entry_context(entry: &KeyEntry) -> BTreeMap<String, String> {
    entry
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
        .unwrap_or_default()
}

/// Refuses a document bound to another place than `at`: by the context of a KMS entry (which
/// KMS itself ties to the wrapped key), or by the place the metadata names.
fn check_place(at: &Place, meta: &Node, groups: &[Vec<KeyEntry>]) -> Result<(), SealError> {
    let mismatch = |repository: Option<&str>, path: Option<&str>, source: &str| {
        let here = (at.repository.as_str(), at.path.as_str());
        let there = (repository.unwrap_or(here.0), path.unwrap_or(here.1));
        (there != here).then(|| {
            SealError::Misplaced(format!(
                "the stored state at {at} was sealed for {}/{} ({source}); it was copied here from another place, and gitstate never serves one place's state at another, so restore this path's own version (gitstate history, gitstate restore) or write it again",
                there.0, there.1
            ))
        })
    };
    for entry in groups.iter().flatten().filter(|e| e.kind == "kms") {
        let context = entry_context(entry);
        let source = format!(
            "KMS encryption context of {}",
            entry.field("arn").unwrap_or("?")
        );
        if let Some(e) = mismatch(
            context.get(BOUND_REPOSITORY).map(String::as_str),
            context.get(BOUND_PATH).map(String::as_str),
            &source,
        ) {
            return Err(e);
        }
    }
    match mismatch(
        meta.get(BOUND_REPOSITORY).and_then(Node::as_str),
        meta.get(BOUND_PATH).and_then(Node::as_str),
        "sops metadata",
    ) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Names one wrapped entry (its kind and blob), for the key memory.
fn entry_fingerprint(entry: &KeyEntry) -> [u8; 32] {
    key_fingerprint(&[vec![entry.clone()]], 0)
}

/// `hmac-sha256:<recipient>:<hex>`: the seal of the identity behind `key` over the place and the
/// data key. Only the identity's holder can make it; it vouches that this data key was chosen by
/// the server for this place.
fn seal_of(key: &SealKey, at: &Place, data_key: &[u8]) -> Result<String, SealError> {
    use hmac::Mac;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key.key.as_slice())
        .map_err(|e| SealError::Internal(format!("HMAC setup failed: {e}")))?;
    for part in [
        b"gitstate-seal-v1".as_slice(),
        at.repository.as_bytes(),
        at.path.as_str().as_bytes(),
        data_key,
    ] {
        mac.update(&(part.len() as u64).to_be_bytes());
        mac.update(part);
    }
    Ok(format!(
        "hmac-sha256:{}:{}",
        key.recipient,
        hex(&mac.finalize().into_bytes())
    ))
}

/// Compares without stopping at the first difference.
fn subtle_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A key service that failed: the key it serves named for the caller, its own text for the log.
fn unavailable_error(e: SopsError) -> SealError {
    let key = match &e {
        SopsError::Unavailable { kind, id, .. } => format!("{kind} key {id}"),
        _ => "a configured key".to_owned(),
    };
    SealError::Unavailable {
        key,
        why: e.to_string(),
    }
}

/// `hmac-sha256:<hex>` of the state bytes as POSTed, keyed with the document's data key: lets a
/// replayed POST be recognised without decrypting every value.
fn plaintext_digest(data_key: &[u8], plain: &[u8]) -> Result<String, SealError> {
    use hmac::Mac;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(data_key)
        .map_err(|e| SealError::Internal(format!("HMAC setup failed: {e}")))?;
    mac.update(plain);
    Ok(format!("hmac-sha256:{}", hex(&mac.finalize().into_bytes())))
}

/// A random 32-byte data key, zeroed when dropped.
fn new_data_key() -> Zeroizing<[u8; 32]> {
    use rand::RngCore;
    let mut key = Zeroizing::new([0u8; 32]);
    rand::rng().fill_bytes(key.as_mut_slice());
    key
}

fn seal_error(e: SopsError) -> SealError {
    match e {
        e @ SopsError::Unavailable { .. } => unavailable_error(e),
        SopsError::Json(m) => SealError::BadInput(format!("the state is not valid JSON: {m}")),
        e @ SopsError::TooDeep { .. } => {
            SealError::BadInput(format!("the state cannot be sealed: {e}"))
        }
        SopsError::Unconfigured { kind, id, needs } => SealError::NoKey {
            sentence: format!(
                "cannot encrypt the state with {kind} key {id}, which needs {needs}, so nothing was written"
            ),
            why: None,
        },
        e => SealError::Internal(e.to_string()),
    }
}

fn open_error(e: SopsError) -> SealError {
    match e {
        e @ SopsError::Unavailable { .. } => unavailable_error(e),
        SopsError::NoKey {
            in_file,
            tried,
            failed,
            needs,
        } => SealError::NoKey {
            sentence: format!(
                "cannot decrypt the stored state, sealed for {in_file}, with this deployment's keys ({tried}), so it is not served{}",
                match (needs.is_empty(), failed.is_empty()) {
                    (false, _) => format!("; {needs}"),
                    (true, true) => "; it needs one of the keys it is sealed for".to_owned(),
                    // The keys' answers are in the log (`why`).
                    (true, false) => String::new(),
                }
            ),
            why: (!failed.is_empty()).then(|| format!("keys that failed: {failed}")),
        },
        SopsError::Unconfigured { kind, id, needs } => SealError::NoKey {
            sentence: format!(
                "cannot decrypt the stored state with {kind} key {id}, which needs {needs}, so it is not served"
            ),
            why: None,
        },
        e @ (SopsError::MacMismatch
        | SopsError::Decrypt { .. }
        | SopsError::Value { .. }
        | SopsError::Metadata(_)
        | SopsError::Json(_)
        | SopsError::NotSops(_)) => SealError::Tampered(e.to_string()),
        SopsError::Key { kind, id, reason } => SealError::NoKey {
            sentence: format!("cannot decrypt the stored state with {kind} key {id}, so it is not served"),
            why: Some(reason),
        },
        e @ SopsError::TooDeep { .. } => SealError::Tampered(e.to_string()),
        e => SealError::Internal(e.to_string()),
    }
}

/// Whether a stored document has a top-level `"sops"` key (sops' metadata).
#[derive(Debug, Default)]
struct TopKeys {
    sops: bool,
}

impl TopKeys {
    fn scan(json: &[u8]) -> Result<TopKeys, SopsError> {
        serde_json::from_slice(json).map_err(|e| {
            // serde_json stops at 128 levels (beyond the codec's own limit)
            if e.to_string().contains("recursion limit exceeded") {
                SopsError::TooDeep {
                    limit: gitstate_sops::MAX_DEPTH,
                }
            } else {
                SopsError::Json(e.to_string())
            }
        })
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
                    if key == "sops" {
                        top.sops = true;
                    }
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
                Ok(top)
            }
        }
        d.deserialize_map(Visitor)
    }
}
