//! The security boundary of the hosted endpoint (issue 15; docs/SECURITY.md lists each rule with
//! the test here that proves it). Everything runs the real `gitstate` binary against real git
//! servers (lighttpd + git http-backend), with requests sent byte for byte over TCP where a
//! header matters (Host, Origin, Content-Type), as a browser or curl would send them.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use gitstate_tests::*;

const USER: &str = "sec-bot";
const PASSWORD: &str = "sec-password-4711";
const STATE: &str = r#"{"version":4,"terraform_version":"1.15.5","serial":1,"lineage":"sec","outputs":{},"resources":[]}"#;

// ------------------------------------------------------------------------------------------------
// Helpers

/// Sends one HTTP/1.1 request over a fresh TCP connection to 127.0.0.1:`port`, with exactly the
/// headers given (a `Host: 127.0.0.1:PORT` unless `headers` has a Host) and `body`; returns
/// (status, body).
fn raw(
    port: u16,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut request = format!("{method} {target} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        request.push_str(&format!("Host: 127.0.0.1:{port}\r\n"));
    }
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    let mut bytes = request.into_bytes();
    bytes.extend_from_slice(body);
    stream.write_all(&bytes).expect("send");
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// `gitstate ARGS` run to the end (a start that must fail before listening).
fn gitstate_fails(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let out = gitstate_run(cwd, args, env);
    assert_ne!(
        out.code,
        Some(0),
        "gitstate {args:?} started, and should have refused:\n{}",
        out.combined()
    );
    out.stderr
}

/// `gitstate serve --listen LISTEN ARGS` started directly (the harness always listens on
/// 127.0.0.1), waited on until `http://127.0.0.1:PORT/_/health` answers.
fn serve_on(
    listen: &str,
    port: u16,
    args: &[&str],
    env: &[(&str, &str)],
    cwd: &Path,
) -> ChildGuard {
    let mut cmd = gitstate_command(cwd, &["serve", "--listen", listen], env);
    cmd.args(args)
        .env("GITSTATE_CACHE_DIR", cwd.join("cache"))
        .env("RUST_LOG", "info");
    let mut guard = ChildGuard::spawn(cmd, &cwd.join("serve.log"), "gitstate serve");
    let health = format!("http://127.0.0.1:{port}/_/health");
    guard
        .wait_ready(Duration::from_secs(60), || {
            matches!(http("GET", &health, None, None), Ok((200, _)))
        })
        .unwrap_or_else(|log| panic!("gitstate serve --listen {listen} did not start: {log}"));
    guard
}

/// A smart-HTTP git server requiring USER/PASSWORD with one empty bare repository `states`.
struct Remote {
    server: GitHttpServer,
    repo: PathBuf,
    _dir: TempDir,
}

fn remote() -> Remote {
    remote_for(USER, PASSWORD)
}

fn remote_for(user: &str, password: &str) -> Remote {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = bare_repo(dir.path(), "states");
    let server = GitHttpServer::start(dir.path(), user, password);
    Remote {
        server,
        repo,
        _dir: dir,
    }
}

fn query(url: &str, git_ref: Option<&str>, state: &str) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    q.append_pair("type", "git").append_pair("repository", url);
    if let Some(r) = git_ref {
        q.append_pair("ref", r);
    }
    q.append_pair("state", state);
    format!("/?{}", q.finish())
}

// ------------------------------------------------------------------------------------------------
// 1. Safe defaults

