//! Hosted-endpoint mode (`--auth-mode passthrough`): the Terraform backend's username/password is
//! the git credential of that request only. Real lighttpd + git http-backend with basic auth, real
//! gitstate, real Terraform.

use std::path::{Path, PathBuf};
use std::process::Command;

use gitstate_tests::{
    bare_repo, git_log_subjects, http, refs_under, write_main_tf, GitHttpServer, Gitstate,
    HttpBackend, Terraform,
};

const USER: &str = "tf-user";
const PASSWORD: &str = "correct-horse-battery";
const STATE: &str = r#"{"version":4,"terraform_version":"1.15.5","serial":1,"lineage":"pt","outputs":{},"resources":[]}"#;

fn objects_in(cache: &Path) -> usize {
    walk(cache)
        .into_iter()
        .filter(|p| {
            let s = p.to_string_lossy();
            s.contains("/objects/") && !s.contains("/objects/info")
        })
        .count()
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                out.extend(walk(&path));
            } else {
                out.push(path);
            }
        }
    }
    out
}

/// A smart-HTTP server requiring USER/PASSWORD, its bare repository `states`, and a
/// `gitstate serve --auth-mode passthrough` on it with `env`.
struct Passthrough {
    gitstate: Gitstate,
    repo: PathBuf,
    _server: GitHttpServer,
    _dir: tempfile::TempDir,
}

fn passthrough(env: &[(&str, &str)]) -> Passthrough {
    let dir = tempfile::tempdir().expect("tempdir");
    let repos = dir.path().join("repos");
    std::fs::create_dir_all(&repos).expect("repos");
    let repo = bare_repo(&repos, "states");
    let server = GitHttpServer::start(&repos, USER, PASSWORD);
    let spec = format!("default={}", server.url("states"));
    let gitstate = Gitstate::start(
        &["--repository", &spec, "--auth-mode", "passthrough"],
        env,
        dir.path(),
    );
    Passthrough {
        gitstate,
        repo,
        _server: server,
        _dir: dir,
    }
}

#[test]
fn passthrough_uses_the_callers_credentials_and_nothing_else() {
    // The deployment's environment holds a valid credential too: pass-through must never fall
    // back to it.
    let Passthrough { gitstate, repo, .. } =
        &passthrough(&[("GIT_USERNAME", USER), ("GIT_PASSWORD", PASSWORD)]);
    let url = gitstate.state_url("default", "prod.tfstate");

    // No credentials, or wrong ones: 401 from gitstate, and nothing was fetched into the cache.
    for auth in [None, Some((USER, "wrong")), Some(("nobody", PASSWORD))] {
        let (status, body) = http("GET", &url, None, auth).expect("request");
        assert_eq!(status, 401, "{auth:?}: {body}");
        assert!(
            !body.contains(PASSWORD) && !body.contains("wrong\""),
            "{body}"
        );
    }
    assert_eq!(
        objects_in(&gitstate.cache_dir),
        0,
        "a refused caller touched the cache"
    );

    // The right pair works, and names the writer in the commit.
    let (status, body) = http("POST", &url, Some(STATE), Some((USER, PASSWORD))).expect("post");
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        git_log_subjects(repo, "main", "prod.tfstate"),
        vec![format!("Update prod.tfstate (serial 1) by {USER}")]
    );
    let (status, body) = http("GET", &url, None, Some((USER, PASSWORD))).expect("get");
    assert_eq!((status, body.as_str()), (200, STATE));

    // The cache is warm now: a wrong password still gets nothing out of it.
    assert!(objects_in(&gitstate.cache_dir) > 0);
    let (status, body) = http("GET", &url, None, Some((USER, "wrong"))).expect("get");
    assert_eq!(status, 401, "{body}");
    assert!(
        !body.contains("lineage"),
        "state served to a refused caller: {body}"
    );
    let log = gitstate.log();
    assert!(!log.contains(PASSWORD), "the password reached the log");
}

#[test]
fn passthrough_with_real_terraform() {
    let Passthrough { gitstate, repo, .. } = &passthrough(&[]);
    let url = gitstate.state_url("default", "hosted.tfstate");
    let tf = Terraform::installed("1.15.5");
    let work = tempfile::tempdir().expect("tempdir");

    // Wrong password: init fails, nothing is written.
    write_main_tf(
        work.path(),
        &HttpBackend::new(&url).with_auth(USER, "nope"),
        1,
        "g1",
    );
    let out = tf.init(work.path());
    let out = if out.code == Some(0) {
        tf.apply(work.path())
    } else {
        out
    };
    assert_ne!(
        out.code,
        Some(0),
        "terraform must fail with a wrong password"
    );
    assert!(
        refs_under(repo, "refs/").is_empty(),
        "a refused terraform wrote to the repository"
    );

    // The right pair: init, apply, plan without changes.
    let _ = std::fs::remove_dir_all(work.path().join(".terraform"));
    write_main_tf(
        work.path(),
        &HttpBackend::new(&url).with_auth(USER, PASSWORD),
        2,
        "g1",
    );
    tf.init(work.path()).expect_code(0, "init");
    tf.apply(work.path()).expect_code(0, "apply");
    tf.plan(work.path()).expect_code(0, "plan shows no changes");
    let subjects = git_log_subjects(repo, "main", "hosted.tfstate");
    assert!(!subjects.is_empty(), "apply wrote no commit");
    assert!(
        subjects
            .iter()
            .all(|s| s.starts_with("Update hosted.tfstate (serial ")),
        "{subjects:?}"
    );
    assert!(!gitstate.log().contains(PASSWORD));
}

