//! The top-level fields of a state body that the protocol looks at, read in one pass that also
//! checks the whole body is JSON: every other value is walked and dropped as it is parsed, never
//! kept (a `#[serde(flatten)]` catch-all would buffer the whole state, its resources, as a tree
//! first), and never skipped unchecked (serde's `IgnoredAny` lets invalid UTF-8 inside a string
//! through and has no nesting limit; walking with `deserialize_any` keeps serde_json's checks,
//! its recursion limit included).

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// What the protocol reads of a state body.
#[derive(Debug, Default)]
pub(super) struct StateHeader {
    pub version: Option<serde_json::Value>,
    pub serial: Option<serde_json::Value>,
    pub lineage: Option<serde_json::Value>,
    /// OpenTofu's client-side encryption envelope has this field.
    pub encrypted_data: bool,
}

impl<'de> Deserialize<'de> for StateHeader {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(HeaderVisitor)
    }
}

struct HeaderVisitor;

impl<'de> Visitor<'de> for HeaderVisitor {
    type Value = StateHeader;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<StateHeader, A::Error> {
        let mut header = StateHeader::default();
        while let Some(key) = map.next_key::<Field>()? {
            let (field, name) = match key {
                Field::Version => (&mut header.version, "version"),
                Field::Serial => (&mut header.serial, "serial"),
                Field::Lineage => (&mut header.lineage, "lineage"),
                Field::EncryptedData => {
                    map.next_value::<Checked>()?;
                    header.encrypted_data = true;
                    continue;
                }
                Field::Other => {
                    map.next_value::<Checked>()?;
                    continue;
                }
            };
            if field.is_some() {
                return Err(de::Error::duplicate_field(name));
            }
            *field = Some(map.next_value()?);
        }
        Ok(header)
    }
}

/// A top-level key, told apart without copying it.
enum Field {
    Version,
    Serial,
    Lineage,
    EncryptedData,
    Other,
}

impl<'de> Deserialize<'de> for Field {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_identifier(FieldVisitor)
    }
}

struct FieldVisitor;

impl<'de> Visitor<'de> for FieldVisitor {
    type Value = Field;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E>(self, name: &str) -> Result<Field, E> {
        Ok(match name {
            "version" => Field::Version,
            "serial" => Field::Serial,
            "lineage" => Field::Lineage,
            "encrypted_data" => Field::EncryptedData,
            _ => Field::Other,
        })
    }
}

/// Any JSON value, checked as it is parsed and dropped.
struct Checked;

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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &[u8]) -> Result<StateHeader, serde_json::Error> {
        serde_json::from_slice(body)
    }

    #[test]
    fn reads_the_fields_and_checks_everything_else() {
        let h = parse(br#"{"resources":[{"a":{"b":[1,2.5,null,true,"x\u00e9"]}}],"version":4,"serial":7,"lineage":"l","encrypted_data":{"k":1}}"#)
            .expect("a state");
        assert_eq!(h.version, Some(serde_json::json!(4)));
        assert_eq!(h.serial, Some(serde_json::json!(7)));
        assert_eq!(h.lineage, Some(serde_json::json!("l")));
        assert!(h.encrypted_data);
        // Invalid UTF-8 inside a skipped string, too deep a nesting, trailing garbage, a field
        // twice: not JSON the protocol accepts.
        let mut bad_utf8 = br#"{"version":4,"resources":["#.to_vec();
        bad_utf8.extend_from_slice(b"\"\xff\xfe\"]}");
        assert!(parse(&bad_utf8).is_err());
        let deep = format!(
            "{{\"version\":4,\"x\":{}{}}}",
            "[".repeat(10_000),
            "]".repeat(10_000)
        );
        assert!(parse(deep.as_bytes()).is_err());
        assert!(parse(br#"{"version":4} x"#).is_err());
        assert!(parse(br#"{"serial":1,"serial":2}"#).is_err());
        assert!(parse(br#"[1]"#).is_err());
    }
}
