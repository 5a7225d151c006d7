//! Coming from terraform-backend-git (issue 18): states its legacy `aes` provider wrote (binary:
//! nonce, AES-256-GCM ciphertext and tag under the hex MD5 of the passphrase) are served opened
//! when the passphrase is configured under its own variable names, written back sealed with the
//! configured sops keys, never served raw without the passphrase, and re-sealed all at once by
//! `gitstate migrate` with one commit per state. The legacy files are the vectors Python's
//! `cryptography` made (`shared/seal/tests/vectors/legacy-aes/`), committed with plain git.
//! Needs real sops (`scripts/install-test-deps.sh`) and a built `gitstate` binary.

use std::fs;
use std::path::{Path, PathBuf};

use gitstate_tests::crypto::{legacy_aes_vector, sops_decrypt_with_age_key, AgeKeyPair};
use gitstate_tests::*;
use serde_json::Value;

const PASSPHRASE: &str = "correct horse battery staple";
const SECRET: &str = "hunter2-legacy-aes";

fn plaintext() -> Value {
    serde_json::from_slice(&legacy_aes_vector("state.tfstate.json"))
        .expect("the vector's plaintext")
}

/// A bare repository whose `main` holds `files`, committed and pushed with plain git as
/// terraform-backend-git left them.
fn repository_with(dir: &Path, files: &[(&str, &[u8])]) -> PathBuf {
    let repository = bare_repo(dir, "states");
    push_root_commit(
        &repository,
        "main",
        files,
        "states left by terraform-backend-git",
    );
    repository
}

fn repository_flag(repository: &Path) -> String {
    format!("default={}", repository.display())
}

fn is_sops_document(bytes: &[u8]) -> bool {
    serde_json::from_slice::<Value>(bytes).is_ok_and(|doc| doc["sops"]["mac"].is_string())
}

#[test]
fn a_legacy_aes_state_is_served_and_the_next_write_is_sealed_with_sops() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repository = repository_with(
        dir.path(),
        &[
            (
                "envs/legacy.tfstate",
                &legacy_aes_vector("state.tfstate.aes"),
            ),
            (
                "envs/unsealed.tfstate",
                &legacy_aes_vector("state.tfstate.aes"),
            ),
        ],
    );
    let key = AgeKeyPair::generate();
    let key_file = key.write_key_file(dir.path(), "age");
    let server = Gitstate::start(
        &["--repository", &repository_flag(&repository)],
        &[
            ("TF_BACKEND_HTTP_ENCRYPTION_PROVIDER", "aes"),
            ("TF_BACKEND_HTTP_ENCRYPTION_PASSPHRASE", PASSPHRASE),
            ("SOPS_AGE_RECIPIENTS", &key.recipient),
            ("SOPS_AGE_KEY_FILE", key_file.to_str().expect("utf-8")),
        ],
        dir.path(),
    );
    let url = server.state_url("default", "envs/legacy.tfstate");

    let (status, body) = http("GET", &url, None, None).expect("GET");
    assert_eq!(status, 200, "{body}\n{}", server.log());
    assert_eq!(
        serde_json::from_str::<Value>(&body).expect("JSON"),
        plaintext()
    );

    let mut next = plaintext();
    next["serial"] = 8.into();
    let (status, body) = http("POST", &url, Some(&next.to_string()), None).expect("POST");
    assert_eq!(status, 200, "{body}\n{}", server.log());
    let stored = git_show(&repository, "main", "envs/legacy.tfstate").expect("stored");
    assert!(is_sops_document(&stored), "not sealed with sops");
    assert!(
        !String::from_utf8_lossy(&stored).contains(SECRET),
        "the secret is stored in clear"
    );
    assert_eq!(sops_decrypt_with_age_key(&stored, &key_file), next);
    let (status, body) = http("GET", &url, None, None).expect("GET");
    assert_eq!(status, 200, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).expect("JSON"), next);
    assert!(
        !server.log().contains(PASSPHRASE),
        "the passphrase is in the log"
    );
    drop(server);

    // Without sops keys, the next write stores the state as plaintext (gitstate never writes
    // the legacy format); gitstate's own variable name works as well.
    let server = Gitstate::start(
        &["--repository", &repository_flag(&repository)],
        &[("GITSTATE_LEGACY_AES_PASSPHRASE", PASSPHRASE)],
        dir.path(),
    );
    let url = server.state_url("default", "envs/unsealed.tfstate");
    let (status, body) = http("GET", &url, None, None).expect("GET");
    assert_eq!(status, 200, "{body}\n{}", server.log());
    assert_eq!(
        serde_json::from_str::<Value>(&body).expect("JSON"),
        plaintext()
    );
    let (status, body) = http("POST", &url, Some(&next.to_string()), None).expect("POST");
    assert_eq!(status, 200, "{body}");
    let stored = git_show(&repository, "main", "envs/unsealed.tfstate").expect("stored");
    assert_eq!(
        serde_json::from_slice::<Value>(&stored).expect("plaintext JSON"),
        next
    );
    assert!(
        server.log().contains("written back in plaintext"),
        "no warning at start:\n{}",
        server.log()
    );
    assert!(
        !server.log().contains(PASSPHRASE),
        "the passphrase is in the log"
    );
}

