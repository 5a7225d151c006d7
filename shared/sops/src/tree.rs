//! An ordered JSON tree that keeps integers exact (`i64`/`u64`) and object key order.

use std::fmt::Write as _;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::SopsError;

/// A JSON value whose objects keep their key order and whose integers stay exact.
///
/// Numbers that are integer literals within `i64`/`u64` are kept as integers; every
/// other number is an `f64` (as Go's `encoding/json` with `UseNumber` + `Float64`, which
/// is what sops does).
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// `null`
    Null,
    /// `true` / `false`
    Bool(bool),
    /// An integer within `i64`.
    Int(i64),
    /// An integer above `i64::MAX` (within `u64`).
    UInt(u64),
    /// Any other number.
    Float(f64),
    /// A string.
    Str(String),
    /// An array.
    Array(Vec<Node>),
    /// An object, in document order.
    Object(Vec<(String, Node)>),
}

impl Node {
    /// Parses JSON text.
    pub fn parse(json: &[u8]) -> Result<Node, SopsError> {
        let mut de = serde_json::Deserializer::from_slice(json);
        let node = Node::deserialize(&mut de).map_err(|e| SopsError::Json(e.to_string()))?;
        de.end().map_err(|e| SopsError::Json(e.to_string()))?;
        Ok(node)
    }

    /// The value under `key` when `self` is an object.
    pub fn get(&self, key: &str) -> Option<&Node> {
        match self {
            Node::Object(fields) => fields.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The string value, when `self` is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Node::Str(s) => Some(s),
            _ => None,
        }
    }

    /// Compact JSON text (no HTML escaping, unicode kept as-is).
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = String::new();
        write_node(&mut out, self, None, 0);
        out.into_bytes()
    }

    /// Indented JSON text (`indent` per level, e.g. `"\t"` like sops or `"  "` like Terraform).
    pub fn to_json_pretty(&self, indent: &str) -> Vec<u8> {
        let mut out = String::new();
        write_node(&mut out, self, Some(indent), 0);
        out.push('\n');
        out.into_bytes()
    }

    /// Converts into a `serde_json::Value` (key order follows `serde_json`'s map, integers exact).
    pub fn to_value(&self) -> serde_json::Value {
        use serde_json::Value;
        match self {
            Node::Null => Value::Null,
            Node::Bool(b) => Value::Bool(*b),
            Node::Int(i) => Value::from(*i),
            Node::UInt(u) => Value::from(*u),
            Node::Float(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
            Node::Str(s) => Value::String(s.clone()),
            Node::Array(a) => Value::Array(a.iter().map(Node::to_value).collect()),
            Node::Object(o) => {
                Value::Object(o.iter().map(|(k, v)| (k.clone(), v.to_value())).collect())
            }
        }
    }
}

/// Formats a float as Go's `strconv.FormatFloat(f, 'f', -1, 64)`: shortest round-trip
/// digits, never an exponent (`1e21` → `1000000000000000000000`, `3.0` → `3`).
pub fn go_format_float(f: f64) -> String {
    // Rust's Display for f64 is the shortest representation that round-trips, without exponent.
    format!("{f}")
}

/// Formats a float the way Go's `encoding/json` writes a float64 (what `sops -d` prints):
/// plain digits for 1e-6 <= |f| < 1e21, exponent form otherwise.
pub(crate) fn json_float(out: &mut String, f: f64) {
    if !f.is_finite() {
        out.push_str("null");
        return;
    }
    let a = f.abs();
    if a == 0.0 || (1e-6..1e21).contains(&a) {
        out.push_str(&go_format_float(f));
    } else {
        let _ = write!(out, "{f:e}");
    }
}

pub(crate) fn write_str(out: &mut String, s: &str) {
    out.push('"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if b >= 0x20 && b != b'"' && b != b'\\' {
            continue;
        }
        out.push_str(&s[start..i]);
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x08 => out.push_str("\\b"),
            0x0c => out.push_str("\\f"),
            _ => {
                let _ = write!(out, "\\u{:04x}", b);
            }
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

pub(crate) fn newline(out: &mut String, indent: Option<&str>, level: usize) {
    if let Some(ind) = indent {
        out.push('\n');
        for _ in 0..level {
            out.push_str(ind);
        }
    }
}

pub(crate) fn write_node(out: &mut String, node: &Node, indent: Option<&str>, level: usize) {
    match node {
        Node::Null => out.push_str("null"),
        Node::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Node::Int(i) => {
            let _ = write!(out, "{i}");
        }
        Node::UInt(u) => {
            let _ = write!(out, "{u}");
        }
        Node::Float(f) => json_float(out, *f),
        Node::Str(s) => write_str(out, s),
        Node::Array(items) => {
            if items.is_empty() {
                out.push_str("[]");
                return;
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline(out, indent, level + 1);
                write_node(out, item, indent, level + 1);
            }
            newline(out, indent, level);
            out.push(']');
        }
        Node::Object(fields) => {
            if fields.is_empty() {
                out.push_str("{}");
                return;
            }
            out.push('{');
            for (i, (k, v)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline(out, indent, level + 1);
                write_str(out, k);
                out.push(':');
                if indent.is_some() {
                    out.push(' ');
                }
                write_node(out, v, indent, level + 1);
            }
            newline(out, indent, level);
            out.push('}');
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Int(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Node, E> {
        Ok(i64::try_from(v).map_or(Node::UInt(v), Node::Int))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Node, E> {
        Ok(Node::Float(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Str(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Node, E> {
        Ok(Node::Str(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Node>()? {
            items.push(item);
        }
        Ok(Node::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut fields = Vec::new();
        while let Some((k, v)) = map.next_entry::<String, Node>()? {
            fields.push((k, v));
        }
        Ok(Node::Object(fields))
    }
}
