//! End to end: real Terraform (1.0.3, 1.15.5, and the PATH one when present) against
//! `gitstate serve`, on (a) the embedded default repository and (b) a smart-HTTP remote
//! (lighttpd + git http-backend, basic auth), checked afterwards with plain git.
//!
//! Each scenario: init → apply (null_resources) → plan shows no changes → commits
//! `Update prod.tfstate (serial N) by …` on main and no `locks/` branch left → someone else takes
//! the lock (a LOCK request sent directly) → apply fails with "Error acquiring the state lock" and
//! names the holder → `terraform force-unlock -force other-holder` → apply succeeds with a new
//! serial → plan shows no changes (`terraform_lock_scenario` in the support library, which
//! tests/tests/interop.rs runs against third-party git servers too).
//!
//! Needs `scripts/install-test-deps.sh` and a built `gitstate` binary (see gitstate_tests docs).

use std::path::Path;

use gitstate_tests::*;

const STATE: &str = "prod.tfstate";
const GIT_USER: &str = "tfstate-bot";
const GIT_PASS: &str = "p4ss:w0rd";

#[derive(Clone, Copy, Debug)]
enum Remote {
    /// `gitstate serve` with no repository: ./.gitstate/default.git in its cwd.
    Embedded,
    /// `--repository default=http://…/git/states.git`, an empty bare repository.
    SmartHttp,
    /// Same, on a repository that already has a commit (a forge's "initialize with README").
    SmartHttpSeeded,
    /// `--repository default=git://…/states.git` (git daemon, no auth).
    GitDaemon,
}

/// A running gitstate and where its states land, for plain-git checks (a [`StateRepo`]), with
/// the git server and directories it needs.
struct Setup {
    repo: StateRepo,
    _http: Option<GitHttpServer>,
    _daemon: Option<GitDaemon>,
    _cwd: TempDir,
    _repos: TempDir,
}

impl Setup {
    fn new(remote: Remote) -> Setup {
        let cwd = tempfile::Builder::new()
            .prefix("gitstate-cwd")
            .tempdir()
            .unwrap();
        let repos = tempfile::Builder::new()
            .prefix("gitstate-repos")
            .tempdir()
            .unwrap();
        match remote {
            Remote::Embedded => {
                let server = Gitstate::start(&[], &[], cwd.path());
                let git_dir = cwd.path().join(".gitstate/default.git");
                Setup {
                    repo: StateRepo {
                        server,
                        git_dir,
                        remote_url: None,
                        base_commits: 0,
                        logs: Vec::new(),
                    },
                    _http: None,
                    _daemon: None,
                    _cwd: cwd,
                    _repos: repos,
                }
            }
            Remote::SmartHttp | Remote::SmartHttpSeeded => {
                let git_dir = bare_repo(repos.path(), "states");
                let base_commits = if matches!(remote, Remote::SmartHttpSeeded) {
                    seed_commit(&git_dir);
                    1
                } else {
                    0
                };
                let http = GitHttpServer::start(repos.path(), GIT_USER, GIT_PASS);
                let server = Gitstate::start(
                    &["--repository", &format!("default={}", http.url("states"))],
                    &[("GIT_USERNAME", GIT_USER), ("GIT_PASSWORD", GIT_PASS)],
                    cwd.path(),
                );
                // The password has a ':' — percent-encoded in the URL plain git uses.
                let remote_url = Some(format!(
                    "http://{GIT_USER}:{}@127.0.0.1:{}/git/states.git",
                    GIT_PASS.replace(':', "%3A"),
                    http.port()
                ));
                Setup {
                    repo: StateRepo {
                        server,
                        git_dir,
                        remote_url,
                        base_commits,
                        logs: Vec::new(),
                    },
                    _http: Some(http),
                    _daemon: None,
                    _cwd: cwd,
                    _repos: repos,
                }
            }
            Remote::GitDaemon => {
                let git_dir = bare_repo(repos.path(), "states");
                let daemon = GitDaemon::start(repos.path());
                let server = Gitstate::start(
                    &["--repository", &format!("default={}", daemon.url("states"))],
                    &[],
                    cwd.path(),
                );
                let remote_url = Some(daemon.url("states"));
                Setup {
                    repo: StateRepo {
                        server,
                        git_dir,
                        remote_url,
                        base_commits: 0,
                        logs: Vec::new(),
                    },
                    _http: None,
                    _daemon: Some(daemon),
                    _cwd: cwd,
                    _repos: repos,
                }
            }
        }
    }
}

