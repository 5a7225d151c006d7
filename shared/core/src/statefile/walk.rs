//! One pass over a state body: the top-level fields the rules look at, each value checked against
//! the Go type it is decoded into ([`Shape`]) as it is parsed, and every other value walked and
//! dropped, never kept (a `#[serde(flatten)]` catch-all would buffer the whole state as a tree
//! first) and never skipped unchecked (serde's `IgnoredAny` lets invalid UTF-8 inside a string
//! through and has no nesting limit; walking with `deserialize_any` keeps serde_json's checks,
//! its recursion limit included).
//!
//! Keys are matched as Go's `encoding/json` matches them to struct fields: the exact name, or
//! else the name without regard to case, where the Kelvin sign `K` counts as `k` and the long
//! `ſ` as `s` ([`go_key_matches`]). `"Serial"` is the `serial` Terraform reads.

use std::fmt;

use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::shape::{
    Shape, BACKEND_V3, CHECK_RESULTS_V4, MODULE_V3, OUTPUT_V4, REMOTE_V3, RESOURCE_V4,
};

/// A top-level field the rules read, of any of the three shapes (v4 state, v3 state, OpenTofu's
/// encrypted envelope).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Top {
    Version,
    TerraformVersion,
    Serial,
    Lineage,
    Outputs,
    Resources,
    CheckResults,
    Modules,
    Remote,
    Backend,
    Meta,
    EncryptedData,
    EncryptionVersion,
}

impl Top {
    const ALL: [Top; 13] = [
        Top::Version,
        Top::TerraformVersion,
        Top::Serial,
        Top::Lineage,
        Top::Outputs,
        Top::Resources,
        Top::CheckResults,
        Top::Modules,
        Top::Remote,
        Top::Backend,
        Top::Meta,
        Top::EncryptedData,
        Top::EncryptionVersion,
    ];

    /// The field's JSON name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Top::Version => "version",
            Top::TerraformVersion => "terraform_version",
            Top::Serial => "serial",
            Top::Lineage => "lineage",
            Top::Outputs => "outputs",
            Top::Resources => "resources",
            Top::CheckResults => "check_results",
            Top::Modules => "modules",
            Top::Remote => "remote",
            Top::Backend => "backend",
            Top::Meta => "meta",
            Top::EncryptedData => "encrypted_data",
            Top::EncryptionVersion => "encryption_version",
        }
    }

    /// The shape its value is checked against while it is parsed. Scalars whose type depends on
    /// the state's version (`serial`) are judged afterwards from what was seen.
    fn shape(self) -> &'static Shape {
        const OUTPUTS: Shape = Shape::Map(&OUTPUT_V4);
        const RESOURCES: Shape = Shape::List(&RESOURCE_V4);
        const CHECK_RESULTS: Shape = Shape::List(&CHECK_RESULTS_V4);
        const MODULES: Shape = Shape::List(&MODULE_V3);
        const META: Shape = Shape::Map(&Shape::Bytes);
        match self {
            Top::Version | Top::Serial => &Shape::Any,
            Top::TerraformVersion | Top::Lineage | Top::EncryptionVersion => &Shape::Str,
            Top::Outputs => &OUTPUTS,
            Top::Resources => &RESOURCES,
            Top::CheckResults => &CHECK_RESULTS,
            Top::Modules => &MODULES,
            Top::Remote => &REMOTE_V3,
            Top::Backend => &BACKEND_V3,
            Top::Meta => &META,
            Top::EncryptedData => &Shape::Bytes,
        }
    }

    /// Whether the rules need the text of a string value (not only that it is one).
    fn keeps_text(self) -> bool {
        matches!(
            self,
            Top::TerraformVersion | Top::Lineage | Top::EncryptionVersion
        )
    }
}

