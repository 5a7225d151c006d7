//! Faults on the wire during a push, injected by a TCP proxy between gitstate and `git daemon`:
//! the connection is cut while the pack is being uploaded (every push while the fault is on, the
//! repeats inside the request included), or after the whole push went out but before
//! `report-status` came back. A cut upload is answered 502/503 and leaves the old state; a lost
//! report is answered 200, because the next advertisement shows the push was made (DESIGN §4).
//! Either way the remote holds the old or the new state (never a partial commit) and no lock;
//! a retry, as Terraform's own retries do, converges on the new state with one commit.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gitstate_tests::*;

/// What the proxy does to receive-pack connections (everything else passes untouched).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    None,
    /// Close both directions once this many bytes went from gitstate to the server after the
    /// server's advertisement (the commands and part of the pack).
    CutUpload(usize),
    /// Let the whole push through, but never return the server's answer (report-status).
    DropReport,
    /// On fetches (upload-pack), close both directions once this many bytes came back from the
    /// server (the advertisement and part of the pack).
    CutFetch(usize),
}

struct Proxy {
    port: u16,
    fault: Arc<Mutex<Fault>>,
    faulted: Arc<AtomicUsize>,
}

fn pump(mut from: TcpStream, mut to: TcpStream, limit: Option<usize>, faulted: Arc<AtomicUsize>) {
    let mut buf = [0u8; 8192];
    let mut sent = 0usize;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let n = match limit {
            Some(limit) if sent + n > limit => {
                let _ = to.write_all(&buf[..limit - sent]);
                faulted.fetch_add(1, Ordering::SeqCst);
                let _ = to.shutdown(Shutdown::Both);
                let _ = from.shutdown(Shutdown::Both);
                return;
            }
            _ => n,
        };
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
        sent += n;
    }
    let _ = to.shutdown(Shutdown::Write);
}

impl Proxy {
    fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let fault = Arc::new(Mutex::new(Fault::None));
        let faulted = Arc::new(AtomicUsize::new(0));
        let (f, count) = (fault.clone(), faulted.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                let mode = *f.lock().unwrap();
                let count = count.clone();
                std::thread::spawn(move || {
                    // The first pkt-line names the service: faults apply to pushes only. Read it
                    // whole (its length prefix may arrive in a segment of its own).
                    let mut client = client;
                    let mut head = [0u8; 512];
                    let mut n = 0;
                    if client.read_exact(&mut head[..4]).is_ok() {
                        n = 4;
                        let len = std::str::from_utf8(&head[..4])
                            .ok()
                            .and_then(|h| usize::from_str_radix(h, 16).ok())
                            .unwrap_or(4)
                            .clamp(4, head.len());
                        if client.read_exact(&mut head[4..len]).is_ok() {
                            n = len;
                        }
                    }
                    let push = String::from_utf8_lossy(&head[..n]).contains("git-receive-pack");
                    let fetch = String::from_utf8_lossy(&head[..n]).contains("git-upload-pack");
                    let mut server_w = server.try_clone().unwrap();
                    let _ = server_w.write_all(&head[..n]);
                    if let (true, Fault::CutFetch(bytes)) = (fetch, mode) {
                        let client_r = client.try_clone().unwrap();
                        let server_w = server.try_clone().unwrap();
                        let c2 = count.clone();
                        let up = std::thread::spawn(move || pump(client_r, server_w, None, c2));
                        pump(server, client, Some(bytes), count);
                        let _ = up.join();
                        return;
                    }
                    let (up_limit, down_limit) = match (push, mode) {
                        (true, Fault::CutUpload(bytes)) => (Some(bytes), None),
                        // the advertisement passes; what follows the push (report-status) does not
                        (true, Fault::DropReport) => (None, Some(usize::MAX)),
                        _ => (None, None),
                    };
                    let client_r = client.try_clone().unwrap();
                    let c2 = count.clone();
                    let up = std::thread::spawn(move || pump(client_r, server_w, up_limit, c2));
                    if down_limit.is_some() {
                        // forward the advertisement, then stop forwarding once the client has
                        // finished sending (the push is complete on the server)
                        let mut server_r = server;
                        server_r
                            .set_read_timeout(Some(Duration::from_millis(300)))
                            .unwrap();
                        let mut buf = [0u8; 8192];
                        let mut advertised = false;
                        loop {
                            match server_r.read(&mut buf) {
                                Ok(0) => break,
                                Ok(n) if !advertised => {
                                    let _ = client.write_all(&buf[..n]);
                                    if buf[..n].ends_with(b"0000") {
                                        advertised = true;
                                    }
                                }
                                Ok(_) => {
                                    // report-status: swallowed
                                    count.fetch_add(1, Ordering::SeqCst);
                                    let _ = client.shutdown(Shutdown::Both);
                                    break;
                                }
                                // a read timeout: keep waiting for the server's answer
                                Err(_) => {}
                            }
                        }
                    } else {
                        pump(server, client, None, count);
                    }
                    let _ = up.join();
                });
            }
        });
        Proxy {
            port,
            fault,
            faulted,
        }
    }

    fn set(&self, fault: Fault) {
        *self.fault.lock().unwrap() = fault;
    }
}

