//! OpenTofu's `cloud` block and `remote` backend against the workspace API (DESIGN §10). No
//! OpenTofu binary can be installed on the test machines, so these tests send the requests
//! exactly as OpenTofu 1.12.6 (go-tfe 1.101.0) sends them, in its order, with its headers
//! (`User-Agent: OpenTofu/1.12.6`, `Terraform-Version`, `X-Terraform-Integration: cloud`, the
//! JSON:API content type on every non-GET even without a body, a lock body whose `type` is empty,
//! tags as inline relationship attributes, the upload flow's create without `state` and its
//! inline fallback, OpenTofu's state-encryption envelope), and check what OpenTofu reads of each
//! answer: the service ids by exact key, `TFP-API-Version` >= 2.5, each document's `data.type`,
//! `permissions.can-force-delete`, `Z` timestamps, the download byte for byte, the pagination
//! fields it stops on. Where these tests replay a sequence, the source line it comes from is
//! named in docs/DECISIONS.md ("OpenTofu").

use base64::Engine;
use gitstate_tests::workspace_host::*;
use gitstate_tests::*;

const VERSION: &str = "1.12.6";

/// OpenTofu's client of one host: its headers on every request.
struct Tofu<'a> {
    host: &'a WorkspaceHost,
    /// `X-Terraform-Integration: cloud` (the `cloud` block) or nothing (the `remote` backend).
    cloud: bool,
}