#[test]
fn without_its_passphrase_a_legacy_aes_state_is_a_500_and_never_served() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sealed = legacy_aes_vector("state.tfstate.aes");
    let repository = repository_with(dir.path(), &[("legacy.tfstate", &sealed)]);
    let commit = git(Some(&repository), &["rev-parse", "main"]);
    let wrong = "correct horse battery stapler";
    for env in [
        vec![("TF_BACKEND_HTTP_ENCRYPTION_PASSPHRASE", wrong)],
        vec![("GITSTATE_LEGACY_AES_PASSPHRASE", wrong)],
        vec![],
    ] {
        let server = Gitstate::start(
            &["--repository", &repository_flag(&repository)],
            &env,
            dir.path(),
        );
        let url = server.state_url("default", "legacy.tfstate");
        for address in [url.clone(), format!("{url}?version={}", &commit[..12])] {
            let (status, body) = http("GET", &address, None, None).expect("GET");
            assert_eq!(status, 500, "{address} with {env:?}: {body}");
            let error: Value = serde_json::from_str(&body).expect("a JSON error");
            let sentence = error["error"].as_str().expect("a sentence");
            assert!(sentence.contains("passphrase"), "{sentence}");
            assert!(!sentence.contains(wrong), "the passphrase is in the answer");
            assert!(
                !body.contains(&String::from_utf8_lossy(&sealed[12..40]).into_owned()),
                "ciphertext in the answer: {body}"
            );
            if !env.is_empty() {
                assert!(
                    sentence.contains("does not open as terraform-backend-git's legacy aes"),
                    "{sentence}"
                );
            }
        }
        assert!(
            !server.log().contains(wrong),
            "the passphrase is in the log"
        );
    }
}

#[test]
fn config_show_names_terraform_backend_gits_variables_and_hides_the_passphrase() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = gitstate_run(
        dir.path(),
        &["config", "show"],
        &[
            ("TF_BACKEND_HTTP_ENCRYPTION_PROVIDER", "aes"),
            ("TF_BACKEND_HTTP_ENCRYPTION_PASSPHRASE", PASSPHRASE),
        ],
    );
    assert_eq!(out.code, Some(0), "{}", out.combined());
    assert!(!out.combined().contains(PASSPHRASE), "{}", out.combined());
    for line in [
        "encryption.provider = \"aes\"",
        "environment TF_BACKEND_HTTP_ENCRYPTION_PROVIDER (terraform-backend-git's name)",
        "encryption.legacy_aes_passphrase = (hidden)",
        "environment TF_BACKEND_HTTP_ENCRYPTION_PASSPHRASE (terraform-backend-git's name)",
    ] {
        assert!(out.stdout.contains(line), "{line}:\n{}", out.stdout);
    }
    // The provider "aes" needs a passphrase: the start stops with one sentence.
    let refused = gitstate_run(
        dir.path(),
        &["locks"],
        &[("TF_BACKEND_HTTP_ENCRYPTION_PROVIDER", "aes")],
    );
    assert_ne!(refused.code, Some(0));
    assert!(
        refused
            .stderr
            .contains("the encryption provider is \"aes\" but no passphrase is configured"),
        "{}",
        refused.stderr
    );
}

