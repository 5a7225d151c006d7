//! What a Terraform cycle (LOCK, GET, POST with the lock's ID, UNLOCK) costs the git server at one
//! process and across eight (issue 58): every request of the cycle goes to the next process, as
//! Lambda may route each to another container, so each lands on a process that did not serve the
//! one before. The git server's requests are counted from its access log, request by request
//! (one writer, one request at a time). The first two cycles are left out: they meet the server
//! for the first time (capability advertisements, the first fetch of the branch).
//!
//! Checked: at one process, each request is one git request (the cache holds what it needs; a
//! LOCK, the holder's POST and the UNLOCK each go in one push). Across eight, each request costs
//! at most what reading a tip it has not seen needs: a GET 3 (the ref listing, the new tip's
//! trees, the state's blob), a LOCK 3 (the advertisement, the trees its path check reads, the
//! push), a POST 4 (the advertisement, the trees, the blob, and the push: a process whose last
//! write built on another process's tip saw no race, so it leads at once rather than publish
//! its write first, DESIGN §9.4), and the holder's UNLOCK 2 (the advertisement and the delete:
//! the lock commit follows from the LockInfo, so it is never fetched). A LOCK whose one-request
//! push lost to its own process's write tries once more in one request.

use gitstate_tests::*;

const USER: &str = "cycle-bot";
const PASSWORD: &str = "cycle-secret";
const CYCLES: usize = 6;
const WARM_UP: usize = 2;

fn state(serial: usize) -> String {
    format!(
        r#"{{"version":4,"terraform_version":"1.15.5","serial":{serial},"lineage":"cycles","outputs":{{}},"resources":[]}}"#
    )
}

/// A seeded repository behind `git http-backend` (its requests logged), and `gitstate serve`
/// processes on it, each with a cache of its own.
struct Remote {
    _repos: tempfile::TempDir,
    bare: std::path::PathBuf,
    git_server: GitHttpServer,
    cwd: tempfile::TempDir,
}

impl Remote {
    fn new() -> Remote {
        let repos = tempfile::tempdir().unwrap();
        let bare = bare_repo(repos.path(), "cycles");
        seed_commit(&bare);
        let git_server = GitHttpServer::start(repos.path(), USER, PASSWORD);
        Remote {
            _repos: repos,
            bare,
            git_server,
            cwd: tempfile::tempdir().unwrap(),
        }
    }

    fn gitstate(&self) -> Gitstate {
        let repository = format!("default={}", self.git_server.url("cycles"));
        let env = [("GIT_USERNAME", USER), ("GIT_PASSWORD", PASSWORD)];
        Gitstate::start(&["--repository", &repository], &env, self.cwd.path())
    }
}

/// The git requests each kind of request caused after the warm-up, by kind (LOCK, GET, POST,
/// UNLOCK): one entry per cycle.
fn cycles_across(processes: usize) -> Vec<[(String, Vec<String>); 4]> {
    let remote = Remote::new();
    let (bare, git_server) = (&remote.bare, &remote.git_server);
    let servers: Vec<Gitstate> = (0..processes).map(|_| remote.gitstate()).collect();
    let path = "c/p8/w001.tfstate";
    let mut next = 0;
    let mut route = || {
        next += 1;
        servers[(next - 1) % processes].state_url("default", path)
    };
    let mut counted = Vec::new();
    for k in 0..CYCLES {
        let id = format!("cycle-{k}");
        let info = lock_info(&id, "cycle@test", "OperationTypeApply");
        let body = state(k + 1);
        let mut kinds: Vec<(String, Vec<String>)> = Vec::new();
        for (method, query, body, ok) in [
            ("LOCK", "", Some(info.as_str()), &[200][..]),
            ("GET", "", None, &[200, 204][..]),
            ("POST", "?ID=", Some(body.as_str()), &[200][..]),
            ("UNLOCK", "", Some(info.as_str()), &[200][..]),
        ] {
            let url = match query {
                "" => route(),
                _ => format!("{}{query}{id}", route()),
            };
            let before = git_server.requests().len();
            let (status, text) = http(method, &url, body, None).unwrap();
            assert!(ok.contains(&status), "cycle {k} {method}: {status} {text}");
            if method == "GET" && k > 0 {
                // The state the last cycle wrote, through another process.
                assert!(
                    text.contains(&format!("\"serial\":{k},")),
                    "cycle {k} GET: not the last cycle's state: {text}"
                );
            }
            kinds.push((method.to_owned(), git_server.requests()[before..].to_vec()));
        }
        if k >= WARM_UP {
            counted.push(kinds.try_into().unwrap());
        }
    }
    assert_eq!(
        refs_under(bare, "refs/heads/locks"),
        Vec::<String>::new(),
        "no lock left"
    );
    counted
}

