//! Encryption at rest (DESIGN §5) through the real server: what lands in git is a sops v3 JSON
//! document that the real `sops` 3.11 binary decrypts (age keys, and AWS KMS keys on moto), that
//! gitstate serves back value for value, whose structure-mode diffs show no secret, whose keys
//! rotate with real Terraform, and whose failures (KMS down, tampered file, foreign key) are
//! answered honestly.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gitstate_tests::crypto::{sops_bin, sops_decrypt, AgeKeyPair, MotoServer};
use gitstate_tests::*;
use serde_json::{json, Value};

const SECRET: &str = "hunter2-s3cr3t-value";
const SECRET_2: &str = "rotated-p4ssw0rd-value";

/// A Terraform v4 state with the values a codec gets wrong first: integers beyond 2^53 (exact),
/// i64 limits, floats in Go's shortest form, unicode, HTML-escaped characters, "" and null.
fn state(serial: u64, secret: &str) -> Value {
    json!({
        "version": 4,
        "terraform_version": "1.15.5",
        "serial": serial,
        "lineage": "5d3b8f0e-lineage",
        "outputs": {
            "db_password": {"value": secret, "type": "string", "sensitive": true},
            "numbers": {"value": {
                "beyond_2_53": 9007199254740993u64,
                "i64_max": i64::MAX,
                "i64_min": i64::MIN,
                "tenth": 0.1,
                "tiny": 1e-7,
                "huge": 1.5e300,
                "negative": -2.5
            }, "type": ["object", {
                "beyond_2_53": "number", "i64_max": "number", "i64_min": "number",
                "tenth": "number", "tiny": "number", "huge": "number", "negative": "number"
            }]}
        },
        "resources": [{
            "mode": "managed",
            "type": "aws_db_instance",
            "name": "main",
            "provider": "provider[\"registry.terraform.io/hashicorp/aws\"]",
            "instances": [{
                "schema_version": 1,
                "attributes": {
                    "id": "db-7f3a",
                    "password": secret,
                    "unicode": "žluťoučký kůň 🐎 日本語",
                    "html": "<script>alert('&amp;')</script>",
                    "empty": "",
                    "nothing": null,
                    "flag": true,
                    "list": [1, "two", {"three": 3.25}]
                },
                "sensitive_attributes": [],
                "private": "eyJzY2hlbWFfdmVyc2lvbiI6IjEifQ=="
            }]
        }],
        "check_results": null
    })
}

fn post(server: &Gitstate, path: &str, body: &str) {
    let (status, text) =
        http("POST", &server.state_url("default", path), Some(body), None).unwrap();
    assert_eq!(status, 200, "POST {path}: {text}\n{}", server.log());
}

fn get_json(server: &Gitstate, path: &str) -> Value {
    let (status, text) = http("GET", &server.state_url("default", path), None, None).unwrap();
    assert_eq!(status, 200, "GET {path}: {text}\n{}", server.log());
    serde_json::from_str(&text).unwrap()
}

fn embedded_git_dir(cwd: &Path) -> PathBuf {
    cwd.join(".gitstate/default.git")
}

fn stored(cwd: &Path, rev: &str, path: &str) -> Vec<u8> {
    git_show(&embedded_git_dir(cwd), rev, path)
        .unwrap_or_else(|| panic!("{rev}:{path} is not in the repository"))
}

fn stored_json(cwd: &Path, rev: &str, path: &str) -> Value {
    serde_json::from_slice(&stored(cwd, rev, path)).unwrap()
}

fn commits_touching(cwd: &Path, path: &str) -> usize {
    git_log_subjects(&embedded_git_dir(cwd), "main", path).len()
}

/// Commits `content` as `path` on main of the embedded repository, as a person with plain git
/// would (clone, commit, push).
fn commit_file(cwd: &Path, path: &str, content: &[u8]) {
    let work = tempfile::tempdir().unwrap();
    let url = format!("file://{}", embedded_git_dir(cwd).display());
    git(
        None,
        &["clone", "--quiet", &url, work.path().to_str().unwrap()],
    );
    fs::write(work.path().join(path), content).unwrap();
    git(Some(work.path()), &["add", path]);
    git(
        Some(work.path()),
        &["commit", "--quiet", "-m", &format!("hand edit of {path}")],
    );
    git(Some(work.path()), &["push", "--quiet", "origin", "main"]);
}

/// Real `sops -d` of `bytes`, parsed.
fn real_sops_decrypt(bytes: &[u8], env: &[(String, String)]) -> Result<Value, String> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("state.json");
    fs::write(&file, bytes).unwrap();
    let (ok, stdout, stderr) = sops_decrypt(&file, env);
    if ok {
        Ok(serde_json::from_slice(&stdout).unwrap())
    } else {
        Err(stderr)
    }
}

fn age_env(key_file: &Path) -> Vec<(String, String)> {
    vec![(
        "SOPS_AGE_KEY_FILE".into(),
        key_file.to_str().unwrap().to_owned(),
    )]
}

