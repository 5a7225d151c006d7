//! Workspaces (DESIGN §10): real Terraform's `cloud` block against `gitstate serve` over TLS
//! (a certificate from a test CA, given to Terraform as `SSL_CERT_FILE`; the team token in a
//! `credentials` block of `TF_CLI_CONFIG_FILE`), Terraform 1.15.5 and the 1.11.4 on PATH; the
//! `remote` backend with Terraform 1.0.3 and the 1.11.4. One state, one lock for both protocols:
//! the http protocol reaches the workspace's state at its path. Requests the tests make themselves go through `curl` with the CA.

use std::path::Path;
use std::process::Command;

use gitstate_tests::workspace_host::*;
use gitstate_tests::*;

/// Terraform 1.15.5 and the 1.11.4 on PATH (when it is there).
fn versions() -> Vec<Terraform> {
    let mut all = vec![Terraform::installed("1.15.5")];
    match Terraform::from_path() {
        Some(tf) if tf.version == "1.11.4" => all.push(tf),
        _ => eprintln!("no Terraform 1.11.4 on PATH: only 1.15.5 is tested"),
    }
    all
}

/// `main.tf` with the `cloud` block naming `workspace` at `host` and one `null_resource` (the
/// one [`write_main_tf`] writes).
fn cloud_config(dir: &Path, host: &WorkspaceHost, workspace: &str, generation: &str) {
    std::fs::write(
        dir.join("main.tf"),
        format!(
            r#"terraform {{
  cloud {{
    hostname     = "{}"
    organization = "default"
    workspaces {{
      name = "{workspace}"
    }}
  }}
}}

resource "null_resource" "r0" {{
  triggers = {{
    generation = "{generation}"
    index      = "0"
  }}
}}
"#,
            host.hostname()
        ),
    )
    .unwrap();
}

/// `main.tf` with a `backend "http"` at the workspace's state path, [`TOKEN`] as its password.
fn http_config(dir: &Path, host: &WorkspaceHost, generation: &str) {
    let address = format!(
        "https://{}/state/default/workspaces/app-prod.tfstate",
        host.hostname()
    );
    let mut backend = HttpBackend::new(&address).with_auth("ci", TOKEN);
    backend.extra.push((
        "client_ca_certificate_pem".into(),
        format!("<<EOT\n{}EOT\n", std::fs::read_to_string(&host.ca).unwrap()),
    ));
    write_main_tf(dir, &backend, 1, generation);
}

fn state_commits(host: &WorkspaceHost) -> Vec<String> {
    git_log_subjects(&host.bare(), "main", "workspaces/app-prod.tfstate")
}

#[test]
fn the_cloud_block_creates_applies_pulls_and_force_unlocks_a_workspace() {
    for tf in versions() {
        let host = WorkspaceHost::start(&[]);
        let tf = host.terraform(&tf, TOKEN);
        let work = tempfile::tempdir().unwrap();
        cloud_config(work.path(), &host, "app-prod", "g1");
        tf.init(work.path())
            .expect_code(0, "init creates the workspace");
        let records = git_log_subjects(&host.bare(), "main", ".gitstate/workspaces/app-prod.json");
        assert_eq!(
            records,
            ["Create workspace app-prod (workspaces/app-prod.tfstate) by workspace API"],
            "{}",
            tf.version
        );
        tf.apply(work.path()).expect_code(0, "apply");
        let first = state_commits(&host);
        assert_eq!(first.len(), 1, "{first:?}");
        assert!(
            first[0].starts_with("Update workspaces/app-prod.tfstate (serial 1)"),
            "{first:?}"
        );
        let pulled = tf.run(work.path(), &["state", "pull"]);
        pulled.expect_code(0, "state pull");
        let pulled = json(&pulled.stdout);
        let (status, over_http) = host.with_token(
            TOKEN,
            "GET",
            "/state/default/workspaces/app-prod.tfstate",
            None,
        );
        assert_eq!(status, 200, "{over_http}");
        assert_eq!(
            json(&over_http),
            pulled,
            "the http GET reads what the cloud apply wrote"
        );

        // `terraform state push` of a copy one serial on; then of another lineage, which only
        // `-force` pushes (Terraform checks it itself; gitstate's state guard too).
        let mut next = pulled.clone();
        next["serial"] = (pulled["serial"].as_u64().unwrap() + 1).into();
        std::fs::write(work.path().join("next.tfstate"), next.to_string()).unwrap();
        tf.run(work.path(), &["state", "push", "next.tfstate"])
            .expect_code(0, "state push");
        let mut other = next.clone();
        other["lineage"] = "another-lineage".into();
        std::fs::write(work.path().join("other.tfstate"), other.to_string()).unwrap();
        let refused = tf.run(work.path(), &["state", "push", "other.tfstate"]);
        assert_ne!(refused.code, Some(0), "another lineage without -force");
        tf.run(work.path(), &["state", "push", "-force", "other.tfstate"])
            .expect_code(0, "state push -force");
        let (_, over_http) = host.with_token(
            TOKEN,
            "GET",
            "/state/default/workspaces/app-prod.tfstate",
            None,
        );
        assert_eq!(
            json(&over_http)["lineage"],
            "another-lineage",
            "{}",
            tf.version
        );

        let pushed = state_commits(&host);
        assert_eq!(pushed.len(), 3, "one commit per push: {pushed:?}");

        cloud_config(work.path(), &host, "app-prod", "g2");
        tf.apply(work.path()).expect_code(0, "a second apply");
        let second = state_commits(&host);
        assert_eq!(second.len(), 4, "{second:?}");
        let (_, over_http) = host.with_token(
            TOKEN,
            "GET",
            "/state/default/workspaces/app-prod.tfstate",
            None,
        );
        let applied = json(&over_http);
        assert_eq!(
            applied["lineage"], "another-lineage",
            "the apply continues it"
        );
        assert!(
            second[0].contains(&format!("(serial {})", applied["serial"])),
            "{second:?}"
        );
        assert!(refs_under(&host.bare(), "refs/heads/locks/").is_empty());

        // `terraform force-unlock` removes a lock held over the http protocol.
        let lock = r#"{"ID":"held-over-http","Operation":"OperationTypeApply","Who":"ci@runner","Created":"2026-11-29T10:00:00Z"}"#;
        let (status, body) = host.with_token(
            TOKEN,
            "LOCK",
            "/state/default/workspaces/app-prod.tfstate",
            Some(lock),
        );
        assert_eq!(status, 200, "{body}");
        tf.force_unlock(work.path(), "default/app-prod")
            .expect_code(0, "force-unlock");
        assert!(refs_under(&host.bare(), "refs/heads/locks/").is_empty());
        assert!(
            host.server.log().contains("workspace force-unlocked"),
            "audited in the log"
        );
        tf.plan(work.path()).expect_code(0, "nothing to change");
    }
}

/// The same on a repository behind a git server (smart HTTP), where the records, the locks and
/// the states go through the remote store's pushes (DESIGN §9).
#[test]
fn the_cloud_block_on_a_remote_repository() {
    let repos = tempfile::tempdir().unwrap();
    let bare = bare_repo(repos.path(), "states");
    let (user, password) = ("ws-bot", "ws-Pa55");
    let git_server = GitHttpServer::start(repos.path(), user, password);
    let repository = format!("default={}", git_server.url("states"));
    let host = WorkspaceHost::serving(
        &[],
        &["--repository", &repository],
        &[("GIT_USERNAME", user), ("GIT_PASSWORD", password)],
    );
    let tf = host.terraform(&Terraform::installed("1.15.5"), TOKEN);
    let work = tempfile::tempdir().unwrap();
    cloud_config(work.path(), &host, "app-prod", "g1");
    tf.init(work.path()).expect_code(0, "init");
    tf.apply(work.path()).expect_code(0, "apply");
    cloud_config(work.path(), &host, "app-prod", "g2");
    tf.apply(work.path()).expect_code(0, "a second apply");
    tf.plan(work.path()).expect_code(0, "nothing to change");
    assert_eq!(
        git_log_subjects(&bare, "main", ".gitstate/workspaces/app-prod.json"),
        ["Create workspace app-prod (workspaces/app-prod.tfstate) by workspace API"]
    );
    let commits = git_log_subjects(&bare, "main", "workspaces/app-prod.tfstate");
    assert!(commits.len() >= 2, "{commits:?}");
    assert!(refs_under(&bare, "refs/heads/locks/").is_empty());
    let pulled = tf.run(work.path(), &["state", "pull"]);
    let (_, over_http) = host.with_token(
        TOKEN,
        "GET",
        "/state/default/workspaces/app-prod.tfstate",
        None,
    );
    assert_eq!(json(&over_http), json(&pulled.stdout));

    // The list and a delete through the remote store's write queue: one commit of both files.
    let (names, total) = listed(&host, TOKEN, "search%5Bname%5D=app");
    assert_eq!((names, total), (vec!["app-prod".to_owned()], 1));
    let by_name = "/api/v2/organizations/default/workspaces/app-prod";
    let (status, body) = host.with_token(TOKEN, "DELETE", by_name, None);
    assert_eq!(status, 204, "{body}");
    let after = git_log_subjects(&bare, "main", "workspaces/app-prod.tfstate");
    assert_eq!(
        after[0],
        "Delete workspace app-prod (workspaces/app-prod.tfstate) by workspace API"
    );
    assert_eq!(after.len(), commits.len() + 1, "the history stays");
    assert_eq!(
        git_log_subjects(&bare, "main", ".gitstate/workspaces/app-prod.json")[0],
        after[0]
    );
    let (status, _) = host.with_token(TOKEN, "GET", by_name, None);
    assert_eq!(status, 404);
}

