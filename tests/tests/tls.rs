//! HTTPS for the standalone server (`--tls-cert`/`--tls-key`, or `tls { … }` in gitstate.hcl),
//! with real Terraform: a self-signed certificate with `skip_cert_verification`, and a certificate
//! from a private CA given to Terraform as `client_ca_certificate_pem`. Certificates are made
//! with the openssl CLI.

use std::path::{Path, PathBuf};
use std::process::Command;

use gitstate_tests::certs::{issued_by_the_ca, openssl, signed_by_a_ca};
use gitstate_tests::*;

/// A self-signed certificate for 127.0.0.1: (cert, key).
fn self_signed(dir: &Path) -> (PathBuf, PathBuf) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "self.key",
            "-out",
            "self.pem",
            "-days",
            "2",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
    );
    (dir.join("self.pem"), dir.join("self.key"))
}

/// A CA and a server certificate it signed for 127.0.0.1: (ca, cert, key).
fn from_a_ca(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    signed_by_a_ca(
        dir,
        "127.0.0.1",
        "server",
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
}

fn https_state_url(server: &Gitstate) -> String {
    format!(
        "https://127.0.0.1:{}/state/default/tls.tfstate",
        server.port()
    )
}

fn apply_and_plan(tf: &Terraform, backend: &HttpBackend, cwd: &Path) {
    let work = tempfile::tempdir().unwrap();
    write_main_tf(work.path(), backend, 2, "tls");
    tf.init(work.path()).expect_code(0, "init over https");
    tf.apply(work.path()).expect_code(0, "apply over https");
    tf.plan(work.path()).expect_code(0, "plan over https");
    let subjects = git_log_subjects(&cwd.join(".gitstate/default.git"), "main", "tls.tfstate");
    assert!(!subjects.is_empty(), "nothing was committed");
}

#[test]
fn terraform_over_https_with_a_self_signed_certificate() {
    let certs = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(certs.path());
    for version in ["1.0.3", "1.15.5"] {
        let cwd = tempfile::tempdir().unwrap();
        let server = Gitstate::start_tls(
            &[
                "--tls-cert",
                cert.to_str().unwrap(),
                "--tls-key",
                key.to_str().unwrap(),
            ],
            &[],
            cwd.path(),
        );
        let mut backend = HttpBackend::new(&https_state_url(&server));
        backend
            .extra
            .push(("skip_cert_verification".into(), "true".into()));
        apply_and_plan(&Terraform::installed(version), &backend, cwd.path());
        // plain HTTP to the HTTPS port gets no state
        let plain = http(
            "GET",
            &server.state_url("default", "tls.tfstate"),
            None,
            None,
        );
        assert!(!matches!(plain, Ok((200, _))), "{plain:?}");
    }
}

#[test]
fn terraform_over_https_with_a_private_ca_from_the_config_file() {
    let certs = tempfile::tempdir().unwrap();
    let (ca, cert, key) = from_a_ca(certs.path());
    let cwd = tempfile::tempdir().unwrap();
    std::fs::write(
        cwd.path().join("gitstate.hcl"),
        format!(
            "tls {{\n  cert_file = {:?}\n  key_file = {:?}\n}}\n",
            cert.to_str().unwrap(),
            key.to_str().unwrap()
        ),
    )
    .unwrap();
    let server = Gitstate::start_tls(&["--config", "gitstate.hcl"], &[], cwd.path());
    let mut backend = HttpBackend::new(&https_state_url(&server));
    backend.extra.push((
        "client_ca_certificate_pem".into(),
        // a backend block takes no function calls: the PEM itself, as a heredoc
        format!("<<EOT\n{}EOT\n", std::fs::read_to_string(&ca).unwrap()),
    ));
    apply_and_plan(&Terraform::installed("1.15.5"), &backend, cwd.path());

    // without the CA, Terraform refuses the certificate
    let work = tempfile::tempdir().unwrap();
    write_main_tf(
        work.path(),
        &HttpBackend::new(&https_state_url(&server)),
        1,
        "x",
    );
    let out = Terraform::installed("1.15.5").init(work.path());
    assert_ne!(out.code, Some(0));
    assert!(out.combined().contains("certificate"), "{}", out.combined());
}

#[test]
fn bad_tls_files_stop_the_start_with_a_sentence() {
    let cwd = tempfile::tempdir().unwrap();
    let missing = cwd.path().join("missing.pem");
    let out = Command::new(gitstate_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--tls-cert"])
        .arg(&missing)
        .arg("--tls-key")
        .arg(&missing)
        .current_dir(cwd.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("cannot read the TLS certificate"),
        "{stderr}"
    );
}

/// The other direction: gitstate as an HTTPS client of its git server (what every GitHub or GitLab
/// remote is). lighttpd serves `git http-backend` over TLS with a certificate from a private CA;
/// gitstate trusts that CA through `SSL_CERT_FILE` (the system's roots, read once per process)
/// and real Terraform writes through it. Without the CA, the git server is refused with a
/// sentence and nothing is written.
#[test]
fn gitstate_writes_to_an_https_git_server() {
    let certs = tempfile::tempdir().unwrap();
    let (ca, cert, key) = from_a_ca(certs.path());
    let repos = tempfile::tempdir().unwrap();
    let bare = bare_repo(repos.path(), "states");
    let (user, password) = ("tls-bot", "tls-Pa55");
    let git_server = GitHttpServer::start_https(repos.path(), user, password, &cert, &key);
    let url = git_server.url("states");
    assert!(url.starts_with("https://"), "{url}");
    let repository = format!("default={url}");
    let ca_file = ca.to_str().unwrap();

    let cwd = tempfile::tempdir().unwrap();
    let server = Gitstate::start(
        &["--repository", &repository],
        &[
            ("GIT_USERNAME", user),
            ("GIT_PASSWORD", password),
            ("SSL_CERT_FILE", ca_file),
        ],
        cwd.path(),
    );
    let tf = Terraform::installed("1.15.5");
    let work = tempfile::tempdir().unwrap();
    let backend = HttpBackend::new(&server.state_url("default", "over-tls.tfstate"));
    write_main_tf(work.path(), &backend, 2, "tls-remote");
    tf.init(work.path()).expect_code(0, "init");
    let applied = tf.apply(work.path());
    if applied.code != Some(0) {
        eprintln!("--- gitstate log\n{}", server.log());
    }
    applied.expect_code(0, "apply through an https git server");
    tf.plan(work.path()).expect_code(0, "plan");
    let subjects = git_log_subjects(&bare, "main", "over-tls.tfstate");
    assert!(
        subjects
            .iter()
            .all(|s| s.starts_with("Update over-tls.tfstate (serial ")),
        "{subjects:?}"
    );
    assert!(!subjects.is_empty());
    assert!(refs_under(&bare, "refs/heads/locks/").is_empty());

    // A gitstate that does not trust the CA: refused, one sentence, nothing written.
    let untrusting = Gitstate::start(
        &["--repository", &repository],
        &[
            ("GIT_USERNAME", user),
            ("GIT_PASSWORD", password),
            ("SSL_CERT_FILE", cert.to_str().unwrap()), // the server's own certificate is no CA
        ],
        cwd.path(),
    );
    let state = untrusting.state_url("default", "refused.tfstate");
    let (status, body) = http(
        "POST",
        &state,
        Some(r#"{"version":4,"serial":1,"lineage":"x"}"#),
        None,
    )
    .unwrap();
    assert!([502, 503].contains(&status), "{status}: {body}");
    // The answer is one sentence and the request id; the log names the server it failed on.
    let error: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(
        error["error"].as_str().unwrap().contains("git server"),
        "{body}"
    );
    assert!(
        untrusting.logged(&request_id_of(&body), "127.0.0.1"),
        "{body}\n{}",
        untrusting.log()
    );
    assert!(!body.contains(password) && !untrusting.log().contains(password));
    assert!(git_log_subjects(&bare, "main", "refused.tfstate").is_empty());
}

/// A client CA and a client certificate it signed (`extendedKeyUsage=clientAuth`), made in
/// `dir`: (ca, cert, key).
fn client_ca_and_cert(dir: &Path, subject: &str) -> (PathBuf, PathBuf, PathBuf) {
    signed_by_a_ca(
        dir,
        subject,
        "client",
        "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n",
    )
}

/// A PEM file as a backend attribute (a heredoc: a backend block takes no function calls).
fn heredoc(file: &Path) -> String {
    format!("<<EOT\n{}EOT\n", std::fs::read_to_string(file).unwrap())
}

/// mTLS (`--tls-client-ca`, issue 35): Terraform 1.15.5 with `client_certificate_pem` and
/// `client_private_key_pem` from the client CA applies; without a client certificate, or with
/// one from another CA, the TLS handshake fails (the server's alert) and Terraform cannot even
/// read the state.
#[test]
fn terraform_with_a_client_certificate_and_nobody_without_one() {
    let certs = tempfile::tempdir().unwrap();
    let (server_ca, cert, key) = from_a_ca(certs.path());
    let (client_ca, client_cert, client_key) =
        client_ca_and_cert(&certs.path().join("team-a"), "team-a");
    let (_, other_cert, other_key) = client_ca_and_cert(&certs.path().join("other"), "mallory");
    let cwd = tempfile::tempdir().unwrap();
    let server = Gitstate::start_tls(
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
            "--tls-client-ca",
            client_ca.to_str().unwrap(),
        ],
        &[],
        cwd.path(),
    );
    let tf = Terraform::installed("1.15.5");
    let backend = |client: Option<(&Path, &Path)>| {
        let mut backend = HttpBackend::new(&https_state_url(&server));
        backend
            .extra
            .push(("client_ca_certificate_pem".into(), heredoc(&server_ca)));
        if let Some((cert, key)) = client {
            backend
                .extra
                .push(("client_certificate_pem".into(), heredoc(cert)));
            backend
                .extra
                .push(("client_private_key_pem".into(), heredoc(key)));
        }
        backend
    };
    apply_and_plan(&tf, &backend(Some((&client_cert, &client_key))), cwd.path());
    let git_dir = cwd.path().join(".gitstate/default.git");
    let written = git_log_subjects(&git_dir, "main", "tls.tfstate");

    for (what, client) in [
        ("no client certificate", None),
        (
            "a client certificate from another CA",
            Some((other_cert.as_path(), other_key.as_path())),
        ),
    ] {
        let work = tempfile::tempdir().unwrap();
        write_main_tf(work.path(), &backend(client), 1, "x");
        let out = tf.init(work.path());
        assert_ne!(out.code, Some(0), "{what}: init succeeded");
        let text = out.combined();
        // The server's alert, as Go's client reports it (Go sends no certificate the server's
        // list of acceptable CAs does not name, so both cases read "certificate required").
        assert!(text.contains("remote error: tls:"), "{what}: {text}");
    }
    assert_eq!(
        git_log_subjects(&git_dir, "main", "tls.tfstate"),
        written,
        "only the certified client wrote"
    );
    // Each refused handshake is a WARN with the peer and the reason (issue 50), and no key
    // material.
    let log = server.log();
    let failed: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("TLS handshake failed"))
        .collect();
    assert!(!failed.is_empty(), "no handshake failure logged:\n{log}");
    assert!(
        failed
            .iter()
            .all(|l| l.contains("peer=127.0.0.1:") && l.contains("reason=")),
        "{failed:#?}"
    );
    assert!(
        failed
            .iter()
            .any(|l| l.to_lowercase().contains("certificate")),
        "the reason names the certificate: {failed:#?}"
    );
    assert!(!log.contains("PRIVATE KEY"), "key material in the log");
}

/// Client certificates as team callers (`auth { certificate { … } }`, issue 35): with the
/// server requiring client certificates, Terraform 1.15.5 with team A's certificate and no
/// username or password applies to A's folder (its subject maps to the caller `team-a`, limited
/// to `team-a/**`) and gets 403 outside it; team B's certificate from the same CA maps to no
/// caller, so without a token it gets 401, and with the team token it writes as usual.
#[test]
fn a_client_certificate_subject_is_a_team_caller() {
    let certs = tempfile::tempdir().unwrap();
    let (server_ca, cert, key) = from_a_ca(certs.path());
    let clients = certs.path().join("clients");
    let (client_ca, a_cert, a_key) = client_ca_and_cert(&clients, "team-a");
    let client_ext = "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n";
    let (b_cert, b_key) = issued_by_the_ca(&clients, "/CN=team-b/O=acme", "team-b", client_ext);
    let token = "ops-team-token";
    let cwd = tempfile::tempdir().unwrap();
    std::fs::write(
        cwd.path().join("gitstate.hcl"),
        format!(
            "tls {{\n  cert_file = {cert:?}\n  key_file = {key:?}\n  client_ca_file = {client_ca:?}\n}}\nauth {{\n  mode = \"team\"\n  token_hashes = [\"sha256:{}\"]\n  certificate {{\n    subject = \"CN=team-a\"\n    name = \"team-a\"\n    paths = [\"team-a/**\"]\n  }}\n}}\n",
            gitstate_tests::crypto::sha256_hex(token)
        ),
    )
    .unwrap();
    let server = Gitstate::start_tls(&["--config", "gitstate.hcl"], &[], cwd.path());
    let tf = Terraform::installed("1.15.5");
    let backend = |path: &str, client: (&Path, &Path), auth: Option<&str>| {
        let url = format!("https://127.0.0.1:{}/state/default/{path}", server.port());
        let mut backend = HttpBackend::new(&url);
        if let Some(token) = auth {
            backend = backend.with_auth("ops", token);
        }
        for (name, file) in [
            ("client_ca_certificate_pem", server_ca.as_path()),
            ("client_certificate_pem", client.0),
            ("client_private_key_pem", client.1),
        ] {
            backend.extra.push((name.into(), heredoc(file)));
        }
        backend
    };
    let git_dir = cwd.path().join(".gitstate/default.git");

    let applies = |what: &str, backend: &HttpBackend, path: &str| {
        let work = tempfile::tempdir().unwrap();
        write_main_tf(work.path(), backend, 1, "x");
        tf.init(work.path())
            .expect_code(0, &format!("init with {what}"));
        tf.apply(work.path())
            .expect_code(0, &format!("apply with {what}"));
        assert!(!git_log_subjects(&git_dir, "main", path).is_empty());
    };
    applies(
        "team A's certificate",
        &backend("team-a/app.tfstate", (&a_cert, &a_key), None),
        "team-a/app.tfstate",
    );

    for (what, path, client, auth, expected) in [
        (
            "A's certificate outside its folder",
            "team-b/app.tfstate",
            (a_cert.as_path(), a_key.as_path()),
            None,
            "invalid auth",
        ),
        (
            "B's unmapped certificate without a token",
            "team-b/app.tfstate",
            (b_cert.as_path(), b_key.as_path()),
            None,
            "requires auth",
        ),
    ] {
        let work = tempfile::tempdir().unwrap();
        write_main_tf(work.path(), &backend(path, client, auth), 1, "x");
        let out = tf.init(work.path());
        assert_ne!(out.code, Some(0), "{what}: init succeeded");
        assert!(
            out.combined().contains(expected),
            "{what}: {}",
            out.combined()
        );
    }
    assert!(git_log_subjects(&git_dir, "main", "team-b/app.tfstate").is_empty());

    applies(
        "B's certificate and the team token",
        &backend("team-b/app.tfstate", (&b_cert, &b_key), Some(token)),
        "team-b/app.tfstate",
    );
}
