//! Reading and writing whole sops v3 JSON documents.

use regex::Regex;
use sha2::{Digest, Sha512};
use zeroize::Zeroizing;

use crate::cipher::{ValueCipher, ValueType};
use crate::keys::{key_fingerprint, KeyEntry, KeySource, MasterKey};
use crate::tree::{go_format_float, json_error, Node, MAX_DEPTH};
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

    fn new_hash(&self) -> Sha512 {
        let mut h = Sha512::new();
        if self.mac_only_encrypted {
            h.update(MAC_ONLY_ENCRYPTED_INIT);
        }
        h
    }
}

/// Options for [`encrypt`].
#[derive(Clone)]
pub struct EncryptOptions {
    /// Which values to encrypt. Default: sops' default, `unencrypted_suffix = "_unencrypted"`.
    pub rules: Rules,
    /// Shamir threshold when more than one key group is given (default: all groups).
    pub shamir_threshold: Option<usize>,
    /// Use this data key instead of generating one (zeroed when dropped).
    pub data_key: Option<Zeroizing<[u8; 32]>>,
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
    /// Reuse a data key and its already wrapped key entries (from [`Document::reuse`]): no
    /// master key is called, so a warm write costs no KMS request. The `groups` passed to
    /// [`encrypt_groups`] are then ignored (pass `&[]`). Callers decide when the key set
    /// changed and a fresh data key must be wrapped instead.
    pub reuse: Option<Reuse>,
    /// More fields for the `sops` object (e.g. an application's own digest). sops ignores fields
    /// it does not know; they are not covered by the MAC.
    pub extra_metadata: Vec<(String, Node)>,
}

impl std::fmt::Debug for EncryptOptions {
    /// Never prints the data key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EncryptOptions")
            .field("rules", &self.rules)
            .field("shamir_threshold", &self.shamir_threshold)
            .field("data_key", &self.data_key.as_ref().map(|_| "<redacted>"))
            .field("lastmodified", &self.lastmodified)
            .field("reuse", &self.reuse)
            .field("extra_metadata", &self.extra_metadata)
            .finish_non_exhaustive()
    }
}

/// A data key with its wrapped entries, to write a new version without calling master keys.
#[derive(Clone)]
pub struct Reuse {
    /// The 32-byte data key (zeroed when dropped).
    pub data_key: Zeroizing<[u8; 32]>,
    /// The wrapped entries, by key group (the shares' wrappings when there are several groups).
    pub key_groups: Vec<Vec<KeyEntry>>,
    /// Shamir threshold (ignored with one group).
    pub shamir_threshold: usize,
}

impl std::fmt::Debug for Reuse {
    /// Never prints the data key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reuse")
            .field("key_groups", &self.key_groups)
            .field("shamir_threshold", &self.shamir_threshold)
            .finish_non_exhaustive()
    }
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
            reuse: None,
            extra_metadata: Vec::new(),
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
    /// The AAD of the current path: keys joined with `:` plus a trailing `:`.
    aad: String,
    /// Per path component: which rules it matches (see [`KeyFlags`]).
    flags: Vec<KeyFlags>,
    /// Counts of path components matching each rule.
    counts: [usize; 4],
    /// Rule matches per key text (keys repeat a lot in Terraform states).
    cache: std::collections::HashMap<String, KeyFlags, FastHash>,
    /// Interned AADs (paths repeat: array indices are not part of them).
    aads: Vec<String>,
    aad_ids: std::collections::HashMap<String, u32, FastHash>,
}

/// FNV-1a: the walker's maps are keyed by short, trusted strings (keys and paths of the document).
#[derive(Default, Clone, Copy)]
struct FastHash;

struct Fnv(u64);

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
        }
    }
}

impl std::hash::BuildHasher for FastHash {
    type Hasher = Fnv;
    fn build_hasher(&self) -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

/// Which rules a key matches: unencrypted suffix, encrypted suffix, unencrypted regex, encrypted regex.
type KeyFlags = [bool; 4];

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

enum Mode {
    Encrypt,
    Decrypt,
    Hash,
}

impl<'a> Walker<'a> {
    fn new(cipher: &'a ValueCipher, rules: &'a CompiledRules) -> Walker<'a> {
        Walker {
            cipher,
            rules,
            hash: rules.new_hash(),
            hash_float: None,
            aad: String::new(),
            flags: Vec::new(),
            counts: [0; 4],
            cache: std::collections::HashMap::default(),
            aads: Vec::new(),
            aad_ids: std::collections::HashMap::default(),
        }
    }

