//! The JSON:API documents of the workspace API (DESIGN §10): what go-tfe reads of a workspace,
//! a state version, an organization and its entitlements, and what a client sends to create a
//! workspace or a state version. Only translation: every value comes from the core's answers.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use gitstate_core::scope::{Rights, Scope};
use gitstate_core::workspace::{Current, Listed, Output, StateVersionId, Workspace, WorkspaceId};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::JSON_API;

/// `document` answered with `status` as `application/vnd.api+json`.
pub(crate) fn answer(status: StatusCode, document: Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, JSON_API)],
        document.to_string(),
    )
        .into_response()
}

/// The workspace document: `execution-mode` is always `local` (a plan never runs on gitstate),
/// `terraform-version` is `latest` (Terraform checks no version against it), and the
/// permissions are what the caller's `scope` may do.
pub(crate) fn workspace(workspace: &Workspace, scope: &Scope) -> Value {
    json!({ "data": workspace_resource(workspace, scope) })
}

/// One page of the workspace list: the workspaces, and the JSON:API `links` and
/// `meta.pagination` go-tfe reads to walk the pages (`base` is the list's address, `query` the
/// search parameters to keep in each link).
pub(crate) fn workspace_list(listed: &Listed, scope: &Scope, base: &str, query: &str) -> Value {
    let data: Vec<Value> = listed
        .workspaces
        .iter()
        .map(|w| workspace_resource(w, scope))
        .collect();
    let size = listed.page.size;
    let last = listed.total_pages().max(1);
    let link =
        |number: usize| format!("{base}?{query}page%5Bnumber%5D={number}&page%5Bsize%5D={size}");
    json!({
        "data": data,
        "links": {
            "self": link(listed.page.number),
            "first": link(1),
            "prev": listed.prev_page().map(link),
            "next": listed.next_page().map(link),
            "last": link(last),
        },
        "meta": {
            "pagination": {
                "current-page": listed.page.number,
                "page-size": size,
                "prev-page": listed.prev_page(),
                "next-page": listed.next_page(),
                "total-pages": listed.total_pages(),
                "total-count": listed.total,
            }
        }
    })
}

/// The tags of a workspace, as `GET …/relationships/tags` answers them (a tag's id is `tag-`
/// and its name: tags are kept by name).
pub(crate) fn tags(tags: &[String]) -> Value {
    let data: Vec<Value> = tags
        .iter()
        .map(|name| json!({ "id": format!("tag-{name}"), "type": "tags", "attributes": { "name": name } }))
        .collect();
    json!({
        "data": data,
        "meta": { "pagination": {
            "current-page": 1, "page-size": data.len().max(1), "prev-page": null, "next-page": null,
            "total-pages": 1, "total-count": data.len(),
        } },
    })
}

/// The resource object of a workspace (what `data` holds, alone or in a list).
fn workspace_resource(workspace: &Workspace, scope: &Scope) -> Value {
    let organization = workspace.id.repository.as_str();
    let name = workspace.name().as_str();
    let write = scope.rights() == Rights::ReadWrite;
    let mut attributes = json!({
        "name": name,
        "execution-mode": "local",
        "operations": false,
        "locked": workspace.lock.is_some(),
        "terraform-version": "latest",
        "auto-apply": false,
        "allow-destroy-plan": false,
        "description": format!("the state at {} of the repository {organization}", workspace.path),
        "environment": "default",
        "global-remote-state": false,
        "queue-all-runs": false,
        "speculative-enabled": false,
        "source": "tfe-api",
        "tag-names": workspace.record.as_ref().map_or_else(Vec::new, |r| r.tags.clone()),
        "working-directory": "",
        "resource-count": 0,
        "actions": { "is-destroyable": write },
        "setting-overwrites": { "execution-mode": true, "agent-pool": false },
        "permissions": {
            "can-destroy": write,
            "can-force-unlock": write,
            "can-lock": write,
            "can-unlock": write,
            "can-manage-run-tasks": false,
            "can-queue-apply": false,
            "can-queue-destroy": false,
            "can-queue-run": false,
            "can-read-settings": true,
            "can-update": write,
            "can-update-variable": false,
            "can-force-delete": write,
        },
    });
    if let Some(created) = workspace.record.as_ref().map(|r| r.created_at.as_str()) {
        if !created.is_empty() {
            attributes["created-at"] = Value::from(created);
        }
    }
    json!({
        "id": workspace.id.to_string(),
        "type": "workspaces",
        "attributes": attributes,
        "relationships": {
            "organization": { "data": { "id": organization, "type": "organizations" } },
        },
        "links": {
            "self": format!("/api/v2/organizations/{organization}/workspaces/{name}"),
        },
    })
}

