//! Streaming encryption: the plaintext is parsed, encrypted and written in one pass, without
//! building a tree.

use super::walker::{mac_bytes, Walker};
use crate::cipher::ValueType;
use crate::tree::{json_error, Node, MAX_DEPTH};
use crate::SopsError;

struct StreamCtx<'c, 'w> {
    w: &'c mut Walker<'w>,
    out: &'c mut String,
    indent: &'c str,
    level: usize,
    /// Number of top-level keys written.
    top_fields: usize,
    /// An error of ours (not a JSON syntax error), reported instead of serde's.
    err: Option<SopsError>,
}

/// A leaf as the stream sees it.
enum Leaf<'a> {
    Str(&'a str),
    Int(i64),
    UInt(u64),
    Float(f64),
    Bool(bool),
    Null,
}

impl StreamCtx<'_, '_> {
    fn leaf<E: serde::de::Error>(&mut self, leaf: Leaf<'_>) -> Result<(), E> {
        use crate::tree::{json_float, write_str};
        use std::fmt::Write as _;
        if self.level == 0 {
            self.err = Some(SopsError::Options(
                "sops JSON needs an object at the top level".into(),
            ));
            return Err(E::custom("top level is not an object"));
        }
        let node_for_mac = match &leaf {
            Leaf::Null => {
                self.out.push_str("null");
                return Ok(());
            }
            Leaf::Str(_) => None,
            Leaf::Int(i) => Some(Node::Int(*i)),
            Leaf::UInt(u) => Some(Node::UInt(*u)),
            Leaf::Float(f) => Some(Node::Float(*f)),
            Leaf::Bool(b) => Some(Node::Bool(*b)),
        };
        let encrypted = self.w.should_encrypt();
        if !self.w.rules.mac_only_encrypted || encrypted {
            match (&leaf, &node_for_mac) {
                (Leaf::Str(s), _) => self.w.hash_str(s),
                (_, Some(n)) => self.w.hash_leaf(n, !encrypted),
                _ => {}
            }
        }
        let plain: std::borrow::Cow<[u8]> = match (&leaf, &node_for_mac) {
            (Leaf::Str(s), _) => s.as_bytes().into(),
            (Leaf::Bool(b), _) => (if *b { &b"true"[..] } else { &b"false"[..] }).into(),
            (_, Some(n)) => mac_bytes(n).unwrap_or_default().into(),
            _ => (&b""[..]).into(),
        };
        if !encrypted || matches!(leaf, Leaf::Str("")) {
            match leaf {
                Leaf::Str(s) => write_str(self.out, s),
                Leaf::Int(i) => {
                    let _ = write!(self.out, "{i}");
                }
                Leaf::UInt(u) => {
                    let _ = write!(self.out, "{u}");
                }
                Leaf::Float(f) => json_float(self.out, f),
                Leaf::Bool(b) => self.out.push_str(if b { "true" } else { "false" }),
                Leaf::Null => self.out.push_str("null"),
            }
            return Ok(());
        }
        let ty = match leaf {
            Leaf::Str(_) => ValueType::Str,
            Leaf::Int(_) => ValueType::Int,
            Leaf::Bool(_) => ValueType::Bool,
            _ => ValueType::Float,
        };
        self.out.push('"');
        match self
            .w
            .cipher
            .encrypt_into(&plain, ty, &self.w.aad, self.out)
        {
            Ok(()) => {
                self.out.push('"');
                Ok(())
            }
            Err(e) => {
                self.err = Some(e);
                Err(E::custom("encryption failed"))
            }
        }
    }
}

struct StreamSeed<'s, 'c, 'w>(&'s mut StreamCtx<'c, 'w>);

impl<'de> serde::de::DeserializeSeed<'de> for StreamSeed<'_, '_, '_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

struct KeySeed<'s>(&'s mut String);

impl<'de> serde::de::DeserializeSeed<'de> for KeySeed<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_str(self)
    }
}

impl serde::de::Visitor<'_> for KeySeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an object key")
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<(), E> {
        self.0.clear();
        self.0.push_str(v);
        Ok(())
    }
}

