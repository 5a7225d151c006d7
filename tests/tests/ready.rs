//! `/_/ready` (issue 20, "Readiness"): each configured repository must answer a ref
//! advertisement with the deployment's credential; the result is cached; an anonymous probe of a
//! team deployment learns the status only; no credential ever shows. Real lighttpd +
//! `git http-backend` with basic auth, real gitstate.

use gitstate_tests::crypto::sha256_hex;
use gitstate_tests::*;
use serde_json::Value;

const USER: &str = "deploy";
const PASSWORD: &str = "deploy-secret-pw";

fn get_ready(server: &Gitstate, auth: Option<(&str, &str)>) -> (u16, Value) {
    let url = format!("{}/_/ready", server.base_url());
    let (status, body) = http("GET", &url, None, auth).expect("GET /_/ready");
    let json = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    (status, json)
}

/// A git server holding `states.git` (and its repositories directory).
fn git_server() -> (GitHttpServer, tempfile::TempDir) {
    let repos = tempfile::tempdir().expect("tempdir");
    bare_repo(repos.path(), "states");
    (GitHttpServer::start(repos.path(), USER, PASSWORD), repos)
}

#[test]
fn ready_when_the_repository_answers_with_the_deployments_credential_and_cached() {
    let (git, _repos) = git_server();
    let spec = format!("default={}", git.url("states"));
    let cwd = tempfile::tempdir().expect("tempdir");
    let server = Gitstate::start(
        &["--repository", &spec],
        &[("GIT_USERNAME", USER), ("GIT_PASSWORD", PASSWORD)],
        cwd.path(),
    );
    let (status, json) = get_ready(&server, None);
    assert_eq!(status, 200, "{json}\n{}", server.log());
    assert_eq!(json["status"], "ready");
    assert_eq!(json["repositories"]["default"], "ok", "{json}");
    let asked = git.requests().len();
    assert!(asked >= 1, "the git server was not asked");
    for _ in 0..5 {
        assert_eq!(get_ready(&server, None).0, 200);
    }
    assert_eq!(
        git.requests().len(),
        asked,
        "probes within the cache time asked the git server again: {:?}",
        git.requests()
    );
    // A liveness probe never asks the git server.
    let (status, _) = http(
        "GET",
        &format!("{}/_/health", server.base_url()),
        None,
        None,
    )
    .expect("GET /_/health");
    assert_eq!((status, git.requests().len()), (200, asked));
}

#[test]
fn not_ready_with_a_refused_credential_and_the_reason_names_no_secret() {
    let (git, _repos) = git_server();
    let spec = format!("default={}", git.url("states"));
    let cwd = tempfile::tempdir().expect("tempdir");
    let wrong = "not-the-deploy-password";
    let server = Gitstate::start(
        &["--repository", &spec],
        &[("GIT_USERNAME", USER), ("GIT_PASSWORD", wrong)],
        cwd.path(),
    );
    let (status, json) = get_ready(&server, None);
    assert_eq!(status, 503, "{json}");
    // One sentence naming the repository (server mode: whoever reached the server is an
    // operator); the reason is logged under the answer's request id.
    let sentence = json["error"].as_str().unwrap_or_default();
    assert!(
        sentence
            .starts_with("gitstate is not ready, because the repository default did not answer"),
        "{json}"
    );
    let id = json["request_id"].as_str().unwrap_or_default();
    assert!(
        server.logged(
            id,
            "repository default: the git server asked for credentials"
        ),
        "the reason is not logged under {id}:\n{}",
        server.log()
    );
    let text = format!("{json}{}", server.log());
    assert!(!text.contains(wrong), "the credential shows: {text}");
}

#[test]
fn an_anonymous_probe_of_a_team_deployment_gets_the_status_only() {
    let (git, _repos) = git_server();
    let spec = format!("default={}", git.url("states"));
    let cwd = tempfile::tempdir().expect("tempdir");
    let hash = format!("sha256:{}", sha256_hex("team-token"));
    let server = Gitstate::start(
        &[
            "--repository",
            &spec,
            "--auth-mode",
            "team",
            "--token-hash",
            &hash,
        ],
        &[("GIT_USERNAME", USER), ("GIT_PASSWORD", PASSWORD)],
        cwd.path(),
    );
    let (status, json) = get_ready(&server, None);
    assert_eq!((status, json["status"].as_str()), (200, Some("ready")));
    assert!(json.get("repositories").is_none(), "{json}");
    let (status, json) = get_ready(&server, Some(("ops", "team-token")));
    assert_eq!(status, 200);
    assert_eq!(json["repositories"]["default"], "ok", "{json}");
    let (_, json) = get_ready(&server, Some(("ops", "a-wrong-token")));
    assert!(json.get("repositories").is_none(), "{json}");
}

#[test]
fn pass_through_is_ready_while_the_git_server_answers_and_not_once_it_is_gone() {
    let (git, repos) = git_server();
    let spec = format!("default={}", git.url("states"));
    let cwd = tempfile::tempdir().expect("tempdir");
    let args = ["--repository", spec.as_str(), "--auth-mode", "passthrough"];
    let server = Gitstate::start(&args, &[], cwd.path());
    // It holds no credential: the git server asking for one is an answer.
    let (status, json) = get_ready(&server, None);
    assert_eq!(
        (status, json["status"].as_str()),
        (200, Some("ready")),
        "{json}"
    );
    drop(server);
    drop(git);
    let server = Gitstate::start(&args, &[], cwd.path());
    let (status, json) = get_ready(&server, None);
    assert_eq!(status, 503, "{json}");
    let sentence = json["error"].as_str().unwrap_or_default();
    assert!(sentence.starts_with("gitstate is not ready"), "{json}");
    drop(repos);
}