    fn key_flags(&mut self, key: &str) -> KeyFlags {
        let r = self.rules;
        if r.unencrypted_regex.is_none() && r.encrypted_regex.is_none() {
            return [
                r.unencrypted_suffix
                    .as_deref()
                    .is_some_and(|s| key.ends_with(s)),
                r.encrypted_suffix
                    .as_deref()
                    .is_some_and(|s| key.ends_with(s)),
                false,
                false,
            ];
        }
        if let Some(f) = self.cache.get(key) {
            return *f;
        }
        let r = self.rules;
        let f = [
            r.unencrypted_suffix
                .as_deref()
                .is_some_and(|s| key.ends_with(s)),
            r.encrypted_suffix
                .as_deref()
                .is_some_and(|s| key.ends_with(s)),
            r.unencrypted_regex
                .as_ref()
                .is_some_and(|re| re.is_match(key)),
            r.encrypted_regex
                .as_ref()
                .is_some_and(|re| re.is_match(key)),
        ];
        if self.cache.len() < 100_000 {
            self.cache.insert(key.to_owned(), f);
        }
        f
    }

    fn push(&mut self, key: &str) {
        let f = self.key_flags(key);
        for (c, hit) in self.counts.iter_mut().zip(f) {
            *c += usize::from(hit);
        }
        self.flags.push(f);
        self.aad.push_str(key);
        self.aad.push(':');
    }

    fn pop(&mut self, key: &str) {
        if let Some(f) = self.flags.pop() {
            for (c, hit) in self.counts.iter_mut().zip(f) {
                *c -= usize::from(hit);
            }
        }
        self.aad.truncate(self.aad.len() - key.len() - 1);
    }

    /// sops' `shouldBeEncrypted` for the current path (JSON has no comments).
    fn should_encrypt(&self) -> bool {
        let r = self.rules;
        let mut enc = true;
        if r.unencrypted_suffix.is_some() && self.counts[0] > 0 {
            enc = false;
        }
        if r.encrypted_suffix.is_some() {
            enc = self.counts[1] > 0;
        }
        if r.unencrypted_regex.is_some() && self.counts[2] > 0 {
            enc = false;
        }
        if r.encrypted_regex.is_some() {
            enc = self.counts[3] > 0;
        }
        enc
    }

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

    /// Walks the tree in document order, without recursion, refusing trees that nest deeper
    /// than [`MAX_DEPTH`]. `Encrypt`: hashes every leaf (plaintext) and queues the leaves to
    /// encrypt. `Decrypt`: queues the leaves to decrypt. `Hash`: hashes every leaf (after
    /// decryption).
    fn walk<'t>(
        &mut self,
        root: &'t mut Node,
        mode: &Mode,
        jobs: &mut Vec<Job<'t>>,
    ) -> Result<(), SopsError> {
        let mut stack: Vec<Open<'t>> = Vec::new();
        self.enter(root, None, mode, jobs, &mut stack)?;
        while let Some(top) = stack.last_mut() {
            let next = match top {
                Open::Object(fields, _) => fields.next().map(|pair| {
                    let (k, v) = (&pair.0, &mut pair.1);
                    (Some(k.as_str()), v)
                }),
                Open::Array(items, _) => items.next().map(|v| (None, v)),
            };
            match next {
                Some((key, child)) => self.enter(child, key, mode, jobs, &mut stack)?,
                None => {
                    if let Some(Open::Object(_, Some(key)) | Open::Array(_, Some(key))) =
                        stack.pop()
                    {
                        self.pop(key);
                    }
                }
            }
        }
        Ok(())
    }

    /// One node of [`Walker::walk`]: a container is opened on `stack` (its key is left on the
    /// path until it is closed), a leaf is handled at once.
    fn enter<'t>(
        &mut self,
        node: &'t mut Node,
        key: Option<&'t str>,
        mode: &Mode,
        jobs: &mut Vec<Job<'t>>,
        stack: &mut Vec<Open<'t>>,
    ) -> Result<(), SopsError> {
        if let Some(k) = key {
            self.push(k);
        }
        match node {
            Node::Object(fields) => {
                if stack.len() >= MAX_DEPTH {
                    return Err(SopsError::TooDeep { limit: MAX_DEPTH });
                }
                stack.push(Open::Object(fields.iter_mut(), key));
                return Ok(());
            }
            Node::Array(items) => {
                if stack.len() >= MAX_DEPTH {
                    return Err(SopsError::TooDeep { limit: MAX_DEPTH });
                }
                stack.push(Open::Array(items.iter_mut(), key));
                return Ok(());
            }
            Node::Null => {}
            leaf => {
                let encrypted = self.should_encrypt();
                if !matches!(mode, Mode::Decrypt) && (!self.rules.mac_only_encrypted || encrypted) {
                    self.hash_leaf(leaf, !encrypted);
                }
                let queue = encrypted
                    && match mode {
                        Mode::Encrypt | Mode::Decrypt => {
                            !matches!(leaf, Node::Str(s) if s.is_empty())
                        }
                        Mode::Hash => false,
                    };
                if queue {
                    let aad = self.intern_aad();
                    jobs.push(Job { leaf, aad });
                }
            }
        }
        if let Some(k) = key {
            self.pop(k);
        }
        Ok(())
    }

    fn intern_aad(&mut self) -> u32 {
        if let Some(i) = self.aad_ids.get(self.aad.as_str()) {
            return *i;
        }
        let i = self.aads.len() as u32;
        self.aads.push(self.aad.clone());
        self.aad_ids.insert(self.aad.clone(), i);
        i
    }
}

