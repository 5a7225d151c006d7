//! HTTPS for the standalone server (`--tls-cert`/`--tls-key`, or `tls { … }` in gitstate.hcl),
//! with real Terraform: a self-signed certificate with `skip_cert_verification`, and a certificate
//! from a private CA given to Terraform as `client_ca_certificate_pem`. Certificates are made
//! with the openssl CLI.

use std::path::{Path, PathBuf};
use std::process::Command;

use gitstate_tests::*;

/// Runs `openssl ARGS` in `dir`, panicking with its output on failure.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

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
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=gitstate test CA",
        ],
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    );
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
        ],
    );
    (
        dir.join("ca.pem"),
        dir.join("server.pem"),
        dir.join("server.key"),
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