/// A state with `pad` bytes of hex noise (it compresses poorly, so the pack is large enough to
/// be cut in the middle).
fn state(serial: u64, pad: usize) -> String {
    let noise = noise(serial, pad, b"0123456789abcdef");
    format!(
        r#"{{"version":4,"terraform_version":"1.15.5","serial":{serial},"lineage":"faults","outputs":{{}},"resources":[],"pad":"{noise}"}}"#
    )
}

/// A bare repository behind `git daemon`, the proxy in front of it, and gitstate (5 s git
/// timeout) talking to the daemon through the proxy.
struct Setup {
    _repos: tempfile::TempDir,
    _cwd: tempfile::TempDir,
    repo: std::path::PathBuf,
    daemon: GitDaemon,
    proxy: Proxy,
    server: Gitstate,
}

impl Setup {
    fn start() -> Setup {
        let repos = tempfile::tempdir().unwrap();
        let repo = bare_repo(repos.path(), "states");
        let daemon = GitDaemon::start(repos.path());
        let proxy = Proxy::start(daemon.port());
        let cwd = tempfile::tempdir().unwrap();
        std::fs::write(
            cwd.path().join("gitstate.hcl"),
            format!(
                "git_timeout_seconds = 5\nrepository \"default\" {{\n  url = \"git://127.0.0.1:{}/states.git\"\n}}\n",
                proxy.port
            ),
        )
        .unwrap();
        let server = Gitstate::start(&["--config", "gitstate.hcl"], &[], cwd.path());
        Setup {
            _repos: repos,
            _cwd: cwd,
            repo,
            daemon,
            proxy,
            server,
        }
    }
}