/// Fails with what each request cost when `kind`'s git requests exceed `most`.
fn at_most(cycles: &[[(String, Vec<String>); 4]], kind: &str, most: usize) {
    for (k, cycle) in cycles.iter().enumerate() {
        let (_, requests) = cycle.iter().find(|(name, _)| name == kind).unwrap();
        assert!(
            requests.len() <= most,
            "{kind} of counted cycle {k}: {} git requests, at most {most} expected: {requests:#?}\nthe whole cycle: {cycle:#?}",
            requests.len()
        );
    }
}

#[test]
fn a_cycle_costs_one_git_request_per_request_at_one_process() {
    let cycles = cycles_across(1);
    for kind in ["LOCK", "GET", "POST", "UNLOCK"] {
        at_most(&cycles, kind, 1);
    }
}

#[test]
fn across_eight_processes_each_request_reads_only_what_it_has_not_seen() {
    let cycles = cycles_across(8);
    at_most(&cycles, "LOCK", 3);
    at_most(&cycles, "GET", 3);
    at_most(&cycles, "POST", 4);
    at_most(&cycles, "UNLOCK", 2);
    for cycle in &cycles {
        let (_, unlock) = &cycle[3];
        assert!(
            unlock.iter().all(|r| r.contains("git-receive-pack")),
            "the holder's UNLOCK fetched: {unlock:#?}"
        );
    }
}

/// Terraform's GET comes right after its LOCK, which Lambda may have routed to another
/// container: the GET's process then has not seen the lock. A GET whose caller's token has not
/// expired does not depend on the lock, so it reads the state alone: on a process that wrote
/// the current state itself, the ref listing is all it asks the git server (before, it also
/// fetched the lock commit and its file). The holder's POST that follows on that process needs
/// the lock: the advertisement, the lock commit whole in one fetch (its tree and LockInfo with
/// it), and the push; 3 git requests (before the GET read the lock: the push alone, which the
/// GET had paid for with its two fetches).
#[test]
fn a_get_under_a_lock_taken_elsewhere_reads_only_the_state() {
    let remote = Remote::new();
    let (bare, git_server) = (&remote.bare, &remote.git_server);
    let (writer, locker) = (remote.gitstate(), remote.gitstate());
    let path = "c/p8/w001.tfstate";
    let body = state(1);
    let (status, text) = http(
        "POST",
        &writer.state_url("default", path),
        Some(&body),
        None,
    )
    .unwrap();
    assert_eq!(status, 200, "{text}");
    let info = lock_info("elsewhere", "cycle@test", "OperationTypeApply");
    let lock_url = locker.state_url("default", path);
    let (status, text) = http("LOCK", &lock_url, Some(&info), None).unwrap();
    assert_eq!(status, 200, "{text}");

    let before = git_server.requests().len();
    let (status, text) = http("GET", &writer.state_url("default", path), None, None).unwrap();
    let requests = git_server.requests()[before..].to_vec();
    assert_eq!(status, 200, "{text}");
    assert!(
        text.contains("\"serial\":1,"),
        "not the state written: {text}"
    );
    let posts = requests.iter().filter(|r| r.contains("POST")).count();
    assert_eq!(
        (posts, requests.len() <= 2),
        (1, true),
        "the ref listing only (after a capability advertisement at most), no fetch: {requests:#?}"
    );

    let before = git_server.requests().len();
    let post = format!("{}?ID=elsewhere", writer.state_url("default", path));
    let (status, text) = http("POST", &post, Some(&state(2)), None).unwrap();
    let requests = git_server.requests()[before..].to_vec();
    assert_eq!(status, 200, "{text}");
    let fetches = requests
        .iter()
        .filter(|r| r.starts_with("POST") && r.contains("git-upload-pack"))
        .count();
    assert_eq!(
        (fetches, requests.len()),
        (1, 3),
        "the advertisement, the lock commit in one fetch, the push: {requests:#?}"
    );

    let (status, text) = http("UNLOCK", &lock_url, Some(&info), None).unwrap();
    assert_eq!(status, 200, "{text}");
    assert_eq!(refs_under(bare, "refs/heads/locks"), Vec::<String>::new());
    let (status, text) = http("GET", &lock_url, None, None).unwrap();
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("\"serial\":2,"), "the holder's write: {text}");
}

