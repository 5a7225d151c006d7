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
    /// Parses JSON text. Objects and arrays may nest at most [`MAX_DEPTH`] deep; deeper text is
    /// refused with [`SopsError::TooDeep`].
    pub fn parse(json: &[u8]) -> Result<Node, SopsError> {
        let mut de = serde_json::Deserializer::from_slice(json);
        let node =
            de::DeserializeSeed::deserialize(NodeSeed { depth: 0 }, &mut de).map_err(json_error)?;
        de.end().map_err(json_error)?;
        Ok(node)
    }

    /// How deep objects and arrays nest (a scalar is 0, `{}` is 1), counted without recursion.
    pub fn depth(&self) -> usize {
        let mut deepest = 0;
        let mut stack: Vec<(&Node, usize)> = vec![(self, 0)];
        while let Some((node, depth)) = stack.pop() {
            match node {
                Node::Array(items) => {
                    deepest = deepest.max(depth + 1);
                    stack.extend(items.iter().map(|n| (n, depth + 1)));
                }
                Node::Object(fields) => {
                    deepest = deepest.max(depth + 1);
                    stack.extend(fields.iter().map(|(_, n)| (n, depth + 1)));
                }
                _ => {}
            }
        }
        deepest
    }

    /// Drops a tree of any depth without recursion (the derived drop recurses once per level).
    pub fn dismantle(self) {
        let mut stack = vec![self];
        while let Some(node) = stack.pop() {
            match node {
                Node::Array(items) => stack.extend(items),
                Node::Object(fields) => stack.extend(fields.into_iter().map(|(_, n)| n)),
                _ => {}
            }
        }
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

    /// Converts into a `serde_json::Value` (key order follows `serde_json`'s map, integers exact),
    /// without recursion.
    pub fn to_value(&self) -> serde_json::Value {
        use serde_json::Value;
        /// A container being built: its remaining children, what is built so far, and its key in
        /// its parent (for an object member).
        enum Open<'a> {
            Array(std::slice::Iter<'a, Node>, Vec<Value>),
            Object(
                std::slice::Iter<'a, (String, Node)>,
                serde_json::Map<String, Value>,
            ),
        }
        fn scalar(node: &Node) -> Option<Value> {
            Some(match node {
                Node::Null => Value::Null,
                Node::Bool(b) => Value::Bool(*b),
                Node::Int(i) => Value::from(*i),
                Node::UInt(u) => Value::from(*u),
                Node::Float(f) => {
                    serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number)
                }
                Node::Str(s) => Value::String(s.clone()),
                Node::Array(_) | Node::Object(_) => return None,
            })
        }
        fn open(node: &Node) -> Open<'_> {
            match node {
                Node::Object(fields) => Open::Object(fields.iter(), serde_json::Map::new()),
                Node::Array(items) => Open::Array(items.iter(), Vec::with_capacity(items.len())),
                _ => Open::Array([].iter(), Vec::new()),
            }
        }
        if let Some(v) = scalar(self) {
            return v;
        }
        // Each open container with the key it will have in its parent.
        let mut stack: Vec<(Open<'_>, Option<&str>)> = vec![(open(self), None)];
        loop {
            let Some((top, _)) = stack.last_mut() else {
                return Value::Null;
            };
            let next = match top {
                Open::Array(it, _) => it.next().map(|v| (None, v)),
                Open::Object(it, _) => it.next().map(|(k, v)| (Some(k.as_str()), v)),
            };
            let (key, value) = match next {
                Some((key, child)) => match scalar(child) {
                    Some(value) => (key, value),
                    None => {
                        stack.push((open(child), key));
                        continue;
                    }
                },
                None => match stack.pop() {
                    Some((Open::Array(_, items), key)) => (key, Value::Array(items)),
                    Some((Open::Object(_, map), key)) => (key, Value::Object(map)),
                    None => return Value::Null,
                },
            };
            match stack.last_mut() {
                Some((Open::Array(_, items), _)) => items.push(value),
                Some((Open::Object(_, map), _)) => {
                    map.insert(key.unwrap_or_default().to_owned(), value);
                }
                None => return value,
            }
        }
    }
}