impl std::ops::Deref for Setup {
    type Target = StateRepo;
    fn deref(&self) -> &StateRepo {
        &self.repo
    }
}

fn scenario(tf: &Terraform, remote: Remote) {
    scenario_with(tf, remote, LockStyle::WebDav)
}

fn scenario_with(tf: &Terraform, remote: Remote, style: LockStyle) {
    let s = Setup::new(remote);
    terraform_lock_scenario(tf, &s, &format!("{remote:?}"), style);
}

fn path_terraform() -> Option<Terraform> {
    let tf = Terraform::from_path();
    if tf.is_none() {
        println!("no other terraform on PATH (1.11.4 on the development machines): only 1.0.3 and 1.15.5 are tested");
    }
    tf
}

// ---------------------------------------------------------------- the matrix

#[test]
fn tf_1_0_3_embedded_default() {
    scenario(&Terraform::installed("1.0.3"), Remote::Embedded);
}

#[test]
fn tf_1_15_5_embedded_default() {
    scenario(&Terraform::installed("1.15.5"), Remote::Embedded);
}

#[test]
fn tf_1_0_3_smart_http_basic_auth() {
    scenario(&Terraform::installed("1.0.3"), Remote::SmartHttp);
}

#[test]
fn tf_1_15_5_smart_http_basic_auth() {
    scenario(&Terraform::installed("1.15.5"), Remote::SmartHttp);
}

#[test]
fn tf_1_15_5_smart_http_repository_with_existing_commit() {
    scenario(&Terraform::installed("1.15.5"), Remote::SmartHttpSeeded);
}

#[test]
fn tf_1_0_3_git_daemon() {
    scenario(&Terraform::installed("1.0.3"), Remote::GitDaemon);
}

/// The `/lock/…` alias with POST/DELETE, as configured for gateways that refuse WebDAV verbs.
#[test]
fn tf_1_0_3_embedded_default_lock_alias_post_delete() {
    scenario_with(
        &Terraform::installed("1.0.3"),
        Remote::Embedded,
        LockStyle::PostDelete,
    );
}

#[test]
fn tf_1_15_5_smart_http_lock_alias_post_delete() {
    scenario_with(
        &Terraform::installed("1.15.5"),
        Remote::SmartHttp,
        LockStyle::PostDelete,
    );
}

/// The terraform on PATH (1.11.4 on the development machines; absent on a fresh CI machine,
/// where this prints that it tested nothing).
#[test]
fn tf_path_embedded_default() {
    if let Some(tf) = path_terraform() {
        scenario(&tf, Remote::Embedded);
    }
}

/// The terraform on PATH against the smart-HTTP remote (see `tf_path_embedded_default`).
#[test]
fn tf_path_smart_http_basic_auth() {
    if let Some(tf) = path_terraform() {
        scenario(&tf, Remote::SmartHttp);
    }
}