impl Tofu<'_> {
    /// One request as go-tfe sends it: `Accept` `accept`, the JSON:API content type on every
    /// method but GET (a body or not).
    fn send_accepting(
        &self,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
        accept: &str,
    ) -> Answer {
        let agent = format!("OpenTofu/{VERSION}");
        let bearer = format!("Bearer {TOKEN}");
        let mut headers = vec![
            ("User-Agent", agent.as_str()),
            ("Terraform-Version", VERSION),
            ("Authorization", bearer.as_str()),
            ("Accept", accept),
        ];
        if self.cloud {
            headers.push(("X-Terraform-Integration", "cloud"));
        }
        if method != "GET" {
            headers.push(("Content-Type", "application/vnd.api+json"));
        }
        // jsonapi ends a marshalled document with a newline.
        let body = body.map(|b| format!("{b}\n"));
        self.host.exchange(method, path, &headers, body.as_deref())
    }

    /// [`Tofu::send_accepting`] a JSON:API document.
    fn send(&self, method: &str, path: &str, body: Option<&serde_json::Value>) -> Answer {
        self.send_accepting(method, path, body, "application/vnd.api+json")
    }

    /// [`Tofu::send`], which must answer `status` with a document of `kind`, or a list of
    /// them (go-tfe refuses any other `data.type`).
    fn document(
        &self,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
        status: u16,
        kind: &str,
    ) -> serde_json::Value {
        let answer = self.send(method, path, body);
        assert_eq!(answer.status, status, "{method} {path}: {}", answer.body);
        let document = answer.json();
        let items = match document["data"].as_array() {
            Some(list) => list.clone(),
            None => vec![document["data"].clone()],
        };
        for item in items {
            assert_eq!(item["type"], kind, "{method} {path}: {document}");
        }
        document
    }

    /// Discovery, ping and entitlements: what every command that loads the backend sends first.
    fn configure(&self) {
        let discovery = self.send_accepting(
            "GET",
            "/.well-known/terraform.json",
            None,
            "application/json",
        );
        assert_eq!(discovery.status, 200, "{}", discovery.body);
        let media = discovery.header("content-type").unwrap_or_default();
        assert_eq!(
            media.split(';').next(),
            Some("application/json"),
            "exactly this media type"
        );
        let services = discovery.json();
        // The cloud block asks for `tfe.v2`, the remote backend for `tfe.v2.1`, by exact key; a
        // service is a string.
        for id in ["tfe.v2", "tfe.v2.1"] {
            assert!(services[id].is_string(), "{id} in {services}");
        }
        let ping = self.send("GET", "/api/v2/ping", None);
        let version = ping.header("tfp-api-version").expect("TFP-API-Version");
        let (major, minor) = version.split_once('.').expect("major.minor");
        let (major, minor): (u32, u32) = (major.parse().unwrap(), minor.parse().unwrap());
        assert!(
            (major, minor) >= (2, 5),
            "the cloud block needs 2.5, got {version}"
        );
        let entitlements = self.document(
            "GET",
            "/api/v2/organizations/default/entitlement-set",
            None,
            200,
            "entitlement-sets",
        );
        assert_eq!(
            entitlements["data"]["attributes"]["operations"], false,
            "{entitlements}"
        );
    }

    /// `GET …/workspaces/NAME`, then on 404 the create (with `attributes`, and tags as inline
    /// relationship attributes) and, for the cloud block, the PATCH of its `terraform-version`:
    /// OpenTofu's StateMgr. Returns the workspace document.
    fn state_mgr(
        &self,
        name: &str,
        tags: &[&str],
        attributes: serde_json::Value,
    ) -> serde_json::Value {
        let path = format!("/api/v2/organizations/default/workspaces/{name}");
        let found = self.send("GET", &path, None);
        if found.status == 200 {
            return found.json();
        }
        assert_eq!(found.status, 404, "{}", found.body);
        let mut create =
            serde_json::json!({"data": {"type": "workspaces", "attributes": attributes}});
        create["data"]["attributes"]["name"] = name.into();
        if !tags.is_empty() {
            let tags: Vec<_> = tags
                .iter()
                .map(|t| serde_json::json!({"type": "tags", "attributes": {"name": t}}))
                .collect();
            create["data"]["relationships"] = serde_json::json!({"tags": {"data": tags}});
        }
        let created = self.document(
            "POST",
            "/api/v2/organizations/default/workspaces",
            Some(&create),
            201,
            "workspaces",
        );
        if self.cloud {
            let id = created["data"]["id"].as_str().unwrap().to_owned();
            let patch = serde_json::json!({"data": {"type": "workspaces", "attributes": {"terraform-version": VERSION}}});
            // A failure is only a warning to OpenTofu; gitstate accepts it.
            self.document(
                "PATCH",
                &format!("/api/v2/workspaces/{id}"),
                Some(&patch),
                200,
                "workspaces",
            );
        }
        created
    }

    fn unlock(&self, id: &str) -> Answer {
        self.send(
            "POST",
            &format!("/api/v2/workspaces/{id}/actions/unlock"),
            None,
        )
    }

    fn lock(&self, id: &str) -> Answer {
        let body = serde_json::json!({"data": {"type": "", "attributes": {"reason": "Locked by OpenTofu"}}});
        self.send(
            "POST",
            &format!("/api/v2/workspaces/{id}/actions/lock"),
            Some(&body),
        )
    }

    /// The current state's bytes (`None`: 404, no state), read as OpenTofu reads them: the
    /// current version's `hosted-state-download-url`, resolved against the API's base, fetched
    /// with the Bearer token and `Accept: application/json`.
    fn pull(&self, id: &str) -> Option<String> {
        let current = self.send(
            "GET",
            &format!("/api/v2/workspaces/{id}/current-state-version"),
            None,
        );
        if current.status == 404 {
            return None;
        }
        assert_eq!(current.status, 200, "{}", current.body);
        let current = current.json();
        assert_eq!(current["data"]["type"], "state-versions");
        let url = current["data"]["attributes"]["hosted-state-download-url"]
            .as_str()
            .expect("a download URL")
            .to_owned();
        assert!(!url.is_empty(), "an empty URL would GET /api/v2/ itself");
        let path = match url.split_once("://") {
            Some((_, rest)) => format!("/{}", rest.split_once('/').map_or("", |(_, p)| p)),
            None if url.starts_with('/') => url,
            None => format!("/api/v2/{url}"),
        };
        let download = self.send_accepting("GET", &path, None, "application/json");
        assert_eq!(download.status, 200, "{}", download.body);
        Some(download.body)
    }

    /// OpenTofu's persist: the upload flow's create without `state`, refused with the words
    /// go-tfe matches, then the inline create with `state`, `json-state` and
    /// `json-state-outputs`.
    fn persist(&self, id: &str, state: &str, force: bool) {
        let parsed: serde_json::Value = serde_json::from_str(state).unwrap();
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let outputs = b64(
            &serde_json::json!({"greeting": {"sensitive": false, "type": "string", "value": "hi"}})
                .to_string(),
        );
        let mut attributes = serde_json::json!({
            "lineage": parsed["lineage"], "md5": md5_hex(state.as_bytes()), "serial": parsed["serial"],
            "force": force, "json-state-outputs": outputs,
        });
        let path = format!("/api/v2/workspaces/{id}/state-versions");
        let upload = self.send(
            "POST",
            &path,
            Some(
                &serde_json::json!({"data": {"type": "state-versions", "attributes": attributes}}),
            ),
        );
        assert_eq!(upload.status, 422, "{}", upload.body);
        let errors = upload.json()["errors"].to_string();
        assert!(
            errors.contains("param is missing or the value is empty: state"),
            "go-tfe falls back to the inline create only on these words: {errors}"
        );
        attributes["state"] = b64(state).into();
        attributes["json-state"] = "".into();
        self.document(
            "POST",
            &path,
            Some(
                &serde_json::json!({"data": {"type": "state-versions", "attributes": attributes}}),
            ),
            201,
            "state-versions",
        );
    }
}

