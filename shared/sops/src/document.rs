//! Reading and writing whole sops v3 JSON documents.

use regex::Regex;
use sha2::{Digest, Sha512};

use crate::cipher::{ValueCipher, ValueType};
use crate::keys::{KeyEntry, KeySource, MasterKey};
use crate::tree::{go_format_float, Node};
use crate::{shamir, SopsError};

/// sops' initial MAC bytes when `mac_only_encrypted` is set.
const MAC_ONLY_ENCRYPTED_INIT: [u8; 32] = [
    0x8a, 0x3f, 0xd2, 0xad, 0x54, 0xce, 0x66, 0x52, 0x7b, 0x10, 0x34, 0xf3, 0xd1, 0x47, 0xbe, 0x0b,
    0x0b, 0x97, 0x5b, 0x3b, 0xf4, 0x4f, 0x72, 0xc6, 0xfd, 0xad, 0xec, 0x81, 0x76, 0xf2, 0x7d, 0x69,
];

/// The `version` written into `sops.version`.
pub const SOPS_VERSION: &str = "3.11.0";

/// Which values get encrypted (sops' `*_suffix` / `*_regex` rules; at most one is normally set).
#[derive(Debug, Clone, Default)]
pub struct Rules {
    /// Keys with this suffix (anywhere on the path) stay in clear. sops' default is `_unencrypted`.
    pub unencrypted_suffix: Option<String>,
    /// Only values under a key with this suffix are encrypted.
    pub encrypted_suffix: Option<String>,
    /// Keys matching this regex (anywhere on the path) stay in clear.
    pub unencrypted_regex: Option<String>,
    /// Only values under a key matching this regex (anywhere on the path) are encrypted.
    pub encrypted_regex: Option<String>,
    /// The MAC covers only the encrypted values.
    pub mac_only_encrypted: bool,
}

struct CompiledRules {
    unencrypted_suffix: Option<String>,
    encrypted_suffix: Option<String>,
    unencrypted_regex: Option<Regex>,
    encrypted_regex: Option<Regex>,
    mac_only_encrypted: bool,
}

impl CompiledRules {
    fn new(r: &Rules) -> Result<CompiledRules, SopsError> {
        let re = |s: &Option<String>| -> Result<Option<Regex>, SopsError> {
            match s.as_deref() {
                None | Some("") => Ok(None),
                Some(p) => Regex::new(p)
                    .map(Some)
                    .map_err(|e| SopsError::Options(format!("bad regex {p:?}: {e}"))),
            }
        };
        let nonempty = |s: &Option<String>| s.clone().filter(|s| !s.is_empty());
        Ok(CompiledRules {
            unencrypted_suffix: nonempty(&r.unencrypted_suffix),
            encrypted_suffix: nonempty(&r.encrypted_suffix),
            unencrypted_regex: re(&r.unencrypted_regex)?,
            encrypted_regex: re(&r.encrypted_regex)?,
            mac_only_encrypted: r.mac_only_encrypted,
        })
    }

    /// sops' `shouldBeEncrypted`, for JSON (no comments).
    fn should_encrypt(&self, path: &[&str]) -> bool {
        let mut enc = true;
        if let Some(s) = &self.unencrypted_suffix {
            if path.iter().any(|p| p.ends_with(s.as_str())) {
                enc = false;
            }
        }
        if let Some(s) = &self.encrypted_suffix {
            enc = path.iter().any(|p| p.ends_with(s.as_str()));
        }
        if let Some(r) = &self.unencrypted_regex {
            if path.iter().any(|p| r.is_match(p)) {
                enc = false;
            }
        }
        if let Some(r) = &self.encrypted_regex {
            enc = path.iter().any(|p| r.is_match(p));
        }
        enc
    }

    fn new_hash(&self) -> Sha512 {
        let mut h = Sha512::new();
        if self.mac_only_encrypted {
            h.update(MAC_ONLY_ENCRYPTED_INIT);
        }
        h
    }
}

/// Options for [`encrypt`].
#[derive(Debug, Clone)]
pub struct EncryptOptions {
    /// Which values to encrypt. Default: sops' default, `unencrypted_suffix = "_unencrypted"`.
    pub rules: Rules,
    /// Shamir threshold when more than one key group is given (default: all groups).
    pub shamir_threshold: Option<usize>,
    /// Reuse this data key instead of generating one (rotation logic decides when).
    pub data_key: Option<[u8; 32]>,
    /// `sops.lastmodified`; default: now. Must be `YYYY-MM-DDTHH:MM:SSZ`.
    pub lastmodified: Option<String>,
    /// Indentation of the output (default one tab, like sops).
    pub indent: String,
    /// How the MAC hashes *unencrypted* integers beyond ±2^53 (the only values where sops
    /// versions disagree): `true` (default) hashes them as float64 like sops <= 3.11 does
    /// (every JSON number is a float64 there); `false` hashes the exact integer like
    /// sops >= 3.12. Encrypted integers are unaffected (`type:int`, exact in both). Reading
    /// accepts either.
    pub float_mac_for_big_clear_ints: bool,
}

