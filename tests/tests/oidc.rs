//! Callers that prove who they are with an OIDC token (issue 50, `auth.oidc`): real Terraform
//! applies with a Kubernetes-shaped token as its backend password, OpenTofu's Bearer header
//! reads, each wrong token is a 401 that writes nothing, a rule's scope holds, and no token
//! reaches the log. The issuer: `gitstate_tests::oidc` (keys by openssl, tokens signed by
//! `jsonwebtoken`), its keys in a JWKS file.

use std::path::Path;

use gitstate_tests::oidc::{now, Issuer, ISSUER};
use gitstate_tests::*;
use serde_json::{json, Value};

fn config(dir: &Path, issuer: &Issuer) {
    std::fs::write(
        dir.join("gitstate.hcl"),
        format!(
            r#"auth {{
  mode = "team"
  oidc {{
    issuer = "{ISSUER}"
    audience = "gitstate"
    jwks_file = "{}"
    max_token_life = "2h"
    rule {{
      claims = {{ "kubernetes.io.namespace" = "team-a" }}
      name = "team-a"
      paths = ["teams/a/**"]
    }}
    rule {{
      claims = {{ sub = "repo:acme/*" }}
      name = "acme-ci"
      access = "read-only"
    }}
  }}
}}
"#,
            issuer.jwks_file().display()
        ),
    )
    .expect("gitstate.hcl");
}

/// A Kubernetes projected service-account token's claims, for ten minutes.
fn pod() -> Value {
    json!({
        "iss": ISSUER,
        "aud": ["gitstate"],
        "sub": "system:serviceaccount:team-a:terraform",
        "iat": now(),
        "nbf": now(),
        "exp": now() + 600,
        "kubernetes.io": {
            "namespace": "team-a",
            "serviceaccount": {"name": "terraform", "uid": "8a1b"},
        },
    })
}

fn bearer(url: &str, method: &str, token: &str, body: Option<&str>) -> (u16, String) {
    let client = reqwest::blocking::Client::new();
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let mut request = client
        .request(method, url)
        .header("Authorization", format!("Bearer {token}"));
    if let Some(body) = body {
        request = request.body(body.to_owned());
    }
    let response = request.send().expect("request");
    let status = response.status().as_u16();
    (status, response.text().unwrap_or_default())
}