/// A container [`Walker::walk`] is inside: its remaining children, and its key in its parent.
enum Open<'t> {
    Object(std::slice::IterMut<'t, (String, Node)>, Option<&'t str>),
    Array(std::slice::IterMut<'t, Node>, Option<&'t str>),
}

/// A leaf to encrypt or decrypt, with the index of its AAD in `Walker::aads`.
struct Job<'t> {
    leaf: &'t mut Node,
    aad: u32,
}

fn encrypt_leaf(cipher: &ValueCipher, leaf: &mut Node, aad: &str) -> Result<(), SopsError> {
    let (ty, plain): (ValueType, std::borrow::Cow<[u8]>) = match &*leaf {
        Node::Str(s) if s.is_empty() => return Ok(()),
        Node::Str(s) => (ValueType::Str, s.as_bytes().into()),
        Node::Int(i) => (ValueType::Int, i.to_string().into_bytes().into()),
        Node::UInt(u) => (
            ValueType::Float,
            go_format_float(*u as f64).into_bytes().into(),
        ),
        Node::Float(f) => (ValueType::Float, go_format_float(*f).into_bytes().into()),
        Node::Bool(b) => (
            ValueType::Bool,
            (if *b { &b"true"[..] } else { &b"false"[..] }).into(),
        ),
        _ => return Ok(()),
    };
    let enc = cipher.encrypt(&plain, ty, aad)?;
    *leaf = Node::Str(enc);
    Ok(())
}

fn decrypt_leaf(cipher: &ValueCipher, leaf: &mut Node, aad: &str) -> Result<(), SopsError> {
    let Node::Str(enc) = &*leaf else {
        return Err(SopsError::Value {
            path: aad.to_owned(),
            reason: "expected an encrypted string value".into(),
        });
    };
    let (plain, ty) = cipher.decrypt(enc, aad)?;
    *leaf = typed_value(plain, ty, aad)?;
    Ok(())
}