/// Query-style addresses with an allow list of `*`: internal targets are still refused with a
/// 403 naming the rule, before any connection. (Only loopback and file:// targets here, so a
/// regression could never send traffic off this machine; private and link-local ranges are
/// covered by the unit tests of `gitstate_url::policy`.)
#[test]
fn ssrf_targets_are_refused_even_when_everything_is_allowed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gitstate = Gitstate::start(
        &[
            "--allow",
            "*",
            "--auth-mode",
            "passthrough",
            "--repository",
            // http://, not git://: pass-through refuses at start a configured transport that
            // cannot carry the caller's credential (issue 15; this test used git:// before).
            "default=http://127.0.0.1:1/none.git",
        ],
        &[],
        dir.path(),
    );
    let cases = [
        ("file:///etc", "only http(s)"),
        ("http://127.0.0.1:1/x.git", "loopback"),
        ("http://localhost:1/x.git", "loopback"),
        ("git://[::1]:1/x.git", "loopback"),
        ("https://example.invalid/a/../b.git", "dot segments"),
    ];
    for (target, rule) in cases {
        let query: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("type", "git")
            .append_pair("repository", target)
            .append_pair("state", "x.tfstate")
            .finish();
        let (status, body) = http(
            "GET",
            &format!("{}/?{query}", gitstate.base_url()),
            None,
            None,
        )
        .expect("get");
        assert_eq!(status, 403, "{target}: {body}");
        assert!(
            body.contains(rule),
            "{target}: {body} should name the rule {rule:?}"
        );
    }
    assert_eq!(objects_in(&gitstate.cache_dir), 0);
}

/// Team mode: the server writes with its own credential (here the embedded default), and callers
/// must present a token whose SHA-256 is configured; real Terraform sends it as its password.
#[test]
fn team_mode_admits_only_configured_tokens() {
    let token = "team-token-0123";
    let hash = String::from_utf8(
        Command::new("sh")
            .arg("-c")
            .arg("printf %s \"$0\" | sha256sum | cut -d' ' -f1")
            .arg(token)
            .output()
            .expect("sha256sum")
            .stdout,
    )
    .expect("hex");
    let token_hash = format!("sha256:{}", hash.trim());
    let dir = tempfile::tempdir().expect("tempdir");
    let gitstate = Gitstate::start(
        &["--auth-mode", "team", "--token-hash", &token_hash],
        &[],
        dir.path(),
    );
    let url = gitstate.state_url("default", "team.tfstate");
    for auth in [None, Some(("ci", "wrong-token")), Some(("ci", ""))] {
        let (status, body) = http("GET", &url, None, auth).expect("get");
        assert_eq!(status, 401, "{auth:?}: {body}");
        assert!(body.contains("token"), "{body}");
        // gitstate refused, not the git server: the sentence must not send the caller there.
        assert!(!body.contains("git server"), "{body}");
    }
    let (status, _) = http("GET", &url, None, Some(("ci", token))).expect("get");
    assert_eq!(status, 204);
    // OpenTofu's `headers = { Authorization = "Bearer …" }`: the same token as a Bearer token.
    let client = reqwest::blocking::Client::new();
    for (bearer, expected) in [(token, 204), ("wrong-token", 401)] {
        let response = client
            .get(&url)
            .header("Authorization", format!("Bearer {bearer}"))
            .send()
            .expect("get with a bearer token");
        assert_eq!(response.status().as_u16(), expected, "Bearer {bearer}");
    }

    let tf = Terraform::installed("1.15.5");
    let work = tempfile::tempdir().expect("tempdir");
    write_main_tf(
        work.path(),
        &HttpBackend::new(&url).with_auth("platform-ci", token),
        1,
        "g1",
    );
    tf.init(work.path())
        .expect_code(0, "init with a team token");
    tf.apply(work.path())
        .expect_code(0, "apply with a team token");
    tf.plan(work.path()).expect_code(0, "plan shows no changes");
    let repo = dir.path().join(".gitstate/default.git");
    let subjects = git_log_subjects(&repo, "main", "team.tfstate");
    assert!(!subjects.is_empty(), "apply wrote no commit");
    assert!(!gitstate.log().contains(token), "the token reached the log");
}

