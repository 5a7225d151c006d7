//! Which values of a document are encrypted: sops' `*_suffix` / `*_regex` rules, and the MAC's
//! start when only encrypted values are covered.

use regex::Regex;
use sha2::{Digest, Sha512};

use crate::SopsError;

/// sops' initial MAC bytes when `mac_only_encrypted` is set.
const MAC_ONLY_ENCRYPTED_INIT: [u8; 32] = [
    0x8a, 0x3f, 0xd2, 0xad, 0x54, 0xce, 0x66, 0x52, 0x7b, 0x10, 0x34, 0xf3, 0xd1, 0x47, 0xbe, 0x0b,
    0x0b, 0x97, 0x5b, 0x3b, 0xf4, 0x4f, 0x72, 0xc6, 0xfd, 0xad, 0xec, 0x81, 0x76, 0xf2, 0x7d, 0x69,
];

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

/// [`Rules`] ready to match keys (regexes compiled, empty strings dropped).
pub(super) struct CompiledRules {
    unencrypted_suffix: Option<String>,
    encrypted_suffix: Option<String>,
    unencrypted_regex: Option<Regex>,
    encrypted_regex: Option<Regex>,
    /// The MAC covers only the encrypted values.
    pub(super) mac_only_encrypted: bool,
}

impl CompiledRules {
    pub(super) fn new(r: &Rules) -> Result<CompiledRules, SopsError> {
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

    /// The MAC's hash, started as sops starts it.
    pub(super) fn new_hash(&self) -> Sha512 {
        let mut h = Sha512::new();
        if self.mac_only_encrypted {
            h.update(MAC_ONLY_ENCRYPTED_INIT);
        }
        h
    }

    /// Whether matching needs a regex (then results are worth remembering per key).
    pub(super) fn has_regex(&self) -> bool {
        self.unencrypted_regex.is_some() || self.encrypted_regex.is_some()
    }

    /// Which rules `key` matches.
    pub(super) fn key_matches(&self, key: &str) -> KeyMatches {
        KeyMatches {
            unencrypted_suffix: self
                .unencrypted_suffix
                .as_deref()
                .is_some_and(|s| key.ends_with(s)),
            encrypted_suffix: self
                .encrypted_suffix
                .as_deref()
                .is_some_and(|s| key.ends_with(s)),
            unencrypted_regex: self
                .unencrypted_regex
                .as_ref()
                .is_some_and(|re| re.is_match(key)),
            encrypted_regex: self
                .encrypted_regex
                .as_ref()
                .is_some_and(|re| re.is_match(key)),
        }
    }

    /// sops' `shouldBeEncrypted` for a path whose keys matched `counts` (JSON has no comments).
    pub(super) fn should_encrypt(&self, counts: &RuleCounts) -> bool {
        let mut encrypt = true;
        if self.unencrypted_suffix.is_some() && counts.unencrypted_suffix > 0 {
            encrypt = false;
        }
        if self.encrypted_suffix.is_some() {
            encrypt = counts.encrypted_suffix > 0;
        }
        if self.unencrypted_regex.is_some() && counts.unencrypted_regex > 0 {
            encrypt = false;
        }
        if self.encrypted_regex.is_some() {
            encrypt = counts.encrypted_regex > 0;
        }
        encrypt
    }
}

/// Which rules one key matches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct KeyMatches {
    unencrypted_suffix: bool,
    encrypted_suffix: bool,
    unencrypted_regex: bool,
    encrypted_regex: bool,
}

/// How many keys of the current path match each rule.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct RuleCounts {
    unencrypted_suffix: usize,
    encrypted_suffix: usize,
    unencrypted_regex: usize,
    encrypted_regex: usize,
}

impl RuleCounts {
    /// A key entered the path.
    pub(super) fn add(&mut self, m: KeyMatches) {
        self.unencrypted_suffix += usize::from(m.unencrypted_suffix);
        self.encrypted_suffix += usize::from(m.encrypted_suffix);
        self.unencrypted_regex += usize::from(m.unencrypted_regex);
        self.encrypted_regex += usize::from(m.encrypted_regex);
    }

    /// A key left the path.
    pub(super) fn remove(&mut self, m: KeyMatches) {
        self.unencrypted_suffix -= usize::from(m.unencrypted_suffix);
        self.encrypted_suffix -= usize::from(m.encrypted_suffix);
        self.unencrypted_regex -= usize::from(m.unencrypted_regex);
        self.encrypted_regex -= usize::from(m.encrypted_regex);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the leaf under `path` is encrypted under `rules`.
    fn encrypted(rules: Rules, path: &[&str]) -> bool {
        let compiled = CompiledRules::new(&rules).expect("valid rules");
        let mut counts = RuleCounts::default();
        for key in path {
            counts.add(compiled.key_matches(key));
        }
        compiled.should_encrypt(&counts)
    }

    #[test]
    fn each_rule_decides_as_sops_does() {
        let suffix = || Rules {
            unencrypted_suffix: Some("_unencrypted".into()),
            ..Rules::default()
        };
        assert!(encrypted(suffix(), &["outputs", "pw"]));
        assert!(
            !encrypted(suffix(), &["meta_unencrypted", "pw"]),
            "anywhere on the path"
        );
        let only = Rules {
            encrypted_suffix: Some("_secret".into()),
            ..Rules::default()
        };
        assert!(!encrypted(only.clone(), &["outputs", "pw"]));
        assert!(encrypted(only, &["db_secret", "value"]));
        let regex = Rules {
            encrypted_regex: Some("^(value|sensitive_.*)$".into()),
            ..Rules::default()
        };
        assert!(encrypted(regex.clone(), &["outputs", "pw", "value"]));
        assert!(!encrypted(regex, &["outputs", "pw", "type"]));
        let clear = Rules {
            unencrypted_regex: Some("^(serial|lineage)$".into()),
            ..Rules::default()
        };
        assert!(!encrypted(clear.clone(), &["serial"]));
        assert!(encrypted(clear, &["resources"]));
        assert!(
            encrypted(Rules::default(), &["anything"]),
            "no rule: everything"
        );
    }

    #[test]
    fn a_key_leaving_the_path_no_longer_counts() {
        let compiled = CompiledRules::new(&Rules {
            unencrypted_suffix: Some("_unencrypted".into()),
            ..Rules::default()
        })
        .expect("valid rules");
        let mut counts = RuleCounts::default();
        let m = compiled.key_matches("x_unencrypted");
        counts.add(m);
        assert!(!compiled.should_encrypt(&counts));
        counts.remove(m);
        assert!(compiled.should_encrypt(&counts));
    }

    #[test]
    fn a_bad_regex_is_an_options_error() {
        let bad = CompiledRules::new(&Rules {
            encrypted_regex: Some("(".into()),
            ..Rules::default()
        });
        assert!(matches!(bad, Err(SopsError::Options(_))));
    }
}