fn refs(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

#[test]
fn age_structure_mode_is_read_by_real_sops_and_diffs_show_no_secret() {
    let cwd = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let key = AgeKeyPair::generate();
    let key_file = key.write_key_file(keys.path(), "key");
    let mut env = age_env(&key_file);
    env.push(("SOPS_AGE_RECIPIENTS".into(), key.recipient.clone()));
    let server = Gitstate::start(&["--encryption-mode", "structure"], &refs(&env), cwd.path());

    let v1 = state(1, SECRET);
    post(&server, "app/prod.tfstate", &v1.to_string());
    let raw = stored(cwd.path(), "main", "app/prod.tfstate");
    let text = String::from_utf8_lossy(&raw);
    assert!(
        !text.contains(SECRET),
        "the secret is stored in clear:\n{text}"
    );
    let doc: Value = serde_json::from_slice(&raw).unwrap();
    assert_eq!(doc["sops"]["age"][0]["recipient"], key.recipient);
    // structure stays readable
    assert_eq!(doc["serial"], 1);
    assert_eq!(doc["lineage"], "5d3b8f0e-lineage");
    assert_eq!(doc["resources"][0]["type"], "aws_db_instance");
    assert_eq!(doc["resources"][0]["name"], "main");
    assert_eq!(doc["outputs"]["db_password"]["type"], "string");
    assert!(doc["resources"][0]["instances"][0]["attributes"]["id"]
        .as_str()
        .unwrap()
        .starts_with("ENC[AES256_GCM,"));

    // real sops and gitstate both give back the POSTed value, value for value
    assert_eq!(real_sops_decrypt(&raw, &age_env(&key_file)).unwrap(), v1);
    assert_eq!(get_json(&server, "app/prod.tfstate"), v1);

    // a replay (Terraform retrying) makes no commit; it is recognised from gitstate's keyed
    // digest in the metadata, without decrypting the stored version
    assert!(doc["sops"]["gitstate_plaintext_hmac"]
        .as_str()
        .is_some_and(|d| d.starts_with("hmac-sha256:")));
    post(&server, "app/prod.tfstate", &v1.to_string());
    assert_eq!(commits_touching(cwd.path(), "app/prod.tfstate"), 1);
    // a change of nothing but a key name is a change (sops' MAC covers values, not keys); as
    // Terraform does, each change comes with the next serial (the state guard refuses an equal
    // serial with other content)
    let renamed = state(2, SECRET)
        .to_string()
        .replace("\"unicode\"", "\"unicode_renamed\"");
    post(&server, "app/prod.tfstate", &renamed);
    assert_eq!(commits_touching(cwd.path(), "app/prod.tfstate"), 2);
    post(&server, "app/prod.tfstate", &state(3, SECRET).to_string());
    assert_eq!(commits_touching(cwd.path(), "app/prod.tfstate"), 3);

    // the next version: a fresh data key, wrapped anew (nothing of the stored version is
    // reused, see every_write_gets_a_fresh_data_key_and_a_planted_one_is_never_used)
    let mut v2 = state(4, SECRET_2);
    v2["resources"][0]["instances"][0]["attributes"]["id"] = json!("db-8b4c");
    post(&server, "app/prod.tfstate", &v2.to_string());
    let doc2 = stored_json(cwd.path(), "main", "app/prod.tfstate");
    let doc = stored_json(cwd.path(), "main~1", "app/prod.tfstate");
    assert_ne!(
        doc2["sops"]["age"], doc["sops"]["age"],
        "the data key was reused"
    );
    assert_eq!(
        real_sops_decrypt(
            &stored(cwd.path(), "main", "app/prod.tfstate"),
            &age_env(&key_file)
        )
        .unwrap(),
        v2
    );

    // git diff shows which resource changed and no secret
    let diff = git(
        None,
        &[
            &format!("--git-dir={}", embedded_git_dir(cwd.path()).display()),
            "diff",
            "main~1",
            "main",
            "--",
            "app/prod.tfstate",
        ],
    );
    assert!(
        diff.contains("-\t\"serial\": 3,") && diff.contains("+\t\"serial\": 4,"),
        "{diff}"
    );
    assert!(diff.contains("\"type\": \"aws_db_instance\""), "{diff}");
    for secret in [SECRET, SECRET_2, "db-7f3a", "db-8b4c"] {
        assert!(!diff.contains(secret), "the diff shows {secret}:\n{diff}");
    }
}

#[test]
fn kms_on_moto_is_read_by_real_sops_and_an_outage_is_a_503() {
    let mut moto = MotoServer::start();
    let arn = moto.create_kms_key();
    let cwd = tempfile::tempdir().unwrap();
    let mut env = moto.aws_env();
    env.push(("SOPS_KMS_ARN".into(), arn.clone()));
    env.push(("GITSTATE_KMS_CONTEXT".into(), "team=payments".into()));
    let server = Gitstate::start(&["--encryption-mode", "all"], &refs(&env), cwd.path());

    let v1 = state(1, SECRET);
    post(&server, "prod.tfstate", &v1.to_string());
    let raw = stored(cwd.path(), "main", "prod.tfstate");
    let text = String::from_utf8_lossy(&raw);
    for clear in [SECRET, "aws_db_instance", "5d3b8f0e-lineage"] {
        assert!(!text.contains(clear), "mode all stored {clear} in clear");
    }
    let doc: Value = serde_json::from_slice(&raw).unwrap();
    let entry = &doc["sops"]["kms"][0];
    assert_eq!(entry["arn"], arn.as_str());
    // the configured context, and the place the document is bound to
    assert_eq!(
        entry["context"],
        json!({"team": "payments", "gitstate_repository": "default", "gitstate_path": "prod.tfstate"})
    );
    assert!(entry["created_at"]
        .as_str()
        .is_some_and(|s| s.ends_with('Z')));

    // real sops (its own AWS SDK, same emulator) opens it, value for value
    assert_eq!(real_sops_decrypt(&raw, &moto.aws_env()).unwrap(), v1);
    assert_eq!(get_json(&server, "prod.tfstate"), v1);

    // every write wraps a fresh data key: one KMS Encrypt, a different blob
    let v2 = state(2, SECRET_2);
    post(&server, "prod.tfstate", &v2.to_string());
    let doc2 = stored_json(cwd.path(), "main", "prod.tfstate");
    assert_ne!(doc2["sops"]["kms"][0]["enc"], doc["sops"]["kms"][0]["enc"]);
    assert_eq!(doc2["sops"]["kms"][0]["context"], entry["context"]);
    assert_eq!(
        real_sops_decrypt(&stored(cwd.path(), "main", "prod.tfstate"), &moto.aws_env()).unwrap(),
        v2
    );

    // a file real sops wrote (KMS, with context) is served by gitstate
    let plain_dir = tempfile::tempdir().unwrap();
    let plain = plain_dir.path().join("plain.json");
    let v3 = state(3, "written-by-real-sops");
    fs::write(&plain, v3.to_string()).unwrap();
    let out = Command::new(sops_bin())
        .env_clear()
        .env("HOME", std::env::var_os("HOME").unwrap_or_default())
        .envs(moto.aws_env())
        .args([
            "--disable-version-check",
            "encrypt",
            "--kms",
            &arn,
            "--encryption-context",
            "team:payments",
            "--input-type",
            "json",
            "--output-type",
            "json",
        ])
        .arg(&plain)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "sops encrypt: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    commit_file(cwd.path(), "by-sops.tfstate", &out.stdout);
    // sops 3.11 reads JSON numbers as float64, so it rounds integers beyond 2^53 when it encrypts;
    // gitstate must serve exactly what real `sops -d` gives for that file.
    let served = get_json(&server, "by-sops.tfstate");
    assert_eq!(
        served,
        real_sops_decrypt(&out.stdout, &moto.aws_env()).unwrap()
    );
    assert_eq!(
        served["outputs"]["db_password"],
        v3["outputs"]["db_password"]
    );
    assert_eq!(served["resources"], v3["resources"]);

    // KMS goes away. A second server (a cold container: no data key in memory) answers 503 with
    // Retry-After and names the key; the warm one keeps serving from its memory.
    let cold = Gitstate::start(&["--encryption-mode", "all"], &refs(&env), cwd.path());
    moto.stop();
    let client = reqwest::blocking::Client::builder()
        .no_proxy()
        .build()
        .unwrap();
    let started = Instant::now();
    let resp = client
        .get(cold.state_url("default", "prod.tfstate"))
        .send()
        .unwrap();
    let elapsed = started.elapsed();
    assert_eq!(resp.status().as_u16(), 503, "{}", cold.log());
    assert!(resp.headers().get("retry-after").is_some());
    let body = resp.text().unwrap();
    assert!(body.contains("kms") && body.contains(&arn), "{body}");
    assert!(
        elapsed < Duration::from_secs(30),
        "the outage took {elapsed:?} to report"
    );
    let before = commits_touching(cwd.path(), "prod.tfstate");
    let (status, text) = http(
        "POST",
        &cold.state_url("default", "prod.tfstate"),
        Some(&state(4, "never-stored").to_string()),
        None,
    )
    .unwrap();
    assert_eq!(status, 503, "{text}");
    assert_eq!(
        commits_touching(cwd.path(), "prod.tfstate"),
        before,
        "a failed write committed"
    );
    assert_eq!(
        get_json(&server, "prod.tfstate"),
        v2,
        "the warm server lost its data key"
    );
}

/// Rotation with real Terraform: version 1 is wrapped for key A; the operator switches writing to
/// key B and keeps A only for reading; Terraform reads v1 and writes v2, which is wrapped for B
/// alone (A can no longer open it); finally A is dropped and Terraform still plans cleanly.
#[test]
fn key_rotation_with_real_terraform() {
    let tf = Terraform::installed("1.15.5");
    let cwd = tempfile::tempdir().unwrap();
    let tfdir = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let (a, b) = (AgeKeyPair::generate(), AgeKeyPair::generate());
    let a_file = a.write_key_file(keys.path(), "a");
    let b_file = b.write_key_file(keys.path(), "b");
    let both = keys.path().join("both.txt");
    fs::write(&both, format!("{}\n{}\n", a.identity, b.identity)).unwrap();
    let start = |recipient: &str, identities: &Path| {
        Gitstate::start(
            &[
                "--encryption-mode",
                "structure",
                "--age-recipient",
                recipient,
            ],
            &[("SOPS_AGE_KEY_FILE", identities.to_str().unwrap())],
            cwd.path(),
        )
    };
    let configure = |server: &Gitstate, generation: &str| {
        let backend = HttpBackend::new(&server.state_url("default", "prod.tfstate"));
        write_main_tf(tfdir.path(), &backend, 2, generation);
    };

    let server = start(&a.recipient, &a_file);
    configure(&server, "one");
    tf.init(tfdir.path()).expect_code(0, "init");
    tf.apply(tfdir.path()).expect_code(0, "apply with key A");
    let v1 = stored(cwd.path(), "main", "prod.tfstate");
    assert!(real_sops_decrypt(&v1, &age_env(&a_file)).is_ok());
    drop(server);

    let server = start(&b.recipient, &both);
    configure(&server, "one");
    tf.run(
        tfdir.path(),
        &["init", "-reconfigure", "-input=false", "-no-color"],
    )
    .expect_code(0, "init on the rotated server");
    tf.plan(tfdir.path())
        .expect_code(0, "plan reads v1 through the fallback key A");
    configure(&server, "two");
    tf.apply(tfdir.path()).expect_code(0, "apply writes v2");
    let v2 = stored(cwd.path(), "main", "prod.tfstate");
    let doc: Value = serde_json::from_slice(&v2).unwrap();
    let recipients: Vec<&str> = doc["sops"]["age"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["recipient"].as_str().unwrap())
        .collect();
    assert_eq!(
        recipients,
        [b.recipient.as_str()],
        "v2 must be wrapped for B only"
    );
    let refused = real_sops_decrypt(&v2, &age_env(&a_file));
    assert!(
        refused.is_err(),
        "the removed key A still opens the new version"
    );
    let opened = real_sops_decrypt(&v2, &age_env(&b_file)).unwrap();
    assert_eq!(opened["resources"][0]["type"], "null_resource");
    // history stays readable with the key it was written for
    assert!(real_sops_decrypt(
        &stored(cwd.path(), "main~1", "prod.tfstate"),
        &age_env(&a_file)
    )
    .is_ok());
    drop(server);

    let server = start(&b.recipient, &b_file);
    configure(&server, "two");
    tf.run(
        tfdir.path(),
        &["init", "-reconfigure", "-input=false", "-no-color"],
    )
    .expect_code(0, "init with key B only");
    tf.plan(tfdir.path()).expect_code(0, "plan with key B only");
    assert!(refs_under(&embedded_git_dir(cwd.path()), "refs/heads/locks").is_empty());
}

#[test]
fn enforced_encryption_without_a_key_refuses_to_start() {
    let cwd = tempfile::tempdir().unwrap();
    fs::write(
        cwd.path().join("gitstate.hcl"),
        "encryption {\n  enforced = true\n}\n",
    )
    .unwrap();
    for args in [
        vec!["--encryption-enforced"],
        vec!["--config", "gitstate.hcl"],
    ] {
        let mut cmd = Command::new(gitstate_bin());
        cmd.arg("serve")
            .args(["--listen", "127.0.0.1:0"])
            .args(&args)
            .current_dir(cwd.path())
            .stdin(Stdio::null());
        for (key, _) in std::env::vars_os() {
            let k = key.to_string_lossy();
            if k.starts_with("GITSTATE_") || k.starts_with("SOPS_") {
                cmd.env_remove(&key);
            }
        }
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: started without a key");
        assert!(
            stderr.contains("encryption is enforced but no key is configured"),
            "{stderr}"
        );
        assert!(
            !cwd.path().join(".gitstate").exists(),
            "{args:?}: it created a repository"
        );
    }
}

#[test]
fn client_encrypted_states_are_stored_byte_for_byte() {
    let cwd = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let key = AgeKeyPair::generate();
    let key_file = key.write_key_file(keys.path(), "key");
    let server = Gitstate::start(
        &["--age-recipient", &key.recipient],
        &[("SOPS_AGE_KEY_FILE", key_file.to_str().unwrap())],
        cwd.path(),
    );
    // OpenTofu's client-side encryption envelope, with its own spacing
    let body = "{\"serial\": 7, \"lineage\": \"tofu-lineage\",\n  \"meta\": {\"key_provider.pbkdf2.main\": \"eyJzYWx0IjoiMDEyMyJ9\"},\n  \"encrypted_data\": \"q83vEjRWeJA=\", \"encryption_version\": \"v0\"}";
    post(&server, "tofu.tfstate", body);
    assert_eq!(stored(cwd.path(), "main", "tofu.tfstate"), body.as_bytes());
    let (status, text) = http(
        "GET",
        &server.state_url("default", "tofu.tfstate"),
        None,
        None,
    )
    .unwrap();
    assert_eq!((status, text.as_str()), (200, body));
}

#[test]
fn tampered_and_foreign_files_are_refused_with_the_reason() {
    let cwd = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let key = AgeKeyPair::generate();
    let key_file = key.write_key_file(keys.path(), "key");
    let server = Gitstate::start(
        &[
            "--encryption-mode",
            "structure",
            "--age-recipient",
            &key.recipient,
        ],
        &[("SOPS_AGE_KEY_FILE", key_file.to_str().unwrap())],
        cwd.path(),
    );
    post(&server, "prod.tfstate", &state(1, SECRET).to_string());

    // someone edits a readable value by hand: the MAC no longer matches
    let mut doc = stored_json(cwd.path(), "main", "prod.tfstate");
    doc["resources"][0]["name"] = json!("renamed");
    commit_file(
        cwd.path(),
        "prod.tfstate",
        serde_json::to_string_pretty(&doc).unwrap().as_bytes(),
    );
    let (status, headers, body) = request_with_headers(
        "GET",
        &server.state_url("default", "prod.tfstate"),
        None,
        &["x-request-id"],
    );
    let body = String::from_utf8_lossy(&body);
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("fails its integrity check"), "{body}");
    // What the check found is the server's to read, under the answer's request id.
    let id = headers[0].clone().expect("x-request-id");
    assert!(server.logged(&id, "MAC mismatch"), "{}", server.log());
    // a full new state from Terraform replaces the unreadable one
    post(&server, "prod.tfstate", &state(2, SECRET).to_string());
    assert_eq!(get_json(&server, "prod.tfstate"), state(2, SECRET));

    // a file wrapped for a key this server does not have: 500 naming the keys, no key material
    let stranger = AgeKeyPair::generate();
    let sealed = real_sops_encrypt_for(&stranger.recipient, &state(1, SECRET));
    commit_file(cwd.path(), "foreign.tfstate", &sealed);
    let (status, body) = http(
        "GET",
        &server.state_url("default", "foreign.tfstate"),
        None,
        None,
    )
    .unwrap();
    assert_eq!(status, 500, "{body}");
    assert!(
        body.contains(&stranger.recipient) && body.contains(&key.recipient),
        "{body}"
    );
    for secret in [&key.identity, &stranger.identity] {
        assert!(!body.contains(secret.as_str()) && !server.log().contains(secret.as_str()));
    }
}

