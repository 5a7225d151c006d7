//! Reading and writing whole sops v3 JSON documents, split by concern: [`rules`] (which values
//! are encrypted), [`walker`] (the tree walk: key path, MAC, queued leaves), [`jobs`] (encrypting
//! and decrypting leaves), [`metadata`] (the `sops` member), [`stream`] (encryption in one pass),
//! [`options`].

mod encryption_rules;
mod jobs;
mod metadata;
mod options;
mod stream;
mod walker;

use zeroize::Zeroizing;

pub use encryption_rules::Rules;
pub use metadata::{now_rfc3339, SOPS_VERSION};
pub use options::{EncryptOptions, Reuse};

use crate::cipher::ValueCipher;
use crate::keys::{KeyEntry, KeySource, MasterKey};
use crate::tree::{json_error, Node, MAX_DEPTH};
use crate::SopsError;
use encryption_rules::CompiledRules;
use metadata::Metadata;
use walker::{Mode, Walker};

/// A decrypted sops document.
#[derive(Clone)]
pub struct Document {
    /// The plaintext tree, without the `sops` key, in document order.
    pub tree: Node,
    /// The unwrapped data key (32 bytes, zeroed when dropped).
    pub data_key: Zeroizing<Vec<u8>>,
    /// The document's master-key entries, by key group.
    pub key_groups: Vec<Vec<KeyEntry>>,
    /// The document's Shamir threshold (the number of groups when absent).
    pub shamir_threshold: usize,
}

impl std::fmt::Debug for Document {
    /// Never prints the data key nor the plaintext.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Document")
            .field("key_groups", &self.key_groups)
            .field("shamir_threshold", &self.shamir_threshold)
            .finish_non_exhaustive()
    }
}

impl Document {
    /// Decrypts a sops v3 JSON document with any key of `keys` and verifies its MAC.
    pub fn decrypt(json: &[u8], keys: &KeySource) -> Result<Document, SopsError> {
        Document::decrypt_with(json, |meta| meta.data_key(keys))
    }

    /// Decrypts a sops v3 JSON document with a data key the caller obtained itself (e.g. from
    /// the one master-key entry it trusts) and verifies its MAC: values encrypted with another
    /// key fail AES-GCM authentication.
    pub fn decrypt_with_data_key(json: &[u8], data_key: &[u8]) -> Result<Document, SopsError> {
        Document::decrypt_with(json, |_| Ok(Zeroizing::new(data_key.to_vec())))
    }

    fn decrypt_with(
        json: &[u8],
        data_key: impl FnOnce(&Metadata) -> Result<Zeroizing<Vec<u8>>, SopsError>,
    ) -> Result<Document, SopsError> {
        let Node::Object(mut fields) = Node::parse(json)? else {
            return Err(SopsError::NotSops("the top level is not an object".into()));
        };
        let pos = fields
            .iter()
            .position(|(k, _)| k == "sops")
            .ok_or_else(|| SopsError::NotSops("no top-level \"sops\" key".into()))?;
        let (_, meta) = fields.remove(pos);
        let meta = Metadata::parse(&meta)?;
        let data_key = data_key(&meta)?;
        let cipher = ValueCipher::new(&data_key)?;
        let rules = CompiledRules::new(&meta.rules)?;
        let mut tree = Node::Object(fields);
        let mut w = Walker::new(&cipher, &rules);
        let mut jobs = Vec::new();
        w.walk(&mut tree, &Mode::Decrypt, &mut jobs)?;
        jobs::run_jobs(&cipher, &w.aads, &mut jobs, &Mode::Decrypt)?;
        drop(jobs);
        w.walk(&mut tree, &Mode::Hash, &mut Vec::new())?;
        let (computed, computed_float) = w.macs();
        let (stored, _) = cipher
            .decrypt(&meta.mac, &meta.mac_aad())
            .map_err(|e| match e {
                SopsError::Decrypt { .. } => SopsError::MacMismatch,
                other => other,
            })?;
        let matches =
            stored == computed.as_bytes() || computed_float.is_some_and(|c| stored == c.as_bytes());
        if !matches {
            return Err(SopsError::MacMismatch);
        }
        Ok(Document {
            tree,
            data_key,
            key_groups: meta.groups,
            shamir_threshold: meta.threshold,
        })
    }

