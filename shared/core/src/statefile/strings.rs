//! The strings of a resource instance's `attributes` that the catalog reads, collected while the
//! body is walked (the one parse of a POST): the top-level identifying attributes of every
//! instance ([`crate::identifiers::IDENTIFYING_ATTRIBUTES`]), and, for a state small enough to
//! look at for links ([`crate::catalog::LINK_SCAN_MAX_BYTES`]), every string with its place
//! ([`crate::links`]' uses). Nothing is built but the strings kept.

use std::fmt::{self, Write};

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::checked::Checked;
use crate::identifiers::{IDENTIFYING_ATTRIBUTES, MAX_IDENTIFIER_BYTES};

/// Which strings of the attributes are kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Wanted {
    /// None (the body is only checked).
    #[default]
    Nothing,
    /// The top-level identifying attributes that are strings.
    Identifying,
    /// Every string, with its place.
    All,
}

/// One string of an instance's attributes: not empty, and at most
/// [`MAX_IDENTIFIER_BYTES`] long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    /// Where: `tags.Name`, `ingress[0].cidr[1]`, `tags["kubernetes.io/role"]`.
    pub attribute: String,
    pub value: String,
    /// Under a top-level identifying attribute (`id`, `arn`, …).
    pub identifying: bool,
    /// The top-level attribute itself (its value is the string).
    pub top: bool,
}

/// Walks an instance's `attributes` (raw JSON to Terraform: any value is checked only as JSON),
/// keeping the strings `wanted` in `found`. Attributes that are not an object hold none.
pub(crate) struct AttributeStrings<'f> {
    pub found: &'f mut Vec<Found>,
    pub wanted: Wanted,
}

impl<'de> DeserializeSeed<'de> for AttributeStrings<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for AttributeStrings<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<Checked>()?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut path = String::new();
        while let Some(name) = map.next_key::<String>()? {
            let identifying = IDENTIFYING_ATTRIBUTES.contains(&name.as_str());
            if self.wanted == Wanted::Identifying && !identifying {
                map.next_value::<Checked>()?;
                continue;
            }
            path.clear();
            step(&mut path, &name);
            map.next_value_seed(Strings {
                path: &mut path,
                found: &mut *self.found,
                identifying,
                top: true,
                all: self.wanted == Wanted::All,
            })?;
        }
        Ok(())
    }
}

/// The strings of one value under an attribute, at `path`.
struct Strings<'p> {
    path: &'p mut String,
    found: &'p mut Vec<Found>,
    identifying: bool,
    top: bool,
    /// Nested strings too (else only a top-level string).
    all: bool,
}

impl Strings<'_> {
    /// The walk of a value inside this one, `path` being already extended to it.
    fn inner(&mut self) -> Strings<'_> {
        Strings {
            path: &mut *self.path,
            found: &mut *self.found,
            identifying: self.identifying,
            top: false,
            all: self.all,
        }
    }
}

impl<'de> DeserializeSeed<'de> for Strings<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strings<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, text: &str) -> Result<(), E> {
        if !text.is_empty() && text.len() <= MAX_IDENTIFIER_BYTES {
            self.found.push(Found {
                attribute: self.path.clone(),
                value: text.to_owned(),
                identifying: self.identifying,
                top: self.top,
            });
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        if !self.all {
            while seq.next_element::<Checked>()?.is_some() {}
            return Ok(());
        }
        let at = self.path.len();
        for index in 0usize.. {
            let _ = write!(self.path, "[{index}]");
            let more = seq.next_element_seed(self.inner())?.is_some();
            self.path.truncate(at);
            if !more {
                break;
            }
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        if !self.all {
            while map.next_entry::<Checked, Checked>()?.is_some() {}
            return Ok(());
        }
        let at = self.path.len();
        while let Some(name) = map.next_key::<String>()? {
            step(self.path, &name);
            map.next_value_seed(self.inner())?;
            self.path.truncate(at);
        }
        Ok(())
    }
}

/// Appends the field `name` to an attribute path: `.name` when it is a plain name, else
/// `["name"]` (JSON-quoted).
pub(crate) fn step(path: &mut String, name: &str) {
    let plain = name.chars().enumerate().all(|(i, c)| {
        c == '_' || c.is_ascii_alphabetic() || (i > 0 && (c.is_ascii_digit() || c == '-'))
    });
    if plain && !name.is_empty() {
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(name);
    } else {
        path.push('[');
        path.push_str(&serde_json::Value::String(name.to_owned()).to_string());
        path.push(']');
    }
}

/// The strings of attributes already held as JSON (a v3 state's, rebuilt from its flat map),
/// as [`AttributeStrings`] keeps them with [`Wanted::All`].
pub(crate) fn attribute_strings(attributes: &serde_json::Value) -> Vec<Found> {
    let mut found = Vec::new();
    let Some(fields) = attributes.as_object() else {
        return found;
    };
    let mut path = String::new();
    for (name, value) in fields {
        path.clear();
        step(&mut path, name);
        let identifying = IDENTIFYING_ATTRIBUTES.contains(&name.as_str());
        value_strings(value, &mut path, identifying, true, &mut found);
    }
    found
}

/// The strings of `value` at `path`, and of every value inside it.
pub(crate) fn value_strings(
    value: &serde_json::Value,
    path: &mut String,
    identifying: bool,
    top: bool,
    found: &mut Vec<Found>,
) {
    use serde_json::Value;
    let at = path.len();
    match value {
        Value::String(text) if !text.is_empty() && text.len() <= MAX_IDENTIFIER_BYTES => found
            .push(Found {
                attribute: path.clone(),
                value: text.clone(),
                identifying,
                top,
            }),
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                let _ = write!(path, "[{index}]");
                value_strings(item, path, identifying, false, found);
                path.truncate(at);
            }
        }
        Value::Object(fields) => {
            for (name, field) in fields {
                step(path, name);
                value_strings(field, path, identifying, false, found);
                path.truncate(at);
            }
        }
        _ => {}
    }
}
