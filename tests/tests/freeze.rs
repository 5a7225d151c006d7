//! Lambda's freeze (issue 33): a container runs only while it answers an invocation; between
//! invocations it is frozen, for seconds or minutes, then thawed or discarded. Nothing may depend
//! on work done after the answer, and a connection the git server closed meanwhile must not fail
//! the thawed container's next request.
//!
//! Five `gitstate serve` processes ("containers", each with its own cache) write to one
//! smart-HTTP repository (the write queue on) through a proxy that closes every connection idle
//! for a second on its next request, as the git server's keep-alive timeout would during a
//! freeze. Eight writers each POST their own state twelve times; like invocations, each write
//! takes a free container, and after its answer the container is, at random, frozen (SIGSTOP)
//! for 0.5–4 s and then thawed (SIGCONT), or frozen and then killed and replaced by a new one,
//! or put straight back. Writes go on in the other containers meanwhile. Required:
//! - every write answered 200 (no 5xx: a thawed container replaces its dead connections);
//! - p99 ≤ 5 s;
//! - nothing lost: each state's `git log` holds every serial its writer sent, in order, and the
//!   branch holds its last one;
//! - nothing stuck: no pending write is left in the queue.
//!
//! The benchmark twin is `scripts/bench freeze`.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use gitstate_tests::proxy::ClosingProxy;
use gitstate_tests::*;

const USER: &str = "freeze-bot";
const PASSWORD: &str = "freeze-secret";
const CONTAINERS: usize = 5;
const WRITERS: usize = 8;
const WRITES: u64 = 12;

fn state(writer: usize, serial: u64) -> String {
    format!(
        r#"{{"version":4,"terraform_version":"1.15.5","serial":{serial},"lineage":"freeze-{writer}","outputs":{{"w":{{"value":"{writer}-{serial}","type":"string"}}}},"resources":[]}}"#
    )
}

fn path(writer: usize) -> String {
    format!("freeze/w{writer}.tfstate")
}

/// Sends `signal` (`STOP`, `CONT`, `KILL`) to `pid`.
fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill -{signal} {pid}");
}

/// The containers: running processes, and which of them may take an invocation now.
struct Fleet {
    servers: Mutex<Vec<Gitstate>>,
    free: Mutex<Vec<usize>>,
    freed: Condvar,
    start: Box<dyn Fn() -> Gitstate + Send + Sync>,
}

impl Fleet {
    /// A free container (waiting for one, as an invocation waits for capacity).
    fn take(&self) -> (usize, String) {
        let mut free = self.free.lock().unwrap();
        loop {
            if let Some(at) = free.pop() {
                let base = self.servers.lock().unwrap()[at].base_url();
                return (at, base);
            }
            free = self.freed.wait(free).unwrap();
        }
    }

    fn release(&self, at: usize) {
        self.free.lock().unwrap().insert(0, at);
        self.freed.notify_one();
    }

    fn pid(&self, at: usize) -> u32 {
        self.servers.lock().unwrap()[at].pid()
    }
}

