//! A state version's outputs as the workspace API lists them (DESIGN §10, "Outputs"): what
//! Terraform's `cloud` block reads for `terraform output` (its `GetRootOutputValues`), each with
//! its value, its type as Terraform wrote it in the state (`detailed-type`), and whether it is
//! sensitive. A list gives no sensitive value; the output read by its id does, as the API does.

use serde_json::Value;

use super::{OutputId, StateVersionId};

/// One root output of a state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// Its id: the state version and the name.
    pub id: OutputId,
    /// Its value (`Null` in a list when it is sensitive).
    pub value: Value,
    /// Its type as Terraform wrote it in the state (cty's JSON form), when the state has it.
    pub detailed_type: Option<Value>,
    /// Whether Terraform marked it sensitive.
    pub sensitive: bool,
}

impl Output {
    /// The output's name.
    pub fn name(&self) -> &str {
        &self.id.name
    }

    /// The API's `type`: the kind of its value (`string`, `number`, `boolean`, `array`,
    /// `object`, `null`).
    pub fn kind(&self) -> &'static str {
        match &self.value {
            Value::String(_) => "string",
            Value::Number(_) => "number",
            Value::Bool(_) => "boolean",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
            Value::Null => "null",
        }
    }
}

/// The root outputs of `state` (served as `version`), by name; a state that is not JSON, or
/// has no outputs, has none. `hide_sensitive`: sensitive values are `Null` (a list).
pub fn outputs_of(version: &StateVersionId, state: &[u8], hide_sensitive: bool) -> Vec<Output> {
    let Ok(parsed) = serde_json::from_slice::<Value>(state) else {
        return Vec::new();
    };
    let Some(outputs) = parsed.get("outputs").and_then(Value::as_object) else {
        return Vec::new();
    };
    let mut listed: Vec<Output> = outputs
        .iter()
        .map(|(name, output)| {
            let sensitive = output
                .get("sensitive")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let value = match sensitive && hide_sensitive {
                true => Value::Null,
                false => output.get("value").cloned().unwrap_or(Value::Null),
            };
            Output {
                id: OutputId {
                    version: version.clone(),
                    name: name.clone(),
                },
                value,
                detailed_type: output.get("type").cloned(),
                sensitive,
            }
        })
        .collect();
    listed.sort_by(|a, b| a.id.name.cmp(&b.id.name));
    listed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::{WorkspaceId, WorkspaceName};

    #[test]
    fn outputs_carry_their_type_and_a_list_hides_sensitive_values() {
        let version = StateVersionId {
            workspace: WorkspaceId::new("default", &WorkspaceName::parse("a").unwrap()),
            digest: "00ff".into(),
        };
        let state = br#"{"version":4,"outputs":{
            "url":{"value":"https://x","type":"string"},
            "secret":{"value":"s3cret","type":"string","sensitive":true},
            "ports":{"value":[80,443],"type":["list","number"]}}}"#;
        let listed = outputs_of(&version, state, true);
        let names: Vec<&str> = listed.iter().map(Output::name).collect();
        assert_eq!(names, ["ports", "secret", "url"]);
        assert_eq!(listed[0].kind(), "array");
        assert_eq!(
            listed[0].detailed_type,
            Some(serde_json::json!(["list", "number"]))
        );
        assert_eq!(
            (listed[1].sensitive, &listed[1].value),
            (true, &Value::Null)
        );
        let read = outputs_of(&version, state, false);
        assert_eq!(read[1].value, "s3cret");
        assert!(outputs_of(&version, b"not json", true).is_empty());
    }
}
