//! One pass over a value: checked against the Go type it is decoded into ([`Shape`]) as it is
//! parsed, what the checks after decoding read kept in [`Facts`], and every other value walked
//! and dropped, never kept (a `#[serde(flatten)]` catch-all would buffer the whole state as a
//! tree first) and never skipped unchecked (serde's `IgnoredAny` lets invalid UTF-8 inside a
//! string through and has no nesting limit; walking with `deserialize_any` keeps serde_json's
//! checks, its recursion limit included).

use std::fmt;

use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::facts::{Facts, Kept};
use super::keys::{KeySeed, MapKeys, StructKeys};
use super::mismatch::{Mismatch, Seen, Step};
use super::shape::{Fact, Scope, Shape};

/// What a walked value was, and the first place it did not meet its shape.
pub(crate) struct Walked {
    pub seen: Seen,
    pub mismatch: Option<Box<Mismatch>>,
}

/// Walks one value against `shape`, keeping facts of the records in `facts`.
pub(crate) struct Walk<'f> {
    pub shape: &'static Shape,
    /// Keep a string's text in what is seen.
    pub keep_text: bool,
    /// The record the value's fields belong to (the innermost struct of a [`Scope`]).
    pub within: Scope,
    pub facts: &'f mut Facts,
}

impl Walk<'_> {
    fn scalar(&self, seen: Seen, fits: bool) -> Walked {
        let mismatch =
            (!fits && !matches!(self.shape, Shape::Any)).then(|| Mismatch::new(self.shape, &seen));
        Walked { seen, mismatch }
    }
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = Walked;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Walked, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = Walked;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E>(self) -> Result<Walked, E> {
        // Go leaves a field it reads `null` into as it was (or nil): null fits every type. A
        // record's struct read from null is a zero struct, which its checks see as empty.
        if let Shape::Struct(scope, _) = self.shape {
            self.facts.open(*scope);
        }
        Ok(self.scalar(Seen::Null, true))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Walked, E> {
        Ok(self.scalar(Seen::Bool, matches!(self.shape, Shape::Bool)))
    }

    fn visit_u64<E>(self, n: u64) -> Result<Walked, E> {
        let fits = match self.shape {
            Shape::U64 => true,
            Shape::U8 => n <= 255,
            _ => false,
        };
        Ok(self.scalar(Seen::Whole(n), fits))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Walked, E> {
        // serde_json calls this only for negative integers.
        if n >= 0 {
            return self.visit_u64(n.unsigned_abs());
        }
        Ok(self.scalar(Seen::Negative, false))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Walked, E> {
        // A fraction, an exponent, `-0`, or an integer beyond 64 bits: none fits Go's integers.
        Ok(self.scalar(Seen::OtherNumber, false))
    }

    fn visit_str<E>(self, text: &str) -> Result<Walked, E> {
        let fits = match self.shape {
            Shape::Str => true,
            Shape::Bytes => is_go_base64(text),
            _ => false,
        };
        let seen = Seen::Str {
            text: self.keep_text.then(|| text.to_owned()),
            empty: text.is_empty(),
        };
        Ok(self.scalar(seen, fits))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Walked, A::Error> {
        let element = match self.shape {
            Shape::List(element) => Some(*element),
            // Go decodes a JSON array into a []byte element by element.
            Shape::Bytes => Some(&Shape::U8),
            _ => None,
        };
        let mut mismatch = None;
        let mut index = 0;
        while let Some(walked) = seq.next_element_seed(Nested {
            shape: element.unwrap_or(&Shape::Any),
            within: self.within,
            facts: &mut *self.facts,
        })? {
            if mismatch.is_none() {
                mismatch = walked.map(|m| m.within(Step::Index(index)));
            }
            index += 1;
        }
        let mut walked = self.scalar(Seen::Array, element.is_some());
        walked.mismatch = walked.mismatch.or(mismatch);
        Ok(walked)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Walked, A::Error> {
        let mut mismatch = None;
        match self.shape {
            Shape::Struct(scope, fields) => {
                self.facts.open(*scope);
                let within = if *scope == Scope::Plain {
                    self.within
                } else {
                    *scope
                };
                while let Some(index) = map.next_key_seed(KeySeed(StructKeys(fields)))? {
                    let Some(field) = index.map(|i| &fields[i]) else {
                        map.next_value::<Checked>()?;
                        continue;
                    };
                    let walked = map.next_value_seed(Nested {
                        shape: &field.shape,
                        within,
                        facts: &mut *self.facts,
                    })?;
                    if mismatch.is_none() {
                        mismatch = walked.map(|m| m.within(Step::Field(field.name)));
                    }
                }
            }
            Shape::Map(values) => {
                while let Some(key) = map.next_key_seed(KeySeed(MapKeys))? {
                    self.facts.under_key(&key);
                    let walked = map.next_value_seed(Nested {
                        shape: values,
                        within: self.within,
                        facts: &mut *self.facts,
                    })?;
                    if mismatch.is_none() {
                        mismatch = walked.map(|m| m.within(Step::Key(key)));
                    }
                }
            }
            _ => while map.next_entry::<Checked, Checked>()?.is_some() {},
        }
        let fits = matches!(self.shape, Shape::Struct(..) | Shape::Map(_));
        let mut walked = self.scalar(Seen::Object, fits);
        walked.mismatch = walked.mismatch.or(mismatch);
        Ok(walked)
    }
}

/// Walks a value inside a top-level one against its shape: where it is not met, if anywhere.
/// A value of any shape is only checked as JSON (most of a state: attributes, output values),
/// unless the checks after decoding keep it.
struct Nested<'f> {
    shape: &'static Shape,
    within: Scope,
    facts: &'f mut Facts,
}

impl<'de> DeserializeSeed<'de> for Nested<'_> {
    type Value = Option<Box<Mismatch>>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        match self.shape {
            Shape::Any => Checked::deserialize(d).map(|_| None),
            Shape::Kept(fact, Shape::Any) => {
                let value = serde_json::Value::deserialize(d)?;
                self.facts.keep(self.within, *fact, Kept::Json(value));
                Ok(None)
            }
            Shape::Kept(fact, inner) => {
                let walked = d.deserialize_any(Walk {
                    shape: inner,
                    keep_text: true,
                    within: self.within,
                    facts: &mut *self.facts,
                })?;
                match walked.seen {
                    Seen::Str {
                        text: Some(text), ..
                    } => {
                        self.facts.keep(self.within, *fact, Kept::Text(text));
                    }
                    // A null element of a []string is "" to Go; a null field leaves it as it was.
                    Seen::Null if matches!(fact, Fact::Dependency | Fact::DependsOn) => {
                        self.facts
                            .keep(self.within, *fact, Kept::Text(String::new()));
                    }
                    _ => {}
                }
                Ok(walked.mismatch)
            }
            shape => Ok(d
                .deserialize_any(Walk {
                    shape,
                    keep_text: false,
                    within: self.within,
                    facts: self.facts,
                })?
                .mismatch),
        }
    }
}

/// Any JSON value, checked as it is parsed and dropped.
pub(crate) struct Checked;

impl<'de> Deserialize<'de> for Checked {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(CheckedVisitor)
    }
}

