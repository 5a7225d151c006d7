//! Stale locks, opt-in (issue 35, DESIGN §2 "Stale locks"): with `--lock-ttl`, a LOCK on a lock
//! older than the TTL (by its `Created`) takes it over, logs and records a force-unlock, and
//! answers `X-Gitstate-Took-Over` with the old ID. Without it, locks never expire.
//!
//! Real Terraform 1.15.5 through `gitstate serve` on lighttpd + `git http-backend`: one apply is
//! killed with SIGKILL (with its plugins, as a cancelled CI runner is) while it holds the lock; a
//! second apply is refused while the lock is younger than the TTL, and applies once it is older.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use gitstate_tests::*;

const STATE: &str = "prod.tfstate";
const USER: &str = "tfstate-bot";
const PASSWORD: &str = "stale-locks-pw";
const TTL_SECS: u64 = 15;

/// A configuration whose apply sleeps in a provisioner (so it holds the lock), or not.
fn write_config(dir: &Path, backend: &HttpBackend, sleep: bool) {
    let provisioner = if sleep {
        "  provisioner \"local-exec\" {\n    command = \"sleep 300\"\n  }\n"
    } else {
        ""
    };
    let name = if sleep { "slow" } else { "quick" };
    fs::write(
        dir.join("main.tf"),
        format!(
            "{}\nresource \"null_resource\" \"{name}\" {{\n{provisioner}}}\n",
            backend.hcl()
        ),
    )
    .unwrap();
}

/// A LockInfo created now, as Terraform writes it.
fn fresh_lock(id: &str, who: &str) -> String {
    let now = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .expect("date");
    serde_json::json!({
        "ID": id, "Operation": "OperationTypeApply", "Info": "", "Who": who,
        "Version": "1.15.5", "Created": String::from_utf8_lossy(&now.stdout).trim(), "Path": ""
    })
    .to_string()
}

fn lock_branches(git_server: &GitHttpServer) -> Vec<String> {
    ls_remote(&git_server.url_with_credentials("states"))
        .into_iter()
        .map(|(_, name)| name)
        .filter(|name| name.starts_with("refs/heads/locks/"))
        .collect()
}

