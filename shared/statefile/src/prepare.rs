//! The checks Terraform makes after decoding a version-4 state (`prepareStateV4` in
//! `internal/states/statefile/version4.go`, with OpenTofu's where it is stricter), on the
//! [`Facts`] the walk kept. Where Terraform silently drops a resource (a provider it cannot
//! read) or crashes (an output type naming an undeclared optional attribute), gitstate refuses
//! the state as it does where Terraform reports an error. The first failure is the answer, with
//! its place.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::addrs;
use super::cty;
use super::facts::{Check, Facts, Instance, Output, Resource};
use super::go_keys::go_key_matches;
use super::StateError;

/// An instance's identity for the duplicate rule, borrowed from the facts: its module (the
/// canonical address), whether the resource is a data source, its type, name, key and deposed
/// key. Terraform keys a resource by its printed form (`type.name`, `data.type.name`), so two
/// resources that print the same are one.
type InstanceId<'a> = (&'a str, &'a str, InstanceKey<'a>, &'a str);

/// An instance key as Terraform compares them.
#[derive(Debug, PartialEq, Eq, Hash)]
enum InstanceKey<'a> {
    None,
    Int(i64),
    Str(&'a str),
}

/// The first thing in `facts` a version-4 reader refuses, if any.
pub(crate) fn check_v4(facts: &Facts) -> Result<(), StateError> {
    // Providers and modules repeat across resources: each distinct text is read once.
    let mut providers: HashSet<&str> = HashSet::new();
    let mut canonical: HashMap<&str, String> = HashMap::new();
    let mut modules = Vec::with_capacity(facts.resources.len());
    for (r, resource) in facts.resources.iter().enumerate() {
        check_resource(resource, &mut providers, || format!("resources[{r}]"))?;
        let text = resource.module();
        if !text.is_empty() && !canonical.contains_key(text) {
            let read = addrs::module_instance(text).ok_or_else(|| {
                field(
                    format!("resources[{r}].module"),
                    quoted(text),
                    "a module address such as module.network or module.app[\"eu\"]",
                )
            })?;
            canonical.insert(text, read);
        }
        modules.push(text);
    }
    let printed: Vec<String> = facts
        .resources
        .iter()
        .map(|resource| match resource.mode() {
            "data" => format!("data.{}.{}", resource.resource_type(), resource.name()),
            _ => format!("{}.{}", resource.resource_type(), resource.name()),
        })
        .collect();
    let mut seen: HashSet<InstanceId> = HashSet::new();
    for (r, resource) in facts.resources.iter().enumerate() {
        let module = canonical.get(modules[r]).map_or("", String::as_str);
        let printed = printed[r].as_str();
        let mut instance_provider: Option<&str> = None;
        for (i, instance) in resource.instances.iter().enumerate() {
            let place = || format!("resources[{r}].instances[{i}]");
            let key = instance_key(instance, place)?;
            check_instance(instance, place)?;
            // OpenTofu: every instance's own provider, where given, is the same.
            if !instance.provider().is_empty() {
                match instance_provider {
                    Some(other) if other != instance.provider() => {
                        return Err(unreadable(
                            format!("{}.provider", place()),
                            "names another provider than the resource's other instances",
                        ))
                    }
                    _ => instance_provider = Some(instance.provider()),
                }
            }
            if !seen.insert((module, printed, key, instance.deposed())) {
                return Err(unreadable(
                    place(),
                    "is an instance (or a deposed object) the state holds already",
                ));
            }
        }
    }
    for output in &facts.outputs {
        check_output(output)?;
    }
    for (c, check) in facts.checks.iter().enumerate() {
        check_result(check, &format!("check_results[{c}]"))?;
    }
    Ok(())
}

/// A resource's mode and provider (`providers`: the texts already read).
fn check_resource<'a>(
    resource: &'a Resource,
    providers: &mut HashSet<&'a str>,
    place: impl Fn() -> String,
) -> Result<(), StateError> {
    if !matches!(resource.mode(), "managed" | "data") {
        return Err(field(
            format!("{}.mode", place()),
            quoted(resource.mode()),
            "\"managed\" or \"data\"",
        ));
    }
    let provider = resource.provider();
    if !providers.contains(provider) {
        if !addrs::provider_config(provider, false) {
            // Terraform drops such a resource without a word; OpenTofu refuses the state.
            return Err(field(
                format!("{}.provider", place()),
                quoted(provider),
                "a provider address such as provider[\"registry.terraform.io/hashicorp/aws\"]",
            ));
        }
        providers.insert(provider);
    }
    Ok(())
}

fn check_instance(instance: &Instance, place: impl Fn() -> String) -> Result<(), StateError> {
    if let Some(paths) = &instance.sensitive_attributes {
        sensitive_paths(paths).map_err(|why| {
            unreadable(
                format!("{}.sensitive_attributes", place()),
                &format!("is not a list of attribute paths Terraform reads ({why})"),
            )
        })?;
    }
    if !matches!(instance.status(), "" | "tainted") {
        return Err(field(
            format!("{}.status", place()),
            quoted(instance.status()),
            "\"tainted\" or empty",
        ));
    }
    for (d, dependency) in instance.dependencies.iter().enumerate() {
        if !addrs::resource(dependency, false) {
            return Err(field(
                format!("{}.dependencies[{d}]", place()),
                quoted(dependency),
                "a resource address such as aws_instance.web or module.app.data.aws_ami.ubuntu",
            ));
        }
    }
    for (d, dependency) in instance.depends_on.iter().enumerate() {
        if !addrs::resource(dependency, true) {
            return Err(field(
                format!("{}.depends_on[{d}]", place()),
                quoted(dependency),
                "a resource instance address such as aws_instance.web[0]",
            ));
        }
    }
    let deposed = instance.deposed();
    if !deposed.is_empty() && deposed.len() != 8 {
        return Err(field(
            format!("{}.deposed", place()),
            quoted(deposed),
            "a deposed key of 8 characters (or empty)",
        ));
    }
    if !instance.provider().is_empty() && !addrs::provider_config(instance.provider(), true) {
        return Err(field(
            format!("{}.provider", place()),
            quoted(instance.provider()),
            "a provider address such as provider[\"registry.opentofu.org/hashicorp/aws\"]",
        ));
    }
    Ok(())
}

