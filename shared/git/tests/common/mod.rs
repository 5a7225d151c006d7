//! Helpers shared by this crate's integration tests: the store conformance suite, and running
//! the real git CLI to set up and check repositories (through `gitstate_tests`, the harness the
//! end-to-end tests use too; its git servers are used directly). Product code never runs git;
//! tests may.

#![allow(dead_code)]

use std::path::Path;

use gitstate_core::{Intent, LockRead, StatePath};

/// Runs `git args…` in `dir` and returns its stdout; panics with its output when git fails.
pub fn git(dir: &Path, args: &[&str]) -> String {
    gitstate_tests::git(Some(dir), args)
}

/// Like [`git`] but returns whether it succeeded instead of panicking.
pub fn git_ok(dir: &Path, args: &[&str]) -> bool {
    gitstate_tests::git_output(Some(dir), args).status.success()
}

/// A parsed state path.
pub fn sp(raw: &str) -> StatePath {
    StatePath::parse(raw).expect("valid path")
}

/// Checks that every commit of `rev` in `repo` changes one file, but a workspace's delete (its
/// state and its record, or the record alone).
pub fn each_commit_changes_one_file(repo: &Path, rev: &str) {
    for commit in git(repo, &["rev-list", rev]).lines() {
        let files = git(
            repo,
            &["show", "--format=", "--name-only", "--root", commit],
        );
        let subject = git(repo, &["show", "-s", "--format=%s", commit]);
        let most = if subject.starts_with("Delete workspace") {
            2
        } else {
            1
        };
        let count = files.lines().count();
        assert!(
            (1..=most).contains(&count),
            "commit {commit} ({subject}): {count} files"
        );
    }
}

/// Writes `change` to `path` the one way a state is written: an attempt begun now
/// ([`Intent::Write`]: a fresh read), then its compare-and-swap.
pub async fn write(
    store: &dyn gitstate_core::StateStore,
    path: &StatePath,
    change: gitstate_core::StateChange,
    message: &str,
) -> Result<gitstate_core::Revision, gitstate_core::StoreError> {
    let attempt = store.begin(path, Intent::Write).await?;
    attempt
        .update_state(change, &gitstate_core::Message::from(message))
        .await
}

/// Writes `content` to `path` from a fresh read, retrying while other writers move the
/// branch (what the protocol layer does).
pub async fn write_retrying(
    store: &dyn gitstate_core::StateStore,
    path: &StatePath,
    content: &[u8],
    message: &str,
) -> String {
    for _ in 0..500 {
        let change = gitstate_core::StateChange::Write(bytes::Bytes::copy_from_slice(content));
        match write(store, path, change, message).await {
            Ok(rev) => return rev,
            Err(gitstate_core::StoreError::Stale) => {
                tokio::time::sleep(std::time::Duration::from_millis(rand::random::<u64>() % 20))
                    .await
            }
            Err(e) => panic!("write failed: {e}"),
        }
    }
    panic!("too many retries")
}