/// The SAM template, translated by samtranslator for every AuthMode, never deploys an open
/// endpoint: the default is team (refused without a token hash), and server mode is served only
/// to IAM-signed requests. The check itself must catch an open template.
#[test]
fn sam_template_never_deploys_an_open_endpoint() {
    let python = tools_dir().join("sam-1.170.0/bin/python");
    assert!(
        python.is_file(),
        "the SAM CLI venv is missing at {}: run scripts/lint-infra.sh",
        python.display()
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let check = |template: &Path| {
        Command::new(&python)
            .arg(root.join("scripts/check-template-auth.py"))
            .arg(template)
            .env("SAM_CLI_TELEMETRY", "0")
            .current_dir(&root)
            .output()
            .expect("run check-template-auth.py")
    };
    let ok = check(&root.join("infra/template.yaml"));
    assert!(
        ok.status.success(),
        "{}{}",
        String::from_utf8_lossy(&ok.stdout),
        String::from_utf8_lossy(&ok.stderr)
    );

    // The check fails on what the template was before issue 15: an open default.
    let template = std::fs::read_to_string(root.join("infra/template.yaml")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (what, open) in [
        (
            "default AuthMode server",
            template.replacen("    Default: team\n", "    Default: server\n", 1),
        ),
        (
            "Function URL without IAM",
            template.replace(
                "AuthType: !If [ServerMode, AWS_IAM, NONE]",
                "AuthType: NONE",
            ),
        ),
        (
            "HTTP API route without IAM",
            template.replace(
                "AuthorizationType: !If [ServerMode, AWS_IAM, NONE]",
                "AuthorizationType: NONE",
            ),
        ),
        // Issue 55: a flood's cost is bounded by the function's concurrency, capped by default.
        (
            "no concurrency cap by default",
            template.replacen(
                "    Default: 25\n    MinValue: 0\n",
                "    Default: 0\n    MinValue: 0\n",
                1,
            ),
        ),
    ] {
        assert_ne!(
            open, template,
            "{what}: the template changed; adapt this test"
        );
        let path = dir.path().join("open.yaml");
        std::fs::write(&path, &open).unwrap();
        let out = check(&path);
        assert!(
            !out.status.success(),
            "{what}: the check passed an open template"
        );
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("check-template-auth"),
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `gitstate serve` without authentication refuses a non-loopback address with one sentence,
/// from the flag, the variable or the file alike; the words
/// `--insecure-no-auth-on-public-address` (or team/passthrough auth) let it start.
#[test]
fn serve_refuses_a_public_address_without_auth() {
    let cwd = tempfile::tempdir().unwrap();
    let stderr = gitstate_fails(cwd.path(), &["serve", "--listen", "0.0.0.0:0"], &[]);
    assert!(
        stderr.contains("refusing to listen on 0.0.0.0:")
            && stderr.contains("--insecure-no-auth-on-public-address"),
        "{stderr}"
    );
    assert_eq!(
        stderr
            .trim()
            .lines()
            .filter(|l| l.starts_with("gitstate:"))
            .count(),
        1,
        "{stderr}"
    );
    let stderr = gitstate_fails(cwd.path(), &["serve"], &[("GITSTATE_LISTEN", "[::]:0")]);
    assert!(stderr.contains("refusing to listen on [::]:"), "{stderr}");
    let hcl = cwd.path().join("gitstate.hcl");
    std::fs::write(&hcl, "listen = \"0.0.0.0:0\"\n").unwrap();
    let stderr = gitstate_fails(
        cwd.path(),
        &["serve", "--config", hcl.to_str().unwrap()],
        &[],
    );
    assert!(stderr.contains("refusing to listen"), "{stderr}");
    assert!(
        !cwd.path().join(".gitstate").exists()
            || refs_under(&cwd.path().join(".gitstate/default.git"), "refs/").is_empty()
    );

    // Said in words (flag, variable, file), or with auth, it starts.
    let port = free_port();
    let listen = format!("0.0.0.0:{port}");
    let s = serve_on(
        &listen,
        port,
        &["--insecure-no-auth-on-public-address"],
        &[],
        cwd.path(),
    );
    drop(s);
    let port = free_port();
    let listen = format!("0.0.0.0:{port}");
    let s = serve_on(
        &listen,
        port,
        &[],
        &[("GITSTATE_INSECURE_NO_AUTH_ON_PUBLIC_ADDRESS", "true")],
        cwd.path(),
    );
    drop(s);
    std::fs::write(&hcl, "insecure_no_auth_on_public_address = true\n").unwrap();
    let port = free_port();
    let listen = format!("0.0.0.0:{port}");
    let s = serve_on(
        &listen,
        port,
        &["--config", hcl.to_str().unwrap()],
        &[],
        cwd.path(),
    );
    drop(s);
    let port = free_port();
    let listen = format!("0.0.0.0:{port}");
    let hash = format!(
        "sha256:{}",
        gitstate_tests::crypto::sha256_hex("team-token")
    );
    let s = serve_on(
        &listen,
        port,
        &["--auth-mode", "team", "--token-hash", &hash],
        &[],
        cwd.path(),
    );
    drop(s);
}

// ------------------------------------------------------------------------------------------------
// 2. Pass-through means only the caller's credential

/// In pass-through mode a configured URL holding a credential, or a transport that cannot carry
/// the caller's (ssh, git://, file://, scp-like, local paths), stops the start with a sentence
/// saying why, and never shows the password.
#[test]
fn passthrough_refuses_configured_credentials_and_transports_without_one() {
    let cwd = tempfile::tempdir().unwrap();
    for (url, why) in [
        (
            "https://tf:s3cr3t-pw@127.0.0.1:1/git/states.git",
            "user name or password",
        ),
        (
            "http://token-only@127.0.0.1:1/git/states.git",
            "user name or password",
        ),
        (
            "ssh://git@127.0.0.1:1/states.git",
            "ssh://, which cannot carry",
        ),
        ("git://127.0.0.1:1/states.git", "git://, which cannot carry"),
        ("file:///srv/states.git", "file://, which cannot carry"),
        ("git@127.0.0.1:states.git", "scp-like"),
    ] {
        let spec = format!("default={url}");
        let stderr = gitstate_fails(
            cwd.path(),
            &[
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--auth-mode",
                "passthrough",
                "--repository",
                &spec,
            ],
            &[],
        );
        assert!(stderr.contains(why), "{url}: {stderr}");
        assert!(stderr.contains("repository 'default'"), "{url}: {stderr}");
        assert!(
            !stderr.contains("s3cr3t-pw"),
            "the password was shown: {stderr}"
        );
    }
    // The same in the configuration file.
    let hcl = cwd.path().join("gitstate.hcl");
    std::fs::write(
        &hcl,
        "auth { mode = \"passthrough\" }\nrepository \"lab\" {\n  url = \"git://127.0.0.1:1/lab.git\"\n}\n",
    )
    .unwrap();
    let stderr = gitstate_fails(
        cwd.path(),
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--config",
            hcl.to_str().unwrap(),
        ],
        &[],
    );
    assert!(
        stderr.contains("repository 'lab'") && stderr.contains("git://"),
        "{stderr}"
    );
}

/// With a GITHUB_TOKEN (and GIT_USERNAME/GIT_PASSWORD) in the server's environment that the git
/// server would accept, pass-through still answers an anonymous caller 401, on configured and on
/// query-style addresses: the environment's credential is never used for a request.
#[test]
fn passthrough_never_uses_the_servers_own_credential() {
    let token = "ghp_servers-own-token";
    let remote = remote_for("x-access-token", token);
    let cwd = tempfile::tempdir().unwrap();
    let spec = format!("default={}", remote.server.url("states"));
    let allow = format!("http://127.0.0.1:{}/git/*", remote.server.port());
    for env in [
        vec![("GITHUB_TOKEN", token)],
        vec![("GIT_USERNAME", "x-access-token"), ("GIT_PASSWORD", token)],
    ] {
        let gitstate = Gitstate::start(
            &[
                "--repository",
                &spec,
                "--auth-mode",
                "passthrough",
                "--allow",
                &allow,
            ],
            &env,
            cwd.path(),
        );
        let named = gitstate.state_url("default", "p.tfstate");
        let adhoc = format!(
            "{}{}",
            gitstate.base_url(),
            query(&remote.server.url("states"), None, "p.tfstate")
        );
        for url in [&named, &adhoc] {
            for method in ["GET", "POST"] {
                let body = (method == "POST").then_some(STATE);
                let (status, text) = http(method, url, body, None).expect("request");
                assert_eq!(status, 401, "{env:?} {method} {url}: {text}");
            }
            // The caller's own pair works: the remote is reachable, only the credential differed.
            let (status, text) =
                http("GET", url, None, Some(("x-access-token", token))).expect("request");
            assert_eq!(status, 204, "{url}: {text}");
        }
        assert!(
            refs_under(&remote.repo, "refs/").is_empty(),
            "an anonymous caller wrote"
        );
    }
}

// ------------------------------------------------------------------------------------------------
// 3. ref validation

/// `ref=` values that git would read as an option, a refspec or a path outside refs/heads get
/// 400 naming the rule, on every method, and nothing reaches the remote.
#[test]
fn bad_refs_get_400_naming_the_rule_and_write_nothing() {
    let remote = remote();
    let cwd = tempfile::tempdir().unwrap();
    let allow = format!("http://127.0.0.1:{}/git/*", remote.server.port());
    // The git server wants the deployment's credential, which an ad-hoc URL gets only through
    // an allow_with_credential pattern.
    let gitstate = Gitstate::start(
        &["--allow-with-credential", &allow],
        &[("GIT_USERNAME", USER), ("GIT_PASSWORD", PASSWORD)],
        cwd.path(),
    );
    let url = remote.server.url("states");
    let before = remote.server.requests().len();
    let lock = lock_info("id-1", "me@host", "OperationTypeApply");
    for (bad, rule) in [
        ("--upload-pack=x", "starts with '-'"),
        ("a..b", "'..'"),
        ("main:refs/heads/x", "the character ':'"),
        ("refs/heads/../../HEAD", "'..'"),
        ("main\nx", "U+000A"),
        ("main.lock", ".lock"),
        ("refs/heads/main", "branch name only"),
        ("locks/p.tfstate", "locks/"),
    ] {
        for (method, body) in [
            ("GET", None),
            ("POST", Some(STATE)),
            ("LOCK", Some(lock.as_str())),
            ("DELETE", None),
        ] {
            let target = query(&url, Some(bad), "p.tfstate");
            let (status, text) = http(
                method,
                &format!("{}{target}", gitstate.base_url()),
                body,
                None,
            )
            .expect("request");
            assert_eq!(status, 400, "{method} ref={bad:?}: {text}");
            assert!(
                text.contains(rule),
                "{method} ref={bad:?}: {text} should name {rule:?}"
            );
        }
    }
    assert!(
        refs_under(&remote.repo, "refs/").is_empty(),
        "a bad ref wrote"
    );
    assert_eq!(
        remote.server.requests().len(),
        before,
        "a request with a bad ref reached the git server"
    );
    // A good ref still works.
    let target = query(&url, Some("states"), "p.tfstate");
    let (status, text) = http(
        "POST",
        &format!("{}{target}", gitstate.base_url()),
        Some(STATE),
        None,
    )
    .unwrap();
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        git_log_subjects(&remote.repo, "states", "p.tfstate").len(),
        1
    );
}

/// A bad `ref` in the configuration (flag, variable or file) stops the start, naming the rule.
#[test]
fn bad_refs_in_the_configuration_stop_the_start() {
    let remote = remote();
    let cwd = tempfile::tempdir().unwrap();
    let spec = format!("default={}", remote.server.url("states"));
    let env = [("GIT_USERNAME", USER), ("GIT_PASSWORD", PASSWORD)];
    let stderr = gitstate_fails(
        cwd.path(),
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--repository",
            &spec,
            "--ref=--upload-pack=x",
        ],
        &env,
    );
    assert!(
        stderr.contains("starts with '-'") && stderr.contains("repository 'default'"),
        "{stderr}"
    );
    let mut env_ref = env.to_vec();
    env_ref.push(("GITSTATE_REF", "main:refs/heads/x"));
    let stderr = gitstate_fails(
        cwd.path(),
        &["serve", "--listen", "127.0.0.1:0", "--repository", &spec],
        &env_ref,
    );
    assert!(stderr.contains("':'"), "{stderr}");
    let hcl = cwd.path().join("gitstate.hcl");
    std::fs::write(
        &hcl,
        format!(
            "repository \"default\" {{\n  url = \"{}\"\n  ref = \"a..b\"\n}}\n",
            remote.server.url("states")
        ),
    )
    .unwrap();
    let stderr = gitstate_fails(
        cwd.path(),
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--config",
            hcl.to_str().unwrap(),
        ],
        &env,
    );
    assert!(stderr.contains("'..'"), "{stderr}");
    // `gitstate wrap` reads the same settings.
    let out = gitstate_run(
        cwd.path(),
        &[
            "wrap",
            "--listen",
            "127.0.0.1:0",
            "--repository",
            &remote.server.url("states"),
            "--ref",
            "a..b",
            "--state",
            "x.tfstate",
            "--",
            "true",
        ],
        &env,
    );
    assert_eq!(out.code, Some(125), "{}", out.combined());
    assert!(out.stderr.contains("'..'"), "{}", out.stderr);
    assert!(refs_under(&remote.repo, "refs/").is_empty());
}

