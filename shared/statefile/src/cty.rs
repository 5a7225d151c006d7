//! Output values as Terraform reads them (go-cty's `cty/json`, the same from go-cty 1.9 to
//! 1.19): a type specification (`"string"`, `["list","number"]`, `["object",{...},[optional]]`,
//! …) and a value that must conform to it, with go-cty's conversions (a number is a string's
//! value, `"true"` a bool's) and its panics refused like its errors (a collection whose
//! elements come out of different types, an optional attribute that is not declared, a tuple
//! too short).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

/// A cty type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Type {
    String,
    Number,
    Bool,
    Dynamic,
    List(Box<Type>),
    Set(Box<Type>),
    Map(Box<Type>),
    Tuple(Vec<Type>),
    Object {
        attributes: BTreeMap<String, Type>,
        optional: BTreeSet<String>,
    },
}

/// Why a type or a value does not read, in a few words.
pub(crate) type Why = &'static str;

/// Reads a type specification (`ctyjson.UnmarshalType`).
pub(crate) fn parse_type(spec: &Value) -> Result<Type, Why> {
    match spec {
        Value::String(name) => match name.as_str() {
            "string" => Ok(Type::String),
            "number" => Ok(Type::Number),
            "bool" => Ok(Type::Bool),
            "dynamic" => Ok(Type::Dynamic),
            _ => Err("not a type name"),
        },
        Value::Array(parts) => {
            let Some(Value::String(kind)) = parts.first() else {
                return Err("not a type");
            };
            let element = || match parts.as_slice() {
                [_, element] => parse_type(element).map(Box::new),
                _ => Err("not a type"),
            };
            match kind.as_str() {
                "list" => Ok(Type::List(element()?)),
                "set" => Ok(Type::Set(element()?)),
                "map" => Ok(Type::Map(element()?)),
                "tuple" => match parts.as_slice() {
                    [_, Value::Null] => Ok(Type::Tuple(Vec::new())),
                    [_, Value::Array(types)] => Ok(Type::Tuple(
                        types.iter().map(parse_type).collect::<Result<_, _>>()?,
                    )),
                    _ => Err("not a type"),
                },
                "object" => {
                    let (attributes, names) = match parts.as_slice() {
                        [_, attributes] => (attributes, &Value::Null),
                        [_, attributes, names] => (attributes, names),
                        _ => return Err("not a type"),
                    };
                    let attributes: BTreeMap<String, Type> = match attributes {
                        Value::Null => BTreeMap::new(),
                        Value::Object(map) => map
                            .iter()
                            .map(|(k, v)| Ok((k.clone(), parse_type(v)?)))
                            .collect::<Result<_, Why>>()?,
                        _ => return Err("not a type"),
                    };
                    let optional: BTreeSet<String> = match names {
                        Value::Null => BTreeSet::new(),
                        Value::Array(names) => names
                            .iter()
                            .map(|n| match n {
                                Value::String(n) => Ok(n.clone()),
                                Value::Null => Ok(String::new()),
                                _ => Err("not a type"),
                            })
                            .collect::<Result<_, Why>>()?,
                        _ => return Err("not a type"),
                    };
                    // go-cty panics on an optional attribute that is not declared.
                    if optional.iter().any(|n| !attributes.contains_key(n)) {
                        return Err("an optional attribute that is not declared");
                    }
                    Ok(Type::Object {
                        attributes,
                        optional,
                    })
                }
                _ => Err("not a type"),
            }
        }
        _ => Err("not a type"),
    }
}