/// A small deterministic generator per writer (the run prints nothing random it cannot repeat).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn frozen_and_discarded_containers_lose_nothing_and_fail_nothing() {
    let repos = tempfile::tempdir().unwrap();
    let bare = bare_repo(repos.path(), "freeze.git");
    seed_commit(&bare);
    let git_server = GitHttpServer::start(repos.path(), USER, PASSWORD);
    let proxy = ClosingProxy::start(git_server.port(), Duration::from_secs(1));
    let url = git_server.url_through("freeze.git", proxy.port());
    let cwd = tempfile::tempdir().unwrap();
    let cwd_path = cwd.path().to_owned();
    let repository = format!("default={url}");
    let start = move || {
        Gitstate::start(
            &["--repository", &repository],
            &[("GIT_USERNAME", USER), ("GIT_PASSWORD", PASSWORD)],
            &cwd_path,
        )
    };
    let fleet = Arc::new(Fleet {
        servers: Mutex::new((0..CONTAINERS).map(|_| start()).collect()),
        free: Mutex::new((0..CONTAINERS).collect()),
        freed: Condvar::new(),
        start: Box::new(start),
    });
    let client = reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let started = Instant::now();
    let (freezes, kills) = (Arc::new(Mutex::new(0)), Arc::new(Mutex::new(0)));
    let results: Vec<Vec<(u64, u16, Duration, String)>> = std::thread::scope(|scope| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|writer| {
                let (fleet, client) = (fleet.clone(), client.clone());
                let (freezes, kills) = (freezes.clone(), kills.clone());
                scope.spawn(move || {
                    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ ((writer as u64 + 1) * 0x1234_5678));
                    let mut answers = Vec::new();
                    for serial in 1..=WRITES {
                        let (at, base) = fleet.take();
                        let sent = Instant::now();
                        let answer = client
                            .post(format!("{base}/state/default/{}", path(writer)))
                            .header("Content-Type", "application/json")
                            .body(state(writer, serial))
                            .send()
                            .map(|r| {
                                let status = r.status().as_u16();
                                (status, r.text().unwrap_or_default())
                            })
                            .unwrap_or_else(|e| (0, e.to_string()));
                        answers.push((serial, answer.0, sent.elapsed(), answer.1));
                        // After the answer: frozen (then thawed, or discarded), or free again.
                        match rng.next() % 10 {
                            0..=3 => {
                                let pid = fleet.pid(at);
                                signal(pid, "STOP");
                                *freezes.lock().unwrap() += 1;
                                let pause = Duration::from_millis(500 + rng.next() % 3500);
                                let discard = rng.next().is_multiple_of(5);
                                let fleet = fleet.clone();
                                let kills = kills.clone();
                                std::thread::spawn(move || {
                                    std::thread::sleep(pause);
                                    if discard {
                                        signal(pid, "KILL");
                                        *kills.lock().unwrap() += 1;
                                        let fresh = (fleet.start)();
                                        fleet.servers.lock().unwrap()[at] = fresh;
                                    } else {
                                        signal(pid, "CONT");
                                    }
                                    fleet.release(at);
                                });
                            }
                            _ => fleet.release(at),
                        }
                    }
                    answers
                })
            })
            .collect();
        writers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let elapsed = started.elapsed();
    // Let the last thaws finish before reading the remote.
    std::thread::sleep(Duration::from_secs(5));

    let mut latencies: Vec<Duration> = results.iter().flatten().map(|r| r.2).collect();
    latencies.sort();
    let p99 = latencies[(latencies.len() * 99).div_ceil(100) - 1];
    let failed: Vec<String> = results
        .iter()
        .enumerate()
        .flat_map(|(w, answers)| {
            answers
                .iter()
                .filter(|a| a.1 != 200)
                .map(move |a| format!("writer {w} serial {}: {} {}", a.0, a.1, a.3))
        })
        .collect();
    let logs = || {
        fleet
            .servers
            .lock()
            .unwrap()
            .iter()
            .map(|s| s.log())
            .collect::<Vec<_>>()
            .join("\n---\n")
    };
    println!(
        "{} writes in {:.1} s, {} freezes ({} discarded), p99 {:.2} s, {} connections closed by the proxy",
        latencies.len(),
        elapsed.as_secs_f64(),
        freezes.lock().unwrap(),
        kills.lock().unwrap(),
        p99.as_secs_f64(),
        proxy.closed()
    );
    assert!(
        failed.is_empty(),
        "non-2xx answers: {failed:#?}\n{}",
        logs()
    );
    assert!(
        *freezes.lock().unwrap() >= 10 && *kills.lock().unwrap() >= 1 && proxy.closed() >= 1,
        "the run did not freeze, discard and close enough to prove anything"
    );
    assert!(
        p99 <= Duration::from_secs(5),
        "p99 {p99:?} over 5 s\n{}",
        logs()
    );
    for writer in 0..WRITERS {
        let serials: Vec<u64> = git_log_subjects(&bare, "main", &path(writer))
            .iter()
            .rev()
            .filter_map(|s| parse_update(s, &path(writer)).map(|(serial, _)| serial))
            .collect();
        assert_eq!(
            serials,
            (1..=WRITES).collect::<Vec<_>>(),
            "writer {writer}: the commits on main"
        );
        assert_eq!(
            git_show(&bare, "main", &path(writer)).map(String::from_utf8),
            Some(Ok(state(writer, WRITES))),
            "writer {writer}: the state on main"
        );
    }
    let pending = refs_under(&bare, "refs/gitstate/queue/");
    assert!(
        pending.iter().all(|r| !r.contains("/pending/")),
        "writes left pending: {pending:?}"
    );
}