/// Two processes with their own caches on one remote, as two Lambda containers are: what a
/// process remembers never decides a lock, a write or which version is current. The lock,
/// the state version and the unlock each go in one request when the process remembers the
/// workspace (scripts/bench workspaces counts them); here, the other process moved everything
/// in between.
#[test]
fn two_processes_on_one_remote_decide_locks_and_versions_fresh() {
    let repos = tempfile::tempdir().unwrap();
    let bare = bare_repo(repos.path(), "states");
    let (user, password) = ("ws-bot", "ws-Pa55");
    let git_server = GitHttpServer::start(repos.path(), user, password);
    let repository = format!("default={}", git_server.url("states"));
    let other = "other-team-token";
    let serve = || {
        WorkspaceHost::serving(
            &[hash(other)],
            &["--repository", &repository],
            &[("GIT_USERNAME", user), ("GIT_PASSWORD", password)],
        )
    };
    let (a, b) = (serve(), serve());
    let create = r#"{"data":{"type":"workspaces","attributes":{"name":"app"}}}"#;
    let (status, body) = a.with_token(
        TOKEN,
        "POST",
        "/api/v2/organizations/default/workspaces",
        Some(create),
    );
    assert_eq!(status, 201, "{body}");
    let id = a.workspace_id("app");
    let ws = format!("/api/v2/workspaces/{id}");
    let version = |serial: u64| {
        use base64::Engine;
        let state = format!(
            r#"{{"version":4,"terraform_version":"1.15.5","serial":{serial},"lineage":"two-processes","outputs":{{}},"resources":[]}}"#
        );
        let encoded = base64::engine::general_purpose::STANDARD.encode(&state);
        format!(
            r#"{{"data":{{"type":"state-versions","attributes":{{"serial":{serial},"state":"{encoded}"}}}}}}"#
        )
    };
    // A request of the API on the workspace: its answer's body, once its status is `expected`.
    let call = |host: &WorkspaceHost,
                token: &str,
                method: &str,
                what: &str,
                body: Option<&str>,
                expected: u16| {
        let (status, answer) = host.with_token(token, method, &format!("{ws}/{what}"), body);
        assert_eq!(status, expected, "{method} {what}: {answer}");
        answer
    };
    let action = |host: &WorkspaceHost, token: &str, what: &str, expected: u16| {
        call(
            host,
            token,
            "POST",
            &format!("actions/{what}"),
            Some("{}"),
            expected,
        )
    };
    let write = |host: &WorkspaceHost, token: &str, serial: u64, expected: u16| {
        call(
            host,
            token,
            "POST",
            "state-versions",
            Some(&version(serial)),
            expected,
        )
    };
    let current = |host: &WorkspaceHost| {
        json(&call(
            host,
            TOKEN,
            "GET",
            "current-state-version",
            None,
            200,
        ))
    };
    let cycle = |host: &WorkspaceHost, serial: u64| -> String {
        action(host, TOKEN, "lock", 200);
        write(host, TOKEN, serial, 201);
        action(host, TOKEN, "unlock", 200);
        current(host)["data"]["id"].as_str().unwrap().to_owned()
    };
    // B remembers serial 1; A then writes serial 2 and holds the lock.
    let first = cycle(&b, 1);
    let second = cycle(&a, 2);
    assert_ne!(first, second);
    action(&a, TOKEN, "lock", 200);

    // B's memory says unlocked at serial 1: its lock is refused with A's LockInfo, and
    // another credential writes nothing and releases nothing under A's lock.
    let refused = action(&b, TOKEN, "lock", 409);
    assert!(refused.contains("is locked by"), "{refused}");
    write(&b, other, 3, 409);
    action(&b, other, "unlock", 409);
    // B reads the current version fresh: serial 2, downloaded as it is.
    let version_2 = current(&b);
    assert_eq!(version_2["data"]["id"].as_str().unwrap(), second);
    let download = version_2["data"]["attributes"]["hosted-state-download-url"]
        .as_str()
        .unwrap();
    let (status, body) = b.with_token(TOKEN, "GET", download, None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["serial"], 2);
    // The same credential finishes A's run through B (the run key is shared): version 3, and
    // the unlock, each from B's fresh read of A's lock.
    write(&b, TOKEN, 3, 201);
    action(&b, TOKEN, "unlock", 200);
    let twice = action(&a, TOKEN, "unlock", 409);
    assert!(
        twice.contains("not locked"),
        "A's memory of its lock does not release it twice: {twice}"
    );
    // A's memory holds serial 2: the version it names is no longer current, and A says so.
    let third = current(&a)["data"]["id"].as_str().unwrap().to_owned();
    assert!(third != first && third != second);
    let (status, body) = a.with_token(
        TOKEN,
        "GET",
        &format!("/api/v2/state-versions/{first}/download"),
        None,
    );
    assert_eq!(status, 404, "a version two writes old: {body}");
    assert_eq!(
        git_log_subjects(&bare, "main", "workspaces/app.tfstate").len(),
        3,
        "three state versions, three commits"
    );
    assert!(refs_under(&bare, "refs/heads/locks/").is_empty());
}