/// Whether `value` reads as `ty` (`ctyjson.Unmarshal`); its type as go-cty builds it.
pub(crate) fn check_value(value: &Value, ty: &Type) -> Result<Type, Why> {
    if value.is_null() {
        return Ok(ty.clone());
    }
    match ty {
        Type::Dynamic => {
            let Value::Object(wrapper) = value else {
                return Err("a dynamic value that is not {\"value\",\"type\"}");
            };
            let (Some(spec), Some(inner), 2) =
                (wrapper.get("type"), wrapper.get("value"), wrapper.len())
            else {
                return Err("a dynamic value that is not {\"value\",\"type\"}");
            };
            check_value(inner, &parse_type(spec)?)
        }
        Type::String => match value {
            Value::String(_) | Value::Number(_) | Value::Bool(_) => Ok(Type::String),
            _ => Err("not a string"),
        },
        Type::Number => match value {
            Value::Number(_) => Ok(Type::Number),
            Value::String(text) if number_text(text) => Ok(Type::Number),
            _ => Err("not a number"),
        },
        Type::Bool => match value {
            Value::Bool(_) => Ok(Type::Bool),
            Value::String(text) if matches!(text.as_str(), "true" | "1" | "false" | "0") => {
                Ok(Type::Bool)
            }
            _ => Err("not a bool"),
        },
        Type::List(element) | Type::Set(element) => {
            let Value::Array(items) = value else {
                return Err("not an array");
            };
            let types = items
                .iter()
                .map(|item| check_value(item, element))
                .collect::<Result<Vec<_>, _>>()?;
            let kind = |t| match ty {
                Type::List(_) => Type::List(Box::new(t)),
                _ => Type::Set(Box::new(t)),
            };
            Ok(kind(collection_element(&types, element)?))
        }
        Type::Map(element) => {
            let Value::Object(entries) = value else {
                return Err("not an object");
            };
            let types = entries
                .values()
                .map(|item| check_value(item, element))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Type::Map(Box::new(collection_element(&types, element)?)))
        }
        Type::Tuple(elements) => {
            let Value::Array(items) = value else {
                return Err("not an array");
            };
            if items.len() != elements.len() {
                return Err("a tuple of another length");
            }
            Ok(Type::Tuple(
                items
                    .iter()
                    .zip(elements)
                    .map(|(item, element)| check_value(item, element))
                    .collect::<Result<_, _>>()?,
            ))
        }
        Type::Object { attributes, .. } => {
            let Value::Object(entries) = value else {
                return Err("not an object");
            };
            if entries.keys().any(|k| !attributes.contains_key(k)) {
                return Err("an attribute the type does not declare");
            }
            let mut built = BTreeMap::new();
            for (name, declared) in attributes {
                let ty = match entries.get(name) {
                    Some(item) => check_value(item, declared)?,
                    None => declared.clone(),
                };
                built.insert(name.clone(), ty);
            }
            Ok(Type::Object {
                attributes: built,
                optional: BTreeSet::new(),
            })
        }
    }
}

/// The element type of a list, set or map built from elements of `types` (go-cty panics when
/// two of them that are not `dynamic` differ): the first that is not `dynamic`, else `dynamic`;
/// the declared one when there are none.
fn collection_element(types: &[Type], declared: &Type) -> Result<Type, Why> {
    if types.is_empty() {
        return Ok(declared.clone());
    }
    let mut known = types.iter().filter(|t| **t != Type::Dynamic);
    let Some(first) = known.next() else {
        return Ok(Type::Dynamic);
    };
    if known.any(|t| t != first) {
        return Err("a collection whose elements are of different types");
    }
    Ok(first.clone())
}