/// The behaviour every store must show, whatever the transport: missing state, write, replace,
/// nested path, delete, compare-and-swap rejection, lock create/held/delete. Uses paths under
/// `prefix` so several runs can share one repository.
pub async fn conformance(store: &dyn gitstate_core::StateStore, prefix: &str) {
    use bytes::Bytes;
    use gitstate_core::{LockCreate, StateChange, StoreError};

    let path = sp(&format!("{prefix}prod.tfstate"));
    let nested = sp(&format!("{prefix}team/a/prod.tfstate"));

    // Missing state.
    let snap = store.snapshot(&path).await.expect("snapshot");
    assert_eq!(snap.state, None);
    assert_eq!(snap.lock_tip, None);
    assert_eq!(snap.lock, None);
    assert_eq!(
        store.current_state(&path).await.expect("current state"),
        None
    );

    // An attempt begun before the branch exists: its write must later be refused.
    let creator = store.begin(&path, Intent::Write).await.expect("begin");

    // Write, then replace.
    let v1 = write(
        store,
        &path,
        StateChange::Write(Bytes::from_static(b"{\"serial\":1}")),
        "Update prod (serial 1) by test",
    )
    .await
    .expect("first write");
    let snap = store.snapshot(&path).await.expect("snapshot");
    assert_eq!(snap.state_tip.as_deref(), Some(v1.as_str()));
    assert_eq!(snap.state.as_deref(), Some(&b"{\"serial\":1}"[..]));
    // An attempt that read v1: its write must later be refused.
    let at_v1 = store.begin(&path, Intent::Write).await.expect("begin");
    assert_eq!(at_v1.snapshot().state_tip.as_deref(), Some(v1.as_str()));
    let v2 = write(
        store,
        &path,
        StateChange::Write(Bytes::from_static(b"{\"serial\":2}")),
        "Update prod (serial 2) by test",
    )
    .await
    .expect("replace");
    let snap = store.snapshot(&path).await.expect("snapshot");
    assert_eq!(snap.state_tip.as_deref(), Some(v2.as_str()));
    assert_eq!(snap.state.as_deref(), Some(&b"{\"serial\":2}"[..]));

    // CAS: writing from the old tip is stale and changes nothing.
    let stale = at_v1
        .update_state(
            StateChange::Write(Bytes::from_static(b"{\"serial\":99}")),
            &gitstate_core::Message::from("stale"),
        )
        .await;
    assert_eq!(stale, Err(StoreError::Stale));
    let snap = store.snapshot(&path).await.expect("snapshot");
    assert_eq!(snap.state_tip.as_deref(), Some(v2.as_str()));
    assert_eq!(snap.state.as_deref(), Some(&b"{\"serial\":2}"[..]));
    // A create (read before the branch existed) when the branch exists is stale too.
    let stale = creator
        .update_state(
            StateChange::Write(Bytes::from_static(b"{}")),
            &gitstate_core::Message::from("stale"),
        )
        .await;
    assert_eq!(stale, Err(StoreError::Stale));
    let snap = store.snapshot(&path).await.expect("snapshot");
    assert_eq!(snap.state_tip.as_deref(), Some(v2.as_str()));

    // Nested path creates subtrees and leaves the other file alone.
    let v3 = write(
        store,
        &nested,
        StateChange::Write(Bytes::from_static(b"nested")),
        "Update nested",
    )
    .await
    .expect("nested write");
    let snap = store.snapshot(&nested).await.expect("snapshot");
    assert_eq!(snap.state.as_deref(), Some(&b"nested"[..]));
    let snap = store.snapshot(&path).await.expect("snapshot");
    assert_eq!(snap.state_tip.as_deref(), Some(v3.as_str()));
    assert_eq!(snap.state.as_deref(), Some(&b"{\"serial\":2}"[..]));
    assert_eq!(
        store.current_state(&path).await.expect("current state"),
        snap.state,
        "the current state is the snapshot's"
    );

    // Delete.
    let v4 = write(store, &path, StateChange::Delete, "Delete prod by test")
        .await
        .expect("delete");
    let snap = store.snapshot(&path).await.expect("snapshot");
    assert_eq!(snap.state_tip.as_deref(), Some(v4.as_str()));
    assert_eq!(snap.state, None);
    let snap = store.snapshot(&nested).await.expect("snapshot");
    assert_eq!(snap.state.as_deref(), Some(&b"nested"[..]));

    // Locks.
    let info = Bytes::from_static(b"{\"ID\":\"one\"}");
    assert_eq!(store.read_lock(&path).await.expect("read_lock"), None);
    // Taken by an OIDC token: its commit records the token's seal, which both reads give.
    let token = gitstate_core::LockToken {
        mark: gitstate_core::Mark::new([0xab; 32]),
        expired: false,
    };
    let trailer = token.trailer(&gitstate_core::Place::new("", &path), "one");
    let created = store
        .create_lock(
            &path,
            info.clone(),
            &gitstate_core::Message::from(format!("Lock prod: apply by test (one)\n\n{trailer}")),
        )
        .await
        .expect("create lock");
    assert_eq!(created, LockCreate::Created);
    let LockRead {
        tip,
        content,
        token: recorded,
    } = store
        .read_lock(&path)
        .await
        .expect("read_lock")
        .expect("locked");
    assert_eq!(content, info);
    assert_eq!(
        recorded
            .as_deref()
            .map(|seal| format!("{}: {seal}", gitstate_core::lock_token::LOCK_TOKEN_TRAILER)),
        Some(trailer)
    );
    let snap = store.snapshot(&path).await.expect("snapshot");
    assert_eq!(snap.lock_tip.as_deref(), Some(tip.as_str()));
    assert_eq!(snap.lock, Some(info.clone()));
    assert_eq!(snap.lock_token, recorded);
    // Under the lock, the current state is the snapshot's (none: deleted), read without the lock.
    assert_eq!(
        store.current_state(&path).await.expect("current state"),
        snap.state
    );
    let second = store
        .create_lock(
            &path,
            Bytes::from_static(b"{\"ID\":\"two\"}"),
            &gitstate_core::Message::from("second"),
        )
        .await
        .expect("second create");
    assert_eq!(
        second,
        LockCreate::Held {
            tip: tip.clone(),
            content: info.clone()
        }
    );
    // Delete with a wrong tip is stale and keeps the lock.
    let wrong = v4.clone();
    assert_eq!(
        store.delete_lock(&path, &wrong).await,
        Err(StoreError::Stale)
    );
    assert!(store.read_lock(&path).await.expect("read_lock").is_some());
    store.delete_lock(&path, &tip).await.expect("unlock");
    assert_eq!(store.read_lock(&path).await.expect("read_lock"), None);
    // Deleting again: it is gone, stale.
    assert_eq!(store.delete_lock(&path, &tip).await, Err(StoreError::Stale));
    // The state branch was untouched by the locks.
    let snap = store.snapshot(&path).await.expect("snapshot");
    assert_eq!(snap.state_tip.as_deref(), Some(v4.as_str()));

    attempts(store, prefix).await;
    nesting(store, prefix).await;
    delete_with(store, prefix).await;
    beside(store, prefix).await;
}