/// An instance's key as Terraform reads it (`encoding/json` into `interface{}`): a number
/// (truncated to an integer, as Go's `int()` does; beyond ±2^63 it depends on the machine, so
/// refused), a string, or none; anything else is refused.
fn instance_key(
    instance: &Instance,
    place: impl Fn() -> String,
) -> Result<InstanceKey<'_>, StateError> {
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    match &instance.index_key {
        None | Some(Value::Null) => Ok(InstanceKey::None),
        Some(Value::Number(n)) => match n.as_f64() {
            Some(f) if f.abs() < LIMIT => Ok(InstanceKey::Int(f.trunc() as i64)),
            _ => Err(field(
                format!("{}.index_key", place()),
                "a number beyond ±2^63".into(),
                "a whole number, a string or null",
            )),
        },
        Some(Value::String(s)) => Ok(InstanceKey::Str(s)),
        Some(other) => Err(field(
            format!("{}.index_key", place()),
            describe(other),
            "a number, a string or null",
        )),
    }
}

/// `unmarshalPaths`: `null`, or a list of paths, each `null` or a list of steps, each
/// `{"type":"get_attr","value":NAME}` (a string or null) or `{"type":"index","value":KEY}`
/// (null, or a `{"value","type"}` wrapper of any type).
fn sensitive_paths(paths: &Value) -> Result<(), cty::Why> {
    let paths = match paths {
        Value::Null => return Ok(()),
        Value::Array(paths) => paths,
        _ => return Err("not a list"),
    };
    for path in paths {
        let steps = match path {
            Value::Null => continue,
            Value::Array(steps) => steps,
            _ => return Err("a path that is not a list"),
        };
        for step in steps {
            let kind = match go_field(step, "type")? {
                Some(Value::String(kind)) => kind.as_str(),
                Some(Value::Null) | None => "",
                Some(_) => return Err("a step whose type is not a string"),
            };
            match (kind, go_field(step, "value")?) {
                ("get_attr", Some(Value::String(_) | Value::Null)) => {}
                ("index", Some(key)) => {
                    cty::check_value(key, &cty::Type::Dynamic)?;
                }
                _ => return Err("a step that is not get_attr or index with its value"),
            }
        }
    }
    Ok(())
}

/// The value Go decodes into the field `name` of a struct read from `value` (`null`: a zero
/// struct). A key matching the field in two spellings is refused: Go takes the last, and which
/// one came last is not known here.
fn go_field<'a>(value: &'a Value, name: &str) -> Result<Option<&'a Value>, cty::Why> {
    match value {
        Value::Null => Ok(None),
        Value::Object(fields) => {
            let mut found = fields.iter().filter(|(k, _)| go_key_matches(k, name));
            match (found.next(), found.next()) {
                (first, None) => Ok(first.map(|(_, v)| v)),
                _ => Err("a step with a field given twice"),
            }
        }
        _ => Err("a step that is not an object"),
    }
}

fn check_output(output: &Output) -> Result<(), StateError> {
    let place = format!("outputs[{}]", Value::String(output.name.clone()));
    let Some(spec) = &output.type_spec else {
        return Err(unreadable(format!("{place}.type"), "is missing"));
    };
    let ty = cty::parse_type(spec).map_err(|why| {
        unreadable(
            format!("{place}.type"),
            &format!("is not a type Terraform reads ({why})"),
        )
    })?;
    let Some(value) = &output.value else {
        return Err(unreadable(format!("{place}.value"), "is missing"));
    };
    cty::check_value(value, &ty).map_err(|why| {
        unreadable(
            format!("{place}.value"),
            &format!("does not read as the output's type ({why})"),
        )
    })?;
    Ok(())
}

fn check_result(check: &Check, place: &str) -> Result<(), StateError> {
    let kind = check.kind();
    match addrs::checkable(kind, check.config_addr(), true) {
        // A kind no reader knows: the result is skipped, as Terraform skips it.
        None => return Ok(()),
        Some(true) => {}
        Some(false) => {
            return Err(field(
                format!("{place}.config_addr"),
                quoted(check.config_addr()),
                "the configuration address of a checked object, with no instance key",
            ))
        }
    }
    for (o, object) in check.objects.iter().enumerate() {
        if addrs::checkable(kind, object.addr(), false) != Some(true) {
            return Err(field(
                format!("{place}.objects[{o}].object_addr"),
                quoted(object.addr()),
                "the address of a checked object",
            ));
        }
    }
    Ok(())
}

fn field(place: String, found: String, expected: &str) -> StateError {
    StateError::Field {
        place,
        found,
        expected: expected.into(),
    }
}

fn unreadable(place: String, why: &str) -> StateError {
    StateError::Unreadable {
        place,
        why: why.into(),
    }
}

/// A string as a message shows it: JSON-quoted, cut at 64 characters.
fn quoted(text: &str) -> String {
    let shown: String = text.chars().take(64).collect();
    let more = if shown.len() < text.len() { "…" } else { "" };
    format!("{}{more}", Value::String(shown))
}

fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(_) => "true or false".into(),
        Value::Number(_) => "a number".into(),
        Value::String(_) => "a string".into(),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}