/// What a JSON value is, as far as the rules and the messages need.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Seen {
    Null,
    Bool,
    /// An integer literal from 0 to 2^64−1.
    Whole(u64),
    /// A negative integer literal from −2^63.
    Negative,
    /// A number with a fraction or an exponent, `-0`, or an integer out of those ranges.
    OtherNumber,
    /// A string; its text when the field keeps it.
    Str {
        text: Option<String>,
        empty: bool,
    },
    Array,
    Object,
}

impl Seen {
    /// How a message names it.
    pub(crate) fn describe(&self) -> String {
        match self {
            Seen::Null => "null".into(),
            Seen::Bool => "true or false".into(),
            Seen::Whole(n) => format!("the number {n}"),
            Seen::Negative => "a negative number".into(),
            Seen::OtherNumber => {
                "a number that is not a whole number from 0 to 18446744073709551615".into()
            }
            Seen::Str { .. } => "a string".into(),
            Seen::Array => "an array".into(),
            Seen::Object => "an object".into(),
        }
    }
}

/// One step of a path into the document.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    Field(&'static str),
    Key(String),
    Index(usize),
}

/// The first place in a top-level value whose JSON type its Go type does not take.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Mismatch {
    /// Innermost step first (built while the walk returns).
    steps: Vec<Step>,
    pub expected: &'static str,
    pub found: String,
}

impl Mismatch {
    fn new(shape: &Shape, found: &Seen) -> Box<Mismatch> {
        Box::new(Mismatch {
            steps: Vec::new(),
            expected: expected(shape),
            found: found.describe(),
        })
    }

    fn within(mut self: Box<Self>, step: Step) -> Box<Mismatch> {
        self.steps.push(step);
        self
    }

    /// Where it is, e.g. `resources[2].instances[0].schema_version`, from the top-level field.
    pub(crate) fn place(&self, top: Top) -> String {
        let mut place = top.name().to_owned();
        for step in self.steps.iter().rev() {
            match step {
                Step::Field(name) => {
                    place.push('.');
                    place.push_str(name);
                }
                Step::Key(key) => {
                    place.push('[');
                    place.push_str(&serde_json::Value::String(key.clone()).to_string());
                    place.push(']');
                }
                Step::Index(i) => place.push_str(&format!("[{i}]")),
            }
        }
        place
    }
}

/// How a message names what a shape takes.
fn expected(shape: &Shape) -> &'static str {
    match shape {
        Shape::Any => "any JSON value",
        Shape::Str => "a string",
        Shape::U64 => "a whole number from 0 to 18446744073709551615",
        Shape::U8 => "a whole number from 0 to 255",
        Shape::Bool => "true or false",
        Shape::Bytes => "a base64 string",
        Shape::List(_) => "an array",
        Shape::Map(_) | Shape::Struct(_) => "an object",
    }
}

/// A top-level field as read: what its value is, and where its shape was not met.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TopValue {
    pub seen: Seen,
    pub mismatch: Option<Box<Mismatch>>,
}

/// What the rules read of a state body.
#[derive(Debug, Default)]
pub(crate) struct Header {
    fields: [Option<TopValue>; Top::ALL.len()],
    /// A field given twice (under the same name, or names Go takes for the same field).
    pub duplicate: Option<Top>,
    /// A top-level `"sops"` key (exactly so: sops reads its own key by its exact name).
    pub sops: bool,
}

impl Header {
    /// The value of `top`, when the body has it.
    pub(crate) fn get(&self, top: Top) -> Option<&TopValue> {
        self.fields[top as usize].as_ref()
    }

    /// The value of `top`, when the body has it and it is not `null` (which Go takes as absent).
    pub(crate) fn given(&self, top: Top) -> Option<&TopValue> {
        self.get(top).filter(|v| v.seen != Seen::Null)
    }
}

impl<'de> Deserialize<'de> for Header {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(HeaderVisitor)
    }
}

struct HeaderVisitor;