/// The md5 of `bytes` in hex, as go-tfe sends it (computed with the system's `md5sum`).
fn md5_hex(bytes: &[u8]) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new("md5sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("md5sum");
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap()[..32].to_owned()
}

/// A state as OpenTofu writes it, one output and `resources` null_resources.
fn tofu_state(serial: u64, lineage: &str, resources: usize) -> String {
    let resources: Vec<_> = (0..resources)
        .map(|i| serde_json::json!({"mode": "managed", "type": "null_resource", "name": format!("r{i}"),
            "provider": "provider[\"registry.opentofu.org/hashicorp/null\"]",
            "instances": [{"schema_version": 0, "attributes": {"id": format!("{i}"), "triggers": null},
                "sensitive_attributes": []}]}))
        .collect();
    serde_json::json!({"version": 4, "terraform_version": VERSION, "serial": serial, "lineage": lineage,
        "outputs": {"greeting": {"value": "hi", "type": "string"}}, "resources": resources, "check_results": null})
    .to_string()
}

fn is_z_timestamp(value: &serde_json::Value) -> bool {
    value
        .as_str()
        .is_some_and(|t| t.ends_with('Z') && t.len() >= 20)
}

#[test]
fn opentofu_cloud_block_requests_init_apply_pull_push_unlock_and_delete() {
    let host = WorkspaceHost::start(&[]);
    let tofu = Tofu {
        host: &host,
        cloud: true,
    };

    // `tofu init` with `workspaces { tags = ["app", "tofu"] }` and `tofu workspace new app-dev`.
    tofu.configure();
    let listed = tofu.document(
        "GET",
        "/api/v2/organizations/default/workspaces?page%5Bnumber%5D=1&search%5Btags%5D=app%2Ctofu",
        None,
        200,
        "workspaces",
    );
    assert_eq!(listed["data"], serde_json::json!([]), "none yet");
    let created = tofu.state_mgr("app-dev", &["app", "tofu"], serde_json::json!({}));
    let attributes = &created["data"]["attributes"];
    let id = created["data"]["id"].as_str().unwrap().to_owned();
    assert_eq!(attributes["name"], "app-dev");
    assert_eq!(
        attributes["execution-mode"], "local",
        "OpenTofu runs locally"
    );
    assert_eq!(attributes["tag-names"], serde_json::json!(["app", "tofu"]));
    assert!(
        attributes["permissions"]["can-force-delete"].is_boolean(),
        "OpenTofu's `workspace delete` panics without permissions: {attributes}"
    );
    assert!(is_z_timestamp(&attributes["created-at"]), "{attributes}");
    // The list OpenTofu pages through stops on current-page >= total-pages.
    let listed = tofu.document(
        "GET",
        "/api/v2/organizations/default/workspaces?page%5Bnumber%5D=1&search%5Btags%5D=app%2Ctofu",
        None,
        200,
        "workspaces",
    );
    assert_eq!(listed["data"][0]["attributes"]["name"], "app-dev");
    let pages = &listed["meta"]["pagination"];
    assert!(
        pages["current-page"].as_u64().unwrap() >= pages["total-pages"].as_u64().unwrap(),
        "{pages}"
    );
    // `tofu output` on the empty workspace: an empty list, not a 404.
    let outputs = tofu.send(
        "GET",
        &format!("/api/v2/workspaces/{id}/current-state-version-outputs"),
        None,
    );
    assert_eq!(
        (outputs.status, outputs.json()["data"].clone()),
        (200, serde_json::json!([])),
        "{}",
        outputs.body
    );

    // `tofu apply`: StateMgr, lock, read (none), persist serial 1, unlock.
    tofu.state_mgr("app-dev", &["app", "tofu"], serde_json::json!({}));
    let locked = tofu.lock(&id);
    assert_eq!(locked.status, 200, "{}", locked.body);
    assert_eq!(locked.json()["data"]["attributes"]["locked"], true);
    let again = tofu.lock(&id);
    assert_eq!(
        again.status, 409,
        "a second lock is OpenTofu's 'already locked': {}",
        again.body
    );
    assert_eq!(tofu.pull(&id), None, "no state yet");
    let first = tofu_state(1, "4b2bd6c0-tofu", 2);
    tofu.persist(&id, &first, false);
    let unlocked = tofu.unlock(&id);
    assert_eq!(
        unlocked.status, 200,
        "an unlock without a body: {}",
        unlocked.body
    );
    assert_eq!(unlocked.json()["data"]["attributes"]["locked"], false);

    // `tofu state pull`: the bytes written, byte for byte; the same state over the http protocol.
    assert_eq!(tofu.pull(&id).as_deref(), Some(first.as_str()));
    let (status, over_http) = host.with_token(
        TOKEN,
        "GET",
        "/state/default/workspaces/app-dev.tfstate",
        None,
    );
    assert_eq!((status, over_http.as_str()), (200, first.as_str()));
    let outputs = tofu.document(
        "GET",
        &format!("/api/v2/workspaces/{id}/current-state-version-outputs"),
        None,
        200,
        "state-version-outputs",
    );
    assert_eq!(
        outputs["data"][0]["attributes"]["name"], "greeting",
        "{outputs}"
    );

    // State encryption: OpenTofu uploads its envelope (no `version`), and reads it back unchanged.
    let envelope = serde_json::json!({"serial": 2, "lineage": "4b2bd6c0-tofu", "meta": {"key_provider.pbkdf2.main": "eyJzYWx0IjoiQUFBQSJ9"},
        "encrypted_data": "q83vEjRWeJA=", "encryption_version": "v0"})
    .to_string();
    assert_eq!(tofu.lock(&id).status, 200);
    tofu.persist(&id, &envelope, false);
    assert_eq!(tofu.unlock(&id).status, 200);
    assert_eq!(
        tofu.pull(&id).as_deref(),
        Some(envelope.as_str()),
        "opaque bytes"
    );

    // `tofu state push -force` of another lineage: the cloud block sends `force: false`.
    let pushed = tofu_state(3, "pushed-lineage", 1);
    assert_eq!(tofu.lock(&id).status, 200);
    assert!(tofu.pull(&id).is_some());
    tofu.persist(&id, &pushed, false);
    assert_eq!(tofu.unlock(&id).status, 200);
    assert_eq!(tofu.pull(&id).as_deref(), Some(pushed.as_str()));

    // `tofu force-unlock org/app-dev` after a lock left behind.
    assert_eq!(tofu.lock(&id).status, 200);
    let forced = tofu.send(
        "POST",
        &format!("/api/v2/workspaces/{id}/actions/force-unlock"),
        None,
    );
    assert_eq!(forced.status, 200, "{}", forced.body);
    assert_eq!(forced.json()["data"]["attributes"]["locked"], false);
    let twice = tofu.send(
        "POST",
        &format!("/api/v2/workspaces/{id}/actions/force-unlock"),
        None,
    );
    assert_eq!(
        twice.status, 409,
        "OpenTofu's 'already unlocked': {}",
        twice.body
    );

    // `tofu workspace delete app-dev` (no -force, permissions present): the safe delete by name,
    // refused while the state manages a resource; after `tofu destroy`, done.
    let safe = "/api/v2/organizations/default/workspaces/app-dev/actions/safe-delete";
    let refused = tofu.send("POST", safe, None);
    assert_eq!(refused.status, 409, "{}", refused.body);
    assert_eq!(tofu.lock(&id).status, 200);
    tofu.persist(&id, &tofu_state(4, "pushed-lineage", 0), false);
    assert_eq!(tofu.unlock(&id).status, 200);
    let deleted = tofu.send("POST", safe, None);
    assert_eq!(deleted.status, 204, "{}", deleted.body);
    let gone = tofu.send(
        "GET",
        "/api/v2/organizations/default/workspaces/app-dev",
        None,
    );
    assert_eq!(gone.status, 404);
    // Every state written is a commit: the history stays in git.
    let log = git_log_subjects(&host.bare(), "main", "workspaces/app-dev.tfstate");
    assert_eq!(log.len(), 5, "4 versions and the delete: {log:?}");
}