// ------------------------------------------------------------------------------------------------
// 4. Browsers

/// A web page can make the operator's browser send a form to the local server. Every mutating
/// request that carries an Origin, a cross-site Sec-Fetch-Site or a form content type gets 403
/// and writes nothing; what Terraform sends still works.
#[test]
fn cross_site_requests_cannot_change_states() {
    let cwd = tempfile::tempdir().unwrap();
    let gitstate = Gitstate::start(&[], &[], cwd.path());
    let port = gitstate.port();
    let repo = cwd.path().join(".gitstate/default.git");
    let state = "/state/default/csrf.tfstate";
    let lock_alias = "/lock/default/csrf.tfstate";
    let lock = lock_info("csrf-lock", "me@host", "OperationTypeApply");
    let json = ("Content-Type", "application/json");
    // (method, target, headers, body, what the refusal names)
    type Case<'a> = (&'a str, &'a str, Vec<(&'a str, &'a str)>, &'a str, &'a str);
    let cases: Vec<Case> = vec![
        // The classic: a cross-site HTML form, text/plain, no preflight.
        (
            "POST",
            state,
            vec![
                ("Origin", "https://attacker.example"),
                ("Content-Type", "text/plain"),
            ],
            STATE,
            "Origin",
        ),
        (
            "POST",
            state,
            vec![("Content-Type", "text/plain;charset=UTF-8")],
            STATE,
            "text/plain",
        ),
        (
            "POST",
            state,
            vec![("Content-Type", "application/x-www-form-urlencoded")],
            STATE,
            "form",
        ),
        (
            "PUT",
            state,
            vec![("Content-Type", "multipart/form-data; boundary=x")],
            STATE,
            "form",
        ),
        (
            "POST",
            state,
            vec![("Origin", "null"), json],
            STATE,
            "Origin",
        ),
        (
            "POST",
            state,
            vec![("Origin", "http://127.0.0.1"), json],
            STATE,
            "Origin",
        ),
        (
            "POST",
            state,
            vec![("Sec-Fetch-Site", "cross-site"), json],
            STATE,
            "cross-site",
        ),
        (
            "DELETE",
            state,
            vec![("Origin", "https://attacker.example")],
            "",
            "Origin",
        ),
        (
            "LOCK",
            state,
            vec![("Origin", "https://attacker.example"), json],
            lock.as_str(),
            "Origin",
        ),
        (
            "UNLOCK",
            state,
            vec![("Origin", "https://attacker.example")],
            "",
            "Origin",
        ),
        (
            "POST",
            lock_alias,
            vec![("Content-Type", "text/plain")],
            lock.as_str(),
            "text/plain",
        ),
        (
            "DELETE",
            lock_alias,
            vec![("Sec-Fetch-Site", "same-site")],
            "",
            "same-site",
        ),
        (
            "POST",
            "/?type=git&repository=https%3A%2F%2Fh%2Fr.git&state=x",
            vec![("Origin", "https://a.example")],
            STATE,
            "Origin",
        ),
    ];
    for (method, target, headers, body, says) in &cases {
        let (status, text) = raw(port, method, target, headers, body.as_bytes());
        assert_eq!(status, 403, "{method} {target} {headers:?}: {text}");
        assert!(
            text.contains(says),
            "{method} {target}: {text} should say {says:?}"
        );
    }
    assert!(
        !repo.exists() || refs_under(&repo, "refs/").is_empty(),
        "a cross-site request wrote: {:?}",
        refs_under(&repo, "refs/")
    );
    // What Terraform sends (application/json with a Content-MD5, no Origin) works.
    let (status, text) = raw(port, "LOCK", state, &[json], lock.as_bytes());
    assert_eq!(status, 200, "{text}");
    let (status, text) = raw(
        port,
        "POST",
        &format!("{state}?ID=csrf-lock"),
        &[json],
        STATE.as_bytes(),
    );
    assert_eq!(status, 200, "{text}");
    let (status, text) = raw(port, "UNLOCK", state, &[json], lock.as_bytes());
    assert_eq!(status, 200, "{text}");
    let (status, text) = raw(port, "GET", state, &[("Origin", "https://a.example")], b"");
    assert_eq!((status, text.as_str()), (200, STATE));
    assert_eq!(git_log_subjects(&repo, "main", "csrf.tfstate").len(), 1);
}

