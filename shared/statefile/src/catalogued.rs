//! The catalog's facts of a state ([`StateFacts`]: its identifiers, its [`Use`]s and the
//! states it reads, [`StateRef`]s), from what the walk kept of it: nothing is parsed again. The
//! types are the checker's, and core's catalog port names them as they are (re-exported by its
//! `catalog` and `links` modules: the same concept on two layers). The rules, shared by every
//! catalog adapter (issue 36):
//! - an *identifier* is the string value of a managed instance's top-level identifying attribute
//!   ([`crate::identifiers::IDENTIFYING_ATTRIBUTES`]);
//! - a *use* is a string value of a resource instance's attributes (managed or data, at any
//!   depth) or of an output, with where it sits; a managed instance's own identifying
//!   attributes are what it provides, not uses;
//! - a state *reads* another through a `terraform_remote_state` data source of the `http`
//!   backend whose `address` is a gitstate state address ([`state_of_address`]).
//!
//! Identifiers are read from a state of any size; uses and reads, and a v3 state's facts (its
//! flat attributes rebuilt), up to [`LINK_SCAN_MAX_BYTES`].

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::facts::{Kept, Resource};
use super::header::{Header, Top};
use super::mismatch::Seen;
use super::strings::{attribute_strings, value_strings, Found, Wanted};
use crate::identifiers::ResourceIdentifier;
use crate::tfstate;

/// The readable facts of a state version (plaintext, before sealing).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateFacts {
    /// `serial`.
    pub serial: Option<u64>,
    /// `lineage`.
    pub lineage: Option<String>,
    /// `terraform_version`.
    pub terraform_version: Option<String>,
    /// Number of resource instances (managed and data), when readable.
    pub resource_count: Option<u64>,
    /// Size of the state as POSTed.
    pub size: u64,
    /// The commit that stored this version (`None`: the write was a replay, no new commit).
    /// The checker leaves it `None`; the write that stores the state sets it.
    pub commit: Option<String>,
    /// The identifying attributes of its managed resource instances (the resource index).
    pub identifiers: Vec<ResourceIdentifier>,
    /// The strings it holds that may name another state's resources (the rules: this module's).
    pub uses: Vec<Use>,
    /// The states it reads through `terraform_remote_state`.
    pub reads: Vec<StateRef>,
}

/// Largest state whose strings are looked at for links across states (and a v3 state's
/// attributes rebuilt): the whole document is parsed into memory for that, some 5–10 times its
/// size. Above it a state is indexed by its identifiers only (v4), and has no uses.
pub const LINK_SCAN_MAX_BYTES: usize = 8 << 20;

/// One string a state holds, and where.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Use {
    /// The string.
    pub value: String,
    /// The instance's address (`module.a.aws_s3_bucket.b`, `data.x.y`), or `output.NAME`.
    pub address: String,
    /// Where in its attributes (or the output's value): `tags.Name`, `ingress[0].cidr[1]`,
    /// `tags["kubernetes.io/role"]`; empty for the whole value.
    pub attribute: String,
}

/// A state of a deployment: repository name and path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct StateRef {
    /// Repository name.
    pub repository: String,
    /// State path.
    pub path: String,
}

/// The state a gitstate state address names: `{scheme}://{host}[/prefix]/state/{repo}/{path}`
/// (or `/lock/`), percent-decoded, its path a state path by the one rule
/// ([`gitstate_url::state_path`]); `None` for any other address.
pub fn state_of_address(address: &str) -> Option<StateRef> {
    let url = url::Url::parse(address).ok()?;
    let segments: Vec<&str> = url.path_segments()?.collect();
    let at = segments
        .iter()
        .position(|s| *s == "state" || *s == "lock")?;
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8()
            .ok()
            .map(|s| s.into_owned())
    };
    let repository = decode(segments.get(at + 1)?)?;
    let rest = segments.get(at + 2..)?;
    let path = rest
        .iter()
        .map(|s| decode(s))
        .collect::<Option<Vec<String>>>()?
        .join("/");
    gitstate_url::state_path::check_state_path(&path).ok()?;
    (!repository.is_empty()).then_some(StateRef { repository, path })
}

/// One resource instance as the rules read it.
struct Read<'a> {
    address: String,
    managed: bool,
    data: bool,
    resource_type: &'a str,
    strings: Vec<Found>,
}

