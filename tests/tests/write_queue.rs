//! The answers of the cross-process write queue (DESIGN §9.4) do not pile up on the remote.
//!
//! Three `gitstate serve` processes with their own caches write to one smart-HTTP repository
//! (the queue on) through a proxy that delays every request, so that writes wait for another
//! process's push and learn their answer from `refs/gitstate/queue/main/done/…`. Each process
//! deletes the answers it read with its next push (a publication or a leading round), or alone
//! within a second when none comes. Checked: every answered write is a commit on the branch;
//! answers did go with a later push; and once the writers stop, within a few seconds the queue
//! holds nothing, neither pending writes nor answers (which a leader would otherwise delete only
//! once they are two minutes old). With partial fetch on the server and without.

use std::time::{Duration, Instant};

use gitstate_tests::proxy::DelayProxy;
use gitstate_tests::*;

const USER: &str = "queue-bot";
const PASSWORD: &str = "queue-secret";
const PROCESSES: usize = 3;
const WRITERS: usize = 9;
const WRITES: u64 = 6;

fn state(writer: usize, serial: u64) -> String {
    format!(
        r#"{{"version":4,"terraform_version":"1.15.5","serial":{serial},"lineage":"queue-{writer}","outputs":{{"w":{{"value":"{writer}-{serial}","type":"string"}}}},"resources":[]}}"#
    )
}

fn path(writer: usize) -> String {
    format!("queue/w{writer}.tfstate")
}

#[test]
fn the_answers_read_are_deleted_with_the_next_push_or_soon_after() {
    queue_empties(bare_repo);
}

/// The same on a server without partial fetch (git's default): the queue is on there too, its
/// leaders fetch the pending writes whole by id (DESIGN §9.4).
#[test]
fn without_partial_fetch_the_queue_is_on_and_empties_as_well() {
    queue_empties(bare_repo_without_filter);
}

fn queue_empties(bare_repo: fn(&std::path::Path, &str) -> std::path::PathBuf) {
    let repos = tempfile::tempdir().unwrap();
    let bare = bare_repo(repos.path(), "queue.git");
    seed_commit(&bare);
    let git_server = GitHttpServer::start(repos.path(), USER, PASSWORD);
    let proxy = DelayProxy::start(git_server.port(), Duration::from_millis(15));
    let url = git_server.url_through("queue.git", proxy.port());
    let cwd = tempfile::tempdir().unwrap();
    let repository = format!("default={url}");
    let env = [
        ("GIT_USERNAME", USER),
        ("GIT_PASSWORD", PASSWORD),
        ("RUST_LOG", "info,gitstate_git=debug"),
    ];
    let servers: Vec<Gitstate> = (0..PROCESSES)
        .map(|_| Gitstate::start(&["--repository", &repository], &env, cwd.path()))
        .collect();
    let client = reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();

    // Writer k writes its own state through process k % PROCESSES, serial after serial.
    let failures: Vec<String> = std::thread::scope(|scope| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|k| {
                let url = servers[k % PROCESSES].state_url("default", &path(k));
                let client = &client;
                scope.spawn(move || {
                    let mut failures = Vec::new();
                    for serial in 1..=WRITES {
                        let resp = client
                            .post(&url)
                            .header("Content-Type", "application/json")
                            .body(state(k, serial))
                            .send()
                            .unwrap();
                        if resp.status() != 200 {
                            failures.push(format!("w{k} serial {serial}: {}", resp.status()));
                        }
                    }
                    failures
                })
            })
            .collect();
        writers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    let logs: String = servers.iter().map(|s| s.log()).collect();
    assert!(failures.is_empty(), "writes failed: {failures:?}\n{logs}");
    let stopped = Instant::now();

    for k in 0..WRITERS {
        let subjects = git_log_subjects(&bare, "main", &path(k));
        for serial in 1..=WRITES {
            assert!(
                subjects
                    .iter()
                    .any(|s| s.contains(&format!("(serial {serial})"))),
                "w{k} serial {serial} is not on the branch: {subjects:?}"
            );
        }
    }
    // The writes went through the queue, and answers read went with a later push.
    assert!(
        logs.contains("batch waits for another process's push"),
        "the write queue was not used:\n{logs}"
    );
    assert!(
        !logs.contains("could not fetch the pending writes"),
        "a leader could not fetch the writes it was to fold:\n{logs}"
    );
    assert!(
        logs.contains("answers read earlier join this round's ref updates"),
        "no answer read joined a later round:\n{logs}"
    );
    // Nothing stays in the queue: the last answers are deleted alone, soon.
    let mut left = refs_under(&bare, "refs/gitstate/queue/");
    while !left.is_empty() && stopped.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(100));
        left = refs_under(&bare, "refs/gitstate/queue/");
    }
    let logs: String = servers.iter().map(|s| s.log()).collect();
    assert!(
        left.is_empty(),
        "the queue still holds {left:?} 5 s after the last write was answered:\n{logs}"
    );
}
