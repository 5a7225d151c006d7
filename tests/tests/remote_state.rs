//! `terraform_remote_state` through gitstate (issue 18, "State safety"): team B's configuration
//! reads team A's outputs with the `http` data source, and A's access rules apply to B's read
//! (team mode: B needs a credential this deployment accepts; pass-through: the git server's rules
//! for A's repository decide). Real Terraform 1.0.3 and 1.15.5 (and one on PATH), real gitstate,
//! real lighttpd + `git http-backend`. Needs `scripts/install-test-deps.sh` and a built `gitstate`.

use std::fs;
use std::path::Path;

use gitstate_tests::crypto::sha256_hex;
use gitstate_tests::*;

const ENDPOINT: &str = "db.team-a.internal:5432";
const ALICE_PASSWORD: &str = "alice-team-a-token";
const BOB_PASSWORD: &str = "bob-team-b-token";

/// Team A's configuration: its state at `backend`, one resource and the output team B reads.
fn write_team_a(dir: &Path, backend: &HttpBackend) {
    write_main_tf(dir, backend, 1, "a1");
    let mut tf = fs::read_to_string(dir.join("main.tf")).expect("main.tf");
    tf.push_str(&format!(
        "\noutput \"endpoint\" {{\n  value = \"{ENDPOINT}\"\n}}\n"
    ));
    fs::write(dir.join("main.tf"), tf).expect("write main.tf");
}

/// Team B's configuration: its own state at `backend`, and A's outputs read from `a_address`
/// with `credential` (none: no `username`/`password` in the data source).
fn write_team_b(
    dir: &Path,
    backend: &HttpBackend,
    a_address: &str,
    credential: Option<(&str, &str)>,
) {
    let mut tf = backend.hcl();
    let auth = credential
        .map(|(user, password)| format!("    username = {user:?}\n    password = {password:?}\n"))
        .unwrap_or_default();
    tf.push_str(&format!(
        "\ndata \"terraform_remote_state\" \"a\" {{\n  backend = \"http\"\n  config = {{\n    address = {a_address:?}\n{auth}  }}\n}}\n\noutput \"a_endpoint\" {{\n  value = data.terraform_remote_state.a.outputs.endpoint\n}}\n"
    ));
    fs::write(dir.join("main.tf"), tf).expect("write main.tf");
}

/// The bytes of every ref of `repository` (to show a read changed nothing).
fn all_refs(repository: &Path) -> String {
    git(
        Some(repository),
        &["for-each-ref", "--format=%(refname) %(objectname)"],
    )
}

#[test]
fn team_b_reads_team_a_outputs_with_a_credential_team_mode_accepts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let alice = format!("alice:sha256:{}", sha256_hex(ALICE_PASSWORD));
    let bob = format!("bob:sha256:{}", sha256_hex(BOB_PASSWORD));
    let server = Gitstate::start(
        &["--auth-mode", "team", "--user", &alice, "--user", &bob],
        &[],
        dir.path(),
    );
    let repository = dir.path().join(".gitstate/default.git");
    let a_address = server.state_url("default", "team-a/app.tfstate");
    let b_address = server.state_url("default", "team-b/app.tfstate");

    let a = tempfile::tempdir().expect("tempdir");
    let tf_a = Terraform::installed("1.15.5");
    write_team_a(
        a.path(),
        &HttpBackend::new(&a_address).with_auth("alice", ALICE_PASSWORD),
    );
    tf_a.init(a.path()).expect_code(0, "team A init");
    tf_a.apply(a.path()).expect_code(0, "team A apply");

    for tf in Terraform::all() {
        let version = tf.reported_version().unwrap_or_default();
        let b = tempfile::tempdir().expect("tempdir");
        let b_backend = HttpBackend::new(&b_address).with_auth("bob", BOB_PASSWORD);

        // Without a credential, or with a wrong one, A's state is not read.
        for credential in [None, Some(("bob", "not-bobs-password"))] {
            write_team_b(b.path(), &b_backend, &a_address, credential);
            tf.init(b.path()).expect_code(0, "team B init");
            let before = all_refs(&repository);
            let refused = tf.plan(b.path());
            assert_eq!(
                refused.code,
                Some(1),
                "{version} {credential:?}: {}",
                refused.combined()
            );
            let text = refused.combined();
            assert!(
                text.contains("requires auth") || text.contains("401"),
                "{version} {credential:?}: the refusal does not say why: {text}"
            );
            assert!(
                !text.contains(ENDPOINT),
                "{version}: A's output leaked: {text}"
            );
            assert_eq!(all_refs(&repository), before, "a refused read wrote");
        }

        // With B's own credential, B reads A's output; the read takes no lock and writes
        // nothing of A's.
        write_team_b(
            b.path(),
            &b_backend,
            &a_address,
            Some(("bob", BOB_PASSWORD)),
        );
        let a_tip = git_log_subjects(&repository, "main", "team-a/app.tfstate");
        tf.apply(b.path()).expect_code(0, "team B apply");
        let out = tf.run(b.path(), &["output", "-raw", "a_endpoint"]);
        out.expect_code(0, "terraform output");
        assert_eq!(out.stdout.trim(), ENDPOINT, "{version}");
        assert_eq!(
            git_log_subjects(&repository, "main", "team-a/app.tfstate"),
            a_tip,
            "{version}: B's read wrote A's state"
        );
        assert!(
            refs_under(&repository, "refs/heads/locks/").is_empty(),
            "{version}: a lock was left"
        );
    }
}

