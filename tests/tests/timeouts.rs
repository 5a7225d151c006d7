//! A git server that accepts the connection and then says nothing must not hang a request: with
//! `git_timeout_seconds = 3`, GET answers 503 with `Retry-After` and one sentence within a few
//! seconds, over git://, smart HTTP and ssh alike, and the server keeps answering.

use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gitstate_tests::*;

/// A TCP server on 127.0.0.1 that accepts every connection and never sends a byte.
fn silent_server() -> (u16, Arc<Mutex<Vec<TcpStream>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let held = Arc::new(Mutex::new(Vec::new()));
    let keep = held.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            keep.lock().unwrap().push(stream);
        }
    });
    (port, held)
}

#[test]
fn a_silent_git_server_gets_a_503_within_the_timeout() {
    let (port, held) = silent_server();
    for url in [
        format!("git://127.0.0.1:{port}/states.git"),
        format!("http://127.0.0.1:{port}/states.git"),
        format!("ssh://git@127.0.0.1:{port}/states.git"),
    ] {
        let cwd = tempfile::tempdir().unwrap();
        std::fs::write(
            cwd.path().join("gitstate.hcl"),
            format!("git_timeout_seconds = 3\nallow = []\nrepository \"default\" {{\n  url = \"{url}\"\n}}\n"),
        )
        .unwrap();
        let server = Gitstate::start(
            &["--config", "gitstate.hcl"],
            &[(
                "GIT_SSH_COMMAND",
                "ssh -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR",
            )],
            cwd.path(),
        );
        let client = reqwest::blocking::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        let started = Instant::now();
        let response = client
            .get(server.state_url("default", "prod.tfstate"))
            .send()
            .unwrap();
        let elapsed = started.elapsed();
        let status = response.status().as_u16();
        let retry_after = response.headers().get("retry-after").is_some();
        let body: serde_json::Value =
            serde_json::from_str(&response.text().unwrap()).unwrap_or_default();
        let sentence = body["error"].as_str().unwrap_or_default().to_owned();
        assert_eq!(status, 503, "{url}: {sentence}\n{}", server.log());
        assert!(retry_after, "{url}: no Retry-After");
        assert!(
            !sentence.is_empty() && !sentence.contains('\n'),
            "{url}: {sentence:?}"
        );
        assert!(
            elapsed >= Duration::from_secs(2) && elapsed < Duration::from_secs(15),
            "{url}: answered after {elapsed:?} (timeout 3 s): {sentence}"
        );
        // and it still answers
        let (health, _) = http(
            "GET",
            &format!("{}/_/health", server.base_url()),
            None,
            None,
        )
        .unwrap();
        assert_eq!(health, 200, "{url}");
        if url.starts_with("ssh://") {
            // The request answered at the deadline; the ssh process itself must give up too
            // (ConnectTimeout bounds the banner exchange), not linger holding a thread.
            let deadline = Instant::now() + Duration::from_secs(10);
            while !ssh_processes_for(port).is_empty() {
                assert!(
                    Instant::now() < deadline,
                    "ssh still waiting on the silent server: {:?}",
                    ssh_processes_for(port)
                );
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
    assert!(
        !held.lock().unwrap().is_empty(),
        "nothing ever connected to the silent server"
    );
}

/// Command lines of running `ssh` processes that talk to 127.0.0.1 on `port`.
fn ssh_processes_for(port: u16) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let is_ssh = args
            .first()
            .is_some_and(|a| a == "ssh" || a.ends_with("/ssh"));
        let port_arg = port.to_string();
        if is_ssh
            && args
                .iter()
                .any(|a| a == &port_arg || *a == format!("-p{port_arg}"))
        {
            found.push(args.join(" "));
        }
    }
    found
}