#[test]
fn terraform_applies_with_a_workload_token_and_wrong_tokens_write_nothing() {
    let mut issuer = Issuer::new();
    issuer.add_key("stranger", jsonwebtoken::Algorithm::ES256);
    issuer.publish_only(&["k1"]);
    let dir = tempfile::tempdir().expect("tempdir");
    config(dir.path(), &issuer);
    let gitstate = Gitstate::start(&["--config", "gitstate.hcl"], &[], dir.path());
    let url = gitstate.state_url("default", "teams/a/app.tfstate");
    let token = issuer.sign("k1", &pod());

    // Real Terraform, the token as the backend's password (any user name).
    let tf = Terraform::installed("1.15.5");
    let work = tempfile::tempdir().expect("tempdir");
    write_main_tf(
        work.path(),
        &HttpBackend::new(&url).with_auth("x", &token),
        1,
        "o1",
    );
    tf.init(work.path())
        .expect_code(0, "init with an OIDC token");
    tf.apply(work.path())
        .expect_code(0, "apply with an OIDC token");
    tf.plan(work.path()).expect_code(0, "plan shows no changes");
    let repo = dir.path().join(".gitstate/default.git");
    let subjects = git_log_subjects(&repo, "main", "teams/a/app.tfstate");
    assert!(!subjects.is_empty(), "apply wrote no commit");

    // OpenTofu's `headers = { Authorization = "Bearer …" }`; a write without a lock is in the
    // rule's name (under a lock, the holder's `Who` writes, DESIGN §6).
    let (status, stored) = bearer(&url, "GET", &token, None);
    assert_eq!(status, 200, "{stored}");
    let direct = gitstate.state_url("default", "teams/a/direct.tfstate");
    let first = r#"{"version":4,"terraform_version":"1.15.5","serial":1,"lineage":"d","outputs":{},"resources":[]}"#;
    let (status, body) = bearer(&direct, "POST", &token, Some(first));
    assert_eq!(status, 200, "{body}");
    let subjects = git_log_subjects(&repo, "main", "teams/a/direct.tfstate");
    assert_eq!(
        subjects,
        ["Update teams/a/direct.tfstate (serial 1) by team-a"]
    );
    let written = git_log_subjects(&repo, "main", "teams/a/app.tfstate").len();

    // Each wrong token: 401, a sentence naming what failed, nothing written.
    let mut expired = pod();
    expired["exp"] = json!(now() - 300);
    let mut other_audience = pod();
    other_audience["aud"] = json!("another-service");
    let mut long_lived = pod();
    long_lived["exp"] = json!(now() + 24 * 3600);
    let mut early = pod();
    early["nbf"] = json!(now() + 3600);
    let parts: Vec<String> = token.split('.').map(str::to_owned).collect();
    let none = format!("eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.{}.", parts[1]);
    let tampered = {
        let mut claims = pod();
        claims["kubernetes.io"]["namespace"] = json!("team-a");
        claims["sub"] = json!("system:serviceaccount:team-a:admin");
        let other = issuer.sign("k1", &claims);
        let other_parts: Vec<&str> = other.split('.').collect();
        format!("{}.{}.{}", parts[0], other_parts[1], parts[2])
    };
    let refused = [
        ("expired", issuer.sign("k1", &expired), "expired"),
        ("audience", issuer.sign("k1", &other_audience), "audience"),
        ("life", issuer.sign("k1", &long_lived), "max_token_life"),
        ("nbf", issuer.sign("k1", &early), "not valid yet"),
        ("unknown kid", issuer.sign("stranger", &pod()), "key set"),
        ("alg none", none, "algorithm 'none'"),
        ("tampered", tampered, "signature"),
    ];
    let state = r#"{"version":4,"terraform_version":"1.15.5","serial":99,"lineage":"x","outputs":{},"resources":[]}"#;
    for (what, bad, says) in &refused {
        let (status, body) = http("POST", &url, Some(state), Some(("x", bad))).expect("post");
        assert_eq!(status, 401, "{what}: {body}");
        assert!(body.contains(says), "{what}: {body}");
        assert!(
            !body.contains(bad.as_str()),
            "{what}: the token is in the answer"
        );
        let (status, _) = bearer(&url, "POST", bad, Some(state));
        assert_eq!(status, 401, "{what} as a Bearer token");
    }
    assert_eq!(
        git_log_subjects(&repo, "main", "teams/a/app.tfstate").len(),
        written,
        "a refused token wrote"
    );

    // The rule's scope: team-a's paths only; the second rule reads only.
    let elsewhere = gitstate.state_url("default", "teams/b/app.tfstate");
    let (status, body) = http("POST", &elsewhere, Some(state), Some(("x", &token))).unwrap();
    assert_eq!(status, 403, "{body}");
    let mut ci = pod();
    ci["sub"] = json!("repo:acme/infra:ref:refs/heads/main");
    ci.as_object_mut().expect("claims").remove("kubernetes.io");
    let ci = issuer.sign("k1", &ci);
    let (status, _) = http("GET", &url, None, Some(("x", &ci))).unwrap();
    assert_eq!(status, 200);
    let (status, body) = http("POST", &url, Some(state), Some(("x", &ci))).unwrap();
    assert_eq!(status, 403, "read-only: {body}");

    let log = gitstate.log();
    for secret in std::iter::once(&token).chain(refused.iter().map(|(_, t, _)| t)) {
        for part in secret.split('.').filter(|p| p.len() > 8) {
            assert!(!log.contains(part), "a token's part reached the log");
        }
    }
}

/// Keys rotate in the JWKS file while the server runs: the new key works once published, the
/// old one until it leaves the file.
#[test]
fn keys_rotate_without_a_restart() {
    let mut issuer = Issuer::new();
    issuer.add_key("k2", jsonwebtoken::Algorithm::EdDSA);
    issuer.publish_only(&["k1"]);
    let dir = tempfile::tempdir().expect("tempdir");
    config(dir.path(), &issuer);
    let gitstate = Gitstate::start(&["--config", "gitstate.hcl"], &[], dir.path());
    let url = gitstate.state_url("default", "teams/a/rot.tfstate");
    let (old, new) = (issuer.sign("k1", &pod()), issuer.sign("k2", &pod()));
    let get = |token: &str| http("GET", &url, None, Some(("x", token))).unwrap().0;
    assert_eq!(get(&old), 204);
    assert_eq!(get(&new), 401);
    issuer.publish();
    assert_eq!(get(&old), 204);
    assert_eq!(get(&new), 204);
    issuer.publish_only(&["k2"]);
    assert_eq!(get(&old), 401);
    assert_eq!(get(&new), 204);
}