/// The text of a number as go-cty reads a string for a number (`big.ParseFloat`): an optional
/// sign, digits with an optional fraction (or a fraction alone), an optional decimal (`e`) or
/// binary (`p`) exponent. `inf` and exponents beyond ±10000 are refused (go-cty reads the first as
/// infinity and computes for minutes on the second; no Terraform writes either).
fn number_text(text: &str) -> bool {
    let text = text.strip_prefix(['+', '-']).unwrap_or(text);
    let (mantissa, exponent) = match text.find(['e', 'E', 'p', 'P']) {
        Some(at) => (&text[..at], Some(&text[at + 1..])),
        None => (text, None),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = digits(int)
        && digits(frac)
        && (!int.is_empty() || !frac.is_empty())
        && (!mantissa.ends_with('.') || !int.is_empty());
    let exponent_ok = exponent.is_none_or(|e| {
        let unsigned = e.strip_prefix(['+', '-']).unwrap_or(e);
        !unsigned.is_empty()
            && digits(unsigned)
            && e.parse::<i64>().is_ok_and(|n| n.abs() <= 10_000)
    });
    mantissa_ok && exponent_ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reads(spec: Value, value: Value) -> bool {
        parse_type(&spec)
            .and_then(|ty| check_value(&value, &ty))
            .is_ok()
    }

    #[test]
    fn types_read_as_go_cty_reads_them() {
        for good in [
            json!("string"),
            json!("dynamic"),
            json!(["list", "string"]),
            json!(["set", ["map", "bool"]]),
            json!(["object", {"a": "string"}]),
            json!(["object", null]),
            json!(["object", {"a": "string"}, ["a", "a"]]),
            json!(["object", {"a": "string"}, []]),
            json!(["object", {"": "string"}, [null]]),
            json!(["tuple", ["string", "number"]]),
            json!(["tuple", null]),
        ] {
            assert!(parse_type(&good).is_ok(), "{good}");
        }
        for bad in [
            json!("any"),
            json!("String"),
            json!(["Tuple", []]),
            json!([]),
            json!({}),
            json!(null),
            json!(1),
            json!(["list"]),
            json!(["list", null]),
            json!(["object", {"a": null}]),
            json!(["list", "string", "x"]),
            json!(["object", {}, "a"]),
            json!(["object", {"a": "string"}, ["b"]]),
            json!(["object", {"a": "string"}, [null]]),
        ] {
            assert!(parse_type(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn values_read_as_go_cty_reads_them() {
        for (spec, value) in [
            (json!("string"), json!("x")),
            (json!("string"), json!(1.5)),
            (json!("string"), json!(true)),
            (json!("number"), json!("1.5")),
            (json!("number"), json!(".5")),
            (json!("number"), json!("5.")),
            (json!("number"), json!("-.5e-3")),
            (json!("number"), json!("1p-3")),
            (json!("bool"), json!("1")),
            (json!("bool"), json!("false")),
            (json!(["list", "number"]), json!([1, null, "2"])),
            (json!(["set", "string"]), json!(["a", "a"])),
            (json!(["map", "string"]), json!({"a": "x", "b": null})),
            (json!(["tuple", ["string", "number"]]), json!(["a", 1])),
            (
                json!(["object", {"a": "string", "b": "number"}]),
                json!({"a": "x"}),
            ),
            (json!("dynamic"), json!({"type": "string", "value": "x"})),
            (json!("dynamic"), json!(null)),
            (
                json!(["list", "dynamic"]),
                json!([null, {"type": "string", "value": "x"}]),
            ),
            (
                json!(["list", ["object", {"a": "string"}]]),
                json!([null, {"a": "x"}]),
            ),
            (
                json!(["tuple", ["dynamic", "dynamic"]]),
                json!([{"type": "string", "value": "x"}, {"type": "number", "value": 1}]),
            ),
        ] {
            assert!(reads(spec.clone(), value.clone()), "{spec} {value}");
        }
        for (spec, value) in [
            (json!("string"), json!([])),
            (json!("number"), json!(true)),
            (json!("number"), json!("")),
            (json!("number"), json!(" 1")),
            (json!("number"), json!("0x10")),
            (json!("number"), json!("1_000")),
            (json!("number"), json!("NaN")),
            (json!("number"), json!("inf")),
            (json!("number"), json!("1e")),
            (json!("number"), json!("1ep3")),
            (json!("number"), json!("1.2.3")),
            (json!("number"), json!("1e99999")),
            (json!("bool"), json!("True")),
            (json!("bool"), json!(1)),
            (json!(["list", "string"]), json!({})),
            (json!(["tuple", ["string"]]), json!(["a", "b"])),
            (json!(["tuple", ["string", "string"]]), json!(["a"])),
            (json!(["object", {"a": "string"}]), json!({"A": "x"})),
            (json!("dynamic"), json!({"value": "x"})),
            (json!("dynamic"), json!({"type": "string"})),
            (
                json!("dynamic"),
                json!({"type": "string", "value": "x", "extra": 1}),
            ),
            (json!("dynamic"), json!({"type": null, "value": "x"})),
            (json!("dynamic"), json!("x")),
            (
                json!(["list", "dynamic"]),
                json!([{"type": "string", "value": "x"}, {"type": "number", "value": 1}]),
            ),
            (
                json!(["map", "dynamic"]),
                json!({"a": {"type": "string", "value": "x"}, "b": {"type": "bool", "value": true}}),
            ),
            (
                json!(["list", ["list", "dynamic"]]),
                json!([[{"type": "string", "value": "x"}], []]),
            ),
            (
                json!(["list", ["object", {"a": "string"}, ["a"]]]),
                json!([null, {"a": "x"}]),
            ),
        ] {
            assert!(!reads(spec.clone(), value.clone()), "{spec} {value}");
        }
    }
}
