//! `gitstate serve --pid-file` and `gitstate stop`: a second server on the same pid file is
//! refused, `stop` lets a request in flight finish (its state is committed) before the server
//! exits, and the pid file is gone afterwards.

use std::io::{Read, Write};
use std::net::TcpStream;
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

    // A large write in flight when stop arrives still completes. "In flight" is proven, not
    // guessed: the request asks `Expect: 100-continue`, and the server answers `100 Continue`
    // only once its handler reads the body; stop is sent after that, the body after stop.
    let big = format!(
        r#"{{"version":4,"serial":1,"lineage":"stop","outputs":{{}},"resources":[],"pad":"{}"}}"#,
        "x".repeat(40_000_000)
    );
    let mut socket = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    write!(
        socket,
        "POST /state/default/stop.tfstate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n",
        big.len()
    )
    .unwrap();
    let interim = read_head(&mut socket);
    assert!(
        interim.starts_with("HTTP/1.1 100"),
        "the server did not start reading the body: {interim}"
    );
    let started = Instant::now();
    let stopper = std::thread::spawn(move || {
        Command::new(gitstate_bin())
            .args(["stop", "--pid-file", &pid_arg])
            .output()
            .unwrap()
    });
    // Give the signal time to arrive before the body does (if it arrives later, the test only
    // proves less; it cannot pass wrongly).
    std::thread::sleep(Duration::from_millis(300));
    socket.write_all(big.as_bytes()).unwrap();
    let mut answer = String::new();
    socket
        .read_to_string(&mut answer)
        .expect("the request in flight got an answer");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let stop = stopper.join().unwrap();
    assert!(
        stop.status.success(),
        "{}",
        String::from_utf8_lossy(&stop.stderr)
    );
    assert!(String::from_utf8_lossy(&stop.stdout).contains("stopped"));
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
        .args(["stop", "--pid-file", pid_file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("is gitstate serving with --pid-file"));
}

/// Reads one response head (up to the blank line) from `socket`.
fn read_head(socket: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match socket.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}
