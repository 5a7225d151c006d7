//! The walk over a document tree: the key path (for AADs and rules), the MAC, and the leaves to
//! encrypt or decrypt, without recursion.

use sha2::{Digest, Sha512};

use super::encryption_rules::{CompiledRules, KeyMatches, RuleCounts};
use crate::cipher::ValueCipher;
use crate::tree::{go_format_float, Node, MAX_DEPTH};
use crate::SopsError;

/// Bytes a leaf contributes to the MAC, as sops' `ToBytes` (bools as `True`/`False`,
/// floats as Go's `FormatFloat(f, 'f', -1, 64)`).
pub(super) fn mac_bytes(node: &Node) -> Option<Vec<u8>> {
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

/// What a walk does with the leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// Hash every leaf (plaintext) and queue the leaves to encrypt.
    Encrypt,
    /// Queue the leaves to decrypt.
    Decrypt,
    /// Hash every leaf (after decryption).
    Hash,
}

/// The state of a walk: the current key path and what matched on it, the MAC so far, and the
/// AADs of the queued leaves.
pub(super) struct Walker<'a> {
    pub(super) cipher: &'a ValueCipher,
    pub(super) rules: &'a CompiledRules,
    /// MAC with integers hashed as decimal integers (sops >= 3.12 reads JSON integers as int64).
    hash: Sha512,
    /// MAC with clear integers beyond 2^53 hashed as float64, as sops <= 3.11 does (it reads
    /// every JSON number as float64). Started lazily at the first such value.
    hash_float: Option<Sha512>,
    /// The AAD of the current path: keys joined with `:` plus a trailing `:`.
    pub(super) aad: String,
    /// Per path component: which rules it matches.
    matches: Vec<KeyMatches>,
    /// Counts of path components matching each rule.
    counts: RuleCounts,
    /// Rule matches per key text (keys repeat a lot in Terraform states).
    cache: std::collections::HashMap<String, KeyMatches, FastHash>,
    /// Interned AADs (paths repeat: array indices are not part of them).
    pub(super) aads: Vec<String>,
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

impl<'a> Walker<'a> {
    /// A walk with nothing read yet.
    pub(super) fn new(cipher: &'a ValueCipher, rules: &'a CompiledRules) -> Walker<'a> {
        Walker {
            cipher,
            rules,
            hash: rules.new_hash(),
            hash_float: None,
            aad: String::new(),
            matches: Vec::new(),
            counts: RuleCounts::default(),
            cache: std::collections::HashMap::default(),
            aads: Vec::new(),
            aad_ids: std::collections::HashMap::default(),
        }
    }

    fn key_matches(&mut self, key: &str) -> KeyMatches {
        if !self.rules.has_regex() {
            return self.rules.key_matches(key);
        }
        if let Some(m) = self.cache.get(key) {
            return *m;
        }
        let m = self.rules.key_matches(key);
        if self.cache.len() < 100_000 {
            self.cache.insert(key.to_owned(), m);
        }
        m
    }

    /// `key` enters the path.
    pub(super) fn push(&mut self, key: &str) {
        let m = self.key_matches(key);
        self.counts.add(m);
        self.matches.push(m);
        self.aad.push_str(key);
        self.aad.push(':');
    }

    /// `key` leaves the path.
    pub(super) fn pop(&mut self, key: &str) {
        if let Some(m) = self.matches.pop() {
            self.counts.remove(m);
        }
        self.aad.truncate(self.aad.len() - key.len() - 1);
    }

    /// Whether the leaf at the current path is encrypted.
    pub(super) fn should_encrypt(&self) -> bool {
        self.rules.should_encrypt(&self.counts)
    }

    /// Hashes one leaf; `clear` tells whether it is stored unencrypted.
    pub(super) fn hash_leaf(&mut self, leaf: &Node, clear: bool) {
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
    pub(super) fn walk<'t>(
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
pub(super) enum Open<'t> {
    Object(std::slice::IterMut<'t, (String, Node)>, Option<&'t str>),
    Array(std::slice::IterMut<'t, Node>, Option<&'t str>),
}

/// A leaf to encrypt or decrypt, with the index of its AAD in `Walker::aads`.
pub(super) struct Job<'t> {
    pub(super) leaf: &'t mut Node,
    pub(super) aad: u32,
}

impl Walker<'_> {
    /// Hashes a string leaf.
    pub(super) fn hash_str(&mut self, s: &str) {
        if let Some(h) = &mut self.hash_float {
            h.update(s.as_bytes());
        }
        self.hash.update(s.as_bytes());
    }
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

impl Walker<'_> {
    /// The MAC (upper-case hex) with integers hashed exactly, and the one with clear integers
    /// beyond 2^53 hashed as float64 when the document had any (sops <= 3.11 computes that one).
    pub(super) fn macs(self) -> (String, Option<String>) {
        (
            hex_upper(&self.hash.finalize()),
            self.hash_float.map(|h| hex_upper(&h.finalize())),
        )
    }
}