/// DNS rebinding: a page whose name now resolves to 127.0.0.1 reaches the loopback server with
/// its own name as Host. Only loopback names and addresses and configured names are served.
#[test]
fn loopback_servers_answer_only_loopback_and_configured_hosts() {
    let cwd = tempfile::tempdir().unwrap();
    let gitstate = Gitstate::start(&["--allowed-host", "states.internal"], &[], cwd.path());
    let port = gitstate.port();
    let target = "/state/default/rebind.tfstate";
    let p = port.to_string();
    for host in [
        format!("127.0.0.1:{p}"),
        format!("localhost:{p}"),
        "LOCALHOST".to_owned(),
        format!("127.0.0.2:{p}"),
        format!("[::1]:{p}"),
        format!("states.internal:{p}"),
        "States.Internal.".to_owned(),
    ] {
        let (status, text) = raw(port, "GET", target, &[("Host", &host)], b"");
        assert_eq!(status, 204, "Host {host}: {text}");
    }
    for host in [
        format!("attacker.example:{p}"),
        "attacker.example".to_owned(),
        format!("localhost.attacker.example:{p}"),
        format!("127.0.0.1.nip.io:{p}"),
        format!("192.168.1.10:{p}"),
        format!("states.internal.attacker.example:{p}"),
    ] {
        for (method, path, body) in [
            ("GET", target, ""),
            ("GET", "/_/ui", ""),
            ("POST", target, STATE),
        ] {
            let (status, text) = raw(
                port,
                method,
                path,
                &[("Host", &host), ("Content-Type", "application/json")],
                body.as_bytes(),
            );
            assert_eq!(status, 403, "{method} {path} Host {host}: {text}");
            assert!(text.contains("allowed_hosts"), "{text}");
        }
    }
    let repo = cwd.path().join(".gitstate/default.git");
    assert!(!repo.exists() || refs_under(&repo, "refs/").is_empty());

    // The variable configures it too.
    let other = Gitstate::start(
        &[],
        &[("GITSTATE_ALLOWED_HOSTS", "a.internal,b.internal")],
        cwd.path(),
    );
    assert_eq!(
        raw(other.port(), "GET", target, &[("Host", "b.internal")], b"").0,
        204
    );
    assert_eq!(
        raw(other.port(), "GET", target, &[("Host", "c.internal")], b"").0,
        403
    );
}

// ------------------------------------------------------------------------------------------------
// 5. Hygiene

/// Lock fields, lock IDs and caller names go into commit messages and logs escaped: a `Who`
/// of "x\n\nSigned-off-by: evil" stays on the subject line, adds no trailer, and no field can
/// forge a log line.
#[test]
fn caller_text_cannot_split_commit_messages_or_log_lines() {
    let cwd = tempfile::tempdir().unwrap();
    let gitstate = Gitstate::start(&[], &[], cwd.path());
    let repo = cwd.path().join(".gitstate/default.git");
    let url = gitstate.state_url("default", "inject.tfstate");
    let who = "x\n\nSigned-off-by: evil <evil@example.com>";
    let id = "id\nFORGED-LOG-LINE level=ERROR \u{1b}[2J";
    let lock = serde_json::json!({
        "ID": id,
        "Operation": "OperationTypeApply\r\nCo-authored-by: evil",
        "Info": "\u{1b}[2Jinfo",
        "Who": who,
        "Version": "1.11.4",
        "Created": "2026-01-01T00:00:00Z",
        "Path": ""
    })
    .to_string();
    let (status, text) = http("LOCK", &url, Some(&lock), None).unwrap();
    assert_eq!(status, 200, "{text}");
    let body = |rev: &str| {
        git(
            None,
            &[
                &format!("--git-dir={}", repo.display()),
                "log",
                "-1",
                "--format=%B",
                rev,
            ],
        )
    };
    let lock_message = body("locks/inject.tfstate");
    assert_eq!(
        lock_message.trim_end().lines().count(),
        1,
        "the lock commit message was split: {lock_message:?}"
    );
    assert!(
        lock_message.contains("by x\\n\\nSigned-off-by: evil"),
        "{lock_message:?}"
    );
    assert!(
        lock_message.contains("OperationTypeApply\\r\\nCo-authored-by"),
        "{lock_message:?}"
    );
    let trailers = |rev: &str| {
        git(
            None,
            &[
                &format!("--git-dir={}", repo.display()),
                "log",
                "-1",
                "--format=%(trailers)",
                rev,
            ],
        )
    };
    assert_eq!(
        trailers("locks/inject.tfstate").trim(),
        "",
        "a trailer was injected"
    );

    // The lock holder's Who names the state commit.
    let encoded: String = form_urlencoded::byte_serialize(id.as_bytes()).collect();
    let (status, text) = http("POST", &format!("{url}?ID={encoded}"), Some(STATE), None).unwrap();
    assert_eq!(status, 200, "{text}");
    let state_message = body("main");
    assert_eq!(
        state_message.trim_end().lines().count(),
        1,
        "{state_message:?}"
    );
    assert!(
        state_message.starts_with("Update inject.tfstate (serial 1) by x\\n\\nSigned-off-by"),
        "{state_message:?}"
    );
    assert_eq!(trailers("main").trim(), "");
    let (status, _) = http("UNLOCK", &url, Some(&lock), None).unwrap();
    assert_eq!(status, 200);

    // A basic-auth user name is a writer's name too (it cannot hold ':', so no trailer here;
    // the line break is what matters).
    let second = STATE.replace("\"serial\":1", "\"serial\":2");
    let (status, text) = http(
        "POST",
        &url,
        Some(&second),
        Some(("alice\n\nmallory was here", "pw")),
    )
    .unwrap();
    assert_eq!(status, 200, "{text}");
    let message = body("main");
    assert_eq!(message.trim_end().lines().count(), 1, "{message:?}");
    assert!(
        message.contains("(serial 2) by alice\\n\\nmallory was here"),
        "{message:?}"
    );

    let log = gitstate.log();
    assert!(
        !log.lines().any(|l| l.starts_with("FORGED-LOG-LINE")),
        "a lock ID forged a log line:\n{log}"
    );
    assert!(
        log.contains("id\\nFORGED-LOG-LINE"),
        "the lock ID is logged escaped:\n{log}"
    );
    // (The text format colours its own output; no caller's escape sequence gets through.)
    assert!(
        !log.contains("\u{1b}[2J"),
        "a caller's escape sequence reached the log"
    );
}

