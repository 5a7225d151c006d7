//! The remote cache of a long-running server stays bounded: with a small budget
//! (`GITSTATE_CACHE_MAX_PACKS=3`) and another writer moving the branch between reads (so every
//! read fetches a pack), hundreds of read/write cycles keep answering correctly while cache
//! generations are retired and removed behind them; with a small byte budget
//! (`GITSTATE_CACHE_MAX_MIB=4`), large writes never let the cache outgrow it by more than a
//! write or two.

use std::path::Path;

use gitstate_tests::*;

const USER: &str = "cache-bot";
const PASSWORD: &str = "cache-secret";

fn state(serial: u64, marker: &str) -> String {
    format!(
        r#"{{"version":4,"terraform_version":"1.15.5","serial":{serial},"lineage":"cache","outputs":{{"marker":{{"value":"{marker}","type":"string"}}}},"resources":[]}}"#
    )
}

/// Cache generation directories (`*.git`) under `dir`, and the packs of each.
fn generations(dir: &Path) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".git") {
            let packs = std::fs::read_dir(entry.path().join("objects/pack"))
                .map(|d| {
                    d.flatten()
                        .filter(|e| e.path().extension().is_some_and(|x| x == "pack"))
                        .count()
                })
                .unwrap_or(0);
            out.push((name, packs));
        }
    }
    out
}

#[test]
fn cache_generations_are_retired_and_removed_while_serving() {
    let repos = tempfile::tempdir().unwrap();
    bare_repo(repos.path(), "states");
    let git_server = GitHttpServer::start(repos.path(), USER, PASSWORD);
    let spec = format!("default={}", git_server.url("states"));
    let env = [("GIT_USERNAME", USER), ("GIT_PASSWORD", PASSWORD)];
    let cwd = tempfile::tempdir().unwrap();
    let mut ours_env = env.to_vec();
    ours_env.push(("GITSTATE_CACHE_MAX_PACKS", "3"));
    let ours = Gitstate::start(&["--repository", &spec], &ours_env, cwd.path());
    let other = Gitstate::start(&["--repository", &spec], &env, cwd.path());

    let cycles = 200;
    for i in 1..=cycles {
        let theirs = state(i, &format!("theirs-{i}"));
        let (status, body) = http(
            "POST",
            &other.state_url("default", "theirs.tfstate"),
            Some(&theirs),
            None,
        )
        .unwrap();
        assert_eq!(status, 200, "cycle {i}: other POST: {body}");
        let (status, body) = http(
            "GET",
            &ours.state_url("default", "theirs.tfstate"),
            None,
            None,
        )
        .unwrap();
        assert_eq!(
            (status, body.as_str()),
            (200, theirs.as_str()),
            "cycle {i}: stale or wrong read\n{}",
            ours.log()
        );
        let mine = state(i, &format!("mine-{i}"));
        let (status, body) = http(
            "POST",
            &ours.state_url("default", "mine.tfstate"),
            Some(&mine),
            None,
        )
        .unwrap();
        assert_eq!(status, 200, "cycle {i}: our POST: {body}\n{}", ours.log());
        if i % 50 == 0 {
            let live = generations(&ours.cache_dir);
            assert!(
                live.len() <= 2,
                "cycle {i}: cache generations pile up: {live:?}"
            );
            assert!(
                live.iter().all(|(_, packs)| *packs <= 4),
                "cycle {i}: {live:?}"
            );
        }
    }
    let log = ours.log();
    let retired = log.matches("cache generation retired").count();
    assert!(
        retired >= 20,
        "only {retired} generations retired over {cycles} cycles:\n{log}"
    );
    assert!(
        log.matches("retired cache generation removed").count() >= retired - 1,
        "{log}"
    );
    // every write of both servers is in git, in order
    let git_dir = repos.path().join("states.git");
    assert_eq!(
        git_log_subjects(&git_dir, "main", "mine.tfstate").len(),
        cycles as usize
    );
    assert_eq!(
        git_log_subjects(&git_dir, "main", "theirs.tfstate").len(),
        cycles as usize
    );
    assert_eq!(
        git_show(&git_dir, "main", "mine.tfstate").unwrap(),
        state(cycles, &format!("mine-{cycles}")).as_bytes()
    );
}

/// Bytes of every file under `dir`.
fn bytes_under(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        match entry.file_type() {
            Ok(t) if t.is_dir() => total += bytes_under(&entry.path()),
            Ok(_) => total += entry.metadata().map_or(0, |m| m.len()),
            Err(_) => {}
        }
    }
    total
}

