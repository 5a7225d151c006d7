//! Terraform 0.11's flat attribute maps, rebuilt into nested values (issue 36).
//!
//! A v3 state keeps each resource's attributes as one level of string keys: a list is
//! `key.# = N` with its elements at `key.<i>` (a set's `<i>` is a hash code, not a position),
//! a map is `key.% = N` with its entries at `key.<name>`, and a nested block is a list of
//! objects whose fields sit at `key.<i>.<field>`. [`expand`] turns such a map back into the
//! value Terraform 0.12 and later would hold, as Formation's importer does ("a simple recursive
//! parser"), so that the resource index, the links and the diff read a v3 state as they read a
//! v4 one.
//!
//! Where the flat form is ambiguous, the rules are:
//! - a map's entry name may hold dots (`tags.kubernetes.io/role`): under `key.%` a name is cut
//!   at its first dot only where a nested list or map starts there (`key.<head>.#` or
//!   `key.<head>.%` exists); Terraform's own `flatmap.Expand` always cut it, and lost such tags;
//! - a list's elements are ordered by their index as a number (a set's hash codes too);
//! - `key.#` over names that are not all numbers is a map (Terraform 0.7 counted maps so);
//! - keys under `key.` with no marker are an object's fields (a nested block's element);
//! - an empty object has no key at all, so it cannot be told from nothing: it is left out.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

/// The flat keys, sorted, so that everything under a prefix is one range.
type Flat<'a> = BTreeMap<&'a str, &'a Value>;

/// The nested value of the flat attribute map `flat` (an object: its top-level fields).
pub fn expand(flat: &Map<String, Value>) -> Value {
    let sorted: Flat<'_> = flat.iter().map(|(k, v)| (k.as_str(), v)).collect();
    Value::Object(object(&sorted, ""))
}

/// The remainders of the keys under `prefix` (which ends in `.`, or is empty), in key order.
fn under<'a>(flat: &'a Flat<'a>, prefix: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    flat.range(prefix..)
        .take_while(move |(key, _)| key.starts_with(prefix))
        .map(move |(key, _)| &key[prefix.len()..])
}

/// The first segment of a remainder (up to its first dot).
fn head(rest: &str) -> &str {
    rest.split_once('.').map_or(rest, |(head, _)| head)
}

/// The distinct first segments under `prefix`, markers (`#`, `%`) left out, sorted.
fn heads<'a>(flat: &'a Flat<'a>, prefix: &'a str) -> BTreeSet<&'a str> {
    under(flat, prefix)
        .map(head)
        .filter(|head| *head != "#" && *head != "%")
        .collect()
}

/// The value at the full flat `key`: a list when `key.#` exists, a map when `key.%` does, the
/// leaf at `key`, else the object of the fields under `key.` (`None`: nothing is there).
fn value(flat: &Flat<'_>, key: &str) -> Option<Value> {
    let prefix = format!("{key}.");
    if flat.contains_key(format!("{prefix}#").as_str()) {
        return Some(list(flat, &prefix));
    }
    if flat.contains_key(format!("{prefix}%").as_str()) {
        return Some(Value::Object(map(flat, &prefix)));
    }
    if let Some(leaf) = flat.get(key) {
        return Some((*leaf).clone());
    }
    let fields = object(flat, &prefix);
    (!fields.is_empty()).then_some(Value::Object(fields))
}

/// The fields under `prefix`: one per first segment.
fn object(flat: &Flat<'_>, prefix: &str) -> Map<String, Value> {
    heads(flat, prefix)
        .into_iter()
        .filter_map(|head| Some((head.to_owned(), value(flat, &format!("{prefix}{head}"))?)))
        .collect()
}