/// Without `jwks_file` the keys come from the issuer: its discovery document over HTTPS names
/// its `jwks_uri`, fetched on first use and kept. A flood of tokens with unknown kids fetches the
/// keys at most once in ten seconds; a key the issuer publishes later is fetched when a token
/// needs it, after that pause.
#[test]
fn keys_come_from_the_issuer_and_a_flood_of_unknown_kids_fetches_little() {
    let mut issuer = Issuer::served();
    issuer.add_key("k2", jsonwebtoken::Algorithm::ES256);
    issuer.publish_only(&["k1"]);
    let url = issuer.url();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("gitstate.hcl"),
        format!(
            "auth {{\n  mode = \"team\"\n  oidc {{\n    issuer = \"{url}\"\n    audience = \"gitstate\"\n    rule {{\n      claims = {{ sub = \"system:serviceaccount:team-a:*\" }}\n      name = \"team-a\"\n    }}\n  }}\n}}\n"
        ),
    )
    .expect("gitstate.hcl");
    let ca = issuer.ca_file();
    let gitstate = Gitstate::start(
        &["--config", "gitstate.hcl"],
        &[("SSL_CERT_FILE", ca.to_str().expect("utf-8"))],
        dir.path(),
    );
    assert!(issuer.requests().is_empty(), "nothing is fetched at start");
    let state_url = gitstate.state_url("default", "teams/a/fetched.tfstate");
    let claims = || {
        let mut c = pod();
        c["iss"] = json!(url);
        c
    };
    let get = |token: &str| http("GET", &state_url, None, Some(("x", token))).unwrap();
    let (status, body) = get(&issuer.sign("k1", &claims()));
    assert_eq!(status, 204, "{body}\n{}", gitstate.log());
    let fetches = |issuer: &Issuer| {
        issuer
            .requests()
            .iter()
            .filter(|p| p.as_str() == "/jwks.json")
            .count()
    };
    assert_eq!(fetches(&issuer), 1, "{:?}", issuer.requests());
    assert_eq!(get(&issuer.sign("k1", &claims())).0, 204);
    assert_eq!(fetches(&issuer), 1, "the keys are kept");

    // A key the issuer does not publish (yet): refused, and twenty of them fetch once at most.
    let by_k2 = issuer.sign("k2", &claims());
    for _ in 0..20 {
        let (status, body) = get(&by_k2);
        assert_eq!(status, 401, "{body}");
        assert!(body.contains("key set"), "{body}");
    }
    assert!(fetches(&issuer) <= 2, "{:?}", issuer.requests());

    // The issuer rotates: k2 is published; past the pause, a token of k2 fetches it.
    issuer.publish();
    std::thread::sleep(std::time::Duration::from_millis(10_500));
    let (status, body) = get(&by_k2);
    assert_eq!(status, 204, "{body}");
    assert!(
        !gitstate.log().contains("could not be fetched"),
        "{}",
        gitstate.log()
    );
}