/// The strings [`Wanted`] of a body of `size` bytes read for the catalog.
pub(crate) fn wanted(size: usize) -> Wanted {
    if size <= LINK_SCAN_MAX_BYTES {
        Wanted::All
    } else {
        Wanted::Identifying
    }
}

/// The facts of the state read into `header`, `size` bytes long. Its instances' strings were
/// kept as [`Wanted`] while it was walked; they are moved into the facts.
pub(crate) fn state_facts(mut header: Header, size: usize) -> StateFacts {
    let mut facts = StateFacts {
        serial: match header.given(Top::Serial).map(|v| &v.seen) {
            Some(Seen::Whole(n)) => Some(*n),
            _ => None,
        },
        lineage: text(&header, Top::Lineage),
        terraform_version: text(&header, Top::TerraformVersion),
        size: size as u64,
        ..StateFacts::default()
    };
    let v4 = header.given(Top::Resources).is_some();
    let kept = &mut header.facts;
    let all = kept.wanted == Wanted::All;
    let legacy = kept.legacy_modules.as_ref().and_then(Value::as_array);
    let (instances, outputs): (Vec<Read>, Vec<(&str, &Value)>) = if v4 {
        let instances = kept
            .resources
            .iter_mut()
            .flat_map(|r| {
                let Resource {
                    module,
                    mode,
                    resource_type,
                    name,
                    instances,
                    ..
                } = r;
                let (module, mode) = (Kept::text(module), Kept::text(mode));
                let (resource_type, name) = (Kept::text(resource_type), Kept::text(name));
                instances.iter_mut().map(move |i| Read {
                    address: tfstate::address(
                        module,
                        mode,
                        resource_type,
                        name,
                        i.index_key.as_ref(),
                    ),
                    managed: mode == "managed",
                    data: mode == "data",
                    resource_type,
                    strings: std::mem::take(&mut i.strings),
                })
            })
            .collect();
        let outputs = kept
            .outputs
            .iter()
            .filter_map(|o| Some((o.name.as_str(), o.value.as_ref()?)))
            .collect();
        (instances, outputs)
    } else if let Some(modules) = legacy {
        let instances = tfstate::legacy_instances(modules)
            .into_iter()
            .map(|i| Read {
                managed: i.mode == "managed",
                data: i.mode == "data",
                resource_type: i.resource_type,
                strings: i
                    .value
                    .get("attributes")
                    .map(attribute_strings)
                    .unwrap_or_default(),
                address: i.address,
            })
            .collect();
        let outputs = tfstate::legacy_outputs(modules)
            .into_iter()
            .flatten()
            .filter_map(|(name, o)| Some((name.as_str(), o.get("value")?)))
            .collect();
        (instances, outputs)
    } else {
        return facts;
    };
    facts.resource_count = Some(instances.len() as u64);
    if all {
        facts.reads = reads(&instances);
    }
    let (identifiers, mut uses) = sort(instances);
    facts.identifiers = identifiers;
    if all {
        uses.extend(output_uses(&outputs));
        uses.sort_unstable();
        uses.dedup();
        facts.uses = uses;
    }
    facts
}

/// The identifiers of the managed instances (sorted, without repeats), and every other string
/// of the instances as a use.
fn sort(instances: Vec<Read>) -> (Vec<ResourceIdentifier>, Vec<Use>) {
    let (mut identifiers, mut uses) = (Vec::new(), Vec::new());
    for instance in instances {
        for s in instance.strings {
            if instance.managed && s.identifying {
                if s.top {
                    identifiers.push(ResourceIdentifier {
                        value: s.value,
                        resource_type: instance.resource_type.to_owned(),
                        field: s.attribute,
                        address: instance.address.clone(),
                    });
                }
            } else {
                uses.push(Use {
                    value: s.value,
                    address: instance.address.clone(),
                    attribute: s.attribute,
                });
            }
        }
    }
    identifiers.sort_unstable();
    identifiers.dedup();
    (identifiers, uses)
}

/// A string field's text, when it is one and not empty.
fn text(header: &Header, top: Top) -> Option<String> {
    match header.given(top).map(|v| &v.seen) {
        Some(Seen::Str {
            text: Some(text), ..
        }) if !text.is_empty() => Some(text.clone()),
        _ => None,
    }
}

/// The strings of the outputs' values, as uses of `output.NAME`.
fn output_uses(outputs: &[(&str, &Value)]) -> Vec<Use> {
    let mut uses = Vec::new();
    for (name, value) in outputs {
        let address = format!("output.{name}");
        uses.extend(value_strings(value).into_iter().map(|s| Use {
            value: s.value,
            address: address.clone(),
            attribute: s.attribute,
        }));
    }
    uses
}

