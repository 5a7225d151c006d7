//! The HTTP contract (DESIGN §2), row by row, against the real `gitstate` binary serving a real
//! git repository (the embedded default, git daemon, smart HTTP with basic auth), checked with the
//! git CLI the way a user would.

use std::path::{Path, PathBuf};
use std::process::Command;

use gitstate_tests::proxy::{ClosingProxy, DelayProxy};
use gitstate_tests::{bare_repo, GitDaemon, GitHttpServer, Gitstate};

use reqwest::blocking::{Client, Response};
use reqwest::Method;

const STATE_1: &str = r#"{"version":4,"terraform_version":"1.15.5","serial":1,"lineage":"4f1c","outputs":{},"resources":[]}"#;
const STATE_2: &str = r#"{"version":4,"terraform_version":"1.15.5","serial":2,"lineage":"4f1c","outputs":{"x":{"value":"<>&ü","type":"string"}},"resources":[]}"#;

fn lock_info(id: &str, who: &str) -> String {
    format!(
        r#"{{"ID":"{id}","Operation":"OperationTypeApply","Info":"","Who":"{who}","Version":"1.15.5","Created":"2026-11-22T10:00:00.000000Z","Path":""}}"#
    )
}

/// Which repository the server under test writes to.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// `gitstate serve` with no repository: `./.gitstate/default.git`.
    Embedded,
    /// A bare repository behind `git daemon --enable=receive-pack` (git://).
    GitDaemon,
    /// A bare repository behind lighttpd + `git http-backend` with basic auth.
    SmartHttp,
}

fn start_gitstate((args, env, cwd): &(Vec<String>, Vec<(String, String)>, PathBuf)) -> Gitstate {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Gitstate::start(&args, &env, cwd)
}

/// Sends `method path` with `body` (empty: none) to a `gitstate serve`; returns the status.
fn send_to(gitstate: &Gitstate, method: &str, path: &str, body: &str) -> reqwest::StatusCode {
    Client::new()
        .request(
            Method::from_bytes(method.as_bytes()).expect("method"),
            format!("{}{path}", gitstate.base_url()),
        )
        .body(body.to_owned())
        .send()
        .expect("request")
        .status()
}

/// A running `gitstate serve` and the bare repository it writes to (inspected with the git CLI).
struct Server {
    gitstate: Gitstate,
    /// How `gitstate` was started, to start a second process on the same repository.
    launch: (Vec<String>, Vec<(String, String)>, PathBuf),
    repo: PathBuf,
    _daemon: Option<GitDaemon>,
    _http: Option<GitHttpServer>,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start(kind: Kind, extra: &[&str]) -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        let repos = dir.path().join("repos");
        std::fs::create_dir_all(&repos).expect("repos dir");
        let mut env = vec![("RUST_LOG".to_owned(), "warn".to_owned())];
        let mut args: Vec<String> = Vec::new();
        let (mut daemon, mut http) = (None, None);
        let repo = match kind {
            Kind::Embedded => dir.path().join(".gitstate/default.git"),
            Kind::GitDaemon => {
                let repo = bare_repo(&repos, "states");
                let server = GitDaemon::start(&repos);
                args = vec![
                    "--repository".into(),
                    format!("default={}", server.url("states")),
                ];
                daemon = Some(server);
                repo
            }
            Kind::SmartHttp => {
                let repo = bare_repo(&repos, "states");
                let server = GitHttpServer::start(&repos, "terraform", "s3cret-pass");
                args = vec![
                    "--repository".into(),
                    format!("default={}", server.url("states")),
                ];
                env.push(("GIT_USERNAME".into(), "terraform".into()));
                env.push(("GIT_PASSWORD".into(), "s3cret-pass".into()));
                http = Some(server);
                repo
            }
        };
        args.extend(extra.iter().map(|a| a.to_string()));
        let launch = (args, env, dir.path().to_owned());
        let gitstate = start_gitstate(&launch);
        Server {
            gitstate,
            launch,
            repo,
            _daemon: daemon,
            _http: http,
            _dir: dir,
        }
    }

    /// Another `gitstate serve` process on the same repository (its own object cache).
    fn second_process(&self) -> Gitstate {
        start_gitstate(&self.launch)
    }

    fn url(&self, path: &str) -> String {
        format!("{}{}", self.gitstate.base_url(), path)
    }

    fn send(&self, method: &str, path: &str, body: Option<&str>) -> Response {
        let client = Client::new();
        let method = Method::from_bytes(method.as_bytes()).expect("method");
        let mut request = client.request(method, self.url(path));
        if let Some(body) = body {
            request = request
                .header("Content-Type", "application/json")
                .body(body.to_owned());
        }
        request.send().expect("request")
    }

    /// Sends a request line exactly as written (HTTP clients normalize `%2e%2e` away); returns the
    /// status and body.
    fn send_raw(&self, method: &str, target: &str) -> (u16, String) {
        use std::io::{Read, Write};
        let base = self.gitstate.base_url();
        let address = base.trim_start_matches("http://");
        let mut stream = std::net::TcpStream::connect(address).expect("connect");
        write!(
            stream,
            "{method} {target} HTTP/1.1\r\nHost: {address}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .expect("write");
        let mut response = String::new();
        stream.read_to_string(&mut response).expect("read");
        let status = response
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("a status line");
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default();
        (status, body)
    }

    fn git(&self, args: &[&str]) -> String {
        git_in(&self.repo, args)
    }
}

