//! Secrets hygiene: one run that uses every kind of credential gitstate handles (the server's
//! git password, a team token, an age identity, a caller's pass-through pair, a password inside a
//! query-style URL), on success and failure paths, then greps every server log line, every
//! response body and every commit of the repository for each secret, and finds none.

use gitstate_tests::crypto::{sha256_hex, AgeKeyPair};
use gitstate_tests::*;

const USER: &str = "secrets-bot";
const GIT_PASSWORD: &str = "Git-Pa55-q8Zr1";
const TEAM_TOKEN: &str = "Team-T0ken-w3Kd9";
const URL_PASSWORD: &str = "Url-Pa55-m4Xn7";
const STATE: &str = r#"{"version":4,"terraform_version":"1.15.5","serial":1,"lineage":"secrets","outputs":{"db":{"value":"not-a-credential","type":"string"}},"resources":[]}"#;

#[test]
fn no_credential_reaches_a_log_a_response_or_a_commit() {
    let repos = tempfile::tempdir().unwrap();
    let repo = bare_repo(repos.path(), "states");
    let git_server = GitHttpServer::start(repos.path(), USER, GIT_PASSWORD);
    let keys = tempfile::tempdir().unwrap();
    let age = AgeKeyPair::generate();
    let age_file = age.write_key_file(keys.path(), "age");
    let spec = format!("default={}", git_server.url("states"));
    let cwd = tempfile::tempdir().unwrap();
    let team = Gitstate::start(
        &[
            "--repository",
            &spec,
            "--auth-mode",
            "team",
            "--token-hash",
            &format!("sha256:{}", sha256_hex(TEAM_TOKEN)),
            "--age-recipient",
            &age.recipient,
            "--allow",
            "*",
        ],
        &[
            ("GIT_USERNAME", USER),
            ("GIT_PASSWORD", GIT_PASSWORD),
            ("SOPS_AGE_KEY_FILE", age_file.to_str().unwrap()),
            ("RUST_LOG", "debug"),
        ],
        cwd.path(),
    );
    let passthrough = Gitstate::start(
        &["--repository", &spec, "--auth-mode", "passthrough"],
        &[("RUST_LOG", "debug")],
        cwd.path(),
    );

    let mut bodies = Vec::new();
    let mut call = |method: &str, url: &str, body: Option<&str>, auth: Option<(&str, &str)>| {
        let (status, text) = http(method, url, body, auth).unwrap();
        bodies.push(format!("{method} {status} {text}"));
        status
    };
    let url = team.state_url("default", "prod.tfstate");
    let ok = Some(("ci", TEAM_TOKEN));
    assert_eq!(call("POST", &url, Some(STATE), ok), 200);
    assert_eq!(call("GET", &url, None, ok), 200);
    let lock = lock_info("l1", "ci@secrets", "OperationTypeApply");
    assert_eq!(call("LOCK", &url, Some(&lock), ok), 200);
    assert_eq!(call("POST", &url, Some(STATE), ok), 423);
    assert_eq!(call("UNLOCK", &url, Some(&lock), ok), 200);
    assert_eq!(
        call("GET", &url, None, Some(("ci", "Team-T0ken-wrong"))),
        401
    );
    assert_eq!(call("GET", &url, None, Some((USER, GIT_PASSWORD))), 401);
    assert_eq!(call("POST", &url, Some("{not json"), ok), 400);
    let adhoc = format!(
        "{}/?type=git&repository=https%3A%2F%2Fbot%3A{URL_PASSWORD}%40127.0.0.1%2Fx.git&state=a.tfstate",
        team.base_url()
    );
    assert_eq!(call("GET", &adhoc, None, ok), 403);
    let pt = passthrough.state_url("default", "pt.tfstate");
    assert_eq!(call("GET", &pt, None, Some((USER, "Wr0ng-Pa55-z1"))), 401);
    assert_eq!(
        call("POST", &pt, Some(STATE), Some((USER, GIT_PASSWORD))),
        200
    );

    let commits = git(
        None,
        &[
            &format!("--git-dir={}", repo.display()),
            "log",
            "--all",
            "-p",
            "--format=%H %an %ae %s%n%b",
        ],
    );
    let secrets = [
        GIT_PASSWORD,
        TEAM_TOKEN,
        URL_PASSWORD,
        "Team-T0ken-wrong",
        "Wr0ng-Pa55-z1",
        age.identity.as_str(),
    ];
    let places = [
        ("the team server's log", team.log()),
        ("the pass-through server's log", passthrough.log()),
        ("a response body", bodies.join("\n")),
        ("a commit", commits),
    ];
    for (place, text) in &places {
        assert!(
            text.len() > 100,
            "{place} is empty: the check would prove nothing"
        );
        for secret in secrets {
            assert!(
                !text.contains(secret),
                "{place} contains a credential ({}…)",
                &secret[..4]
            );
        }
    }
}
