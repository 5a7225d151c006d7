//! Reading the structure of a Terraform state: its resource instances by address and its
//! outputs, for the catalog's resource index and for comparing two versions. Values are only
//! compared, never shown. A v3 state (Terraform 0.11) reads as a v4 one ([`legacy`]).

mod v3;

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde_json::Value;

/// One resource instance of a state.
#[derive(Debug, Clone, PartialEq)]
pub struct Instance<'a> {
    /// Its address as Terraform prints it, e.g. `module.net.aws_vpc.main[0]` or
    /// `data.aws_ami.ubuntu`.
    pub address: String,
    /// `managed` or `data`.
    pub mode: &'a str,
    /// The resource type, e.g. `aws_instance`.
    pub resource_type: &'a str,
    /// The instance object as stored (`attributes`, `private`, …); a v3 state's, rebuilt as
    /// `{"attributes": …}` with nested values.
    pub value: Cow<'a, Value>,
}

/// The resource instances of a state, in document order. A state that is not a Terraform state
/// (or an OpenTofu-encrypted one) has none.
pub fn instances(state: &Value) -> Vec<Instance<'_>> {
    let mut found = Vec::new();
    let Some(resources) = state.get("resources").and_then(Value::as_array) else {
        if let Some(modules) = state.get("modules").and_then(Value::as_array) {
            return v3::instances(modules);
        }
        return found;
    };
    for resource in resources {
        let text = |key: &str| resource.get(key).and_then(Value::as_str).unwrap_or("");
        let (mode, resource_type) = (text("mode"), text("type"));
        let Some(list) = resource.get("instances").and_then(Value::as_array) else {
            continue;
        };
        for instance in list {
            found.push(Instance {
                address: address(
                    text("module"),
                    mode,
                    resource_type,
                    text("name"),
                    instance.get("index_key"),
                ),
                mode,
                resource_type,
                value: Cow::Borrowed(instance),
            });
        }
    }
    found
}

/// A v3 state's resource instances, from its `modules` (see [`instances`]).
pub(crate) fn legacy_instances(modules: &[Value]) -> Vec<Instance<'_>> {
    v3::instances(modules)
}

/// A v3 state's root outputs by name, from its `modules`.
pub(crate) fn legacy_outputs(modules: &[Value]) -> Option<&serde_json::Map<String, Value>> {
    v3::root_outputs(modules)
}

/// A resource instance's address as Terraform prints it: `[module.…]` + `[data.]` +
/// `type.name` + `[index]` (a number, or a quoted string key).
pub fn address(
    module: &str,
    mode: &str,
    resource_type: &str,
    name: &str,
    index_key: Option<&Value>,
) -> String {
    let mut address = String::new();
    if !module.is_empty() {
        address.push_str(module);
        address.push('.');
    }
    if mode == "data" {
        address.push_str("data.");
    }
    address.push_str(resource_type);
    address.push('.');
    address.push_str(name);
    match index_key {
        Some(Value::Number(n)) => address.push_str(&format!("[{n}]")),
        Some(Value::String(key)) => address.push_str(&format!("[{}]", Value::String(key.clone()))),
        _ => {}
    }
    address
}

/// How one named thing differs between two versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    /// Only in the newer version.
    Added,
    /// Only in the older version.
    Removed,
    /// In both, with different content.
    Changed,
}

/// One difference: what changed and how (never the values).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Difference {
    /// Added, removed or changed.
    pub kind: ChangeKind,
    /// The resource address or the output name.
    pub name: String,
}

/// The readable structure that differs between two states: resource instances by address and
/// outputs by name. Attribute and output values are compared but never reported.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct StructureDiff {
    /// Resource instances added, removed or changed.
    pub resources: Vec<Difference>,
    /// Outputs added, removed or changed.
    pub outputs: Vec<Difference>,
    /// Resource instances in the newer version.
    pub resource_count: usize,
}