/// A state of about `size` bytes that zlib cannot shrink much (printable noise), as a sealed or
/// base64-heavy state is.
fn large_state(serial: u64, size: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let noise = noise(serial, size, ALPHABET);
    format!(
        r#"{{"version":4,"terraform_version":"1.15.5","serial":{serial},"lineage":"bytes","outputs":{{"blob":{{"value":"{noise}","type":"string"}}}},"resources":[]}}"#
    )
}

#[test]
fn large_writes_keep_the_cache_within_its_byte_budget() {
    let repos = tempfile::tempdir().unwrap();
    bare_repo(repos.path(), "states");
    let git_server = GitHttpServer::start(repos.path(), USER, PASSWORD);
    let spec = format!("default={}", git_server.url("states"));
    let env = [
        ("GIT_USERNAME", USER),
        ("GIT_PASSWORD", PASSWORD),
        ("GITSTATE_CACHE_MAX_MIB", "4"),
    ];
    let cwd = tempfile::tempdir().unwrap();
    let ours = Gitstate::start(&["--repository", &spec], &env, cwd.path());

    // 30 writes of 1 MiB: 31.4 MB in one generation without a byte budget (measured).
    let writes = 30;
    let mut largest = 0;
    for serial in 1..=writes {
        let body = large_state(serial, 1 << 20);
        let url = ours.state_url("default", "big.tfstate");
        let (status, answer) = http("POST", &url, Some(&body), None).unwrap();
        assert_eq!(status, 200, "write {serial}: {answer}\n{}", ours.log());
        let (status, read) = http("GET", &url, None, None).unwrap();
        assert_eq!(status, 200, "read {serial}: {}", ours.log());
        assert!(read == body, "read {serial} is not the state just written");
        // A retired generation is removed once its last request lets go: give that a moment.
        std::thread::sleep(std::time::Duration::from_millis(50));
        largest = largest.max(bytes_under(&ours.cache_dir));
    }
    eprintln!("the cache's largest size over {writes} writes: {largest} bytes");
    // The budget (4 MiB), the write that crossed it, and a retired generation on its way out.
    assert!(
        largest <= 12 << 20,
        "the cache took {largest} bytes with a 4 MiB budget: {:?}",
        generations(&ours.cache_dir)
    );
    let log = ours.log();
    assert!(
        log.matches("cache generation retired").count() >= 3,
        "large writes retired no generation:\n{log}"
    );
    let git_dir = repos.path().join("states.git");
    assert_eq!(
        git_log_subjects(&git_dir, "main", "big.tfstate").len(),
        writes as usize
    );
    assert_eq!(
        git_show(&git_dir, "main", "big.tfstate").unwrap(),
        large_state(writes, 1 << 20).as_bytes()
    );
}

#[test]
fn caches_of_processes_that_are_gone_are_removed_after_a_start() {
    let repos = tempfile::tempdir().unwrap();
    bare_repo(repos.path(), "states");
    let git_server = GitHttpServer::start(repos.path(), USER, PASSWORD);
    let spec = format!("default={}", git_server.url("states"));
    let env = [("GIT_USERNAME", USER), ("GIT_PASSWORD", PASSWORD)];
    let cwd = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let mut env_cache = env.to_vec();
    let cache_str = cache.path().to_str().unwrap().to_owned();
    env_cache.push(("GITSTATE_CACHE_DIR", &cache_str));
    let first = Gitstate::start(&["--repository", &spec], &env_cache, cwd.path());
    let (status, _) = http(
        "POST",
        &first.state_url("default", "a.tfstate"),
        Some(&state(1, "a")),
        None,
    )
    .unwrap();
    assert_eq!(status, 200);
    let before = generations(cache.path());
    assert_eq!(before.len(), 1, "{before:?}");
    // A second live process on the same cache directory leaves the first one's cache alone.
    let second = Gitstate::start(&["--repository", &spec], &env_cache, cwd.path());
    let (status, _) = http("GET", &second.state_url("default", "a.tfstate"), None, None).unwrap();
    assert_eq!(status, 200);
    let both = generations(cache.path());
    assert_eq!(both.len(), 2, "{both:?}");
    // Once they are gone, the next start removes their directories, on a thread of its own
    // (no request waits for it): give it a few seconds.
    drop(first);
    drop(second);
    let third = Gitstate::start(&["--repository", &spec], &env_cache, cwd.path());
    let (status, body) = http("GET", &third.state_url("default", "a.tfstate"), None, None).unwrap();
    assert_eq!((status, body.as_str()), (200, state(1, "a").as_str()));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut after = generations(cache.path());
    while after.len() > 1 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
        after = generations(cache.path());
    }
    assert_eq!(after.len(), 1, "{after:?}\n{}", third.log());
    let old_names: Vec<&String> = both.iter().map(|(name, _)| name).collect();
    assert!(
        !old_names.contains(&&after[0].0),
        "{after:?} is an old directory"
    );
}
