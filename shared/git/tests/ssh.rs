//! `RemoteStore` over ssh against a throwaway `sshd` on 127.0.0.1 (openssh-server, installed by
//! scripts/install-test-deps.sh). Its own test binary because it sets `GIT_SSH_COMMAND`.

mod common;

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{git, sp};
use gitstate_core::{StateStore, StoreError};
use gitstate_git::{RemoteConfig, RemoteStore};
use gitstate_tests::bare_repo;
use gitstate_tests::{children_of, ssh_keygen, Sshd};

/// Held by each test for its whole run: they set `GIT_SSH_COMMAND` (process-wide), and one
/// counts the ssh processes of this process.
static SSH_ENV: Mutex<()> = Mutex::new(());

fn ssh_command(key: &Path) -> String {
    format!(
        "ssh -i {} -o IdentitiesOnly=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR",
        key.display()
    )
}

// The guard serialises the tests of this binary (a process-wide variable); nothing else in this
// runtime takes it.
#[allow(clippy::await_holding_lock)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ssh_conformance() {
    let _env = SSH_ENV.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let client_key = dir.path().join("client_key");
    ssh_keygen(&client_key);
    let sshd = Sshd::start(&std::fs::read_to_string(dir.path().join("client_key.pub")).unwrap());
    let port = sshd.port();
    std::env::set_var("GIT_SSH_COMMAND", ssh_command(&client_key));
    let repos = dir.path().join("repos");
    std::fs::create_dir(&repos).unwrap();
    let bare = bare_repo(&repos, "states");
    let cache = tempfile::tempdir().unwrap();
    let store = |url: String| {
        RemoteStore::new(RemoteConfig {
            url,
            git_ref: "main".into(),
            credentials: None,
            cache_dir: cache.path().to_path_buf(),
            timeout: Duration::from_secs(20),
        })
        .unwrap()
    };
    let s = store(format!("ssh://root@127.0.0.1:{port}{}", bare.display()));
    common::conformance(&s, "").await;
    git(&bare, &["fsck", "--strict"]);
    assert_eq!(
        git(
            &bare,
            &["log", "--format=%s", "-1", "--", "team/a/prod.tfstate"]
        )
        .trim(),
        "Update nested"
    );

    // A key the server does not know: refused, not a bug.
    let other_key = dir.path().join("other_key");
    ssh_keygen(&other_key);
    std::env::set_var("GIT_SSH_COMMAND", ssh_command(&other_key));
    let s = store(format!("ssh://root@127.0.0.1:{port}{}", bare.display()));
    let err = s.snapshot(&sp("prod.tfstate")).await.unwrap_err();
    eprintln!("wrong key: {err:?}");
    assert!(
        matches!(err, StoreError::Unauthorized(_) | StoreError::Forbidden(_)),
        "{err:?}"
    );

    // git's other convention: `GIT_SSH` names a program (here a wrapper script), which gets the
    // port as OpenSSH does once it accepts `-G`.
    let wrapper = dir.path().join("ssh-wrapper");
    std::fs::write(
        &wrapper,
        format!("#!/bin/sh\nexec {} \"$@\"\n", ssh_command(&client_key)),
    )
    .unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    std::env::remove_var("GIT_SSH_COMMAND");
    std::env::set_var("GIT_SSH", &wrapper);
    let s = store(format!("ssh://root@127.0.0.1:{port}{}", bare.display()));
    let snapshot = s.snapshot(&sp("team/a/prod.tfstate")).await;
    std::env::remove_var("GIT_SSH");
    assert!(snapshot.unwrap().state.is_some());
}