/// Under many writers in one process, a LOCK's one-request push often loses to a write of its own
/// process: the write moved the state branch after the LOCK read the tip it asserts. The refusal
/// comes back after the write was answered, and by then the cache has recorded the write's tip,
/// so the LOCK tries once more in one request, asserting that tip, where the advertisement's way
/// asked for the advertisement and then pushed (one git request more). A pre-receive hook holds
/// the LOCK's first push at the git server until the write is answered, and logs every push.
#[test]
fn a_lock_that_loses_to_its_own_processs_write_tries_once_more_in_one_request() {
    let remote = Remote::new();
    let (bare, git_server) = (&remote.bare, &remote.git_server);
    let process = remote.gitstate();
    let (path, other) = ("c/p8/w001.tfstate", "c/p8/w002.tfstate");
    let url = |p: &str| process.state_url("default", p);
    let info = lock_info("own-write", "cycle@test", "OperationTypeApply");
    // Warm: the receive-pack capabilities read, the trees on the path in the cache.
    for (method, p, body) in [
        ("POST", other, state(1)),
        ("LOCK", path, info.clone()),
        ("UNLOCK", path, info.clone()),
    ] {
        let (status, text) = http(method, &url(p), Some(&body), None).unwrap();
        assert_eq!(status, 200, "{method} {p}: {text}");
    }

    let gate = tempfile::tempdir().unwrap();
    let g = gate.path().display();
    let hook = bare.join("hooks/pre-receive");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\ninput=$(cat)\nprintf '%s\\n--\\n' \"$input\" >> {g}/pushes\n\
             case \"$input\" in *refs/heads/locks/*)\n  \
             if [ ! -e {g}/open ]; then touch {g}/held; i=0; \
             while [ ! -e {g}/open ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; fi ;;\n\
             esac\nexit 0\n"
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();

    let before = git_server.requests().len();
    let lock = {
        let (url, info) = (url(path), info.clone());
        std::thread::spawn(move || http("LOCK", &url, Some(&info), None).unwrap())
    };
    let held = gate.path().join("held");
    for _ in 0..1200 {
        if held.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        held.exists(),
        "the LOCK's push never reached the git server"
    );
    // The process's own write moves the branch while the LOCK's push waits at the server.
    let written = http("POST", &url(other), Some(&state(2)), None);
    std::fs::write(gate.path().join("open"), "").unwrap();
    let (status, text) = written.unwrap();
    assert_eq!(status, 200, "{text}");
    let (status, text) = lock.join().unwrap();
    assert_eq!(status, 200, "{text}");

    let pushes = std::fs::read_to_string(gate.path().join("pushes")).unwrap();
    let pushes: Vec<&str> = pushes.split("--\n").filter(|p| !p.is_empty()).collect();
    // The write's tip: the one push line that moves the state branch.
    let write_tip = pushes
        .iter()
        .flat_map(|p| p.lines())
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|l| l.len() == 3 && l[2] == "refs/heads/main" && l[0] != l[1])
        .map(|l| l[1])
        .expect("the write's push");
    let locks: Vec<&&str> = pushes
        .iter()
        .filter(|p| p.contains("refs/heads/locks/"))
        .collect();
    let adverts = git_server.requests()[before..]
        .iter()
        .filter(|r| r.contains("info/refs?service=git-receive-pack"))
        .count();
    // Only the one-request form asserts the state branch; the advertisement's way pushes the lock
    // ref alone, after an advertisement of its own (the write's is the most there may be).
    assert!(
        locks.len() == 2
            && locks[1].contains(&format!("{write_tip} {write_tip} refs/heads/main"))
            && adverts <= 1,
        "the refused push, then one asserting the write's tip, and no advertisement for the \
         LOCK: pushes {pushes:#?}, {adverts} receive-pack advertisements in all"
    );
    assert_eq!(
        refs_under(bare, "refs/heads/locks"),
        vec!["refs/heads/locks/c/p8/w001.tfstate".to_owned()]
    );
}
