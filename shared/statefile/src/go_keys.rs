//! Object keys matched as Go's `encoding/json` matches them to struct fields: the exact name, or
//! else the name without regard to case, where the Kelvin sign `K` counts as `k` and the long `ſ`
//! as `s` ([`go_key_matches`]). `"Serial"` is the `serial` Terraform reads.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, Visitor};

use super::shape::Field;

/// Whether the JSON key `key` names the field tagged `name` (ASCII, lower case) for Go's
/// `encoding/json`: equal without regard to case, with `K` (U+212A) as `k` and `ſ` (U+017F) as
/// `s`, the two non-ASCII letters whose simple case folding reaches an ASCII letter.
pub(crate) fn go_key_matches(key: &str, name: &str) -> bool {
    let mut name = name.bytes();
    for c in key.chars() {
        let folded = match c {
            '\u{212A}' => b'k',
            '\u{017F}' => b's',
            c if c.is_ascii() => (c as u8).to_ascii_lowercase(),
            _ => return false,
        };
        if name.next() != Some(folded) {
            return false;
        }
    }
    name.next().is_none()
}

/// Tells object keys apart without copying them.
pub(crate) trait Keys {
    type Key;
    fn key(&self, key: &str) -> Self::Key;
}

/// Reads one object key with [`Keys`].
pub(crate) struct KeySeed<K>(pub K);

impl<'de, K: Keys> DeserializeSeed<'de> for KeySeed<K> {
    type Value = K::Key;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<K::Key, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de, K: Keys> Visitor<'de> for KeySeed<K> {
    type Value = K::Key;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E>(self, key: &str) -> Result<K::Key, E> {
        Ok(self.0.key(key))
    }
}

/// The keys of a struct: the index of the field a key names (exact name first, as Go does).
pub(crate) struct StructKeys(pub &'static [Field]);

impl Keys for StructKeys {
    type Key = Option<usize>;

    fn key(&self, key: &str) -> Option<usize> {
        self.0
            .iter()
            .position(|f| f.name == key)
            .or_else(|| self.0.iter().position(|f| go_key_matches(key, f.name)))
    }
}

/// The keys of a map: kept, to name the place of a mismatch.
pub(crate) struct MapKeys;

impl Keys for MapKeys {
    type Key = String;

    fn key(&self, key: &str) -> String {
        key.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_match_as_go_matches_them() {
        assert!(go_key_matches("Serial", "serial"));
        assert!(go_key_matches("SERIAL", "serial"));
        assert!(go_key_matches("\u{017F}erial", "serial"));
        assert!(go_key_matches("chec\u{212A}_results", "check_results"));
        assert!(!go_key_matches("seria", "serial"));
        assert!(!go_key_matches("serials", "serial"));
        assert!(!go_key_matches("l\u{0131}neage", "lineage"));
        assert!(!go_key_matches("l\u{0130}neage", "lineage"));
    }
}