/// [`StateStore::snapshot_beside`](gitstate_core::StateStore::snapshot_beside): the files beside
/// a state at the tip its snapshot saw, in order, `None` where there is none; after another
/// write, the new tip's.
pub async fn beside(store: &dyn gitstate_core::StateStore, prefix: &str) {
    let path = sp(&format!("{prefix}beside/a.tfstate"));
    let record = StatePath::gitstate_file(&sp(&format!("{prefix}beside/a.json")));
    let none = sp(&format!("{prefix}beside/none/b.tfstate"));
    write_retrying(store, &path, b"{\"serial\":1}", "Update a").await;
    write_retrying(store, &record, b"{\"name\":\"a\"}", "Create a").await;
    let (snap, files) = store
        .snapshot_beside(&path, &[record.clone(), none.clone()])
        .await
        .expect("snapshot_beside");
    assert_eq!(snap.state.as_deref(), Some(&b"{\"serial\":1}"[..]));
    assert_eq!(snap.lock, None);
    assert_eq!(
        files,
        vec![Some(bytes::Bytes::from_static(b"{\"name\":\"a\"}")), None]
    );
    let tip = store.snapshot(&record).await.expect("snapshot").state_tip;
    assert_eq!(snap.state_tip, tip, "the tip both were read at");
    write_retrying(store, &record, b"{\"name\":\"a\",\"tags\":[]}", "Tag a").await;
    let (snap, files) = store
        .snapshot_beside(&path, std::slice::from_ref(&record))
        .await
        .expect("snapshot_beside");
    assert_ne!(snap.state_tip, tip);
    assert_eq!(
        files[0].as_deref(),
        Some(&b"{\"name\":\"a\",\"tags\":[]}"[..])
    );
}