/// Two states in one remote repository, applied at the same time by two terraform processes:
/// the writes contend on `main` and must all land (rebuilt on the new tip, never overwritten).
#[test]
fn concurrent_applies_to_two_states_in_one_smart_http_repository() {
    let tf = Terraform::installed("1.0.3");
    let s = Setup::new(Remote::SmartHttp);
    let rounds = 3;
    let names = ["dev.tfstate", "prod.tfstate"];
    let dirs: Vec<TempDir> = names.iter().map(|_| tempfile::tempdir().unwrap()).collect();
    for (name, dir) in names.iter().zip(&dirs) {
        write_main_tf(
            dir.path(),
            &HttpBackend::new(&s.state_url(name)),
            1,
            "round-0",
        );
        tf.init(dir.path())
            .expect_code(0, &format!("init {name}{}", s.ctx()));
    }
    std::thread::scope(|scope| {
        for (name, dir) in names.iter().zip(&dirs) {
            let tf = tf.clone();
            let url = s.state_url(name);
            let dir: &Path = dir.path();
            scope.spawn(move || {
                for round in 0..rounds {
                    write_main_tf(dir, &HttpBackend::new(&url), 1, &format!("round-{round}"));
                    tf.apply(dir)
                        .expect_code(0, &format!("apply {name} round {round}"));
                }
            });
        }
    });
    let ctx = s.ctx();
    for name in names {
        let (serial, _, body, _) = get_state(&s.state_url(name), &ctx);
        assert!(
            body.contains(&format!("round-{}", rounds - 1)),
            "{name}: last round's state: {body}{ctx}"
        );
        let commits = check_history(&s, name, serial, &body);
        assert!(
            commits >= rounds,
            "{name}: at least one commit per apply, got {commits}{ctx}"
        );
    }
    let total: usize = names.iter().map(|n| s.history(n).len()).sum();
    assert_eq!(
        s.commits_on_main(),
        total,
        "every commit on main is one of the two states' updates{ctx}"
    );
    assert_eq!(s.lock_refs(), Vec::<String>::new(), "no lock left{ctx}");
}

/// gitstate configured with a wrong git password: the git server's refusal reaches the client as
/// an honest error (401/403/502 JSON, not a 500, not "no state"), and the password is echoed
/// nowhere (neither in the answer nor in the server's log).
#[test]
fn smart_http_wrong_git_credentials_are_refused_without_leaking_them() {
    let cwd = tempfile::tempdir().unwrap();
    let repos = tempfile::tempdir().unwrap();
    bare_repo(repos.path(), "states");
    let http_server = GitHttpServer::start(repos.path(), GIT_USER, GIT_PASS);
    let wrong = "Wr0ng-S3cret-Value";
    let server = Gitstate::start(
        &[
            "--repository",
            &format!("default={}", http_server.url("states")),
        ],
        &[("GIT_USERNAME", GIT_USER), ("GIT_PASSWORD", wrong)],
        cwd.path(),
    );
    let url = server.state_url("default", STATE);
    for (method, body) in [
        ("GET", None),
        ("LOCK", Some(lock_info("x", "y@z", "OperationTypeApply"))),
    ] {
        let (status, text) = http(method, &url, body.as_deref(), None).unwrap();
        assert!(
            [401, 403, 502].contains(&status),
            "{method} with wrong git credentials: expected 401/403/502, got {status}: {text}\n--- gitstate log\n{}",
            server.log()
        );
        let json: serde_json::Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{method}: error body is not JSON ({e}): {text}"));
        assert!(
            json["error"].is_string(),
            "{method}: {{\"error\": …}} expected: {text}"
        );
        assert!(
            !text.contains(wrong),
            "{method}: the answer echoes the git password: {text}"
        );
    }
    assert!(
        !server.log().contains(wrong),
        "the server log contains the git password:\n{}",
        server.log()
    );
    assert!(
        refs_under(&repos.path().join("states.git"), "refs/").is_empty(),
        "nothing was written"
    );
}