#[test]
fn a_lock_left_by_a_killed_apply_is_taken_over_once_past_the_ttl() {
    let tf = Terraform::installed("1.15.5");
    let repos = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    bare_repo(repos.path(), "states");
    let git_server = GitHttpServer::start(repos.path(), USER, PASSWORD);
    let repository = format!("default={}", git_server.url("states"));
    let git_env = [("GIT_USERNAME", USER), ("GIT_PASSWORD", PASSWORD)];
    let ttl = format!("{TTL_SECS}s");
    let server = Gitstate::start(
        &["--repository", &repository, "--lock-ttl", &ttl],
        &git_env,
        cwd.path(),
    );
    let backend = HttpBackend::new(&server.state_url("default", STATE));

    // A: an apply that holds the lock, killed with its plugins (SIGKILL to its process group).
    write_config(a.path(), &backend, true);
    tf.init(a.path()).expect_code(0, "init A");
    let mut apply_a = tf.spawn(
        a.path(),
        &["apply", "-auto-approve", "-input=false", "-no-color"],
        &a.path().join("out"),
        &a.path().join("err"),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while lock_branches(&git_server).is_empty() {
        assert!(Instant::now() < deadline, "apply A never took the lock");
        std::thread::sleep(Duration::from_millis(100));
    }
    let locked_at = Instant::now();
    // Past the refresh, into the provisioner's sleep: the lock is held for the apply.
    std::thread::sleep(Duration::from_secs(2));
    // SAFETY: killpg only sends a signal; the group is the apply's own (Terraform::spawn).
    let killed = unsafe { libc::killpg(apply_a.id() as i32, libc::SIGKILL) };
    assert_eq!(killed, 0, "killpg the apply's process group");
    let _ = apply_a.wait();
    assert_eq!(
        lock_branches(&git_server),
        ["refs/heads/locks/prod.tfstate"],
        "the killed apply left its lock"
    );

    // B, while the lock is younger than the TTL: refused, naming A's lock.
    write_config(b.path(), &backend, false);
    tf.init(b.path()).expect_code(0, "init B");
    let refused = tf.apply(b.path());
    assert!(
        locked_at.elapsed() < Duration::from_secs(TTL_SECS - 2),
        "the machine was too slow to try B before the TTL ({:?}); the test proves nothing",
        locked_at.elapsed()
    );
    assert_ne!(refused.code, Some(0), "B applied under a live lock");
    assert!(
        refused
            .combined()
            .contains("Error acquiring the state lock"),
        "{}",
        refused.combined()
    );

    // The operator's view: the lock is listed as stale past 1 s, and not past the TTL yet.
    let cli = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--repository", &repository]);
        gitstate_run(cwd.path(), &all, &git_env)
    };
    let listed = cli(&["locks", "--stale", "1s"]);
    listed.expect_code(0, "gitstate locks --stale 1s");
    assert!(listed.stdout.contains(STATE), "{}", listed.combined());
    let young = cli(&["locks", "--stale", &ttl]);
    young.expect_code(0, "gitstate locks --stale TTL");
    assert!(
        young.stdout.contains("no lock older than"),
        "{}",
        young.combined()
    );

    // B once the lock is older than the TTL: the lock is taken over, and the apply lands.
    let wait = Duration::from_secs(TTL_SECS + 2).saturating_sub(locked_at.elapsed());
    std::thread::sleep(wait);
    tf.apply(b.path()).expect_code(
        0,
        &format!("apply B past the TTL\n--- log\n{}", server.log()),
    );
    assert!(
        lock_branches(&git_server).is_empty(),
        "B released its lock after applying"
    );
    let log = server.log();
    assert!(
        log.contains("a lock older than the repository's lock_ttl was taken over"),
        "{log}"
    );
    let (status, state) = http("GET", &server.state_url("default", STATE), None, None).unwrap();
    assert_eq!(status, 200);
    assert!(
        state.contains("null_resource") && state.contains("quick"),
        "{state}"
    );

    // The answer names the lock it took over: a LOCK whose Created is old, then another LOCK.
    let url = server.state_url("default", "other.tfstate");
    let old = r#"{"ID":"old-lock","Operation":"OperationTypeApply","Who":"ci@runner-7","Version":"1.15.5","Created":"2020-01-01T00:00:00Z","Path":""}"#;
    let (status, headers, _) =
        request_with_headers("LOCK", &url, Some(old), &["x-gitstate-took-over"]);
    assert_eq!((status, headers[0].as_deref()), (200, None));
    let new = fresh_lock("new-lock", "ops@laptop");
    let (status, headers, _) =
        request_with_headers("LOCK", &url, Some(&new), &["x-gitstate-took-over"]);
    assert_eq!((status, headers[0].as_deref()), (200, Some("old-lock")));
    // A fresh lock is not taken over.
    let (status, body) =
        http("LOCK", &url, Some(&fresh_lock("third", "eve@laptop")), None).unwrap();
    assert_eq!(status, 423, "{body}");
    assert!(body.contains("new-lock"), "{body}");
}

/// Without `--lock-ttl`, however old a lock is, a LOCK gets 423 (the default never expires).
#[test]
fn without_a_ttl_an_old_lock_stays() {
    let cwd = tempfile::tempdir().unwrap();
    let server = Gitstate::start(&[], &[], cwd.path());
    let url = server.state_url("default", STATE);
    let old = r#"{"ID":"old-lock","Operation":"OperationTypeApply","Who":"ci@runner-7","Version":"1.15.5","Created":"2020-01-01T00:00:00Z","Path":""}"#;
    assert_eq!(http("LOCK", &url, Some(old), None).unwrap().0, 200);
    let (status, body) = http(
        "LOCK",
        &url,
        Some(&lock_info("new-lock", "ops@laptop", "OperationTypeApply")),
        None,
    )
    .unwrap();
    assert_eq!(status, 423, "{body}");
    assert!(body.contains("old-lock"), "{body}");
}
