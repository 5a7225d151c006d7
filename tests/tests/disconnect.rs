//! Clients that go away mid-request. A body cut short is never stored; a client that sends a
//! whole state and hangs up before the answer gets either its whole write or none, never a
//! partial commit; nothing is left locked; the server keeps serving.

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use gitstate_tests::*;

const USER: &str = "dc-bot";
const PASSWORD: &str = "dc-secret";

fn state(serial: u64, pad: usize) -> String {
    format!(
        r#"{{"version":4,"terraform_version":"1.15.5","serial":{serial},"lineage":"dc","outputs":{{}},"resources":[],"pad":"{}"}}"#,
        "x".repeat(pad)
    )
}

fn send_partial(port: u16, method: &str, path: &str, body: &[u8], declared: usize, wait: Duration) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {declared}\r\n\r\n"
    );
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body);
    let _ = stream.flush();
    std::thread::sleep(wait);
    drop(stream); // hang up without reading the answer
}

#[test]
fn clients_hanging_up_mid_request_leave_whole_writes_or_none() {
    let repos = tempfile::tempdir().unwrap();
    let repo = bare_repo(repos.path(), "states");
    let git_server = GitHttpServer::start(repos.path(), USER, PASSWORD);
    let spec = format!("default={}", git_server.url("states"));
    let cwd = tempfile::tempdir().unwrap();
    let server = Gitstate::start(
        &["--repository", &spec],
        &[("GIT_USERNAME", USER), ("GIT_PASSWORD", PASSWORD)],
        cwd.path(),
    );
    let port = server.port();
    let path = "/state/default/dc.tfstate";
    let url = server.state_url("default", "dc.tfstate");
    let first = state(1, 10);
    assert_eq!(http("POST", &url, Some(&first), None).unwrap().0, 200);

    // 1. The body stops halfway and the client hangs up: nothing is stored.
    let cut = state(2, 200_000);
    for _ in 0..5 {
        send_partial(
            port,
            "POST",
            path,
            &cut.as_bytes()[..cut.len() / 2],
            cut.len(),
            Duration::from_millis(50),
        );
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        git_log_subjects(&repo, "main", "dc.tfstate").len(),
        1,
        "a cut body was stored"
    );
    assert_eq!(http("GET", &url, None, None).unwrap(), (200, first.clone()));

    // 2. Whole bodies, then the client hangs up at once (before the push finishes): each write
    //    is a whole commit or nothing, and the file is always one of the states sent.
    let mut sent = vec![first.clone()];
    for serial in 3..13 {
        let body = state(serial, 5_000);
        send_partial(
            port,
            "POST",
            path,
            body.as_bytes(),
            body.len(),
            Duration::from_millis(1),
        );
        sent.push(body);
    }
    // 3. A LOCK whose client hangs up: the lock either exists with that LockInfo or not at all.
    let info = lock_info("gone-client", "gone@example", "OperationTypeApply");
    send_partial(
        port,
        "LOCK",
        path,
        info.as_bytes(),
        info.len(),
        Duration::from_millis(1),
    );
    std::thread::sleep(Duration::from_secs(3));

    let subjects = git_log_subjects(&repo, "main", "dc.tfstate");
    assert!((1..=11).contains(&subjects.len()), "{subjects:?}");
    for rev in 0..subjects.len() {
        let content = git_show(&repo, &format!("main~{rev}"), "dc.tfstate").unwrap();
        let text = String::from_utf8(content).unwrap();
        assert!(
            sent.contains(&text),
            "main~{rev} holds a state nobody sent: {}",
            &text[..text.len().min(120)]
        );
    }
    let locks = refs_under(&repo, "refs/heads/locks");
    if !locks.is_empty() {
        let held = git_show(&repo, "refs/heads/locks/dc.tfstate", "dc.tfstate.lock").unwrap();
        assert_eq!(
            String::from_utf8(held).unwrap(),
            info,
            "a lock with other content"
        );
        // and the owner can still release it (what `terraform force-unlock` does)
        assert_eq!(http("UNLOCK", &url, Some(""), None).unwrap().0, 200);
    }
    // still serving, with the newest whole state
    let (status, body) = http("GET", &url, None, None).unwrap();
    assert_eq!(status, 200);
    assert!(sent.contains(&body));
    assert_eq!(
        http(
            "GET",
            &format!("{}/_/health", server.base_url()),
            None,
            None
        )
        .unwrap()
        .0,
        200
    );
}
