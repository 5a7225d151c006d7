//! The checks Terraform makes after decoding a version-4 state (`prepareStateV4` in
//! `internal/states/statefile/version4.go`), on the [`Facts`] the walk kept: what a resource's
//! mode, module and provider must be, what an instance's key, status and deposed key may be, that
//! no instance appears twice, that every dependency, output and check result reads. The first
//! failure is the answer, with its place.

use std::collections::HashSet;

use serde_json::Value;

use super::facts::{Facts, Instance, Resource};
use super::StateError;

/// The first thing in `facts` a version-4 reader refuses, if any.
pub(crate) fn check_v4(facts: &Facts) -> Result<(), StateError> {
    let mut seen = HashSet::new();
    for (r, resource) in facts.resources.iter().enumerate() {
        let place = format!("resources[{r}]");
        check_resource(resource, &place)?;
        for (i, instance) in resource.instances.iter().enumerate() {
            let place = format!("{place}.instances[{i}]");
            let key = instance_key(instance, &place)?;
            check_instance(instance, &place)?;
            // The same instance (resource, key, and deposed key or none) twice.
            let id = (
                resource.module().to_owned(),
                resource.mode().to_owned(),
                resource.resource_type().to_owned(),
                resource.name().to_owned(),
                key,
                instance.deposed().to_owned(),
            );
            if !seen.insert(id) {
                return Err(StateError::Unreadable {
                    place,
                    why: "is an instance (or a deposed object) the state holds already".into(),
                });
            }
        }
    }
    Ok(())
}

fn check_resource(resource: &Resource, place: &str) -> Result<(), StateError> {
    if !matches!(resource.mode(), "managed" | "data") {
        return Err(field(
            format!("{place}.mode"),
            quoted(resource.mode()),
            "\"managed\" or \"data\"",
        ));
    }
    Ok(())
}

fn check_instance(instance: &Instance, place: &str) -> Result<(), StateError> {
    if !matches!(instance.status(), "" | "tainted") {
        return Err(field(
            format!("{place}.status"),
            quoted(instance.status()),
            "\"tainted\" or empty",
        ));
    }
    let deposed = instance.deposed();
    if !deposed.is_empty() && deposed.len() != 8 {
        return Err(field(
            format!("{place}.deposed"),
            quoted(deposed),
            "a deposed key of 8 characters (or empty)",
        ));
    }
    Ok(())
}

/// An instance's key as Terraform reads it (`encoding/json` into `interface{}`): a number (whole
/// or not, truncated to an integer), a string, or none; anything else is refused.
fn instance_key(instance: &Instance, place: &str) -> Result<String, StateError> {
    match &instance.index_key {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::Number(n)) => Ok(format!("[{}]", n.as_f64().unwrap_or_default() as i64)),
        Some(Value::String(s)) => Ok(format!("[{}]", Value::String(s.clone()))),
        Some(other) => Err(field(
            format!("{place}.index_key"),
            describe(other),
            "a number, a string or null",
        )),
    }
}

fn field(place: String, found: String, expected: &str) -> StateError {
    StateError::Field {
        place,
        found,
        expected: expected.into(),
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
