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
      claims = {{ sub = "repo:acme/*:**" }}
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
        ("audience", issuer.sign("k1", &other_audience), "(aud)"),
        ("life", issuer.sign("k1", &long_lived), "life (exp - iat)"),
        ("nbf", issuer.sign("k1", &early), "not valid yet"),
        (
            "unknown kid",
            issuer.sign("stranger", &pod()),
            "signature cannot be verified",
        ),
        ("alg none", none, "algorithm 'none'"),
        ("tampered", tampered, "signature cannot be verified"),
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
/// old one until it leaves the file (the file is looked at again within a second or so).
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
    assert_eq!(within_seconds(|| get(&new)), 204);
    assert_eq!(get(&old), 204);
    issuer.publish_only(&["k2"]);
    assert_eq!(within_seconds(|| get(&old)), 401);
    assert_eq!(get(&new), 204);
}

/// What `request` answers once it stops answering what it answered first, or after ten
/// seconds (what a change of the key file must take at most).
fn within_seconds(request: impl Fn() -> u16) -> u16 {
    let first = request();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let now = request();
        if now != first || std::time::Instant::now() >= until {
            return now;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
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
        assert!(body.contains("signature cannot be verified"), "{body}");
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
            "auth {{\n  mode = \"team\"\n  oidc {{\n    issuer = \"{ISSUER}\"\n    audience = \"gitstate\"\n    jwks_file = \"{}\"\n    clock_skew = \"1s\"\n    max_run = \"1h\"\n    rule {{\n      claims = {{ sub = \"repo:acme/infra:ref:refs/heads/*\" }}\n      name = \"infra-ci\"\n    }}\n  }}\n}}\n",
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
            "repository \"default\" {{\n  url = \"{}\"\n}}\nrepository \"payments\" {{\n  url = \"{}\"\n}}\nauth {{\n  mode = \"team\"\n  oidc {{\n    issuer = \"{ISSUER}\"\n    audience = \"gitstate\"\n    jwks_file = \"{}\"\n    rule {{\n      claims = {{ \"kubernetes.io.namespace\" = \"team-a\" }}\n      name = \"team-a\"\n      paths = [\"default:teams/a/**\", \"shared/*.tfstate\"]\n    }}\n  }}\n}}\n",
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

/// GitHub's issuer: anyone can have it sign a token for any audience.
const GITHUB: &str = "https://token.actions.githubusercontent.com";
/// GitLab.com's issuer, shared the same way.
const GITLAB: &str = "https://gitlab.com";

/// Runs `gitstate serve` on `hcl`, which must stop the start: its standard error. (A start that
/// goes on is stopped after a minute and fails the test.)
fn start_refused(hcl: &str) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("gitstate.hcl"), hcl).expect("gitstate.hcl");
    let mut command = std::process::Command::new(gitstate_bin());
    command
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--config",
            "gitstate.hcl",
        ])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    without_gitstate_env(&mut command);
    let mut child = command.spawn().expect("gitstate runs");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while child.try_wait().expect("wait").is_none() {
        if std::time::Instant::now() >= until {
            let _ = child.kill();
            let _ = child.wait();
            panic!("gitstate started with:\n{hcl}");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("its output");
    assert!(!out.status.success(), "gitstate started with:\n{hcl}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// An `auth` block of one issuer with one rule of these claims.
fn one_rule(issuer: &str, jwks: &Path, claims: &str) -> String {
    format!(
        "auth {{\n  mode = \"team\"\n  oidc {{\n    issuer = \"{issuer}\"\n    audience = \"gitstate\"\n    jwks_file = \"{}\"\n    rule {{\n      claims = {{ {claims} }}\n      name = \"infra\"\n    }}\n  }}\n}}\n",
        jwks.display()
    )
}

/// Rules a stranger could match stop the start with a sentence (issue 55): a rule whose every
/// pattern is `*`, and a rule under GitHub's or GitLab.com's issuer that pins no owner id.
#[test]
fn a_rule_for_anyone_stops_the_start() {
    let issuer = Issuer::new();
    let jwks = issuer.jwks_file();
    for everyone in ["sub = \"*\"", "sub = \"**\""] {
        let err = start_refused(&one_rule(ISSUER, &jwks, everyone));
        assert!(
            err.contains(&format!(
                "auth.oidc '{ISSUER}': rule 1 ('infra'): it matches every token of the issuer"
            )),
            "{err}"
        );
    }
    for (issuer, names, service, add) in [
        (
            GITHUB,
            "sub = \"repo:acme/infra:ref:refs/heads/main\", repository_owner_id = \"13*\"",
            "GitHub Actions",
            "repository_owner_id or repository_id",
        ),
        (
            GITLAB,
            "project_path = \"acme/infra\", ref = \"main\"",
            "GitLab.com",
            "namespace_id or project_id",
        ),
    ] {
        let err = start_refused(&one_rule(issuer, &jwks, names));
        let says = format!("auth.oidc '{issuer}': rule 1 ('infra'): {service}");
        assert!(err.contains(&says), "{err}");
        assert!(err.contains(&format!("add {add} to its claims")), "{err}");
    }
    let err = start_refused(&one_rule(ISSUER, &jwks, ""));
    assert!(err.contains("rule 1 ('infra'): it names no claim"), "{err}");
    assert!(
        !err.contains("\"*\""),
        "the sentence suggests a rule for everyone: {err}"
    );
}

/// Under the shared issuers a rule with the owner's id starts, and admits that owner's tokens
/// only: a token of another owner with the same names (one that registered them again) is a
/// 401; `*` does not cross `:`, so a rule for every branch admits no environment or tag, and
/// `repo:acme/infra:*` only what has one part after the repository (a pull request); GitLab's
/// `ref_type = "branch"` keeps a tag named `main` out.
#[test]
fn a_shared_issuer_admits_the_pinned_owner_and_nothing_else() {
    let issuer = Issuer::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let jwks = issuer.jwks_file();
    std::fs::write(
        dir.path().join("gitstate.hcl"),
        format!(
            r#"auth {{
  mode = "team"
  oidc {{
    issuer    = "{GITHUB}"
    audience  = "gitstate"
    jwks_file = "{jwks}"
    rule {{
      claims = {{ repository_owner_id = "1342004", sub = "repo:acme/infra:ref:refs/heads/*" }}
      name   = "infra-ci"
    }}
    rule {{
      claims = {{ repository_owner_id = "1342004", sub = "repo:acme/infra:*" }}
      name   = "infra-review"
      access = "read-only"
    }}
  }}
  oidc {{
    issuer    = "{GITLAB}"
    audience  = "gitstate"
    jwks_file = "{jwks}"
    rule {{
      claims = {{ namespace_id = "72", project_path = "acme/infra", ref_type = "branch", ref = "main" }}
      name   = "infra-gitlab"
    }}
  }}
}}
"#,
            jwks = jwks.display()
        ),
    )
    .expect("gitstate.hcl");
    let gitstate = Gitstate::start(&["--config", "gitstate.hcl"], &[], dir.path());
    let url = gitstate.state_url("default", "infra.tfstate");
    let state = r#"{"version":4,"terraform_version":"1.15.5","serial":1,"lineage":"s","outputs":{},"resources":[]}"#;
    let post = |claims: Value| {
        let mut claims = claims;
        claims["aud"] = json!("gitstate");
        claims["iat"] = json!(now());
        claims["exp"] = json!(now() + 600);
        let token = issuer.sign("k1", &claims);
        http("POST", &url, Some(state), Some(("x", &token))).unwrap()
    };
    let github = |owner_id: &str, sub: &str| json!({"iss": GITHUB, "sub": sub, "repository": "acme/infra", "repository_owner": "acme", "repository_owner_id": owner_id});
    let main = "repo:acme/infra:ref:refs/heads/main";
    for (what, claims) in [
        ("another owner", github("99999999", main)),
        ("no owner id", {
            let mut c = github("", main);
            c.as_object_mut()
                .expect("claims")
                .remove("repository_owner_id");
            c
        }),
        (
            "an environment",
            github("1342004", "repo:acme/infra:environment:prod"),
        ),
        (
            "a tag",
            github("1342004", "repo:acme/infra:ref:refs/tags/v1"),
        ),
    ] {
        let (status, body) = post(claims);
        assert_eq!(status, 401, "{what}: {body}");
        assert!(body.contains("no rule"), "{what}: {body}");
    }
    // `repo:acme/infra:*` is one part after the repository: a pull request, read-only.
    let (status, body) = post(github("1342004", "repo:acme/infra:pull_request"));
    assert_eq!(status, 403, "{body}");
    let (status, body) = post(github("1342004", main));
    assert_eq!(status, 200, "{body}");
    // One commit: the refused tokens wrote nothing.
    let repo = dir.path().join(".gitstate/default.git");
    assert_eq!(
        git_log_subjects(&repo, "main", "infra.tfstate"),
        ["Update infra.tfstate (serial 1) by infra-ci"]
    );

    let gitlab = |namespace_id: &str, ref_type: &str| json!({"iss": GITLAB, "sub": "project_path:acme/infra:ref_type:branch:ref:main", "namespace_id": namespace_id, "namespace_path": "acme", "project_path": "acme/infra", "ref_type": ref_type, "ref": "main"});
    assert_eq!(post(gitlab("73", "branch")).0, 401, "another namespace");
    assert_eq!(post(gitlab("72", "tag")).0, 401, "a tag named main");
    let (status, body) = http("GET", &url, None, None).unwrap();
    assert_eq!(status, 401, "{body}");
    let next = state.replace("\"serial\":1", "\"serial\":2");
    let mut claims = gitlab("72", "branch");
    claims["aud"] = json!("gitstate");
    claims["iat"] = json!(now());
    claims["exp"] = json!(now() + 600);
    let token = issuer.sign("k1", &claims);
    let (status, body) = http("POST", &url, Some(&next), Some(("x", &token))).unwrap();
    assert_eq!(status, 200, "{body}");
}

/// Revocation without a restart (issue 55): the `jwks_file` removed, or emptied to
/// `{"keys":[]}`, refuses every token of its issuer within seconds (200 before, 401 after); the
/// removal is one ERROR line naming the file, however many tokens it refuses; the file back, the
/// tokens work again.
#[test]
fn a_removed_or_emptied_key_file_refuses_every_token_within_seconds() {
    let issuer = Issuer::new();
    let dir = tempfile::tempdir().expect("tempdir");
    config(dir.path(), &issuer);
    let gitstate = Gitstate::start(&["--config", "gitstate.hcl"], &[], dir.path());
    let url = gitstate.state_url("default", "teams/a/revoked.tfstate");
    let token = issuer.sign("k1", &pod());
    let state = r#"{"version":4,"terraform_version":"1.15.5","serial":1,"lineage":"r","outputs":{},"resources":[]}"#;
    let (status, body) = http("POST", &url, Some(state), Some(("x", &token))).unwrap();
    assert_eq!(status, 200, "{body}");
    let get = || http("GET", &url, None, Some(("x", &token))).unwrap().0;
    assert_eq!(get(), 200);
    let file = issuer.jwks_file();
    let errors = |gitstate: &Gitstate| {
        gitstate
            .log()
            .lines()
            .filter(|l| l.contains("ERROR") && l.contains(&*file.to_string_lossy()))
            .count()
    };
    assert_eq!(errors(&gitstate), 0, "{}", gitstate.log());

    std::fs::remove_file(&file).expect("removed");
    assert_eq!(within_seconds(get), 401, "{}", gitstate.log());
    // More tokens, more than a second apart: still one line.
    for _ in 0..3 {
        assert_eq!(get(), 401);
        std::thread::sleep(std::time::Duration::from_millis(700));
    }
    let (status, body) = http("POST", &url, Some(state), Some(("x", &token))).unwrap();
    assert_eq!(status, 401, "{body}");
    assert_eq!(errors(&gitstate), 1, "{}", gitstate.log());
    assert!(
        gitstate
            .log()
            .lines()
            .any(|l| l.contains("ERROR") && l.contains("cannot be read")),
        "{}",
        gitstate.log()
    );

    issuer.publish();
    assert_eq!(within_seconds(get), 200, "{}", gitstate.log());
    std::fs::write(&file, br#"{"keys":[]}"#).expect("emptied");
    assert_eq!(within_seconds(get), 401, "{}", gitstate.log());
    let repo = dir.path().join(".gitstate/default.git");
    assert_eq!(
        git_log_subjects(&repo, "main", "teams/a/revoked.tfstate").len(),
        1
    );
}

/// A 401 says what failed in the token, never what would pass (issue 55): for a token of
/// another audience, of an issuer not configured, unsigned, forged, of an unknown key, matching
/// no rule, or living too long, the answer holds neither the configured audience nor the
/// issuer's URL nor a rule's claims nor the token's `sub`; an unconfigured issuer, an unknown
/// key and a forged signature get the same sentence. The server's log holds each reason.
#[test]
fn a_401_says_what_failed_and_not_what_would_pass() {
    let mut issuer = Issuer::new();
    issuer.add_key("unpublished", jsonwebtoken::Algorithm::ES256);
    issuer.add_key("forger", jsonwebtoken::Algorithm::RS256);
    issuer.publish_only(&["k1"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let audience = "gitstate-prod-7f3a";
    std::fs::write(
        dir.path().join("gitstate.hcl"),
        format!(
            r#"auth {{
  mode = "team"
  oidc {{
    issuer = "{ISSUER}"
    audience = "{audience}"
    jwks_file = "{}"
    max_token_life = "1h"
    rule {{
      claims = {{ "kubernetes.io.namespace" = "team-secret-ns", sub = "system:serviceaccount:team-secret-ns:*" }}
      name = "secret-team"
    }}
  }}
}}
"#,
            issuer.jwks_file().display()
        ),
    )
    .expect("gitstate.hcl");
    let gitstate = Gitstate::start(&["--config", "gitstate.hcl"], &[], dir.path());
    let url = gitstate.state_url("default", "swept.tfstate");
    let claims = |sub: &str| {
        json!({
            "iss": ISSUER, "aud": audience, "sub": sub, "iat": now(), "exp": now() + 600,
            "kubernetes.io": {"namespace": "team-b"},
        })
    };
    let stranger = "system:serviceaccount:team-b:stranger-runner";
    let with = |name: &str, value: Value| {
        let mut c = claims(stranger);
        c[name] = value;
        c
    };
    let forged = {
        // Signed by another key under the published key's kid.
        let token = issuer.sign("forger", &claims(stranger));
        let parts: Vec<&str> = token.split('.').collect();
        let k1 = issuer.sign("k1", &claims(stranger));
        format!(
            "{}.{}.{}",
            k1.split('.').next().expect("header"),
            parts[1],
            parts[2]
        )
    };
    let b64 = |json: &str| {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
    };
    let unsigned = format!(
        "{}.{}.",
        b64(r#"{"alg":"none","typ":"JWT"}"#),
        b64(&claims(stranger).to_string())
    );
    let mut long = claims(stranger);
    long["exp"] = json!(now() + 5 * 3600);
    let swept = [
        (
            "another audience",
            issuer.sign("k1", &with("aud", json!("another-service"))),
            format!("its aud \"another-service\" is not the configured audience '{audience}'"),
        ),
        (
            "an unconfigured issuer",
            issuer.sign("k1", &with("iss", json!("https://unconfigured.example"))),
            "its issuer is not configured".to_owned(),
        ),
        (
            "unsigned",
            unsigned,
            "its algorithm 'none' is not accepted".to_owned(),
        ),
        ("forged", forged, "InvalidSignature".to_owned()),
        (
            "an unknown kid",
            issuer.sign("unpublished", &claims(stranger)),
            "its key 'unpublished' is not in the issuer's key set".to_owned(),
        ),
        (
            "no matching rule",
            issuer.sign("k1", &claims(stranger)),
            "no rule of its issuer admits its claims".to_owned(),
        ),
        (
            "too long a life",
            issuer.sign("k1", &long),
            "longer than this issuer's max_token_life of 3600 s".to_owned(),
        ),
    ];
    let mut unverified = Vec::new();
    for (what, token, reason) in &swept {
        for (status, body) in [
            http("GET", &url, None, Some(("x", token))).unwrap(),
            bearer(&url, "POST", token, Some("{}")),
        ] {
            assert_eq!(status, 401, "{what}: {body}");
            assert!(body.contains("the OIDC token is refused"), "{what}: {body}");
            for told in [
                audience,
                ISSUER,
                "issuer.gitstate.test",
                "unconfigured.example",
                "team-secret-ns",
                "secret-team",
                stranger,
                "team-b",
                "3600",
                "1h",
            ] {
                assert!(!body.contains(told), "{what}: '{told}' is in {body}");
            }
            if body.contains("signature cannot be verified") {
                unverified.push((*what, body));
            }
        }
        let log = gitstate.log();
        assert!(
            log.lines()
                .any(|l| l.contains("an OIDC token is refused") && l.contains(reason.as_str())),
            "{what}: the reason is not in the log:\n{log}"
        );
    }
    let whats: Vec<&str> = unverified.iter().map(|(what, _)| *what).collect();
    assert_eq!(
        whats,
        [
            "an unconfigured issuer",
            "an unconfigured issuer",
            "forged",
            "forged",
            "an unknown kid",
            "an unknown kid"
        ]
    );
    assert!(
        unverified.windows(2).all(|w| w[0].1 == w[1].1),
        "{unverified:?}"
    );
    // The log names the issuer and the sub of each refusal, never a part of a token.
    let log = gitstate.log();
    assert!(log.contains(stranger) && log.contains("https://unconfigured.example"));
    for (_, token, _) in &swept {
        for part in token.split('.').filter(|p| p.len() > 8) {
            assert!(!log.contains(part), "a token's part reached the log");
        }
    }
}

/// A run key every process of these tests shares (`GITSTATE_RUN_KEY`).
const RUN_KEY: &str = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a6978";

/// A `gitstate.hcl` serving the bare repository `remote` as `default`, to GitHub-shaped tokens
/// of `acme/infra` (a second of clock skew, so that a token expires quickly).
fn remote_config(dir: &Path, remote: &Path, issuer: &Issuer) {
    std::fs::write(
        dir.join("gitstate.hcl"),
        format!(
            "repository \"default\" {{\n  url = \"{}\"\n}}\nauth {{\n  mode = \"team\"\n  oidc {{\n    issuer = \"{ISSUER}\"\n    audience = \"gitstate\"\n    jwks_file = \"{}\"\n    clock_skew = \"1s\"\n    rule {{\n      claims = {{ sub = \"repo:acme/infra:ref:refs/heads/*\" }}\n      name = \"infra-ci\"\n    }}\n  }}\n}}\n",
            remote.display(),
            issuer.jwks_file().display()
        ),
    )
    .expect("gitstate.hcl");
}

/// A token of `acme/infra`'s CI that expires at `exp`.
fn ci_token(issuer: &Issuer, exp: u64) -> String {
    issuer.sign(
        "k1",
        &json!({
            "iss": ISSUER, "aud": "gitstate", "iat": now(), "exp": exp,
            "sub": "repo:acme/infra:ref:refs/heads/main",
        }),
    )
}

/// Terraform's LockInfo for the lock ID `id`.
fn lock_info(id: &str) -> String {
    format!(
        r#"{{"ID":"{id}","Operation":"OperationTypeApply","Info":"","Who":"ci@runner","Version":"1.11.4","Created":"2026-11-28T10:00:00Z","Path":""}}"#
    )
}

/// Waits until a token whose `exp` is `exp` has expired past the second of clock skew.
fn wait_past(exp: u64) {
    while now() < exp + 2 {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// The tip of `branch` in the bare repository `remote` (empty when there is none).
fn tip(remote: &Path, branch: &str) -> String {
    let out = git_output(
        Some(remote),
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("refs/heads/{branch}"),
        ],
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

const FIRST_STATE: &str = r#"{"version":4,"terraform_version":"1.11.4","serial":1,"lineage":"run","outputs":{},"resources":[]}"#;

/// A lock trailer counts only when gitstate made it (issue 55): someone with push access who
/// stole a CI token rewrites the commit of a lock that token holds with plain git, once with
/// the token's SHA-256 (the trailer earlier versions wrote, which anyone holding the token can
/// compute), once with the seal of the same token's lock on another path. Each time, once the
/// token has expired, its POST, DELETE and GET with the lock ID are 401s and nothing is
/// written; the genuine lock commit put back, the run finishes.
#[test]
fn a_forged_lock_trailer_gives_a_stolen_expired_token_nothing() {
    let issuer = Issuer::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let remote = bare_repo(dir.path(), "states");
    remote_config(dir.path(), &remote, &issuer);
    let gitstate = Gitstate::start(
        &["--config", "gitstate.hcl"],
        &[("GITSTATE_RUN_KEY", RUN_KEY)],
        dir.path(),
    );
    let exp = now() + 5;
    let stolen = ci_token(&issuer, exp);
    let url = |path: &str| gitstate.state_url("default", path);
    for (path, id) in [("a.tfstate", "run-a"), ("b.tfstate", "run-b")] {
        let (status, body) = http(
            "LOCK",
            &url(path),
            Some(&lock_info(id)),
            Some(("x", &stolen)),
        )
        .unwrap();
        assert_eq!(status, 200, "{body}");
    }
    let lock_a = tip(&remote, "locks/a.tfstate");
    let message = |commit: &str| git(Some(&remote), &["log", "-1", "--format=%B", commit]);
    let trailer = |message: &str| {
        message
            .lines()
            .find(|l| l.starts_with("Gitstate-Lock-Token: "))
            .expect("a lock trailer")
            .to_owned()
    };
    let sealed_b = trailer(&message(&tip(&remote, "locks/b.tfstate")));
    wait_past(exp);

    // Plain git, as a pusher would: a clone of the lock branches; the same lock file with
    // another trailer, force-pushed.
    let work = tempfile::tempdir().expect("tempdir");
    let remote_url = remote.to_str().expect("utf-8");
    git(Some(work.path()), &["init", "--quiet"]);
    git(
        Some(work.path()),
        &[
            "fetch",
            "--quiet",
            remote_url,
            "refs/heads/locks/*:refs/heads/locks/*",
        ],
    );
    let push = |commit: &str| {
        let to = format!("{commit}:refs/heads/locks/a.tfstate");
        git(
            Some(work.path()),
            &["push", "--quiet", "--force", remote_url, &to],
        );
    };
    let rewrite = |trailer: &str| {
        let subject = "Lock a.tfstate: OperationTypeApply by ci@runner (run-a)";
        let tree = format!("{lock_a}^{{tree}}");
        let message = format!("{subject}\n\n{trailer}");
        let commit = git(Some(work.path()), &["commit-tree", &tree, "-m", &message]);
        push(commit.trim());
    };
    let run = format!("{}?ID=run-a", url("a.tfstate"));
    for (what, forged) in [
        (
            "the stolen token's sha256",
            format!(
                "Gitstate-Lock-Token: sha256:{}",
                crypto::sha256_hex(&stolen)
            ),
        ),
        ("the seal of the same token's lock on b.tfstate", sealed_b),
    ] {
        rewrite(&forged);
        let before = (
            tip(&remote, "main"),
            git_output(Some(&remote), &["log", "--all", "--format=%H"]).stdout,
        );
        for (method, target, body) in [
            ("POST", run.clone(), Some(FIRST_STATE)),
            ("DELETE", run.clone(), None),
            ("GET", url("a.tfstate"), None),
        ] {
            let (status, answer) = http(method, &target, body, Some(("x", &stolen))).unwrap();
            assert_eq!(status, 401, "{what}: {method} answered {answer}");
            assert!(answer.contains("expired"), "{what}: {answer}");
        }
        assert_eq!(
            before,
            (
                tip(&remote, "main"),
                git_output(Some(&remote), &["log", "--all", "--format=%H"]).stdout
            ),
            "{what}: a refused request wrote"
        );
    }

    // The genuine lock commit put back: the expired token finishes its run.
    push(&lock_a);
    let (status, body) = http("POST", &run, Some(FIRST_STATE), Some(("x", &stolen))).unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        git_log_subjects(&remote, "main", "a.tfstate"),
        ["Update a.tfstate (serial 1) by ci@runner"]
    );
    let (status, body) = http(
        "UNLOCK",
        &url("a.tfstate"),
        Some(&lock_info("run-a")),
        Some(("x", &stolen)),
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(!gitstate.log().contains(RUN_KEY), "the run key in the log");
}

/// Every process that shares the run key seals and checks alike (issue 55): the lock taken
/// through one `gitstate serve`, the expired token finishes the run through another on the same
/// repository. Without a run key each process makes its own: the run finishes only through the
/// process that took the lock (the documented limit), and each such process says so at start.
#[test]
fn a_run_finishes_through_any_process_that_shares_the_run_key() {
    let issuer = Issuer::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let remote = bare_repo(dir.path(), "states");
    remote_config(dir.path(), &remote, &issuer);
    let start =
        |env: &[(&str, &str)]| Gitstate::start(&["--config", "gitstate.hcl"], env, dir.path());
    let shared = [("GITSTATE_RUN_KEY", RUN_KEY)];
    let (one, two) = (start(&shared), start(&shared));
    let (alone, other) = (start(&[]), start(&[]));
    let exp = now() + 5;
    let token = ci_token(&issuer, exp);
    let url = |server: &Gitstate, path: &str| server.state_url("default", path);
    for (server, path, id) in [
        (&one, "shared.tfstate", "run-1"),
        (&alone, "alone.tfstate", "run-2"),
    ] {
        let (status, body) = http(
            "LOCK",
            &url(server, path),
            Some(&lock_info(id)),
            Some(("x", &token)),
        )
        .unwrap();
        assert_eq!(status, 200, "{body}");
    }
    wait_past(exp);

    let through = |server: &Gitstate, path: &str, id: &str| {
        http(
            "POST",
            &format!("{}?ID={id}", url(server, path)),
            Some(FIRST_STATE),
            Some(("x", &token)),
        )
        .unwrap()
    };
    let (status, body) = through(&two, "shared.tfstate", "run-1");
    assert_eq!(
        status, 200,
        "through the other process with the same key: {body}"
    );
    let (status, body) = http(
        "UNLOCK",
        &url(&two, "shared.tfstate"),
        Some(&lock_info("run-1")),
        Some(("x", &token)),
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");

    let (status, body) = through(&other, "alone.tfstate", "run-2");
    assert_eq!(status, 401, "another process with its own key: {body}");
    assert!(git_log_subjects(&remote, "main", "alone.tfstate").is_empty());
    let (status, body) = through(&alone, "alone.tfstate", "run-2");
    assert_eq!(status, 200, "the process that took the lock: {body}");

    let said = "no run key is configured";
    assert!(alone.log().contains(said) && other.log().contains(said));
    assert!(!one.log().contains(said) && !one.log().contains(RUN_KEY));
}