#[test]
fn cut_pushes_leave_the_old_or_the_new_state_and_retries_converge() {
    let setup = Setup::start();
    let (repo, proxy, server) = (setup.repo.as_path(), &setup.proxy, &setup.server);
    let url = server.state_url("default", "f.tfstate");
    let mut serial = 1;
    let first = state(serial, 100_000);
    assert_eq!(http("POST", &url, Some(&first), None).unwrap().0, 200);
    let mut sent = vec![first];

    for fault in [
        Fault::CutUpload(200),
        Fault::CutUpload(30_000),
        Fault::DropReport,
    ] {
        serial += 1;
        let body = state(serial, 100_000);
        let before = git_log_subjects(repo, "main", "f.tfstate").len();
        let faulted_before = proxy.faulted.load(Ordering::SeqCst);
        proxy.set(fault);
        let (status, text) = http("POST", &url, Some(&body), None).unwrap();
        proxy.set(Fault::None);
        assert!(
            proxy.faulted.load(Ordering::SeqCst) > faulted_before,
            "{fault:?}: the proxy never injected the fault (status {status})"
        );
        if fault == Fault::DropReport {
            // The push was made: the next advertisement says so, and the answer is 200.
            assert_eq!(status, 200, "{fault:?}: {text}\n{}", server.log());
            assert!(
                server.log().contains("the refs show the push was made"),
                "{fault:?}: not judged by the next advertisement:\n{}",
                server.log()
            );
        } else {
            assert!(
                status == 502 || status == 503,
                "{fault:?}: {status} {text}\n{}",
                server.log()
            );
            assert!(
                logged_with_its_cause(&server.log(), status),
                "{fault:?}: the {status} is not logged at WARN with its cause:\n{}",
                server.log()
            );
        }
        // the remote: the old or the new state, whole, and no lock
        let now = git_show(repo, "main", "f.tfstate").unwrap();
        let now = String::from_utf8(now).unwrap();
        assert!(
            now == *sent.last().unwrap() || now == body,
            "{fault:?}: a state nobody sent"
        );
        let after = git_log_subjects(repo, "main", "f.tfstate").len();
        assert!(
            after == before || after == before + 1,
            "{fault:?}: {before} → {after} commits"
        );
        if fault == Fault::DropReport {
            assert_eq!(
                (now == body, after),
                (true, before + 1),
                "{fault:?}: answered 200 without its commit"
            );
        } else {
            assert_eq!(after, before, "{fault:?}: a cut upload must not land");
        }
        assert!(refs_under(repo, "refs/heads/locks").is_empty());
        // a retry converges on the new state
        assert_eq!(
            http("POST", &url, Some(&body), None).unwrap().0,
            200,
            "{fault:?}: retry"
        );
        assert_eq!(
            git_show(repo, "main", "f.tfstate").unwrap(),
            body.as_bytes()
        );
        assert_eq!(
            git_log_subjects(repo, "main", "f.tfstate").len(),
            before + 1,
            "{fault:?}: the retry made a second commit"
        );
        git(Some(repo), &["fsck", "--no-progress"]);
        sent.push(body);
    }
    assert_eq!(
        http("GET", &url, None, None).unwrap(),
        (200, sent.last().unwrap().clone())
    );
}