fn git_in(repo: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("--git-dir")
        .arg(repo)
        .args(args)
        .output()
        .expect("git");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn commit_count(server: &Server) -> usize {
    server
        .git(&["rev-list", "--count", "main"])
        .trim()
        .parse()
        .unwrap_or(0)
}

fn lock_refs(server: &Server) -> String {
    server.git(&["for-each-ref", "--format=%(refname)", "refs/heads/locks/"])
}

fn error_of(response: Response) -> String {
    let body: serde_json::Value =
        serde_json::from_str(&response.text().expect("a body")).expect("a JSON error body");
    body["error"]
        .as_str()
        .expect("an error sentence")
        .to_owned()
}

fn get_post_replay_and_content_md5(kind: Kind) {
    let s = Server::start(kind, &[]);
    assert_eq!(
        s.send("GET", "/state/default/prod.tfstate", None).status(),
        204
    );

    assert_eq!(
        s.send("POST", "/state/default/prod.tfstate", Some(STATE_1))
            .status(),
        200
    );
    let got = s.send("GET", "/state/default/prod.tfstate", None);
    assert_eq!(got.status(), 200);
    assert_eq!(
        got.headers()["content-md5"].to_str().unwrap(),
        md5_b64(STATE_1)
    );
    assert_eq!(got.text().unwrap(), STATE_1);
    assert_eq!(s.git(&["show", "main:prod.tfstate"]), STATE_1);
    assert_eq!(commit_count(&s), 1);

    // A replayed POST of the same body succeeds without a new commit.
    assert_eq!(
        s.send("POST", "/state/default/prod.tfstate", Some(STATE_1))
            .status(),
        200
    );
    assert_eq!(commit_count(&s), 1);

    assert_eq!(
        s.send("POST", "/state/default/prod.tfstate", Some(STATE_2))
            .status(),
        200
    );
    assert_eq!(commit_count(&s), 2);
    assert_eq!(
        s.send("GET", "/state/default/prod.tfstate", None)
            .text()
            .unwrap(),
        STATE_2
    );
    let log = s.git(&["log", "--format=%s|%cn", "--", "prod.tfstate"]);
    assert_eq!(
        log,
        "Update prod.tfstate (serial 2) by anonymous|gitstate\nUpdate prod.tfstate (serial 1) by anonymous|gitstate\n"
    );
    // Nested paths work and leave other states alone.
    assert_eq!(
        s.send("POST", "/state/default/team/net/dev.tfstate", Some(STATE_1))
            .status(),
        200
    );
    assert_eq!(s.git(&["show", "main:team/net/dev.tfstate"]), STATE_1);
    assert_eq!(s.git(&["show", "main:prod.tfstate"]), STATE_2);
    let changed = s.git(&["show", "--name-only", "--format=", "main"]);
    assert_eq!(changed, "team/net/dev.tfstate\n");
}

fn md5_b64(text: &str) -> String {
    // md5 through openssl keeps the test honest about the header's value.
    let out = Command::new("sh")
        .arg("-c")
        .arg("printf '%s' \"$0\" | openssl dgst -md5 -binary | base64")
        .arg(text)
        .output()
        .expect("openssl");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn lock_rules_and_423_bodies(kind: Kind) {
    let s = Server::start(kind, &[]);
    let a = lock_info("lock-a", "alice@laptop");
    let b = lock_info("lock-b", "bob@ci");
    let p = "/state/default/prod.tfstate";

    assert_eq!(s.send("LOCK", p, Some(&a)).status(), 200);
    assert_eq!(lock_refs(&s), "refs/heads/locks/prod.tfstate\n");
    assert_eq!(s.git(&["show", "locks/prod.tfstate:prod.tfstate.lock"]), a);
    assert_eq!(
        s.git(&["log", "-1", "--format=%s", "locks/prod.tfstate"]),
        "Lock prod.tfstate: OperationTypeApply by alice@laptop (lock-a)\n"
    );
    // The same ID again: a retry, 200.
    assert_eq!(s.send("LOCK", p, Some(&a)).status(), 200);
    // Another ID: 423 with the holder's LockInfo exactly as stored.
    let r = s.send("LOCK", p, Some(&b));
    assert_eq!(r.status(), 423);
    assert_eq!(r.text().unwrap(), a);

    // Writes while locked: no ID or another ID → 423 + holder; the holder's ID → 200.
    let r = s.send("POST", p, Some(STATE_1));
    assert_eq!(r.status(), 423);
    assert_eq!(r.text().unwrap(), a);
    assert_eq!(
        s.send("POST", &format!("{p}?ID=lock-b"), Some(STATE_1))
            .status(),
        423
    );
    assert_eq!(s.send("DELETE", p, None).status(), 423);
    assert_eq!(commit_count(&s), 0);
    assert_eq!(
        s.send("POST", &format!("{p}?ID=lock-a"), Some(STATE_1))
            .status(),
        200
    );
    assert_eq!(
        s.git(&["log", "-1", "--format=%s", "main"]),
        "Update prod.tfstate (serial 1) by alice@laptop\n"
    );

    // UNLOCK by another ID → 423 + holder; by the holder → 200; again → 200.
    let r = s.send("UNLOCK", p, Some(&b));
    assert_eq!(r.status(), 423);
    assert_eq!(r.text().unwrap(), a);
    assert_eq!(s.send("UNLOCK", p, Some(&a)).status(), 200);
    assert_eq!(lock_refs(&s), "");
    assert_eq!(s.send("UNLOCK", p, Some(&a)).status(), 200);

    // DELETE with the lock held: removes the file in a commit.
    assert_eq!(s.send("LOCK", p, Some(&b)).status(), 200);
    assert_eq!(
        s.send("DELETE", &format!("{p}?ID=lock-b"), None).status(),
        200
    );
    assert_eq!(s.send("GET", p, None).status(), 204);
    assert_eq!(
        s.git(&["log", "-1", "--format=%s", "main"]),
        "Delete prod.tfstate by bob@ci\n"
    );
    // Deleting what is gone is a success without a commit.
    let before = commit_count(&s);
    assert_eq!(
        s.send("DELETE", &format!("{p}?ID=lock-b"), None).status(),
        200
    );
    assert_eq!(commit_count(&s), before);
    assert_eq!(s.send("UNLOCK", p, Some(&b)).status(), 200);
}

fn force_unlock_terraform_and_opentofu(kind: Kind) {
    let s = Server::start(kind, &[]);
    let p = "/state/default/prod.tfstate";
    // Terraform force-unlock: empty body.
    assert_eq!(
        s.send("LOCK", p, Some(&lock_info("held", "x@y"))).status(),
        200
    );
    assert_eq!(s.send("UNLOCK", p, Some("")).status(), 200);
    assert_eq!(lock_refs(&s), "");
    // OpenTofu force-unlock: LockInfo with only the ID.
    assert_eq!(
        s.send("LOCK", p, Some(&lock_info("held-2", "x@y")))
            .status(),
        200
    );
    assert_eq!(
        s.send("UNLOCK", p, Some(r#"{"ID":"held-2"}"#)).status(),
        200
    );
    assert_eq!(lock_refs(&s), "");
    // The /lock alias: POST locks, DELETE unlocks.
    let alias = "/lock/default/prod.tfstate";
    assert_eq!(
        s.send("POST", alias, Some(&lock_info("via-alias", "g@w")))
            .status(),
        200
    );
    let r = s.send("LOCK", p, Some(&lock_info("other", "o@w")));
    assert_eq!(r.status(), 423);
    assert_eq!(r.text().unwrap(), lock_info("via-alias", "g@w"));
    assert_eq!(
        s.send("DELETE", alias, Some(&lock_info("via-alias", "g@w")))
            .status(),
        200
    );
    assert_eq!(lock_refs(&s), "");
}

fn bad_input_is_a_4xx_and_writes_nothing(kind: Kind) {
    let s = Server::start(kind, &["--max-state-bytes", "4096"]);
    let p = "/state/default/prod.tfstate";
    let cases: Vec<(&str, String, Option<String>, u16, &str)> = vec![
        (
            "POST",
            p.into(),
            Some("not json".into()),
            400,
            "not a JSON object",
        ),
        (
            "POST",
            p.into(),
            Some("[1,2]".into()),
            400,
            "not a JSON object",
        ),
        (
            "POST",
            p.into(),
            Some(r#"{"hello":"world"}"#.into()),
            400,
            "not a Terraform state",
        ),
        (
            "POST",
            p.into(),
            Some(r#"{"version":4,"serial":"#.into()),
            400,
            "not valid JSON",
        ),
        (
            "POST",
            p.into(),
            Some(format!(r#"{{"version":4,"pad":"{}"}}"#, "x".repeat(5000))),
            413,
            "maximum",
        ),
        ("LOCK", p.into(), Some("{}".into()), 400, "\"ID\""),
        ("LOCK", p.into(), Some("nope".into()), 400, "LockInfo"),
        (
            "UNLOCK",
            p.into(),
            Some(r#"{"ID":7}"#.into()),
            400,
            "LockInfo",
        ),
        ("GET", "/state/default/x.lock".into(), None, 400, ".lock"),
        (
            "GET",
            "/state/default/.hidden".into(),
            None,
            400,
            "starts with '.'",
        ),
        (
            "GET",
            "/state/default/a%2F%2Fb".into(),
            None,
            400,
            "empty segment",
        ),
        ("GET", "/state/default/a%20b".into(), None, 400, "U+0020"),
        ("GET", "/state/default/a%00b".into(), None, 400, "U+0000"),
        (
            "GET",
            format!("/state/default/{}", "a".repeat(513)),
            None,
            400,
            "512",
        ),
        (
            "GET",
            "/state/nosuchrepo/prod.tfstate".into(),
            None,
            404,
            "nosuchrepo",
        ),
        ("PATCH", p.into(), None, 405, "PATCH"),
        (
            "GET",
            "/?type=git&repository=https%3A%2F%2Fexample.com%2Fa.git&state=x".into(),
            None,
            403,
            "allow",
        ),
        ("GET", "/?type=s3&state=x".into(), None, 400, "type=git"),
    ];
    for (method, path, body, status, needle) in cases {
        let r = s.send(method, &path, body.as_deref());
        assert_eq!(r.status().as_u16(), status, "{method} {path}");
        let error = error_of(r);
        assert!(
            error.contains(needle),
            "{method} {path}: {error:?} should mention {needle:?}"
        );
        assert!(!error.contains('\n'), "one sentence: {error:?}");
    }
    // Traversal and odd paths, sent byte for byte (clients would normalize them).
    let raw_cases: &[(&str, &str, &str)] = &[
        ("GET", "/state/default/%2e%2e/etc/passwd", ".."),
        ("POST", "/state/default/a/../../b", ".."),
        ("LOCK", "/state/default/a\\b", "'\\'"),
        ("GET", "/state/default/ok/%2E%2E", ".."),
        ("GET", "/state/default/a/x.lock/b", ".lock"),
        ("GET", "/state/default/%ff", "UTF-8"),
    ];
    for (method, target, needle) in raw_cases {
        let (status, body) = s.send_raw(method, target);
        assert_eq!(status, 400, "{method} {target}: {body}");
        let error: serde_json::Value = serde_json::from_str(&body).expect("JSON error");
        let error = error["error"].as_str().expect("error sentence");
        assert!(
            error.contains(needle),
            "{method} {target}: {error:?} should mention {needle:?}"
        );
    }
    assert_eq!(commit_count(&s), 0);
    assert_eq!(lock_refs(&s), "");
    assert_eq!(s.send("GET", "/_/health", None).status(), 200);
}

/// `writers` threads each POST serials 1..=`writes` to their own state `{prefix}{w}.tfstate`,
/// writer `w` through server `bases[w % bases.len()]`; every answer must be 200. Then every write
/// must be a commit and every file its last write.
fn write_concurrently(s: &Server, bases: &[String], writers: usize, writes: usize, prefix: &str) {
    let body = |w: usize, serial: usize| {
        format!(r#"{{"version":4,"serial":{serial},"lineage":"{prefix}{w}","resources":[]}}"#)
    };
    std::thread::scope(|scope| {
        for w in 0..writers {
            let base = &bases[w % bases.len()];
            scope.spawn(move || {
                let client = Client::new();
                for serial in 1..=writes {
                    let r = client
                        .post(format!("{base}/state/default/{prefix}{w}.tfstate"))
                        .body(body(w, serial))
                        .send()
                        .expect("post");
                    let status = r.status();
                    let text = r.text().unwrap_or_default();
                    assert_eq!(status, 200, "writer {w} write {serial}: {text}");
                }
            });
        }
    });
    assert_eq!(commit_count(s), writers * writes);
    for w in 0..writers {
        let file = format!("{prefix}{w}.tfstate");
        assert_eq!(s.git(&["show", &format!("main:{file}")]), body(w, writes));
        let history = s.git(&["log", "--format=%s", "--", &file]);
        assert_eq!(
            history.lines().count(),
            writes,
            "every write of {file} is a commit"
        );
    }
}

/// 8 writers × 20 POSTs to 8 states of one repository through one server.
fn concurrent_writers_lose_nothing(kind: Kind) {
    let s = Server::start(kind, &[]);
    write_concurrently(&s, &[s.gitstate.base_url()], 8, 20, "w");
}

fn concurrent_lockers_exactly_one_wins(kind: Kind) {
    let s = Server::start(kind, &[]);
    let statuses: Vec<u16> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..10)
            .map(|i| {
                let s = &s;
                scope.spawn(move || {
                    s.send(
                        "LOCK",
                        "/state/default/prod.tfstate",
                        Some(&lock_info(&format!("id-{i}"), "w")),
                    )
                    .status()
                    .as_u16()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("locker"))
            .collect()
    });
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        1,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 423).count(),
        9,
        "{statuses:?}"
    );
}

/// Two server processes (two Lambda containers, say) writing different states of one
/// repository: their pushes race on the state branch, and compare-and-swap plus rebuild-and-retry
/// must land every write.
fn two_processes_lose_nothing(kind: Kind) {
    let s = Server::start(kind, &[]);
    let other = s.second_process();
    write_concurrently(&s, &[s.gitstate.base_url(), other.base_url()], 6, 10, "p");
}

/// A write whose time runs out (here a write budget of 0 s, as a Lambda invocation with less
/// time left than its margin would have) is a 503 with `Retry-After` and a sentence saying that
/// nothing was written and that Terraform retries; the remote is unchanged.
fn a_write_out_of_time_is_a_503_and_writes_nothing(kind: Kind) {
    let s = Server::start(kind, &[]);
    assert_eq!(
        s.send("POST", "/state/default/t.tfstate", Some(STATE_1))
            .status(),
        200
    );
    let before = s.git(&["rev-parse", "main"]);
    let commits = commit_count(&s);
    let mut launch = s.launch.clone();
    launch
        .0
        .extend(["--write-budget-seconds".to_owned(), "0".to_owned()]);
    let hurried = start_gitstate(&launch);
    let response = Client::new()
        .post(format!("{}/state/default/t.tfstate", hurried.base_url()))
        .header("Content-Type", "application/json")
        .body(STATE_2)
        .send()
        .expect("request");
    assert_eq!(response.status().as_u16(), 503);
    assert!(
        response.headers().get("retry-after").is_some(),
        "Retry-After"
    );
    let sentence = error_of(response);
    assert!(sentence.contains("nothing was written"), "{sentence}");
    assert!(sentence.contains("Terraform retries"), "{sentence}");
    assert!(sentence.contains("retry_max"), "{sentence}");
    assert_eq!(
        s.git(&["rev-parse", "main"]),
        before,
        "the remote is unchanged"
    );
    assert_eq!(commit_count(&s), commits);
    assert!(lock_refs(&s).is_empty());
    // The same write with time to spare is made.
    assert_eq!(
        s.send("POST", "/state/default/t.tfstate", Some(STATE_2))
            .status(),
        200
    );
    assert_eq!(commit_count(&s), commits + 1);
}

/// Runs each scenario against each kind of repository.
macro_rules! for_each_kind {
    ($($scenario:ident),* $(,)?) => {
        mod embedded { $( #[test] fn $scenario() { super::$scenario(super::Kind::Embedded) } )* }
        mod git_daemon { $( #[test] fn $scenario() { super::$scenario(super::Kind::GitDaemon) } )* }
        mod smart_http { $( #[test] fn $scenario() { super::$scenario(super::Kind::SmartHttp) } )* }
    };
}

for_each_kind!(
    get_post_replay_and_content_md5,
    lock_rules_and_423_bodies,
    force_unlock_terraform_and_opentofu,
    bad_input_is_a_4xx_and_writes_nothing,
    concurrent_writers_lose_nothing,
    concurrent_lockers_exactly_one_wins,
    two_processes_lose_nothing,
    a_write_out_of_time_is_a_503_and_writes_nothing,
);

/// `gitstate serve --config gitstate.hcl`: named repositories from the file, and the
/// terraform-backend-git query-style address for a URL the `allow` list admits (and only those).
#[test]
fn config_file_repositories_and_query_style_addresses() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repos = dir.path().join("repos");
    std::fs::create_dir_all(&repos).expect("repos dir");
    let team = bare_repo(&repos, "team");
    let adhoc = bare_repo(&repos, "adhoc");
    bare_repo(&repos, "elsewhere");
    let daemon = GitDaemon::start(&repos);
    let config = dir.path().join("gitstate.hcl");
    std::fs::write(
        &config,
        format!(
            r#"
repository "team" {{
  url = "{}"
  ref = "states"
}}
allow = ["{}"]
"#,
            daemon.url("team"),
            daemon.url("adhoc").replace("adhoc.git", "ad*.git"),
        ),
    )
    .expect("write config");
    let config = config.to_string_lossy().into_owned();
    let gitstate = Gitstate::start(&["--config", &config], &[("RUST_LOG", "warn")], dir.path());
    let client = Client::new();
    let base = gitstate.base_url();

    // A named repository from the file, on its configured branch.
    let r = client
        .post(format!("{base}/state/team/net/prod.tfstate"))
        .body(STATE_1)
        .send()
        .expect("post");
    assert_eq!(r.status(), 200);
    assert_eq!(git_in(&team, &["show", "states:net/prod.tfstate"]), STATE_1);
    assert_eq!(
        client
            .get(format!("{base}/state/default/x"))
            .send()
            .expect("get")
            .status(),
        404,
        "a configuration with repositories has no embedded default"
    );

    // The query-style address of an allowed URL: every method, lock rules included.
    let query = |url: &str| {
        let pairs: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("type", "git")
            .append_pair("repository", url)
            .append_pair("ref", "main")
            .append_pair("state", "envs/dev.tfstate")
            .finish();
        format!("{base}/?{pairs}")
    };
    let address = query(&daemon.url("adhoc"));
    assert_eq!(client.get(&address).send().expect("get").status(), 204);
    let lock = lock_info("adhoc-lock", "ci@runner");
    let send = |method: &str, url: &str, body: &str| {
        client
            .request(Method::from_bytes(method.as_bytes()).expect("method"), url)
            .body(body.to_owned())
            .send()
            .expect("request")
    };
    assert_eq!(send("LOCK", &address, &lock).status(), 200);
    assert_eq!(send("POST", &address, STATE_2).status(), 423);
    assert_eq!(
        send("POST", &format!("{address}&ID=adhoc-lock"), STATE_2).status(),
        200
    );
    assert_eq!(send("UNLOCK", &address, &lock).status(), 200);
    assert_eq!(git_in(&adhoc, &["show", "main:envs/dev.tfstate"]), STATE_2);
    assert_eq!(
        git_in(&adhoc, &["log", "-1", "--format=%s", "main"]),
        "Update envs/dev.tfstate (serial 2) by ci@runner\n"
    );

    // A URL outside the allow list is refused and nothing is written there.
    let refused = client
        .get(query(&daemon.url("elsewhere")))
        .send()
        .expect("get");
    assert_eq!(refused.status(), 403);
    assert!(error_of(refused).contains("allow"));
    assert_eq!(
        git_in(&repos.join("elsewhere.git"), &["for-each-ref"]),
        "",
        "nothing written to a refused repository"
    );
}

/// A release in one request trusts the lock this process recorded no further than the server's
/// compare-and-swap: when another process has meanwhile force-unlocked it and locked again, the
/// old holder still gets the 423 with the new LockInfo, and the new holder can unlock here.
#[test]
fn release_of_a_recorded_lock_that_another_process_replaced() {
    let s = Server::start(Kind::SmartHttp, &[]);
    let other = s.second_process();
    let p = "/state/default/count/prod.tfstate";
    let to_other = |method: &str, body: &str| send_to(&other, method, p, body);
    assert_eq!(s.send("POST", p, Some(STATE_1)).status(), 200);
    let (a, b) = (lock_info("lock-a", "alice"), lock_info("lock-b", "bob"));
    assert_eq!(s.send("LOCK", p, Some(&a)).status(), 200);
    // terraform force-unlock through the other process, then bob locks there.
    assert_eq!(to_other("UNLOCK", ""), 200);
    assert_eq!(to_other("LOCK", &b), 200);

    let stale = s.send("UNLOCK", p, Some(&a));
    assert_eq!(stale.status(), 423, "alice's lock is gone");
    assert!(
        stale.text().expect("body").contains("lock-b"),
        "bob's LockInfo"
    );
    assert!(lock_refs(&s).contains("locks/"), "bob's lock stays");
    assert_eq!(
        s.send("UNLOCK", p, Some(&b)).status(),
        200,
        "bob unlocks here"
    );
    assert_eq!(lock_refs(&s).trim(), "");
    // And the same again after the other process released a lock this one recorded.
    assert_eq!(s.send("LOCK", p, Some(&a)).status(), 200);
    assert_eq!(to_other("UNLOCK", &a), 200);
    assert_eq!(
        s.send("UNLOCK", p, Some(&a)).status(),
        200,
        "not locked: done"
    );
    assert_eq!(lock_refs(&s).trim(), "");
}

/// A state write by the lock's holder goes in one request from what this process recorded, and
/// trusts that record no further than the server's atomic push (the state branch from the
/// recorded tip, the lock branch asserted at the recorded lock): when another process has
/// force-unlocked and locked again, the old holder's POST gets the 423 with the new LockInfo and
/// writes nothing; when another process wrote another state meanwhile, the holder's POST is
/// still written, on a fresh read, and both states are on the branch.
#[test]
fn held_write_of_a_lock_that_another_process_replaced() {
    let s = Server::start(Kind::SmartHttp, &[]);
    let other = s.second_process();
    let p = "/state/default/count/prod.tfstate";
    let to_other = |method: &str, path: &str, body: &str| send_to(&other, method, path, body);
    let serial = |n: u32| STATE_1.replace("\"serial\":1", &format!("\"serial\":{n}"));
    assert_eq!(s.send("POST", p, Some(STATE_1)).status(), 200);
    let (a, b) = (lock_info("lock-a", "alice"), lock_info("lock-b", "bob"));
    assert_eq!(s.send("LOCK", p, Some(&a)).status(), 200);
    let with_a = format!("{p}?ID=lock-a");
    assert_eq!(s.send("POST", &with_a, Some(&serial(2))).status(), 200);

    // terraform force-unlock through the other process, then bob locks there.
    assert_eq!(to_other("UNLOCK", p, ""), 200);
    assert_eq!(to_other("LOCK", p, &b), 200);
    let stale = s.send("POST", &with_a, Some(&serial(4)));
    assert_eq!(stale.status(), 423, "alice's lock is gone");
    assert!(
        stale.text().expect("body").contains("lock-b"),
        "bob's LockInfo"
    );
    assert!(
        s.git(&["show", "main:count/prod.tfstate"])
            .contains("\"serial\":2"),
        "nothing written"
    );
    // bob writes through this process (which now knows his lock from the fresh read).
    let with_b = format!("{p}?ID=lock-b");
    assert_eq!(s.send("POST", &with_b, Some(&serial(4))).status(), 200);
    assert!(s
        .git(&["show", "main:count/prod.tfstate"])
        .contains("\"serial\":4"));

    // Another process writes another state: the branch moved under the recorded tip.
    let q = "/state/default/count/other.tfstate";
    assert_eq!(to_other("POST", q, STATE_1), 200);
    assert_eq!(s.send("POST", &with_b, Some(&serial(5))).status(), 200);
    assert!(s
        .git(&["show", "main:count/prod.tfstate"])
        .contains("\"serial\":5"));
    assert!(s
        .git(&["show", "main:count/other.tfstate"])
        .contains("\"serial\":1"));
}

/// Requests that reach the git server per operation over smart HTTP with a warm cache (each one
/// is a `git http-backend` process). A write reads the tips from the receive-pack advertisement
/// and pushes its compare-and-swap over the same session: advertisement + push. Creating a lock,
/// and releasing the lock this server created, is the push alone (the old id is known: none, or
/// the recorded one).
#[test]
fn smart_http_requests_per_operation() {
    let s = Server::start(Kind::SmartHttp, &[]);
    let http = s._http.as_ref().expect("a smart HTTP server");
    let p = "/state/default/count/prod.tfstate";
    // Cold: the first write creates the branch and a GET has the cache hold its tip.
    assert_eq!(s.send("POST", p, Some(STATE_1)).status(), 200);
    assert_eq!(s.send("GET", p, None).status(), 200);

    let mut seen = http.requests().len();
    let mut check = |what: &str, response: Response, status: u16, max: usize| {
        assert_eq!(response.status(), status, "{what}");
        let requests = http.requests();
        let new = requests[seen..].to_vec();
        seen = requests.len();
        assert!(
            new.len() <= max,
            "{what}: {} requests to the git server, at most {max} expected: {new:#?}",
            new.len()
        );
        if !what.starts_with("GET") {
            assert!(
                new.iter().all(|r| r.contains("git-receive-pack")),
                "{what}: {new:#?}"
            );
        }
    };
    let a = lock_info("lock-a", "alice");
    check("POST", s.send("POST", p, Some(STATE_2)), 200, 2);
    check("GET", s.send("GET", p, None), 200, 1);
    check("LOCK", s.send("LOCK", p, Some(&a)), 200, 1);
    let with_id = format!("{p}?ID=lock-a");
    // The next serial, as Terraform writes it (an older one is refused by the state guard).
    let state_3 = STATE_1.replace("\"serial\":1", "\"serial\":3");
    // The holder's write: the push alone (the state tip and the lock are recorded; the push
    // asserts the lock in the same atomic transaction).
    check(
        "POST with the lock's ID",
        s.send("POST", &with_id, Some(state_3.as_str())),
        200,
        1,
    );
    // No push at all: the advertisement alone answers these.
    check(
        "replayed POST",
        s.send("POST", &with_id, Some(state_3.as_str())),
        200,
        1,
    );
    check(
        "POST without the lock's ID",
        s.send("POST", p, Some(STATE_2)),
        423,
        1,
    );
    check("UNLOCK", s.send("UNLOCK", p, Some(&a)), 200, 1);
    check(
        "UNLOCK when not locked",
        s.send("UNLOCK", p, Some(&a)),
        200,
        1,
    );
    // An earlier version: the first lists the tips (`ls-refs` on the session kept from the GET),
    // fetches the history's commits and trees, and then the versions' blobs by id (the history
    // cache holds no blob nobody read: a history costs its own versions, not every version of
    // every state, DESIGN §9.5); after that, one advertisement answers both the history and the
    // version read (commits do not change).
    let version = format!("{p}?version=1");
    check("GET ?version (cold)", s.send("GET", &version, None), 200, 3);
    check("GET ?version", s.send("GET", &version, None), 200, 1);
    check("DELETE", s.send("DELETE", p, None), 200, 2);

    // What the git CLI sees: the last write is the delete, and no lock is left.
    let log = s.git(&["log", "--format=%s", "main"]);
    assert!(log.starts_with("Delete count/prod.tfstate"), "{log}");
    assert_eq!(lock_refs(&s).trim(), "");
}

/// `gitstate serve` on a smart-HTTP repository (basic auth) reached through the proxy `start`
/// puts in front of the git server's port (`port` tells the proxy's).
fn behind_a_proxy<P>(
    start: impl FnOnce(u16) -> P,
    port: impl Fn(&P) -> u16,
) -> (tempfile::TempDir, GitHttpServer, P, Gitstate) {
    let dir = tempfile::tempdir().expect("tempdir");
    let repos = dir.path().join("repos");
    std::fs::create_dir_all(&repos).expect("repos dir");
    bare_repo(&repos, "states");
    let http = GitHttpServer::start(&repos, "terraform", "s3cret-pass");
    let proxy = start(http.port());
    let through = http.url_through("states", port(&proxy));
    let gitstate = Gitstate::start(
        &["--repository", &format!("default={through}")],
        &[
            ("RUST_LOG", "info"),
            ("GIT_USERNAME", "terraform"),
            ("GIT_PASSWORD", "s3cret-pass"),
        ],
        dir.path(),
    );
    // In this order, so that the server stops before its directory goes.
    (dir, http, proxy, gitstate)
}

/// Requests to a smart-HTTP remote reuse kept-alive connections: once the first LOCK, GET, POST,
/// UNLOCK opened what they need, 20 more operations open no new connection to the git server (at
/// most one, if the server closed an idle one); each session used to build its own HTTP client
/// and connection (over HTTPS, a TLS handshake each).
#[test]
fn smart_http_connections_are_kept_between_requests() {
    let (_dir, _http, proxy, gitstate) = behind_a_proxy(
        |port| DelayProxy::start(port, std::time::Duration::ZERO),
        |p| p.port(),
    );
    let send = |method: &str, path: &str, body: Option<String>| {
        send_to(&gitstate, method, path, body.as_deref().unwrap_or_default()).as_u16()
    };
    let p = "/state/default/kept/prod.tfstate";
    assert_eq!(send("POST", p, Some(STATE_1.to_owned())), 200);
    // Terraform's cycle; the first one opens what a write needs at most at once.
    let cycle = |serial: u32| {
        let id = format!("run-{serial}");
        let state = STATE_1.replace("\"serial\":1", &format!("\"serial\":{serial}"));
        assert_eq!(send("LOCK", p, Some(lock_info(&id, "alice"))), 200);
        assert_eq!(send("GET", p, None), 200);
        assert_eq!(send("POST", &format!("{p}?ID={id}"), Some(state)), 200);
        assert_eq!(send("UNLOCK", p, Some(lock_info(&id, "alice"))), 200);
    };
    cycle(2);
    let first = proxy.connections();
    assert!(first >= 1, "the writes reached the git server");
    for serial in 3..=7 {
        cycle(serial);
    }
    let opened = proxy.connections() - first;
    assert!(
        opened <= 1,
        "20 operations opened {opened} new connections to the git server, at most 1 expected; log:\n{}",
        gitstate.log()
    );
}

/// A kept connection the git server closed while it was idle (its keep-alive timeout; a Lambda
/// container frozen between invocations) is replaced without failing the request: a proxy closes
/// every connection that sends a request after 300 ms without traffic, at the worst moment (the
/// request read, no answer). Terraform's cycles before and after a pause all get their 200s, the
/// proxy did close connections on requests, and the server counts the renewals.
#[test]
fn a_kept_connection_closed_while_idle_is_replaced_without_failing_the_request() {
    let (_dir, _http, proxy, gitstate) = behind_a_proxy(
        |port| ClosingProxy::start(port, std::time::Duration::from_millis(300)),
        |p| p.port(),
    );
    let send = |method: &str, path: &str, body: Option<String>| {
        send_to(&gitstate, method, path, body.as_deref().unwrap_or_default()).as_u16()
    };
    let p = "/state/default/idle/prod.tfstate";
    assert_eq!(send("POST", p, Some(STATE_1.to_owned())), 200);
    for serial in 2..=5 {
        // Long enough for the proxy to close whatever the last cycle kept.
        std::thread::sleep(std::time::Duration::from_millis(600));
        let id = format!("run-{serial}");
        let state = STATE_1.replace("\"serial\":1", &format!("\"serial\":{serial}"));
        for (method, path, body) in [
            ("LOCK", p.to_owned(), Some(lock_info(&id, "alice"))),
            ("GET", p.to_owned(), None),
            ("POST", format!("{p}?ID={id}"), Some(state)),
            ("UNLOCK", p.to_owned(), Some(lock_info(&id, "alice"))),
            ("GET", p.to_owned(), None),
        ] {
            assert_eq!(
                send(method, &path, body),
                200,
                "{method} {path} after a pause; log:\n{}",
                gitstate.log()
            );
        }
    }
    assert!(
        proxy.closed() >= 4,
        "the proxy closed {} connections on a request; the test did not make the case",
        proxy.closed()
    );
    let (status, metrics) = gitstate_tests::http(
        "GET",
        &format!("{}/_/metrics", gitstate.base_url()),
        None,
        None,
    )
    .expect("metrics");
    assert_eq!(status, 200);
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("gitstate_git_connections_renewed_total ") && !l.ends_with(" 0")),
        "{metrics}"
    );
}
