//! `LocalStore` against a bare repository on disk, checked with the real git CLI.

mod common;

use std::sync::Arc;

use bytes::Bytes;
use common::{git, sp, write_retrying};
use gitstate_core::{LockCreate, StateChange, StateStore};
use gitstate_git::LocalStore;

#[tokio::test]
async fn conformance_and_git_cli_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join(".gitstate/default.git");
    let store = LocalStore::open_or_init(&repo, "main").unwrap();
    assert!(repo.join("HEAD").exists(), "created on first use");
    common::conformance(&store, "").await;

    // Plain git sees the history of each state and the nested file.
    let log = git(
        &repo,
        &["log", "--format=%s|%an <%ae>", "--", "prod.tfstate"],
    );
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(
        lines,
        vec![
            "Delete prod by test|gitstate <gitstate@localhost>",
            "Update prod (serial 2) by test|gitstate <gitstate@localhost>",
            "Update prod (serial 1) by test|gitstate <gitstate@localhost>",
        ]
    );
    assert_eq!(git(&repo, &["show", "main:team/a/prod.tfstate"]), "nested");
    // Every commit changes exactly one file, but a workspace's delete.
    common::each_commit_changes_one_file(&repo, "main");
    git(&repo, &["fsck", "--strict"]);

    // Reopening finds the same data.
    let again = LocalStore::open_or_init(&repo, "main").unwrap();
    let snap = again.snapshot(&sp("team/a/prod.tfstate")).await.unwrap();
    assert_eq!(snap.state.as_deref(), Some(&b"nested"[..]));
}

#[tokio::test]
async fn lock_branch_is_a_root_commit_with_the_lock_file() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("r.git");
    let store = LocalStore::open_or_init(&repo, "main").unwrap();
    let path = sp("team/a/prod.tfstate");
    let created = store
        .create_lock(
            &path,
            Bytes::from_static(b"{\"ID\":\"x\"}"),
            &gitstate_core::Message::from("Lock team/a/prod.tfstate: apply by me (x)"),
        )
        .await
        .unwrap();
    assert_eq!(created, LockCreate::Created);
    let branch = "locks/team/a/prod.tfstate";
    assert_eq!(
        git(
            &repo,
            &["show", &format!("{branch}:team/a/prod.tfstate.lock")]
        ),
        "{\"ID\":\"x\"}"
    );
    // Root commit: no parent line.
    let parents = git(&repo, &["log", "-1", "--format=%P", branch]);
    assert_eq!(parents.trim(), "");
    let listed = git(
        &repo,
        &["for-each-ref", "--format=%(refname)", "refs/heads/locks/"],
    );
    assert_eq!(listed.trim(), "refs/heads/locks/team/a/prod.tfstate");
}

#[tokio::test]
async fn other_branch_name() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("r.git");
    let store = LocalStore::open_or_init(&repo, "states").unwrap();
    let path = sp("x.tfstate");
    common::write(
        &store,
        &path,
        StateChange::Write(Bytes::from_static(b"x")),
        "m",
    )
    .await
    .unwrap();
    assert_eq!(git(&repo, &["show", "states:x.tfstate"]), "x");
    assert_eq!(git(&repo, &["log", "--format=%s"]).trim(), "m");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("r.git");
    let store: Arc<dyn StateStore> = Arc::new(LocalStore::open_or_init(&repo, "main").unwrap());
    let mut tasks = Vec::new();
    for w in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let path = sp(&format!("w{w}/s.tfstate"));
            for i in 0..20 {
                let body = format!("{{\"serial\":{i}}}");
                write_retrying(store.as_ref(), &path, body.as_bytes(), &format!("w{w} {i}")).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let count = git(&repo, &["rev-list", "--count", "main"]);
    assert_eq!(count.trim(), "160", "one commit per write, none lost");
    for w in 0..8 {
        assert_eq!(
            git(&repo, &["show", &format!("main:w{w}/s.tfstate")]),
            "{\"serial\":19}"
        );
        let n = git(
            &repo,
            &[
                "rev-list",
                "--count",
                "main",
                "--",
                &format!("w{w}/s.tfstate"),
            ],
        );
        assert_eq!(n.trim(), "20");
    }
    git(&repo, &["fsck", "--strict"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_lockers_one_wins() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("r.git");
    let store: Arc<dyn StateStore> = Arc::new(LocalStore::open_or_init(&repo, "main").unwrap());
    common::concurrent_lockers(store, "prod.tfstate").await;
}