    /// The data key and wrapped entries of this document, for [`EncryptOptions::reuse`].
    pub fn reuse(&self) -> Result<Reuse, SopsError> {
        let data_key: [u8; 32] = self.data_key.as_slice().try_into().map_err(|_| {
            SopsError::Metadata(format!(
                "the data key must be 32 bytes, got {}",
                self.data_key.len()
            ))
        })?;
        Ok(Reuse {
            data_key: Zeroizing::new(data_key),
            key_groups: self.key_groups.clone(),
            shamir_threshold: self.shamir_threshold,
        })
    }

    /// The plaintext as compact JSON.
    pub fn to_json(&self) -> Vec<u8> {
        self.tree.to_json()
    }
}

/// The raw `sops` member of a top-level JSON object, found without building a tree of the rest.
/// `Ok(None)`: a JSON object without a `sops` key (plaintext, or a client-encrypted state).
pub fn sops_member(json: &[u8]) -> Result<Option<Box<serde_json::value::RawValue>>, SopsError> {
    struct Top(Option<Box<serde_json::value::RawValue>>);
    impl<'de> serde::Deserialize<'de> for Top {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Top, D::Error> {
            struct V;
            impl<'de> serde::de::Visitor<'de> for V {
                type Value = Top;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a JSON object")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(
                    self,
                    mut map: A,
                ) -> Result<Top, A::Error> {
                    let mut sops = None;
                    while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                        if key == "sops" {
                            sops = Some(map.next_value::<Box<serde_json::value::RawValue>>()?);
                        } else {
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                    Ok(Top(sops))
                }
            }
            d.deserialize_map(V)
        }
    }
    serde_json::from_slice::<Top>(json)
        .map(|t| t.0)
        .map_err(json_error)
}

/// The master-key entries (by key group) and Shamir threshold of a sops document, read from its
/// metadata alone: no key is called and no value is decrypted.
pub fn key_groups(json: &[u8]) -> Result<(Vec<Vec<KeyEntry>>, usize), SopsError> {
    let raw =
        sops_member(json)?.ok_or_else(|| SopsError::NotSops("no top-level \"sops\" key".into()))?;
    let meta = Metadata::parse(&Node::parse(raw.get().as_bytes())?)?;
    Ok((meta.groups, meta.threshold))
}

/// The data key of a sops document with its wrapped entries, for [`EncryptOptions::reuse`]: reads
/// the metadata alone and unwraps the key with `keys` (or takes it from their cache). The values
/// are not decrypted, so the MAC is not checked here.
pub fn reusable_data_key(json: &[u8], keys: &KeySource) -> Result<Reuse, SopsError> {
    let raw =
        sops_member(json)?.ok_or_else(|| SopsError::NotSops("no top-level \"sops\" key".into()))?;
    let meta = Metadata::parse(&Node::parse(raw.get().as_bytes())?)?;
    let data_key: [u8; 32] = meta
        .data_key(keys)?
        .as_slice()
        .try_into()
        .map_err(|_| SopsError::Metadata("the data key is not 32 bytes".into()))?;
    Ok(Reuse {
        data_key: Zeroizing::new(data_key),
        key_groups: meta.groups,
        shamir_threshold: meta.threshold,
    })
}

/// Decrypts a sops v3 JSON document and returns the plaintext as JSON bytes (2-space indent).
pub fn decrypt(json: &[u8], keys: &KeySource) -> Result<Vec<u8>, SopsError> {
    Ok(Document::decrypt(json, keys)?.tree.to_json_pretty("  "))
}

/// Encrypts a plaintext JSON object for one key group (`recipients`), sops v3 JSON out.
pub fn encrypt(
    plain: &[u8],
    recipients: &[&dyn MasterKey],
    options: &EncryptOptions,
) -> Result<Vec<u8>, SopsError> {
    encrypt_groups(plain, &[recipients], options)
}