/// The state version document of `current`, the state of the workspace `workspace`: its
/// download address names the version, so the download serves exactly that state.
pub(crate) fn state_version(workspace: &WorkspaceId, current: &Current) -> Value {
    let id = StateVersionId {
        workspace: workspace.clone(),
        digest: current.digest.clone(),
    }
    .to_string();
    let md5: String = md5_hex(&current.state);
    json!({
        "data": {
            "id": id,
            "type": "state-versions",
            "attributes": {
                "serial": current.serial,
                "lineage": current.lineage,
                "md5": md5,
                "size": current.state.len(),
                "status": "finalized",
                "resources-processed": true,
                "hosted-state-download-url": format!("/api/v2/state-versions/{id}/download"),
            },
            "relationships": {
                "workspace": { "data": { "id": workspace.to_string(), "type": "workspaces" } },
            },
            "links": { "self": format!("/api/v2/state-versions/{id}") },
        }
    })
}

/// A list of outputs (`current-state-version-outputs`), in one page.
pub(crate) fn outputs(outputs: &[Output]) -> Value {
    let data: Vec<Value> = outputs.iter().map(output).collect();
    json!({
        "data": data,
        "meta": { "pagination": {
            "current-page": 1, "page-size": data.len().max(1), "prev-page": null, "next-page": null,
            "total-pages": 1, "total-count": data.len(),
        } },
    })
}

/// One output's resource object.
pub(crate) fn output(output: &Output) -> Value {
    let id = output.id.to_string();
    json!({
        "id": id,
        "type": "state-version-outputs",
        "attributes": {
            "name": output.name(),
            "sensitive": output.sensitive,
            "type": output.kind(),
            "value": output.value,
            "detailed-type": output.detailed_type,
        },
        "links": { "self": format!("/api/v2/state-version-outputs/{id}") },
    })
}

/// The MD5 of `bytes` in hex (what the API calls a state's `md5`).
pub(crate) fn md5_hex(bytes: &[u8]) -> String {
    use md5::{Digest, Md5};
    Md5::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The organization document: a configured repository.
pub(crate) fn organization(name: &str) -> Value {
    json!({
        "data": {
            "id": name,
            "type": "organizations",
            "attributes": {
                "name": name,
                "external-id": format!("org-{name}"),
                "permissions": {
                    "can-create-workspace": true,
                    "can-update": false,
                    "can-destroy": false,
                    "can-create-team": false,
                },
            },
        }
    })
}

/// The organization's entitlements: state storage, and no remote operations (`operations:
/// false` makes Terraform run every operation locally).
pub(crate) fn entitlements(name: &str) -> Value {
    json!({
        "data": {
            "id": format!("org-{name}"),
            "type": "entitlement-sets",
            "attributes": {
                "state-storage": true,
                "operations": false,
                "agents": false,
                "audit-logging": false,
                "cost-estimation": false,
                "global-run-tasks": false,
                "module-tests-generation": false,
                "private-module-registry": false,
                "run-tasks": false,
                "sentinel": false,
                "single-sign-on": false,
                "teams": false,
                "vcs-integrations": false,
            },
        }
    })
}

/// A request document: `{"data": {"type", "attributes"}}`, the attributes as JSON values.
#[derive(Debug, Deserialize)]
pub(crate) struct Request {
    data: RequestData,
}

#[derive(Debug, Deserialize)]
struct RequestData {
    #[serde(default)]
    attributes: serde_json::Map<String, Value>,
    #[serde(default)]
    relationships: serde_json::Map<String, Value>,
}

impl Request {
    /// The document in `body`, or the sentence of why it is not one.
    pub(crate) fn parse(body: &[u8]) -> Result<Request, String> {
        serde_json::from_slice(body).map_err(|e| {
            format!("the request body is not a JSON:API document with data and attributes: {e}")
        })
    }

    /// The attribute `name`, when it is set (not null).
    pub(crate) fn attribute(&self, name: &str) -> Option<&Value> {
        self.data.attributes.get(name).filter(|v| !v.is_null())
    }

    /// The string attribute `name`: `Ok(None)` when unset, a sentence when it is no string.
    pub(crate) fn string(&self, name: &str) -> Result<Option<&str>, String> {
        match self.attribute(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(format!("the attribute {name} must be a string")),
        }
    }

    /// The attributes set, by name.
    pub(crate) fn attributes(&self) -> impl Iterator<Item = &str> {
        self.data
            .attributes
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, _)| k.as_str())
    }

    /// The items of the relationship `name` (an empty list when it is not given; one item
    /// alone counts as a list of one).
    pub(crate) fn relationship_items(&self, name: &str) -> Vec<&Value> {
        match self
            .data
            .relationships
            .get(name)
            .and_then(|r| r.get("data"))
        {
            Some(Value::Array(items)) => items.iter().collect(),
            None | Some(Value::Null) => Vec::new(),
            Some(one) => vec![one],
        }
    }

    /// The relationships given with data (not null, not an empty list), by name.
    pub(crate) fn relationships(&self) -> impl Iterator<Item = &str> {
        self.data
            .relationships
            .iter()
            .filter(|(_, v)| match v.get("data") {
                None | Some(Value::Null) => false,
                Some(Value::Array(items)) => !items.is_empty(),
                Some(_) => true,
            })
            .map(|(k, _)| k.as_str())
    }
}
