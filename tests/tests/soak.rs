//! Soak: 16 writers over 16 states of one repository on a smart-HTTP remote, through one server,
//! while 2 lockers take and release locks on their own states and 2 readers read the writers'
//! states. Afterwards: every write is a commit, every file is its writer's last write, no answer
//! was a 5xx, no lock is left, and no reader ever saw a state go back. Throughput and latency
//! percentiles are printed (not asserted).
//!
//! Length: by default each writer keeps writing for `GITSTATE_SOAK_SECONDS` (60) and at least 5
//! times; `GITSTATE_SOAK_WRITES=200` instead makes every writer write exactly that many times
//! (the long soak of docs/RELIABILITY.md, about 9 minutes on 2 cores).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gitstate_tests::*;

const USER: &str = "soak-bot";
const PASSWORD: &str = "soak-secret";
const WRITERS: usize = 16;

fn state(writer: usize, serial: u64) -> String {
    format!(
        r#"{{"version":4,"terraform_version":"1.15.5","serial":{serial},"lineage":"soak-{writer}","outputs":{{"w":{{"value":"{writer}-{serial}","type":"string"}}}},"resources":[]}}"#
    )
}

fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[test]
fn soak_sixteen_writers_with_lockers_and_readers_lose_nothing() {
    let fixed_writes: Option<u64> = std::env::var("GITSTATE_SOAK_WRITES")
        .ok()
        .and_then(|v| v.parse().ok());
    let seconds: u64 = std::env::var("GITSTATE_SOAK_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    // How many writes writer w made (a writer stops after a whole write, never mid-request).
    let wrote = Arc::new(Mutex::new(vec![0u64; WRITERS]));
    let repos = tempfile::tempdir().unwrap();
    let repo = bare_repo(repos.path(), "states");
    let git_server = GitHttpServer::start(repos.path(), USER, PASSWORD);
    let spec = format!("default={}", git_server.url("states"));
    let cwd = tempfile::tempdir().unwrap();
    let server = Gitstate::start(
        &["--repository", &spec],
        &[
            ("GIT_USERNAME", USER),
            ("GIT_PASSWORD", PASSWORD),
            ("RUST_LOG", "warn"),
        ],
        cwd.path(),
    );
    let base = server.base_url();
    let done = Arc::new(AtomicBool::new(false));
    let problems = Arc::new(Mutex::new(Vec::<String>::new()));
    let latencies = Arc::new(Mutex::new(Vec::<f64>::new()));
    let started = Instant::now();

    let mut threads = Vec::new();
    for w in 0..WRITERS {
        let (base, problems, latencies, wrote) = (
            base.clone(),
            problems.clone(),
            latencies.clone(),
            wrote.clone(),
        );
        threads.push(std::thread::spawn(move || {
            let http = client();
            let url = format!("{base}/state/default/soak/w{w}.tfstate");
            for serial in 1.. {
                let more = match fixed_writes {
                    Some(n) => serial <= n,
                    None => serial <= 5 || Instant::now() < deadline,
                };
                if !more {
                    break;
                }
                wrote.lock().unwrap()[w] = serial;
                let t = Instant::now();
                match http.post(&url).body(state(w, serial)).send() {
                    Ok(r) if r.status().as_u16() == 200 => {}
                    Ok(r) => problems.lock().unwrap().push(format!(
                        "writer {w} serial {serial}: {} {}",
                        r.status(),
                        r.text().unwrap_or_default()
                    )),
                    Err(e) => problems
                        .lock()
                        .unwrap()
                        .push(format!("writer {w} serial {serial}: {e}")),
                }
                latencies
                    .lock()
                    .unwrap()
                    .push(t.elapsed().as_secs_f64() * 1000.0);
            }
        }));
    }
    let mut helpers = Vec::new();
    for l in 0..2 {
        let (base, problems, done) = (base.clone(), problems.clone(), done.clone());
        helpers.push(std::thread::spawn(move || {
            let http = client();
            let url = format!("{base}/state/default/soak/lock{l}.tfstate");
            let mut cycles = 0u32;
            while !done.load(Ordering::Relaxed) {
                let info = lock_info(
                    &format!("locker-{l}-{cycles}"),
                    "locker@soak",
                    "OperationTypeApply",
                );
                for method in ["LOCK", "UNLOCK"] {
                    let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
                    match http.request(m, &url).body(info.clone()).send() {
                        Ok(r) if r.status().as_u16() == 200 => {}
                        Ok(r) => problems
                            .lock()
                            .unwrap()
                            .push(format!("locker {l} {method}: {}", r.status())),
                        Err(e) => problems
                            .lock()
                            .unwrap()
                            .push(format!("locker {l} {method}: {e}")),
                    }
                }
                cycles += 1;
            }
        }));
    }
    for reader in 0..2usize {
        let (base, problems, done) = (base.clone(), problems.clone(), done.clone());
        helpers.push(std::thread::spawn(move || {
            let http = client();
            let mut seen = [0u64; WRITERS];
            let mut i = reader;
            while !done.load(Ordering::Relaxed) {
                let w = i % WRITERS;
                i += 3;
                let url = format!("{base}/state/default/soak/w{w}.tfstate");
                match http.get(&url).send() {
                    Ok(r) if r.status().as_u16() == 204 => {}
                    Ok(r) if r.status().as_u16() == 200 => {
                        let v: serde_json::Value =
                            serde_json::from_str(&r.text().unwrap_or_default()).unwrap_or_default();
                        let serial = v["serial"].as_u64().unwrap_or(0);
                        if serial < seen[w] {
                            problems.lock().unwrap().push(format!(
                                "reader {reader}: w{w} went back from {} to {serial}",
                                seen[w]
                            ));
                        }
                        seen[w] = serial;
                    }
                    Ok(r) => problems
                        .lock()
                        .unwrap()
                        .push(format!("reader {reader}: {}", r.status())),
                    Err(e) => problems
                        .lock()
                        .unwrap()
                        .push(format!("reader {reader}: {e}")),
                }
            }
        }));
    }
    for t in threads {
        t.join().unwrap();
    }
    let elapsed = started.elapsed();
    done.store(true, Ordering::Relaxed);
    for t in helpers {
        t.join().unwrap();
    }

    let problems = problems.lock().unwrap();
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    let wrote = wrote.lock().unwrap().clone();
    for (w, &writes) in wrote.iter().enumerate() {
        let path = format!("soak/w{w}.tfstate");
        assert_eq!(
            git_log_subjects(&repo, "main", &path).len() as u64,
            writes,
            "{path}: lost writes"
        );
        assert_eq!(
            git_show(&repo, "main", &path).unwrap(),
            state(w, writes).as_bytes(),
            "{path} is not its last write"
        );
    }
    assert!(
        refs_under(&repo, "refs/heads/locks").is_empty(),
        "locks left behind"
    );
    let mut sorted = latencies.lock().unwrap().clone();
    sorted.sort_by(|a, b| a.total_cmp(b));
    eprintln!(
        "soak: {} writes in {:.1} s = {:.1} writes/s; POST latency p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        sorted.len(),
        elapsed.as_secs_f64(),
        sorted.len() as f64 / elapsed.as_secs_f64(),
        percentile(&sorted, 0.5),
        percentile(&sorted, 0.99),
        sorted.last().copied().unwrap_or(0.0)
    );
}