/// An ssh server that accepts the key, keeps the session alive (it answers ssh's keep-alives)
/// and never sends a byte (the key's forced command reads and discards its input): the read
/// ends at the git timeout with `Unavailable` naming it, the ssh program (and the shell running
/// `GIT_SSH_COMMAND`) is killed, no thread keeps reading (the runtime shuts down at once), and
/// the same server still serves a key that works.
#[test]
fn a_silent_ssh_server_is_cut_off_at_the_git_timeout() {
    let _env = SSH_ENV.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let silent_key = dir.path().join("silent_key");
    ssh_keygen(&silent_key);
    let good_key = dir.path().join("good_key");
    ssh_keygen(&good_key);
    let read = |p: &Path| std::fs::read_to_string(p).unwrap();
    let sshd = Sshd::start(&format!(
        "command=\"cat >/dev/null\",no-pty {}{}",
        read(&dir.path().join("silent_key.pub")),
        read(&dir.path().join("good_key.pub"))
    ));
    let port = sshd.port();
    let repos = dir.path().join("repos");
    std::fs::create_dir(&repos).unwrap();
    let bare = bare_repo(&repos, "states");
    let cache = tempfile::tempdir().unwrap();
    const TIMEOUT: Duration = Duration::from_secs(3);
    let store = || {
        RemoteStore::new(RemoteConfig {
            url: format!("ssh://root@127.0.0.1:{port}{}", bare.display()),
            git_ref: "main".into(),
            credentials: None,
            cache_dir: cache.path().to_path_buf(),
            timeout: TIMEOUT,
        })
        .unwrap()
    };
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    };

    // This process's children now: sshd.
    let me = std::process::id();
    let before = children_of(me);
    std::env::set_var("GIT_SSH_COMMAND", ssh_command(&silent_key));
    let silent = runtime();
    let started = Instant::now();
    let result = silent.block_on(store().snapshot(&sp("prod.tfstate")));
    let took = started.elapsed();
    // Nothing ssh started is left: not the shell running GIT_SSH_COMMAND, not ssh.
    let left = || -> Vec<(u32, String)> {
        children_of(me)
            .into_iter()
            .filter(|c| !before.contains(c))
            .collect()
    };
    let mut running = left();
    for _ in 0..20 {
        if running.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        running = left();
    }
    // A thread still reading would keep the runtime from shutting down.
    let shutdown = Instant::now();
    silent.shutdown_timeout(Duration::from_secs(2));
    let shutdown = shutdown.elapsed();
    eprintln!("silent server: {result:?} after {took:?}; runtime shut down in {shutdown:?}");
    let err = result.unwrap_err();
    assert!(
        matches!(&err, StoreError::Unavailable(m) if m.contains("within 3 s")),
        "{err:?}"
    );
    assert!(
        took < TIMEOUT + Duration::from_secs(5),
        "answered after {took:?}, the git timeout is {TIMEOUT:?}"
    );
    assert!(running.is_empty(), "processes left running: {running:?}");
    assert!(
        shutdown < Duration::from_secs(1),
        "a thread was still reading the silent server"
    );

    // The same server, a key without the forced command: served as usual.
    std::env::set_var("GIT_SSH_COMMAND", ssh_command(&good_key));
    let snapshot = runtime()
        .block_on(store().snapshot(&sp("prod.tfstate")))
        .unwrap();
    assert!(snapshot.state.is_none(), "{snapshot:?}");
}

/// 50,000 states made with fast-import, read, written, locked and listed over ssh
/// (DESIGN §9.5; the other transports: `remote.rs` `many_states_on_every_transport`).
#[allow(clippy::await_holding_lock)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_states_over_ssh() {
    let _env = SSH_ENV.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let client_key = dir.path().join("client_key");
    ssh_keygen(&client_key);
    let sshd = Sshd::start(&std::fs::read_to_string(dir.path().join("client_key.pub")).unwrap());
    std::env::set_var("GIT_SSH_COMMAND", ssh_command(&client_key));
    let repos = dir.path().join("repos");
    std::fs::create_dir(&repos).unwrap();
    let bare = bare_repo(&repos, "many");
    common::seed_many(&bare);
    let cache = tempfile::tempdir().unwrap();
    let s = RemoteStore::new(RemoteConfig {
        url: format!("ssh://root@127.0.0.1:{}{}", sshd.port(), bare.display()),
        git_ref: "main".into(),
        credentials: None,
        cache_dir: cache.path().to_path_buf(),
        timeout: Duration::from_secs(20),
    })
    .unwrap();
    common::many_states(&s, &bare, &s.cache_dir(), 0).await;
    git(&bare, &["fsck", "--strict", "--no-dangling"]);
}
