//! Metrics (issue 20): `gitstate serve` in team mode on a smart-HTTP remote (lighttpd + git
//! http-backend, basic auth), real Terraform init + two applies, then `/_/metrics` is scraped:
//! anonymous callers get 401 like on the API; with the team token the request, lock and git
//! series hold the counts the run implies (pushes = locks taken + locks released + commits), and a
//! state another writer pushed with plain git is a cache miss that fetches.
//!
//! Needs `scripts/install-test-deps.sh` and a built `gitstate` binary (see gitstate_tests docs).

use std::collections::BTreeMap;

use gitstate_tests::{
    bare_repo, crypto, git, http, lock_info, write_main_tf, GitHttpServer, Gitstate, HttpBackend,
    Terraform,
};

const GIT_USER: &str = "tfstate-bot";
const GIT_PASS: &str = "g1t-p4ss";
const TOKEN: &str = "metrics-team-token";
const STATE: &str = "prod.tfstate";

/// The samples of a Prometheus text: `name{labels}` → value.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// The value of `series` (0 when absent: a counter never incremented is not rendered).
fn value(samples: &BTreeMap<String, f64>, series: &str) -> f64 {
    samples.get(series).copied().unwrap_or(0.0)
}

/// The sum of every sample of `name` whose labels contain `with` (e.g. `kind="tips"`).
fn sum(samples: &BTreeMap<String, f64>, name: &str, with: &str) -> f64 {
    sum_of_all(samples, name, &[with])
}

/// The sum of every sample of `name` whose labels contain each of `with`, in any order.
fn sum_of_all(samples: &BTreeMap<String, f64>, name: &str, with: &[&str]) -> f64 {
    samples
        .iter()
        .filter(|(series, _)| {
            (series.as_str() == name || series.starts_with(&format!("{name}{{")))
                && with.iter().all(|label| series.contains(label))
        })
        .map(|(_, v)| v)
        .sum()
}

fn requests(samples: &BTreeMap<String, f64>, operation: &str, status: u16) -> f64 {
    value(
        samples,
        &format!("gitstate_requests_total{{operation=\"{operation}\",status=\"{status}\"}}"),
    )
}