/// A run outlives its token (issue 50): real Terraform 1.0.3 takes the lock with a token that
/// expires during the apply (a provisioner sleeps past its `exp`); its last POST and its UNLOCK
/// are still accepted, because the lock records the token's hash. Another caller's expired token
/// with the lock's ID is a 401, and so is the run's own token once the lock is gone.
#[test]
fn a_run_whose_token_expires_finishes_and_nothing_else_does() {
    let issuer = Issuer::new();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("gitstate.hcl"),
        format!(
            "auth {{\n  mode = \"team\"\n  oidc {{\n    issuer = \"{ISSUER}\"\n    audience = \"gitstate\"\n    jwks_file = \"{}\"\n    clock_skew = \"1s\"\n    max_run = \"1h\"\n    rule {{\n      claims = {{ sub = \"repo:acme/infra:*\" }}\n      name = \"infra-ci\"\n    }}\n  }}\n}}\n",
            issuer.jwks_file().display()
        ),
    )
    .expect("gitstate.hcl");
    let gitstate = Gitstate::start(&["--config", "gitstate.hcl"], &[], dir.path());
    let url = gitstate.state_url("default", "infra.tfstate");
    let token = |seconds: u64, job: &str| {
        issuer.sign(
            "k1",
            &json!({
                "iss": ISSUER, "aud": "gitstate", "iat": now(), "exp": now() + seconds,
                "sub": "repo:acme/infra:ref:refs/heads/main", "job_workflow_ref": job,
            }),
        )
    };

    let tf = Terraform::installed("1.0.3");
    let work = tempfile::tempdir().expect("tempdir");
    // The user name in the file, the password (the token) given to each `init`.
    let backend = HttpBackend::new(&url)
        .with_auth("x", "")
        .hcl()
        .replace("    password = \"\"\n", "");
    std::fs::write(
        work.path().join("main.tf"),
        format!("{backend}\nresource \"null_resource\" \"slow\" {{\n  provisioner \"local-exec\" {{\n    command = \"sleep 20\"\n  }}\n}}\n"),
    )
    .expect("main.tf");
    let init = |password: &str| {
        let config = format!("password={password}");
        tf.run(
            work.path(),
            &[
                "init",
                "-reconfigure",
                "-input=false",
                "-no-color",
                "-backend-config",
                &config,
            ],
        )
        .expect_code(0, "init");
    };
    init(&token(600, "init"));
    // A GitHub Actions ID token lives minutes; this one twelve seconds: LOCK and the first reads
    // happen before its `exp`, the state's POST and the UNLOCK twenty seconds later.
    let short = token(12, "apply");
    init(&short);
    tf.apply(work.path())
        .expect_code(0, "apply outliving its token");
    let repo = dir.path().join(".gitstate/default.git");
    assert!(!git_log_subjects(&repo, "main", "infra.tfstate").is_empty());
    let (status, body) = http("GET", &url, None, Some(("x", &short))).unwrap();
    assert_eq!(status, 401, "the token had expired: {body}");
    assert!(body.contains("expired"), "{body}");
    let state = r#"{"version":4,"terraform_version":"1.11.4","serial":90,"lineage":"x","outputs":{},"resources":[]}"#;
    let with_id = format!("{url}?ID=anything");
    let (status, _) = http("POST", &with_id, Some(state), Some(("x", &short))).unwrap();
    assert_eq!(
        status, 401,
        "no lock now: the expired token is a 401 like any other"
    );

    // Two runs' tokens expire; only the one that took the lock may use it. The next state
    // continues the stored one (the state guard would refuse another lineage).
    let (_, stored) = http("GET", &url, None, Some(("x", &token(600, "read")))).unwrap();
    let stored: Value = serde_json::from_str(&stored).expect("the stored state");
    let next = json!({
        "version": 4, "terraform_version": "1.0.3", "serial": stored["serial"].as_u64().unwrap() + 1,
        "lineage": stored["lineage"], "outputs": {}, "resources": [],
    })
    .to_string();
    let state = next.as_str();
    let (mine, theirs) = (token(2, "mine"), token(2, "theirs"));
    let lock = r#"{"ID":"run-1","Operation":"OperationTypeApply","Info":"","Who":"ci@runner","Version":"1.11.4","Created":"2026-11-28T10:00:00Z","Path":""}"#;
    let (status, body) = http("LOCK", &url, Some(lock), Some(("x", &mine))).unwrap();
    assert_eq!(status, 200, "{body}");
    // Past `exp` + the second of clock skew, whatever the fraction of the second they began in.
    std::thread::sleep(std::time::Duration::from_millis(4_500));
    let run = format!("{url}?ID=run-1");
    let commits = git_log_subjects(&repo, "main", "infra.tfstate").len();
    let (status, body) = http("POST", &run, Some(state), Some(("x", &theirs))).unwrap();
    assert_eq!(status, 401, "the lock ID alone is no credential: {body}");
    assert_eq!(
        git_log_subjects(&repo, "main", "infra.tfstate").len(),
        commits
    );
    let (status, body) = http("POST", &run, Some(state), Some(("x", &mine))).unwrap();
    assert_eq!(status, 200, "{body}");
    let (status, _) = http("UNLOCK", &url, Some(lock), Some(("x", &theirs))).unwrap();
    assert_eq!(status, 401);
    let (status, body) = http("UNLOCK", &url, Some(lock), Some(("x", &mine))).unwrap();
    assert_eq!(status, 200, "{body}");
    let (status, _) = http("POST", &run, Some(state), Some(("x", &mine))).unwrap();
    assert_eq!(status, 401, "after UNLOCK a new token is needed");
}

