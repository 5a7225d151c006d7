//! The `sops` member of a document: reading it (rules, key groups, threshold, the data key) and
//! writing it (wrapped data key or Shamir shares, the encrypted MAC, rules, version).

use zeroize::Zeroizing;

use super::encryption_rules::Rules;
use super::options::EncryptOptions;
use crate::cipher::{ValueCipher, ValueType};
use crate::keys::{key_fingerprint, KeyEntry, KeySource, MasterKey};
use crate::tree::Node;
use crate::{shamir, SopsError};

/// The `version` written into `sops.version`.
pub const SOPS_VERSION: &str = "3.11.0";

/// Parsed `sops` metadata.
pub(super) struct Metadata {
    lastmodified: String,
    /// The encrypted MAC.
    pub(super) mac: String,
    /// Which values are encrypted.
    pub(super) rules: Rules,
    /// The master-key entries, by key group.
    pub(super) groups: Vec<Vec<KeyEntry>>,
    /// The Shamir threshold (the number of groups when absent).
    pub(super) threshold: usize,
}

fn str_field(meta: &Node, name: &str) -> Result<Option<String>, SopsError> {
    match meta.get(name) {
        None | Some(Node::Null) => Ok(None),
        Some(Node::Str(s)) => Ok(Some(s.clone())),
        Some(_) => Err(SopsError::Metadata(format!("sops.{name} is not a string"))),
    }
}

/// Key entries of one group: every field whose value is a list of objects is a key list.
fn group_entries(group: &Node) -> Vec<KeyEntry> {
    let mut out = Vec::new();
    if let Node::Object(fields) = group {
        for (kind, v) in fields {
            if kind == "key_groups" {
                continue;
            }
            if let Node::Array(items) = v {
                for item in items {
                    if let Node::Object(f) = item {
                        out.push(KeyEntry {
                            kind: kind.clone(),
                            fields: f.clone(),
                        });
                    }
                }
            }
        }
    }
    out
}

impl Metadata {
    /// Reads the `sops` member.
    pub(super) fn parse(meta: &Node) -> Result<Metadata, SopsError> {
        if !matches!(meta, Node::Object(_)) {
            return Err(SopsError::NotSops("\"sops\" is not an object".into()));
        }
        let lastmodified = str_field(meta, "lastmodified")?
            .ok_or_else(|| SopsError::Metadata("sops.lastmodified is missing".into()))?;
        let mac = str_field(meta, "mac")?.ok_or_else(|| {
            SopsError::Metadata(
                "sops.mac is missing (sops refuses such files without --ignore-mac)".into(),
            )
        })?;
        match str_field(meta, "version")? {
            Some(v) if !v.is_empty() => {}
            _ => return Err(SopsError::Metadata("sops.version is missing".into())),
        }
        let mac_only_encrypted = match meta.get("mac_only_encrypted") {
            None | Some(Node::Null) => false,
            Some(Node::Bool(b)) => *b,
            Some(_) => {
                return Err(SopsError::Metadata(
                    "sops.mac_only_encrypted is not a bool".into(),
                ))
            }
        };
        let rules = Rules {
            unencrypted_suffix: str_field(meta, "unencrypted_suffix")?,
            encrypted_suffix: str_field(meta, "encrypted_suffix")?,
            unencrypted_regex: str_field(meta, "unencrypted_regex")?,
            encrypted_regex: str_field(meta, "encrypted_regex")?,
            mac_only_encrypted,
        };
        let groups = match meta.get("key_groups") {
            Some(Node::Array(gs)) if !gs.is_empty() => gs.iter().map(group_entries).collect(),
            _ => vec![group_entries(meta)],
        };
        let threshold = match meta.get("shamir_threshold") {
            Some(Node::Int(n)) if *n > 0 => *n as usize,
            Some(Node::Float(f)) if *f >= 1.0 => *f as usize,
            _ => groups.len(),
        };
        Ok(Metadata {
            lastmodified,
            mac,
            rules,
            groups,
            threshold,
        })
    }

    /// sops formats `lastmodified` with RFC 3339 (no fractional seconds) for the MAC's AAD.
    pub(super) fn mac_aad(&self) -> String {
        let s = &self.lastmodified;
        if s.get(19..20) == Some(".") {
            let rest = &s[20..];
            let end = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            format!("{}{}", &s[..19], &rest[end..])
        } else {
            s.clone()
        }
    }

    /// The data key, from `keys`' cache or unwrapped by one of them.
    pub(super) fn data_key(&self, keys: &KeySource) -> Result<Zeroizing<Vec<u8>>, SopsError> {
        let fingerprint = key_fingerprint(&self.groups, self.threshold);
        if let Some(key) = keys.cache().and_then(|c| c.get(&fingerprint)) {
            return Ok(key);
        }
        let key = self.unwrap_data_key(keys)?;
        if let Some(cache) = keys.cache() {
            cache.put(fingerprint, key.clone());
        }
        Ok(key)
    }

