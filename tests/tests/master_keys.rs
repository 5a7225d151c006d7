//! The master keys terraform-backend-git users have, end to end: real Terraform applies through
//! `gitstate serve` configured with a PGP fingerprint (the user's gpg, a throwaway key) or a Vault
//! transit key (OpenBao 2.7.2 in dev mode); what lands in git opens with the real `sops -d`, and
//! Terraform reads it back. Without the key the server says which key the state needs, and the
//! Vault token appears in no log line nor answer.

use std::fs;
use std::path::Path;

use gitstate_tests::crypto::sops_decrypt;
use gitstate_tests::keys::{Bao, GnuPg};
use gitstate_tests::*;
use serde_json::Value;

const ROOT_TOKEN: &str = Bao::ROOT_TOKEN;

fn stored(cwd: &Path) -> Vec<u8> {
    git_show(&cwd.join(".gitstate/default.git"), "main", "prod.tfstate")
        .expect("prod.tfstate is in the repository")
}

fn real_sops(bytes: &[u8], env: &[(String, String)]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("state.json");
    fs::write(&file, bytes).unwrap();
    let (ok, stdout, stderr) = sops_decrypt(&file, env);
    assert!(ok, "sops -d failed: {stderr}");
    serde_json::from_slice(&stdout).unwrap()
}

fn apply_and_plan(server: &Gitstate, tfdir: &Path) {
    let tf = Terraform::installed("1.15.5");
    let backend = HttpBackend::new(&server.state_url("default", "prod.tfstate"));
    write_main_tf(tfdir, &backend, 2, "one");
    tf.init(tfdir).expect_code(0, "init");
    tf.apply(tfdir).expect_code(0, "apply");
    tf.plan(tfdir)
        .expect_code(0, "plan reads the sealed state back");
}

#[test]
fn terraform_through_a_pgp_key() {
    let gnupg = GnuPg::new("e2e-pgp");
    let cwd = tempfile::tempdir().unwrap();
    let tfdir = tempfile::tempdir().unwrap();
    let server = Gitstate::start(
        &["--pgp-fingerprint", &gnupg.fingerprint],
        &[("GNUPGHOME", gnupg.home_str())],
        cwd.path(),
    );
    apply_and_plan(&server, tfdir.path());
    let sealed = stored(cwd.path());
    let doc: Value = serde_json::from_slice(&sealed).unwrap();
    assert_eq!(doc["sops"]["pgp"][0]["fp"], gnupg.fingerprint.as_str());
    let opened = real_sops(
        &sealed,
        &[("GNUPGHOME".into(), gnupg.home_str().to_owned())],
    );
    assert_eq!(opened["resources"][0]["type"], "null_resource");
    drop(server);

    // A server whose gpg has no such key answers 500 naming the fingerprint the state needs.
    let other = GnuPg::new("e2e-other");
    let server = Gitstate::start(
        &["--pgp-fingerprint", &other.fingerprint],
        &[("GNUPGHOME", other.home_str())],
        cwd.path(),
    );
    let (status, text) = http(
        "GET",
        &server.state_url("default", "prod.tfstate"),
        None,
        None,
    )
    .unwrap();
    assert_eq!(status, 500, "{text}");
    assert!(
        text.contains(&format!("pgp:{}", gnupg.fingerprint)),
        "the answer names the key the state needs: {text}"
    );
}

#[test]
fn terraform_through_a_vault_transit_key_and_the_token_stays_out_of_logs() {
    let bao = Bao::start();
    bao.create_key("tfstate");
    let cwd = tempfile::tempdir().unwrap();
    let tfdir = tempfile::tempdir().unwrap();
    let uri = bao.uri("tfstate");
    let server = Gitstate::start(
        &[],
        &[
            ("SOPS_VAULT_URIS", uri.as_str()),
            ("VAULT_TOKEN", ROOT_TOKEN),
            ("RUST_LOG", "debug"),
        ],
        cwd.path(),
    );
    apply_and_plan(&server, tfdir.path());
    let sealed = stored(cwd.path());
    let doc: Value = serde_json::from_slice(&sealed).unwrap();
    assert_eq!(
        doc["sops"]["hc_vault"][0]["vault_address"],
        bao.addr.as_str()
    );
    assert_eq!(doc["sops"]["hc_vault"][0]["key_name"], "tfstate");
    let opened = real_sops(
        &sealed,
        &[
            ("VAULT_ADDR".into(), bao.addr.clone()),
            ("VAULT_TOKEN".into(), ROOT_TOKEN.into()),
        ],
    );
    assert_eq!(opened["resources"][0]["type"], "null_resource");
    let log = server.log();
    assert!(
        !log.contains(ROOT_TOKEN),
        "the Vault token is in the log:\n{log}"
    );
    drop(server);

    // Without a token: 500 naming the key and why, and still no token anywhere.
    let home = tempfile::tempdir().unwrap();
    let server = Gitstate::start(
        &["--vault-uri", &uri],
        &[
            ("HOME", home.path().to_str().unwrap()),
            ("RUST_LOG", "debug"),
        ],
        cwd.path(),
    );
    let (status, text) = http(
        "GET",
        &server.state_url("default", "prod.tfstate"),
        None,
        None,
    )
    .unwrap();
    assert_eq!(status, 500, "{text}");
    assert!(text.contains(&format!("hc_vault:{uri}")), "{text}");
    assert!(text.contains("VAULT_TOKEN"), "{text}");
    assert!(!server.log().contains(ROOT_TOKEN));

    // Vault down while reading: 503, the key named.
    let server_up = Gitstate::start(
        &["--vault-uri", &uri],
        &[("VAULT_TOKEN", ROOT_TOKEN)],
        cwd.path(),
    );
    drop(bao);
    let (status, text) = http(
        "GET",
        &server_up.state_url("default", "prod.tfstate"),
        None,
        None,
    )
    .unwrap();
    assert_eq!(status, 503, "{text}");
    assert!(text.contains(&uri), "{text}");
    assert!(!text.contains(ROOT_TOKEN) && !server_up.log().contains(ROOT_TOKEN));
}
