//! `gitstate serve --pid-file` and `gitstate stop`: a second server on the same pid file is
//! refused, `stop` lets a request in flight finish (its state is committed) before the server
//! exits, and the pid file is gone afterwards.

use std::process::Command;
use std::time::{Duration, Instant};

use gitstate_tests::*;

#[test]
fn stop_waits_for_requests_in_flight() {
    let cwd = tempfile::tempdir().unwrap();
    let pid_file = cwd.path().join("gitstate.pid");
    let pid_arg = pid_file.to_str().unwrap().to_owned();
    let mut server = Gitstate::start(&["--pid-file", &pid_arg], &[], cwd.path());
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());

    // a second server on the same pid file is refused
    let second = Command::new(gitstate_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--pid-file", &pid_arg])
        .current_dir(cwd.path())
        .output()
        .unwrap();
    assert!(!second.status.success());
    assert!(String::from_utf8_lossy(&second.stderr).contains("still runs"));

    // a large write in flight when stop arrives still completes
    let big = format!(
        r#"{{"version":4,"serial":1,"lineage":"stop","outputs":{{}},"resources":[],"pad":"{}"}}"#,
        "x".repeat(40_000_000)
    );
    let url = server.state_url("default", "stop.tfstate");
    let writer = std::thread::spawn(move || http("POST", &url, Some(&big), None));
    std::thread::sleep(Duration::from_millis(150));
    let started = Instant::now();
    let stop = Command::new(gitstate_bin())
        .args(["stop", "--pid-file", &pid_arg])
        .output()
        .unwrap();
    assert!(
        stop.status.success(),
        "{}",
        String::from_utf8_lossy(&stop.stderr)
    );
    assert!(String::from_utf8_lossy(&stop.stdout).contains("stopped"));
    let (status, body) = writer
        .join()
        .unwrap()
        .expect("the request in flight got an answer");
    assert_eq!(status, 200, "{body}");
    assert!(started.elapsed() < Duration::from_secs(60));
    assert!(!server.running(), "the server still runs after stop");
    assert!(!pid_file.exists(), "the pid file is left behind");
    let subjects = git_log_subjects(
        &cwd.path().join(".gitstate/default.git"),
        "main",
        "stop.tfstate",
    );
    assert_eq!(subjects.len(), 1, "the write in flight was not committed");

    // stop without a server says so
    let again = Command::new(gitstate_bin())
        .args(["stop", "--pid-file", &pid_arg])
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("is gitstate serving with --pid-file"));
}