impl<'de> Visitor<'de> for HeaderVisitor {
    type Value = Header;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Header, A::Error> {
        let mut header = Header::default();
        while let Some(key) = map.next_key_seed(KeySeed(TopKeys))? {
            match key {
                TopKey::Field(top) => {
                    let value = map.next_value_seed(Walk {
                        shape: top.shape(),
                        keep_text: top.keeps_text(),
                    })?;
                    let slot = &mut header.fields[top as usize];
                    if slot.is_some() {
                        header.duplicate.get_or_insert(top);
                    }
                    *slot = Some(TopValue {
                        seen: value.seen,
                        mismatch: value.mismatch,
                    });
                }
                TopKey::Sops => {
                    header.sops = true;
                    map.next_value::<Checked>()?;
                }
                TopKey::Other => {
                    map.next_value::<Checked>()?;
                }
            }
        }
        Ok(header)
    }
}

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
trait Keys {
    type Key;
    fn key(&self, key: &str) -> Self::Key;
}

struct KeySeed<K>(K);

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

/// The top-level keys.
struct TopKeys;

enum TopKey {
    Field(Top),
    Sops,
    Other,
}

impl Keys for TopKeys {
    type Key = TopKey;

    fn key(&self, key: &str) -> TopKey {
        if key == "sops" {
            return TopKey::Sops;
        }
        let by = |matches: &dyn Fn(&str) -> bool| Top::ALL.into_iter().find(|t| matches(t.name()));
        by(&|name| name == key)
            .or_else(|| by(&|name| go_key_matches(key, name)))
            .map_or(TopKey::Other, TopKey::Field)
    }
}

