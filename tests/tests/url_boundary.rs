//! The ad-hoc URL boundary (issue 15, items 3–5), through the real binary against a real
//! smart-HTTP git server (lighttpd + `git http-backend` with basic auth) that holds a team's
//! repository and a `secret` one. The server's own git credential could read both; each test
//! checks from the git server's request log that nothing reached `secret.git` (or the server at
//! all, where the request must be refused before any connection).

use std::io::{Read, Write};
use std::net::{TcpListener, ToSocketAddrs};

use gitstate_tests::*;

const USER: &str = "deploy";
const PASSWORD: &str = "deploy-secret-pw";
const STATE: &str = r#"{"version":4,"terraform_version":"1.15.5","serial":1,"lineage":"url","outputs":{},"resources":[]}"#;

struct Setup {
    _repos: tempfile::TempDir,
    _cwd: tempfile::TempDir,
    git: GitHttpServer,
    gitstate: Gitstate,
}

/// A git server with `team-a.git` and `secret.git` (holding a state), and gitstate started
/// with `args` and the git server's credential as its own.
fn setup(args: &[&str]) -> Setup {
    let repos = tempfile::tempdir().unwrap();
    bare_repo(repos.path(), "team-a");
    let secret = bare_repo(repos.path(), "secret");
    seed_commit(&secret);
    let git = GitHttpServer::start(repos.path(), USER, PASSWORD);
    let cwd = tempfile::tempdir().unwrap();
    let args: Vec<String> = args
        .iter()
        .map(|a| a.replace("PORT", &git.port().to_string()))
        .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let gitstate = Gitstate::start(
        &args,
        &[("GIT_USERNAME", USER), ("GIT_PASSWORD", PASSWORD)],
        cwd.path(),
    );
    Setup {
        _repos: repos,
        _cwd: cwd,
        git,
        gitstate,
    }
}

fn adhoc(base: &str, repository: &str) -> String {
    let query: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("type", "git")
        .append_pair("repository", repository)
        .append_pair("state", "prod.tfstate")
        .finish();
    format!("{base}/?{query}")
}

fn get(setup: &Setup, repository: &str) -> (u16, String) {
    http(
        "GET",
        &adhoc(&setup.gitstate.base_url(), repository),
        None,
        None,
    )
    .expect("gitstate answers")
}

fn secret_untouched(setup: &Setup) {
    let requests = setup.git.requests();
    assert!(
        !requests.iter().any(|r| r.contains("secret")),
        "the git server was asked for the secret repository: {requests:?}"
    );
}