/// Team mode with named users: the operator configures `htpasswd -nbB` lines; real Terraform
/// sends the user's name and password; a wrong password, an unknown name or a token-less caller
/// gets 401, and the password never reaches the log.
#[test]
fn team_mode_admits_configured_users() {
    let password = "correct horse battery";
    let line = Command::new("htpasswd")
        .args(["-nbB", "-C", "8", "alice", password])
        .output()
        .expect("htpasswd (apt-get install apache2-utils)");
    assert!(line.status.success());
    let user = String::from_utf8(line.stdout)
        .expect("utf-8")
        .trim()
        .to_owned();
    assert!(user.starts_with("alice:$2y$"), "{user}");
    let dir = tempfile::tempdir().expect("tempdir");
    let gitstate = Gitstate::start(
        &["--auth-mode", "team"],
        &[("GITSTATE_USERS", &user)],
        dir.path(),
    );
    let url = gitstate.state_url("default", "users.tfstate");
    for auth in [
        None,
        Some(("alice", "wrong")),
        Some(("bob", password)),
        Some(("", password)),
    ] {
        let (status, body) = http("GET", &url, None, auth).expect("get");
        assert_eq!(status, 401, "{auth:?}: {body}");
    }
    assert_eq!(
        http("GET", &url, None, Some(("alice", password)))
            .expect("get")
            .0,
        204
    );

    let tf = Terraform::installed("1.15.5");
    let work = tempfile::tempdir().expect("tempdir");
    write_main_tf(
        work.path(),
        &HttpBackend::new(&url).with_auth("alice", "wrong"),
        1,
        "g1",
    );
    let refused = tf.init(work.path());
    assert_ne!(refused.code, Some(0), "init with a wrong password");
    write_main_tf(
        work.path(),
        &HttpBackend::new(&url).with_auth("alice", password),
        1,
        "g1",
    );
    tf.run(
        work.path(),
        &["init", "-input=false", "-no-color", "-reconfigure"],
    )
    .expect_code(0, "init as alice");
    tf.apply(work.path()).expect_code(0, "apply as alice");
    tf.plan(work.path()).expect_code(0, "plan shows no changes");
    let subjects = git_log_subjects(
        &dir.path().join(".gitstate/default.git"),
        "main",
        "users.tfstate",
    );
    assert!(!subjects.is_empty(), "apply wrote no commit");
    assert!(
        !gitstate.log().contains(password),
        "the password reached the log"
    );
}

/// Team mode on Lambda-style configuration: the deployment's own git password arrives as a KMS
/// ciphertext (`GIT_PASSWORD_KMS`, here from moto) and is decrypted once at start-up; callers
/// present a team token. A ciphertext KMS refuses (wrong encryption context) stops the start with
/// a sentence that names the variable and never the secret.
#[test]
fn team_mode_with_a_kms_encrypted_git_password() {
    use base64::Engine;
    let moto = gitstate_tests::crypto::MotoServer::start();
    let key = moto.create_kms_key();
    let encrypted = moto.call(
        "TrentService.Encrypt",
        &serde_json::json!({
            "KeyId": key,
            "Plaintext": base64::engine::general_purpose::STANDARD.encode(PASSWORD),
            "EncryptionContext": {"purpose": "git"},
        }),
    )["CiphertextBlob"]
        .as_str()
        .expect("CiphertextBlob")
        .to_owned();
    let repos = tempfile::tempdir().expect("tempdir");
    let repo = bare_repo(repos.path(), "states");
    let server = GitHttpServer::start(repos.path(), USER, PASSWORD);
    let spec = format!("default={}", server.url("states"));
    let token = "kms-team-token";
    let token_hash = format!("sha256:{}", gitstate_tests::crypto::sha256_hex(token));
    let mut env = moto.aws_env();
    env.push(("GIT_USERNAME".into(), USER.into()));
    env.push(("GIT_PASSWORD_KMS".into(), encrypted.clone()));
    env.push(("GIT_PASSWORD_KMS_CONTEXT".into(), "purpose=git".into()));
    let env_refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let gitstate = Gitstate::start(
        &[
            "--repository",
            &spec,
            "--auth-mode",
            "team",
            "--token-hash",
            &token_hash,
        ],
        &env_refs,
        dir.path(),
    );
    let url = gitstate.state_url("default", "kms.tfstate");
    let (status, body) = http("POST", &url, Some(STATE), Some(("ci", token))).expect("post");
    assert_eq!(status, 200, "{body}\n{}", gitstate.log());
    assert_eq!(
        git_log_subjects(&repo, "main", "kms.tfstate"),
        ["Update kms.tfstate (serial 1) by ci"]
    );
    let (status, _) = http("GET", &url, None, Some(("ci", "not-the-token"))).expect("get");
    assert_eq!(status, 401);
    assert!(
        !gitstate.log().contains(PASSWORD),
        "the git password reached the log"
    );

    // the same ciphertext under another encryption context: KMS refuses, gitstate does not start
    let out = Command::new(gitstate_tests::gitstate_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--repository", &spec])
        .envs(env.iter().cloned())
        .env("GIT_PASSWORD_KMS_CONTEXT", "purpose=other")
        .current_dir(dir.path())
        .output()
        .expect("run gitstate");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "started with an undecryptable password"
    );
    assert!(
        stderr.contains("GIT_PASSWORD_KMS: KMS could not decrypt"),
        "{stderr}"
    );
    assert!(!stderr.contains(PASSWORD));
}
