//! v3 states (Terraform 0.11 and older, still in terraform-backend-git repositories): their
//! resource instances and root outputs, read as a v4 state's (issue 36). A v3 state holds
//! `modules[]`, each with its `path` (`["root", "net"]` is `module.net`), its `outputs`, and its
//! `resources` keyed `[data.]TYPE.NAME[.INDEX]`, whose `primary` instance keeps its attributes
//! as a flat map ([`crate::flatmap`]).

use std::borrow::Cow;

use serde_json::{Map, Value};

use super::Instance;
use crate::flatmap;

/// The resource instances of a v3 state's `modules`, in document order: each `primary`
/// instance, its attributes rebuilt into nested values, as `{"attributes": …}` (with
/// `"status": "tainted"` when it is, as v4 says it).
pub(super) fn instances(modules: &[Value]) -> Vec<Instance<'_>> {
    let mut found = Vec::new();
    for module in modules {
        let module_address = module_address(module);
        let Some(resources) = module.get("resources").and_then(Value::as_object) else {
            continue;
        };
        for (key, resource) in resources {
            let Some(primary) = resource.get("primary") else {
                continue;
            };
            let Some(parsed) = ResourceKey::parse(key) else {
                continue;
            };
            let resource_type = resource
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or(parsed.resource_type);
            let attributes = primary
                .get("attributes")
                .and_then(Value::as_object)
                .map(flatmap::expand)
                .unwrap_or_else(|| Value::Object(Map::new()));
            let mut value = Map::new();
            value.insert("attributes".into(), attributes);
            if primary.get("tainted").and_then(Value::as_bool) == Some(true) {
                value.insert("status".into(), Value::String("tainted".into()));
            }
            found.push(Instance {
                address: super::address(
                    &module_address,
                    parsed.mode,
                    resource_type,
                    parsed.name,
                    parsed.index.map(Value::from).as_ref(),
                ),
                mode: parsed.mode,
                resource_type,
                value: Cow::Owned(Value::Object(value)),
            });
        }
    }
    found
}

/// The root module's outputs (`path` `["root"]`), each `{"sensitive", "type", "value"}`.
pub(super) fn root_outputs(modules: &[Value]) -> Option<&Map<String, Value>> {
    modules
        .iter()
        .find(|module| module_address(module).is_empty() && module.get("path").is_some())
        .and_then(|module| module.get("outputs"))
        .and_then(Value::as_object)
}

/// `module.a.module.b` for the path `["root", "a", "b"]`; empty for the root module.
fn module_address(module: &Value) -> String {
    let steps = module.get("path").and_then(Value::as_array);
    steps
        .into_iter()
        .flatten()
        .skip(1)
        .filter_map(Value::as_str)
        .map(|step| format!("module.{step}"))
        .collect::<Vec<_>>()
        .join(".")
}

/// A v3 resource key: `[data.]TYPE.NAME[.INDEX]`.
struct ResourceKey<'a> {
    mode: &'static str,
    resource_type: &'a str,
    name: &'a str,
    index: Option<u64>,
}

impl<'a> ResourceKey<'a> {
    fn parse(key: &'a str) -> Option<ResourceKey<'a>> {
        let (mode, rest) = match key.strip_prefix("data.") {
            Some(rest) => ("data", rest),
            None => ("managed", key),
        };
        let mut parts = rest.split('.');
        let (resource_type, name) = (parts.next()?, parts.next()?);
        let index = match parts.next() {
            Some(index) => Some(index.parse().ok()?),
            None => None,
        };
        if parts.next().is_some() || resource_type.is_empty() || name.is_empty() {
            return None;
        }
        Some(ResourceKey {
            mode,
            resource_type,
            name,
            index,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::{instances, structure_diff};
    use serde_json::json;

    /// A v3 state as Terraform 0.11 wrote it: a root module and a child module.
    fn v3(vpc_id: &str, tag: &str) -> serde_json::Value {
        json!({
            "version": 3, "terraform_version": "0.11.14", "serial": 4, "lineage": "l",
            "modules": [
                {"path": ["root"], "outputs": {"vpc_id": {"sensitive": false, "type": "string", "value": vpc_id}},
                 "resources": {
                    "aws_vpc.main": {"type": "aws_vpc", "depends_on": [], "provider": "provider.aws",
                        "primary": {"id": vpc_id, "attributes": {
                            "id": vpc_id, "arn": format!("arn:aws:ec2:eu-west-1:1:vpc/{vpc_id}"),
                            "tags.%": "2", "tags.Name": tag, "tags.kubernetes.io/cluster/prod": "shared"},
                            "meta": {}, "tainted": false}, "deposed": []},
                    "data.aws_ami.ubuntu": {"type": "aws_ami",
                        "primary": {"id": "ami-1", "attributes": {"id": "ami-1"}}}
                 }, "depends_on": []},
                {"path": ["root", "web"], "outputs": {},
                 "resources": {
                    "aws_instance.web.0": {"type": "aws_instance",
                        "primary": {"id": "i-0", "attributes": {"id": "i-0", "subnet_id": "subnet-1",
                            "security_groups.#": "1", "security_groups.1234": "sg-1"}, "tainted": true}},
                    "aws_instance.web.1": {"type": "aws_instance",
                        "primary": {"id": "i-1", "attributes": {"id": "i-1"}}}
                 }}
            ]
        })
    }

    #[test]
    fn a_v3_state_reads_as_a_v4_one() {
        let state = v3("vpc-1", "main");
        let found = instances(&state);
        let addresses: Vec<&str> = found.iter().map(|i| i.address.as_str()).collect();
        assert_eq!(
            addresses,
            [
                "aws_vpc.main",
                "data.aws_ami.ubuntu",
                "module.web.aws_instance.web[0]",
                "module.web.aws_instance.web[1]"
            ]
        );
        assert_eq!(found[0].mode, "managed");
        assert_eq!(found[1].mode, "data");
        assert_eq!(found[2].resource_type, "aws_instance");
        assert_eq!(
            found[0].value["attributes"]["tags"],
            json!({"Name": "main", "kubernetes.io/cluster/prod": "shared"})
        );
        assert_eq!(
            found[2].value["attributes"]["security_groups"],
            json!(["sg-1"])
        );
        assert_eq!(found[2].value["status"], "tainted");
    }

    #[test]
    fn the_diff_of_two_v3_versions_names_what_changed() {
        let diff = structure_diff(Some(&v3("vpc-1", "main")), Some(&v3("vpc-1", "renamed")));
        let names: Vec<String> = diff
            .resources
            .iter()
            .map(|d| format!("{:?} {}", d.kind, d.name))
            .collect();
        assert_eq!(names, ["Changed aws_vpc.main"]);
        assert!(diff.outputs.is_empty());
        assert_eq!(diff.resource_count, 4);
        let diff = structure_diff(Some(&v3("vpc-1", "main")), Some(&v3("vpc-2", "main")));
        assert_eq!(diff.outputs.len(), 1, "the root output vpc_id changed");
    }
}