fn compare<V: PartialEq>(old: BTreeMap<String, V>, new: &BTreeMap<String, V>) -> Vec<Difference> {
    let mut differences = Vec::new();
    for (name, value) in new {
        match old.get(name) {
            None => differences.push(Difference {
                kind: ChangeKind::Added,
                name: name.clone(),
            }),
            Some(before) if before != value => differences.push(Difference {
                kind: ChangeKind::Changed,
                name: name.clone(),
            }),
            Some(_) => {}
        }
    }
    for name in old.keys().filter(|name| !new.contains_key(*name)) {
        differences.push(Difference {
            kind: ChangeKind::Removed,
            name: name.clone(),
        });
    }
    differences.sort_by(|a, b| a.name.cmp(&b.name).then(a.kind.cmp(&b.kind)));
    differences
}

/// The root module's outputs by name (a v3 state's are in its root module).
pub fn outputs(state: &Value) -> BTreeMap<String, &Value> {
    let outputs = match state.get("outputs") {
        Some(outputs) => outputs.as_object(),
        None => state
            .get("modules")
            .and_then(Value::as_array)
            .and_then(|modules| v3::root_outputs(modules)),
    };
    outputs
        .map(|o| o.iter().map(|(k, v)| (k.clone(), v)).collect())
        .unwrap_or_default()
}

fn by_address(state: &Value) -> BTreeMap<String, Cow<'_, Value>> {
    instances(state)
        .into_iter()
        .map(|i| (i.address, i.value))
        .collect()
}

/// What differs between the states `old` (`None`: no state) and `new` (`None`: deleted).
pub fn structure_diff(old: Option<&Value>, new: Option<&Value>) -> StructureDiff {
    let empty = Value::Null;
    let (old, new) = (old.unwrap_or(&empty), new.unwrap_or(&empty));
    let new_resources = by_address(new);
    StructureDiff {
        resource_count: new_resources.len(),
        resources: compare(by_address(old), &new_resources),
        outputs: compare(outputs(old), &outputs(new)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_follow_terraform() {
        let state = serde_json::json!({"resources": [
            {"mode": "managed", "type": "null_resource", "name": "a", "instances": [{"attributes": {"id": "1"}}]},
            {"module": "module.net", "mode": "managed", "type": "aws_vpc", "name": "v", "instances": [
                {"index_key": 0, "attributes": {}}, {"index_key": 1, "attributes": {}}]},
            {"mode": "data", "type": "aws_ami", "name": "u", "instances": [{"index_key": "eu \"x\"", "attributes": {}}]},
        ]});
        let addresses: Vec<String> = instances(&state).into_iter().map(|i| i.address).collect();
        assert_eq!(
            addresses,
            [
                "null_resource.a",
                "module.net.aws_vpc.v[0]",
                "module.net.aws_vpc.v[1]",
                "data.aws_ami.u[\"eu \\\"x\\\"\"]"
            ]
        );
    }

    #[test]
    fn diff_names_changes_without_values() {
        let old = serde_json::json!({"outputs": {"a": {"value": 1}, "gone": {"value": 2}},
            "resources": [{"mode": "managed", "type": "t", "name": "x", "instances": [{"attributes": {"id": "1"}}]},
                          {"mode": "managed", "type": "t", "name": "y", "instances": [{"attributes": {"id": "2"}}]}]});
        let new = serde_json::json!({"outputs": {"a": {"value": 3}, "new": {"value": 4}},
            "resources": [{"mode": "managed", "type": "t", "name": "x", "instances": [{"attributes": {"id": "1"}}]},
                          {"mode": "managed", "type": "t", "name": "z", "instances": [{"attributes": {"id": "secret"}}]}]});
        let diff = structure_diff(Some(&old), Some(&new));
        let names = |d: &[Difference]| {
            d.iter()
                .map(|d| format!("{:?} {}", d.kind, d.name))
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&diff.resources), ["Removed t.y", "Added t.z"]);
        assert_eq!(
            names(&diff.outputs),
            ["Changed a", "Removed gone", "Added new"]
        );
        assert_eq!(diff.resource_count, 2);
        assert!(!serde_json::to_string(&diff).unwrap().contains("secret"));
        let deleted = structure_diff(Some(&old), None);
        assert_eq!(deleted.resources.len(), 2);
        assert_eq!(deleted.resource_count, 0);
    }
}