#[test]
fn opentofu_remote_backend_requests_with_a_prefix_and_remote_state() {
    let host = WorkspaceHost::start(&[]);
    let tofu = Tofu {
        host: &host,
        cloud: false,
    };
    let list = "/api/v2/organizations/default/workspaces?page%5Bnumber%5D=1&search%5Bname%5D=app-";

    // `tofu workspace new dev` with `workspaces { prefix = "app-" }`: the list, then StateMgr
    // (create with `terraform-version`, no PATCH).
    tofu.configure();
    assert_eq!(
        tofu.document("GET", list, None, 200, "workspaces")["data"],
        serde_json::json!([])
    );
    let created = tofu.state_mgr(
        "app-dev",
        &[],
        serde_json::json!({"terraform-version": VERSION}),
    );
    let id = created["data"]["id"].as_str().unwrap().to_owned();
    tofu.state_mgr(
        "app-other",
        &[],
        serde_json::json!({"terraform-version": VERSION}),
    );
    let names: Vec<_> = tofu.document("GET", list, None, 200, "workspaces")["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["attributes"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["app-dev", "app-other"]);

    // `tofu apply` in dev: fetchWorkspace, StateMgr, lock, read, persist (one upload), unlock.
    let state = tofu_state(1, "remote-lineage", 1);
    tofu.state_mgr("app-dev", &[], serde_json::json!({}));
    assert_eq!(tofu.lock(&id).status, 200);
    assert_eq!(tofu.pull(&id), None);
    tofu.persist(&id, &state, false);
    assert_eq!(tofu.unlock(&id).status, 200);

    // `terraform_remote_state` with `backend = "remote"` in another configuration: its own
    // configure, the workspace by name, the full state (outputs read from it).
    let reader = Tofu {
        host: &host,
        cloud: false,
    };
    reader.configure();
    let found = reader.state_mgr("app-dev", &[], serde_json::json!({}));
    let pulled = reader
        .pull(found["data"]["id"].as_str().unwrap())
        .expect("a state");
    let pulled: serde_json::Value = serde_json::from_str(&pulled).unwrap();
    assert_eq!(pulled["outputs"]["greeting"]["value"], "hi");

    // `tofu workspace delete -force dev` (with or without -force the same): list, StateMgr,
    // lock, read, unlock, then DELETE by name, which deletes a state that manages resources.
    tofu.document("GET", list, None, 200, "workspaces");
    tofu.state_mgr("app-dev", &[], serde_json::json!({}));
    assert_eq!(tofu.lock(&id).status, 200);
    assert!(tofu.pull(&id).is_some());
    assert_eq!(tofu.unlock(&id).status, 200);
    let deleted = tofu.send(
        "DELETE",
        "/api/v2/organizations/default/workspaces/app-dev",
        None,
    );
    assert_eq!(deleted.status, 204, "{}", deleted.body);
    let names: Vec<_> = tofu.document("GET", list, None, 200, "workspaces")["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["attributes"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["app-other"]);
    let log = git_log_subjects(&host.bare(), "main", "workspaces/app-dev.tfstate");
    assert_eq!(log.len(), 2, "the write and the delete: {log:?}");
}