/// Runs the queued jobs, on several threads when there are many.
fn run_jobs(
    cipher: &ValueCipher,
    aads: &[String],
    jobs: &mut [Job<'_>],
    mode: &Mode,
) -> Result<(), SopsError> {
    let run = |chunk: &mut [Job<'_>]| -> Result<(), SopsError> {
        for job in chunk {
            let aad = &aads[job.aad as usize];
            match mode {
                Mode::Encrypt => encrypt_leaf(cipher, job.leaf, aad)?,
                Mode::Decrypt => decrypt_leaf(cipher, job.leaf, aad)?,
                Mode::Hash => {}
            }
        }
        Ok(())
    };
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(8);
    if threads < 2 || jobs.len() < 4096 {
        return run(jobs);
    }
    let per = jobs.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let handles: Vec<_> = jobs
            .chunks_mut(per)
            .map(|c| scope.spawn(move || run(c)))
            .collect();
        let mut first_err = None;
        for h in handles {
            let r = h
                .join()
                .unwrap_or_else(|_| Err(SopsError::Options("a worker thread panicked".into())));
            if let (Err(e), None) = (r, &first_err) {
                first_err = Some(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    })
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

    fn data_key(&self, keys: &KeySource) -> Result<Zeroizing<Vec<u8>>, SopsError> {
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
                        Err(e @ SopsError::Unavailable { .. }) => {
                            tried.push(format!("{}:{} ({e})", key.kind(), key.id()));
                            unavailable.get_or_insert(e);
                        }
                        Err(e) => tried.push(format!("{}:{} ({e})", key.kind(), key.id())),
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
        run_jobs(&cipher, &w.aads, &mut jobs, &Mode::Decrypt)?;
        drop(jobs);
        w.walk(&mut tree, &Mode::Hash, &mut Vec::new())?;
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
    let mut out = String::with_capacity(plain.len().saturating_mul(4));
    {
        let mut ctx = StreamCtx {
            w: &mut w,
            out: &mut out,
            indent: &options.indent,
            level: 0,
            top_fields: 0,
            err: None,
        };
        let mut de = serde_json::Deserializer::from_slice(plain);
        let r = serde::de::DeserializeSeed::deserialize(StreamSeed(&mut ctx), &mut de)
            .and_then(|()| de.end());
        if let Some(e) = ctx.err.take() {
            return Err(e);
        }
        r.map_err(json_error)?;
        if ctx.top_fields > 0 {
            ctx.out.push(',');
        }
    }
    // `out` ends right before the top-level object's closing brace
    let meta = metadata(w, &data_key, &cipher, groups, options)?;
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
    run_jobs(&cipher, &w.aads, &mut jobs, &Mode::Encrypt)?;
    drop(jobs);
    let meta = metadata(w, &data_key, &cipher, groups, options)?;
    if let Node::Object(fields) = &mut tree {
        fields.push(("sops".into(), meta));
    }
    Ok(tree.to_json_pretty(&options.indent))
}

/// Builds the `sops` object: wrapped data key (or Shamir shares), MAC, rules, version.
fn metadata(
    w: Walker<'_>,
    data_key: &[u8; 32],
    cipher: &ValueCipher,
    groups: &[&[&dyn MasterKey]],
    options: &EncryptOptions,
) -> Result<Node, SopsError> {
    let mac = match (options.float_mac_for_big_clear_ints, w.hash_float) {
        (true, Some(h)) => hex_upper(&h.finalize()),
        _ => hex_upper(&w.hash.finalize()),
    };
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

// ------------------------------------------------------------------ streaming encryption

struct StreamCtx<'c, 'w> {
    w: &'c mut Walker<'w>,
    out: &'c mut String,
    indent: &'c str,
    level: usize,
    /// Number of top-level keys written.
    top_fields: usize,
    /// An error of ours (not a JSON syntax error), reported instead of serde's.
    err: Option<SopsError>,
}

/// A leaf as the stream sees it.
enum Leaf<'a> {
    Str(&'a str),
    Int(i64),
    UInt(u64),
    Float(f64),
    Bool(bool),
    Null,
}

impl StreamCtx<'_, '_> {
    fn leaf<E: serde::de::Error>(&mut self, leaf: Leaf<'_>) -> Result<(), E> {
        use crate::tree::{json_float, write_str};
        use std::fmt::Write as _;
        if self.level == 0 {
            self.err = Some(SopsError::Options(
                "sops JSON needs an object at the top level".into(),
            ));
            return Err(E::custom("top level is not an object"));
        }
        let node_for_mac = match &leaf {
            Leaf::Null => {
                self.out.push_str("null");
                return Ok(());
            }
            Leaf::Str(_) => None,
            Leaf::Int(i) => Some(Node::Int(*i)),
            Leaf::UInt(u) => Some(Node::UInt(*u)),
            Leaf::Float(f) => Some(Node::Float(*f)),
            Leaf::Bool(b) => Some(Node::Bool(*b)),
        };
        let encrypted = self.w.should_encrypt();
        if !self.w.rules.mac_only_encrypted || encrypted {
            match (&leaf, &node_for_mac) {
                (Leaf::Str(s), _) => self.w.hash_str(s),
                (_, Some(n)) => self.w.hash_leaf(n, !encrypted),
                _ => {}
            }
        }
        let plain: std::borrow::Cow<[u8]> = match (&leaf, &node_for_mac) {
            (Leaf::Str(s), _) => s.as_bytes().into(),
            (Leaf::Bool(b), _) => (if *b { &b"true"[..] } else { &b"false"[..] }).into(),
            (_, Some(n)) => mac_bytes(n).unwrap_or_default().into(),
            _ => (&b""[..]).into(),
        };
        if !encrypted || matches!(leaf, Leaf::Str("")) {
            match leaf {
                Leaf::Str(s) => write_str(self.out, s),
                Leaf::Int(i) => {
                    let _ = write!(self.out, "{i}");
                }
                Leaf::UInt(u) => {
                    let _ = write!(self.out, "{u}");
                }
                Leaf::Float(f) => json_float(self.out, f),
                Leaf::Bool(b) => self.out.push_str(if b { "true" } else { "false" }),
                Leaf::Null => self.out.push_str("null"),
            }
            return Ok(());
        }
        let ty = match leaf {
            Leaf::Str(_) => ValueType::Str,
            Leaf::Int(_) => ValueType::Int,
            Leaf::Bool(_) => ValueType::Bool,
            _ => ValueType::Float,
        };
        self.out.push('"');
        match self
            .w
            .cipher
            .encrypt_into(&plain, ty, &self.w.aad, self.out)
        {
            Ok(()) => {
                self.out.push('"');
                Ok(())
            }
            Err(e) => {
                self.err = Some(e);
                Err(E::custom("encryption failed"))
            }
        }
    }
}

impl Walker<'_> {
    fn hash_str(&mut self, s: &str) {
        if let Some(h) = &mut self.hash_float {
            h.update(s.as_bytes());
        }
        self.hash.update(s.as_bytes());
    }
}

struct StreamSeed<'s, 'c, 'w>(&'s mut StreamCtx<'c, 'w>);

impl<'de> serde::de::DeserializeSeed<'de> for StreamSeed<'_, '_, '_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

struct KeySeed<'s>(&'s mut String);

impl<'de> serde::de::DeserializeSeed<'de> for KeySeed<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_str(self)
    }
}

