//! The strings of a resource instance's `attributes` that the catalog reads, collected while the
//! body is walked (the one parse of a POST): the top-level identifying attributes of every
//! instance ([`crate::identifiers::IDENTIFYING_ATTRIBUTES`]), and, for a state small enough to
//! look at for links ([`crate::LINK_SCAN_MAX_BYTES`]), every string with its place
//! ([`crate::Use`]s). Nothing is built but the strings kept.

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
        d.deserialize_any(Strings {
            path: &mut String::new(),
            found: self.found,
            wanted: self.wanted,
            at: Level::Attributes,
        })
    }
}

/// Where a walked value sits.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    /// The `attributes` object itself.
    Attributes,
    /// The value of a top-level attribute (`identifying`: one of [`IDENTIFYING_ATTRIBUTES`]).
    Top { identifying: bool },
    /// A value inside one.
    Inner { identifying: bool },
}

/// The strings of one value at `path`.
struct Strings<'p> {
    path: &'p mut String,
    found: &'p mut Vec<Found>,
    wanted: Wanted,
    at: Level,
}

impl Strings<'_> {
    /// The walk of a value inside this one, `path` being already extended to it.
    fn inner(&mut self, at: Level) -> Strings<'_> {
        Strings {
            path: &mut *self.path,
            found: &mut *self.found,
            wanted: self.wanted,
            at,
        }
    }

    /// Whether the values inside this one are walked for their strings (else only checked).
    fn descends(&self) -> bool {
        self.wanted == Wanted::All && self.at != Level::Attributes
    }

    /// The level of the values inside this one.
    fn below(&self) -> Level {
        match self.at {
            Level::Top { identifying } | Level::Inner { identifying } => {
                Level::Inner { identifying }
            }
            Level::Attributes => Level::Attributes,
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
        let (identifying, top) = match self.at {
            Level::Attributes => return Ok(()),
            Level::Top { identifying } => (identifying, true),
            Level::Inner { identifying } => (identifying, false),
        };
        if !text.is_empty() && text.len() <= MAX_IDENTIFIER_BYTES {
            self.found.push(Found {
                attribute: self.path.clone(),
                value: text.to_owned(),
                identifying,
                top,
            });
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        if !self.descends() {
            while seq.next_element::<Checked>()?.is_some() {}
            return Ok(());
        }
        let (at, below) = (self.path.len(), self.below());
        for index in 0usize.. {
            let _ = write!(self.path, "[{index}]");
            let more = seq.next_element_seed(self.inner(below))?.is_some();
            self.path.truncate(at);
            if !more {
                break;
            }
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        if self.at != Level::Attributes && self.wanted != Wanted::All {
            while map.next_entry::<Checked, Checked>()?.is_some() {}
            return Ok(());
        }
        let at = self.path.len();
        while let Some(name) = map.next_key::<String>()? {
            let below = match self.at {
                Level::Attributes => {
                    let identifying = IDENTIFYING_ATTRIBUTES.contains(&name.as_str());
                    if self.wanted == Wanted::Identifying && !identifying {
                        map.next_value::<Checked>()?;
                        continue;
                    }
                    Level::Top { identifying }
                }
                _ => self.below(),
            };
            step(self.path, &name);
            map.next_value_seed(self.inner(below))?;
            self.path.truncate(at);
        }
        Ok(())
    }
}

/// Appends the field `name` to an attribute path: `.name` when it is a plain name, else
/// `["name"]` (JSON-quoted).
fn step(path: &mut String, name: &str) {
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
/// as [`AttributeStrings`] keeps them with [`Wanted::All`]: the same walk, over the value.
pub(crate) fn attribute_strings(attributes: &serde_json::Value) -> Vec<Found> {
    let mut found = Vec::new();
    let seed = AttributeStrings {
        found: &mut found,
        wanted: Wanted::All,
    };
    // A value in memory has nothing left to refuse: the walk cannot fail.
    let _ = seed.deserialize(attributes);
    found
}

/// The strings of a value already held as JSON (an output's), its own text at the empty place.
pub(crate) fn value_strings(value: &serde_json::Value) -> Vec<Found> {
    let mut found = Vec::new();
    let seed = Strings {
        path: &mut String::new(),
        found: &mut found,
        wanted: Wanted::All,
        at: Level::Top { identifying: false },
    };
    let _ = seed.deserialize(value);
    found
}