/// [`gitstate_core::StateChange::DeleteWith`] through a write attempt (a remote store's write
/// queue): the file and gitstate's own file beside it go in one commit.
pub async fn delete_with(store: &dyn gitstate_core::StateStore, prefix: &str) {
    use gitstate_core::{Intent, StateChange};

    let path = sp(&format!("{prefix}workspaces/gone.tfstate"));
    let record = StatePath::gitstate_file(&sp(&format!("{prefix}workspaces/gone.json")));
    write_retrying(store, &path, b"{\"serial\":1}", "Update gone").await;
    write_retrying(store, &record, b"{\"name\":\"gone\"}", "Create gone").await;
    // The paths alone, as the listing has them.
    for folder in [
        format!("{prefix}workspaces/"),
        format!(".gitstate/{prefix}workspaces/"),
    ] {
        let paths = store.list_paths(&folder).await.expect("list_paths");
        let query = gitstate_core::ListQuery {
            prefix: folder.clone(),
            after: None,
            limit: usize::MAX,
        };
        let listed = store.list_states(&query).await.expect("list_states");
        let expected: Vec<String> = listed.states.into_iter().map(|s| s.path).collect();
        assert_eq!(paths, expected, "{folder}");
        assert_eq!(paths.len(), 1, "{folder}: {paths:?}");
    }
    let delete = || async {
        let attempt = store.begin(&path, Intent::Write).await.expect("begin");
        attempt
            .update_state(
                StateChange::DeleteWith(vec![record.clone()]),
                &gitstate_core::Message::from("Delete workspace gone"),
            )
            .await
            .expect("delete with the record")
    };
    let commit = delete().await;
    for gone in [&path, &record] {
        let snap = store.snapshot(gone).await.expect("snapshot");
        assert_eq!(snap.state, None, "{gone}");
        assert_eq!(snap.state_tip.as_deref(), Some(commit.as_str()));
        let history = store.history(gone, 10).await.expect("history");
        assert_eq!(
            history[0].commit, commit,
            "{gone}: removed by that one commit"
        );
        assert_eq!(history[0].size, None);
        assert_eq!(
            history.len(),
            2,
            "{gone}: its write is still in the history"
        );
    }
    // Only one of the two files there (a workspace without a state): the other's absence is no
    // error.
    write_retrying(store, &record, b"{\"name\":\"gone\"}", "Create gone again").await;
    let commit = delete().await;
    let snap = store.snapshot(&record).await.expect("snapshot");
    assert_eq!((snap.state, snap.state_tip), (None, Some(commit)));
}

/// [`StateStore::create_lock`](gitstate_core::StateStore::create_lock) where no state could ever
/// be written: a state file or a lock on a folder of the path, states or locks under it. Each is
/// [`LockCreate::Unwritable`](gitstate_core::LockCreate::Unwritable) naming what is in the way,
/// never an error, and writes nothing; a path beside them locks. Uses paths under `{prefix}nest/`.
pub async fn nesting(store: &dyn gitstate_core::StateStore, prefix: &str) {
    use bytes::Bytes;
    use gitstate_core::{LockCreate, PathConflict};

    let at = |p: &str| sp(&format!("{prefix}nest/{p}"));
    let name = |p: &str| format!("{prefix}nest/{p}");
    let message = gitstate_core::Message::from("Lock");
    let info = || Bytes::from_static(b"{\"ID\":\"n\"}");
    write_retrying(store, &at("prod"), b"{}", "Update prod").await;
    write_retrying(store, &at("other/x"), b"{}", "Update other/x").await;
    for held in ["held", "team/a/net"] {
        let created = store.create_lock(&at(held), info(), &message).await;
        assert_eq!(created, Ok(LockCreate::Created), "{held}");
    }
    let tip = store
        .snapshot(&at("prod"))
        .await
        .expect("snapshot")
        .state_tip;
    let cases = [
        (
            "prod/net",
            PathConflict::StateAbove {
                path: name("prod/net"),
                above: name("prod"),
            },
        ),
        (
            "other/x/y",
            PathConflict::StateAbove {
                path: name("other/x/y"),
                above: name("other/x"),
            },
        ),
        (
            "other",
            PathConflict::StatesBelow {
                path: name("other"),
            },
        ),
        (
            "held/net/x",
            PathConflict::LockAbove {
                path: name("held/net/x"),
                above: name("held"),
            },
        ),
        (
            "team/a",
            PathConflict::LockBelow {
                path: name("team/a"),
                below: name("team/a/net"),
            },
        ),
        (
            "team",
            PathConflict::LockBelow {
                path: name("team"),
                below: name("team/a/net"),
            },
        ),
    ];
    // Twice: a store that remembers what it read or wrote answers the same the second time.
    for round in 0..2 {
        for (path, conflict) in &cases {
            let created = store.create_lock(&at(path), info(), &message).await;
            assert_eq!(
                created,
                Ok(LockCreate::Unwritable(conflict.clone())),
                "{path}"
            );
            if round == 0 {
                assert_eq!(store.read_lock(&at(path)).await.expect("read_lock"), None);
            }
        }
    }
    let snap = store.snapshot(&at("prod")).await.expect("snapshot");
    assert_eq!(snap.state_tip, tip, "no state written");
    // Beside them: a lock, then its release.
    for beside in ["prod-a", "other/y", "team/a-b"] {
        let created = store.create_lock(&at(beside), info(), &message).await;
        assert_eq!(created, Ok(LockCreate::Created), "{beside}");
    }
    for held in ["held", "team/a/net", "prod-a", "other/y", "team/a-b"] {
        let LockRead { tip, .. } = store
            .read_lock(&at(held))
            .await
            .expect("read_lock")
            .expect("locked");
        store.delete_lock(&at(held), &tip).await.expect("unlock");
    }
}