#[test]
fn gitstate_migrate_reseals_every_state_in_one_commit_each() {
    let dir = tempfile::tempdir().expect("tempdir");
    let legacy = legacy_aes_vector("state.tfstate.aes");
    let plain = legacy_aes_vector("state.tfstate.json");
    let other_passphrase = legacy_aes_vector("state-unicode-passphrase.tfstate.aes");
    let repository = repository_with(
        dir.path(),
        &[
            ("a.tfstate", &legacy),
            ("team/b.tfstate", &legacy),
            ("c.tfstate", &plain),
            ("other.tfstate", &other_passphrase),
            ("README.md", b"Terraform states\n"),
        ],
    );
    let key = AgeKeyPair::generate();
    let key_file = key.write_key_file(dir.path(), "age");
    let repository_flag = repository_flag(&repository);
    let args = ["migrate", "--repository", repository_flag.as_str()];
    let env = [
        ("TF_BACKEND_HTTP_ENCRYPTION_PASSPHRASE", PASSPHRASE),
        ("SOPS_AGE_RECIPIENTS", key.recipient.as_str()),
        ("SOPS_AGE_KEY_FILE", key_file.to_str().expect("utf-8")),
    ];
    let tip = || {
        git(Some(&repository), &["rev-parse", "main"])
            .trim()
            .to_owned()
    };
    let before = tip();

    let dry = gitstate_run(dir.path(), &[&args[..], &["--dry-run"]].concat(), &env);
    assert_eq!(
        dry.code,
        Some(1),
        "other.tfstate cannot be opened: {}",
        dry.combined()
    );
    for line in [
        "a.tfstate       7       legacy aes   would be sealed",
        "team/b.tfstate  7       legacy aes   would be sealed",
        "c.tfstate       7       plaintext    would be sealed",
        "README.md       -       not a state  left as it is",
        "dry run: 3 state(s) would be migrated",
    ] {
        assert!(dry.stdout.contains(line), "{line}:\n{}", dry.stdout);
    }
    assert!(dry.stdout.contains("other.tfstate") && dry.stdout.contains("not migrated"));
    assert!(
        dry.stderr.contains("1 state(s) were not migrated"),
        "{}",
        dry.stderr
    );
    assert_eq!(tip(), before, "a dry run writes nothing");
    // Progress goes to standard error, as plain lines off a terminal (the first and the last of
    // the five files), never as escape codes.
    for line in ["check default: 1/5 ", "check default: 5/5 "] {
        assert!(dry.stderr.contains(line), "{line}:\n{}", dry.stderr);
    }
    assert!(!dry.combined().contains('\x1b'), "{}", dry.combined());

    let run = gitstate_run(dir.path(), &args, &env);
    assert_eq!(run.code, Some(1), "{}", run.combined());
    assert!(run.stdout.contains("3 state(s) migrated"), "{}", run.stdout);
    assert!(!run.combined().contains(PASSPHRASE));
    let subjects = git(
        Some(&repository),
        &["log", "--format=%s", &format!("{before}..main")],
    );
    let mut subjects: Vec<&str> = subjects.lines().collect();
    subjects.sort();
    assert_eq!(subjects.len(), 3, "one commit per state: {subjects:?}");
    for (subject, (path, from)) in subjects.iter().zip([
        ("a.tfstate", "legacy aes"),
        ("c.tfstate", "plaintext"),
        ("team/b.tfstate", "legacy aes"),
    ]) {
        assert!(
            subject.starts_with(&format!(
                "Migrate {path} (serial 7) from {from} to sealed by "
            )),
            "{subject}"
        );
        let changed = git(
            Some(&repository),
            &["log", "--format=%H", &format!("{before}..main"), "--", path],
        );
        assert_eq!(changed.lines().count(), 1, "{path} changed in one commit");
        let stored = git_show(&repository, "main", path).expect("stored");
        assert!(is_sops_document(&stored), "{path} is not sealed");
        assert_eq!(
            sops_decrypt_with_age_key(&stored, &key_file),
            plaintext(),
            "{path}"
        );
    }
    assert_eq!(
        git_show(&repository, "main", "other.tfstate"),
        Some(other_passphrase),
        "what nothing here opens is left as it is"
    );
    assert_eq!(
        git_show(&repository, "main", "README.md").as_deref(),
        Some(&b"Terraform states\n"[..])
    );

    // The project's reader serves them (a server without the passphrase); a second run has
    // nothing left to do.
    let server = Gitstate::start(&["--repository", &repository_flag], &env[1..], dir.path());
    for path in ["a.tfstate", "team/b.tfstate", "c.tfstate"] {
        let (status, body) =
            http("GET", &server.state_url("default", path), None, None).expect("GET");
        assert_eq!(status, 200, "{path}: {body}");
        assert_eq!(
            serde_json::from_str::<Value>(&body).expect("JSON"),
            plaintext()
        );
    }
    // The history lists the version terraform-backend-git wrote (no serial: nothing here opens
    // it) and the migration; `?version=7` is the migrated one.
    let history = gitstate_run(
        dir.path(),
        &[
            "history",
            "default",
            "a.tfstate",
            "--repository",
            &repository_flag,
        ],
        &env[1..],
    );
    assert_eq!(history.code, Some(0), "{}", history.combined());
    assert_eq!(history.stdout.lines().count(), 3, "{}", history.stdout);
    let (status, body) = http(
        "GET",
        &format!("{}?version=7", server.state_url("default", "a.tfstate")),
        None,
        None,
    )
    .expect("GET");
    assert_eq!(status, 200, "{body}");
    let after = tip();
    let again = gitstate_run(dir.path(), &args, &env);
    assert!(
        again.stdout.contains("0 state(s) migrated"),
        "{}",
        again.stdout
    );
    assert_eq!(tip(), after, "nothing left to migrate");
}

