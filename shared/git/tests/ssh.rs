//! `RemoteStore` over ssh against a throwaway `sshd` on 127.0.0.1 (openssh-server, installed by
//! scripts/install-test-deps.sh). Its own test binary because it sets `GIT_SSH_COMMAND`.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::servers::{bare_repo, free_port, ChildGuard};
use common::{git, sp};
use gitstate_core::{StateStore, StoreError};
use gitstate_git::{RemoteConfig, RemoteStore};

fn keygen(path: &Path) {
    let ok = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

fn start_sshd(dir: &Path, authorized: &Path) -> (ChildGuard, u16) {
    std::fs::create_dir_all("/run/sshd").ok();
    let host_key = dir.join("host_key");
    keygen(&host_key);
    for _ in 0..5 {
        let port = free_port();
        let config = dir.join("sshd_config");
        std::fs::write(
            &config,
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {}\nAuthorizedKeysFile {}\n\
                 StrictModes no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n\
                 UsePAM no\nPermitRootLogin prohibit-password\nAcceptEnv GIT_PROTOCOL\n\
                 PidFile {}\n",
                host_key.display(),
                authorized.display(),
                dir.join("sshd.pid").display()
            ),
        )
        .unwrap();
        let mut child = Command::new("/usr/sbin/sshd")
            .args(["-D", "-e", "-f"])
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return (ChildGuard::new(child), port);
            }
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("sshd did not start");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ssh_conformance() {
    assert!(
        Path::new("/usr/sbin/sshd").exists(),
        "openssh-server is not installed: run scripts/install-test-deps.sh"
    );
    let dir = tempfile::tempdir().unwrap();
    let client_key = dir.path().join("client_key");
    keygen(&client_key);
    let authorized = dir.path().join("authorized_keys");
    std::fs::copy(dir.path().join("client_key.pub"), &authorized).unwrap();
    let (_sshd, port) = start_sshd(dir.path(), &authorized);
    std::env::set_var(
        "GIT_SSH_COMMAND",
        format!(
            "ssh -i {} -o IdentitiesOnly=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR",
            client_key.display()
        ),
    );
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
    keygen(&other_key);
    std::env::set_var(
        "GIT_SSH_COMMAND",
        format!(
            "ssh -i {} -o IdentitiesOnly=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR",
            other_key.display()
        ),
    );
    let s = store(format!("ssh://root@127.0.0.1:{port}{}", bare.display()));
    let err = s.snapshot(&sp("prod.tfstate")).await.unwrap_err();
    eprintln!("wrong key: {err:?}");
    assert!(
        matches!(err, StoreError::Unauthorized(_) | StoreError::Forbidden(_)),
        "{err:?}"
    );
}
