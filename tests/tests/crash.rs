//! Crash at every step of the cross-process write queue (DESIGN §9.4, issue 17).
//!
//! Two `gitstate serve` processes with their own caches write to one smart-HTTP repository
//! (`uploadpack.allowFilter` on, as on GitHub and GitLab: the queue is on). Writers spread over
//! both; one process is told (`GITSTATE_TEST_CRASH_AT`) to abort at one step of the queue (the
//! third time it gets there, so that both processes' writes are in the queue), as a container
//! killed at that moment would. Its writers then send their write again to the other
//! process, as Terraform retries a failed request. Afterwards, for every step:
//! - the victim really died at that step, and the queue was in use (a push folded another
//!   process's writes, or the victim left its writes to the other's push);
//! - every write answered 200 is a commit on the branch (`git log`), and each state on the branch
//!   is its writer's last answered write or the one after it (sent, never answered);
//! - a later write of every state succeeds through the survivor, and the queue is then empty (no
//!   pending ref of the dead process stays behind), and every state reads back as written.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gitstate_tests::*;

const USER: &str = "crash-bot";
const PASSWORD: &str = "crash-secret";
const WRITERS: usize = 6;
/// The victim dies the HIT-th time it reaches its step.
const HIT: u32 = 3;

fn state(step: &str, writer: usize, serial: u64) -> String {
    format!(
        r#"{{"version":4,"terraform_version":"1.15.5","serial":{serial},"lineage":"crash-{step}-{writer}","outputs":{{"w":{{"value":"{writer}-{serial}","type":"string"}}}},"resources":[]}}"#
    )
}

fn path(step: &str, writer: usize) -> String {
    format!("crash/{}/w{writer}.tfstate", step.replace('.', "-"))
}

fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// POSTs `body` to the first of `servers` (falling over to the next on a transport error, as
/// a retried request would reach another container); Ok(status) or Err when none answered.
fn post(client: &reqwest::blocking::Client, urls: &[String], body: &str) -> Result<u16, String> {
    let mut last = String::new();
    for url in urls {
        match client
            .post(url)
            .header("Content-Type", "application/json")
            .body(body.to_owned())
            .send()
        {
            Ok(resp) => return Ok(resp.status().as_u16()),
            Err(e) => last = e.to_string(),
        }
    }
    Err(last)
}