// ------------------------------------------------------------------------------------------------
// 6. Cache permissions

fn modes_under(dir: &Path) -> Vec<(PathBuf, u32)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            out.push((path.clone(), meta.mode() & 0o7777));
            if meta.is_dir() {
                stack.push(path);
            }
        }
    }
    out
}

/// The cache holds plaintext states: after reads and writes through a smart-HTTP remote (and the
/// history cache), nothing under it is readable by group or others, and the cache root is 0700
/// even when it existed with a looser mode.
#[test]
fn the_cache_is_readable_by_its_user_only() {
    let remote = remote();
    let cwd = tempfile::tempdir().unwrap();
    let cache = cwd.path().join("shared-tmp/gitstate-cache");
    std::fs::create_dir_all(&cache).unwrap();
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o755)).unwrap();
    let spec = format!("default={}", remote.server.url("states"));
    let cache_env = cache.to_str().unwrap().to_owned();
    let gitstate = Gitstate::start(
        &["--repository", &spec],
        &[
            ("GIT_USERNAME", USER),
            ("GIT_PASSWORD", PASSWORD),
            ("GITSTATE_CACHE_DIR", &cache_env),
        ],
        cwd.path(),
    );
    let url = gitstate.state_url("default", "private.tfstate");
    assert_eq!(http("POST", &url, Some(STATE), None).unwrap().0, 200);
    // Another writer moves the branch, so the next GET fetches a pack into the cache.
    let work = tempfile::tempdir().unwrap();
    git(
        Some(work.path()),
        &[
            "clone",
            "--quiet",
            &remote.server.url_with_credentials("states"),
            "c",
        ],
    );
    let clone = work.path().join("c");
    std::fs::write(clone.join("other.tfstate"), STATE).unwrap();
    git(Some(&clone), &["add", "other.tfstate"]);
    git(Some(&clone), &["commit", "--quiet", "-m", "other"]);
    git(Some(&clone), &["push", "--quiet", "origin", "main"]);
    let (status, text) = http("GET", &url, None, None).unwrap();
    assert_eq!((status, text.as_str()), (200, STATE));
    let (status, _) = http(
        "GET",
        &format!("{}/_/history/default/private.tfstate", gitstate.base_url()),
        None,
        None,
    )
    .unwrap();
    assert_eq!(status, 200);

    let modes = modes_under(&cache);
    assert!(
        modes
            .iter()
            .any(|(p, _)| p.to_string_lossy().contains("/objects/pack/")),
        "no pack was fetched into the cache: {modes:?}"
    );
    let open: Vec<String> = modes
        .iter()
        .filter(|(_, mode)| mode & 0o077 != 0)
        .map(|(p, mode)| format!("{:o} {}", mode, p.display()))
        .collect();
    assert!(open.is_empty(), "readable by others:\n{}", open.join("\n"));
    let root_mode = std::fs::metadata(&cache).unwrap().mode() & 0o777;
    assert_eq!(root_mode, 0o700, "the cache root is {root_mode:o}");
}

/// A cache directory another user prepared (a symbolic link, or a directory owned by someone
/// else, as anyone can create under /tmp) is refused at start with a sentence.
#[test]
fn a_cache_directory_someone_else_prepared_is_refused() {
    let remote = remote();
    let cwd = tempfile::tempdir().unwrap();
    let spec = format!("default={}", remote.server.url("states"));
    let target = cwd.path().join("elsewhere");
    std::fs::create_dir_all(&target).unwrap();
    let link = cwd.path().join("cache-link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let env = [("GIT_USERNAME", USER), ("GIT_PASSWORD", PASSWORD)];
    let mut with_link = env.to_vec();
    let link_str = link.to_str().unwrap().to_owned();
    with_link.push(("GITSTATE_CACHE_DIR", &link_str));
    let stderr = gitstate_fails(
        cwd.path(),
        &["serve", "--listen", "127.0.0.1:0", "--repository", &spec],
        &with_link,
    );
    assert!(stderr.contains("symbolic link"), "{stderr}");

    // Owned by another user: only root can make one here; as another user this part cannot run.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let foreign = cwd.path().join("foreign-cache");
        std::fs::create_dir_all(&foreign).unwrap();
        std::os::unix::fs::chown(&foreign, Some(65534), Some(65534)).unwrap();
        let foreign_str = foreign.to_str().unwrap().to_owned();
        let mut with_foreign = env.to_vec();
        with_foreign.push(("GITSTATE_CACHE_DIR", &foreign_str));
        let stderr = gitstate_fails(
            cwd.path(),
            &["serve", "--listen", "127.0.0.1:0", "--repository", &spec],
            &with_foreign,
        );
        assert!(stderr.contains("belongs to user id 65534"), "{stderr}");
    } else {
        eprintln!("not root: the foreign-owner case of this test needs root to chown");
    }
}