/// Both modes with both key kinds, each read back by real sops 3.11: age recipients, and a KMS key
/// reached through the service-specific `AWS_ENDPOINT_URL_KMS` only (no generic endpoint), which
/// both gitstate and sops honour.
#[test]
fn every_mode_and_key_kind_is_read_by_real_sops() {
    let moto = MotoServer::start();
    let arn = moto.create_kms_key();
    let kms_env: Vec<(String, String)> = moto
        .aws_env()
        .into_iter()
        .map(|(k, v)| match k.as_str() {
            "AWS_ENDPOINT_URL" => ("AWS_ENDPOINT_URL_KMS".to_owned(), v),
            _ => (k, v),
        })
        .collect();
    let keys = tempfile::tempdir().unwrap();
    let age = AgeKeyPair::generate();
    let age_file = age.write_key_file(keys.path(), "age");
    for mode in ["all", "structure"] {
        for kind in ["age", "kms"] {
            let cwd = tempfile::tempdir().unwrap();
            let (mut env, reader_env) = match kind {
                "age" => (
                    vec![("SOPS_AGE_RECIPIENTS".to_owned(), age.recipient.clone())],
                    age_env(&age_file),
                ),
                _ => {
                    let mut env = kms_env.clone();
                    env.push(("SOPS_KMS_ARN".to_owned(), arn.clone()));
                    (env, kms_env.clone())
                }
            };
            env.push(("GITSTATE_ENCRYPTION_MODE".to_owned(), mode.to_owned()));
            let server = Gitstate::start(&[], &refs(&env), cwd.path());
            let posted = state(11, SECRET);
            post(&server, "m.tfstate", &posted.to_string());
            let raw = stored(cwd.path(), "main", "m.tfstate");
            assert!(
                !String::from_utf8_lossy(&raw).contains(SECRET),
                "{mode}/{kind}: the secret is in clear"
            );
            let doc: Value = serde_json::from_slice(&raw).unwrap();
            assert_eq!(
                doc["sops"]["encrypted_regex"].is_string(),
                mode == "structure",
                "{mode}/{kind}"
            );
            assert_eq!(
                doc["sops"][kind].as_array().map(Vec::len),
                Some(1),
                "{mode}/{kind}"
            );
            let opened = real_sops_decrypt(&raw, &reader_env)
                .unwrap_or_else(|e| panic!("{mode}/{kind}: sops -d failed: {e}"));
            assert_eq!(opened, posted, "{mode}/{kind}");
            assert_eq!(get_json(&server, "m.tfstate"), posted, "{mode}/{kind}");
        }
    }
}

