//! Coming from terraform-backend-git (issue 18): what it left in a repository keeps working under
//! gitstate. Here: a lock it left behind (its layout: a branch `locks/<state>` whose commit holds
//! `<state>.lock` with the holder's LockInfo, pushed with plain git) is honoured by real
//! Terraform, named in the error, and released by `terraform force-unlock`. Needs
//! `scripts/install-test-deps.sh` and a built `gitstate` binary (see gitstate_tests docs).

use std::path::Path;

use gitstate_tests::*;

/// The LockInfo terraform-backend-git stores: Terraform's, marshalled by Go.
const LEFT_BEHIND: &str = r#"{"ID":"5d8c3f0e-tbg-lock","Operation":"OperationTypeApply","Info":"","Who":"ci@old-runner","Version":"1.11.4","Created":"2026-11-20T09:15:02.123456789Z","Path":""}"#;

/// Pushes the branch `locks/{state}` holding `{state}.lock` = `lock_info` to `repository`, with
/// plain git, as terraform-backend-git does when it takes a lock.
fn leave_a_lock(repository: &Path, state: &str, lock_info: &str) {
    let work = tempfile::tempdir().expect("tempdir");
    let url = format!("file://{}", repository.display());
    git(
        None,
        &[
            "clone",
            "--quiet",
            &url,
            work.path().to_str().expect("utf-8"),
        ],
    );
    git(
        Some(work.path()),
        &["checkout", "--quiet", "-b", &format!("locks/{state}")],
    );
    std::fs::write(work.path().join(format!("{state}.lock")), lock_info).expect("write");
    git(Some(work.path()), &["add", "."]);
    git(
        Some(work.path()),
        &[
            "-c",
            "user.name=terraform-backend-git",
            "-c",
            "user.email=tbg@example.com",
            "commit",
            "--quiet",
            "-m",
            &format!("Lock {state}"),
        ],
    );
    git(
        Some(work.path()),
        &["push", "--quiet", "origin", &format!("locks/{state}")],
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
