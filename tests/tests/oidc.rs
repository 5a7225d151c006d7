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