/// The data key of a stored document, unwrapped with the age identity in `key_file`.
fn data_key_of(doc: &[u8], key_file: &Path) -> Vec<u8> {
    let keys = gitstate_sops::KeySource::from_age_key_file(key_file).unwrap();
    gitstate_sops::Document::decrypt(doc, &keys)
        .unwrap()
        .data_key
        .to_vec()
}

/// What someone with push access to the repository but none of the server's secrets can write:
/// a sops document wrapped for the server's age recipient (public) under a data key they chose,
/// naming whatever place they like.
fn planted(
    state: &Value,
    recipient: &str,
    data_key: [u8; 32],
    place: Option<(&str, &str)>,
) -> Vec<u8> {
    use gitstate_sops::{AgeKey, EncryptOptions, MasterKey, Node};
    let recipient = AgeKey::recipient(recipient).unwrap();
    let mut extra = Vec::new();
    if let Some((repository, path)) = place {
        extra.push((
            "gitstate_repository".to_owned(),
            Node::Str(repository.into()),
        ));
        extra.push(("gitstate_path".to_owned(), Node::Str(path.into())));
    }
    gitstate_sops::encrypt(
        state.to_string().as_bytes(),
        &[&recipient as &dyn MasterKey],
        &EncryptOptions {
            data_key: Some(gitstate_sops::Zeroizing::new(data_key)),
            extra_metadata: extra,
            ..EncryptOptions::default()
        },
    )
    .unwrap()
}