fn crash_at(step: &str) {
    let repos = tempfile::tempdir().unwrap();
    let bare = bare_repo(repos.path(), "crash.git");
    seed_commit(&bare);
    let git_server = GitHttpServer::start(repos.path(), USER, PASSWORD);
    let url = git_server.url("crash.git");
    let cwd = tempfile::tempdir().unwrap();
    let env = [("GIT_USERNAME", USER), ("GIT_PASSWORD", PASSWORD)];
    let repository = format!("default={url}");
    let mut victim_env = env.to_vec();
    // Not at the first time: the queue is busy with both processes' writes when it dies.
    let crash_at = format!("{step}@{HIT}");
    victim_env.push(("GITSTATE_TEST_CRASH_AT", &crash_at));
    victim_env.push(("RUST_LOG", "info,gitstate_git=debug"));
    let mut victim = Gitstate::start(&["--repository", &repository], &victim_env, cwd.path());
    let survivor = Gitstate::start(&["--repository", &repository], &env, cwd.path());

    // Writer k writes its own state, serial after serial, first to process k % 2; after a
    // transport error (the victim died) to the survivor.
    let answered: Arc<Mutex<Vec<u64>>> = Arc::new(Mutex::new(vec![0; WRITERS]));
    let stop = Arc::new(AtomicBool::new(false));
    let failures: Arc<Mutex<Vec<String>>> = Arc::default();
    let threads: Vec<_> = (0..WRITERS)
        .map(|k| {
            let (answered, stop, failures) = (answered.clone(), stop.clone(), failures.clone());
            let mut urls = vec![
                victim.state_url("default", &path(step, k)),
                survivor.state_url("default", &path(step, k)),
            ];
            if k % 2 == 1 {
                urls.swap(0, 1);
            }
            let step = step.to_owned();
            std::thread::spawn(move || {
                let client = client();
                let mut serial = 1;
                while !stop.load(Ordering::SeqCst) {
                    match post(&client, &urls, &state(&step, k, serial)) {
                        Ok(200) => {
                            answered.lock().unwrap()[k] = serial;
                            serial += 1;
                        }
                        // Busy (its budget ran out): nothing written; send it again.
                        Ok(503) => {}
                        Ok(code) => failures
                            .lock()
                            .unwrap()
                            .push(format!("w{k} serial {serial}: {code}")),
                        Err(e) => failures
                            .lock()
                            .unwrap()
                            .push(format!("w{k} serial {serial}: {e}")),
                    }
                }
            })
        })
        .collect();
    let started = Instant::now();
    while victim.running() && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let died = !victim.running();
    // The survivor goes on alone for a while (taking over what the victim left).
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().unwrap();
    }
    let victim_log = victim.log();
    assert!(
        died && victim_log.contains(&format!("GITSTATE_TEST_CRASH_AT={step}")),
        "the victim did not abort at {step} within 60 s of contended writes:\n{victim_log}"
    );
    // The queue was really used: a push carried another process's writes, or the victim left
    // its writes to another process's push.
    let logs = format!("{victim_log}\n{}", survivor.log());
    assert!(
        logs.lines().any(|l| {
            (l.contains("batch pushed") && l.contains("folded=") && !l.contains("folded=0"))
                || l.contains("batch waits for another process's push")
        }),
        "{step}: the write queue was not used; logs:\n{logs}"
    );
    let failures = failures.lock().unwrap().clone();
    assert!(
        failures.is_empty(),
        "writes failed at {step}: {failures:?}\nsurvivor:\n{}",
        survivor.log()
    );
    let answered = answered.lock().unwrap().clone();

    for (k, &last) in answered.iter().enumerate() {
        let p = path(step, k);
        let subjects = git_log_subjects(&bare, "main", &p);
        for serial in 1..=last {
            let wanted = format!("(serial {serial})");
            assert!(
                subjects.iter().any(|s| s.contains(&wanted)),
                "{step}: the answered write {p} serial {serial} is not on the branch: {subjects:?}"
            );
        }
        let stored: serde_json::Value = serde_json::from_slice(
            &git_show(&bare, "main", &p).expect("the state is on the branch"),
        )
        .unwrap();
        let serial = stored["serial"].as_u64().unwrap();
        assert!(
            serial == last || serial == last + 1,
            "{step}: {p} holds serial {serial}, its last answered write was {last}"
        );
    }

    // Every state takes a later write through the survivor; afterwards nothing is pending.
    let client = client();
    for (k, &last) in answered.iter().enumerate() {
        let url = survivor.state_url("default", &path(step, k));
        let status = post(
            &client,
            std::slice::from_ref(&url),
            &state(step, k, last + 2),
        )
        .unwrap();
        assert_eq!(
            status,
            200,
            "{step}: a later write of w{k} failed:\n{}",
            survivor.log()
        );
        let resp = client.get(&url).send().unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        let read: serde_json::Value = serde_json::from_str(&resp.text().unwrap()).unwrap();
        assert_eq!(
            read["serial"].as_u64(),
            Some(last + 2),
            "{step}: w{k} reads back"
        );
    }
    let pending = refs_under(&bare, "refs/gitstate/queue/main/pending/");
    assert!(
        pending.is_empty(),
        "{step}: pending writes stayed in the queue after later writes: {pending:?}"
    );
}

#[test]
fn a_crash_after_listing_the_queue_loses_nothing() {
    crash_at("queue.listed");
}

#[test]
fn a_crash_after_fetching_the_pending_writes_loses_nothing() {
    crash_at("queue.fetched");
}

#[test]
fn a_crash_after_the_folding_push_loses_nothing() {
    crash_at("queue.pushed");
}

#[test]
fn a_crash_after_publishing_loses_nothing() {
    crash_at("queue.published");
}

#[test]
fn a_crash_after_reading_the_answer_loses_nothing() {
    crash_at("queue.answered");
}