/// Real Terraform 1.15.5 against a legacy aes state: `terraform state pull` prints it opened,
/// and the next apply (the configuration dropped its output) stores the new state sealed.
#[test]
fn real_terraform_reads_a_legacy_aes_state_and_its_next_apply_is_sealed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repository = repository_with(
        dir.path(),
        &[("prod.tfstate", &legacy_aes_vector("state.tfstate.aes"))],
    );
    let key = AgeKeyPair::generate();
    let key_file = key.write_key_file(dir.path(), "age");
    let server = Gitstate::start(
        &["--repository", &repository_flag(&repository)],
        &[
            ("TF_BACKEND_HTTP_ENCRYPTION_PASSPHRASE", PASSPHRASE),
            ("SOPS_AGE_RECIPIENTS", &key.recipient),
            ("SOPS_AGE_KEY_FILE", key_file.to_str().expect("utf-8")),
        ],
        dir.path(),
    );
    let work = tempfile::tempdir().expect("tempdir");
    let mut tf = HttpBackend::new(&server.state_url("default", "prod.tfstate")).hcl();
    tf.push_str(
        "\nresource \"null_resource\" \"app\" {\n  triggers = {\n    unicode = \"žluťoučký kůň 🐎\"\n  }\n}\n",
    );
    fs::write(work.path().join("main.tf"), tf).expect("main.tf");
    let terraform = Terraform::installed("1.15.5");
    terraform.init(work.path()).expect_code(0, "init");
    let pulled = terraform.run(work.path(), &["state", "pull"]);
    pulled.expect_code(0, "state pull");
    let pulled: Value = serde_json::from_str(&pulled.stdout).expect("state pull prints JSON");
    assert_eq!(pulled["serial"], 7);
    assert_eq!(pulled["lineage"], plaintext()["lineage"]);
    assert_eq!(pulled["outputs"]["db_password"]["value"], SECRET);

    terraform.apply(work.path()).expect_code(0, "apply");
    let stored = git_show(&repository, "main", "prod.tfstate").expect("stored");
    assert!(is_sops_document(&stored), "the new state is not sealed");
    let state = sops_decrypt_with_age_key(&stored, &key_file);
    assert_eq!(state["serial"], 8, "{state}");
    assert_eq!(state["lineage"], plaintext()["lineage"]);
    assert!(state["outputs"].get("db_password").is_none(), "{state}");
    assert_eq!(
        state["resources"][0]["instances"][0]["attributes"]["id"],
        "5577006791947779410"
    );
}

/// A state locked when `gitstate migrate` runs (here a lock terraform-backend-git left: the
/// branch `locks/<state>` holding `<state>.lock`) is reported and left; the others are migrated.
#[test]
fn gitstate_migrate_leaves_a_locked_state_and_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let legacy = legacy_aes_vector("state.tfstate.aes");
    let repository = repository_with(
        dir.path(),
        &[("held.tfstate", &legacy), ("free.tfstate", &legacy)],
    );
    let work = tempfile::tempdir().expect("tempdir");
    git(
        Some(work.path()),
        &["init", "--quiet", "--initial-branch=locks/held.tfstate"],
    );
    fs::write(
        work.path().join("held.tfstate.lock"),
        r#"{"ID":"tbg-lock-1","Operation":"OperationTypeApply","Info":"","Who":"ci@old-runner","Version":"1.5.7","Created":"2026-11-20T09:15:02Z","Path":""}"#,
    )
    .expect("write");
    git(Some(work.path()), &["add", "."]);
    git(
        Some(work.path()),
        &["commit", "--quiet", "-m", "Lock held.tfstate"],
    );
    git(
        Some(work.path()),
        &[
            "push",
            "--quiet",
            repository.to_str().expect("utf-8"),
            "locks/held.tfstate:refs/heads/locks/held.tfstate",
        ],
    );
    let key = AgeKeyPair::generate();
    let repository_flag = repository_flag(&repository);
    let run = gitstate_run(
        dir.path(),
        &["migrate", "--repository", &repository_flag],
        &[
            ("TF_BACKEND_HTTP_ENCRYPTION_PASSPHRASE", PASSPHRASE),
            ("SOPS_AGE_RECIPIENTS", &key.recipient),
        ],
    );
    assert_eq!(run.code, Some(1), "{}", run.combined());
    assert!(
        run.stdout.contains(
            "held.tfstate is locked by ci@old-runner (OperationTypeApply, ID tbg-lock-1)"
        ),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("1 state(s) migrated"), "{}", run.stdout);
    assert_eq!(git_show(&repository, "main", "held.tfstate"), Some(legacy));
    let free = git_show(&repository, "main", "free.tfstate").expect("stored");
    assert!(is_sops_document(&free), "free.tfstate is not sealed");
}