/// Encrypts a plaintext JSON object for several key groups (Shamir-split data key when more
/// than one). Streams: the plaintext is parsed, encrypted and written in one pass, without
/// building a tree.
pub fn encrypt_groups(
    plain: &[u8],
    groups: &[&[&dyn MasterKey]],
    options: &EncryptOptions,
) -> Result<Vec<u8>, SopsError> {
    let (data_key, cipher, rules) = prepare(groups, options)?;
    let mut w = Walker::new(&cipher, &rules);
    let mut out = stream::encrypt_fields(&mut w, plain, &options.indent)?;
    // `out` ends right before the top-level object's closing brace
    let meta = metadata::build(mac_of(w, options), &data_key, &cipher, groups, options)?;
    crate::tree::newline(&mut out, Some(&options.indent), 1);
    out.push_str("\"sops\": ");
    crate::tree::write_node(&mut out, &meta, Some(&options.indent), 1);
    out.push_str("\n}\n");
    Ok(out.into_bytes())
}

fn prepare(
    groups: &[&[&dyn MasterKey]],
    options: &EncryptOptions,
) -> Result<(Zeroizing<[u8; 32]>, ValueCipher, CompiledRules), SopsError> {
    if let Some(reuse) = &options.reuse {
        if reuse.key_groups.is_empty() || reuse.key_groups.iter().any(|g| g.is_empty()) {
            return Err(SopsError::Options(
                "reuse: every key group needs at least one wrapped entry".into(),
            ));
        }
        let cipher = ValueCipher::new(reuse.data_key.as_slice())?;
        let rules = CompiledRules::new(&options.rules)?;
        return Ok((reuse.data_key.clone(), cipher, rules));
    }
    if groups.is_empty() || groups.iter().any(|g| g.is_empty()) {
        return Err(SopsError::Options(
            "every key group needs at least one master key".into(),
        ));
    }
    let data_key: Zeroizing<[u8; 32]> = match &options.data_key {
        Some(k) => k.clone(),
        None => {
            use rand::RngCore;
            let mut k = Zeroizing::new([0u8; 32]);
            rand::rng().fill_bytes(k.as_mut_slice());
            k
        }
    };
    let cipher = ValueCipher::new(data_key.as_slice())?;
    let rules = CompiledRules::new(&options.rules)?;
    Ok((data_key, cipher, rules))
}

/// Encrypts an already parsed tree (see [`encrypt_groups`]).
pub fn encrypt_tree(
    mut tree: Node,
    groups: &[&[&dyn MasterKey]],
    options: &EncryptOptions,
) -> Result<Vec<u8>, SopsError> {
    if tree.depth() > MAX_DEPTH {
        tree.dismantle();
        return Err(SopsError::TooDeep { limit: MAX_DEPTH });
    }
    let Node::Object(fields) = &tree else {
        return Err(SopsError::Options(
            "sops JSON needs an object at the top level".into(),
        ));
    };
    if fields.iter().any(|(k, _)| k == "sops") {
        return Err(SopsError::AlreadyEncrypted);
    }
    let (data_key, cipher, rules) = prepare(groups, options)?;
    let mut w = Walker::new(&cipher, &rules);
    let mut jobs = Vec::new();
    w.walk(&mut tree, &Mode::Encrypt, &mut jobs)?;
    jobs::run_jobs(&cipher, &w.aads, &mut jobs, &Mode::Encrypt)?;
    drop(jobs);
    let meta = metadata::build(mac_of(w, options), &data_key, &cipher, groups, options)?;
    if let Node::Object(fields) = &mut tree {
        fields.push(("sops".into(), meta));
    }
    Ok(tree.to_json_pretty(&options.indent))
}

/// The MAC a new document carries: the float64 one for big clear integers when the options ask
/// for sops <= 3.11's reading (see [`EncryptOptions::float_mac_for_big_clear_ints`]).
fn mac_of(w: Walker<'_>, options: &EncryptOptions) -> String {
    match w.macs() {
        (_, Some(float)) if options.float_mac_for_big_clear_ints => float,
        (exact, _) => exact,
    }
}