/// The keys of a struct: the index of the field a key names (exact name first, as Go does).
struct StructKeys(&'static [super::shape::Field]);

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
struct MapKeys;

impl Keys for MapKeys {
    type Key = String;

    fn key(&self, key: &str) -> String {
        key.to_owned()
    }
}

/// What a walked value was, and the first place it did not meet its shape.
struct Walked {
    seen: Seen,
    mismatch: Option<Box<Mismatch>>,
}

/// Walks one value against `shape`.
#[derive(Clone, Copy)]
struct Walk {
    shape: &'static Shape,
    keep_text: bool,
}

impl Walk {
    const fn of(shape: &'static Shape) -> Walk {
        Walk {
            shape,
            keep_text: false,
        }
    }

    fn scalar(self, seen: Seen, fits: bool) -> Walked {
        let mismatch =
            (!fits && !matches!(self.shape, Shape::Any)).then(|| Mismatch::new(self.shape, &seen));
        Walked { seen, mismatch }
    }
}

impl<'de> DeserializeSeed<'de> for Walk {
    type Value = Walked;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Walked, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk {
    type Value = Walked;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E>(self) -> Result<Walked, E> {
        // Go leaves a field it reads `null` into as it was (or nil): null fits every type.
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
        while let Some(walked) = seq.next_element_seed(Nested(element.unwrap_or(&Shape::Any)))? {
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
            Shape::Struct(fields) => {
                while let Some(index) = map.next_key_seed(KeySeed(StructKeys(fields)))? {
                    let Some(field) = index.map(|i| &fields[i]) else {
                        map.next_value::<Checked>()?;
                        continue;
                    };
                    let walked = map.next_value_seed(Nested(&field.shape))?;
                    if mismatch.is_none() {
                        mismatch = walked.map(|m| m.within(Step::Field(field.name)));
                    }
                }
            }
            Shape::Map(values) => {
                while let Some(key) = map.next_key_seed(KeySeed(MapKeys))? {
                    let walked = map.next_value_seed(Nested(values))?;
                    if mismatch.is_none() {
                        mismatch = walked.map(|m| m.within(Step::Key(key)));
                    }
                }
            }
            _ => while map.next_entry::<Checked, Checked>()?.is_some() {},
        }
        let fits = matches!(self.shape, Shape::Struct(_) | Shape::Map(_));
        let mut walked = self.scalar(Seen::Object, fits);
        walked.mismatch = walked.mismatch.or(mismatch);
        Ok(walked)
    }
}

/// Walks a value inside a top-level one against its shape: where it is not met, if anywhere.
/// A value of any shape is only checked as JSON (most of a state: attributes, output values).
struct Nested(&'static Shape);

impl<'de> DeserializeSeed<'de> for Nested {
    type Value = Option<Box<Mismatch>>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        match self.0 {
            Shape::Any => Checked::deserialize(d).map(|_| None),
            shape => Ok(d.deserialize_any(Walk::of(shape))?.mismatch),
        }
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
    use super::*;

    fn parse(body: &[u8]) -> Result<Header, serde_json::Error> {
        serde_json::from_slice(body)
    }

    #[test]
    fn reads_the_fields_and_checks_everything_else() {
        let h = parse(br#"{"resources":[{"a":{"b":[1,2.5,null,true,"x\u00e9"]}}],"version":4,"serial":7,"lineage":"l","encrypted_data":"AA=="}"#)
            .expect("a state");
        assert_eq!(h.get(Top::Version).unwrap().seen, Seen::Whole(4));
        assert_eq!(h.get(Top::Serial).unwrap().seen, Seen::Whole(7));
        assert_eq!(
            h.get(Top::Lineage).unwrap().seen,
            Seen::Str {
                text: Some("l".into()),
                empty: false
            }
        );
        assert!(h.get(Top::EncryptedData).unwrap().mismatch.is_none());
        assert!(h.duplicate.is_none());
        // Invalid UTF-8 inside a skipped string, too deep a nesting, trailing garbage: not JSON
        // the protocol accepts.
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
        assert!(parse(br#"[1]"#).is_err());
    }

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
        let h = parse(br#"{"version":4,"serial":1,"SERIAL":2}"#).unwrap();
        assert_eq!(h.duplicate, Some(Top::Serial));
        let h = parse(br#"{"VERSION":4,"Sops":{}}"#).unwrap();
        assert_eq!(h.get(Top::Version).unwrap().seen, Seen::Whole(4));
        assert!(!h.sops, "sops reads its key by its exact name");
    }

    #[test]
    fn a_mismatch_names_its_place() {
        let h = parse(
            br#"{"resources":[{"mode":"managed","instances":[{"schema_version":0},{"Schema_Version":"1"}]}]}"#,
        )
        .unwrap();
        let m = h.get(Top::Resources).unwrap().mismatch.clone().unwrap();
        assert_eq!(
            m.place(Top::Resources),
            "resources[0].instances[1].schema_version"
        );
        assert_eq!(m.found, "a string");
        let h = parse(br#"{"outputs":{"a \"b\"":{"sensitive":"yes"}}}"#).unwrap();
        let m = h.get(Top::Outputs).unwrap().mismatch.clone().unwrap();
        assert_eq!(m.place(Top::Outputs), r#"outputs["a \"b\""].sensitive"#);
        assert_eq!(m.expected, "true or false");
        let h = parse(br#"{"resources":{}}"#).unwrap();
        let m = h.get(Top::Resources).unwrap().mismatch.clone().unwrap();
        assert_eq!((m.expected, m.found.as_str()), ("an array", "an object"));
    }

    #[test]
    fn bytes_are_base64_or_an_array_of_bytes() {
        for good in ["", "AA==", "AAA=", "AAAA", "q83v\nEjRW\r\neJA=", "+/+/"] {
            assert!(is_go_base64(good), "{good:?}");
        }
        for bad in ["A", "AA", "AA=", "A===", "AA==AA==", "AA-_", "AA ="] {
            assert!(!is_go_base64(bad), "{bad:?}");
        }
        let h = parse(br#"{"encrypted_data":[1,255,0]}"#).unwrap();
        assert!(h.get(Top::EncryptedData).unwrap().mismatch.is_none());
        let h = parse(br#"{"encrypted_data":[1,256]}"#).unwrap();
        assert!(h.get(Top::EncryptedData).unwrap().mismatch.is_some());
    }
}