    fn unwrap_data_key(&self, keys: &KeySource) -> Result<Zeroizing<Vec<u8>>, SopsError> {
        let mut tried = Vec::new();
        let mut failed = Vec::new();
        let mut needs = Vec::new();
        let mut parts = Vec::new();
        let mut unavailable = None;
        for group in &self.groups {
            if parts.len() >= self.threshold {
                break;
            }
            'group: for entry in group {
                for key in keys.keys().iter().filter(|k| k.kind() == entry.kind) {
                    match key.unwrap(entry) {
                        Ok(Some(k)) => {
                            parts.push(k);
                            break 'group;
                        }
                        Ok(None) => tried.push(format!("{}:{}", key.kind(), key.id())),
                        Err(e) => {
                            tried.push(format!("{}:{}", key.kind(), key.id()));
                            failed.push(format!("{}:{} ({e})", key.kind(), key.id()));
                            match e {
                                SopsError::Unavailable { .. } => {
                                    unavailable.get_or_insert(e);
                                }
                                SopsError::Unconfigured {
                                    kind,
                                    id,
                                    needs: what,
                                } => needs.push(format!("{kind} key {id} needs {what}")),
                                _ => {}
                            }
                        }
                    }
                }
            }
        }
        if parts.len() < self.threshold.max(1) || parts.is_empty() {
            if let Some(e) = unavailable {
                return Err(e);
            }
            let in_file: Vec<String> = self
                .groups
                .iter()
                .flatten()
                .map(|e| format!("{}:{}", e.kind, e.id()))
                .collect();
            if keys.keys().is_empty() {
                tried.push("no keys configured".into());
            }
            tried.dedup();
            failed.dedup();
            needs.dedup();
            return Err(SopsError::NoKey {
                in_file: in_file.join(", "),
                tried: tried.join(", "),
                failed: failed.join(", "),
                needs: needs.join("; "),
            });
        }
        if self.groups.len() > 1 {
            shamir::combine(&parts)
        } else {
            Ok(parts.swap_remove(0))
        }
    }
}

/// `YYYY-MM-DDTHH:MM:SSZ` for the current UTC time (sops' `lastmodified`).
pub fn now_rfc3339() -> String {
    let now = time::OffsetDateTime::now_utc();
    now.replace_nanosecond(0)
        .unwrap_or(now)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// Builds the `sops` object: wrapped data key (or Shamir shares), the encrypted `mac`, rules,
/// version.
pub(super) fn build(
    mac: String,
    data_key: &[u8; 32],
    cipher: &ValueCipher,
    groups: &[&[&dyn MasterKey]],
    options: &EncryptOptions,
) -> Result<Node, SopsError> {
    let lastmodified = options.lastmodified.clone().unwrap_or_else(now_rfc3339);
    let enc_mac = cipher.encrypt(mac.as_bytes(), ValueType::Str, &lastmodified)?;

    // wrap the data key (or its shares), or reuse wrapped entries
    let (n_groups, threshold, entries): (usize, usize, Vec<Vec<KeyEntry>>) = match &options.reuse {
        Some(r) => (r.key_groups.len(), r.shamir_threshold, r.key_groups.clone()),
        None => {
            let threshold = options.shamir_threshold.unwrap_or(groups.len());
            let parts: Vec<Zeroizing<Vec<u8>>> = if groups.len() > 1 {
                shamir::split(data_key, groups.len(), threshold)?
            } else {
                vec![Zeroizing::new(data_key.to_vec())]
            };
            let mut all = Vec::new();
            for (group, part) in groups.iter().zip(&parts) {
                all.push(
                    group
                        .iter()
                        .map(|k| k.wrap(part))
                        .collect::<Result<Vec<_>, _>>()?,
                );
            }
            (groups.len(), threshold, all)
        }
    };
    let mut wrapped_groups = Vec::new();
    for group in entries {
        let mut lists: Vec<(String, Node)> = Vec::new();
        for entry in group {
            let item = Node::Object(entry.fields);
            match lists.iter_mut().find(|(k, _)| *k == entry.kind) {
                Some((_, Node::Array(items))) => items.push(item),
                _ => lists.push((entry.kind, Node::Array(vec![item]))),
            }
        }
        wrapped_groups.push(lists);
    }
    let mut meta: Vec<(String, Node)> = Vec::new();
    if n_groups > 1 {
        meta.push(("shamir_threshold".into(), Node::Int(threshold as i64)));
        meta.push((
            "key_groups".into(),
            Node::Array(wrapped_groups.into_iter().map(Node::Object).collect()),
        ));
    } else {
        meta.extend(wrapped_groups.into_iter().flatten());
    }
    meta.push(("lastmodified".into(), Node::Str(lastmodified)));
    meta.push(("mac".into(), Node::Str(enc_mac)));
    let r = &options.rules;
    for (name, v) in [
        ("unencrypted_suffix", &r.unencrypted_suffix),
        ("encrypted_suffix", &r.encrypted_suffix),
        ("unencrypted_regex", &r.unencrypted_regex),
        ("encrypted_regex", &r.encrypted_regex),
    ] {
        if let Some(v) = v.as_ref().filter(|v| !v.is_empty()) {
            meta.push((name.into(), Node::Str(v.clone())));
        }
    }
    if r.mac_only_encrypted {
        meta.push(("mac_only_encrypted".into(), Node::Bool(true)));
    }
    meta.extend(options.extra_metadata.iter().cloned());
    meta.push(("version".into(), Node::Str(SOPS_VERSION.into())));
    Ok(Node::Object(meta))
}