/// gitstate's own files are private (umask 077), but the program `gitstate wrap` runs gets its
/// caller's umask back: Terraform's files are created as the user expects.
#[test]
fn wrap_gives_the_program_its_callers_umask() {
    use std::os::unix::process::CommandExt;
    let cwd = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let listen = format!("127.0.0.1:{port}");
    let mut cmd = wrap_command(
        cwd.path(),
        &["--listen", &listen, "--state", "umask.tfstate"],
        &["sh", "-c", "umask; touch made-by-the-program"],
        &[],
    );
    // SAFETY: only sets the umask of the child between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::umask(0o027);
            Ok(())
        });
    }
    let out = run_captured(
        cmd,
        "gitstate wrap -- sh -c umask",
        Duration::from_secs(120),
    );
    assert_eq!(out.code, Some(0), "{}", out.combined());
    assert_eq!(out.stdout.trim(), "0027", "{}", out.combined());
    let mode = std::fs::metadata(cwd.path().join("made-by-the-program"))
        .unwrap()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o640, "the program's file got mode {mode:o}");
    // gitstate's own embedded repository is private.
    let repo = cwd.path().join(".gitstate/default.git");
    let modes = modes_under(&repo);
    assert!(
        modes.iter().any(|(p, _)| p.ends_with("HEAD")),
        "the embedded repository was not created: {modes:?}"
    );
    let open: Vec<String> = modes
        .into_iter()
        .filter(|(_, mode)| mode & 0o077 != 0)
        .map(|(p, mode)| format!("{mode:o} {}", p.display()))
        .collect();
    assert!(open.is_empty(), "readable by others:\n{}", open.join("\n"));
}

/// Authentication comes before the body is read: in team mode a caller without a token who
/// announces a 1 GB state (and sends none of it) gets 401 at once, not 413 and not a wait.
#[test]
fn callers_are_authenticated_before_the_body_is_read() {
    let cwd = tempfile::tempdir().unwrap();
    let hash = format!(
        "sha256:{}",
        gitstate_tests::crypto::sha256_hex("body-token")
    );
    let gitstate = Gitstate::start(
        &["--auth-mode", "team", "--token-hash", &hash],
        &[],
        cwd.path(),
    );
    for (method, target) in [
        ("POST", "/state/default/big.tfstate"),
        ("LOCK", "/state/default/big.tfstate"),
        ("POST", "/lock/default/big.tfstate"),
    ] {
        let mut stream = TcpStream::connect(("127.0.0.1", gitstate.port())).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let started = std::time::Instant::now();
        write!(
            stream,
            "{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000000000\r\n\r\n{{"
        )
        .unwrap();
        let mut answer = [0u8; 512];
        let n = stream.read(&mut answer).unwrap_or(0);
        let head = String::from_utf8_lossy(&answer[..n]);
        assert!(
            head.starts_with("HTTP/1.1 401"),
            "{method} {target}: {head}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{method} {target}: the answer waited for the body"
        );
    }
}

/// Bytes of the files under `dir`.
fn bytes_under(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => bytes_under(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// A malicious git remote cannot hold a worker, memory or the cache's disk (docs/SECURITY.md):
/// an answer dripped a byte at a time, never stalling long enough for a socket timeout, ends at
/// the git timeout (503); an advertisement or a pack that never stops ends at the size limit
/// (502, naming `max_answer_bytes`). In each case gitstate hangs up (the server sees the
/// connection closed: no thread is left reading it), keeps serving, and the cache holds no more
/// than the limit.
#[test]
fn a_hostile_git_remote_cannot_hold_a_worker_or_fill_the_disk() {
    const LIMIT: u64 = 1024 * 1024;
    // The floods get a long timeout, so that what stops them is the size limit, however slow
    // the machine; the drip a short one.
    for (mode, timeout, status, says) in [
        ("drip", 2, 503, "within 2 s"),
        ("flood", 60, 502, "max_answer_bytes"),
        ("pack-flood", 60, 502, "max_answer_bytes"),
    ] {
        let daemon = HostileGitDaemon::start(mode);
        let cwd = TempDir::new().unwrap();
        let hcl = cwd.path().join("gitstate.hcl");
        std::fs::write(
            &hcl,
            format!(
                "git_timeout_seconds = {timeout}\nmax_answer_bytes = {LIMIT}\nrepository \"hostile\" {{\n  url = \"{}\"\n}}\n",
                daemon.url()
            ),
        )
        .unwrap();
        let gitstate = Gitstate::start(&["--config", hcl.to_str().unwrap()], &[], cwd.path());
        let (code, body) = http(
            "GET",
            &gitstate.state_url("hostile", "a.tfstate"),
            None,
            None,
        )
        .unwrap();
        assert_eq!(code, status, "{mode}: {body}\n{}", gitstate.log());
        // The answer is one sentence and the request id; the log says which limit ended it.
        let id = request_id_of(&body);
        assert!(
            gitstate.logged(&id, says),
            "{mode}: {body}\n{}",
            gitstate.log()
        );
        // gitstate gives up on the connection itself: the server sees it closed.
        let mut waited = 0;
        while daemon.closed().is_empty() && waited < 300 {
            std::thread::sleep(Duration::from_millis(100));
            waited += 1;
        }
        assert!(
            !daemon.closed().is_empty(),
            "{mode}: gitstate left the connection open, still reading the answer"
        );
        let (health, _) = http(
            "GET",
            &format!("{}/_/health", gitstate.base_url()),
            None,
            None,
        )
        .unwrap();
        assert_eq!(health, 200, "{mode}");
        let cached = bytes_under(&gitstate.cache_dir);
        assert!(
            cached < 4 * LIMIT,
            "{mode}: the cache holds {cached} bytes after an answer limited to {LIMIT}"
        );
    }
}

/// The files under `dir`, at any depth.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .flat_map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => files_under(&e.path()),
            _ => vec![e.path()],
        })
        .collect()
}

/// The peak resident memory of process `pid` (`VmHWM` in `/proc/PID/status`), in bytes.
fn peak_memory(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmHWM in /proc/{pid}/status:\n{status}"));
    kib * 1024
}