/// [`StateStore::begin`](gitstate_core::StateStore::begin) attempts: a read followed by one
/// compare-and-swap on exactly what was read (for a remote, over the same receive-pack session).
pub async fn attempts(store: &dyn gitstate_core::StateStore, prefix: &str) {
    use bytes::Bytes;
    use gitstate_core::{Intent, LockCreate, StateChange, StoreError};

    let path = sp(&format!("{prefix}attempt.tfstate"));
    let write = |s: &'static [u8]| StateChange::Write(Bytes::from_static(s));

    // Read, then write on what was read.
    let attempt = store.begin(&path, Intent::Write).await.expect("begin");
    assert_eq!(attempt.snapshot().state, None);
    assert_eq!(attempt.snapshot().lock, None);
    let v1 = attempt
        .update_state(
            write(b"one"),
            &gitstate_core::Message::from("Update attempt by test"),
        )
        .await
        .expect("write in an attempt");
    let snap = store.snapshot(&path).await.expect("snapshot");
    assert_eq!(snap.state_tip.as_deref(), Some(v1.as_str()));
    assert_eq!(snap.state.as_deref(), Some(&b"one"[..]));

    // Two attempts read the same tip: the first write wins, the second is stale.
    let a = store.begin(&path, Intent::Write).await.expect("begin a");
    let b = store.begin(&path, Intent::Write).await.expect("begin b");
    assert_eq!(a.snapshot().state_tip.as_deref(), Some(v1.as_str()));
    assert_eq!(b.snapshot().state.as_deref(), Some(&b"one"[..]));
    let v2 = a
        .update_state(write(b"two"), &gitstate_core::Message::from("a"))
        .await
        .expect("a writes");
    assert_eq!(
        b.update_state(write(b"three"), &gitstate_core::Message::from("b"))
            .await,
        Err(StoreError::Stale)
    );
    // An attempt dropped without writing changes nothing.
    drop(store.begin(&path, Intent::Write).await.expect("begin"));
    let snap = store.snapshot(&path).await.expect("snapshot");
    assert_eq!(snap.state_tip.as_deref(), Some(v2.as_str()));
    assert_eq!(snap.state.as_deref(), Some(&b"two"[..]));

    // Unlock attempts read only the lock; the first delete wins, the second is stale.
    let info = Bytes::from_static(b"{\"ID\":\"s\"}");
    let created = store
        .create_lock(&path, info.clone(), &gitstate_core::Message::from("Lock"))
        .await;
    assert_eq!(created, Ok(LockCreate::Created));
    let a = store.begin(&path, Intent::Unlock).await.expect("begin a");
    let b = store.begin(&path, Intent::Unlock).await.expect("begin b");
    assert_eq!(a.snapshot().lock, Some(info.clone()));
    assert!(a.snapshot().lock_tip.is_some());
    a.delete_lock().await.expect("a unlocks");
    assert_eq!(b.delete_lock().await, Err(StoreError::Stale));
    assert_eq!(store.read_lock(&path).await.expect("read_lock"), None);
    // Nothing to delete when no lock was read.
    let none = store.begin(&path, Intent::Unlock).await.expect("begin");
    assert_eq!(none.snapshot().lock, None);
    assert_eq!(none.delete_lock().await, Err(StoreError::Stale));
    // A write attempt sees a lock too.
    store
        .create_lock(&path, info.clone(), &gitstate_core::Message::from("Lock"))
        .await
        .expect("lock again");
    let attempt = store.begin(&path, Intent::Write).await.expect("begin");
    assert_eq!(attempt.snapshot().lock, Some(info));
    drop(attempt);
    let LockRead { tip, .. } = store.read_lock(&path).await.expect("read").expect("locked");
    store.delete_lock(&path, &tip).await.expect("unlock");
}