impl Default for EncryptOptions {
    fn default() -> Self {
        EncryptOptions {
            rules: Rules {
                unencrypted_suffix: Some("_unencrypted".into()),
                ..Rules::default()
            },
            shamir_threshold: None,
            data_key: None,
            lastmodified: None,
            indent: "\t".into(),
            float_mac_for_big_clear_ints: true,
        }
    }
}

/// Bytes a leaf contributes to the MAC, as sops' `ToBytes` (bools as `True`/`False`,
/// floats as Go's `FormatFloat(f, 'f', -1, 64)`).
fn mac_bytes(node: &Node) -> Option<Vec<u8>> {
    match node {
        Node::Str(s) => Some(s.as_bytes().to_vec()),
        Node::Int(i) => Some(i.to_string().into_bytes()),
        // sops reads integers above int64 as float64
        Node::UInt(u) => Some(go_format_float(*u as f64).into_bytes()),
        Node::Float(f) => Some(go_format_float(*f).into_bytes()),
        Node::Bool(b) => Some(if *b {
            b"True".to_vec()
        } else {
            b"False".to_vec()
        }),
        _ => None,
    }
}

/// Go's `strconv.ParseBool`.
fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

fn typed_value(plain: Vec<u8>, ty: ValueType, path: &str) -> Result<Node, SopsError> {
    let bad = |what: &str| SopsError::Value {
        path: path.to_owned(),
        reason: format!("decrypted value is not a valid {what}"),
    };
    let text = || String::from_utf8(plain.clone()).map_err(|_| bad("UTF-8 string"));
    Ok(match ty {
        ValueType::Str | ValueType::Bytes | ValueType::Time | ValueType::Comment => {
            Node::Str(String::from_utf8_lossy(&plain).into_owned())
        }
        ValueType::Int => {
            let t = text()?;
            match t.parse::<i64>() {
                Ok(i) => Node::Int(i),
                Err(_) => Node::UInt(t.parse::<u64>().map_err(|_| bad("int"))?),
            }
        }
        ValueType::Float => Node::Float(text()?.parse::<f64>().map_err(|_| bad("float"))?),
        ValueType::Bool => Node::Bool(parse_go_bool(&text()?).ok_or_else(|| bad("bool"))?),
    })
}

struct Walker<'a> {
    cipher: &'a ValueCipher,
    rules: &'a CompiledRules,
    /// MAC with integers hashed as decimal integers (sops >= 3.12 reads JSON integers as int64).
    hash: Sha512,
    /// MAC with clear integers beyond 2^53 hashed as float64, as sops <= 3.11 does (it reads
    /// every JSON number as float64). Started lazily at the first such value.
    hash_float: Option<Sha512>,
}

/// 2^53: integers beyond it do not survive a float64 round trip.
const F64_EXACT: u64 = 1 << 53;

/// A clear integer that sops <= 3.11 would have hashed differently (as a float64).
fn float_mac_bytes(node: &Node) -> Option<Vec<u8>> {
    match node {
        Node::Int(i) if i.unsigned_abs() > F64_EXACT => {
            Some(go_format_float(*i as f64).into_bytes())
        }
        _ => None,
    }
}

impl Walker<'_> {
    /// Hashes one leaf; `clear` tells whether it is stored unencrypted.
    fn hash_leaf(&mut self, leaf: &Node, clear: bool) {
        let Some(b) = mac_bytes(leaf) else { return };
        if clear {
            if let Some(fb) = float_mac_bytes(leaf) {
                let h = self.hash_float.get_or_insert_with(|| self.hash.clone());
                h.update(&fb);
                self.hash.update(&b);
                return;
            }
        }
        if let Some(h) = &mut self.hash_float {
            h.update(&b);
        }
        self.hash.update(&b);
    }
}

fn aad(path: &[&str]) -> String {
    let mut s = String::new();
    for p in path {
        s.push_str(p);
        s.push(':');
    }
    s
}

