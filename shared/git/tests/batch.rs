//! Group commit (DESIGN §9.2) against a real `git daemon`, checked with the git CLI: writes of
//! one process that wait together share one push, each stays its own commit, and a write whose
//! own conditions fail is answered on its own.
//!
//! The tests run on a current-thread runtime: every write joins the queue before the batch's
//! driver task first runs, so the batch is formed deterministically (no timing involved).

mod common;

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use common::{git, sp};
use gitstate_core::{Intent, LockCreate, StateChange, StateStore, StoreError};
use gitstate_git::{RemoteConfig, RemoteStore};
use gitstate_tests::{bare_repo, GitDaemon};

fn store(url: &str, cache: &Path) -> RemoteStore {
    RemoteStore::new(RemoteConfig {
        url: url.to_string(),
        git_ref: "main".into(),
        credentials: None,
        cache_dir: cache.to_path_buf(),
        timeout: Duration::from_secs(20),
    })
    .unwrap()
}

fn write(body: &str) -> StateChange {
    StateChange::Write(Bytes::from(body.to_owned()))
}

/// How many times `refs/heads/main` was updated (its reflog, which the repository keeps).
fn ref_updates(bare: &Path) -> usize {
    git(bare, &["reflog", "show", "--format=%H", "refs/heads/main"])
        .lines()
        .count()
}

/// A bare repository that keeps a reflog of its branches (to count pushes), with one commit.
fn repository(dir: &Path, daemon_url: &dyn Fn(&str) -> String) -> (std::path::PathBuf, String) {
    let bare = bare_repo(dir, "states");
    git(&bare, &["config", "core.logAllRefUpdates", "always"]);
    (bare, daemon_url("states"))
}

/// A git daemon serving [`repository`], a store on it with its own cache, and one state written
/// (`seed.tfstate`). The directories and the daemon live as long as the first two values.
async fn seeded() -> (
    (tempfile::TempDir, tempfile::TempDir),
    GitDaemon,
    std::path::PathBuf,
    RemoteStore,
) {
    let repos = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let daemon = GitDaemon::start(repos.path());
    let (bare, url) = repository(repos.path(), &|n| daemon.url(n));
    let s = store(&url, cache.path());
    common::write_retrying(&s, &sp("seed.tfstate"), b"{}", "Seed").await;
    ((repos, cache), daemon, bare, s)
}

#[tokio::test(flavor = "current_thread")]
async fn writes_waiting_together_share_one_push_and_each_is_its_own_commit() {
    let (_dirs, _daemon, bare, s) = seeded().await;
    let updates_before = ref_updates(&bare);

    const N: usize = 12;
    let mut attempts = Vec::new();
    for i in 0..N {
        let path = sp(&format!("team/w{i:02}.tfstate"));
        let attempt = s.begin(&path, Intent::Write).await.expect("begin");
        attempts.push((i, attempt));
    }
    let answers = futures_join(attempts.into_iter().map(|(i, attempt)| async move {
        let body = format!("{{\"serial\":{}}}", i + 2);
        let message = format!(
            "Update team/w{i:02}.tfstate (serial {}) by writer-{i}",
            i + 2
        );
        (
            i,
            attempt
                .update_state(
                    write(&body),
                    &gitstate_core::Message::from(message.as_str()),
                )
                .await,
        )
    }))
    .await;

    // One push carried all of them.
    assert_eq!(ref_updates(&bare), updates_before + 1, "one ref update");
    let tip = git(&bare, &["rev-parse", "main"]).trim().to_owned();
    for (i, answer) in &answers {
        let commit = answer.as_ref().expect("every write is made");
        // Answered with a commit that is on the branch.
        assert!(
            common::git_ok(&bare, &["merge-base", "--is-ancestor", commit, "main"]),
            "writer {i}'s commit {commit} is on main"
        );
        // Its own commit: its message, one file changed, that file's content.
        let subject = git(&bare, &["log", "-1", "--format=%s|%an", commit]);
        assert_eq!(
            subject.trim(),
            format!(
                "Update team/w{i:02}.tfstate (serial {}) by writer-{i}|gitstate",
                i + 2
            )
        );
        let files = git(&bare, &["show", "--format=", "--name-only", commit]);
        assert_eq!(files.trim(), format!("team/w{i:02}.tfstate"));
        let content = git(&bare, &["show", &format!("main:team/w{i:02}.tfstate")]);
        assert_eq!(content, format!("{{\"serial\":{}}}", i + 2));
    }
    // A chain of N commits on the old tip, nothing else.
    let new_commits = git(&bare, &["rev-list", "--count", "main", "^main@{1}"]);
    assert_eq!(new_commits.trim(), N.to_string());
    assert!(answers
        .iter()
        .any(|(_, a)| a.as_deref() == Ok(tip.as_str())));
    git(&bare, &["fsck", "--strict", "--no-dangling"]);
}

