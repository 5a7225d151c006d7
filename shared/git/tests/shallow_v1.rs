//! The protocol-v1 shallow trap: a server that ignores the request for protocol v2 (ssh without
//! `AcceptEnv GIT_PROTOCOL`, an HTTP proxy dropping `Git-Protocol`) must still give a depth-1
//! cache, not the whole history. Simulated for `file://` with a `git-upload-pack` on PATH that
//! drops `GIT_PROTOCOL`. Its own test binary because it changes PATH.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use common::{git, sp};
use gitstate_git::{RemoteConfig, RemoteStore};
use gitstate_tests::bare_repo;

#[tokio::test]
async fn shallow_fetch_over_protocol_v1_stays_shallow() {
    let dir = tempfile::tempdir().unwrap();
    let bare = bare_repo(dir.path(), "history");
    let work = dir.path().join("work");
    git(
        dir.path(),
        &[
            "clone",
            "-q",
            bare.to_str().unwrap(),
            work.to_str().unwrap(),
        ],
    );
    for i in 0..50 {
        std::fs::write(work.join("prod.tfstate"), format!("{i}")).unwrap();
        git(&work, &["add", "prod.tfstate"]);
        git(&work, &["commit", "-q", "-m", &format!("c{i}")]);
    }
    git(&work, &["push", "-q", "origin", "main"]);

    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let exec_path = git(dir.path(), &["--exec-path"]).trim().to_string();
    let marker = dir.path().join("v1-served");
    let wrapper = bin.join("git-upload-pack");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nunset GIT_PROTOCOL\necho served >> '{}'\nexec '{}/git-upload-pack' \"$@\"\n",
            marker.display(),
            exec_path
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = std::env::var("PATH").unwrap_or_default();
    std::env::set_var("PATH", format!("{}:{path}", bin.display()));

    let cache = tempfile::tempdir().unwrap();
    let store = RemoteStore::new(RemoteConfig {
        url: format!("file://{}", bare.display()),
        git_ref: "main".into(),
        credentials: None,
        cache_dir: cache.path().to_path_buf(),
        timeout: Duration::from_secs(10),
    })
    .unwrap();
    let snap = gitstate_core::StateStore::snapshot(&store, &sp("prod.tfstate"))
        .await
        .unwrap();
    assert_eq!(snap.state.as_deref(), Some(&b"49"[..]));
    assert!(marker.exists(), "the v1-only upload-pack served the fetch");
    let count = git(&store.cache_dir(), &["rev-list", "--all", "--count"]);
    assert_eq!(
        count.trim(),
        "1",
        "depth 1 over protocol v1, not the history"
    );
    assert!(store.cache_dir().join("shallow").exists());
}