#[test]
fn one_state_and_one_lock_over_both_protocols() {
    let host = WorkspaceHost::start(&[]);
    let tf = host.terraform(&Terraform::installed("1.15.5"), TOKEN);
    let work = tempfile::tempdir().unwrap();
    cloud_config(work.path(), &host, "app-prod", "g1");
    tf.init(work.path()).expect_code(0, "init");
    tf.apply(work.path()).expect_code(0, "apply");
    let before = state_commits(&host);

    // A LOCK over http holds the workspace: the cloud apply fails on it and writes nothing.
    let state = "/state/default/workspaces/app-prod.tfstate";
    let lock = r#"{"ID":"http-lock-1","Operation":"OperationTypeApply","Who":"ci@runner","Created":"2026-11-29T10:00:00Z"}"#;
    let (status, body) = host.with_token(TOKEN, "LOCK", state, Some(lock));
    assert_eq!(status, 200, "{body}");
    let (status, body) = host.with_token(
        TOKEN,
        "GET",
        &format!("/api/v2/workspaces/{}", host.workspace_id("app-prod")),
        None,
    );
    assert_eq!(status, 200);
    assert_eq!(
        json(&body)["data"]["attributes"]["locked"],
        true,
        "the API shows it locked"
    );
    cloud_config(work.path(), &host, "app-prod", "g2");
    let refused = tf.apply(work.path());
    assert_ne!(refused.code, Some(0), "{}", refused.combined());
    assert!(
        refused.combined().to_lowercase().contains("lock"),
        "{}",
        refused.combined()
    );
    assert_eq!(state_commits(&host), before, "nothing was written");
    let (status, body) = host.with_token(TOKEN, "UNLOCK", state, Some(lock));
    assert_eq!(status, 200, "{body}");

    // An API lock holds the http protocol: a LOCK gets 423 with a LockInfo that says so.
    let id = host.workspace_id("app-prod");
    let (status, body) = host.with_token(
        TOKEN,
        "POST",
        &format!("/api/v2/workspaces/{id}/actions/lock"),
        Some(r#"{"reason":"held for the test"}"#),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["data"]["attributes"]["locked"], true);
    let (status, body) = host.with_token(TOKEN, "LOCK", state, Some(lock));
    assert_eq!(status, 423, "{body}");
    let holder = json(&body);
    assert_eq!(holder["Who"], "workspace API", "{holder}");
    assert!(
        holder["Info"]
            .as_str()
            .unwrap()
            .contains("through the workspace API"),
        "{holder}"
    );
    assert!(!holder["ID"].as_str().unwrap().is_empty(), "{holder}");
    assert!(!holder["Created"].as_str().unwrap().is_empty(), "{holder}");
    // A POST without the lock's ID is refused too.
    let (_, stored) = host.with_token(TOKEN, "GET", state, None);
    let (status, _) = host.with_token(TOKEN, "POST", state, Some(&stored));
    assert_eq!(status, 423);
    let (status, body) = host.with_token(
        TOKEN,
        "POST",
        &format!("/api/v2/workspaces/{id}/actions/unlock"),
        None,
    );
    assert_eq!(status, 200, "{body}");
    assert!(refs_under(&host.bare(), "refs/heads/locks/").is_empty());

    tf.apply(work.path())
        .expect_code(0, "apply once the locks are gone");
    let pulled = tf.run(work.path(), &["state", "pull"]);
    let (_, over_http) = host.with_token(TOKEN, "GET", state, None);
    assert_eq!(json(&over_http), json(&pulled.stdout));
}

#[test]
fn a_state_moves_from_the_http_backend_to_the_cloud_block_and_back_with_its_history() {
    let host = WorkspaceHost::start(&[]);
    let tf = host.terraform(&Terraform::installed("1.15.5"), TOKEN);
    let work = tempfile::tempdir().unwrap();
    http_config(work.path(), &host, "g1");
    tf.init(work.path()).expect_code(0, "init over http");
    tf.apply(work.path()).expect_code(0, "apply over http");
    let over_http = json(&tf.run(work.path(), &["state", "pull"]).stdout);
    let before = state_commits(&host);
    assert_eq!(before.len(), 1, "{before:?}");

    // The cloud block's migration asks whether to copy the state; it is answered on stdin.
    cloud_config(work.path(), &host, "app-prod", "g1");
    let migrated = tf.run_with_input(work.path(), &["init", "-input=true", "-no-color"], "yes\n");
    migrated.expect_code(0, "http → cloud");
    tf.plan(work.path())
        .expect_code(0, "the cloud block finds the state: nothing to change");
    let in_cloud = json(&tf.run(work.path(), &["state", "pull"]).stdout);
    assert_eq!(in_cloud["lineage"], over_http["lineage"]);
    assert_eq!(in_cloud["resources"], over_http["resources"]);
    cloud_config(work.path(), &host, "app-prod", "g2");
    tf.apply(work.path()).expect_code(0, "apply in the cloud");

    // Terraform migrates nothing out of the cloud block ("not yet implemented"), and with
    // gitstate nothing has to move: the workspace's state is the http address's state.
    // Terraform remembers the cloud workspace's name as the selected workspace; the http
    // backend has only `default`.
    http_config(work.path(), &host, "g2");
    std::fs::remove_file(work.path().join(".terraform/environment")).unwrap();
    let back = tf.run(
        work.path(),
        &["init", "-reconfigure", "-input=false", "-no-color"],
    );
    back.expect_code(0, "cloud → http");
    tf.plan(work.path())
        .expect_code(0, "the http backend finds the state: nothing to change");
    let after = state_commits(&host);
    assert!(after.len() > before.len(), "{after:?}");
    assert_eq!(
        after.last(),
        before.last(),
        "the first commit is still in the history"
    );
    let last = json(&tf.run(work.path(), &["state", "pull"]).stdout);
    assert_eq!(
        last["lineage"], over_http["lineage"],
        "one lineage all along"
    );
    assert!(refs_under(&host.bare(), "refs/heads/locks/").is_empty());
}

#[test]
fn team_mode_boundaries_hold_on_the_workspace_api() {
    let narrow = "narrow-token-ws";
    let reader = "reader-token-ws";
    let outputs = "outputs-token-ws";
    let host = WorkspaceHost::start(&[
        format!("{};paths=other/**", hash(narrow)),
        format!("{};access=read-only;paths=workspaces/**", hash(reader)),
        format!("{};access=outputs-only", hash(outputs)),
    ]);
    let tf = host.terraform(&Terraform::installed("1.15.5"), TOKEN);
    let work = tempfile::tempdir().unwrap();
    cloud_config(work.path(), &host, "app-prod", "g1");
    tf.init(work.path()).expect_code(0, "init");
    tf.apply(work.path()).expect_code(0, "apply");
    let id = host.workspace_id("app-prod");
    let by_name = "/api/v2/organizations/default/workspaces/app-prod";
    let lock = format!("/api/v2/workspaces/{id}/actions/lock");
    let versions = format!("/api/v2/workspaces/{id}/state-versions");
    let current = format!("/api/v2/workspaces/{id}/current-state-version");
    let commits = state_commits(&host);

    // Anonymous: 401 in the API's error shape.
    for path in [
        by_name,
        "/api/v2/organizations/default/entitlement-set",
        &current,
    ] {
        let (status, body) = host.request("GET", path, None, None);
        assert_eq!(status, 401, "{path}: {body}");
        let error = &json(&body)["errors"][0];
        assert_eq!(error["status"], "401", "{body}");
        assert!(
            error["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{body}"
        );
    }

    // A token limited to other paths sees no such workspace, and locks and writes nothing.
    let state = base64_state(&host);
    let create = format!(
        r#"{{"data":{{"type":"state-versions","attributes":{{"serial":9,"lineage":"x","state":"{state}"}}}}}}"#
    );
    for (method, path, body) in [
        ("GET", by_name, None),
        ("GET", current.as_str(), None),
        ("POST", lock.as_str(), Some("{}")),
        ("POST", versions.as_str(), Some(create.as_str())),
    ] {
        let (status, answer) = host.with_token(narrow, method, path, body);
        assert_eq!(status, 404, "{method} {path}: {answer}");
        assert!(
            answer.contains(
                "does not exist in the organization default, or this credential may not use it"
            ),
            "{answer}"
        );
    }
    let denied = host.terraform(&Terraform::installed("1.15.5"), narrow);
    let elsewhere = tempfile::tempdir().unwrap();
    cloud_config(elsewhere.path(), &host, "app-prod", "g1");
    let out = denied.run(elsewhere.path(), &["plan", "-input=false", "-no-color"]);
    assert_ne!(out.code, Some(0), "{}", out.combined());

    // Read-only reads, and neither locks nor writes.
    let (status, _) = host.with_token(reader, "GET", &current, None);
    assert_eq!(status, 200);
    for (path, body) in [(lock.as_str(), "{}"), (versions.as_str(), create.as_str())] {
        let (status, answer) = host.with_token(reader, "POST", path, Some(body));
        assert_eq!(status, 403, "{path}: {answer}");
        assert!(answer.contains("may only read"), "{answer}");
    }

    // Outputs-only downloads the outputs only.
    let (status, body) = host.with_token(outputs, "GET", &current, None);
    assert_eq!(status, 200, "{body}");
    let download = json(&body)["data"]["attributes"]["hosted-state-download-url"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, reduced) = host.with_token(outputs, "GET", &download, None);
    assert_eq!(status, 200, "{reduced}");
    assert_eq!(
        json(&reduced)["resources"],
        serde_json::json!([]),
        "{reduced}"
    );
    let (_, whole) = host.with_token(TOKEN, "GET", &download, None);
    assert_ne!(json(&whole)["resources"], serde_json::json!([]));

    assert_eq!(state_commits(&host), commits, "nothing was written");
    assert!(refs_under(&host.bare(), "refs/heads/locks/").is_empty());
    let log = host.server.log();
    for token in [TOKEN, narrow, reader, outputs] {
        assert!(!log.contains(token), "the log holds {token}");
    }
}

#[test]
fn what_gitstate_does_not_do_is_a_404_that_says_so() {
    let host = WorkspaceHost::start(&[]);
    let (status, body) = host.with_token(TOKEN, "GET", "/.well-known/terraform.json", None);
    assert_eq!(status, 200);
    assert_eq!(json(&body)["tfe.v2"], "/api/v2/");
    for (path, says) in [
        ("/api/v2/runs", "runs no plans"),
        ("/api/v2/workspaces/ws-x/vars", "no variables"),
        ("/api/v2/organizations/default/policy-sets", "no policies"),
        ("/api/v2/nothing-here", "only the workspace"),
        ("/api/v2/workspaces/ws-x/tag-bindings", "tags as names"),
        (
            "/api/v2/state-versions/sv-x/outputs",
            "not those of older state versions",
        ),
    ] {
        let (status, body) = host.with_token(TOKEN, "GET", path, None);
        assert_eq!(status, 404, "{path}: {body}");
        let detail = json(&body)["errors"][0]["detail"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(detail.contains(says), "{path}: {detail}");
    }
    let (status, body) = host.with_token(
        TOKEN,
        "POST",
        "/api/v2/organizations/default/workspaces",
        Some(r#"{"data":{"type":"workspaces","attributes":{"name":"bad.name"}}}"#),
    );
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("only letters, digits, '-' and '_'"), "{body}");
    let (status, body) = host.with_token(
        TOKEN,
        "POST",
        "/api/v2/organizations/default/workspaces",
        Some(r#"{"data":{"type":"workspaces","attributes":{"name":"remote","execution-mode":"remote"}}}"#),
    );
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("runs no plans"), "{body}");
    assert!(
        refs_under(&host.bare(), "refs/heads/").is_empty(),
        "nothing was written"
    );
}

/// The state the team token reads at the workspace's path, base64.
fn base64_state(host: &WorkspaceHost) -> String {
    use base64::Engine;
    let (status, body) = host.with_token(
        TOKEN,
        "GET",
        "/state/default/workspaces/app-prod.tfstate",
        None,
    );
    assert_eq!(status, 200, "{body}");
    base64::engine::general_purpose::STANDARD.encode(body)
}

/// `main.tf` with the `cloud` block selecting its workspaces by `tags`, one `null_resource`
/// and an output naming the workspace.
fn cloud_tags_config(dir: &Path, host: &WorkspaceHost, tags: &[&str], generation: &str) {
    let tags = tags
        .iter()
        .map(|t| format!("{t:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    std::fs::write(
        dir.join("main.tf"),
        format!(
            r#"terraform {{
  cloud {{
    hostname     = "{}"
    organization = "default"
    workspaces {{
      tags = [{tags}]
    }}
  }}
}}

resource "null_resource" "r0" {{
  triggers = {{
    generation = "{generation}"
    workspace  = terraform.workspace
  }}
}}

output "workspace" {{
  value = terraform.workspace
}}

output "secret" {{
  value     = "s3cret-${{terraform.workspace}}"
  sensitive = true
}}
"#,
            host.hostname()
        ),
    )
    .unwrap();
}

/// Creates the workspace `name` with `tags` through the API (as the team token).
fn create_workspace(host: &WorkspaceHost, name: &str, tags: &[&str]) {
    let tags = tags
        .iter()
        .map(|t| format!(r#"{{"type":"tags","attributes":{{"name":{t:?}}}}}"#))
        .collect::<Vec<_>>()
        .join(",");
    let (status, body) = host.with_token(
        TOKEN,
        "POST",
        "/api/v2/organizations/default/workspaces",
        Some(&format!(
            r#"{{"data":{{"type":"workspaces","attributes":{{"name":{name:?}}},"relationships":{{"tags":{{"data":[{tags}]}}}}}}}}"#
        )),
    );
    assert_eq!(status, 201, "{body}");
}

/// The names a list through the API gives `token` (every page of `size`), and its total.
fn listed(host: &WorkspaceHost, token: &str, query: &str) -> (Vec<String>, u64) {
    let mut names = Vec::new();
    let mut next = Some(format!("/api/v2/organizations/default/workspaces?{query}"));
    let mut total = 0;
    while let Some(address) = next.take() {
        let (status, body) = host.with_token(token, "GET", &address, None);
        assert_eq!(status, 200, "{address}: {body}");
        let page = json(&body);
        for w in page["data"].as_array().unwrap() {
            names.push(w["attributes"]["name"].as_str().unwrap().to_owned());
        }
        total = page["meta"]["pagination"]["total-count"].as_u64().unwrap();
        next = page["links"]["next"].as_str().map(str::to_owned);
    }
    (names, total)
}

/// The tags the API gives the workspace `name`.
fn tag_names(host: &WorkspaceHost, name: &str) -> Vec<String> {
    let (status, body) = host.with_token(
        TOKEN,
        "GET",
        &format!("/api/v2/organizations/default/workspaces/{name}"),
        None,
    );
    assert_eq!(status, 200, "{body}");
    serde_json::from_value(json(&body)["data"]["attributes"]["tag-names"].clone()).unwrap()
}

#[test]
fn the_cloud_block_by_tags_creates_lists_selects_and_applies_workspaces() {
    for tf in versions() {
        let host = WorkspaceHost::start(&[]);
        let tf = host.terraform(&tf, TOKEN);
        // One tagged workspace for init to select, and one without the tags.
        create_workspace(&host, "seed", &["app", "gitstate"]);
        create_workspace(&host, "untagged", &[]);
        let work = tempfile::tempdir().unwrap();
        cloud_tags_config(work.path(), &host, &["app", "gitstate"], "g1");
        tf.init(work.path())
            .expect_code(0, "init selects the one tagged workspace");
        for name in ["a", "b"] {
            tf.run(work.path(), &["workspace", "new", "-no-color", name])
                .expect_code(0, "workspace new");
            assert_eq!(
                git_log_subjects(
                    &host.bare(),
                    "main",
                    &format!(".gitstate/workspaces/{name}.json")
                ),
                [format!(
                    "Create workspace {name} (workspaces/{name}.tfstate) by workspace API"
                )],
                "{}",
                tf.version
            );
            assert_eq!(
                tag_names(&host, name),
                ["app", "gitstate"],
                "{}",
                tf.version
            );
        }
        let list = tf.run(work.path(), &["workspace", "list", "-no-color"]);
        list.expect_code(0, "workspace list");
        let shown: Vec<&str> = list.stdout.lines().map(str::trim).collect();
        for line in ["a", "* b", "seed"] {
            assert!(shown.contains(&line), "{}: {}", tf.version, list.stdout);
        }
        assert!(
            !list.stdout.contains("untagged"),
            "{}: only the tagged workspaces: {}",
            tf.version,
            list.stdout
        );
        for name in ["a", "b"] {
            tf.run(work.path(), &["workspace", "select", "-no-color", name])
                .expect_code(0, "workspace select");
            let show = tf.run(work.path(), &["workspace", "show", "-no-color"]);
            assert_eq!(show.stdout.trim(), name, "{}", tf.version);
            tf.apply(work.path())
                .expect_code(0, "apply in the workspace");
            let commits =
                git_log_subjects(&host.bare(), "main", &format!("workspaces/{name}.tfstate"));
            assert_eq!(commits.len(), 1, "{}: {commits:?}", tf.version);
            let (status, state) = host.with_token(
                TOKEN,
                "GET",
                &format!("/state/default/workspaces/{name}.tfstate"),
                None,
            );
            assert_eq!(status, 200, "{state}");
            assert_eq!(json(&state)["outputs"]["workspace"]["value"], name);
            // `terraform output` reads the current state version's outputs, a sensitive one
            // by its id.
            let output = tf.run(work.path(), &["output", "-raw", "workspace"]);
            assert_eq!(output.stdout, name, "{}: {}", tf.version, output.combined());
            let secret = tf.run(work.path(), &["output", "-raw", "secret"]);
            assert_eq!(
                secret.stdout,
                format!("s3cret-{name}"),
                "{}: {}",
                tf.version,
                secret.combined()
            );
        }
        assert!(refs_under(&host.bare(), "refs/heads/locks/").is_empty());

        // Delete: refused while the workspace's state manages resources, unless forced; the state and the
        // record go in one commit, and the state's history stays in git.
        tf.run(work.path(), &["workspace", "select", "-no-color", "a"])
            .expect_code(0, "select a");
        let (status, body) = host.with_token(
            TOKEN,
            "POST",
            "/api/v2/organizations/default/workspaces/b/actions/safe-delete",
            None,
        );
        assert_eq!(status, 409, "{body}");
        assert!(body.contains("manages 1 resource"), "{body}");
        let refused = tf.run(work.path(), &["workspace", "delete", "-no-color", "b"]);
        assert_ne!(refused.code, Some(0), "{}", refused.combined());
        let b_state = "workspaces/b.tfstate";
        assert_eq!(git_log_subjects(&host.bare(), "main", b_state).len(), 1);
        tf.run(
            work.path(),
            &["workspace", "delete", "-force", "-no-color", "b"],
        )
        .expect_code(0, "workspace delete -force");
        let history = git_log_subjects(&host.bare(), "main", b_state);
        assert_eq!(history.len(), 2, "{}: {history:?}", tf.version);
        assert_eq!(
            history[0], "Delete workspace b (workspaces/b.tfstate) by workspace API",
            "{}",
            tf.version
        );
        assert!(
            history[1].starts_with("Update workspaces/b.tfstate"),
            "{history:?}"
        );
        assert_eq!(
            git_log_subjects(&host.bare(), "main", ".gitstate/workspaces/b.json")[0],
            history[0],
            "the record went in the same commit"
        );
        let (status, _) = host.with_token(
            TOKEN,
            "GET",
            "/api/v2/organizations/default/workspaces/b",
            None,
        );
        assert_eq!(status, 404);
        // A workspace without a state is deleted without force (the API's safe delete).
        tf.run(work.path(), &["workspace", "new", "-no-color", "c"])
            .expect_code(0, "workspace new c");
        tf.run(work.path(), &["workspace", "select", "-no-color", "a"])
            .expect_code(0, "select a");
        tf.run(work.path(), &["workspace", "delete", "-no-color", "c"])
            .expect_code(0, "workspace delete c");
        let list = tf.run(work.path(), &["workspace", "list", "-no-color"]);
        let shown: Vec<&str> = list.stdout.lines().map(str::trim).collect();
        assert!(
            shown.contains(&"* a") && !shown.contains(&"b") && !shown.contains(&"c"),
            "{}: {}",
            tf.version,
            list.stdout
        );
    }
}

/// `main.tf` with the `remote` backend and `workspaces { prefix = "app-" }`, and an output.
fn remote_prefix_config(dir: &Path, host: &WorkspaceHost, generation: &str) {
    std::fs::write(
        dir.join("main.tf"),
        format!(
            r#"terraform {{
  backend "remote" {{
    hostname     = "{}"
    organization = "default"
    workspaces {{
      prefix = "app-"
    }}
  }}
}}

resource "null_resource" "r0" {{
  triggers = {{
    generation = "{generation}"
  }}
}}

output "greeting" {{
  value = "hello from ${{terraform.workspace}}"
}}
"#,
            host.hostname()
        ),
    )
    .unwrap();
}

/// Terraform 1.0.3 and the 1.11.4 on PATH (when it is there): the `remote` backend.
fn remote_versions() -> Vec<Terraform> {
    let mut all = vec![Terraform::installed("1.0.3")];
    match Terraform::from_path() {
        Some(tf) if tf.version == "1.11.4" => all.push(tf),
        _ => eprintln!("no Terraform 1.11.4 on PATH: only 1.0.3 is tested"),
    }
    all
}

#[test]
fn the_remote_backend_with_a_prefix_lists_its_workspaces_and_another_reads_their_outputs() {
    for tf in remote_versions() {
        let host = WorkspaceHost::start(&[]);
        let tf = host.terraform(&tf, TOKEN);
        // The remote backend's init needs a workspace of the prefix to select.
        create_workspace(&host, "app-first", &[]);
        create_workspace(&host, "other", &[]);
        let work = tempfile::tempdir().unwrap();
        remote_prefix_config(work.path(), &host, "g1");
        let mut first = tf.clone();
        first.env.push(("TF_WORKSPACE".into(), "first".into()));
        first.init(work.path()).expect_code(0, "init");
        tf.run(work.path(), &["workspace", "new", "-no-color", "dev"])
            .expect_code(0, "workspace new dev");
        assert_eq!(
            git_log_subjects(&host.bare(), "main", ".gitstate/workspaces/app-dev.json"),
            ["Create workspace app-dev (workspaces/app-dev.tfstate) by workspace API"],
            "{}",
            tf.version
        );
        tf.apply(work.path()).expect_code(0, "apply in dev");
        let list = tf.run(work.path(), &["workspace", "list", "-no-color"]);
        list.expect_code(0, "workspace list");
        let shown: Vec<&str> = list.stdout.lines().map(str::trim).collect();
        assert!(
            shown.contains(&"* dev") && shown.contains(&"first"),
            "{}: {}",
            tf.version,
            list.stdout
        );
        assert!(
            !list.stdout.contains("other"),
            "{}: only app-*: {}",
            tf.version,
            list.stdout
        );
        let pulled = tf.run(work.path(), &["state", "pull"]);
        pulled.expect_code(0, "state pull");
        let (status, over_http) = host.with_token(
            TOKEN,
            "GET",
            "/state/default/workspaces/app-dev.tfstate",
            None,
        );
        assert_eq!(status, 200, "{over_http}");
        assert_eq!(json(&over_http), json(&pulled.stdout), "{}", tf.version);

        // Another configuration reads dev's outputs with terraform_remote_state.
        let reader = tempfile::tempdir().unwrap();
        std::fs::write(
            reader.path().join("main.tf"),
            format!(
                r#"data "terraform_remote_state" "app" {{
  backend = "remote"
  config = {{
    hostname     = "{}"
    organization = "default"
    workspaces = {{
      name = "app-dev"
    }}
  }}
}}

output "read" {{
  value = data.terraform_remote_state.app.outputs.greeting
}}
"#,
                host.hostname()
            ),
        )
        .unwrap();
        tf.init(reader.path()).expect_code(0, "init the reader");
        tf.apply(reader.path())
            .expect_code(0, "apply reads the remote state");
        let read = tf.run(reader.path(), &["output", "-raw", "read"]);
        assert_eq!(read.stdout.trim(), "hello from dev", "{}", tf.version);
    }
}

#[test]
fn team_mode_lists_tags_deletes_and_reads_outputs_only_as_each_token_may() {
    let narrow = "narrow-token-list";
    let reader = "reader-token-list";
    let outputs = "outputs-token-list";
    let host = WorkspaceHost::start(&[
        format!("{};paths=workspaces/team-a-*", hash(narrow)),
        format!("{};access=read-only", hash(reader)),
        format!("{};access=outputs-only", hash(outputs)),
    ]);
    for name in ["team-a-one", "team-a-two", "team-b-one"] {
        create_workspace(&host, name, &["teams"]);
    }
    let list = "/api/v2/organizations/default/workspaces";
    let (status, answer) = host.request("GET", list, None, None);
    assert_eq!(status, 401, "anonymous: {answer}");
    let (status, answer) =
        host.with_token(TOKEN, "GET", &format!("{list}?page%5Bsize%5D=101"), None);
    assert_eq!(status, 422, "{answer}");
    assert!(answer.contains("at most 100"), "{answer}");
    let (all, total) = listed(&host, TOKEN, "page%5Bsize%5D=1");
    assert_eq!(
        all,
        ["team-a-one", "team-a-two", "team-b-one"],
        "three pages of one"
    );
    assert_eq!(total, 3);
    let (seen, total) = listed(&host, narrow, "search%5Btags%5D=teams");
    assert_eq!(seen, ["team-a-one", "team-a-two"], "the narrow token's own");
    assert_eq!(total, 2);
    let (found, _) = listed(&host, TOKEN, "search%5Bname%5D=b-on");
    assert_eq!(found, ["team-b-one"]);
    // Terraform lists as the narrow token does.
    let tf = host.terraform(&Terraform::installed("1.15.5"), narrow);
    let work = tempfile::tempdir().unwrap();
    cloud_tags_config(work.path(), &host, &["teams"], "g1");
    let mut selected = tf.clone();
    selected
        .env
        .push(("TF_WORKSPACE".into(), "team-a-one".into()));
    selected.init(work.path()).expect_code(0, "init");
    let list = selected.run(work.path(), &["workspace", "list", "-no-color"]);
    assert!(
        list.stdout.contains("team-a-two") && !list.stdout.contains("team-b-one"),
        "{}",
        list.combined()
    );

    // Read-only reads the tags and cannot change them; a bad tag is one sentence.
    let id = host.workspace_id("team-a-one");
    let tags = format!("/api/v2/workspaces/{id}/relationships/tags");
    let body = r#"{"data":[{"type":"tags","attributes":{"name":"extra"}}]}"#;
    let (status, answer) = host.with_token(reader, "GET", &tags, None);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(json(&answer)["data"][0]["attributes"]["name"], "teams");
    let (status, answer) = host.with_token(reader, "POST", &tags, Some(body));
    assert_eq!(status, 403, "{answer}");
    let (status, answer) = host.with_token(
        narrow,
        "POST",
        &tags.replace(&id, &host.workspace_id("team-b-one")),
        Some(body),
    );
    assert_eq!(status, 404, "{answer}");
    let (status, answer) = host.with_token(
        TOKEN,
        "POST",
        &tags,
        Some(r#"{"data":[{"type":"tags","attributes":{"name":"a b"}}]}"#),
    );
    assert_eq!(status, 422, "{answer}");
    assert_eq!(
        git_log_subjects(&host.bare(), "main", ".gitstate/workspaces/team-a-one.json").len(),
        1,
        "nothing was written"
    );
    let (status, answer) = host.with_token(TOKEN, "POST", &tags, Some(body));
    assert_eq!(status, 204, "{answer}");
    assert_eq!(tag_names(&host, "team-a-one"), ["extra", "teams"]);

    // A locked workspace is never deleted.
    let lock = format!("/api/v2/workspaces/{id}/actions/lock");
    let (status, answer) = host.with_token(TOKEN, "POST", &lock, Some("{}"));
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = host.with_token(
        TOKEN,
        "DELETE",
        "/api/v2/organizations/default/workspaces/team-a-one",
        None,
    );
    assert_eq!(status, 409, "{answer}");
    assert!(
        answer.contains("cannot be deleted while locked"),
        "{answer}"
    );
    let (status, answer) = host.with_token(TOKEN, "POST", &lock.replace("/lock", "/unlock"), None);
    assert_eq!(status, 200, "{answer}");

    // Read-only cannot delete; a narrow token cannot see another team's workspace to delete.
    let one = "/api/v2/organizations/default/workspaces/team-a-one";
    let (status, answer) = host.with_token(reader, "DELETE", one, None);
    assert_eq!(status, 403, "{answer}");
    let other = "/api/v2/organizations/default/workspaces/team-b-one";
    let (status, answer) = host.with_token(narrow, "DELETE", other, None);
    assert_eq!(status, 404, "{answer}");
    let (status, answer) = host.with_token(
        narrow,
        "POST",
        &format!(
            "/api/v2/workspaces/{}/actions/safe-delete",
            host.workspace_id("team-b-one")
        ),
        None,
    );
    assert_eq!(status, 404, "{answer}");
    let (all, _) = listed(&host, TOKEN, "");
    assert_eq!(all.len(), 3, "nothing was deleted: {all:?}");
    // The narrow token deletes its own (no state: the safe delete).
    let (status, answer) = host.with_token(
        narrow,
        "POST",
        &format!(
            "/api/v2/workspaces/{}/actions/safe-delete",
            host.workspace_id("team-a-two")
        ),
        None,
    );
    assert_eq!(status, 204, "{answer}");
    let (all, _) = listed(&host, TOKEN, "");
    assert_eq!(all, ["team-a-one", "team-b-one"]);

    // Outputs-only: the current outputs (a sensitive value only by its id, as the API gives
    // it), and nothing else.
    let state = r#"{"version":4,"terraform_version":"1.15.5","serial":1,"lineage":"l-out","outputs":{"url":{"value":"https://db","type":"string"},"password":{"value":"hunter2","type":"string","sensitive":true}},"resources":[]}"#;
    let (status, answer) = host.with_token(
        TOKEN,
        "POST",
        "/state/default/workspaces/team-b-one.tfstate",
        Some(state),
    );
    assert_eq!(status, 200, "{answer}");
    let b_id = host.workspace_id("team-b-one");
    let (status, answer) = host.with_token(
        outputs,
        "GET",
        &format!("/api/v2/workspaces/{b_id}/current-state-version-outputs"),
        None,
    );
    assert_eq!(status, 200, "{answer}");
    let listed_outputs = json(&answer)["data"].as_array().unwrap().clone();
    assert_eq!(listed_outputs.len(), 2, "{answer}");
    let password = &listed_outputs[0];
    assert_eq!(password["attributes"]["name"], "password");
    assert_eq!(password["attributes"]["sensitive"], true);
    assert_eq!(password["attributes"]["value"], serde_json::Value::Null);
    assert_eq!(listed_outputs[1]["attributes"]["value"], "https://db");
    assert_eq!(listed_outputs[1]["attributes"]["detailed-type"], "string");
    let (status, answer) = host.with_token(
        outputs,
        "GET",
        &format!(
            "/api/v2/state-version-outputs/{}",
            password["id"].as_str().unwrap()
        ),
        None,
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(json(&answer)["data"]["attributes"]["value"], "hunter2");
    for (method, path, body) in [
        (
            "POST",
            format!("/api/v2/workspaces/{b_id}/actions/lock"),
            Some("{}"),
        ),
        (
            "POST",
            format!("/api/v2/workspaces/{b_id}/relationships/tags"),
            Some(body),
        ),
        ("DELETE", format!("/api/v2/workspaces/{b_id}"), None),
    ] {
        let (status, answer) = host.with_token(outputs, method, &path, body);
        assert_eq!(status, 403, "{method} {path}: {answer}");
    }
    // A narrow token cannot read another team's outputs.
    let (status, _) = host.with_token(
        narrow,
        "GET",
        &format!("/api/v2/workspaces/{b_id}/current-state-version-outputs"),
        None,
    );
    assert_eq!(status, 404);
    let log = host.server.log();
    for token in [TOKEN, narrow, reader, outputs] {
        assert!(!log.contains(token), "the log holds {token}");
    }
}

/// Waits for `child` (a [`Terraform::spawn`]) at most ten minutes; its exit code.
fn wait_for(child: &mut std::process::Child, what: &str) -> Option<i32> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(600);
    loop {
        if let Some(status) = child.try_wait().expect("wait terraform") {
            return status.code();
        }
        if std::time::Instant::now() > deadline {
            let _ = Command::new("kill")
                .args(["-KILL", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
            panic!("{what} ran longer than ten minutes");
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
}

/// The state at `workspaces/{name}.tfstate`, read over the http protocol with [`TOKEN`].
fn state_over_http(host: &WorkspaceHost, name: &str) -> serde_json::Value {
    let (status, body) = host.with_token(
        TOKEN,
        "GET",
        &format!("/state/default/workspaces/{name}.tfstate"),
        None,
    );
    assert_eq!(status, 200, "{name}: {body}");
    json(&body)
}

/// What provider-terraform does for each Workspace object, here in one configuration directory
/// shared by all: `init` (the `cloud` block selecting workspaces by tags), the workspace of the
/// object's name (`workspace select -or-create=true NAME`, Terraform ≥ 1.4's one command for
/// the provider's `workspace select`, then `workspace new` when it fails), a plan without the
/// lock, `apply -auto-approve`, and at the object's deletion `destroy -auto-approve`. The
/// credential is the README's: the ProviderConfig's `.terraformrc` in the directory, named by
/// `TF_CLI_CONFIG_FILE=./.terraformrc` (the provider gives it to `init` only; the Workspace's
/// `env` to every command).
#[test]
fn provider_terraform_drives_many_workspaces_from_one_directory() {
    for tf in versions() {
        let v = tf.version.clone();
        let host = WorkspaceHost::start(&[]);
        let mut tf = host.terraform(&tf, TOKEN);
        let work = tempfile::tempdir().unwrap();
        let dir = work.path();
        cloud_tags_config(dir, &host, &["crossplane"], "g1");
        std::fs::copy(&tf.cli_config, dir.join(".terraformrc")).unwrap();
        tf.env
            .push(("TF_CLI_CONFIG_FILE".into(), "./.terraformrc".into()));
        // `init -input=false` needs a workspace having the tags to start in (HCP Terraform's
        // too): the one an operator creates once, answering an interactive `init`.
        let seeded = tf.run_with_input(dir, &["init", "-input=true", "-no-color"], "seed\n");
        seeded.expect_code(0, "an interactive init creates the first workspace");
        assert_eq!(tag_names(&host, "seed"), ["crossplane"], "{v}");
        let names: Vec<String> = (0..5).map(|i| format!("object-{i}")).collect();
        let records = |name: &str| {
            git_log_subjects(
                &host.bare(),
                "main",
                &format!(".gitstate/workspaces/{name}.json"),
            )
        };
        let created = |name: &str| {
            [format!(
                "Create workspace {name} (workspaces/{name}.tfstate) by workspace API"
            )]
        };
        let select = |name: &str| {
            let out = tf.run(
                dir,
                &["workspace", "select", "-or-create=true", "-no-color", name],
            );
            out.expect_code(0, "workspace select -or-create=true");
            out
        };
        for name in &names {
            tf.init(dir).expect_code(0, "init");
            let out = select(name);
            assert!(
                out.stdout.contains("Created and switched to workspace"),
                "{v}: {}",
                out.combined()
            );
            assert_eq!(records(name), created(name), "{v}");
            // The next reconcile selects the workspace it created, without creating it again.
            tf.init(dir).expect_code(0, "init again");
            let out = select(name);
            assert!(!out.stdout.contains("Created"), "{v}: {}", out.combined());
            assert_eq!(records(name), created(name), "{v}: created once");
            assert_eq!(tag_names(&host, name), ["crossplane"], "{v}");
            // Observe (a plan without the lock, as the provider runs it), then create.
            let diff = [
                "plan",
                "-no-color",
                "-input=false",
                "-detailed-exitcode",
                "-lock=false",
            ];
            tf.run(dir, &diff).expect_code(2, "a diff");
            tf.apply(dir).expect_code(0, "apply");
            tf.run(dir, &diff).expect_code(0, "no diff after the apply");
        }
        let list = tf.run(dir, &["workspace", "list", "-no-color"]);
        list.expect_code(0, "workspace list");
        let shown: Vec<&str> = list.stdout.lines().map(str::trim).collect();
        for name in names[..4].iter().map(String::as_str).chain(["seed"]) {
            assert!(shown.contains(&name), "{v}: {}", list.stdout);
        }
        assert!(shown.contains(&"* object-4"), "{v}: {}", list.stdout);
        // Each state, at its path over the http protocol, holds its own resource.
        for name in &names {
            let state = state_over_http(&host, name);
            let resources = state["resources"].as_array().unwrap();
            assert_eq!(resources.len(), 1, "{v}: {state}");
            assert_eq!(
                resources[0]["instances"][0]["attributes"]["triggers"]["workspace"], **name,
                "{v}: {state}"
            );
            let commits =
                git_log_subjects(&host.bare(), "main", &format!("workspaces/{name}.tfstate"));
            assert_eq!(commits.len(), 1, "{v}: {commits:?}");
        }
        // The objects' deletion: destroy in each; the states keep their history.
        for name in &names {
            tf.init(dir).expect_code(0, "init");
            select(name);
            tf.run(
                dir,
                &["destroy", "-auto-approve", "-input=false", "-no-color"],
            )
            .expect_code(0, "destroy");
            let state = state_over_http(&host, name);
            assert_eq!(state["resources"], serde_json::json!([]), "{v}: {state}");
            let commits =
                git_log_subjects(&host.bare(), "main", &format!("workspaces/{name}.tfstate"));
            assert_eq!(commits.len(), 2, "{v}: {commits:?}");
            assert!(
                commits
                    .iter()
                    .all(|c| c.starts_with(&format!("Update workspaces/{name}.tfstate (serial"))),
                "{v}: {commits:?}"
            );
        }
        // The provider's cleanup switches to the workspace `default`, which Terraform has not
        // with the `cloud` block, whatever the host; a workspace emptied by `destroy` is removed
        // by a plain `workspace delete` (the API's safe delete takes a state without resources,
        // as HCP Terraform's does), its history kept.
        let refused = tf.run(dir, &["workspace", "select", "-no-color", "default"]);
        assert_ne!(refused.code, Some(0), "{v}: {}", refused.combined());
        tf.run(dir, &["workspace", "select", "-no-color", "seed"])
            .expect_code(0, "select seed");
        tf.run(dir, &["workspace", "delete", "-no-color", "object-0"])
            .expect_code(
                0,
                "workspace delete of an emptied workspace, without -force",
            );
        let commits = git_log_subjects(&host.bare(), "main", "workspaces/object-0.tfstate");
        assert_eq!(commits.len(), 3, "{v}: {commits:?}");
        assert_eq!(
            commits[0], "Delete workspace object-0 (workspaces/object-0.tfstate) by workspace API",
            "{v}"
        );
        // The older provider: `workspace select` fails, then `workspace new`.
        tf.init(dir).expect_code(0, "init");
        let refused = tf.run(dir, &["workspace", "select", "-no-color", "legacy"]);
        assert_ne!(refused.code, Some(0), "{v}: {}", refused.combined());
        assert!(
            records("legacy").is_empty(),
            "{v}: a failed select creates nothing"
        );
        tf.run(dir, &["workspace", "new", "-no-color", "legacy"])
            .expect_code(0, "workspace new");
        assert_eq!(records("legacy"), created("legacy"), "{v}");
        tf.apply(dir).expect_code(0, "apply");
        let state = state_over_http(&host, "legacy");
        assert_eq!(
            state["resources"][0]["instances"][0]["attributes"]["triggers"]["workspace"], "legacy",
            "{v}: {state}"
        );
        assert!(refs_under(&host.bare(), "refs/heads/locks/").is_empty());
    }
}

/// Two CI jobs apply one workspace at once, each from its own checkout (Terraform 1.15.5, then
/// the 1.11.4 on PATH). Without a lock timeout at most one fails, on the lock; with one, the
/// second waits and both succeed. Every apply that succeeded is a state version (its serial)
/// and a commit: nothing is lost.
#[test]
fn two_applies_on_one_workspace_at_once_wait_or_fail_on_the_lock() {
    for tf in versions() {
        let host = WorkspaceHost::start(&[]);
        let tf = host.terraform(&tf, TOKEN);
        let v = tf.version.clone();
        let jobs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
        let logs = tempfile::tempdir().unwrap();
        for (i, job) in jobs.iter().enumerate() {
            cloud_config(job.path(), &host, "app-prod", "start");
            tf.init(job.path()).expect_code(0, "init");
            if i == 0 {
                tf.apply(job.path()).expect_code(0, "the first apply");
            }
        }
        let serial = || {
            state_over_http(&host, "app-prod")["serial"]
                .as_u64()
                .unwrap()
        };
        let start = serial();
        let commits_at_start = state_commits(&host).len() as u64;
        let mut applied = 0;
        for (round, timeout) in ["0s", "60s"].into_iter().enumerate() {
            // Each job applies its own change, so that every apply that succeeds writes a state.
            for (i, job) in jobs.iter().enumerate() {
                cloud_config(job.path(), &host, "app-prod", &format!("r{round}-{i}"));
            }
            let lock_timeout = format!("-lock-timeout={timeout}");
            let args = [
                "apply",
                "-auto-approve",
                "-input=false",
                "-no-color",
                &lock_timeout,
            ];
            let mut children: Vec<_> = jobs
                .iter()
                .enumerate()
                .map(|(i, job)| {
                    let out = logs.path().join(format!("{round}-{i}.out"));
                    let err = logs.path().join(format!("{round}-{i}.err"));
                    (tf.spawn(job.path(), &args, &out, &err), out, err)
                })
                .collect();
            let mut failed = 0;
            for (child, out, err) in &mut children {
                let code = wait_for(child, "terraform apply");
                let output = format!(
                    "{}{}",
                    std::fs::read_to_string(&out).unwrap(),
                    std::fs::read_to_string(&err).unwrap()
                );
                match code {
                    Some(0) => applied += 1,
                    _ => {
                        failed += 1;
                        assert!(
                            output.contains("Error acquiring the state lock")
                                && output.contains("workspace already locked"),
                            "{v} {lock_timeout}: fails on the lock only: {output}"
                        );
                        assert_eq!(
                            output.matches("Error:").count(),
                            1,
                            "{v} {lock_timeout}: one error, the lock's: {output}"
                        );
                    }
                }
            }
            eprintln!(
                "{v} {lock_timeout}: {} applied, {failed} failed",
                2 - failed
            );
            match timeout {
                "0s" => assert!(failed <= 1, "at most one fails"),
                _ => assert_eq!(failed, 0, "both succeed: the second waits"),
            }
            assert!(refs_under(&host.bare(), "refs/heads/locks/").is_empty());
            let now = serial();
            assert_eq!(now, start + applied, "one state version per apply");
            let commits = state_commits(&host);
            assert_eq!(
                commits.len() as u64,
                commits_at_start + applied,
                "one commit per state written: {commits:?}"
            );
            assert!(
                commits[0].starts_with(&format!(
                    "Update workspaces/app-prod.tfstate (serial {now})"
                )),
                "{commits:?}"
            );
        }
        // The last apply's change is in the state, and a plan from either job has nothing to do
        // once it has the same configuration.
        let generation = state_over_http(&host, "app-prod")["resources"][0]["instances"][0]
            ["attributes"]["triggers"]["generation"]
            .clone();
        assert!(generation == "r1-0" || generation == "r1-1", "{generation}");
        for job in &jobs {
            cloud_config(job.path(), &host, "app-prod", generation.as_str().unwrap());
            tf.plan(job.path()).expect_code(0, "nothing to change");
        }
    }
}

/// A Workspace object's module as the README gives it: the `cloud` block naming the object's
/// workspace, a `null_resource` whose trigger and an output name `terraform.workspace`.
fn object_module(dir: &Path, host: &WorkspaceHost, name: &str) {
    std::fs::write(
        dir.join("main.tf"),
        format!(
            r#"terraform {{
  cloud {{
    hostname     = "{}"
    organization = "default"
    workspaces {{
      name = "{name}"
    }}
  }}
}}

resource "null_resource" "r0" {{
  triggers = {{
    workspace = terraform.workspace
  }}
}}

output "workspace" {{
  value = terraform.workspace
}}
"#,
            host.hostname()
        ),
    )
    .unwrap();
}

/// provider-terraform gives each Workspace object a directory of its own, new at the object's
/// first reconcile, and there runs `init -input=false`, `workspace select NAME` (then
/// `workspace new NAME`), a plan without the lock, `state list`, `output -json`, `apply`,
/// `destroy`, then its cleanup through the workspace `default`. In a new directory a `cloud`
/// block by tags stops at `init` once two workspaces have the tags (Terraform's own refusal,
/// whatever the host); the `cloud` block naming the object's workspace in its module goes
/// through every step but the cleanup (Terraform has no `default` there), as the README says.
#[test]
fn provider_terraform_in_a_directory_per_object_names_the_workspace_in_the_module() {
    for tf in versions() {
        let v = tf.version.clone();
        let host = WorkspaceHost::start(&[]);
        let mut tf = host.terraform(&tf, TOKEN);
        let terraformrc = std::fs::read_to_string(&tf.cli_config).unwrap();
        tf.env
            .push(("TF_CLI_CONFIG_FILE".into(), "./.terraformrc".into()));
        let new_directory = || {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join(".terraformrc"), &terraformrc).unwrap();
            dir
        };

        create_workspace(&host, "tagged-1", &["crossplane"]);
        create_workspace(&host, "tagged-2", &["crossplane"]);
        let by_tags = new_directory();
        cloud_tags_config(by_tags.path(), &host, &["crossplane"], "g1");
        let init = tf.init(by_tags.path());
        assert_eq!(init.code, Some(1), "{v}: {}", init.combined());
        assert!(
            init.stderr
                .contains("Currently selected workspace \"default\" does not exist"),
            "{v}: {}",
            init.combined()
        );

        let diff = [
            "plan",
            "-no-color",
            "-input=false",
            "-detailed-exitcode",
            "-lock=false",
        ];
        let objects: Vec<(&str, TempDir)> = ["bucket-a", "bucket-b", "bucket-c"]
            .into_iter()
            .map(|name| (name, new_directory()))
            .collect();
        for (name, work) in &objects {
            let dir = work.path();
            object_module(dir, &host, name);
            for _reconcile in 0..2 {
                tf.init(dir).expect_code(0, "init");
                tf.run(dir, &["workspace", "select", "-no-color", name])
                    .expect_code(0, "workspace select");
                assert_eq!(
                    git_log_subjects(
                        &host.bare(),
                        "main",
                        &format!(".gitstate/workspaces/{name}.json")
                    ),
                    [format!(
                        "Create workspace {name} (workspaces/{name}.tfstate) by workspace API"
                    )],
                    "{v}: init created it, once"
                );
            }
            tf.run(dir, &diff).expect_code(2, "a diff");
            tf.apply(dir).expect_code(0, "apply");
            tf.run(dir, &diff).expect_code(0, "no diff after the apply");
            let list = tf.run(dir, &["state", "list"]);
            assert_eq!(list.stdout.trim(), "null_resource.r0", "{v}");
            let outputs = tf.run(dir, &["output", "-json"]);
            assert_eq!(json(&outputs.stdout)["workspace"]["value"], *name, "{v}");
        }
        for (name, _) in &objects {
            let state = state_over_http(&host, name);
            assert_eq!(
                state["resources"][0]["instances"][0]["attributes"]["triggers"]["workspace"], *name,
                "{v}: {state}"
            );
        }
        for (name, work) in &objects {
            let dir = work.path();
            tf.run(
                dir,
                &["destroy", "-auto-approve", "-input=false", "-no-color"],
            )
            .expect_code(0, "destroy");
            let state = state_over_http(&host, name);
            assert_eq!(state["resources"], serde_json::json!([]), "{v}: {state}");
            // The provider's cleanup: Terraform has no workspace `default` here.
            let show = tf.run(dir, &["workspace", "show", "-no-color"]);
            assert_eq!(show.stdout.trim(), *name, "{v}");
            for args in [["select", "default"], ["new", "default"]] {
                let out = tf.run(dir, &["workspace", args[0], "-no-color", args[1]]);
                assert_ne!(out.code, Some(0), "{v}: {}", out.combined());
            }
        }
        // An emptied workspace goes through the API's delete; its history stays.
        let (status, body) = host.with_token(
            TOKEN,
            "DELETE",
            "/api/v2/organizations/default/workspaces/bucket-a",
            None,
        );
        assert_eq!(status, 204, "{body}");
        let commits = git_log_subjects(&host.bare(), "main", "workspaces/bucket-a.tfstate");
        assert_eq!(commits.len(), 3, "{v}: {commits:?}");
        assert!(refs_under(&host.bare(), "refs/heads/locks/").is_empty());
    }
}

/// A pod's OIDC token as the host credential (no static secret), and states sealed at rest: the
/// `cloud` block applies with the token, the rule's paths bound it to its workspaces, the state
/// in git is a sops document that the real `sops` opens with the age key, and Terraform reads it
/// back in clear.
#[test]
fn an_oidc_token_applies_through_the_workspace_api_and_the_state_is_sealed() {
    use gitstate_tests::crypto::{sops_decrypt_with_age_key, AgeKeyPair};
    use gitstate_tests::oidc::{now, Issuer, ISSUER};
    let issuer = Issuer::new();
    let config = format!(
        r#"auth {{
  mode = "team"
  oidc {{
    issuer = "{ISSUER}"
    audience = "gitstate"
    jwks_file = "{}"
    rule {{
      claims = {{ "kubernetes.io.namespace" = "team-a" }}
      name = "team-a"
      paths = ["workspaces/team-a-*"]
    }}
  }}
}}
"#,
        issuer.jwks_file().display()
    );
    let keys = tempfile::tempdir().unwrap();
    let key = AgeKeyPair::generate();
    let key_file = key.write_key_file(keys.path(), "key");
    let host = WorkspaceHost::configured(
        &[],
        &["--config", "gitstate.hcl", "--encryption-mode", "structure"],
        &[
            ("SOPS_AGE_RECIPIENTS", key.recipient.as_str()),
            ("SOPS_AGE_KEY_FILE", key_file.to_str().unwrap()),
        ],
        Some(&config),
    );
    let pod = |namespace: &str| {
        issuer.sign(
            "k1",
            &serde_json::json!({
                "iss": ISSUER,
                "aud": ["gitstate"],
                "sub": format!("system:serviceaccount:{namespace}:terraform"),
                "iat": now(),
                "nbf": now(),
                "exp": now() + 600,
                "kubernetes.io": { "namespace": namespace },
            }),
        )
    };
    let token = pod("team-a");
    for tf in versions() {
        let tf = host.terraform(&tf, &token);
        let work = tempfile::tempdir().unwrap();
        let name = format!("team-a-{}", tf.version.replace('.', "-"));
        cloud_config(work.path(), &host, &name, "g1");
        tf.init(work.path())
            .expect_code(0, "init with the pod's token");
        tf.apply(work.path())
            .expect_code(0, "apply with the pod's token");
        let path = format!("workspaces/{name}.tfstate");
        let stored = git_show(&host.bare(), "main", &path).expect("the state in git");
        let document: serde_json::Value = serde_json::from_slice(&stored).unwrap();
        assert_eq!(
            document["sops"]["age"][0]["recipient"], key.recipient,
            "sealed at rest"
        );
        let opened = sops_decrypt_with_age_key(&stored, &key_file);
        let pulled = tf.run(work.path(), &["state", "pull"]);
        assert_eq!(
            opened,
            json(&pulled.stdout),
            "real sops opens what Terraform reads"
        );
        let commits = git_log_subjects(&host.bare(), "main", &path);
        assert!(
            commits.iter().all(|s| s.contains("by team-a")),
            "the rule's name writes: {commits:?}"
        );
    }
    // The rule's paths hold: another namespace's token is refused, and a workspace outside
    // team-a's paths is one the token does not see.
    let (status, body) = host.with_token(
        &pod("team-b"),
        "GET",
        "/api/v2/organizations/default/entitlement-set",
        None,
    );
    assert_eq!(status, 401, "{body}");
    let create = r#"{"data":{"type":"workspaces","attributes":{"name":"team-b-app"}}}"#;
    let (status, body) = host.with_token(
        &token,
        "POST",
        "/api/v2/organizations/default/workspaces",
        Some(create),
    );
    assert_eq!(status, 404, "{body}");
    assert!(!host.server.log().contains(&token), "no token in the log");
}