/// A zip bomb from a malicious git remote is refused, not inflated (docs/SECURITY.md): a valid
/// pack whose blob inflates to 256 MiB of zeros (256 KiB on the wire) gets a 502 naming the
/// setting the object limit comes from (`max_state_bytes`: 1 MiB here, so the limit is
/// 6 MiB + 64 MiB), the server's peak memory stays far below the blob's size, and it keeps
/// serving other repositories.
#[test]
fn a_zip_bomb_from_a_git_remote_is_refused_without_inflating_it() {
    const BOMB: u64 = 256 * 1024 * 1024;
    let daemon = HostileGitDaemon::start("zip-bomb");
    let cwd = TempDir::new().unwrap();
    let hcl = cwd.path().join("gitstate.hcl");
    let plain = cwd.path().join("plain.git");
    std::fs::write(
        &hcl,
        format!(
            "git_timeout_seconds = 60\nmax_state_bytes = 1048576\nrepository \"hostile\" {{\n  url = \"{}\"\n}}\nrepository \"plain\" {{\n  url = \"{}\"\n}}\n",
            daemon.url(),
            plain.display()
        ),
    )
    .unwrap();
    let mut gitstate = Gitstate::start(&["--config", hcl.to_str().unwrap()], &[], cwd.path());
    let (code, body) = http(
        "GET",
        &gitstate.state_url("hostile", "a.tfstate"),
        None,
        None,
    )
    .unwrap();
    assert_eq!(code, 502, "{body}\n{}", gitstate.log());
    let id = request_id_of(&body);
    assert!(
        gitstate.logged(&id, "max_state_bytes"),
        "{body}\n{}",
        gitstate.log()
    );
    assert_eq!(
        body.trim_end().matches(". ").count(),
        0,
        "one sentence: {body}"
    );
    let peak = peak_memory(gitstate.pid());
    eprintln!("zip bomb refused: {body}; the server's peak memory: {peak} bytes");
    assert!(
        peak < BOMB / 2,
        "the server's peak memory is {peak} bytes after a blob of {BOMB} bytes was refused"
    );
    // Nothing of the refused pack is kept in the cache.
    let kept = files_under(&gitstate.cache_dir)
        .into_iter()
        .filter(|f| {
            let name = f.file_name().unwrap_or_default().to_string_lossy();
            name.ends_with(".pack") || name.contains("tmp")
        })
        .collect::<Vec<_>>();
    assert!(kept.is_empty(), "the cache kept {kept:?}");
    // The server still serves: another repository takes a write and reads it back.
    still_serves(&mut gitstate, "plain");
}

/// The same bound on the partial-fetch path (protocol v2, `filter blob:none`, then the one blob a
/// read wants, DESIGN §9.5), against a real git daemon: a state file whose blob inflates to 256 MiB
/// (256 KiB packed) on a deployment whose objects may take at most 70 MiB is a 502 naming the
/// setting, and the server's memory stays far below the blob.
#[test]
fn an_object_over_the_limit_is_refused_on_the_partial_fetch_path_too() {
    const BIG: u64 = 256 * 1024 * 1024;
    let repos = TempDir::new().unwrap();
    let bare = bare_repo(repos.path(), "states");
    let work = TempDir::new().unwrap();
    git(
        None,
        &[
            "clone",
            "-q",
            bare.to_str().unwrap(),
            work.path().to_str().unwrap(),
        ],
    );
    let zeros = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "head -c {BIG} /dev/zero > big.tfstate && echo '{{}}' > small.tfstate"
        ))
        .current_dir(work.path())
        .status()
        .unwrap();
    assert!(zeros.success());
    git(Some(work.path()), &["add", "."]);
    git(
        Some(work.path()),
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@e",
            "commit",
            "-qm",
            "big",
        ],
    );
    git(Some(work.path()), &["push", "-q", "origin", "HEAD:main"]);
    let daemon = GitDaemon::start(repos.path());
    let cwd = TempDir::new().unwrap();
    let repository = format!("default={}", daemon.url("states"));
    let mut gitstate = Gitstate::start(
        &["--repository", &repository, "--max-state-bytes", "1048576"],
        &[],
        cwd.path(),
    );
    // The small state is served (the trees came without the big blob)...
    let (code, body) = http(
        "GET",
        &gitstate.state_url("default", "small.tfstate"),
        None,
        None,
    )
    .unwrap();
    assert_eq!((code, body.trim()), (200, "{}"), "{}", gitstate.log());
    // ...and the big one is refused when its blob is fetched.
    let (code, body) = http(
        "GET",
        &gitstate.state_url("default", "big.tfstate"),
        None,
        None,
    )
    .unwrap();
    assert_eq!(code, 502, "{body}\n{}", gitstate.log());
    let id = request_id_of(&body);
    assert!(
        gitstate.logged(&id, "max_state_bytes"),
        "{body}\n{}",
        gitstate.log()
    );
    let peak = peak_memory(gitstate.pid());
    assert!(
        peak < BIG / 2,
        "the server's peak memory is {peak} bytes after a blob of {BIG} bytes was refused"
    );
    assert!(gitstate.running());
}

/// The server still serves: repository `repository` takes a write and reads it back.
fn still_serves(gitstate: &mut Gitstate, repository: &str) {
    let state = r#"{"version":4,"serial":1,"lineage":"alive","outputs":{},"resources":[]}"#;
    let url = gitstate.state_url(repository, "ok.tfstate");
    let (code, body) = http("POST", &url, Some(state), None).unwrap();
    assert_eq!(code, 200, "{body}");
    let (code, body) = http("GET", &url, None, None).unwrap();
    assert_eq!((code, body.as_str()), (200, state));
    assert!(gitstate.running());
}