/// Issue 15: a data key is never reused. Two writes of one state carry different data keys
/// (different wrapped entries; real sops opens both). A document planted in the repository under
/// a data key its author knows (wrapped for the server's public recipient) is not the basis of
/// the next write: that key does not open what the server writes after it.
#[test]
fn every_write_gets_a_fresh_data_key_and_a_planted_one_is_never_used() {
    let cwd = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let key = AgeKeyPair::generate();
    let key_file = key.write_key_file(keys.path(), "key");
    let server = Gitstate::start(
        &[
            "--encryption-mode",
            "structure",
            "--age-recipient",
            &key.recipient,
        ],
        &[("SOPS_AGE_KEY_FILE", key_file.to_str().unwrap())],
        cwd.path(),
    );
    post(&server, "prod.tfstate", &state(1, SECRET).to_string());
    post(&server, "prod.tfstate", &state(2, SECRET_2).to_string());
    let (one, two) = (
        stored(cwd.path(), "main~1", "prod.tfstate"),
        stored(cwd.path(), "main", "prod.tfstate"),
    );
    let (doc1, doc2): (Value, Value) = (
        serde_json::from_slice(&one).unwrap(),
        serde_json::from_slice(&two).unwrap(),
    );
    assert_ne!(
        doc1["sops"]["age"][0]["enc"], doc2["sops"]["age"][0]["enc"],
        "two writes share a wrapped data key"
    );
    assert_ne!(
        data_key_of(&one, &key_file),
        data_key_of(&two, &key_file),
        "two writes share a data key"
    );
    assert_eq!(
        real_sops_decrypt(&one, &age_env(&key_file)).unwrap(),
        state(1, SECRET)
    );
    assert_eq!(
        real_sops_decrypt(&two, &age_env(&key_file)).unwrap(),
        state(2, SECRET_2)
    );

    // The attacker plants serial 3 under a key they know, naming this very place.
    let known = [0x5a; 32];
    let plant = planted(
        &state(3, "planted"),
        &key.recipient,
        known,
        Some(("default", "prod.tfstate")),
    );
    assert!(
        gitstate_sops::Document::decrypt_with_data_key(&plant, &known).is_ok(),
        "the attacker's own key must open the planted document"
    );
    commit_file(cwd.path(), "prod.tfstate", &plant);
    // Terraform writes the next version; the attacker's key must not open it.
    let v4 = state(4, "written-after-the-plant");
    post(&server, "prod.tfstate", &v4.to_string());
    let after = stored(cwd.path(), "main", "prod.tfstate");
    assert_ne!(after, plant, "the write did not land");
    let attempt = gitstate_sops::Document::decrypt_with_data_key(&after, &known);
    assert!(
        attempt.is_err(),
        "the planted data key opens the version written after it"
    );
    assert!(!String::from_utf8_lossy(&after).contains("written-after-the-plant"));
    assert_ne!(data_key_of(&after, &key_file), known.to_vec());
    let planted_doc: Value = serde_json::from_slice(&plant).unwrap();
    let after_doc: Value = serde_json::from_slice(&after).unwrap();
    assert_ne!(planted_doc["sops"]["age"], after_doc["sops"]["age"]);
    assert_eq!(real_sops_decrypt(&after, &age_env(&key_file)).unwrap(), v4);
    assert_eq!(get_json(&server, "prod.tfstate"), v4);
}