struct CheckedVisitor;

impl<'de> Visitor<'de> for CheckedVisitor {
    type Value = Checked;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_str<E>(self, _: &str) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_unit<E>(self) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Checked, A::Error> {
        while seq.next_element::<Checked>()?.is_some() {}
        Ok(Checked)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Checked, A::Error> {
        while map.next_entry::<Checked, Checked>()?.is_some() {}
        Ok(Checked)
    }
}

/// Whether Go's `base64.StdEncoding` decodes `text` (what `encoding/json` does with a string for
/// a `[]byte`): the standard alphabet in groups of four, `=` padding only at the end, carriage
/// returns and newlines ignored.
pub(crate) fn is_go_base64(text: &str) -> bool {
    let symbols: Vec<u8> = text
        .bytes()
        .filter(|b| *b != b'\r' && *b != b'\n')
        .collect();
    if !symbols.len().is_multiple_of(4) {
        return false;
    }
    let padding = symbols.iter().rev().take_while(|b| **b == b'=').count();
    if padding > 2 {
        return false;
    }
    symbols[..symbols.len() - padding]
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || *b == b'+' || *b == b'/')
}

#[cfg(test)]
mod tests {
    use super::super::header::{Header, Top};
    use super::*;

    #[test]
    fn bytes_are_base64_or_an_array_of_bytes() {
        for good in ["", "AA==", "AAA=", "AAAA", "q83v\nEjRW\r\neJA=", "+/+/"] {
            assert!(is_go_base64(good), "{good:?}");
        }
        for bad in ["A", "AA", "AA=", "A===", "AA==AA==", "AA-_", "AA ="] {
            assert!(!is_go_base64(bad), "{bad:?}");
        }
        let h: Header = serde_json::from_slice(br#"{"encrypted_data":[1,255,0]}"#).unwrap();
        assert!(h.get(Top::EncryptedData).unwrap().mismatch.is_none());
        let h: Header = serde_json::from_slice(br#"{"encrypted_data":[1,256]}"#).unwrap();
        assert!(h.get(Top::EncryptedData).unwrap().mismatch.is_some());
    }
}
