//! Coming from terraform-backend-git (issue 18): a repository laid out exactly as it leaves one
//! keeps working under gitstate, with real Terraform, real sops and real git servers. Its states
//! are sops documents in its all-leaves style (every leaf encrypted, `serial` and `lineage`
//! too; one key group per master-key kind, or a Shamir threshold), legacy `aes` files, and lock
//! branches `locks/<state>` holding `<state>.lock`, on the branch `master`, addressed with its
//! query form (`/?type=git&repository=…&ref=master&state=…`). Needs
//! `scripts/install-test-deps.sh` and a built `gitstate` binary (see gitstate_tests docs).

use std::fs;
use std::path::{Path, PathBuf};

use gitstate_tests::crypto::{
    legacy_aes_vector, sops_decrypt_with_age_key, sops_encrypt_with_config, AgeKeyPair,
};
use gitstate_tests::keys::{Bao, GnuPg};
use gitstate_tests::*;
use serde_json::Value;

/// The LockInfo terraform-backend-git stores: Terraform's, marshalled by Go.
const LEFT_BEHIND: &str = r#"{"ID":"5d8c3f0e-tbg-lock","Operation":"OperationTypeApply","Info":"","Who":"ci@old-runner","Version":"1.11.4","Created":"2026-11-20T09:15:02.123456789Z","Path":""}"#;

/// Pushes the branch `locks/{state}` holding `{state}.lock` = `lock_info` to `repository`, with
/// plain git, as terraform-backend-git does when it takes a lock.
fn leave_a_lock(repository: &Path, state: &str, lock_info: &str) {
    push_root_commit(
        repository,
        &format!("locks/{state}"),
        &[(&format!("{state}.lock"), lock_info.as_bytes())],
        &format!("Lock {state}"),
    );
}