/// The states read through `terraform_remote_state` of the `http` backend, sorted, without
/// repeats. v4 keeps the data source's dynamic `config` as `{"value": …, "type": …}`; v3 as the
/// object itself.
fn reads(instances: &[Read]) -> Vec<StateRef> {
    let mut found = BTreeSet::new();
    for instance in instances {
        if !instance.data || instance.resource_type != "terraform_remote_state" {
            continue;
        }
        let attribute = |name: &str| {
            instance
                .strings
                .iter()
                .find(|s| s.attribute == name)
                .map(|s| s.value.as_str())
        };
        if attribute("backend") != Some("http") {
            continue;
        }
        let address = attribute("config.value.address").or_else(|| attribute("config.address"));
        found.extend(address.and_then(state_of_address));
    }
    found.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// The facts of a stored `state`, which a write of it has from its one check too.
    fn facts_of(state: &[u8]) -> StateFacts {
        let stored = crate::catalog_facts(state);
        if let Ok(checked) = crate::check(bytes::Bytes::copy_from_slice(state), true) {
            assert_eq!(
                checked.facts.as_ref(),
                Some(&stored),
                "a write reads what is stored"
            );
        }
        stored
    }

    #[test]
    fn identifiers_of_managed_resources_only() {
        let state = br#"{"version":4,"serial":3,"lineage":"l","resources":[
            {"mode":"managed","type":"null_resource","name":"r0","provider":"p","instances":[
                {"schema_version":0,"attributes":{"id":"123","triggers":{"a":"b"}},"sensitive_attributes":[]}]},
            {"module":"module.m","mode":"managed","type":"aws_s3_bucket","name":"b","instances":[
                {"index_key":"logs","attributes":{"id":"acme-logs","arn":"arn:aws:s3:::acme-logs","tags":{"x":"y"},"name":null}}]},
            {"mode":"data","type":"aws_ami","name":"u","instances":[{"attributes":{"id":"ami-1"}}]}
        ]}"#;
        let facts = facts_of(state);
        assert_eq!(facts.resource_count, Some(3));
        let found: Vec<(String, String, String)> = facts
            .identifiers
            .iter()
            .map(|i| (i.value.clone(), i.field.clone(), i.address.clone()))
            .collect();
        assert_eq!(
            found,
            [
                ("123".into(), "id".into(), "null_resource.r0".into()),
                (
                    "acme-logs".into(),
                    "id".into(),
                    "module.m.aws_s3_bucket.b[\"logs\"]".into()
                ),
                (
                    "arn:aws:s3:::acme-logs".into(),
                    "arn".into(),
                    "module.m.aws_s3_bucket.b[\"logs\"]".into()
                ),
            ]
        );
    }

    #[test]
    fn a_state_over_the_link_scan_limit_is_indexed_without_uses() {
        let padding = "x".repeat(LINK_SCAN_MAX_BYTES);
        let state = serde_json::json!({"version": 4, "serial": 1, "lineage": "l", "resources": [
            {"mode": "managed", "type": "t", "name": "big", "instances": [{"attributes": {
                "id": "big-1", "other": "vpc-1", "padding": padding}}]}]});
        let facts = facts_of(&serde_json::to_vec(&state).unwrap());
        assert_eq!(facts.identifiers.len(), 1);
        assert_eq!(facts.identifiers[0].value, "big-1");
        assert!(facts.uses.is_empty());
        let small = serde_json::json!({"version": 4, "serial": 1, "lineage": "l", "resources": [
            {"mode": "managed", "type": "t", "name": "s", "instances": [{"attributes": {
                "id": "s-1", "other": "vpc-1"}}]}]});
        let facts = facts_of(&serde_json::to_vec(&small).unwrap());
        assert_eq!(facts.uses.len(), 1, "{:?}", facts.uses);
        assert_eq!(facts.uses[0].value, "vpc-1");
    }

    #[test]
    fn a_v3_state_is_indexed_like_a_v4_one() {
        let state = br#"{"version":3,"terraform_version":"0.11.14","serial":2,"lineage":"l","modules":[
            {"path":["root"],"outputs":{},"resources":{
                "aws_vpc.main":{"type":"aws_vpc","primary":{"id":"vpc-1","attributes":{
                    "id":"vpc-1","arn":"arn:aws:ec2:eu-west-1:1:vpc/vpc-1","tags.%":"1","tags.Name":"x"}}},
                "data.aws_vpc.other":{"type":"aws_vpc","primary":{"id":"vpc-9","attributes":{"id":"vpc-9"}}}}},
            {"path":["root","web"],"resources":{
                "aws_instance.web.1":{"type":"aws_instance","primary":{"id":"i-1","attributes":{"id":"i-1","name":""}}}}}
        ]}"#;
        assert!(crate::read(state).is_ok(), "a state a write checks");
        let facts = facts_of(state);
        assert_eq!(facts.resource_count, Some(3));
        assert_eq!(facts.serial, Some(2));
        let found: Vec<(&str, &str, &str)> = facts
            .identifiers
            .iter()
            .map(|i| (i.value.as_str(), i.field.as_str(), i.address.as_str()))
            .collect();
        assert_eq!(
            found,
            [
                ("arn:aws:ec2:eu-west-1:1:vpc/vpc-1", "arn", "aws_vpc.main"),
                ("i-1", "id", "module.web.aws_instance.web[1]"),
                ("vpc-1", "id", "aws_vpc.main"),
            ]
        );
        let encrypted = br#"{"serial":1,"lineage":"l","meta":{},"encrypted_data":"abc","encryption_version":"v0"}"#;
        assert_eq!(facts_of(encrypted).resource_count, None);
    }

    /// The uses of `state`, as the catalog reads them.
    fn uses(state: &Value) -> Vec<Use> {
        crate::catalog_facts(&serde_json::to_vec(state).unwrap()).uses
    }

    /// The states `state` reads, as the catalog reads them.
    fn remote_states(state: &Value) -> Vec<StateRef> {
        crate::catalog_facts(&serde_json::to_vec(state).unwrap()).reads
    }

    fn state_ref(path: &str) -> StateRef {
        StateRef {
            repository: "default".into(),
            path: path.into(),
        }
    }

    /// A v4 state: a managed resource holding another state's vpc id in a nested attribute, a
    /// remote state of `network.tfstate`, and an output.
    fn consumer() -> Value {
        json!({"version": 4, "serial": 1, "lineage": "l", "outputs": {
            "subnets": {"value": ["subnet-1", "vpc-1"], "type": ["list", "string"]}},
        "resources": [
            {"mode": "managed", "type": "terraform_data", "name": "app", "instances": [{"attributes": {
                "id": "vpc-1", "input": {"vpc": "vpc-1", "tags": {"kubernetes.io/role": "x"}}, "output": null}}]},
            {"mode": "data", "type": "terraform_remote_state", "name": "net", "instances": [{"attributes": {
                "backend": "http",
                "config": {"value": {"address": "http://127.0.0.1:6061/state/default/envs%2Fnetwork.tfstate"}, "type": ["object", {"address": "string"}]},
                "outputs": {"value": {"vpc_id": "vpc-1"}, "type": ["object", {"vpc_id": "string"}]}}}]}
        ]})
    }

    #[test]
    fn uses_are_every_string_but_a_managed_instances_own_identifiers() {
        let found = uses(&consumer());
        let vpc: Vec<(&str, &str)> = found
            .iter()
            .filter(|u| u.value == "vpc-1")
            .map(|u| (u.address.as_str(), u.attribute.as_str()))
            .collect();
        assert_eq!(
            vpc,
            [
                ("data.terraform_remote_state.net", "outputs.value.vpc_id"),
                ("output.subnets", "[1]"),
                ("terraform_data.app", "input.vpc"),
            ]
        );
        assert!(found
            .iter()
            .any(|u| u.attribute == "input.tags[\"kubernetes.io/role\"]"));
    }

    #[test]
    fn a_remote_state_names_the_state_its_address_does() {
        assert_eq!(
            remote_states(&consumer()),
            [state_ref("envs/network.tfstate")]
        );
        for (address, expected) in [
            (
                "https://tf.example/prefix/state/team-a/a/b.tfstate",
                Some(("team-a", "a/b.tfstate")),
            ),
            (
                "http://h/lock/default/x.tfstate?ID=1",
                Some(("default", "x.tfstate")),
            ),
            ("http://h/other/default/x.tfstate", None),
            ("http://h/state/default/../x.tfstate", None),
            ("not a url", None),
        ] {
            let found = state_of_address(address);
            assert_eq!(
                found
                    .as_ref()
                    .map(|s| (s.repository.as_str(), s.path.as_str())),
                expected,
                "{address}"
            );
        }
    }
}
