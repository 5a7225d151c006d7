//! The catalog's facts of a state ([`StateFacts`]), from what the walk kept of it: nothing is
//! parsed again. The rules, shared by every catalog adapter (issue 36):
//! - an *identifier* is the string value of a managed instance's top-level identifying attribute
//!   ([`crate::identifiers::IDENTIFYING_ATTRIBUTES`]);
//! - a *use* is a string value of a resource instance's attributes (managed or data, at any
//!   depth) or of an output, with where it sits; a managed instance's own identifying
//!   attributes are what it provides, not uses;
//! - a state *reads* another through a `terraform_remote_state` data source of the `http`
//!   backend whose `address` is a gitstate state address ([`crate::links::state_of_address`]).
//!
//! Identifiers are read from a state of any size; uses and reads, and a v3 state's facts (its
//! flat attributes rebuilt), up to [`crate::catalog::LINK_SCAN_MAX_BYTES`].

use std::collections::BTreeSet;

use serde_json::Value;

use super::facts::{Kept, Resource};
use super::header::{Header, Top};
use super::mismatch::Seen;
use super::strings::{attribute_strings, value_strings, Found, Wanted};
use crate::catalog::StateFacts;
use crate::identifiers::ResourceIdentifier;
use crate::links::{state_of_address, StateRef, Use};
use crate::tfstate;

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
    if size <= crate::catalog::LINK_SCAN_MAX_BYTES {
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