/// Issue 15: KMS documents are bound to their repository and path through the encryption
/// context (real sops still opens them: it passes the stored context to KMS). A document copied
/// by someone with push access to another path, or read through another repository name, is
/// refused with a sentence naming both places, never served; editing the stored context to
/// the new place makes KMS itself refuse the key.
#[test]
fn kms_documents_are_bound_to_their_repository_and_path() {
    let moto = MotoServer::start();
    let arn = moto.create_kms_key();
    let cwd = tempfile::tempdir().unwrap();
    let mut env = moto.aws_env();
    env.push(("SOPS_KMS_ARN".into(), arn.clone()));
    env.push(("GITSTATE_KMS_CONTEXT".into(), "team=payments".into()));
    let server = Gitstate::start(&["--encryption-mode", "all"], &refs(&env), cwd.path());
    let (a, b) = (state(1, "secret-of-a"), state(1, "secret-of-b"));
    post(&server, "a.tfstate", &a.to_string());
    post(&server, "b.tfstate", &b.to_string());
    let sealed_a = stored(cwd.path(), "main", "a.tfstate");
    let doc: Value = serde_json::from_slice(&sealed_a).unwrap();
    assert_eq!(
        doc["sops"]["kms"][0]["context"],
        json!({"team": "payments", "gitstate_repository": "default", "gitstate_path": "a.tfstate"})
    );
    assert_eq!(doc["sops"]["gitstate_repository"], "default");
    assert_eq!(doc["sops"]["gitstate_path"], "a.tfstate");
    assert_eq!(real_sops_decrypt(&sealed_a, &moto.aws_env()).unwrap(), a);

    // copied to another path
    commit_file(cwd.path(), "b.tfstate", &sealed_a);
    let (status, body) =
        http("GET", &server.state_url("default", "b.tfstate"), None, None).unwrap();
    assert_eq!(status, 500, "{body}");
    assert!(
        body.contains("the stored state at default/b.tfstate was sealed for default/a.tfstate"),
        "{body}"
    );
    assert!(
        body.contains(&arn),
        "the sentence names the KMS key whose context says so: {body}"
    );
    assert!(!body.contains("secret-of-a"), "{body}");

    // the same repository under another name: another repository as far as binding goes
    let bare = embedded_git_dir(cwd.path());
    let spec = format!("other={}", bare.display());
    let other_cwd = tempfile::tempdir().unwrap();
    let other = Gitstate::start(
        &["--encryption-mode", "all", "--repository", &spec],
        &refs(&env),
        other_cwd.path(),
    );
    let (status, body) = http("GET", &other.state_url("other", "a.tfstate"), None, None).unwrap();
    assert_eq!(status, 500, "{body}");
    assert!(
        body.contains("the stored state at other/a.tfstate was sealed for default/a.tfstate"),
        "{body}"
    );
    assert!(!body.contains("secret-of-a"));

    // rewriting the copy's context (and metadata) to name its new place: KMS refuses the key,
    // for gitstate as for real sops
    let mut forged: Value = serde_json::from_slice(&sealed_a).unwrap();
    forged["sops"]["kms"][0]["context"]["gitstate_path"] = json!("c.tfstate");
    forged["sops"]["gitstate_path"] = json!("c.tfstate");
    let forged = serde_json::to_vec_pretty(&forged).unwrap();
    commit_file(cwd.path(), "c.tfstate", &forged);
    let (status, body) =
        http("GET", &server.state_url("default", "c.tfstate"), None, None).unwrap();
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("cannot decrypt the stored state"), "{body}");
    assert!(!body.contains("secret-of-a"));
    assert!(real_sops_decrypt(&forged, &moto.aws_env()).is_err());

    // Terraform's next full write replaces the copy, and b is b again
    let b2 = state(2, "secret-of-b");
    post(&server, "b.tfstate", &b2.to_string());
    assert_eq!(get_json(&server, "b.tfstate"), b2);
    assert_eq!(get_json(&server, "a.tfstate"), a);
}