/// Ten concurrent lock creators on one path: exactly one `Created`, the others see its lock.
pub async fn concurrent_lockers(store: std::sync::Arc<dyn gitstate_core::StateStore>, raw: &str) {
    use gitstate_core::LockCreate;
    let path = sp(raw);
    let mut tasks = Vec::new();
    for i in 0..10 {
        let store = store.clone();
        let path = path.clone();
        tasks.push(tokio::spawn(async move {
            let info = bytes::Bytes::from(format!("{{\"ID\":\"{i}\"}}"));
            (
                info.clone(),
                store
                    .create_lock(&path, info, &gitstate_core::Message::from("Lock"))
                    .await
                    .expect("create"),
            )
        }));
    }
    let mut winners = Vec::new();
    let mut held = Vec::new();
    for t in tasks {
        let (info, result) = t.await.expect("join");
        match result {
            LockCreate::Created => winners.push(info),
            LockCreate::Held { tip, content } => held.push((tip, content)),
            LockCreate::Unwritable(conflict) => panic!("{conflict}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one creator wins");
    let LockRead { tip, content, .. } =
        store.read_lock(&path).await.expect("read").expect("locked");
    assert_eq!(content, winners[0]);
    for (t, c) in held {
        assert_eq!(t, tip);
        assert_eq!(c, winners[0]);
    }
}

/// States [`seed_many`] puts in a repository, and the folders they are spread over.
pub const MANY: usize = 50_000;
pub const MANY_FOLDERS: usize = 100;

/// The path of state `i` of [`seed_many`].
pub fn many_path(i: usize) -> String {
    format!("f{:03}/s{i:06}.tfstate", i % MANY_FOLDERS)
}

/// The content of state `i` of [`seed_many`].
pub fn many_content(i: usize) -> String {
    format!("{{\"serial\":1,\"lineage\":\"many-{i:06}\"}}")
}

/// Puts [`MANY`] states in [`MANY_FOLDERS`] folders on `main` of `bare` in one commit, with
/// `git fast-import`.
pub fn seed_many(bare: &Path) {
    seed_files(bare, (0..MANY).map(|i| (many_path(i), many_content(i))));
}

/// Puts `files` (path, content) on `main` of `bare` in one commit, with `git fast-import`.
pub fn seed_files(bare: &Path, files: impl Iterator<Item = (String, String)>) {
    use std::io::Write;
    let mut input = Vec::new();
    let mut paths = Vec::new();
    for (mark, (path, body)) in files.enumerate() {
        write!(
            input,
            "blob\nmark :{}\ndata {}\n{body}\n",
            mark + 1,
            body.len()
        )
        .unwrap();
        paths.push(path);
    }
    let message = "seed";
    write!(
        input,
        "commit refs/heads/main\ncommitter seed <s@s> 1764115200 +0000\ndata {}\n{message}\n",
        message.len()
    )
    .unwrap();
    for (mark, path) in paths.iter().enumerate() {
        writeln!(input, "M 100644 :{} {path}", mark + 1).unwrap();
    }
    input.push(b'\n');
    let mut child = std::process::Command::new("git")
        .args(["fast-import", "--quiet"])
        .current_dir(bare)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    assert!(child.wait().unwrap().success(), "git fast-import");
}

/// Another writer: the git CLI, straight into the bare repository (not through the proxy),
/// commits `files` (path, content) on `main`.
pub fn other_writer(bare: &Path, scratch: &Path, files: &[(&str, String)]) {
    let work = scratch.join("other");
    if !work.exists() {
        git(
            scratch,
            &[
                "clone",
                "-q",
                "--depth",
                "1",
                bare.to_str().unwrap(),
                work.to_str().unwrap(),
            ],
        );
    }
    git(&work, &["pull", "-q", "--ff-only", "origin", "main"]);
    for (path, body) in files {
        std::fs::write(work.join(path), body).unwrap();
    }
    git(&work, &["add", "-A"]);
    git(
        &work,
        &[
            "-c",
            "user.name=other",
            "-c",
            "user.email=o@o",
            "commit",
            "-q",
            "-m",
            "other writer",
        ],
    );
    git(&work, &["push", "-q", "origin", "HEAD:main"]);
}

/// Bytes of every file under `dir`.
pub fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => dir_bytes(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

/// On a repository [`seed_many`] filled: a cold read, a write, a lock and a page of the listing
/// give what git holds, and the request cache holds the trees and files they touched, not the
/// repository (`cache`: the store's request cache directory; `bare`: the repository, read with
/// the git CLI). Each `round` reads and writes other states, so several stores can share the
/// repository.
pub async fn many_states(
    store: &dyn gitstate_core::StateStore,
    bare: &Path,
    cache: &Path,
    round: usize,
) {
    use bytes::Bytes;
    use gitstate_core::{LockCreate, StateChange};
    // A cold read: its state, and a cache far smaller than the repository's trees.
    let read = 12_345 + round;
    let snap = store.snapshot(&sp(&many_path(read))).await.expect("read");
    assert_eq!(snap.state.as_deref(), Some(many_content(read).as_bytes()));
    let trees: u64 = git(bare, &["ls-tree", "-d", "-l", "main"]).lines().count() as u64;
    assert_eq!(trees, MANY_FOLDERS as u64);
    let cached = dir_bytes(cache);
    assert!(
        cached < 256 << 10,
        "a cold read of one of {MANY} states left {cached} bytes in the cache"
    );
    // A write: git sees it, and the other states are untouched.
    let written = 777 + 2 * round;
    let path = sp(&many_path(written));
    write(
        store,
        &path,
        StateChange::Write(Bytes::from_static(b"{\"serial\":2}")),
        "Update by test",
    )
    .await
    .expect("write");
    assert_eq!(
        git(bare, &["show", &format!("main:{}", many_path(written))]),
        "{\"serial\":2}"
    );
    assert_eq!(
        git(bare, &["show", &format!("main:{}", many_path(written + 1))]),
        many_content(written + 1)
    );
    // A lock, held and released.
    let locked = sp(&many_path(4_242 + round));
    let info = Bytes::from_static(b"{\"ID\":\"many\"}");
    assert_eq!(
        store
            .create_lock(&locked, info.clone(), &gitstate_core::Message::from("Lock"))
            .await,
        Ok(LockCreate::Created)
    );
    let snap = store.snapshot(&locked).await.expect("read the lock");
    assert_eq!(snap.lock, Some(info));
    let tip = snap.lock_tip.expect("lock tip");
    store.delete_lock(&locked, &tip).await.expect("unlock");
    assert_eq!(git(bare, &["for-each-ref", "refs/heads/locks/"]), "");
    // Pages of the listing: a folder's, and one from the middle, with their counts.
    let folder = gitstate_core::ListQuery {
        prefix: "f042/".into(),
        after: None,
        limit: 10,
    };
    let page = store.list_states(&folder).await.expect("a folder's page");
    assert_eq!(page.total, MANY / MANY_FOLDERS);
    let in_git = git(bare, &["ls-tree", "--name-only", "main", "f042/"]);
    let first: Vec<&str> = in_git.lines().take(10).collect();
    assert_eq!(
        page.states
            .iter()
            .map(|s| s.path.as_str())
            .collect::<Vec<_>>(),
        first
    );
    assert!(page.more);
    let middle = gitstate_core::ListQuery {
        prefix: String::new(),
        after: Some(many_path(written)),
        limit: 3,
    };
    let page = store.list_states(&middle).await.expect("a middle page");
    assert_eq!(page.total, MANY);
    let after = &page.states[0];
    assert!(after.path.as_str() > many_path(written).as_str());
    assert_eq!(after.size, many_content(0).len() as u64);
    // The listing read the history cache: its commits and trees, and of the states only the
    // pages' (their sizes), never the other 49,987 (DESIGN §9.5).
    let root = cache.parent().expect("the cache root");
    let history: Vec<_> = std::fs::read_dir(root)
        .expect("the cache root")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().contains("-history"))
        .collect();
    assert_eq!(history.len(), 1, "one history cache in {}", root.display());
    let objects = git(
        &history[0],
        &[
            "cat-file",
            "--batch-all-objects",
            "--batch-check=%(objecttype)",
        ],
    );
    let blobs = objects.lines().filter(|kind| *kind == "blob").count();
    assert_eq!(
        blobs, 13,
        "the history cache holds the two pages' 13 states (the states are distinct blobs)"
    );
}