/// An ssh server that accepts gitstate's key, keeps the session alive (it answers ssh's
/// keep-alives) and never sends a byte (the key's forced command reads and discards its input)
/// cannot hold a worker or an ssh process (docs/SECURITY.md): the GET is a 503 at the git
/// timeout, the ssh program and the shell running `GIT_SSH_COMMAND` are gone, and the server
/// keeps serving.
#[test]
fn a_silent_ssh_server_gets_a_503_and_leaves_no_ssh_behind() {
    let keys = TempDir::new().unwrap();
    let key = keys.path().join("key");
    ssh_keygen(&key);
    let public = std::fs::read_to_string(keys.path().join("key.pub")).unwrap();
    let sshd = Sshd::start(&format!("command=\"cat >/dev/null\",no-pty {public}"));
    let cwd = TempDir::new().unwrap();
    let hcl = cwd.path().join("gitstate.hcl");
    let plain = cwd.path().join("plain.git");
    std::fs::write(
        &hcl,
        format!(
            "git_timeout_seconds = 3\nrepository \"silent\" {{\n  url = \"ssh://root@127.0.0.1:{}/srv/states.git\"\n}}\nrepository \"plain\" {{\n  url = \"{}\"\n}}\n",
            sshd.port(),
            plain.display()
        ),
    )
    .unwrap();
    let ssh = format!(
        "ssh -i {} -o IdentitiesOnly=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR",
        key.display()
    );
    let mut gitstate = Gitstate::start(
        &["--config", hcl.to_str().unwrap()],
        &[("GIT_SSH_COMMAND", &ssh)],
        cwd.path(),
    );
    let started = std::time::Instant::now();
    let (code, body) = http(
        "GET",
        &gitstate.state_url("silent", "a.tfstate"),
        None,
        None,
    )
    .unwrap();
    let took = started.elapsed();
    eprintln!("silent ssh server: {code} {body} after {took:?}");
    assert_eq!(code, 503, "{body}\n{}\n{}", gitstate.log(), sshd.log());
    let id = request_id_of(&body);
    assert!(
        gitstate.logged(&id, "within 3 s"),
        "{body}\n{}",
        gitstate.log()
    );
    assert!(took < Duration::from_secs(10), "answered after {took:?}");
    // ssh (and the shell running GIT_SSH_COMMAND) was stopped: gitstate has no child left.
    let mut left = children_of(gitstate.pid());
    for _ in 0..20 {
        if left.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        left = children_of(gitstate.pid());
    }
    assert!(left.is_empty(), "gitstate still runs {left:?}");
    // The server still serves.
    still_serves(&mut gitstate, "plain");
}

/// One GET of `target` with `Authorization: authorization` over a fresh connection: the status,
/// and whether the answer has a `Retry-After` header.
fn get_authorized(port: u16, target: &str, authorization: &str) -> (u16, bool) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    write!(
        stream,
        "GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nAuthorization: {authorization}\r\n\r\n"
    )
    .expect("send");
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let text = String::from_utf8_lossy(&response);
    let (head, _) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let retry_after = head
        .lines()
        .any(|line| line.to_ascii_lowercase().starts_with("retry-after:"));
    (status, retry_after)
}

/// `gitstate_password_checks_total` by result, from a scrape of `/_/metrics` with `token`.
fn password_checks(port: u16, token: &str) -> std::collections::BTreeMap<String, u64> {
    let (status, body) = raw(
        port,
        "GET",
        "/_/metrics",
        &[("Authorization", &format!("Bearer {token}"))],
        b"",
    );
    assert_eq!(status, 200, "{body}");
    body.lines()
        .filter_map(|line| line.strip_prefix("gitstate_password_checks_total{result=\""))
        .filter_map(|rest| {
            let (result, value) = rest.split_once("\"} ")?;
            Some((result.to_owned(), value.trim().parse().ok()?))
        })
        .collect()
}

/// A flood of junk credentials costs no password hash (issue 55, docs/SECURITY.md "Refused
/// credentials at volume"): without bcrypt users, 64 concurrent junk Basic pairs and Bearer
/// strings are each a 401 and the server counts no password check; the team token still reads.
/// With a bcrypt user, named junk costs a hash each in a bounded pool: a concurrent flood gets
/// 503 with `Retry-After` past the pool, never more hashes at once than the pool holds, Bearer
/// junk still costs none, and the user's own password works once the flood is over.
#[test]
fn a_flood_of_junk_is_refused_without_hashing() {
    use base64::Engine;
    let basic = |name: &str, password: &str| {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{name}:{password}"))
        )
    };
    let token = "flood-team-token";
    let hash = format!("sha256:{}", gitstate_tests::crypto::sha256_hex(token));
    let line = Command::new("htpasswd")
        .args(["-nbB", "-C", "10", "alice", "alice-password"])
        .output()
        .expect("htpasswd (apt-get install apache2-utils)");
    assert!(line.status.success());
    let alice = String::from_utf8(line.stdout).unwrap().trim().to_owned();
    let target = "/state/default/flood.tfstate";

    for with_user in [false, true] {
        let cwd = tempfile::tempdir().unwrap();
        let env: Vec<(&str, &str)> = if with_user {
            vec![("GITSTATE_USERS", alice.as_str())]
        } else {
            Vec::new()
        };
        let gitstate = Gitstate::start(
            &["--auth-mode", "team", "--token-hash", &hash],
            &env,
            cwd.path(),
        );
        let port = gitstate.port();
        let flood = |authorizations: Vec<String>| -> Vec<(u16, bool)> {
            std::thread::scope(|scope| {
                let sent: Vec<_> = authorizations
                    .iter()
                    .map(|a| scope.spawn(move || get_authorized(port, target, a)))
                    .collect();
                sent.into_iter().map(|t| t.join().unwrap()).collect()
            })
        };
        let bearer_junk: Vec<String> = (0..32).map(|i| format!("Bearer junk-{i}")).collect();
        let named_junk: Vec<String> = (0..64)
            .map(|i| basic(&format!("name-{i}"), &format!("junk-{i}")))
            .collect();

        let answers = flood(bearer_junk);
        assert!(answers.iter().all(|(s, _)| *s == 401), "{answers:?}");
        assert_eq!(
            password_checks(port, token),
            Default::default(),
            "Bearer junk never costs a password hash"
        );
        let answers = flood(named_junk);
        let checks = password_checks(port, token);
        if !with_user {
            assert!(answers.iter().all(|(s, _)| *s == 401), "{answers:?}");
            assert_eq!(
                checks,
                Default::default(),
                "no user has a bcrypt hash: junk costs none"
            );
        } else {
            let busy = answers.iter().filter(|(s, _)| *s == 503).count();
            assert!(
                answers.iter().all(|(s, _)| *s == 401 || *s == 503),
                "{answers:?}"
            );
            assert!(
                busy > 0,
                "64 concurrent hashes at cost 10 found the pool never full: {answers:?}"
            );
            assert!(
                answers.iter().all(|(s, retry)| *s != 503 || *retry),
                "a 503 without Retry-After: {answers:?}"
            );
            let hashed = checks.get("refused").copied().unwrap_or(0);
            assert_eq!(checks.get("busy").copied().unwrap_or(0), busy as u64);
            assert_eq!(hashed + busy as u64, 64, "{checks:?}");
            assert!(
                hashed < 64,
                "every junk request was hashed: the pool bounds nothing"
            );
            let (status, _) = get_authorized(port, target, &basic("alice", "alice-password"));
            assert_eq!(status, 204, "the user's own password after the flood");
        }
        let (status, _) = get_authorized(port, target, &format!("Bearer {token}"));
        assert_eq!(status, 204, "the team token during and after the flood");
    }
}
