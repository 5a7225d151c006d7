//! A state Terraform could not read back is never committed, in every mode a deployment runs in:
//! the server on its embedded default, team mode, pass-through, encryption at rest, and the
//! query-style (terraform-backend-git) address. Each body of the table gets a 400 whose one
//! sentence names the field, and `git ls-remote` of the remote (or the embedded repository's
//! refs) is exactly as before; the state written before stays what GET answers.
//!
//! The first case is the one of issue 31: `{"version":4,"serial":"one","lineage":5}` was answered
//! 200 and committed, and every later `terraform plan` on that state failed.

use std::path::Path;

use gitstate_tests::crypto::AgeKeyPair;
use gitstate_tests::*;

const USER: &str = "validation-bot";
const PASSWORD: &str = "validation-secret";
const GOOD: &str = r#"{"version":4,"terraform_version":"1.15.5","serial":3,"lineage":"good","outputs":{"o":{"value":"x","type":"string"}},"resources":[]}"#;

/// Bodies Terraform or OpenTofu cannot read, and the field the answer must name.
const UNREADABLE: &[(&str, &str)] = &[
    (r#"{"version":4,"serial":"one","lineage":5}"#, "\"serial\""),
    (r#"{"version":4,"serial":-1,"lineage":"l"}"#, "\"serial\""),
    (r#"{"version":4,"serial":1.5,"lineage":"l"}"#, "\"serial\""),
    (
        r#"{"version":4,"serial":18446744073709551616,"lineage":"l"}"#,
        "\"serial\"",
    ),
    (r#"{"version":4,"serial":4,"lineage":5}"#, "\"lineage\""),
    (
        r#"{"version":4,"serial":4,"lineage":"l","outputs":[]}"#,
        "\"outputs\"",
    ),
    (
        r#"{"version":4,"serial":4,"lineage":"l","resources":{}}"#,
        "\"resources\"",
    ),
    (r#"{"version":5,"serial":4,"lineage":"l"}"#, "\"version\""),
    (r#"{"version":"4","serial":4,"lineage":"l"}"#, "\"version\""),
    (
        r#"{"version":4,"serial":4,"lineage":"l","terraform_version":"banana"}"#,
        "\"terraform_version\"",
    ),
    // Go matches field names without regard to case: "Serial" is the serial Terraform reads.
    (r#"{"version":4,"Serial":"4","lineage":"l"}"#, "\"serial\""),
    (
        r#"{"version":4,"serial":4,"lineage":"l","resources":[5]}"#,
        "\"resources[0]\"",
    ),
    // OpenTofu's envelope whose data is not base64: OpenTofu could not decrypt it.
    (
        r#"{"serial":4,"lineage":"l","meta":{},"encrypted_data":"not base64!","encryption_version":"v0"}"#,
        "\"encrypted_data\"",
    ),
];

/// How a mode's requests are addressed and authenticated.
struct Mode<'a> {
    name: &'a str,
    url: Box<dyn Fn(&str) -> String + 'a>,
    auth: Option<(&'a str, &'a str)>,
    refs: Box<dyn Fn() -> Vec<(String, String)> + 'a>,
}

/// Every unreadable body is refused with the field named and nothing written; the good state
/// written first is still the state.
fn refuses_what_terraform_cannot_read(mode: &Mode) {
    let at = |path: &str| (mode.url)(path);
    let (status, body) = http("POST", &at("v.tfstate"), Some(GOOD), mode.auth).unwrap();
    assert_eq!(status, 200, "{}: a readable state: {body}", mode.name);
    let before = (mode.refs)();
    for (state, field) in UNREADABLE {
        for path in ["v.tfstate", "new.tfstate"] {
            let (status, answer) = http("POST", &at(path), Some(state), mode.auth).unwrap();
            assert_eq!(status, 400, "{}: {state} to {path}: {answer}", mode.name);
            let error: serde_json::Value = serde_json::from_str(&answer)
                .unwrap_or_else(|e| panic!("{}: not a JSON error ({e}): {answer}", mode.name));
            let sentence = error["error"].as_str().unwrap_or_default();
            assert!(
                sentence.contains(field) && !sentence.contains('\n'),
                "{}: {state}: the sentence must name {field}: {sentence}",
                mode.name
            );
            assert_eq!(
                (mode.refs)(),
                before,
                "{}: {state} wrote something",
                mode.name
            );
        }
    }
    let (status, stored) = http("GET", &at("v.tfstate"), None, mode.auth).unwrap();
    assert_eq!(status, 200, "{}", mode.name);
    let stored: serde_json::Value = serde_json::from_str(&stored).unwrap();
    assert_eq!(
        (&stored["serial"], &stored["lineage"]),
        (&serde_json::json!(3), &serde_json::json!("good")),
        "{}",
        mode.name
    );
    let (status, _) = http("GET", &at("new.tfstate"), None, mode.auth).unwrap();
    assert_eq!(status, 204, "{}: no state was created", mode.name);
}

/// The refs of a local bare repository, as `git for-each-ref` lists them.
fn local_refs(git_dir: &Path) -> Vec<(String, String)> {
    git(
        Some(git_dir),
        &["for-each-ref", "--format=%(objectname) %(refname)"],
    )
    .lines()
    .filter_map(|l| l.split_once(' '))
    .map(|(id, name)| (id.to_owned(), name.to_owned()))
    .collect()
}

#[test]
fn the_embedded_default_refuses_unreadable_states() {
    let cwd = tempfile::tempdir().unwrap();
    let server = Gitstate::start(&[], &[], cwd.path());
    let git_dir = cwd.path().join(".gitstate/default.git");
    refuses_what_terraform_cannot_read(&Mode {
        name: "server",
        url: Box::new(|path| server.state_url("default", path)),
        auth: None,
        refs: Box::new(|| local_refs(&git_dir)),
    });
}

#[test]
fn every_remote_mode_refuses_unreadable_states() {
    let repos = tempfile::tempdir().unwrap();
    let git_server = GitHttpServer::start(repos.path(), USER, PASSWORD);
    let credentials = [("GIT_USERNAME", USER), ("GIT_PASSWORD", PASSWORD)];
    let refs_of = |name: &str| {
        let url = git_server.url_with_credentials(name);
        move || ls_remote(&url)
    };

    // Team mode: a caller's token admits it; the deployment's credential writes.
    bare_repo(repos.path(), "team");
    let token = "team-token-31";
    let token_hash = gitstate_tests::crypto::sha256_hex(token);
    let cwd = tempfile::tempdir().unwrap();
    let team = Gitstate::start(
        &[
            "--repository",
            &format!("default={}", git_server.url("team")),
            "--auth-mode",
            "team",
            "--token-hash",
            &format!("sha256:{token_hash}"),
        ],
        &credentials,
        cwd.path(),
    );
    refuses_what_terraform_cannot_read(&Mode {
        name: "team",
        url: Box::new(|path| team.state_url("default", path)),
        auth: Some(("ci", token)),
        refs: Box::new(refs_of("team")),
    });

    // Pass-through: the caller's basic-auth pair is the git credential.
    bare_repo(repos.path(), "passthrough");
    let cwd = tempfile::tempdir().unwrap();
    let passthrough = Gitstate::start(
        &[
            "--repository",
            &format!("default={}", git_server.url("passthrough")),
            "--auth-mode",
            "passthrough",
        ],
        &[],
        cwd.path(),
    );
    refuses_what_terraform_cannot_read(&Mode {
        name: "pass-through",
        url: Box::new(|path| passthrough.state_url("default", path)),
        auth: Some((USER, PASSWORD)),
        refs: Box::new(refs_of("passthrough")),
    });

    // Encrypted at rest (sops with an age key): nothing is sealed, nothing is written.
    bare_repo(repos.path(), "sealed");
    let keys = tempfile::tempdir().unwrap();
    let key = AgeKeyPair::generate();
    let key_file = key.write_key_file(keys.path(), "key");
    let cwd = tempfile::tempdir().unwrap();
    let mut env = credentials.to_vec();
    env.push(("SOPS_AGE_KEY_FILE", key_file.to_str().unwrap()));
    let sealed = Gitstate::start(
        &[
            "--repository",
            &format!("default={}", git_server.url("sealed")),
            "--age-recipient",
            &key.recipient,
        ],
        &env,
        cwd.path(),
    );
    refuses_what_terraform_cannot_read(&Mode {
        name: "encrypted",
        url: Box::new(|path| sealed.state_url("default", path)),
        auth: None,
        refs: Box::new(refs_of("sealed")),
    });

    // The query-style address of terraform-backend-git, for a repository the allow-list admits.
    bare_repo(repos.path(), "adhoc");
    let cwd = tempfile::tempdir().unwrap();
    let allowed = format!("http://127.0.0.1:{}/git/*", git_server.port());
    let adhoc = Gitstate::start(
        &["--allow-with-credential", &allowed],
        &credentials,
        cwd.path(),
    );
    let repository = git_server.url("adhoc");
    refuses_what_terraform_cannot_read(&Mode {
        name: "query-style",
        url: Box::new(|path| {
            let query: String = form_urlencoded::Serializer::new(String::new())
                .append_pair("type", "git")
                .append_pair("repository", &repository)
                .append_pair("ref", "main")
                .append_pair("state", path)
                .finish();
            format!("{}/?{query}", adhoc.base_url())
        }),
        auth: None,
        refs: Box::new(refs_of("adhoc")),
    });
}