/// A scope's paths may name their repository (issue 50): `default:teams/a/**` reaches team A's
/// folder of the repository `default` only, not the same folder of `payments`; a pattern
/// without a repository holds in each.
#[test]
fn a_repository_qualified_path_reaches_only_that_repository() {
    let issuer = Issuer::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let (default, payments) = (
        bare_repo(dir.path(), "default"),
        bare_repo(dir.path(), "payments"),
    );
    std::fs::write(
        dir.path().join("gitstate.hcl"),
        format!(
            "repository \"default\" {{\n  url = \"{}\"\n}}\nrepository \"payments\" {{\n  url = \"{}\"\n}}\nauth {{\n  mode = \"team\"\n  oidc {{\n    issuer = \"{ISSUER}\"\n    audience = \"gitstate\"\n    jwks_file = \"{}\"\n    rule {{\n      claims = {{ sub = \"*\" }}\n      name = \"team-a\"\n      paths = [\"default:teams/a/**\", \"shared/*.tfstate\"]\n    }}\n  }}\n}}\n",
            default.display(),
            payments.display(),
            issuer.jwks_file().display()
        ),
    )
    .expect("gitstate.hcl");
    let gitstate = Gitstate::start(&["--config", "gitstate.hcl"], &[], dir.path());
    let token = issuer.sign("k1", &pod());
    let state = r#"{"version":4,"terraform_version":"1.15.5","serial":1,"lineage":"q","outputs":{},"resources":[]}"#;
    let post = |repository: &str, path: &str| {
        let url = gitstate.state_url(repository, path);
        http("POST", &url, Some(state), Some(("x", &token))).unwrap()
    };
    assert_eq!(post("default", "teams/a/app.tfstate").0, 200);
    let (status, body) = post("payments", "teams/a/app.tfstate");
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("default:teams/a/**"), "{body}");
    assert_eq!(post("payments", "shared/net.tfstate").0, 200);
    assert_eq!(post("default", "shared/net.tfstate").0, 200);
    assert!(
        git_log_subjects(&payments, "main", "teams/a/app.tfstate").is_empty(),
        "the refused write reached payments"
    );
}

/// As the README's Kubernetes example runs it: the token is a file (the projected volume), the
/// pod's shell reads it into `TF_HTTP_PASSWORD`, and Terraform 1.15.5's backend block names only
/// the address.
#[test]
fn terraform_reads_the_token_from_tf_http_password_as_the_readme_runs_it() {
    let issuer = Issuer::new();
    let dir = tempfile::tempdir().expect("tempdir");
    config(dir.path(), &issuer);
    let gitstate = Gitstate::start(&["--config", "gitstate.hcl"], &[], dir.path());
    let url = gitstate.state_url("default", "teams/a/pod.tfstate");
    let work = tempfile::tempdir().expect("tempdir");
    write_main_tf(work.path(), &HttpBackend::new(&url), 1, "pod");
    let token_file = work.path().join("token");
    std::fs::write(&token_file, issuer.sign("k1", &pod())).expect("token");
    let tf = Terraform::installed("1.15.5");
    let script = format!(
        "export TF_HTTP_PASSWORD=$(cat {}) && \"$TF\" init -input=false -no-color && \"$TF\" apply -auto-approve -input=false -no-color",
        token_file.display()
    );
    let out = std::process::Command::new("sh")
        .args(["-c", &script])
        .current_dir(work.path())
        .env("TF", &tf.bin)
        .env("TF_HTTP_USERNAME", "k8s")
        .env("TF_CLI_CONFIG_FILE", &tf.cli_config)
        .env("CHECKPOINT_DISABLE", "1")
        .env("TF_IN_AUTOMATION", "1")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .output()
        .expect("sh runs");
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let repo = dir.path().join(".gitstate/default.git");
    assert!(!git_log_subjects(&repo, "main", "teams/a/pod.tfstate").is_empty());
}