/// Issue 15: with `enforced = true` only what this server sealed is served: plaintext, a file
/// real sops wrote with the server's own KMS key (not bound to the place), and a document
/// planted under the server's public age recipient are refused with the reason; a write
/// replaces them with a sealed version; replays stay commit-free; OpenTofu's client-encrypted
/// envelope is sealed too rather than stored as sent.
#[test]
fn enforced_serves_and_stores_only_what_this_server_sealed() {
    let moto = MotoServer::start();
    let arn = moto.create_kms_key();
    let cwd = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let age = AgeKeyPair::generate();
    let age_file = age.write_key_file(keys.path(), "age");
    let mut env = moto.aws_env();
    env.push(("SOPS_KMS_ARN".into(), arn.clone()));
    env.push(("SOPS_AGE_RECIPIENTS".into(), age.recipient.clone()));
    env.push((
        "SOPS_AGE_KEY_FILE".into(),
        age_file.to_str().unwrap().to_owned(),
    ));
    let server = Gitstate::start(&["--encryption-enforced"], &refs(&env), cwd.path());
    let get = |path: &str| http("GET", &server.state_url("default", path), None, None).unwrap();

    // what the server writes, it serves; a replay makes no commit
    let own = state(1, SECRET);
    post(&server, "own.tfstate", &own.to_string());
    assert_eq!(get_json(&server, "own.tfstate"), own);
    post(&server, "own.tfstate", &own.to_string());
    assert_eq!(commits_touching(cwd.path(), "own.tfstate"), 1);
    let sealed = stored(cwd.path(), "main", "own.tfstate");
    assert_eq!(real_sops_decrypt(&sealed, &moto.aws_env()).unwrap(), own);
    assert_eq!(
        real_sops_decrypt(&sealed, &age_env(&age_file)).unwrap(),
        own
    );

    // plaintext pushed to the repository
    commit_file(
        cwd.path(),
        "plain.tfstate",
        state(1, SECRET).to_string().as_bytes(),
    );
    let (status, body) = get("plain.tfstate");
    assert_eq!(status, 500, "{body}");
    assert!(
        body.contains("the stored state at default/plain.tfstate is not encrypted, and encryption is enforced"),
        "{body}"
    );
    assert!(!body.contains(SECRET));
    // POSTing exactly those bytes is not a replay: the state is stored sealed
    post(&server, "plain.tfstate", &state(1, SECRET).to_string());
    assert_eq!(commits_touching(cwd.path(), "plain.tfstate"), 2);
    assert!(
        !String::from_utf8_lossy(&stored(cwd.path(), "main", "plain.tfstate")).contains(SECRET)
    );
    assert_eq!(get_json(&server, "plain.tfstate"), state(1, SECRET));

    // a file real sops wrote with the server's KMS key: readable by sops, not sealed here
    let plain_dir = tempfile::tempdir().unwrap();
    let plain = plain_dir.path().join("plain.json");
    fs::write(&plain, state(1, "by-real-sops").to_string()).unwrap();
    let out = Command::new(sops_bin())
        .env_clear()
        .env("HOME", std::env::var_os("HOME").unwrap_or_default())
        .envs(moto.aws_env())
        .args(["--disable-version-check", "encrypt", "--kms", &arn])
        .args(["--input-type", "json", "--output-type", "json"])
        .arg(&plain)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    commit_file(cwd.path(), "by-sops.tfstate", &out.stdout);
    let (status, body) = get("by-sops.tfstate");
    assert_eq!(status, 500, "{body}");
    assert!(
        body.contains("the stored state at default/by-sops.tfstate was not sealed by this server"),
        "{body}"
    );
    assert!(!body.contains("by-real-sops"));

    // planted under the server's public age recipient, naming this place
    let plant = planted(
        &state(9, "planted"),
        &age.recipient,
        [7; 32],
        Some(("default", "planted.tfstate")),
    );
    commit_file(cwd.path(), "planted.tfstate", &plant);
    let (status, body) = get("planted.tfstate");
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("was not sealed by this server"), "{body}");
    assert!(!body.contains("\"planted\""));

    // OpenTofu's envelope is sealed like any state under enforcement, and served as sent
    let envelope = json!({"serial": 7, "lineage": "tofu-lineage", "meta": {"key_provider.pbkdf2.main": "eyJzYWx0IjoiMDEyMyJ9"}, "encrypted_data": "q83vEjRWeJA=", "encryption_version": "v0"});
    post(&server, "tofu.tfstate", &envelope.to_string());
    let stored_envelope = stored(cwd.path(), "main", "tofu.tfstate");
    let doc: Value = serde_json::from_slice(&stored_envelope).unwrap();
    assert!(doc["sops"].is_object(), "stored as sent under enforcement");
    assert!(!String::from_utf8_lossy(&stored_envelope).contains("q83vEjRWeJA="));
    assert_eq!(get_json(&server, "tofu.tfstate"), envelope);
}