#[test]
fn metrics_after_a_terraform_apply_count_requests_locks_and_git_and_need_the_team_token() {
    let tf = Terraform::installed("1.15.5");
    let repos = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let git_dir = bare_repo(repos.path(), "states");
    let remote = GitHttpServer::start(repos.path(), GIT_USER, GIT_PASS);
    let token_hash = format!("sha256:{}", crypto::sha256_hex(TOKEN));
    let server = Gitstate::start(
        &[
            "--repository",
            &format!("default={}", remote.url("states")),
            "--auth-mode",
            "team",
            "--token-hash",
            &token_hash,
        ],
        &[("GIT_USERNAME", GIT_USER), ("GIT_PASSWORD", GIT_PASS)],
        cwd.path(),
    );
    let url = server.state_url("default", STATE);
    let metrics_url = format!("{}/_/metrics", server.base_url());
    let ctx = || format!("\n--- gitstate log\n{}", server.log());

    // The boundary first: nothing is served without the API's credentials.
    let (status, body) = http("GET", &metrics_url, None, None).unwrap();
    assert_eq!(status, 401, "anonymous scrape: {body}{}", ctx());
    let (status, body) = http("GET", &metrics_url, None, Some(("prom", "wrong"))).unwrap();
    assert_eq!(status, 401, "scrape with a wrong token: {body}{}", ctx());

    // Terraform: init, apply, apply with a change.
    let work = tempfile::tempdir().unwrap();
    let backend = HttpBackend::new(&url).with_auth("ci", TOKEN);
    write_main_tf(work.path(), &backend, 2, "g1");
    tf.init(work.path())
        .expect_code(0, &format!("init{}", ctx()));
    tf.apply(work.path())
        .expect_code(0, &format!("first apply{}", ctx()));
    write_main_tf(work.path(), &backend, 2, "g2");
    tf.apply(work.path())
        .expect_code(0, &format!("second apply{}", ctx()));

    // Someone else holds the lock: a LOCK of another ID is a 423 (a conflict), then released.
    let (status, _) = http(
        "LOCK",
        &url,
        Some(&lock_info("other", "someone@else", "OperationTypeApply")),
        Some(("ops", TOKEN)),
    )
    .unwrap();
    assert_eq!(status, 200, "{}", ctx());
    let (status, _) = http(
        "LOCK",
        &url,
        Some(&lock_info("third", "third@else", "OperationTypeApply")),
        Some(("ops", TOKEN)),
    )
    .unwrap();
    assert_eq!(status, 423, "{}", ctx());
    let (status, held) = http("GET", &metrics_url, None, Some(("prom", TOKEN))).unwrap();
    assert_eq!(status, 200, "{held}{}", ctx());
    assert_eq!(
        value(&samples(&held), "gitstate_locks_held"),
        1.0,
        "one lock held:\n{held}"
    );
    let (status, _) = http("UNLOCK", &url, Some(""), Some(("ops", TOKEN))).unwrap();
    assert_eq!(status, 200, "force-unlock{}", ctx());

    // Another writer pushes a state with plain git: gitstate's next read of it must fetch (a
    // cache miss: the commit and trees, then the file's blob).
    let clone = tempfile::tempdir().unwrap();
    let checkout = clone.path().join("c");
    git(
        None,
        &[
            "clone",
            "-q",
            git_dir.to_str().unwrap(),
            checkout.to_str().unwrap(),
        ],
    );
    std::fs::write(
        checkout.join("other.tfstate"),
        r#"{"version":4,"serial":1,"lineage":"o","outputs":{},"resources":[]}"#,
    )
    .unwrap();
    git(Some(&checkout), &["add", "other.tfstate"]);
    git(
        Some(&checkout),
        &[
            "-c",
            "user.name=other",
            "-c",
            "user.email=other@example.com",
            "commit",
            "-q",
            "-m",
            "Update other.tfstate by other",
        ],
    );
    git(Some(&checkout), &["push", "-q", "origin", "HEAD:main"]);
    let other = server.state_url("default", "other.tfstate");
    let (status, body) = http("GET", &other, None, Some(("ops", TOKEN))).unwrap();
    assert_eq!(status, 200, "{body}{}", ctx());

    let (status, text) = http("GET", &metrics_url, None, Some(("prom", TOKEN))).unwrap();
    assert_eq!(status, 200, "{text}{}", ctx());
    println!("{text}");
    let m = samples(&text);
    let commits: f64 = git(
        None,
        &[
            &format!("--git-dir={}", git_dir.display()),
            "rev-list",
            "--count",
            "main",
        ],
    )
    .trim()
    .parse()
    .unwrap();

    // Requests: two applies lock and unlock once each; each writes at least once; the second
    // reads the state the first wrote.
    assert_eq!(
        requests(&m, "LOCK", 200),
        3.0,
        "2 applies + 1 direct\n{text}"
    );
    assert_eq!(requests(&m, "LOCK", 423), 1.0, "{text}");
    assert_eq!(requests(&m, "UNLOCK", 200), 3.0, "{text}");
    assert!(requests(&m, "POST", 200) >= 2.0, "{text}");
    assert!(requests(&m, "GET", 200) >= 1.0, "{text}");
    assert!(
        requests(&m, "GET", 204) >= 1.0,
        "init reads no state\n{text}"
    );
    assert_eq!(
        sum(&m, "gitstate_requests_total", "status=\"5"),
        0.0,
        "no 5xx\n{text}"
    );
    assert_eq!(
        value(
            &m,
            "gitstate_request_duration_seconds_count{operation=\"LOCK\",status=\"200\"}"
        ),
        3.0,
        "a latency observation per request\n{text}"
    );
    assert!(
        text.contains("gitstate_request_duration_seconds_bucket{operation=\"POST\",status=\"200\",le=\"0.5\"}"),
        "latencies are histograms\n{text}"
    );

    // Locks.
    assert_eq!(value(&m, "gitstate_lock_acquisitions_total"), 3.0, "{text}");
    assert_eq!(value(&m, "gitstate_lock_releases_total"), 3.0, "{text}");
    assert_eq!(value(&m, "gitstate_locks_held"), 0.0, "{text}");
    assert_eq!(
        value(&m, "gitstate_lock_conflicts_total{operation=\"LOCK\"}"),
        1.0,
        "{text}"
    );

    // Git: every lock taken and released is one push, every commit gitstate made on main one
    // more (all but the other writer's).
    let commits = commits - 1.0;
    assert!(commits >= 2.0, "two applies commit at least twice");
    let pushes = value(&m, "gitstate_git_pushes_total");
    assert_eq!(pushes, 3.0 + 3.0 + commits, "pushes\n{text}");
    let git_requests = |with: &[&str]| sum_of_all(&m, "gitstate_git_round_trips_total", with);
    let (receive_pack, push) = ("service=\"receive-pack\"", "step=\"push\"");
    assert_eq!(git_requests(&[receive_pack, push]), pushes, "{text}");
    // Each under the operation it served: the 3 locks taken and the 3 released, and every commit
    // by a POST (a holder's write in one request) or by the write queue's rounds.
    let pushes_of = |operation: &str| {
        git_requests(&[receive_pack, push, &format!("operation=\"{operation}\"")])
    };
    assert_eq!(pushes_of("LOCK"), 3.0, "{text}");
    assert_eq!(pushes_of("UNLOCK"), 3.0, "{text}");
    assert_eq!(pushes_of("POST") + pushes_of("queue"), commits, "{text}");
    // The first push follows an advertisement; once the server's capabilities are known, a
    // lock is taken and released, and the holder's state write pushed, by the push alone.
    let advertisements = git_requests(&[receive_pack, "step=\"advertisement\""]);
    assert!(advertisements >= 1.0, "{text}");
    assert!(
        advertisements < pushes,
        "some pushes went without an advertisement\n{text}"
    );
    assert!(value(&m, "gitstate_git_pushed_bytes_total") > 0.0, "{text}");
    assert_eq!(value(&m, "gitstate_git_cas_losses_total"), 0.0, "{text}");
    // Group commit: one writer at a time, so every push of the state branch carried one commit,
    // nobody else's write was folded, and no write waits any more.
    assert_eq!(
        value(&m, "gitstate_batch_commits_count"),
        commits,
        "a batch per state push\n{text}"
    );
    assert_eq!(value(&m, "gitstate_batch_commits_sum"), commits, "{text}");
    assert_eq!(
        value(&m, "gitstate_batch_commits_bucket{le=\"1\"}"),
        commits,
        "{text}"
    );
    assert_eq!(value(&m, "gitstate_folded_writes_total"), 0.0, "{text}");
    assert_eq!(value(&m, "gitstate_writes_waiting"), 0.0, "{text}");
    // The cache: what this server pushed it keeps (hits); the other writer's commit it fetched.
    assert!(
        value(&m, "gitstate_cache_reads_total{result=\"hit\"}") >= 1.0,
        "{text}"
    );
    assert!(
        value(&m, "gitstate_cache_reads_total{result=\"miss\"}") >= 1.0,
        "{text}"
    );
    assert!(
        value(&m, "gitstate_git_fetches_total{kind=\"tips\"}") >= 1.0,
        "{text}"
    );
    assert!(
        value(&m, "gitstate_git_fetches_total{kind=\"blobs\"}") >= 1.0,
        "{text}"
    );
    assert!(
        sum(&m, "gitstate_git_fetched_bytes_total", "") > 0.0,
        "{text}"
    );
    let fetch = ["service=\"upload-pack\"", "step=\"fetch\""];
    assert!(git_requests(&fetch) >= 2.0, "{text}");
    // The read after the other writer's push fetched what it lacked, as the GET it served.
    assert!(
        git_requests(&[fetch[0], fetch[1], "operation=\"GET\""]) >= 1.0,
        "{text}"
    );

    // No label carries a path, a repository URL or a credential.
    for secret in [
        STATE,
        "other.tfstate",
        "states.git",
        GIT_PASS,
        TOKEN,
        "127.0.0.1",
    ] {
        assert!(!text.contains(secret), "{secret:?} in the metrics:\n{text}");
    }
}

