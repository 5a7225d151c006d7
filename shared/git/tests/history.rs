//! History, listings and locks of both stores, checked against what the real git CLI says about
//! the same repository: `git log -- path`, `git ls-tree`, `git show`, `git for-each-ref`.

mod common;

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use common::{git, sp, write_retrying};
use gitstate_core::{ListQuery, LockCreate, StateStore};
use gitstate_git::{LocalStore, RemoteConfig, RemoteStore};
use gitstate_tests::{bare_repo, bare_repo_without_filter, GitDaemon};

/// A repository whose history mixes gitstate's writes with plain git commits (a deletion, a
/// re-creation, other files, a nested path), made through `store` and a clone of `bare`.
async fn build_history(store: &dyn StateStore, bare: &Path, scratch: &Path) {
    for serial in 1..=3 {
        write_retrying(
            store,
            &sp("prod.tfstate"),
            format!("{{\"serial\":{serial}}}").as_bytes(),
            &format!("Update prod.tfstate (serial {serial}) by alice"),
        )
        .await;
        write_retrying(
            store,
            &sp("team/b.tfstate"),
            format!("{{\"b\":{serial}}}").as_bytes(),
            "Update team/b.tfstate by bob",
        )
        .await;
    }
    let work = scratch.join("work");
    git(
        scratch,
        &[
            "clone",
            "-q",
            bare.to_str().unwrap(),
            work.to_str().unwrap(),
        ],
    );
    git(&work, &["rm", "-q", "prod.tfstate"]);
    git(&work, &["commit", "-q", "-m", "Delete by hand"]);
    std::fs::write(work.join("other.tfstate"), "other").unwrap();
    git(&work, &["add", "other.tfstate"]);
    git(&work, &["commit", "-q", "-m", "Other by hand"]);
    std::fs::write(work.join("prod.tfstate"), "{\"serial\":10}").unwrap();
    git(&work, &["add", "prod.tfstate"]);
    git(&work, &["commit", "-q", "-m", "Recreate by hand"]);
    git(&work, &["push", "-q", "origin", "HEAD:main"]);
    write_retrying(
        store,
        &sp("prod.tfstate"),
        b"{\"serial\":11}",
        "Update prod.tfstate (serial 11) by carol",
    )
    .await;
}

