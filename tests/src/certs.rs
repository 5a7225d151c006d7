//! Certificates for the tests, made by `openssl`: a CA and the certificates it signs.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `openssl ARGS` in `dir`; panics with its error output when it fails.
pub fn openssl(dir: &Path, args: &[&str]) {
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

/// A CA (`ca.pem`, `ca.key`) in `dir`, and a certificate it signed for `subject` with the
/// extensions `ext` (`{name}.pem`, `{name}.key`): (ca, cert, key).
pub fn signed_by_a_ca(
    dir: &Path,
    subject: &str,
    name: &str,
    ext: &str,
) -> (PathBuf, PathBuf, PathBuf) {
    std::fs::create_dir_all(dir).unwrap();
    let ca_subject = format!("/CN={subject} CA");
    let req = ["req", "-newkey", "rsa:2048", "-nodes", "-keyout"];
    openssl(
        dir,
        &[
            &req[..],
            &[
                "ca.key",
                "-x509",
                "-out",
                "ca.pem",
                "-days",
                "2",
                "-subj",
                &ca_subject,
            ],
        ]
        .concat(),
    );
    let (cert, key) = issued_by_the_ca(dir, &format!("/CN={subject}"), name, ext);
    (dir.join("ca.pem"), cert, key)
}

/// A certificate for `subj` (`/CN=…/O=…`) signed by the CA in `dir` (`ca.pem`, `ca.key`), with
/// the extensions `ext`: (`{name}.pem`, `{name}.key`).
pub fn issued_by_the_ca(dir: &Path, subj: &str, name: &str, ext: &str) -> (PathBuf, PathBuf) {
    let (key, csr, pem) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.pem"),
    );
    let req = ["req", "-newkey", "rsa:2048", "-nodes", "-keyout"];
    openssl(
        dir,
        &[&req[..], &[&key, "-out", &csr, "-subj", subj]].concat(),
    );
    std::fs::write(dir.join("ext.cnf"), ext).unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
        ],
    );
    (dir.join(pem), dir.join(key))
}
