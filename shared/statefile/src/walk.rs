//! One pass over a value: checked against the Go type it is decoded into ([`Shape`]) as it is
//! parsed, what the checks after decoding read kept in [`Facts`], and every other value walked
//! and dropped, never kept (a `#[serde(flatten)]` catch-all would buffer the whole state as a
//! tree first) and never skipped unchecked (serde's `IgnoredAny` lets invalid UTF-8 inside a
//! string through and has no nesting limit; walking with `deserialize_any` keeps serde_json's
//! checks, its recursion limit included). A walk that `builds` also returns the value it walked
//! as JSON (a v3 state's `modules`, which the catalog reads), checked all the same.

use std::fmt;

use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::checked::Checked;
use super::facts::{Facts, Kept};
use super::go_keys::{KeySeed, MapKeys, StructKeys};
use super::mismatch::{Mismatch, Seen, Step};
use super::shape::{Fact, Scope, Shape};
use super::strings::{AttributeStrings, Wanted};

/// What a walked value was, and the first place it did not meet its shape.
pub(crate) struct Walked {
    pub seen: Seen,
    pub mismatch: Option<Box<Mismatch>>,
    /// The value as JSON, when the walk builds it.
    pub value: Option<Value>,
}

/// Walks one value against `shape`, keeping facts of the records in `facts`.
pub(crate) struct Walk<'f> {
    pub shape: &'static Shape,
    /// Keep a string's text in what is seen.
    pub keep_text: bool,
    /// The record the value's fields belong to (the innermost struct of a [`Scope`]).
    pub within: Scope,
    pub facts: &'f mut Facts,
    /// Return the value as JSON too (struct fields under their Go names, unknown ones left out).
    pub builds: bool,
}

impl Walk<'_> {
    fn scalar(&self, seen: Seen, fits: bool, value: impl FnOnce() -> Value) -> Walked {
        let mismatch =
            (!fits && !matches!(self.shape, Shape::Any)).then(|| Mismatch::new(self.shape, &seen));
        Walked {
            seen,
            mismatch,
            value: self.builds.then(value),
        }
    }

    /// The walk of a value inside this one, as `shape`.
    fn nested(&mut self, shape: &'static Shape, within: Scope) -> Nested<'_> {
        Nested {
            shape,
            within,
            facts: &mut *self.facts,
            builds: self.builds,
        }
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
        Ok(self.scalar(Seen::Null, true, || Value::Null))
    }

    fn visit_bool<E>(self, b: bool) -> Result<Walked, E> {
        Ok(
            self.scalar(Seen::Bool, matches!(self.shape, Shape::Bool), || {
                Value::Bool(b)
            }),
        )
    }

    fn visit_u64<E>(self, n: u64) -> Result<Walked, E> {
        let fits = match self.shape {
            Shape::U64 => true,
            Shape::U8 => n <= 255,
            _ => false,
        };
        Ok(self.scalar(Seen::Whole(n), fits, || Value::from(n)))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Walked, E> {
        // serde_json calls this only for negative integers.
        if n >= 0 {
            return self.visit_u64(n.unsigned_abs());
        }
        Ok(self.scalar(Seen::Negative, false, || Value::from(n)))
    }

    fn visit_f64<E>(self, n: f64) -> Result<Walked, E> {
        // A fraction, an exponent, `-0`, or an integer beyond 64 bits: none fits Go's integers.
        Ok(self.scalar(Seen::OtherNumber, false, || Value::from(n)))
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
        Ok(self.scalar(seen, fits, || Value::String(text.to_owned())))
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<Walked, A::Error> {
        let element = match self.shape {
            Shape::List(element) => Some(*element),
            // Go decodes a JSON array into a []byte element by element.
            Shape::Bytes => Some(&Shape::U8),
            _ => None,
        };
        let mut mismatch = None;
        let mut index = 0;
        let mut built = Vec::new();
        let within = self.within;
        while let Some((found, value)) =
            seq.next_element_seed(self.nested(element.unwrap_or(&Shape::Any), within))?
        {
            if mismatch.is_none() {
                mismatch = found.map(|m| m.within(Step::Index(index)));
            }
            index += 1;
            built.extend(value);
        }
        let mut walked = self.scalar(Seen::Array, element.is_some(), || Value::Array(built));
        walked.mismatch = walked.mismatch.or(mismatch);
        Ok(walked)
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Walked, A::Error> {
        let mut mismatch = None;
        let mut built = serde_json::Map::new();
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
                    let (found, value) = map.next_value_seed(self.nested(&field.shape, within))?;
                    if mismatch.is_none() {
                        mismatch = found.map(|m| m.within(Step::Field(field.name)));
                    }
                    if let Some(value) = value {
                        built.insert(field.name.to_owned(), value);
                    }
                }
            }
            Shape::Map(values) => {
                let within = self.within;
                while let Some(key) = map.next_key_seed(KeySeed(MapKeys))? {
                    self.facts.under_key(&key);
                    let (found, value) = map.next_value_seed(self.nested(values, within))?;
                    if let Some(value) = value {
                        built.insert(key.clone(), value);
                    }
                    if mismatch.is_none() {
                        mismatch = found.map(|m| m.within(Step::Key(key)));
                    }
                }
            }
            _ if self.builds => {
                while let Some((key, value)) = map.next_entry::<String, Value>()? {
                    built.insert(key, value);
                }
            }
            _ => while map.next_entry::<Checked, Checked>()?.is_some() {},
        }
        let fits = matches!(self.shape, Shape::Struct(..) | Shape::Map(_));
        let mut walked = self.scalar(Seen::Object, fits, || Value::Object(built));
        walked.mismatch = walked.mismatch.or(mismatch);
        Ok(walked)
    }
}

/// Walks a value inside a top-level one against its shape: where it is not met, if anywhere.
/// A value of any shape is only checked as JSON (most of a state: attributes, output values),
/// unless the checks after decoding keep it. Returns where the shape is not met, if anywhere,
/// and the value when the walk builds it.
struct Nested<'f> {
    shape: &'static Shape,
    within: Scope,
    facts: &'f mut Facts,
    builds: bool,
}

impl<'de> DeserializeSeed<'de> for Nested<'_> {
    type Value = (Option<Box<Mismatch>>, Option<Value>);

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        match self.shape {
            Shape::Any | Shape::Attributes if self.builds => {
                Ok((None, Some(Value::deserialize(d)?)))
            }
            Shape::Attributes if self.facts.wanted != Wanted::Nothing => {
                let wanted = self.facts.wanted;
                if let Some(found) = self.facts.instance_strings() {
                    AttributeStrings { found, wanted }.deserialize(d)?;
                } else {
                    Checked::deserialize(d)?;
                }
                Ok((None, None))
            }
            Shape::Any | Shape::Attributes => Checked::deserialize(d).map(|_| (None, None)),
            Shape::Kept(fact, Shape::Any) => {
                let value = Value::deserialize(d)?;
                let built = self.builds.then(|| value.clone());
                self.facts.keep(self.within, *fact, Kept::Json(value));
                Ok((None, built))
            }
            Shape::Kept(fact, inner) => {
                let walked = d.deserialize_any(Walk {
                    shape: inner,
                    keep_text: true,
                    within: self.within,
                    facts: &mut *self.facts,
                    builds: self.builds,
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
                Ok((walked.mismatch, walked.value))
            }
            shape => {
                let walked = d.deserialize_any(Walk {
                    shape,
                    keep_text: false,
                    within: self.within,
                    facts: self.facts,
                    builds: self.builds,
                })?;
                Ok((walked.mismatch, walked.value))
            }
        }
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