/// Several writers of one process whose pushes are cut (their writes go in batches, DESIGN
/// §9.2): with the upload cut, every write is answered 5xx and each state on the remote is its
/// old version (a batch lands entirely or not at all); with the report lost, the batch was made
/// and every write is answered 200 with its commit. Retries converge with one commit per write.
#[test]
fn cut_batch_pushes_land_whole_or_not_at_all_and_retries_converge() {
    let setup = Setup::start();
    let (repo, proxy, server) = (setup.repo.as_path(), &setup.proxy, &setup.server);
    const WRITERS: usize = 6;
    let urls: Vec<String> = (0..WRITERS)
        .map(|w| server.state_url("default", &format!("b/w{w}.tfstate")))
        .collect();
    for url in &urls {
        assert_eq!(
            http("POST", url, Some(&state(1, 20_000)), None).unwrap().0,
            200
        );
    }
    for (round, fault) in [Fault::CutUpload(300), Fault::DropReport]
        .into_iter()
        .enumerate()
    {
        let serial = round as u64 + 2;
        let before: Vec<usize> = (0..WRITERS)
            .map(|w| git_log_subjects(repo, "main", &format!("b/w{w}.tfstate")).len())
            .collect();
        let faulted_before = proxy.faulted.load(Ordering::SeqCst);
        proxy.set(fault);
        let answers: Vec<(u16, String)> = std::thread::scope(|scope| {
            let handles: Vec<_> = urls
                .iter()
                .map(|url| {
                    scope.spawn(move || {
                        http("POST", url, Some(&state(serial, 20_000)), None).unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        proxy.set(Fault::None);
        assert!(
            proxy.faulted.load(Ordering::SeqCst) > faulted_before,
            "{fault:?}: no fault"
        );
        for (w, (status, text)) in answers.iter().enumerate() {
            let now = git_show(repo, "main", &format!("b/w{w}.tfstate")).unwrap();
            let after = git_log_subjects(repo, "main", &format!("b/w{w}.tfstate")).len();
            if fault == Fault::DropReport {
                assert_eq!(
                    *status,
                    200,
                    "{fault:?}: writer {w}: {text}\n{}",
                    server.log()
                );
                assert!(
                    now == state(serial, 20_000).into_bytes() && after == before[w] + 1,
                    "{fault:?}: writer {w}: answered 200 without its commit"
                );
            } else {
                assert!(
                    *status == 502 || *status == 503,
                    "{fault:?}: writer {w}: {status} {text}\n{}",
                    server.log()
                );
                assert_eq!(
                    now,
                    state(serial - 1, 20_000).into_bytes(),
                    "{fault:?}: writer {w}"
                );
                assert_eq!(after, before[w], "{fault:?}: a cut upload must not land");
            }
        }
        // Retries (as Terraform's) converge: the new state, one commit per write.
        for (w, url) in urls.iter().enumerate() {
            assert_eq!(
                http("POST", url, Some(&state(serial, 20_000)), None)
                    .unwrap()
                    .0,
                200
            );
            assert_eq!(
                git_log_subjects(repo, "main", &format!("b/w{w}.tfstate")).len(),
                before[w] + 1,
                "{fault:?}: writer {w}: one commit for the write"
            );
        }
        git(Some(repo), &["fsck", "--no-progress"]);
    }
}

/// A fetch cut in the middle (after someone else moved the branch): 502/503, nothing cached that
/// is wrong, and the next read serves the new state.
#[test]
fn a_cut_fetch_is_a_5xx_and_the_next_read_is_right() {
    let setup = Setup::start();
    let (repo, daemon, proxy, server) = (
        setup.repo.as_path(),
        &setup.daemon,
        &setup.proxy,
        &setup.server,
    );
    let url = server.state_url("default", "f.tfstate");
    assert_eq!(
        http("POST", &url, Some(&state(1, 1000)), None).unwrap().0,
        200
    );
    assert_eq!(http("GET", &url, None, None).unwrap().0, 200);
    // someone else writes a large new version straight to the git server
    let other = tempfile::tempdir().unwrap();
    let remote = format!("git://127.0.0.1:{}/states.git", daemon.port());
    git(
        None,
        &["clone", "--quiet", &remote, other.path().to_str().unwrap()],
    );
    let newer = state(2, 100_000);
    std::fs::write(other.path().join("f.tfstate"), &newer).unwrap();
    git(Some(other.path()), &["commit", "--quiet", "-am", "by hand"]);
    git(Some(other.path()), &["push", "--quiet", "origin", "main"]);

    let faulted_before = proxy.faulted.load(Ordering::SeqCst);
    proxy.set(Fault::CutFetch(4_000));
    let (status, text) = http("GET", &url, None, None).unwrap();
    proxy.set(Fault::None);
    assert!(
        proxy.faulted.load(Ordering::SeqCst) > faulted_before,
        "no fault injected ({status})"
    );
    assert!(
        status == 502 || status == 503,
        "{status} {text}\n{}",
        server.log()
    );
    assert!(
        logged_with_its_cause(&server.log(), status),
        "the {status} is not logged at WARN with its cause:\n{}",
        server.log()
    );
    let (status, body) = http("GET", &url, None, None).unwrap();
    assert_eq!(
        (status, body == newer),
        (200, true),
        "the read after the cut is wrong"
    );
    assert_eq!(git_log_subjects(repo, "main", "f.tfstate").len(), 2);
}

/// Whether the server logged a 5xx answer at WARN with its cause (the access line alone says only
/// the status).
fn logged_with_its_cause(log: &str, status: u16) -> bool {
    log.lines().any(|line| {
        line.contains("WARN")
            && line.contains("answered with an error")
            && line.contains(&format!("status={status}"))
            && line.contains("error=")
    })
}