/// Everything the store reports equals what git reports.
async fn agrees_with_git(store: &dyn StateStore, bare: &Path) {
    for path in [
        "prod.tfstate",
        "team/b.tfstate",
        "other.tfstate",
        "never.tfstate",
    ] {
        let versions = store.history(&sp(path), 100).await.expect("history");
        let log = git(
            bare,
            &["log", "--first-parent", "--format=%H", "main", "--", path],
        );
        let expected: Vec<&str> = log.lines().collect();
        let got: Vec<&str> = versions.iter().map(|v| v.commit.as_str()).collect();
        assert_eq!(got, expected, "history of {path}");
        for version in &versions {
            let spec = format!("{}:{path}", version.commit);
            match version.size {
                Some(size) => {
                    let content = git(bare, &["show", &spec]);
                    assert_eq!(size, content.len() as u64, "{spec}");
                    let read = store
                        .read_version(&sp(path), &version.commit)
                        .await
                        .expect("read_version");
                    assert_eq!(read.as_deref(), Some(content.as_bytes()), "{spec}");
                }
                None => {
                    // A deletion: the file is gone in that commit.
                    assert!(!common::git_ok(bare, &["cat-file", "-e", &spec]), "{spec}");
                }
            }
            let subject = git(bare, &["log", "-1", "--format=%s|%an|%ct", &version.commit]);
            assert_eq!(
                subject.trim(),
                format!(
                    "{}|{}|{}",
                    version.message.trim(),
                    version.author,
                    version.time
                )
            );
        }
        // A limit keeps the newest.
        let newest = store.history(&sp(path), 2).await.expect("history");
        assert_eq!(newest, versions.into_iter().take(2).collect::<Vec<_>>());
    }
    let prod = store.history(&sp("prod.tfstate"), 100).await.unwrap();
    assert_eq!(
        prod.len(),
        6,
        "3 writes, a deletion, a re-creation, a write"
    );
    assert_eq!(prod[0].message, "Update prod.tfstate (serial 11) by carol");
    assert_eq!(prod[2].size, None, "the deletion");

    let listed = store
        .list_states(&ListQuery::all())
        .await
        .expect("list_states")
        .states;
    let files = git(bare, &["ls-tree", "-r", "--name-only", "main"]);
    // Page by page (two at a time, after the last path of each), the same files, each page
    // counting them all.
    let mut paged = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let query = ListQuery {
            prefix: String::new(),
            after: after.clone(),
            limit: 2,
        };
        let page = store.list_states(&query).await.expect("a page");
        assert_eq!(page.total, listed.len());
        paged.extend(page.states.iter().cloned());
        match page.next() {
            Some(next) => after = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(paged, listed);
    // A folder's page: what git lists in it.
    if let Some(folder) = listed
        .iter()
        .find_map(|l| l.path.rsplit_once('/').map(|(f, _)| format!("{f}/")))
    {
        let query = ListQuery {
            prefix: folder.clone(),
            ..ListQuery::all()
        };
        let page = store.list_states(&query).await.expect("a folder");
        let in_git = git(bare, &["ls-tree", "-r", "--name-only", "main", &folder]);
        assert_eq!(
            page.states
                .iter()
                .map(|l| l.path.as_str())
                .collect::<Vec<_>>(),
            in_git.lines().collect::<Vec<_>>()
        );
        assert_eq!(page.total, in_git.lines().count());
    }
    assert_eq!(
        listed.iter().map(|l| l.path.as_str()).collect::<Vec<_>>(),
        files.lines().collect::<Vec<_>>()
    );
    for entry in &listed {
        let last = git(
            bare,
            &["log", "-1", "--format=%H", "main", "--", &entry.path],
        );
        let change = entry.last_change.as_ref().expect("last change");
        assert_eq!(change.commit, last.trim(), "{}", entry.path);
        let size = git(bare, &["cat-file", "-s", &format!("main:{}", entry.path)]);
        assert_eq!(entry.size.to_string(), size.trim());
    }
    // Not a commit of the repository, or a commit without the file: nothing.
    let missing = "0123456789abcdef0123456789abcdef01234567".to_string();
    assert_eq!(
        store.read_version(&sp("prod.tfstate"), &missing).await,
        Ok(None)
    );
    assert_eq!(
        store
            .read_version(&sp("never.tfstate"), &prod[0].commit)
            .await,
        Ok(None)
    );
}

/// Locks are listed with their LockInfo, as `git for-each-ref` shows the branches.
async fn lists_locks(store: &dyn StateStore, bare: &Path) {
    assert_eq!(store.list_locks().await.unwrap(), vec![]);
    for path in ["prod.tfstate", "team/b.tfstate"] {
        let info = format!("{{\"ID\":\"id-{path}\",\"Who\":\"w\"}}");
        let created = store
            .create_lock(
                &sp(path),
                Bytes::from(info),
                &gitstate_core::Message::from("Lock"),
            )
            .await
            .unwrap();
        assert_eq!(created, LockCreate::Created);
    }
    // A branch under locks/ that is not a state path is not a lock.
    git(bare, &["branch", "locks/not+a+state", "main"]);
    let locks = store.list_locks().await.unwrap();
    let refs = git(
        bare,
        &[
            "for-each-ref",
            "--format=%(refname)|%(objectname)",
            "refs/heads/locks/",
        ],
    );
    let expected: Vec<String> = refs
        .lines()
        .filter(|l| !l.contains("not+a+state"))
        .map(str::to_owned)
        .collect();
    let got: Vec<String> = locks
        .iter()
        .map(|l| format!("refs/heads/locks/{}|{}", l.path, l.tip))
        .collect();
    assert_eq!(got, expected);
    assert_eq!(
        &locks[1].content[..],
        b"{\"ID\":\"id-team/b.tfstate\",\"Who\":\"w\"}"
    );
    let tip = locks[0].tip.clone();
    store.delete_lock(&sp("prod.tfstate"), &tip).await.unwrap();
    let locks = store.list_locks().await.unwrap();
    assert_eq!(locks.len(), 1);
    assert_eq!(locks[0].path, "team/b.tfstate");
}

#[tokio::test]
async fn local_store_history_matches_git() {
    let dir = tempfile::tempdir().unwrap();
    let bare = dir.path().join("default.git");
    let store = LocalStore::open_or_init(&bare, "main").unwrap();
    assert_eq!(store.history(&sp("prod.tfstate"), 10).await, Ok(vec![]));
    assert_eq!(
        store.list_states(&ListQuery::all()).await,
        Ok(Default::default())
    );
    build_history(&store, &bare, dir.path()).await;
    agrees_with_git(&store, &bare).await;
    lists_locks(&store, &bare).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn remote_store_history_matches_git_with_and_without_partial_fetch() {
    let repos = tempfile::tempdir().unwrap();
    let daemon = GitDaemon::start(repos.path());
    // The history cache fetches commits and trees, and the blobs it reads by id; from a server
    // without partial fetch, whole (DESIGN §9.5).
    for name in ["over-daemon", "over-file", "over-daemon-without-filter"] {
        let bare = match name {
            "over-daemon-without-filter" => bare_repo_without_filter(repos.path(), name),
            _ => bare_repo(repos.path(), name),
        };
        let url = match name {
            "over-file" => format!("file://{}", bare.display()),
            _ => daemon.url(name),
        };
        let cache = tempfile::tempdir().unwrap();
        let store = RemoteStore::new(RemoteConfig {
            url: url.clone(),
            git_ref: "main".into(),
            credentials: None,
            cache_dir: cache.path().to_path_buf(),
            timeout: Duration::from_secs(20),
        })
        .unwrap();
        assert_eq!(
            store.history(&sp("prod.tfstate"), 10).await,
            Ok(vec![]),
            "{url}"
        );
        let scratch = repos.path().join(format!("{name}-scratch"));
        std::fs::create_dir_all(&scratch).unwrap();
        build_history(&store, &bare, &scratch).await;
        agrees_with_git(&store, &bare).await;
        lists_locks(&store, &bare).await;
        // The request cache still holds no history: its commits are tips only.
        store.snapshot(&sp("prod.tfstate")).await.unwrap();
        assert!(store.cache_dir().join("shallow").exists(), "{url}");
        // New commits reach the history cache on the next call.
        write_retrying(
            &store,
            &sp("prod.tfstate"),
            b"{\"serial\":12}",
            "Update prod.tfstate (serial 12) by dave",
        )
        .await;
        let versions = store.history(&sp("prod.tfstate"), 1).await.unwrap();
        assert_eq!(
            versions[0].message, "Update prod.tfstate (serial 12) by dave",
            "{url}"
        );
        git(&bare, &["fsck", "--strict"]);
    }
}
