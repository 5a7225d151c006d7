//! What [`super::encrypt_groups`] is told: rules, Shamir threshold, data key reuse, metadata.

use zeroize::Zeroizing;

use super::encryption_rules::Rules;
use crate::keys::KeyEntry;
use crate::tree::Node;

/// Options for [`super::encrypt`].
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
    /// Reuse a data key and its already wrapped key entries (from [`super::Document::reuse`]): no
    /// master key is called, so a warm write costs no KMS request. The `groups` passed to
    /// [`super::encrypt_groups`] are then ignored (pass `&[]`). Callers decide when the key set
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