#[tokio::test(flavor = "current_thread")]
async fn a_write_whose_own_conditions_fail_is_answered_alone_and_the_others_land() {
    let repos = tempfile::tempdir().unwrap();
    let (cache, other_cache) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let daemon = GitDaemon::start(repos.path());
    let (bare, url) = repository(repos.path(), &|n| daemon.url(n));
    let s = store(&url, cache.path());
    // Another process (its own cache) writes to the same branch.
    let other = store(&url, other_cache.path());
    common::write_retrying(&s, &sp("file.tfstate"), b"{\"serial\":1}", "Seed file").await;
    common::write_retrying(&s, &sp("changed.tfstate"), b"{\"serial\":1}", "Seed").await;

    let ok_a = s.begin(&sp("a.tfstate"), Intent::Write).await.unwrap();
    // Its path needs a directory where the repository has a file: a conflict, for it alone.
    let conflict = s
        .begin(&sp("file.tfstate/x.tfstate"), Intent::Write)
        .await
        .unwrap();
    // Read, then another process changes that state: its condition (the file it read) fails.
    let changed = s
        .begin(&sp("changed.tfstate"), Intent::Write)
        .await
        .unwrap();
    // Read unlocked, then someone takes its lock: its condition (the lock it read) fails.
    let locked = s.begin(&sp("locked.tfstate"), Intent::Write).await.unwrap();
    let ok_b = s.begin(&sp("b.tfstate"), Intent::Write).await.unwrap();
    common::write_retrying(
        &other,
        &sp("changed.tfstate"),
        b"{\"serial\":7}",
        "Update changed.tfstate (serial 7) by other",
    )
    .await;
    assert_eq!(
        other
            .create_lock(
                &sp("locked.tfstate"),
                Bytes::from_static(b"{\"ID\":\"x\"}"),
                &gitstate_core::Message::from("Lock")
            )
            .await,
        Ok(LockCreate::Created)
    );

    let messages: Vec<gitstate_core::Message> = [
        "Update a.tfstate by t",
        "Update file.tfstate/x.tfstate by t",
        "Update changed.tfstate (serial 2) by t",
        "Update locked.tfstate by t",
        "Update b.tfstate by t",
    ]
    .into_iter()
    .map(gitstate_core::Message::from)
    .collect();
    let (a, c, ch, l, b) = (
        ok_a.update_state(write("{\"a\":1}"), &messages[0]),
        conflict.update_state(write("{\"x\":1}"), &messages[1]),
        changed.update_state(write("{\"serial\":2}"), &messages[2]),
        locked.update_state(write("{\"l\":1}"), &messages[3]),
        ok_b.update_state(write("{\"b\":1}"), &messages[4]),
    );
    let (a, c, ch, l, b) = tokio::join!(a, c, ch, l, b);

    assert!(matches!(c, Err(StoreError::Conflict(_))), "{c:?}");
    assert_eq!(ch, Err(StoreError::Stale), "the state changed under it");
    assert_eq!(l, Err(StoreError::Stale), "its lock changed under it");
    let (a, b) = (a.expect("a is made"), b.expect("b is made"));
    for commit in [&a, &b] {
        assert!(common::git_ok(
            &bare,
            &["merge-base", "--is-ancestor", commit, "main"]
        ));
    }
    assert_eq!(git(&bare, &["show", "main:a.tfstate"]), "{\"a\":1}");
    assert_eq!(git(&bare, &["show", "main:b.tfstate"]), "{\"b\":1}");
    // The others left the remote as it was for them.
    assert_eq!(
        git(&bare, &["show", "main:changed.tfstate"]),
        "{\"serial\":7}"
    );
    assert!(!common::git_ok(
        &bare,
        &["cat-file", "-e", "main:locked.tfstate"]
    ));
    assert_eq!(git(&bare, &["show", "main:file.tfstate"]), "{\"serial\":1}");
    let subjects = git(&bare, &["log", "--format=%s", "main"]);
    assert_eq!(
        subjects
            .lines()
            .filter(|s| s.ends_with(" by t"))
            .collect::<Vec<_>>()
            .len(),
        2,
        "exactly the two good writes were made: {subjects}"
    );

    // The stale one, read again (what the protocol does), goes through.
    let again = s
        .begin(&sp("changed.tfstate"), Intent::Write)
        .await
        .unwrap();
    assert_eq!(
        again.snapshot().state.as_deref(),
        Some(&b"{\"serial\":7}"[..])
    );
    again
        .update_state(
            write("{\"serial\":8}"),
            &gitstate_core::Message::from("Update changed.tfstate (serial 8) by t"),
        )
        .await
        .expect("the re-read write is made");
    git(&bare, &["fsck", "--strict", "--no-dangling"]);
}

#[tokio::test(flavor = "current_thread")]
async fn a_write_whose_deadline_passed_is_not_pushed_and_the_others_are() {
    use gitstate_core::WriteBudget;
    let (_dirs, _daemon, bare, s) = seeded().await;
    let tip_before = git(&bare, &["rev-parse", "main"]);

    let on_time = s
        .begin(&sp("on-time.tfstate"), Intent::Write)
        .await
        .unwrap();
    let mut late = s.begin(&sp("late.tfstate"), Intent::Write).await.unwrap();
    let now = std::time::Instant::now();
    late.set_budget(WriteBudget {
        since: now,
        deadline: now,
    });
    let (on_time_message, late_message) = (
        gitstate_core::Message::from("Update on-time.tfstate by t"),
        gitstate_core::Message::from("Update late.tfstate by t"),
    );
    let (made, busy) = tokio::join!(
        on_time.update_state(write("{\"ok\":1}"), &on_time_message),
        late.update_state(write("{\"late\":1}"), &late_message),
    );
    assert!(matches!(busy, Err(StoreError::Busy(_))), "{busy:?}");
    let made = made.expect("the write on time is made");
    let log = git(
        &bare,
        &[
            "log",
            "--format=%H %s",
            &format!("{}..main", tip_before.trim()),
        ],
    );
    assert_eq!(log.trim(), format!("{made} Update on-time.tfstate by t"));
    assert!(!common::git_ok(
        &bare,
        &["cat-file", "-e", "main:late.tfstate"]
    ));
}

/// Polls all futures together on the current task (no spawning), keeping their order.
async fn futures_join<F: std::future::Future>(futures: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut pinned: Vec<_> = futures.map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = pinned.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, output) in pinned.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(value) => *output = Some(value),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}