/// The deepest nesting of objects and arrays the codec accepts. serde_json stops at 128 on its
/// own; this limit comes first so the error says what is wrong, and no walk of a tree goes
/// deeper than it.
pub const MAX_DEPTH: usize = 100;

/// A marker in serde errors raised for [`MAX_DEPTH`], turned into [`SopsError::TooDeep`].
const TOO_DEEP: &str = "gitstate-sops: nesting limit";

/// A serde_json error as a [`SopsError`]: nesting beyond the limits is [`SopsError::TooDeep`].
pub(crate) fn json_error(e: serde_json::Error) -> SopsError {
    let text = e.to_string();
    if text.contains(TOO_DEEP) || text.contains("recursion limit exceeded") {
        SopsError::TooDeep { limit: MAX_DEPTH }
    } else {
        SopsError::Json(text)
    }
}

/// The error a visitor raises when nesting goes beyond [`MAX_DEPTH`].
pub(crate) fn too_deep<E: de::Error>() -> E {
    E::custom(TOO_DEEP)
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
    /// An open container: its remaining children, and whether one was written.
    enum Open<'a> {
        Array(std::slice::Iter<'a, Node>, bool),
        Object(std::slice::Iter<'a, (String, Node)>, bool),
    }
    let mut stack: Vec<Open<'_>> = Vec::new();
    let mut next = Some(node);
    loop {
        if let Some(node) = next.take() {
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
                Node::Array(items) if items.is_empty() => out.push_str("[]"),
                Node::Object(fields) if fields.is_empty() => out.push_str("{}"),
                Node::Array(items) => {
                    out.push('[');
                    stack.push(Open::Array(items.iter(), false));
                }
                Node::Object(fields) => {
                    out.push('{');
                    stack.push(Open::Object(fields.iter(), false));
                }
            }
        }
        let inner = level + stack.len();
        let Some(top) = stack.last_mut() else {
            return;
        };
        let (child, started) = match top {
            Open::Array(it, started) => (it.next().map(|n| (None, n)), started),
            Open::Object(it, started) => (it.next().map(|(k, n)| (Some(k), n)), started),
        };
        match child {
            Some((key, child)) => {
                if *started {
                    out.push(',');
                }
                *started = true;
                newline(out, indent, inner);
                if let Some(key) = key {
                    write_str(out, key);
                    out.push(':');
                    if indent.is_some() {
                        out.push(' ');
                    }
                }
                next = Some(child);
            }
            None => {
                let closing = match stack.pop() {
                    Some(Open::Array(..)) => ']',
                    _ => '}',
                };
                newline(out, indent, level + stack.len());
                out.push(closing);
            }
        }
    }
}

/// Parses a [`Node`] at nesting `depth`, refusing to go beyond [`MAX_DEPTH`].
struct NodeSeed {
    depth: usize,
}

impl<'de> de::DeserializeSeed<'de> for NodeSeed {
    type Value = Node;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        d.deserialize_any(NodeVisitor { depth: self.depth })
    }
}

impl<'de> Deserialize<'de> for Node {
    /// Refuses nesting beyond [`MAX_DEPTH`] like [`Node::parse`].
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NodeVisitor { depth: 0 })
    }
}

struct NodeVisitor {
    depth: usize,
}

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
        let depth = self.depth + 1;
        if depth > MAX_DEPTH {
            return Err(too_deep());
        }
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(NodeSeed { depth })? {
            items.push(item);
        }
        Ok(Node::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let depth = self.depth + 1;
        if depth > MAX_DEPTH {
            return Err(too_deep());
        }
        let mut fields = Vec::new();
        while let Some(k) = map.next_key::<String>()? {
            let v = map.next_value_seed(NodeSeed { depth })?;
            fields.push((k, v));
        }
        Ok(Node::Object(fields))
    }
}