/// A server with no encryption configured never hands ciphertext to Terraform: a document real
/// sops wrote (every leaf encrypted, as terraform-backend-git's sops provider leaves them) and a
/// binary file (its legacy `aes` output) are 500 with a sentence naming what they need; the next
/// full write from Terraform replaces them.
#[test]
fn ciphertext_is_never_served_as_a_state() {
    let cwd = tempfile::tempdir().unwrap();
    let server = Gitstate::start(&[], &[], cwd.path());
    post(&server, "plain.tfstate", &state(1, SECRET).to_string());

    let owner = AgeKeyPair::generate();
    let sealed = real_sops_encrypt_for(&owner.recipient, &state(1, SECRET));
    commit_file(cwd.path(), "sealed.tfstate", &sealed);
    let url = server.state_url("default", "sealed.tfstate");
    let (status, body) = http("GET", &url, None, None).unwrap();
    assert_eq!(status, 500, "{body}");
    assert!(body.contains(&owner.recipient), "{body}");
    assert!(!body.contains("ENC["), "ciphertext in the answer: {body}");

    commit_file(
        cwd.path(),
        "legacy.tfstate",
        &[0x9c, 0x01, 0xfe, 0x7b, 0x00, 0x42, 0x13],
    );
    let (status, body) = http(
        "GET",
        &server.state_url("default", "legacy.tfstate"),
        None,
        None,
    )
    .unwrap();
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("not JSON"), "{body}");

    post(&server, "sealed.tfstate", &state(2, SECRET).to_string());
    assert_eq!(get_json(&server, "sealed.tfstate"), state(2, SECRET));
}

/// `state` encrypted by real sops for the age `recipient` (every leaf, sops' defaults).
fn real_sops_encrypt_for(recipient: &str, state: &Value) -> Vec<u8> {
    let plain_dir = tempfile::tempdir().unwrap();
    let plain = plain_dir.path().join("plain.json");
    fs::write(&plain, state.to_string()).unwrap();
    let out = Command::new(sops_bin())
        .env_clear()
        .env("HOME", std::env::var_os("HOME").unwrap_or_default())
        .args(["--disable-version-check", "encrypt", "--age", recipient])
        .args(["--input-type", "json", "--output-type", "json"])
        .arg(&plain)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}