impl<'de> serde::de::Visitor<'de> for StreamSeed<'_, '_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        self.0.leaf(Leaf::Null)
    }
    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<(), E> {
        self.0.leaf(Leaf::Bool(v))
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<(), E> {
        self.0.leaf(Leaf::Int(v))
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<(), E> {
        self.0
            .leaf(i64::try_from(v).map_or(Leaf::UInt(v), Leaf::Int))
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<(), E> {
        self.0.leaf(Leaf::Float(v))
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<(), E> {
        self.0.leaf(Leaf::Str(v))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let ctx = self.0;
        if ctx.level == 0 {
            ctx.err = Some(SopsError::Options(
                "sops JSON needs an object at the top level".into(),
            ));
            return Err(serde::de::Error::custom("top level is not an object"));
        }
        if ctx.level >= MAX_DEPTH {
            ctx.err = Some(SopsError::TooDeep { limit: MAX_DEPTH });
            return Err(serde::de::Error::custom("too deep"));
        }
        ctx.out.push('[');
        ctx.level += 1;
        let mut n = 0usize;
        loop {
            let mark = ctx.out.len();
            if n > 0 {
                ctx.out.push(',');
            }
            crate::tree::newline(ctx.out, Some(ctx.indent), ctx.level);
            if seq.next_element_seed(StreamSeed(ctx))?.is_none() {
                ctx.out.truncate(mark);
                break;
            }
            n += 1;
        }
        ctx.level -= 1;
        if n > 0 {
            crate::tree::newline(ctx.out, Some(ctx.indent), ctx.level);
        }
        ctx.out.push(']');
        Ok(())
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let ctx = self.0;
        let top = ctx.level == 0;
        if ctx.level >= MAX_DEPTH {
            ctx.err = Some(SopsError::TooDeep { limit: MAX_DEPTH });
            return Err(serde::de::Error::custom("too deep"));
        }
        ctx.out.push('{');
        ctx.level += 1;
        let mut key = String::new();
        let mut n = 0usize;
        while map.next_key_seed(KeySeed(&mut key))?.is_some() {
            if top && key == "sops" {
                ctx.err = Some(SopsError::AlreadyEncrypted);
                return Err(serde::de::Error::custom("already encrypted"));
            }
            if n > 0 {
                ctx.out.push(',');
            }
            crate::tree::newline(ctx.out, Some(ctx.indent), ctx.level);
            crate::tree::write_str(ctx.out, &key);
            ctx.out.push_str(": ");
            ctx.w.push(&key);
            let r = map.next_value_seed(StreamSeed(ctx));
            ctx.w.pop(&key);
            r?;
            n += 1;
        }
        ctx.level -= 1;
        if top {
            ctx.top_fields = n;
            // the caller appends `"sops": {...}` and the closing brace
            return Ok(());
        }
        if n > 0 {
            crate::tree::newline(ctx.out, Some(ctx.indent), ctx.level);
        }
        ctx.out.push('}');
        Ok(())
    }
}

/// Encrypts the fields of the top-level object of `plain` into a new text, which ends right
/// before that object's closing brace (the caller appends `"sops": {…}` and closes it).
pub(super) fn encrypt_fields(
    w: &mut Walker<'_>,
    plain: &[u8],
    indent: &str,
) -> Result<String, SopsError> {
    let mut out = String::with_capacity(plain.len().saturating_mul(4));
    let mut ctx = StreamCtx {
        w,
        out: &mut out,
        indent,
        level: 0,
        top_fields: 0,
        err: None,
    };
    let mut de = serde_json::Deserializer::from_slice(plain);
    let r = serde::de::DeserializeSeed::deserialize(StreamSeed(&mut ctx), &mut de)
        .and_then(|()| de.end());
    if let Some(e) = ctx.err.take() {
        return Err(e);
    }
    r.map_err(json_error)?;
    if ctx.top_fields > 0 {
        ctx.out.push(',');
    }
    Ok(out)
}
