//! The test fixtures themselves, checked with plain git and real terraform (no gitstate involved):
//! if one of these fails, the end-to-end tests would be measuring the fixture, not gitstate.

use std::fs;

use gitstate_tests::*;

fn clone_commit_push(url: &str, file: &str) {
    let work = tempfile::tempdir().unwrap();
    let clone = work.path().join("c");
    git(None, &["clone", "--quiet", url, clone.to_str().unwrap()]);
    fs::write(clone.join(file), "hello\n").unwrap();
    git(Some(&clone), &["add", file]);
    git(
        Some(&clone),
        &["commit", "--quiet", "-m", &format!("add {file}")],
    );
    git(
        Some(&clone),
        &["push", "--quiet", "origin", "HEAD:refs/heads/main"],
    );
    // Branch creation and deletion, as gitstate's locks do.
    git(
        Some(&clone),
        &[
            "push",
            "--quiet",
            "origin",
            "HEAD:refs/heads/locks/x.tfstate",
        ],
    );
    git(
        Some(&clone),
        &["push", "--quiet", "origin", ":refs/heads/locks/x.tfstate"],
    );
}

#[test]
fn smart_http_fixture_requires_basic_auth_and_accepts_pushes() {
    let repos = tempfile::tempdir().unwrap();
    let repo = bare_repo(repos.path(), "states");
    seed_commit(&repo);
    let server = GitHttpServer::start(repos.path(), "alice", "s3cret pass");

    // Without credentials, and with a wrong password, the server refuses.
    let anon = git_output(None, &["ls-remote", &server.url("states")]);
    assert!(!anon.status.success(), "anonymous ls-remote must fail");
    let (status, _) = http(
        "GET",
        &format!("{}/info/refs?service=git-upload-pack", server.url("states")),
        None,
        None,
    )
    .unwrap();
    assert_eq!(status, 401, "anonymous request must get 401");
    let (status, _) = http(
        "GET",
        &format!(
            "{}/info/refs?service=git-receive-pack",
            server.url("states")
        ),
        None,
        Some(("alice", "wrong")),
    )
    .unwrap();
    assert_eq!(status, 401, "wrong password must get 401");
    let (status, body) = http(
        "GET",
        &format!(
            "{}/info/refs?service=git-receive-pack",
            server.url("states")
        ),
        None,
        Some(("alice", "s3cret pass")),
    )
    .unwrap();
    assert_eq!(
        status,
        200,
        "receive-pack advertisement with credentials: {body}\n{}",
        server.error_log()
    );

    let url = server
        .url_with_credentials("states")
        .replace("s3cret pass", "s3cret%20pass");
    clone_commit_push(&url, "a.txt");
    assert_eq!(
        git_log_subjects(&repo, "main", "a.txt"),
        vec!["add a.txt".to_string()]
    );
    assert!(ls_remote(&url)
        .iter()
        .all(|(_, r)| !r.starts_with("refs/heads/locks/")));
}

#[test]
fn git_daemon_fixture_accepts_pushes() {
    let repos = tempfile::tempdir().unwrap();
    let repo = bare_repo(repos.path(), "states");
    seed_commit(&repo);
    let daemon = GitDaemon::start(repos.path());
    clone_commit_push(&daemon.url("states"), "b.txt");
    assert_eq!(
        git_log_subjects(&repo, "main", "b.txt"),
        vec!["add b.txt".to_string()]
    );
}

#[test]
fn terraform_versions_are_installed_and_run_the_null_provider_offline() {
    let all = Terraform::all();
    let versions: Vec<&str> = all.iter().map(|t| t.version.as_str()).collect();
    println!("terraform versions under test: {versions:?}");
    assert!(versions.contains(&"1.0.3") && versions.contains(&"1.15.5"));
    for tf in &all {
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join("main.tf"),
            "resource \"null_resource\" \"a\" {\n  triggers = { x = \"1\" }\n}\n",
        )
        .unwrap();
        tf.init(dir.path())
            .expect_code(0, &format!("init with the local mirror ({})", tf.version));
        tf.plan(dir.path())
            .expect_code(2, &format!("plan with a change ({})", tf.version));
        tf.apply(dir.path())
            .expect_code(0, &format!("apply ({})", tf.version));
        tf.plan(dir.path())
            .expect_code(0, &format!("plan without change ({})", tf.version));
    }
}

#[test]
fn main_tf_writer_produces_a_valid_http_backend_config() {
    let tf = Terraform::installed("1.15.5");
    let dir = tempfile::tempdir().unwrap();
    let backend =
        HttpBackend::new("http://127.0.0.1:1/state/default/prod.tfstate").with_auth("u", "p\"${x}");
    write_main_tf(dir.path(), &backend, 3, "g1");
    let text = fs::read_to_string(dir.path().join("main.tf")).unwrap();
    assert!(text.contains("backend \"http\""), "{text}");
    assert_eq!(
        text.matches("resource \"null_resource\"").count(),
        3,
        "{text}"
    );
    // `terraform validate` needs an initialized directory; -backend=false initializes providers only.
    tf.run(
        dir.path(),
        &["init", "-backend=false", "-input=false", "-no-color"],
    )
    .expect_code(0, "init -backend=false");
    tf.run(dir.path(), &["validate", "-no-color"])
        .expect_code(0, "validate main.tf");
}