#[test]
fn allow_globs_cannot_be_stretched_to_another_repository() {
    let s = setup(&[
        "--allow-with-credential",
        "http://127.0.0.1:PORT/git/team-*",
    ]);
    let port = s.git.port();
    let (status, body) = get(&s, &format!("http://127.0.0.1:{port}/git/team-a.git"));
    assert_eq!(status, 204, "the allowed repository works: {body}");
    let (status, body) = http(
        "POST",
        &adhoc(
            &s.gitstate.base_url(),
            &format!("http://127.0.0.1:{port}/git/team-a.git"),
        ),
        Some(STATE),
        None,
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    for stretched in [
        "team-a.git\\..\\secret.git",
        "team-a.git/..%2fsecret.git",
        "team-a.git/%2e%2e/secret.git",
        "team-a.git/%2E%2E%2Fsecret.git",
        "team-a/../secret.git",
        "team-a.git/../../git/secret.git",
        "team-x/secret.git",
    ] {
        let url = format!("http://127.0.0.1:{port}/git/{stretched}");
        let (status, body) = get(&s, &url);
        assert_eq!(status, 403, "{url}: {body}");
        let error: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert!(error["error"].as_str().is_some(), "{body}");
    }
    secret_untouched(&s);
}

#[test]
fn spellings_of_loopback_are_refused_before_any_connection() {
    // A wildcard host admits any public host; the git server sits on loopback.
    let s = setup(&["--allow-with-credential", "http://*:*/**"]);
    let port = s.git.port();
    for host in [
        "%31%32%37.0.0.1",
        "127.1",
        "2130706433",
        "0x7f000001",
        "0177.0.0.1",
        "127.0.0.1.",
        "[::ffff:127.0.0.1]",
        "[::ffff:7f00:1]",
        "LocalHost",
        "team.localhost",
    ] {
        let url = format!("http://{host}:{port}/git/secret.git");
        let (status, body) = get(&s, &url);
        assert_eq!(status, 403, "{url}: {body}");
        assert!(body.contains("loopback"), "{url}: {body}");
    }
    assert!(
        s.git.requests().is_empty(),
        "a refused URL reached the git server: {:?}",
        s.git.requests()
    );
}

/// A host name (not `localhost`) that this machine resolves to a loopback address: the machine's
/// own name is in /etc/hosts on Debian.
fn name_resolving_to_loopback() -> String {
    let hostname = std::fs::read_to_string("/etc/hostname")
        .unwrap_or_default()
        .trim()
        .to_owned();
    for name in [hostname.as_str(), "ip6-localhost", "ip6-loopback"] {
        if name.is_empty() || name == "localhost" || name.ends_with(".localhost") {
            continue;
        }
        let loopback = (name, 80)
            .to_socket_addrs()
            .map(|mut addrs| addrs.all(|a| a.ip().is_loopback()))
            .unwrap_or(false);
        if loopback {
            return name.to_owned();
        }
    }
    panic!(
        "no host name on this machine resolves to a loopback address (the machine's name \
         '{hostname}' does not); add it to /etc/hosts as 127.0.1.1"
    );
}

#[test]
fn a_name_that_resolves_to_loopback_is_refused_when_connecting() {
    let s = setup(&["--allow-with-credential", "http://*:*/**"]);
    let name = name_resolving_to_loopback();
    let url = format!("http://{name}:{}/git/secret.git", s.git.port());
    let (status, body) = get(&s, &url);
    assert_eq!(status, 403, "{url}: {body}");
    assert!(
        body.contains("resolves only to addresses the deployment refuses"),
        "{url}: {body}"
    );
    assert!(
        s.git.requests().is_empty(),
        "the git server was reached: {:?}",
        s.git.requests()
    );
}

#[test]
fn redirects_from_an_allowed_host_are_not_followed() {
    // An allowed host that redirects every request to the secret repository.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let redirector = listener.local_addr().unwrap().port();
    let s = setup(&[
        "--allow-with-credential",
        &format!("http://127.0.0.1:{redirector}/git/*"),
    ]);
    let target = format!("http://127.0.0.1:{}/git/secret.git", s.git.port());
    let location = target.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut stream = stream;
            let mut request = [0u8; 4096];
            let n = stream.read(&mut request).unwrap_or(0);
            let line = String::from_utf8_lossy(&request[..n]);
            let tail = line
                .split_whitespace()
                .nth(1)
                .and_then(|uri| uri.split_once(".git").map(|(_, t)| t.to_owned()))
                .unwrap_or_default();
            let _ = write!(
                stream,
                "HTTP/1.1 302 Found\r\nLocation: {location}{tail}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
        }
    });
    let (status, body) = get(&s, &format!("http://127.0.0.1:{redirector}/git/team-a.git"));
    assert!(
        status != 200 && status != 204,
        "a redirect to {target} was followed: {status} {body}"
    );
    secret_untouched(&s);
}

#[test]
fn an_adhoc_url_gets_the_server_credential_only_when_a_pattern_says_so() {
    let s = setup(&["--allow", "http://127.0.0.1:PORT/git/*"]);
    let port = s.git.port();
    let url = format!("http://127.0.0.1:{port}/git/team-a.git");
    let (status, body) = get(&s, &url);
    assert_eq!(
        status, 401,
        "without allow_with_credential the git server must see no credential: {body}"
    );
    assert!(!body.contains(PASSWORD));
    // Credentials in the URL are refused outright, never used or shown.
    let (status, body) = get(
        &s,
        &format!("http://{USER}:{PASSWORD}@127.0.0.1:{port}/git/team-a.git"),
    );
    assert_eq!(status, 403, "{body}");
    assert!(!body.contains(PASSWORD), "{body}");
    assert!(!s.gitstate.log().contains(PASSWORD));

    let s = setup(&["--allow-with-credential", "http://127.0.0.1:PORT/git/*"]);
    let url = format!("http://127.0.0.1:{}/git/team-a.git", s.git.port());
    let (status, body) = get(&s, &url);
    assert_eq!(status, 204, "{body}");
}

#[test]
fn passthrough_refuses_adhoc_transports_that_cannot_carry_the_callers_credential() {
    let repos = tempfile::tempdir().unwrap();
    bare_repo(repos.path(), "team-a");
    let daemon = GitDaemon::start(repos.path());
    let cwd = tempfile::tempdir().unwrap();
    let gitstate = Gitstate::start(
        &[
            "--auth-mode",
            "passthrough",
            "--repository",
            "default=http://127.0.0.1:1/none.git",
            "--allow",
            "git://127.0.0.1:*/*",
            "--allow",
            "ssh://127.0.0.1/*",
        ],
        &[],
        cwd.path(),
    );
    for url in [daemon.url("team-a"), "ssh://127.0.0.1/srv.git".into()] {
        let (status, body) = http(
            "GET",
            &adhoc(&gitstate.base_url(), &url),
            None,
            Some(("alice", "alice-token")),
        )
        .unwrap();
        assert_eq!(status, 403, "{url}: {body}");
        assert!(body.contains("cannot carry"), "{url}: {body}");
    }
}