#[test]
fn a_lock_terraform_backend_git_left_behind_is_honoured_and_can_be_forced_open() {
    let server_dir = tempfile::tempdir().expect("tempdir");
    let gitstate = Gitstate::start(&[], &[], server_dir.path());
    let url = gitstate.state_url("default", "prod.tfstate");
    let tf = Terraform::installed("1.15.5");
    let work = tempfile::tempdir().expect("tempdir");
    write_main_tf(work.path(), &HttpBackend::new(&url), 1, "g1");
    tf.init(work.path()).expect_code(0, "init");
    tf.apply(work.path()).expect_code(0, "first apply");

    let repository = server_dir.path().join(".gitstate/default.git");
    leave_a_lock(&repository, "prod.tfstate", LEFT_BEHIND);

    // The API reports the holder as stored.
    let (status, body) =
        http("LOCK", &url, Some(r#"{"ID":"mine","Who":"me"}"#), None).expect("lock");
    assert_eq!((status, body.as_str()), (423, LEFT_BEHIND));

    write_main_tf(work.path(), &HttpBackend::new(&url), 2, "g2");
    let refused = tf.apply(work.path());
    assert_ne!(refused.code, Some(0));
    let text = refused.combined();
    assert!(
        text.contains("Error acquiring the state lock") && text.contains("5d8c3f0e-tbg-lock"),
        "{text}"
    );
    tf.force_unlock(work.path(), "5d8c3f0e-tbg-lock")
        .expect_code(0, "force-unlock of the lock terraform-backend-git left");
    assert_eq!(
        git(Some(&repository), &["for-each-ref", "refs/heads/locks/"]),
        "",
        "the lock branch is gone"
    );
    tf.apply(work.path())
        .expect_code(0, "apply after force-unlock");
}

const PASSPHRASE: &str = "correct horse battery staple";
const SECRET: &str = "tbg-all-leaves-s3cret";
const GIT_USER: &str = "deploy";
const GIT_PASSWORD: &str = "deploy-secret-pw";

/// Team A's configuration: two null resources and a sensitive output holding [`SECRET`].
fn write_config(dir: &Path, backend: &HttpBackend, generation: &str) {
    write_main_tf(dir, backend, 2, generation);
    let mut tf = fs::read_to_string(dir.join("main.tf")).expect("main.tf");
    tf.push_str(&format!(
        "\noutput \"db_password\" {{\n  value     = \"{SECRET}\"\n  sensitive = true\n}}\n"
    ));
    fs::write(dir.join("main.tf"), tf).expect("write main.tf");
}

/// Team A's state as `tf` wrote it for [`write_config`] (generation `g1`), through a scratch
/// gitstate that stores it in plaintext.
fn state_as_terraform_wrote_it(tf: &Terraform) -> Value {
    let scratch_dir = tempfile::tempdir().expect("tempdir");
    let scratch = Gitstate::start(&[], &[], scratch_dir.path());
    let url = scratch.state_url("default", "app.tfstate");
    let work = tempfile::tempdir().expect("tempdir");
    write_config(work.path(), &HttpBackend::new(&url), "g1");
    tf.init(work.path()).expect_code(0, "init (scratch)");
    tf.apply(work.path()).expect_code(0, "apply (scratch)");
    let (status, body) = http("GET", &url, None, None).expect("GET");
    assert_eq!(status, 200, "{body}");
    json(&body)
}

/// The `.sops.yaml` of a terraform-backend-git deployment: one key group per master-key kind it
/// has configured (here two), every leaf encrypted, and a Shamir threshold when it sets
/// `TF_BACKEND_HTTP_SOPS_SHAMIR_THRESHOLD`.
fn sops_rules(groups: &[&AgeKeyPair], threshold: Option<usize>) -> String {
    let mut rules = String::from("creation_rules:\n  - path_regex: .*\n");
    if let Some(t) = threshold {
        rules.push_str(&format!("    shamir_threshold: {t}\n"));
    }
    rules.push_str("    key_groups:\n");
    for key in groups {
        rules.push_str(&format!("      - age: ['{}']\n", key.recipient));
    }
    rules
}

/// Whether `value` is a sops-encrypted leaf.
fn encrypted(value: &Value) -> bool {
    value
        .as_str()
        .is_some_and(|s| s.starts_with("ENC[AES256_GCM,"))
}

/// A bare repository `states.git` in `repos` whose `master` (its HEAD, terraform-backend-git's
/// default ref) holds `files`, committed and pushed with plain git.
fn tbg_repository(repos: &Path, files: &[(&str, &[u8])]) -> PathBuf {
    let repository = bare_repo(repos, "states");
    git(
        Some(&repository),
        &["symbolic-ref", "HEAD", "refs/heads/master"],
    );
    push_root_commit(
        &repository,
        "master",
        files,
        "states written by terraform-backend-git",
    );
    repository
}

/// terraform-backend-git's address for `state` in `repository` on `master`.
fn tbg_address(gitstate: &Gitstate, repository: &str, state: &str) -> String {
    let query: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("type", "git")
        .append_pair("repository", repository)
        .append_pair("ref", "master")
        .append_pair("state", state)
        .finish();
    format!("{}/?{query}", gitstate.base_url())
}

fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

/// The whole switch, as a user makes it: the repository terraform-backend-git left (two
/// all-leaves sops states, one with a Shamir threshold; a legacy aes state; a lock it left
/// behind), gitstate started with that deployment's variables, and the same Terraform
/// configuration with the same address. Terraform sees its state unchanged, the lock is
/// honoured and forced open, the state guard reads the encrypted serial and lineage, the next
/// apply is sealed with the configured key and read by real `sops -d`, and `gitstate migrate`
/// re-seals the legacy file and leaves the sops documents alone.
#[test]
fn a_repository_terraform_backend_git_left_keeps_working_with_real_terraform() {
    let tf = Terraform::installed("1.15.5");
    let dir = tempfile::tempdir().expect("tempdir");

    let app_state = state_as_terraform_wrote_it(&tf);

    // What terraform-backend-git stored: sops all-leaves documents and a legacy aes file.
    let (k1, k2, k3) = (
        AgeKeyPair::generate(),
        AgeKeyPair::generate(),
        AgeKeyPair::generate(),
    );
    let app_doc = sops_encrypt_with_config(&app_state, &sops_rules(&[&k1, &k2], None), &[]);
    let net_state: Value =
        serde_json::from_slice(&legacy_aes_vector("state.tfstate.json")).expect("JSON");
    let net_doc = sops_encrypt_with_config(&net_state, &sops_rules(&[&k1, &k2, &k3], Some(2)), &[]);
    for (name, doc) in [("app", &app_doc), ("net", &net_doc)] {
        let doc: Value = serde_json::from_slice(doc).expect("sops JSON");
        assert!(
            encrypted(&doc["serial"]) && encrypted(&doc["lineage"]) && encrypted(&doc["version"]),
            "{name}: not in the all-leaves style: {doc}"
        );
        assert!(doc["sops"]["key_groups"].is_array(), "{name}: {doc}");
    }
    let repos = dir.path().join("repos");
    fs::create_dir_all(&repos).expect("repos");
    let legacy = legacy_aes_vector("state.tfstate.aes");
    let repository = tbg_repository(
        &repos,
        &[
            ("envs/prod/app.tfstate", &app_doc),
            ("envs/prod/net.tfstate", &net_doc),
            ("envs/old/legacy.tfstate", &legacy),
        ],
    );
    leave_a_lock(&repository, "envs/prod/app.tfstate", LEFT_BEHIND);
    let git_server = GitHttpServer::start(&repos, GIT_USER, GIT_PASSWORD);
    let remote = git_server.url("states");

    // gitstate with that deployment's settings: git credential, sops keys, the aes passphrase.
    let keys = dir.path().join("keys.txt");
    fs::write(
        &keys,
        format!(
            "{}\n{}\n",
            fs::read_to_string(k1.write_key_file(dir.path(), "k1")).expect("k1"),
            fs::read_to_string(k2.write_key_file(dir.path(), "k2")).expect("k2"),
        ),
    )
    .expect("key file");
    let k1_file = dir.path().join("k1.txt");
    let allow = format!("http://127.0.0.1:{}/**", git_server.port());
    let env = [
        ("GIT_USERNAME", GIT_USER),
        ("GIT_PASSWORD", GIT_PASSWORD),
        ("TF_BACKEND_HTTP_ENCRYPTION_PROVIDER", "sops"),
        ("TF_BACKEND_HTTP_ENCRYPTION_PASSPHRASE", PASSPHRASE),
        ("TF_BACKEND_HTTP_SOPS_AGE_RECIPIENTS", k1.recipient.as_str()),
        ("SOPS_AGE_KEY_FILE", keys.to_str().expect("utf-8")),
    ];
    let server_dir = tempfile::tempdir().expect("tempdir");
    let server = Gitstate::start(
        &["--allow-with-credential", &allow],
        &env,
        server_dir.path(),
    );
    let app = tbg_address(&server, &remote, "envs/prod/app.tfstate");
    let net = tbg_address(&server, &remote, "envs/prod/net.tfstate");
    let old = tbg_address(&server, &remote, "envs/old/legacy.tfstate");

    // Every state reads as it was written: two key groups, a 2-of-3 threshold, legacy aes.
    for (address, expected) in [(&app, &app_state), (&net, &net_state)] {
        let (status, body) = http("GET", address, None, None).expect("GET");
        assert_eq!(status, 200, "{address}: {body}\n{}", server.log());
        assert_eq!(&json(&body), expected, "{address}");
    }
    let (status, body) = http("GET", &old, None, None).expect("GET");
    assert_eq!(status, 200, "{body}\n{}", server.log());
    assert_eq!(json(&body), net_state, "the legacy aes file");

    // The lock it left is honoured, named, and forced open.
    let work = tempfile::tempdir().expect("tempdir");
    write_config(work.path(), &HttpBackend::new(&app), "g1");
    tf.init(work.path())
        .expect_code(0, "init on the terraform-backend-git address");
    let refused = tf.plan(work.path());
    assert_eq!(refused.code, Some(1), "{}", refused.combined());
    assert!(
        refused.combined().contains("5d8c3f0e-tbg-lock"),
        "the holder is not named: {}",
        refused.combined()
    );
    tf.force_unlock(work.path(), "5d8c3f0e-tbg-lock")
        .expect_code(0, "force-unlock of the lock terraform-backend-git left");

    // Terraform sees its state unchanged: no changes to plan.
    tf.plan(work.path())
        .expect_code(0, "plan over the all-leaves state (0: no changes)");

    // The state guard reads the encrypted serial and lineage.
    let serial = app_state["serial"].as_u64().expect("serial");
    let lineage = app_state["lineage"].as_str().expect("lineage");
    let mut older = app_state.clone();
    older["serial"] = (serial - 1).into();
    let (status, body) = http("POST", &app, Some(&older.to_string()), None).expect("POST");
    assert_eq!(status, 409, "an older serial: {body}");
    assert!(
        body.contains(&serial.to_string()) && body.contains(&(serial - 1).to_string()),
        "the refusal names both serials: {body}"
    );
    let mut foreign = app_state.clone();
    foreign["lineage"] = "another-lineage".into();
    foreign["serial"] = (serial + 1).into();
    let (status, body) = http("POST", &app, Some(&foreign.to_string()), None).expect("POST");
    assert_eq!(status, 409, "another lineage: {body}");
    assert!(
        body.contains(lineage) && body.contains("another-lineage"),
        "the refusal names both lineages: {body}"
    );
    assert_eq!(
        git_show(&repository, "master", "envs/prod/app.tfstate").as_deref(),
        Some(&app_doc[..]),
        "a refused write changed the stored document"
    );

    // The next apply is sealed with the configured key, on master, and real sops reads it.
    write_config(work.path(), &HttpBackend::new(&app), "g2");
    tf.apply(work.path())
        .expect_code(0, "apply after the switch");
    let stored = git_show(&repository, "master", "envs/prod/app.tfstate").expect("stored");
    assert!(
        !String::from_utf8_lossy(&stored).contains(SECRET),
        "the secret is stored in clear"
    );
    let written = sops_decrypt_with_age_key(&stored, &k1_file);
    assert_eq!(written["lineage"], app_state["lineage"]);
    assert!(written["serial"].as_u64() > Some(serial), "{written}");
    assert_eq!(
        written["outputs"]["db_password"]["value"], SECRET,
        "{written}"
    );
    let (status, body) = http("GET", &app, None, None).expect("GET");
    assert_eq!((status, json(&body)), (200, written));
    assert!(
        refs_under(&repository, "refs/heads/")
            .iter()
            .all(|r| r == "refs/heads/master"),
        "a branch other than master: {:?}",
        refs_under(&repository, "refs/heads/")
    );
    drop(server);

    // `gitstate migrate` re-seals the legacy file, and leaves the sops documents as they are.
    let net_before = git_show(&repository, "master", "envs/prod/net.tfstate");
    let repository_flag = format!("default={remote}");
    let migrated = gitstate_run(
        dir.path(),
        &[
            "migrate",
            "--repository",
            &repository_flag,
            "--ref",
            "master",
        ],
        &env,
    );
    migrated.expect_code(0, "gitstate migrate");
    let resealed = git_show(&repository, "master", "envs/old/legacy.tfstate").expect("stored");
    assert_eq!(sops_decrypt_with_age_key(&resealed, &k1_file), net_state);
    assert_eq!(
        git_show(&repository, "master", "envs/prod/net.tfstate"),
        net_before,
        "migrate rewrote a sops document"
    );
    assert!(
        !migrated.combined().contains(PASSPHRASE) && !migrated.combined().contains(GIT_PASSWORD),
        "a credential in the output: {}",
        migrated.combined()
    );
}

/// Its other master keys: a state it sealed with a PGP key and a Vault transit key configured
/// together (one key group each, so sops needs both), left on `master`, is read by real
/// Terraform through gitstate started with its variables (`TF_BACKEND_HTTP_SOPS_PGP_FP`,
/// `_HC_VAULT_URIS`), with the user's gpg and a real OpenBao; the next apply is sealed for both
/// keys, and real `sops -d` opens it with either one.
#[test]
fn a_state_it_sealed_for_pgp_and_vault_keys_keeps_working_with_real_terraform() {
    let tf = Terraform::installed("1.15.5");
    let gnupg = GnuPg::new("tbg-pgp");
    let bao = Bao::start();
    bao.create_key("tbg");
    let vault_uri = bao.uri("tbg");
    let key_env = [
        ("GNUPGHOME", gnupg.home_str()),
        ("VAULT_ADDR", bao.addr.as_str()),
        ("VAULT_TOKEN", Bao::ROOT_TOKEN),
    ];

    let state = state_as_terraform_wrote_it(&tf);

    // What it stored with both providers configured: two key groups, every leaf encrypted.
    let rules = format!(
        "creation_rules:\n  - path_regex: .*\n    key_groups:\n      - pgp: ['{}']\n      - hc_vault: ['{vault_uri}']\n",
        gnupg.fingerprint
    );
    let doc = sops_encrypt_with_config(&state, &rules, &key_env);
    let parsed: Value = serde_json::from_slice(&doc).expect("sops JSON");
    assert!(encrypted(&parsed["serial"]), "not all leaves: {parsed}");
    assert_eq!(
        parsed["sops"]["key_groups"].as_array().map(Vec::len),
        Some(2)
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let repos = dir.path().join("repos");
    fs::create_dir_all(&repos).expect("repos");
    let repository = tbg_repository(&repos, &[("envs/app.tfstate", &doc)]);
    let git_server = GitHttpServer::start(&repos, GIT_USER, GIT_PASSWORD);
    let remote = git_server.url("states");

    let allow = format!("http://127.0.0.1:{}/**", git_server.port());
    let mut env = vec![
        ("GIT_USERNAME", GIT_USER),
        ("GIT_PASSWORD", GIT_PASSWORD),
        ("TF_BACKEND_HTTP_ENCRYPTION_PROVIDER", "sops"),
        ("TF_BACKEND_HTTP_SOPS_PGP_FP", gnupg.fingerprint.as_str()),
        ("TF_BACKEND_HTTP_SOPS_HC_VAULT_URIS", vault_uri.as_str()),
    ];
    env.extend(key_env);
    let server_dir = tempfile::tempdir().expect("tempdir");
    let server = Gitstate::start(
        &["--allow-with-credential", &allow],
        &env,
        server_dir.path(),
    );
    let address = tbg_address(&server, &remote, "envs/app.tfstate");
    let (status, body) = http("GET", &address, None, None).expect("GET");
    assert_eq!(status, 200, "{body}\n{}", server.log());
    assert_eq!(json(&body), state);

    let work = tempfile::tempdir().expect("tempdir");
    write_config(work.path(), &HttpBackend::new(&address), "g1");
    tf.init(work.path()).expect_code(0, "init on its address");
    tf.plan(work.path())
        .expect_code(0, "plan over its PGP + Vault state (0: no changes)");
    write_config(work.path(), &HttpBackend::new(&address), "g2");
    tf.apply(work.path())
        .expect_code(0, "apply after the switch");

    let stored = git_show(&repository, "master", "envs/app.tfstate").expect("stored");
    assert!(
        !String::from_utf8_lossy(&stored).contains(SECRET),
        "the secret is stored in clear"
    );
    let sealed: Value = serde_json::from_slice(&stored).expect("sops JSON");
    assert_eq!(sealed["sops"]["pgp"][0]["fp"], gnupg.fingerprint.as_str());
    assert!(sealed["sops"]["hc_vault"][0]["enc"].is_string(), "{sealed}");
    // Either key alone opens it with real sops (gitstate wraps for all keys in one group).
    for only in [
        vec![("GNUPGHOME".to_owned(), gnupg.home_str().to_owned())],
        vec![
            ("VAULT_ADDR".to_owned(), bao.addr.clone()),
            ("VAULT_TOKEN".to_owned(), Bao::ROOT_TOKEN.to_owned()),
        ],
    ] {
        let file = dir.path().join("written.json");
        fs::write(&file, &stored).expect("write");
        let (ok, stdout, stderr) = gitstate_tests::crypto::sops_decrypt(&file, &only);
        assert!(ok, "sops -d with {:?} only: {stderr}", only[0].0);
        let opened: Value = serde_json::from_slice(&stdout).expect("JSON");
        assert_eq!(opened["lineage"], state["lineage"]);
        assert_eq!(opened["outputs"]["db_password"]["value"], SECRET);
    }
    assert!(
        !server.log().contains(Bao::ROOT_TOKEN),
        "the Vault token is in the log"
    );
}
