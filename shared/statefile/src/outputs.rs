//! A state reduced to what `terraform_remote_state` reads (outputs-only tokens, DESIGN §6): the
//! format version, `terraform_version`, `serial`, `lineage` and the root module's outputs, with
//! every resource (and v4's `check_results`, v3's `remote` and `backend`) left out. Keys are
//! found as Terraform finds them ([`go_key_matches`]) on a body [`super::read`] accepted, so a
//! `"Resources"` is left out like a `"resources"`. The kept values are copied byte for byte.

use std::collections::BTreeMap;

use serde_json::value::RawValue;

use super::go_keys::go_key_matches;
use super::{read, Form, StateError};

/// Why a body cannot be reduced to its outputs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutputsError {
    /// Not a state Terraform reads back.
    #[error("{0}")]
    NotAState(#[from] StateError),
    /// An OpenTofu client-side encrypted state: its outputs are inside the ciphertext.
    #[error("the state is encrypted by its OpenTofu client, so gitstate cannot reduce it to its outputs; an outputs-only credential cannot read it")]
    ClientEncrypted,
}

/// Top-level fields kept, besides the outputs.
const HEADER: [&str; 4] = ["version", "terraform_version", "serial", "lineage"];

type Object = BTreeMap<String, Box<RawValue>>;

/// `body` with its resources emptied: the state `terraform_remote_state` reads.
pub fn outputs_only(body: &[u8]) -> Result<Vec<u8>, OutputsError> {
    let version = match read(body)?.form {
        Form::ClientEncrypted => return Err(OutputsError::ClientEncrypted),
        Form::State { version } => version,
    };
    let top: Object = serde_json::from_slice(body).map_err(not_json)?;
    let mut kept: BTreeMap<&str, Box<RawValue>> = BTreeMap::new();
    for name in HEADER {
        if let Some(value) = field(&top, name) {
            kept.insert(name, value.to_owned());
        }
    }
    if version == 4 {
        if let Some(outputs) = field(&top, "outputs") {
            kept.insert("outputs", outputs.to_owned());
        }
        kept.insert("resources", raw("[]")?);
    } else {
        kept.insert("modules", root_module_outputs(&top)?);
    }
    serde_json::to_vec(&kept).map_err(not_json)
}

/// The value of `name` in `object`, its key matched as Go matches it ([`read`] refused a body
/// that gives one field twice).
fn field<'a>(object: &'a Object, name: &str) -> Option<&'a RawValue> {
    object
        .iter()
        .find(|(key, _)| go_key_matches(key, name))
        .map(|(_, value)| value.as_ref())
}