/// Sealing with AWS KMS (moto): a write seals (one KMS Encrypt), a read opens; with KMS gone a
/// write is a 503 and the failed Encrypt and seal are counted as errors, with their latencies.
#[test]
fn seal_and_kms_calls_are_counted_with_their_latency_and_failures() {
    let mut moto = gitstate_tests::crypto::MotoServer::start();
    let arn = moto.create_kms_key();
    let cwd = tempfile::tempdir().unwrap();
    let mut env = moto.aws_env();
    env.push(("SOPS_KMS_ARN".into(), arn));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let server = Gitstate::start(&["--encryption-mode", "all"], &env, cwd.path());
    let url = server.state_url("default", STATE);
    let metrics_url = format!("{}/_/metrics", server.base_url());
    let state = |serial: u32| {
        format!(r#"{{"version":4,"serial":{serial},"lineage":"k","outputs":{{}},"resources":[]}}"#)
    };

    let (status, body) = http("POST", &url, Some(&state(1)), None).unwrap();
    assert_eq!(status, 200, "{body}\n{}", server.log());
    let (status, body) = http("GET", &url, None, None).unwrap();
    assert_eq!(status, 200, "{body}\n{}", server.log());
    moto.stop();
    let (status, body) = http("POST", &url, Some(&state(2)), None).unwrap();
    assert_eq!(status, 503, "KMS is gone: {body}\n{}", server.log());

    let (status, text) = http("GET", &metrics_url, None, None).unwrap();
    assert_eq!(status, 200, "server mode on loopback: {text}");
    println!("{text}");
    let m = samples(&text);
    let calls = |operation: &str, result: &str| {
        value(
            &m,
            &format!("gitstate_seal_calls_total{{operation=\"{operation}\",result=\"{result}\"}}"),
        )
    };
    assert_eq!(calls("seal", "ok"), 1.0, "{text}");
    assert_eq!(calls("seal", "error"), 1.0, "{text}");
    assert!(calls("open", "ok") >= 1.0, "{text}");
    let kms = |call: &str, result: &str| {
        value(
            &m,
            &format!("gitstate_kms_requests_total{{call=\"{call}\",result=\"{result}\"}}"),
        )
    };
    assert_eq!(kms("Encrypt", "ok"), 1.0, "{text}");
    assert!(kms("Encrypt", "error") >= 1.0, "{text}");
    assert_eq!(
        value(
            &m,
            "gitstate_seal_duration_seconds_count{operation=\"seal\"}"
        ),
        2.0,
        "{text}"
    );
    assert!(
        value(
            &m,
            "gitstate_kms_request_duration_seconds_count{call=\"Encrypt\"}"
        ) >= 2.0,
        "{text}"
    );
    assert_eq!(requests(&m, "POST", 503), 1.0, "{text}");
}

/// The workspace API is counted as the http protocol is (docs/METRICS.md): one `operation` per
/// method and routed address pattern, and a fixed label for anything else, so that no caller
/// can grow the label set (an unknown address, an invented method).
#[test]
fn the_workspace_api_is_counted_by_method_and_address_pattern() {
    let cwd = tempfile::tempdir().unwrap();
    let token_hash = format!("sha256:{}", crypto::sha256_hex(TOKEN));
    let server = Gitstate::start(
        &["--auth-mode", "team", "--token-hash", &token_hash],
        &[],
        cwd.path(),
    );
    let base = server.base_url();
    let auth = Some(("ci", TOKEN));
    let create = r#"{"data":{"type":"workspaces","attributes":{"name":"app"}}}"#;
    let (status, body) = http(
        "POST",
        &format!("{base}/api/v2/organizations/default/workspaces"),
        Some(create),
        auth,
    )
    .unwrap();
    assert_eq!(status, 201, "{body}");
    let id = serde_json::from_str::<serde_json::Value>(&body).unwrap()["data"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    for _ in 0..2 {
        let (status, body) = http(
            "POST",
            &format!("{base}/api/v2/workspaces/{id}/actions/lock"),
            Some("{}"),
            auth,
        )
        .unwrap();
        assert!(status == 200 || status == 409, "{status} {body}");
    }
    for (method, path) in [
        ("GET", "/api/v2/runs/run-1"),
        ("GET", "/api/v2/anything/else/at/all"),
        ("BREW", "/api/v2/ping"),
        ("BREW", "/api/v2/made-up"),
    ] {
        let (status, body) = http(method, &format!("{base}{path}"), None, auth).unwrap();
        assert!(
            status == 404 || status == 405,
            "{method} {path}: {status} {body}"
        );
    }
    let (status, text) = http("GET", &format!("{base}/_/metrics"), None, auth).unwrap();
    assert_eq!(status, 200, "{text}");
    let samples = samples(&text);
    assert_eq!(
        requests(
            &samples,
            "API POST /api/v2/organizations/{org}/workspaces",
            201
        ),
        1.0,
        "{text}"
    );
    let lock = "API POST /api/v2/workspaces/{id}/actions/lock";
    assert_eq!(requests(&samples, lock, 200), 1.0, "{text}");
    assert_eq!(requests(&samples, lock, 409), 1.0, "{text}");
    assert_eq!(
        requests(&samples, "API GET /api/v2/{*rest}", 404),
        2.0,
        "addresses not served share one label: {text}"
    );
    assert_eq!(
        requests(&samples, "API OTHER /api/v2/ping", 405),
        1.0,
        "{text}"
    );
    assert_eq!(
        requests(&samples, "API OTHER /api/v2/{*rest}", 404),
        1.0,
        "{text}"
    );
    let api_series = samples
        .keys()
        .filter(|k| k.starts_with("gitstate_requests_total{operation=\"API "))
        .count();
    assert_eq!(api_series, 6, "{text}");
    assert!(!text.contains("run-1") && !text.contains("made-up") && !text.contains("BREW"));
}