impl Walker<'_> {
    fn decrypt(&mut self, node: &mut Node, path: &mut Vec<String>) -> Result<(), SopsError> {
        match node {
            Node::Null => Ok(()),
            Node::Object(fields) => {
                for (k, v) in fields.iter_mut() {
                    path.push(k.clone());
                    self.decrypt(v, path)?;
                    path.pop();
                }
                Ok(())
            }
            Node::Array(items) => {
                for v in items.iter_mut() {
                    self.decrypt(v, path)?;
                }
                Ok(())
            }
            leaf => {
                let p: Vec<&str> = path.iter().map(String::as_str).collect();
                let encrypted = self.rules.should_encrypt(&p);
                if encrypted {
                    let path_s = aad(&p);
                    let Node::Str(enc) = &*leaf else {
                        return Err(SopsError::Value {
                            path: path_s,
                            reason: "expected an encrypted string value".into(),
                        });
                    };
                    if !enc.is_empty() {
                        let (plain, ty) = self.cipher.decrypt(enc, &path_s)?;
                        *leaf = typed_value(plain, ty, &path_s)?;
                    }
                }
                if !self.rules.mac_only_encrypted || encrypted {
                    let clear = !encrypted;
                    self.hash_leaf(leaf, clear);
                }
                Ok(())
            }
        }
    }

    fn encrypt(&mut self, node: &mut Node, path: &mut Vec<String>) -> Result<(), SopsError> {
        match node {
            Node::Null => Ok(()),
            Node::Object(fields) => {
                for (k, v) in fields.iter_mut() {
                    path.push(k.clone());
                    self.encrypt(v, path)?;
                    path.pop();
                }
                Ok(())
            }
            Node::Array(items) => {
                for v in items.iter_mut() {
                    self.encrypt(v, path)?;
                }
                Ok(())
            }
            leaf => {
                let p: Vec<&str> = path.iter().map(String::as_str).collect();
                let encrypted = self.rules.should_encrypt(&p);
                let bytes = mac_bytes(leaf);
                if !self.rules.mac_only_encrypted || encrypted {
                    self.hash_leaf(leaf, !encrypted);
                }
                if encrypted {
                    let ty = match leaf {
                        Node::Str(s) if s.is_empty() => return Ok(()),
                        Node::Str(_) => ValueType::Str,
                        Node::Int(_) => ValueType::Int,
                        Node::UInt(_) | Node::Float(_) => ValueType::Float,
                        Node::Bool(_) => ValueType::Bool,
                        _ => return Ok(()),
                    };
                    let plain: Vec<u8> = match leaf {
                        Node::Bool(b) => (if *b { "true" } else { "false" }).into(),
                        _ => bytes.unwrap_or_default(),
                    };
                    *leaf = Node::Str(self.cipher.encrypt(&plain, ty, &aad(&p))?);
                }
                Ok(())
            }
        }
    }
}

/// Parsed `sops` metadata.
struct Metadata {
    lastmodified: String,
    mac: String,
    rules: Rules,
    groups: Vec<Vec<KeyEntry>>,
    threshold: usize,
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
    fn parse(meta: &Node) -> Result<Metadata, SopsError> {
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
    fn mac_aad(&self) -> String {
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

    fn data_key(&self, keys: &KeySource) -> Result<Vec<u8>, SopsError> {
        let mut tried = Vec::new();
        let mut parts = Vec::new();
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
                        Err(e) => tried.push(format!("{}:{} ({e})", key.kind(), key.id())),
                    }
                }
            }
        }
        if parts.len() < self.threshold.max(1) || parts.is_empty() {
            let in_file: Vec<String> = self
                .groups
                .iter()
                .flatten()
                .map(|e| format!("{}:{}", e.kind, e.id()))
                .collect();
            if keys.keys().is_empty() {
                tried.push("(no keys configured)".into());
            }
            tried.dedup();
            return Err(SopsError::NoKey {
                in_file: in_file.join(", "),
                tried: tried.join(", "),
            });
        }
        if self.groups.len() > 1 {
            shamir::combine(&parts)
        } else {
            Ok(parts.swap_remove(0))
        }
    }
}

/// A decrypted sops document.
#[derive(Debug, Clone)]
pub struct Document {
    /// The plaintext tree, without the `sops` key, in document order.
    pub tree: Node,
    /// The unwrapped data key (32 bytes); keep it to re-encrypt without a master-key call.
    pub data_key: Vec<u8>,
    /// The document's master-key entries, by key group.
    pub key_groups: Vec<Vec<KeyEntry>>,
}

impl Document {
    /// Decrypts a sops v3 JSON document with any key of `keys` and verifies its MAC.
    pub fn decrypt(json: &[u8], keys: &KeySource) -> Result<Document, SopsError> {
        let Node::Object(mut fields) = Node::parse(json)? else {
            return Err(SopsError::NotSops("the top level is not an object".into()));
        };
        let pos = fields
            .iter()
            .position(|(k, _)| k == "sops")
            .ok_or_else(|| SopsError::NotSops("no top-level \"sops\" key".into()))?;
        let (_, meta) = fields.remove(pos);
        let meta = Metadata::parse(&meta)?;
        let data_key = meta.data_key(keys)?;
        let cipher = ValueCipher::new(&data_key)?;
        let rules = CompiledRules::new(&meta.rules)?;
        let mut tree = Node::Object(fields);
        let mut w = Walker {
            cipher: &cipher,
            rules: &rules,
            hash: rules.new_hash(),
            hash_float: None,
        };
        w.decrypt(&mut tree, &mut Vec::new())?;
        let computed = hex_upper(&w.hash.finalize());
        let computed_float = w.hash_float.map(|h| hex_upper(&h.finalize()));
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
        })
    }

    /// The plaintext as compact JSON.
    pub fn to_json(&self) -> Vec<u8> {
        self.tree.to_json()
    }
}