/// v3: the root module (`"path": ["root"]`) with its outputs and no resources.
fn root_module_outputs(top: &Object) -> Result<Box<RawValue>, OutputsError> {
    let modules: Vec<Object> = match field(top, "modules") {
        Some(modules) => serde_json::from_str::<Option<Vec<Object>>>(modules.get())
            .map_err(not_json)?
            .unwrap_or_default(),
        None => Vec::new(),
    };
    let root = modules.iter().find(|module| {
        field(module, "path").is_some_and(|path| {
            serde_json::from_str::<Vec<String>>(path.get()).is_ok_and(|p| p == ["root"])
        })
    });
    let Some(root) = root else {
        return raw("[]");
    };
    let mut module: BTreeMap<&str, Box<RawValue>> = BTreeMap::new();
    module.insert("path", raw(r#"["root"]"#)?);
    module.insert(
        "outputs",
        field(root, "outputs").map_or_else(|| raw("{}"), |o| Ok(o.to_owned()))?,
    );
    module.insert("resources", raw("{}")?);
    module.insert("depends_on", raw("[]")?);
    let text = serde_json::to_string(&[module]).map_err(not_json)?;
    RawValue::from_string(text).map_err(not_json)
}

fn raw(json: &str) -> Result<Box<RawValue>, OutputsError> {
    RawValue::from_string(json.to_owned()).map_err(not_json)
}

fn not_json(e: serde_json::Error) -> OutputsError {
    OutputsError::NotAState(StateError::NotJson(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(bytes: &[u8]) -> serde_json::Value {
        serde_json::from_slice(bytes).expect("JSON")
    }

    #[test]
    fn a_v4_state_keeps_its_outputs_and_header_and_loses_every_resource() {
        let state = br#"{"version": 4, "terraform_version": "1.15.5", "serial": 7, "lineage": "l-1",
            "outputs": {"endpoint": {"value": "db:5432", "type": "string"},
                        "password": {"value": "hunter2", "type": "string", "sensitive": true}},
            "Resources": [{"mode": "managed", "type": "random_password", "name": "db", "provider": "provider[\"registry.terraform.io/hashicorp/random\"]",
                           "instances": [{"schema_version": 0, "attributes": {"result": "resource-secret"}}]}],
            "check_results": [{"object_kind": "resource", "config_addr": "x.y", "status": "fail", "objects": null}]}"#;
        let reduced = outputs_only(state).expect("reduced");
        let text = String::from_utf8(reduced.clone()).expect("utf-8");
        assert!(
            !text.contains("resource-secret") && !text.contains("check_results"),
            "{text}"
        );
        assert_eq!(
            json(&reduced),
            serde_json::json!({"version": 4, "terraform_version": "1.15.5", "serial": 7,
                "lineage": "l-1", "resources": [],
                "outputs": {"endpoint": {"value": "db:5432", "type": "string"},
                            "password": {"value": "hunter2", "type": "string", "sensitive": true}}})
        );
        read(&reduced).expect("still a state Terraform reads");
        // Kept values are the body's bytes: a number serde would rewrite stays as written.
        let exact = br#"{"version": 4, "serial": 1, "lineage": "l", "outputs": {"n": {"value": 1.50e3, "type": "number"}}, "resources": []}"#;
        let text = String::from_utf8(outputs_only(exact).expect("reduced")).unwrap();
        assert!(text.contains(r#""value": 1.50e3"#), "{text}");
    }

    #[test]
    fn a_v3_state_keeps_the_root_modules_outputs_only() {
        let state = br#"{"version": 3, "serial": 2, "lineage": "l-3", "terraform_version": "0.11.14",
            "backend": {"type": "http", "config": {"password": "backend-secret"}},
            "modules": [
              {"path": ["root"], "outputs": {"vpc": {"sensitive": false, "type": "string", "value": "vpc-1"}},
               "resources": {"aws_db_instance.db": {"type": "aws_db_instance", "primary": {"id": "db", "attributes": {"password": "resource-secret"}}}},
               "depends_on": []},
              {"path": ["root", "child"], "outputs": {"inner": {"type": "string", "value": "module-secret"}}, "resources": {}}]}"#;
        let reduced = outputs_only(state).expect("reduced");
        let text = String::from_utf8(reduced.clone()).expect("utf-8");
        for secret in ["backend-secret", "resource-secret", "module-secret"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert_eq!(
            json(&reduced)["modules"],
            serde_json::json!([{"path": ["root"], "resources": {}, "depends_on": [],
                "outputs": {"vpc": {"sensitive": false, "type": "string", "value": "vpc-1"}}}])
        );
        read(&reduced).expect("still a state Terraform reads");
    }

    #[test]
    fn an_encrypted_or_broken_body_is_not_reduced() {
        let envelope = br#"{"serial": 1, "lineage": "l", "meta": {}, "encrypted_data": "QUJD", "encryption_version": "v0"}"#;
        assert_eq!(outputs_only(envelope), Err(OutputsError::ClientEncrypted));
        assert!(matches!(
            outputs_only(b"[1]"),
            Err(OutputsError::NotAState(StateError::NotAnObject))
        ));
    }
}