/// Scoped team tokens (issue 35): B reads A's outputs with an outputs-only token limited to
/// A's folder; that token gets A's state without its resources (and says so), cannot write or
/// lock it, and gets 403 outside its folder. B's own token, limited to B's folder, cannot read A.
#[test]
fn an_outputs_only_token_reads_team_a_outputs_and_nothing_more() {
    const A_TOKEN: &str = "team-a-full-token";
    const B_TOKEN: &str = "team-b-own-folder-token";
    const READER: &str = "team-b-reads-a-outputs-token";
    const A_SECRET: &str = "a-resource-secret-7f3";
    let dir = tempfile::tempdir().expect("tempdir");
    let a_hash = format!("sha256:{}", sha256_hex(A_TOKEN));
    let b_hash = format!("sha256:{};paths=team-b/**", sha256_hex(B_TOKEN));
    // A comma inside one flag's paths (clap splits at it; the server joins the pieces again).
    let reader_hash = format!(
        "sha256:{};access=outputs-only;paths=team-a/**,shared/*",
        sha256_hex(READER)
    );
    let server = Gitstate::start(
        &[
            "--auth-mode",
            "team",
            "--token-hash",
            &a_hash,
            "--token-hash",
            &b_hash,
            "--token-hash",
            &reader_hash,
        ],
        &[],
        dir.path(),
    );
    let repository = dir.path().join(".gitstate/default.git");
    let a_address = server.state_url("default", "team-a/app.tfstate");
    let b_address = server.state_url("default", "team-b/app.tfstate");
    let tf = Terraform::installed("1.15.5");

    let a = tempfile::tempdir().expect("tempdir");
    write_main_tf(
        a.path(),
        &HttpBackend::new(&a_address).with_auth("team-a", A_TOKEN),
        1,
        A_SECRET,
    );
    let mut tf_a = fs::read_to_string(a.path().join("main.tf")).expect("main.tf");
    tf_a.push_str(&format!(
        "\noutput \"endpoint\" {{\n  value = \"{ENDPOINT}\"\n}}\n"
    ));
    fs::write(a.path().join("main.tf"), tf_a).expect("write main.tf");
    tf.init(a.path()).expect_code(0, "team A init");
    tf.apply(a.path()).expect_code(0, "team A apply");
    let a_history = git_log_subjects(&repository, "main", "team-a/app.tfstate");

    let b = tempfile::tempdir().expect("tempdir");
    let b_backend = HttpBackend::new(&b_address).with_auth("team-b", B_TOKEN);
    // B's own token is limited to B's folder: A's state is a 403 to it.
    write_team_b(b.path(), &b_backend, &a_address, Some(("team-b", B_TOKEN)));
    tf.init(b.path()).expect_code(0, "team B init");
    let refused = tf.plan(b.path());
    assert_eq!(refused.code, Some(1), "{}", refused.combined());
    // Terraform's words for a 403 ("requires auth" is its 401).
    assert!(
        refused.combined().contains("invalid auth"),
        "the refusal does not say why: {}",
        refused.combined()
    );
    let (status, sentence) = http("GET", &a_address, None, Some(("team-b", B_TOKEN))).expect("get");
    assert_eq!(status, 403, "{sentence}");
    assert!(
        sentence.contains("limited to read-write on team-b/**"),
        "{sentence}"
    );

    write_team_b(b.path(), &b_backend, &a_address, Some(("team-b", READER)));
    tf.apply(b.path()).expect_code(0, "team B apply");
    let out = tf.run(b.path(), &["output", "-raw", "a_endpoint"]);
    out.expect_code(0, "terraform output");
    assert_eq!(out.stdout.trim(), ENDPOINT);

    // What the reader's token gets: the outputs, no resource, and the header that says so.
    let reader = Some(("team-b", READER));
    let (status, headers, body) = authed_request_with_headers(
        "GET",
        &a_address,
        None,
        reader,
        &["x-gitstate-outputs-only"],
    );
    let text = String::from_utf8_lossy(&body);
    assert_eq!(status, 200, "{text}");
    assert_eq!(headers[0].as_deref(), Some("true"));
    assert!(
        !text.contains(A_SECRET),
        "A's resources reached the reader: {text}"
    );
    let json: serde_json::Value = serde_json::from_slice(&body).expect("a state");
    assert_eq!(json["resources"], serde_json::json!([]));
    assert_eq!(json["outputs"]["endpoint"]["value"], ENDPOINT);
    // The full token reads A's resources (the secret is really there to be left out).
    let (_, full) = http("GET", &a_address, None, Some(("team-a", A_TOKEN))).expect("get");
    assert!(full.contains(A_SECRET), "{full}");

    let refs_before = all_refs(&repository);
    let state = json.to_string();
    for (method, url, body) in [
        ("POST", a_address.clone(), Some(state.as_str())),
        ("LOCK", a_address.clone(), Some(r#"{"ID":"x","Who":"b"}"#)),
        ("DELETE", a_address.clone(), None),
        (
            "GET",
            server.state_url("default", "team-c/app.tfstate"),
            None,
        ),
        (
            "GET",
            format!("{}/_/states/default", server.base_url()),
            None,
        ),
    ] {
        let (status, sentence) = http(method, &url, body, reader).expect("request");
        assert_eq!(status, 403, "{method} {url}: {sentence}");
        assert!(sentence.contains("outputs-only"), "{sentence}");
    }
    assert_eq!(
        all_refs(&repository),
        refs_before,
        "a refused request wrote"
    );
    assert_eq!(
        git_log_subjects(&repository, "main", "team-a/app.tfstate"),
        a_history,
        "B's read wrote A's state"
    );
}

#[test]
fn in_pass_through_mode_the_git_servers_rules_decide_b_s_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repos = dir.path().join("repos");
    fs::create_dir_all(&repos).expect("repos");
    let repository = bare_repo(&repos, "states");
    let git_server = GitHttpServer::start(&repos, "deploy", "git-server-pw");
    let spec = format!("default={}", git_server.url("states"));
    let server = Gitstate::start(
        &["--repository", &spec, "--auth-mode", "passthrough"],
        &[],
        dir.path(),
    );
    let a_address = server.state_url("default", "team-a/app.tfstate");
    let b_address = server.state_url("default", "team-b/app.tfstate");
    let tf = Terraform::installed("1.15.5");

    let a = tempfile::tempdir().expect("tempdir");
    write_team_a(
        a.path(),
        &HttpBackend::new(&a_address).with_auth("deploy", "git-server-pw"),
    );
    tf.init(a.path()).expect_code(0, "team A init");
    tf.apply(a.path()).expect_code(0, "team A apply");

    let b = tempfile::tempdir().expect("tempdir");
    let b_backend = HttpBackend::new(&b_address).with_auth("deploy", "git-server-pw");
    write_team_b(
        b.path(),
        &b_backend,
        &a_address,
        Some(("deploy", "a-password-the-git-server-refuses")),
    );
    tf.init(b.path()).expect_code(0, "team B init");
    let refused = tf.plan(b.path());
    assert_eq!(refused.code, Some(1), "{}", refused.combined());
    let text = refused.combined();
    assert!(
        text.contains("requires auth") || text.contains("401"),
        "the refusal does not say why: {text}"
    );
    assert!(!text.contains(ENDPOINT), "A's output leaked: {text}");

    write_team_b(
        b.path(),
        &b_backend,
        &a_address,
        Some(("deploy", "git-server-pw")),
    );
    tf.apply(b.path()).expect_code(0, "team B apply");
    let out = tf.run(b.path(), &["output", "-raw", "a_endpoint"]);
    out.expect_code(0, "terraform output");
    assert_eq!(out.stdout.trim(), ENDPOINT);
    assert_eq!(
        git_log_subjects(&repository, "main", "team-a/app.tfstate").len(),
        1,
        "B's read wrote A's state"
    );
}
