//! `RemoteStore` against real servers on 127.0.0.1 (`git daemon`, `file://`, lighttpd + `git
//! http-backend` with basic auth), checked with the real git CLI.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{git, sp, write_retrying};
use gitstate_core::{Intent, LockCreate, StateChange, StateStore, StoreError};
use gitstate_git::{RemoteConfig, RemoteStore};
use gitstate_tests::{bare_repo, free_port, GitDaemon, GitHttpServer};
use gitstate_url::Credentials;

fn store(url: &str, cache: &Path, credentials: Option<Credentials>) -> RemoteStore {
    RemoteStore::new(RemoteConfig {
        url: url.to_string(),
        git_ref: "main".into(),
        credentials,
        cache_dir: cache.to_path_buf(),
        timeout: Duration::from_secs(10),
    })
    .unwrap()
}

/// What plain git must see after our pushes: a clean fsck, a clone, one commit per write.
fn check_with_git(bare: &Path, scratch: &Path) {
    git(bare, &["fsck", "--strict", "--no-dangling"]);
    let clone = scratch.join("clone");
    git(
        scratch,
        &[
            "clone",
            "-q",
            bare.to_str().unwrap(),
            clone.to_str().unwrap(),
        ],
    );
    let log = git(&clone, &["log", "--format=%s|%an", "--", "prod.tfstate"]);
    assert_eq!(
        log.lines().collect::<Vec<_>>(),
        vec![
            "Delete prod by test|gitstate",
            "Update prod (serial 2) by test|gitstate",
            "Update prod (serial 1) by test|gitstate",
        ]
    );
    assert_eq!(
        std::fs::read_to_string(clone.join("team/a/prod.tfstate")).unwrap(),
        "nested"
    );
    common::each_commit_changes_one_file(&clone, "HEAD");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn git_daemon_conformance_and_git_reads_it() {
    let repos = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let bare = bare_repo(repos.path(), "states");
    let daemon = GitDaemon::start(repos.path());
    let s = store(&daemon.url("states"), cache.path(), None);
    common::conformance(&s, "").await;
    check_with_git(&bare, repos.path());
    // No lock branches are left behind.
    assert_eq!(git(&bare, &["for-each-ref", "refs/heads/locks/"]), "");
}

/// A write attempt whose advertised tips are not in the cache (another process wrote them)
/// fetches them, keeps its receive-pack session and pushes over it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn session_fetches_tips_missing_from_the_cache() {
    use gitstate_core::Intent;
    let repos = tempfile::tempdir().unwrap();
    let (cache_a, cache_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let bare = bare_repo(repos.path(), "states");
    let daemon = GitDaemon::start(repos.path());
    let a = store(&daemon.url("states"), cache_a.path(), None);
    let b = store(&daemon.url("states"), cache_b.path(), None);
    let path = sp("prod.tfstate");
    let v1 = write_retrying(&a, &path, b"one", "one").await;
    let info = Bytes::from_static(b"{\"ID\":\"x\"}");
    assert_eq!(
        a.create_lock(&path, info.clone(), &gitstate_core::Message::from("Lock"))
            .await,
        Ok(LockCreate::Created)
    );
    let attempt = b.begin(&path, Intent::Write).await.expect("begin");
    assert_eq!(attempt.snapshot().state_tip.as_deref(), Some(v1.as_str()));
    assert_eq!(attempt.snapshot().state.as_deref(), Some(&b"one"[..]));
    assert_eq!(attempt.snapshot().lock, Some(info));
    let v2 = attempt
        .update_state(
            StateChange::Write(Bytes::from_static(b"two")),
            &gitstate_core::Message::from("two"),
        )
        .await
        .expect("write");
    assert_eq!(git(&bare, &["rev-parse", "main"]).trim(), v2);
    assert_eq!(git(&bare, &["show", "main:prod.tfstate"]), "two");
    // The other cache learns it the same way, and unlocks over its session.
    let attempt = a.begin(&path, Intent::Unlock).await.expect("begin");
    attempt.delete_lock().await.expect("unlock");
    assert_eq!(git(&bare, &["for-each-ref", "refs/heads/locks/"]), "");
    let attempt = a.begin(&path, Intent::Write).await.expect("begin");
    assert_eq!(attempt.snapshot().state.as_deref(), Some(&b"two"[..]));
    git(&bare, &["fsck", "--strict", "--no-dangling"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn file_url_conformance_and_git_reads_it() {
    let repos = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let bare = bare_repo(repos.path(), "states");
    let url = format!("file://{}", bare.display());
    let s = store(&url, cache.path(), None);
    common::conformance(&s, "").await;
    check_with_git(&bare, repos.path());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cas_rejected_when_someone_else_moved_the_branch() {
    let repos = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let bare = bare_repo(repos.path(), "states");
    let daemon = GitDaemon::start(repos.path());
    let s = store(&daemon.url("states"), cache.path(), None);
    let path = sp("prod.tfstate");
    let v1 = common::write(
        &s,
        &path,
        StateChange::Write(Bytes::from_static(b"1")),
        "one",
    )
    .await
    .unwrap();
    // A write that read v1 ...
    let at_v1 = s.begin(&path, Intent::Write).await.unwrap();
    assert_eq!(at_v1.snapshot().state_tip.as_deref(), Some(v1.as_str()));
    // ... then another client pushes on top of v1 with the git CLI, changing that state.
    let work = repos.path().join("work");
    git(
        repos.path(),
        &[
            "clone",
            "-q",
            bare.to_str().unwrap(),
            work.to_str().unwrap(),
        ],
    );
    std::fs::write(work.join("prod.tfstate"), "theirs").unwrap();
    std::fs::write(work.join("other.tfstate"), "x").unwrap();
    git(&work, &["add", "prod.tfstate", "other.tfstate"]);
    git(&work, &["commit", "-q", "-m", "other"]);
    git(&work, &["push", "-q", "origin", "main"]);
    let moved = git(&bare, &["rev-parse", "main"]).trim().to_string();
    // Writing from v1 loses, and the branch stays where the other client put it.
    let r = at_v1
        .update_state(
            StateChange::Write(Bytes::from_static(b"2")),
            &gitstate_core::Message::from("two"),
        )
        .await;
    assert_eq!(r, Err(StoreError::Stale));
    assert_eq!(git(&bare, &["rev-parse", "main"]).trim(), moved);
    // A fresh snapshot sees the new tip and the write succeeds on it.
    let snap = s.snapshot(&path).await.unwrap();
    assert_eq!(snap.state_tip.as_deref(), Some(moved.as_str()));
    assert_eq!(snap.state.as_deref(), Some(&b"theirs"[..]));
    common::write(
        &s,
        &path,
        StateChange::Write(Bytes::from_static(b"2")),
        "two",
    )
    .await
    .unwrap();
    assert_eq!(git(&bare, &["show", "main:prod.tfstate"]), "2");
    assert_eq!(git(&bare, &["show", "main:other.tfstate"]), "x");
    git(&bare, &["fsck", "--strict"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_lockers_and_writers_over_git_daemon() {
    let repos = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let bare = bare_repo(repos.path(), "states");
    let daemon = GitDaemon::start(repos.path());
    let s: Arc<dyn StateStore> = Arc::new(store(&daemon.url("states"), cache.path(), None));
    common::concurrent_lockers(s.clone(), "prod.tfstate").await;

    let mut tasks = Vec::new();
    for w in 0..4 {
        // A store per request, as the registry builds them: they share the cache.
        let s: Arc<dyn StateStore> = Arc::new(store(&daemon.url("states"), cache.path(), None));
        tasks.push(tokio::spawn(async move {
            let path = sp(&format!("w{w}/s.tfstate"));
            for i in 0..5 {
                write_retrying(s.as_ref(), &path, format!("{i}").as_bytes(), "w").await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(git(&bare, &["rev-list", "--count", "main"]).trim(), "20");
    for w in 0..4 {
        assert_eq!(git(&bare, &["show", &format!("main:w{w}/s.tfstate")]), "4");
    }
    git(&bare, &["fsck", "--strict"]);
}

/// A repository with `n` commits of history, made with the git CLI.
fn repo_with_history(dir: &Path, name: &str, n: usize) -> std::path::PathBuf {
    let bare = bare_repo(dir, name);
    let work = dir.join(format!("{name}-work"));
    git(
        dir,
        &[
            "clone",
            "-q",
            bare.to_str().unwrap(),
            work.to_str().unwrap(),
        ],
    );
    for i in 0..n {
        std::fs::write(work.join("prod.tfstate"), format!("{{\"serial\":{i}}}")).unwrap();
        git(&work, &["add", "prod.tfstate"]);
        git(&work, &["commit", "-q", "-m", &format!("c{i}")]);
    }
    git(&work, &["push", "-q", "origin", "main"]);
    bare
}

fn cache_commit_count(cache_repo: &Path) -> usize {
    git(cache_repo, &["rev-list", "--all", "--count"])
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shallow_cache_stays_shallow() {
    let repos = tempfile::tempdir().unwrap();
    let over_daemon = repo_with_history(repos.path(), "history", 50);
    let over_file = repo_with_history(repos.path(), "history2", 50);
    let daemon = GitDaemon::start(repos.path());
    for (url, bare) in [
        (daemon.url("history"), over_daemon),
        (format!("file://{}", over_file.display()), over_file.clone()),
    ] {
        let cache = tempfile::tempdir().unwrap();
        let s = store(&url, cache.path(), None);
        let path = sp("prod.tfstate");
        let snap = s.snapshot(&path).await.unwrap();
        assert_eq!(snap.state.as_deref(), Some(&b"{\"serial\":49}"[..]));
        assert_eq!(cache_commit_count(&s.cache_dir()), 1, "{url}: only the tip");
        assert!(s.cache_dir().join("shallow").exists(), "{url}");
        // Our write, then someone else's commit: the cache gets the new tips, never the history.
        common::write(
            &s,
            &path,
            StateChange::Write(Bytes::from_static(b"{}")),
            "w",
        )
        .await
        .unwrap();
        let work = repos.path().join(format!(
            "{}-work",
            bare.file_stem().unwrap().to_str().unwrap()
        ));
        git(&work, &["pull", "-q", "origin", "main"]);
        std::fs::write(work.join("other.tfstate"), "o").unwrap();
        git(&work, &["add", "other.tfstate"]);
        git(&work, &["commit", "-q", "-m", "other"]);
        git(&work, &["push", "-q", "origin", "main"]);
        let snap = s.snapshot(&path).await.unwrap();
        assert_eq!(snap.state.as_deref(), Some(&b"{}"[..]));
        let n = cache_commit_count(&s.cache_dir());
        assert!(n <= 3, "{url}: {n} commits in the cache");
        git(&bare, &["fsck", "--strict"]);
        assert_eq!(git(&bare, &["rev-list", "--count", "main"]).trim(), "52");
    }
}

#[tokio::test]
async fn unreachable_server_is_unavailable() {
    let cache = tempfile::tempdir().unwrap();
    let port = free_port();
    for url in [
        format!("git://127.0.0.1:{port}/x.git"),
        format!("http://127.0.0.1:{port}/git/x.git"),
    ] {
        let s = store(&url, cache.path(), None);
        let started = Instant::now();
        let err = s.snapshot(&sp("a")).await.unwrap_err();
        assert!(matches!(err, StoreError::Unavailable(_)), "{url}: {err:?}");
        let err = common::write(
            &s,
            &sp("a"),
            StateChange::Write(Bytes::from_static(b"x")),
            "m",
        )
        .await
        .unwrap_err();
        assert!(matches!(err, StoreError::Unavailable(_)), "{url}: {err:?}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}

#[tokio::test]
async fn missing_repository_is_a_remote_error() {
    let repos = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let daemon = GitDaemon::start(repos.path());
    let s = store(&daemon.url("nope"), cache.path(), None);
    let err = s.snapshot(&sp("a")).await.unwrap_err();
    assert!(matches!(err, StoreError::Remote(_)), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn smart_http_with_basic_auth() {
    let repos = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let bare = bare_repo(repos.path(), "states");
    let http = GitHttpServer::start(repos.path(), "alice", "s3cret-pw");
    let url = http.url("states");
    let good = Some(Credentials {
        username: "alice".into(),
        password: "s3cret-pw".into(),
    });
    let s = store(&url, cache.path(), good.clone());
    common::conformance(&s, "").await;
    check_with_git(&bare, repos.path());
    let shared: Arc<dyn StateStore> = Arc::new(s);
    common::concurrent_lockers(shared, "other.tfstate").await;

    // Wrong password, no password: Unauthorized, and the password never shows.
    let wrong = store(
        &url,
        cache.path(),
        Some(Credentials {
            username: "alice".into(),
            password: "wrong-pw-123".into(),
        }),
    );
    let err = wrong.snapshot(&sp("prod.tfstate")).await.unwrap_err();
    assert!(matches!(err, StoreError::Unauthorized(_)), "{err:?}");
    assert!(!format!("{err:?}").contains("wrong-pw-123"));
    let err = wrong
        .create_lock(
            &sp("prod.tfstate"),
            Bytes::from_static(b"{}"),
            &gitstate_core::Message::from("m"),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Unauthorized(_)), "{err:?}");
    let none = store(&url, cache.path(), None);
    let err = none.snapshot(&sp("prod.tfstate")).await.unwrap_err();
    assert!(matches!(err, StoreError::Unauthorized(_)), "{err:?}");
    // Credentials inside the URL work and never show in messages.
    let embedded = store(
        &format!(
            "http://alice:s3cret-pw@127.0.0.1:{}/git/states.git",
            http.port()
        ),
        cache.path(),
        None,
    );
    assert_eq!(embedded.url(), url);
    let snap = embedded.snapshot(&sp("team/a/prod.tfstate")).await.unwrap();
    assert_eq!(snap.state.as_deref(), Some(&b"nested"[..]));
    let bad_embedded = store(
        &format!(
            "http://alice:wrong-pw-123@127.0.0.1:{}/git/states.git",
            http.port()
        ),
        cache.path(),
        None,
    );
    let err = bad_embedded.snapshot(&sp("a")).await.unwrap_err();
    assert!(matches!(err, StoreError::Unauthorized(_)), "{err:?}");
    assert!(!err.to_string().contains("wrong-pw-123"), "{err}");

    // Reading is allowed but pushing is forbidden: 403 → Forbidden.
    let ro = store(&http.read_only_url("states"), cache.path(), good.clone());
    let snap = ro.snapshot(&sp("team/a/prod.tfstate")).await.unwrap();
    assert_eq!(snap.state.as_deref(), Some(&b"nested"[..]));
    let err = common::write(
        &ro,
        &sp("team/a/prod.tfstate"),
        StateChange::Write(Bytes::from_static(b"x")),
        "m",
    )
    .await
    .unwrap_err();
    assert!(matches!(err, StoreError::Forbidden(_)), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lock_held_is_reported_without_pushing() {
    let repos = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let bare = bare_repo(repos.path(), "states");
    let daemon = GitDaemon::start(repos.path());
    let s = store(&daemon.url("states"), cache.path(), None);
    let path = sp("env/prod.tfstate");
    assert_eq!(
        s.create_lock(
            &path,
            Bytes::from_static(b"{\"ID\":\"a\"}"),
            &gitstate_core::Message::from("Lock")
        )
        .await
        .unwrap(),
        LockCreate::Created
    );
    // A second process with its own cache sees the lock.
    let other_cache = tempfile::tempdir().unwrap();
    let other = store(&daemon.url("states"), other_cache.path(), None);
    let held = other
        .create_lock(
            &path,
            Bytes::from_static(b"{\"ID\":\"b\"}"),
            &gitstate_core::Message::from("Lock"),
        )
        .await
        .unwrap();
    let tip = git(&bare, &["rev-parse", "refs/heads/locks/env/prod.tfstate"]);
    assert_eq!(
        held,
        LockCreate::Held {
            tip: tip.trim().to_string(),
            content: Bytes::from_static(b"{\"ID\":\"a\"}")
        }
    );
    assert_eq!(
        git(
            &bare,
            &["show", "locks/env/prod.tfstate:env/prod.tfstate.lock"]
        ),
        "{\"ID\":\"a\"}"
    );
    other
        .delete_lock(&path, &tip.trim().to_string())
        .await
        .unwrap();
    assert_eq!(git(&bare, &["for-each-ref", "refs/heads/locks/"]), "");
}

#[tokio::test]
async fn refused_push_is_a_remote_error_with_the_reason() {
    use std::os::unix::fs::PermissionsExt;
    let repos = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let bare = bare_repo(repos.path(), "states");
    let hook = bare.join("hooks/pre-receive");
    std::fs::write(
        &hook,
        "#!/bin/sh\necho 'states are frozen today' >&2\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let daemon = GitDaemon::start(repos.path());
    let s = store(&daemon.url("states"), cache.path(), None);
    let err = common::write(
        &s,
        &sp("a.tfstate"),
        StateChange::Write(Bytes::from_static(b"x")),
        "m",
    )
    .await
    .unwrap_err();
    match err {
        StoreError::Remote(m) => {
            assert!(m.contains("pre-receive hook declined"), "{m}");
            assert!(m.contains("states are frozen today"), "{m}");
        }
        other => panic!("expected Remote, got {other:?}"),
    }
    assert_eq!(git(&bare, &["for-each-ref"]), "");
}

/// Medians of warm operations per transport; run with `--ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn latency() {
    let repos = tempfile::tempdir().unwrap();
    let bare = bare_repo(repos.path(), "states");
    let daemon = GitDaemon::start(repos.path());
    let http = GitHttpServer::start(repos.path(), "u", "p");
    let urls = vec![
        ("git://", daemon.url("states"), None),
        ("file://", format!("file://{}", bare.display()), None),
        (
            "http",
            http.url("states"),
            Some(Credentials {
                username: "u".into(),
                password: "p".into(),
            }),
        ),
    ];
    let big = Bytes::from(vec![b'x'; 1 << 20]);
    for (name, url, creds) in urls {
        let cache = tempfile::tempdir().unwrap();
        let s = store(&url, cache.path(), creds);
        let path = sp(&format!("{}.tfstate", name.trim_end_matches("://")));
        let median = |mut v: Vec<Duration>| {
            v.sort();
            v[v.len() / 2]
        };
        let (mut snaps, mut pushes, mut big_pushes, mut locks) = (vec![], vec![], vec![], vec![]);
        for i in 0..15 {
            let t = Instant::now();
            s.snapshot(&path).await.unwrap();
            snaps.push(t.elapsed());
            let t = Instant::now();
            let small = StateChange::Write(Bytes::from(format!("{{\"serial\":{i}}}")));
            common::write(&s, &path, small, "m").await.unwrap();
            pushes.push(t.elapsed());
            let mut body = big.to_vec();
            body[0] = b'0' + (i % 10) as u8;
            let t = Instant::now();
            common::write(&s, &path, StateChange::Write(body.into()), "m")
                .await
                .unwrap();
            big_pushes.push(t.elapsed());
            let t = Instant::now();
            assert_eq!(
                s.create_lock(
                    &path,
                    Bytes::from_static(b"{}"),
                    &gitstate_core::Message::from("l")
                )
                .await
                .unwrap(),
                LockCreate::Created
            );
            let gitstate_core::LockRead { tip, .. } = s.read_lock(&path).await.unwrap().unwrap();
            s.delete_lock(&path, &tip).await.unwrap();
            locks.push(t.elapsed());
        }
        println!(
            "{name:8} snapshot (tip unchanged) {:?} | push small {:?} | push 1 MB {:?} | lock+read+unlock {:?}",
            median(snaps),
            median(pushes),
            median(big_pushes),
            median(locks)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_for_another_process_holding_the_cache_lock() {
    let repos = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let bare = repo_with_history(repos.path(), "h", 3);
    let s = store(&format!("file://{}", bare.display()), cache.path(), None);
    // What a concurrent fetch of another process looks like.
    let lock = s.cache_dir().join("shallow.lock");
    std::fs::write(&lock, "").unwrap();
    let releaser = {
        let lock = lock.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            std::fs::remove_file(lock).unwrap();
        })
    };
    let snap = s.snapshot(&sp("prod.tfstate")).await.unwrap();
    assert_eq!(snap.state.as_deref(), Some(&b"{\"serial\":2}"[..]));
    releaser.join().unwrap();
}

/// 50,000 states made with fast-import, read, written, locked and listed over `git://`,
/// `file://` and smart HTTP, each through its own cache (DESIGN §9.5).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_states_on_every_transport() {
    let repos = tempfile::tempdir().unwrap();
    let bare = bare_repo(repos.path(), "many");
    common::seed_many(&bare);
    let daemon = GitDaemon::start(repos.path());
    let http = GitHttpServer::start(repos.path(), "alice", "s3cret-pw");
    let credentials = Some(Credentials {
        username: "alice".into(),
        password: "s3cret-pw".into(),
    });
    let transports = [
        (daemon.url("many"), None),
        (format!("file://{}", bare.display()), None),
        (http.url("many"), credentials),
    ];
    for (round, (url, credentials)) in transports.into_iter().enumerate() {
        let cache = tempfile::tempdir().unwrap();
        let s = store(&url, cache.path(), credentials);
        common::many_states(&s, &bare, &s.cache_dir(), round).await;
    }
    git(&bare, &["fsck", "--strict", "--no-dangling"]);
}

/// A lock taken above the path between the LOCK's read and its push (another locker won the
/// race: a pre-receive hook creates `locks/race` as the push of `locks/race/x` arrives) makes git
/// refuse the ref, in words that read as a lost compare-and-swap ("failed to update ref"). On
/// every transport the LOCK is then answered from the next advertisement: `Unwritable` naming the
/// lock above, no lock of its own; before, that was `Stale`, a 503 Terraform retried. Over smart
/// HTTP the refused push is the one-request LOCK (the cache recorded the state tip); over git
/// daemon and `file://` the push after the advertisement.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lock_taken_above_during_the_push_is_unwritable_on_every_transport() {
    use gitstate_core::PathConflict;
    let repos = tempfile::tempdir().unwrap();
    let daemon = GitDaemon::start(repos.path());
    let http = GitHttpServer::start(repos.path(), "alice", "s3cret-pw");
    let credentials = Some(Credentials {
        username: "alice".into(),
        password: "s3cret-pw".into(),
    });
    for transport in ["git daemon", "file://", "smart HTTP"] {
        let name = transport.replace(|c: char| !c.is_ascii_alphanumeric(), "");
        let bare = bare_repo(repos.path(), &name);
        let cache = tempfile::tempdir().unwrap();
        let s = match transport {
            "git daemon" => store(&daemon.url(&name), cache.path(), None),
            "file://" => store(&format!("file://{}", bare.display()), cache.path(), None),
            _ => store(&http.url(&name), cache.path(), credentials.clone()),
        };
        write_retrying(&s, &sp("race.tfstate"), b"{}", "seed").await;
        // Warm: the cache knows the tip and the server's capabilities.
        assert!(s.snapshot(&sp("race.tfstate")).await.is_ok());
        let hook = bare.join("hooks/pre-receive");
        std::fs::write(
            &hook,
            "#!/bin/sh\nwhile read old new ref; do\n  if [ \"$ref\" = refs/heads/locks/race/x ]; then\n    \
             env -u GIT_QUARANTINE_PATH git update-ref refs/heads/locks/race \"$(git rev-parse main)\" ''\n  \
             fi\ndone\nexit 0\n",
        )
        .unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let created = s
            .create_lock(
                &sp("race/x"),
                Bytes::from_static(b"{\"ID\":\"r\"}"),
                &gitstate_core::Message::from("Lock"),
            )
            .await;
        assert_eq!(
            created,
            Ok(LockCreate::Unwritable(PathConflict::LockAbove {
                path: "race/x".into(),
                above: "race".into()
            })),
            "{transport}"
        );
        let locks = git(
            &bare,
            &["for-each-ref", "--format=%(refname)", "refs/heads/locks/"],
        );
        assert_eq!(locks.trim(), "refs/heads/locks/race", "{transport}");
    }
}