impl serde::de::Visitor<'_> for KeySeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an object key")
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<(), E> {
        self.0.clear();
        self.0.push_str(v);
        Ok(())
    }
}

impl<'de> serde::de::Visitor<'de> for StreamSeed<'_, '_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        self.0.leaf(Leaf::Null)
    }
    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<(), E> {
        self.0.leaf(Leaf::Bool(v))
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<(), E> {
        self.0.leaf(Leaf::Int(v))
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<(), E> {
        self.0
            .leaf(i64::try_from(v).map_or(Leaf::UInt(v), Leaf::Int))
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<(), E> {
        self.0.leaf(Leaf::Float(v))
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<(), E> {
        self.0.leaf(Leaf::Str(v))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let ctx = self.0;
        if ctx.level == 0 {
            ctx.err = Some(SopsError::Options(
                "sops JSON needs an object at the top level".into(),
            ));
            return Err(serde::de::Error::custom("top level is not an object"));
        }
        if ctx.level >= MAX_DEPTH {
            ctx.err = Some(SopsError::TooDeep { limit: MAX_DEPTH });
            return Err(serde::de::Error::custom("too deep"));
        }
        ctx.out.push('[');
        ctx.level += 1;
        let mut n = 0usize;
        loop {
            let mark = ctx.out.len();
            if n > 0 {
                ctx.out.push(',');
            }
            crate::tree::newline(ctx.out, Some(ctx.indent), ctx.level);
            if seq.next_element_seed(StreamSeed(ctx))?.is_none() {
                ctx.out.truncate(mark);
                break;
            }
            n += 1;
        }
        ctx.level -= 1;
        if n > 0 {
            crate::tree::newline(ctx.out, Some(ctx.indent), ctx.level);
        }
        ctx.out.push(']');
        Ok(())
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let ctx = self.0;
        let top = ctx.level == 0;
        if ctx.level >= MAX_DEPTH {
            ctx.err = Some(SopsError::TooDeep { limit: MAX_DEPTH });
            return Err(serde::de::Error::custom("too deep"));
        }
        ctx.out.push('{');
        ctx.level += 1;
        let mut key = String::new();
        let mut n = 0usize;
        while map.next_key_seed(KeySeed(&mut key))?.is_some() {
            if top && key == "sops" {
                ctx.err = Some(SopsError::AlreadyEncrypted);
                return Err(serde::de::Error::custom("already encrypted"));
            }
            if n > 0 {
                ctx.out.push(',');
            }
            crate::tree::newline(ctx.out, Some(ctx.indent), ctx.level);
            crate::tree::write_str(ctx.out, &key);
            ctx.out.push_str(": ");
            ctx.w.push(&key);
            let r = map.next_value_seed(StreamSeed(ctx));
            ctx.w.pop(&key);
            r?;
            n += 1;
        }
        ctx.level -= 1;
        if top {
            ctx.top_fields = n;
            // the caller appends `"sops": {...}` and the closing brace
            return Ok(());
        }
        if n > 0 {
            crate::tree::newline(ctx.out, Some(ctx.indent), ctx.level);
        }
        ctx.out.push('}');
        Ok(())
    }
}