/// The elements under `prefix` ordered by their index as a number; a map when an index is not
/// a number.
fn list(flat: &Flat<'_>, prefix: &str) -> Value {
    let heads = heads(flat, prefix);
    let mut indexes: Vec<(i128, &str)> = Vec::with_capacity(heads.len());
    for head in heads {
        match head.parse::<i128>() {
            Ok(index) => indexes.push((index, head)),
            Err(_) => return Value::Object(map(flat, prefix)),
        }
    }
    indexes.sort();
    Value::Array(
        indexes
            .into_iter()
            .filter_map(|(_, head)| value(flat, &format!("{prefix}{head}")))
            .collect(),
    )
}

/// The entries under `prefix`: a name is cut at its first dot only where a nested list or map
/// starts there; otherwise the whole remainder is the name of a leaf.
fn map(flat: &Flat<'_>, prefix: &str) -> Map<String, Value> {
    let mut entries = Map::new();
    for rest in under(flat, prefix) {
        if rest == "#" || rest == "%" {
            continue;
        }
        let head = head(rest);
        let nested = head != rest
            && [".#", ".%"]
                .iter()
                .any(|marker| flat.contains_key(format!("{prefix}{head}{marker}").as_str()));
        if nested {
            if !entries.contains_key(head) {
                if let Some(value) = value(flat, &format!("{prefix}{head}")) {
                    entries.insert(head.to_owned(), value);
                }
            }
        } else if let Some(leaf) = flat.get(format!("{prefix}{rest}").as_str()) {
            entries.insert(rest.to_owned(), (*leaf).clone());
        }
    }
    entries
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn flat(pairs: &[(&str, &str)]) -> Map<String, Value> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Value::String((*v).to_owned())))
            .collect()
    }

    #[test]
    fn the_flat_map_rules() {
        /// What a case shows, its flat map, and the value it rebuilds.
        type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, Value);
        let cases: Vec<Case<'_>> = vec![
            ("a leaf", vec![("id", "i-1")], json!({"id": "i-1"})),
            (
                "a list in order of its indexes, 10 after 9",
                vec![
                    ("ids.#", "11"),
                    ("ids.0", "a"),
                    ("ids.1", "b"),
                    ("ids.2", "c"),
                    ("ids.3", "d"),
                    ("ids.4", "e"),
                    ("ids.5", "f"),
                    ("ids.6", "g"),
                    ("ids.7", "h"),
                    ("ids.8", "i"),
                    ("ids.9", "j"),
                    ("ids.10", "k"),
                ],
                json!({"ids": ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k"]}),
            ),
            (
                "an empty list and an empty map",
                vec![("ids.#", "0"), ("tags.%", "0")],
                json!({"ids": [], "tags": {}}),
            ),
            (
                "a map whose names hold dots and slashes",
                vec![
                    ("tags.%", "2"),
                    ("tags.Name", "web"),
                    ("tags.kubernetes.io/cluster/prod", "owned"),
                ],
                json!({"tags": {"Name": "web", "kubernetes.io/cluster/prod": "owned"}}),
            ),
            (
                "a set: hash codes as indexes, ordered as numbers",
                vec![
                    ("ingress.#", "2"),
                    ("ingress.3029131046.from_port", "443"),
                    ("ingress.3029131046.cidr_blocks.#", "1"),
                    ("ingress.3029131046.cidr_blocks.0", "0.0.0.0/0"),
                    ("ingress.482069346.from_port", "80"),
                    ("ingress.482069346.cidr_blocks.#", "0"),
                ],
                json!({"ingress": [
                    {"from_port": "80", "cidr_blocks": []},
                    {"from_port": "443", "cidr_blocks": ["0.0.0.0/0"]},
                ]}),
            ),
            (
                "a nested block with a map inside",
                vec![
                    ("root_block_device.#", "1"),
                    ("root_block_device.0.volume_size", "8"),
                    ("root_block_device.0.tags.%", "1"),
                    ("root_block_device.0.tags.team", "a"),
                ],
                json!({"root_block_device": [{"volume_size": "8", "tags": {"team": "a"}}]}),
            ),
            (
                "a map holding a nested list (a marker at the cut)",
                vec![
                    ("m.%", "2"),
                    ("m.plain.name", "x"),
                    ("m.nested.#", "1"),
                    ("m.nested.0", "y"),
                ],
                json!({"m": {"plain.name": "x", "nested": ["y"]}}),
            ),
            (
                "Terraform 0.7 counted maps with #",
                vec![("tags.#", "1"), ("tags.Name", "old")],
                json!({"tags": {"Name": "old"}}),
            ),
            (
                "keys without a marker are an object's fields",
                vec![("timeouts.create", "10m"), ("timeouts.delete", "5m")],
                json!({"timeouts": {"create": "10m", "delete": "5m"}}),
            ),
            (
                "a count that disagrees with the elements: the elements win",
                vec![("ids.#", "1"), ("ids.0", "a"), ("ids.1", "b")],
                json!({"ids": ["a", "b"]}),
            ),
        ];
        for (what, pairs, expected) in cases {
            assert_eq!(expand(&flat(&pairs)), expected, "{what}");
        }
    }

    /// A value as Terraform 0.11 could hold it: maps hold strings, objects are list elements
    /// (nested blocks) and have at least one field (an empty one has no flat key).
    #[derive(Debug, Clone)]
    enum Tree {
        Leaf(String),
        List(Vec<Tree>),
        Map(BTreeMap<String, String>),
        Object(BTreeMap<String, Tree>),
    }

    impl Tree {
        fn json(&self) -> Value {
            match self {
                Tree::Leaf(text) => Value::String(text.clone()),
                Tree::List(items) => Value::Array(items.iter().map(Tree::json).collect()),
                Tree::Map(entries) => entries
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                    .collect(),
                Tree::Object(fields) => fields.iter().map(|(k, v)| (k.clone(), v.json())).collect(),
            }
        }

        /// Terraform 0.11's flattening of this value at `key`.
        fn flatten(&self, key: &str, out: &mut Map<String, Value>) {
            match self {
                Tree::Leaf(text) => {
                    out.insert(key.to_owned(), Value::String(text.clone()));
                }
                Tree::List(items) => {
                    out.insert(format!("{key}.#"), Value::String(items.len().to_string()));
                    for (i, item) in items.iter().enumerate() {
                        item.flatten(&format!("{key}.{i}"), out);
                    }
                }
                Tree::Map(entries) => {
                    out.insert(format!("{key}.%"), Value::String(entries.len().to_string()));
                    for (name, text) in entries {
                        out.insert(format!("{key}.{name}"), Value::String(text.clone()));
                    }
                }
                Tree::Object(fields) => {
                    for (name, field) in fields {
                        field.flatten(&format!("{key}.{name}"), out);
                    }
                }
            }
        }
    }

    fn field_name() -> impl Strategy<Value = String> {
        "[a-z_][a-z0-9_]{0,6}"
    }

    fn tree() -> impl Strategy<Value = Tree> {
        let leaf = prop_oneof![
            any::<String>().prop_map(Tree::Leaf),
            prop::collection::btree_map("[a-zA-Z0-9][a-zA-Z0-9./:_-]{0,12}", any::<String>(), 0..4)
                .prop_map(Tree::Map),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            let object = prop::collection::btree_map(field_name(), inner.clone(), 1..4)
                .prop_map(Tree::Object);
            prop::collection::vec(prop_oneof![inner, object], 0..4).prop_map(Tree::List)
        })
    }

    proptest! {
        #[test]
        fn flattening_and_expanding_gives_the_value_back(
            attributes in prop::collection::btree_map(field_name(), tree(), 0..6)
        ) {
            let top = Tree::Object(attributes);
            let mut flat = Map::new();
            if let Tree::Object(fields) = &top {
                for (name, field) in fields {
                    field.flatten(name, &mut flat);
                }
            }
            prop_assert_eq!(expand(&flat), top.json());
        }
    }
}