/// Two gitstate servers on one remote (two laptops, or two Lambda containers), and a restart that
/// reuses a cache: each request checks the remote, so nobody serves a state older than the remote's.
#[test]
fn two_servers_on_one_remote_never_serve_a_stale_state() {
    let tf = Terraform::installed("1.15.5");
    let repos = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let caches = tempfile::tempdir().unwrap();
    let git_dir = bare_repo(repos.path(), "states");
    let http_server = GitHttpServer::start(repos.path(), GIT_USER, GIT_PASS);
    let repo_arg = format!("default={}", http_server.url("states"));
    let start = |cache: &str| {
        let cache = caches.path().join(cache);
        Gitstate::start(
            &["--repository", &repo_arg],
            &[
                ("GIT_USERNAME", GIT_USER),
                ("GIT_PASSWORD", GIT_PASS),
                ("GITSTATE_CACHE_DIR", cache.to_str().unwrap()),
            ],
            cwd.path(),
        )
    };
    let mut a = start("a");
    let b = start("b");
    let logs = |a: &Gitstate| format!("\n--- A\n{}\n--- B\n{}", a.log(), b.log());

    let dir_a = tempfile::tempdir().unwrap();
    let dir_b = tempfile::tempdir().unwrap();
    write_main_tf(
        dir_a.path(),
        &HttpBackend::new(&a.state_url("default", STATE)),
        1,
        "g1",
    );
    write_main_tf(
        dir_b.path(),
        &HttpBackend::new(&b.state_url("default", STATE)),
        1,
        "g1",
    );
    tf.init(dir_a.path())
        .expect_code(0, &format!("init via A{}", logs(&a)));
    tf.apply(dir_a.path())
        .expect_code(0, &format!("apply via A{}", logs(&a)));
    let (serial1, _, _, _) = get_state(&a.state_url("default", STATE), &logs(&a));

    // B sees what A wrote.
    tf.init(dir_b.path())
        .expect_code(0, &format!("init via B{}", logs(&a)));
    tf.plan(dir_b.path())
        .expect_code(0, &format!("plan via B sees A's state{}", logs(&a)));

    // B writes; A (whose cache holds the old tip) must answer with B's state.
    write_main_tf(
        dir_b.path(),
        &HttpBackend::new(&b.state_url("default", STATE)),
        1,
        "g2",
    );
    tf.apply(dir_b.path())
        .expect_code(0, &format!("apply via B{}", logs(&a)));
    let (serial2, _, body_b, _) = get_state(&b.state_url("default", STATE), &logs(&a));
    assert!(serial2 > serial1, "B's apply wrote a newer serial");
    let (_, _, body_a, _) = get_state(&a.state_url("default", STATE), &logs(&a));
    assert_eq!(
        body_a,
        body_b,
        "A must serve the remote's newest state, not its cached one{}",
        logs(&a)
    );
    tf.plan(dir_a.path()).expect_code(
        2,
        &format!("plan via A with the old config sees B's change{}", logs(&a)),
    );

    // A restarted on its old cache, then writing again: nothing of B's is lost.
    let cache_a = a.cache_dir.clone();
    drop(a);
    a = Gitstate::start(
        &["--repository", &repo_arg],
        &[
            ("GIT_USERNAME", GIT_USER),
            ("GIT_PASSWORD", GIT_PASS),
            ("GITSTATE_CACHE_DIR", cache_a.to_str().unwrap()),
        ],
        cwd.path(),
    );
    let (_, _, body_restarted, _) = get_state(&a.state_url("default", STATE), &logs(&a));
    assert_eq!(
        body_restarted,
        body_b,
        "restarted A serves the newest state{}",
        logs(&a)
    );
    write_main_tf(
        dir_a.path(),
        &HttpBackend::new(&a.state_url("default", STATE)),
        1,
        "g3",
    );
    // The restarted server listens on another port: the backend block changed.
    tf.run(
        dir_a.path(),
        &["init", "-reconfigure", "-input=false", "-no-color"],
    )
    .expect_code(0, &format!("init -reconfigure via restarted A{}", logs(&a)));
    tf.apply(dir_a.path())
        .expect_code(0, &format!("apply via restarted A{}", logs(&a)));
    let subjects = git_log_subjects(&git_dir, "main", STATE);
    let serials: Vec<u64> = subjects
        .iter()
        .map(|s| {
            parse_update(s, STATE)
                .map(|(n, _)| n)
                .unwrap_or_else(|| panic!("{s:?}"))
        })
        .collect();
    assert!(
        serials.windows(2).all(|w| w[0] > w[1]),
        "serials increase: {serials:?}"
    );
    assert!(
        serials.contains(&serial1) && serials.contains(&serial2),
        "A's and B's writes are in the history: {serials:?}"
    );
    assert!(a.running(), "A is still running");
}