/// Decrypts a sops v3 JSON document and returns the plaintext as JSON bytes (2-space indent).
pub fn decrypt(json: &[u8], keys: &KeySource) -> Result<Vec<u8>, SopsError> {
    Ok(Document::decrypt(json, keys)?.tree.to_json_pretty("  "))
}

fn hex_upper(b: &[u8]) -> String {
    const H: &[u8; 16] = b"0123456789ABCDEF";
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        s.push(H[(x >> 4) as usize] as char);
        s.push(H[(x & 15) as usize] as char);
    }
    s
}

/// `YYYY-MM-DDTHH:MM:SSZ` for the current UTC time.
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    // civil from days (Howard Hinnant)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// Encrypts a plaintext JSON object for one key group (`recipients`), sops v3 JSON out.
pub fn encrypt(
    plain: &[u8],
    recipients: &[&dyn MasterKey],
    options: &EncryptOptions,
) -> Result<Vec<u8>, SopsError> {
    encrypt_groups(plain, &[recipients], options)
}

/// Encrypts a plaintext JSON object for several key groups (Shamir-split data key when more than one).
pub fn encrypt_groups(
    plain: &[u8],
    groups: &[&[&dyn MasterKey]],
    options: &EncryptOptions,
) -> Result<Vec<u8>, SopsError> {
    let tree = Node::parse(plain)?;
    encrypt_tree(tree, groups, options)
}

/// Encrypts an already parsed tree (see [`encrypt_groups`]).
pub fn encrypt_tree(
    mut tree: Node,
    groups: &[&[&dyn MasterKey]],
    options: &EncryptOptions,
) -> Result<Vec<u8>, SopsError> {
    let Node::Object(fields) = &tree else {
        return Err(SopsError::Options(
            "sops JSON needs an object at the top level".into(),
        ));
    };
    if fields.iter().any(|(k, _)| k == "sops") {
        return Err(SopsError::AlreadyEncrypted);
    }
    if groups.is_empty() || groups.iter().any(|g| g.is_empty()) {
        return Err(SopsError::Options(
            "every key group needs at least one master key".into(),
        ));
    }
    let data_key: [u8; 32] = match options.data_key {
        Some(k) => k,
        None => {
            use rand::RngCore;
            let mut k = [0u8; 32];
            rand::rng().fill_bytes(&mut k);
            k
        }
    };
    let cipher = ValueCipher::new(&data_key)?;
    let rules = CompiledRules::new(&options.rules)?;
    let mut w = Walker {
        cipher: &cipher,
        rules: &rules,
        hash: rules.new_hash(),
        hash_float: None,
    };
    w.encrypt(&mut tree, &mut Vec::new())?;
    let mac = match (options.float_mac_for_big_clear_ints, w.hash_float) {
        (true, Some(h)) => hex_upper(&h.finalize()),
        _ => hex_upper(&w.hash.finalize()),
    };
    let lastmodified = options.lastmodified.clone().unwrap_or_else(now_rfc3339);
    let enc_mac = cipher.encrypt(mac.as_bytes(), ValueType::Str, &lastmodified)?;

    // wrap the data key (or its shares)
    let threshold = options.shamir_threshold.unwrap_or(groups.len());
    let parts: Vec<Vec<u8>> = if groups.len() > 1 {
        shamir::split(&data_key, groups.len(), threshold)?
    } else {
        vec![data_key.to_vec()]
    };
    let mut wrapped_groups = Vec::new();
    for (group, part) in groups.iter().zip(&parts) {
        let mut lists: Vec<(String, Node)> = Vec::new();
        for key in group.iter() {
            let entry = key.wrap(part)?;
            let item = Node::Object(entry.fields);
            match lists.iter_mut().find(|(k, _)| *k == entry.kind) {
                Some((_, Node::Array(items))) => items.push(item),
                _ => lists.push((entry.kind, Node::Array(vec![item]))),
            }
        }
        wrapped_groups.push(lists);
    }
    let mut meta: Vec<(String, Node)> = Vec::new();
    if groups.len() > 1 {
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
    meta.push(("version".into(), Node::Str(SOPS_VERSION.into())));
    if let Node::Object(fields) = &mut tree {
        fields.push(("sops".into(), Node::Object(meta)));
    }
    Ok(tree.to_json_pretty(&options.indent))
}
