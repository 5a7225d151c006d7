//! The top level of a state body as the rules read it: each field of any of the three shapes (v4
//! state, v3 state, OpenTofu's encrypted envelope), what its value is, where it did not meet its
//! Go type, and the facts its elements hold.

use std::fmt;

use serde::de::{Deserialize, DeserializeSeed, Deserializer, MapAccess, Visitor};

use super::checked::Checked;
use super::facts::Facts;
use super::go_keys::{go_key_matches, KeySeed, Keys};
use super::mismatch::{Mismatch, Seen};
use super::shape::{
    Scope, Shape, BACKEND_V3, CHECK_RESULTS_V4, MODULE_V3, OUTPUT_V4, REMOTE_V3, RESOURCE_V4,
};
use super::strings::Wanted;
use super::walk::Walk;

/// A top-level field the rules read.
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
    /// What the checks after decoding read of `resources`, `outputs` and `check_results`.
    pub facts: Facts,
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

impl Header {
    /// Reads `body` (one JSON object, nothing after it), keeping the strings of its instances'
    /// attributes that are `wanted`.
    pub(crate) fn parse(body: &[u8], wanted: Wanted) -> Result<Header, serde_json::Error> {
        let mut reader = serde_json::Deserializer::from_slice(body);
        let header = HeaderVisitor(wanted).deserialize(&mut reader)?;
        reader.end()?;
        Ok(header)
    }
}

impl<'de> Deserialize<'de> for Header {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        HeaderVisitor(Wanted::Nothing).deserialize(deserializer)
    }
}

/// Reads the top level, keeping the strings [`Wanted`].
struct HeaderVisitor(Wanted);

impl<'de> DeserializeSeed<'de> for HeaderVisitor {
    type Value = Header;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Header, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for HeaderVisitor {
    type Value = Header;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Header, A::Error> {
        let mut header = Header {
            facts: Facts::wanting(self.0),
            ..Header::default()
        };
        while let Some(key) = map.next_key_seed(KeySeed(TopKeys))? {
            match key {
                TopKey::Field(top) => {
                    // A v3 state's instances are read from its modules as JSON, built as they
                    // are checked.
                    let builds = top == Top::Modules && self.0 == Wanted::All;
                    let mut value = map.next_value_seed(Walk {
                        shape: top.shape(),
                        keep_text: top.keeps_text(),
                        within: Scope::Plain,
                        facts: &mut header.facts,
                        builds,
                    })?;
                    if builds {
                        header.facts.legacy_modules = value.value.take();
                    }
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
    fn top_level_keys_match_as_go_matches_them() {
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
            m.place(Top::Resources.name()),
            "resources[0].instances[1].schema_version"
        );
        assert_eq!(m.found, "a string");
        let h = parse(br#"{"outputs":{"a \"b\"":{"sensitive":"yes"}}}"#).unwrap();
        let m = h.get(Top::Outputs).unwrap().mismatch.clone().unwrap();
        assert_eq!(
            m.place(Top::Outputs.name()),
            r#"outputs["a \"b\""].sensitive"#
        );
        assert_eq!(m.expected, "true or false");
        let h = parse(br#"{"resources":{}}"#).unwrap();
        let m = h.get(Top::Resources).unwrap().mismatch.clone().unwrap();
        assert_eq!((m.expected, m.found.as_str()), ("an array", "an object"));
    }

    #[test]
    fn the_facts_of_resources_outputs_and_checks_are_kept_in_order() {
        let h = parse(
            br#"{"resources":[{"Mode":"managed","provider":"p","instances":[{"index_key":"a","status":"tainted","dependencies":["x.y",null]},{"deposed":"12345678"}]},null],
                 "outputs":{"o":{"type":"string","value":"v"},"p":null},
                 "check_results":[{"object_kind":"resource","config_addr":"a.b","objects":[{"object_addr":"a.b[0]","status":"pass"}]}]}"#,
        )
        .unwrap();
        let f = &h.facts;
        assert_eq!(f.resources.len(), 2, "a null element is a zero resource");
        let r = &f.resources[0];
        assert_eq!((r.mode(), r.provider(), r.module()), ("managed", "p", ""));
        assert_eq!(r.instances.len(), 2);
        assert_eq!(r.instances[0].index_key, Some(serde_json::json!("a")));
        assert_eq!(r.instances[0].status(), "tainted");
        assert_eq!(r.instances[0].dependencies, ["x.y", ""]);
        assert_eq!(r.instances[1].deposed(), "12345678");
        assert_eq!(f.resources[1].mode(), "");
        assert_eq!(f.outputs.len(), 2);
        assert_eq!(
            (f.outputs[0].name.as_str(), f.outputs[0].type_spec.clone()),
            ("o", Some(serde_json::json!("string")))
        );
        assert_eq!(
            (f.outputs[1].name.as_str(), &f.outputs[1].type_spec),
            ("p", &None)
        );
        assert_eq!(f.checks[0].config_addr(), "a.b");
        assert_eq!(f.checks[0].objects[0].addr(), "a.b[0]");
    }
}
