//! End to end: real Terraform (1.0.3, 1.15.5, and the PATH one when present) against
//! `gitstate serve`, on (a) the embedded default repository and (b) a smart-HTTP remote
//! (lighttpd + git http-backend, basic auth), checked afterwards with plain git.
//!
//! Each scenario: init → apply (null_resources) → plan shows no changes → commits
//! `Update prod.tfstate (serial N) by …` on main and no `locks/` branch left → someone else takes
//! the lock (a LOCK request sent directly) → apply fails with "Error acquiring the state lock" and
//! names the holder → `terraform force-unlock -force other-holder` → apply succeeds with a new
//! serial → plan shows no changes.
//!
//! Needs `scripts/install-test-deps.sh` and a built `gitstate` binary (see gitstate_tests docs).

use std::path::{Path, PathBuf};

use gitstate_tests::*;

const STATE: &str = "prod.tfstate";
const GIT_USER: &str = "tfstate-bot";
const GIT_PASS: &str = "p4ss:w0rd";
const OTHER_ID: &str = "other-holder";
const OTHER_WHO: &str = "someone@else";

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

/// A running gitstate and where its states land, for plain-git checks.
struct Setup {
    server: Gitstate,
    /// The bare repository holding the states (on this machine, whatever the transport).
    git_dir: PathBuf,
    /// A URL plain git can ls-remote (credentials included), for remotes.
    remote_url: Option<String>,
    /// Commits on main before any state was written (the seed commit).
    base_commits: usize,
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
                    server,
                    git_dir,
                    remote_url: None,
                    base_commits: 0,
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
                    server,
                    git_dir,
                    remote_url,
                    base_commits,
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
                    server,
                    git_dir,
                    remote_url,
                    base_commits: 0,
                    _http: None,
                    _daemon: Some(daemon),
                    _cwd: cwd,
                    _repos: repos,
                }
            }
        }
    }

    fn state_url(&self, path: &str) -> String {
        self.server.state_url("default", path)
    }

    /// Context appended to every assertion: the server's log.
    fn ctx(&self) -> String {
        format!("\n--- gitstate log\n{}", self.server.log())
    }

    /// Lock branches, seen both in the repository and (for remotes) through `git ls-remote`.
    fn lock_refs(&self) -> Vec<String> {
        let mut refs = if self.git_dir.exists() {
            refs_under(&self.git_dir, "refs/heads/locks")
        } else {
            Vec::new()
        };
        if let Some(url) = &self.remote_url {
            let remote: Vec<String> = ls_remote(url)
                .into_iter()
                .map(|(_, r)| r)
                .filter(|r| r.starts_with("refs/heads/locks/"))
                .collect();
            assert_eq!(
                refs, remote,
                "the repository and ls-remote disagree about locks"
            );
            refs = remote;
        }
        refs
    }

    /// The subjects of the commits touching `path` on main, newest first.
    fn history(&self, path: &str) -> Vec<String> {
        git_log_subjects(&self.git_dir, "main", path)
    }

    fn commits_on_main(&self) -> usize {
        git(
            None,
            &[
                &format!("--git-dir={}", self.git_dir.display()),
                "rev-list",
                "--count",
                "main",
            ],
        )
        .trim()
        .parse()
        .unwrap()
    }
}

/// GET the state: (serial, lineage, raw body, resources count).
fn get_state(url: &str, ctx: &str) -> (u64, String, String, usize) {
    let (status, body) =
        http("GET", url, None, None).unwrap_or_else(|e| panic!("GET {url}: {e}{ctx}"));
    assert_eq!(status, 200, "GET {url} after apply: {body}{ctx}");
    let v: serde_json::Value = serde_json::from_str(&body)
        .unwrap_or_else(|e| panic!("GET body is not JSON ({e}): {body}{ctx}"));
    let serial = v["serial"]
        .as_u64()
        .unwrap_or_else(|| panic!("no serial in {body}"));
    let lineage = v["lineage"].as_str().unwrap_or_default().to_string();
    let resources = v["resources"].as_array().map(|a| a.len()).unwrap_or(0);
    (serial, lineage, body, resources)
}

/// Parses `Update prod.tfstate (serial N) by WHO` → (N, WHO).
fn parse_update(subject: &str, path: &str) -> Option<(u64, String)> {
    let rest = subject.strip_prefix(&format!("Update {path} (serial "))?;
    let (n, rest) = rest.split_once(") by ")?;
    let who = rest.trim();
    if who.is_empty() {
        return None;
    }
    Some((n.parse().ok()?, who.to_string()))
}

/// Every commit touching `path` on main is an `Update … (serial N) by …` commit by gitstate that
/// changes only `path`, with serials increasing; the newest holds `latest_serial` and its file is
/// byte-identical to what GET returned.
fn check_history(s: &Setup, path: &str, latest_serial: u64, get_body: &str) -> usize {
    let ctx = s.ctx();
    let subjects = s.history(path);
    assert!(
        !subjects.is_empty(),
        "no commit touches {path} on main{ctx}"
    );
    let mut serials = Vec::new();
    for subject in &subjects {
        let (serial, who) = parse_update(subject, path)
            .unwrap_or_else(|| panic!("commit subject {subject:?} is not `Update {path} (serial N) by WHO`; all: {subjects:#?}{ctx}"));
        // Terraform writes while holding its own lock, whose Who is user@hostname.
        assert_eq!(
            who,
            terraform_who(),
            "commit {subject:?}: WHO must be the lock holder's Who{ctx}"
        );
        serials.push(serial);
    }
    assert_eq!(
        serials[0], latest_serial,
        "newest commit's serial vs GET's serial; subjects {subjects:#?}{ctx}"
    );
    assert!(
        serials.windows(2).all(|w| w[0] > w[1]),
        "serials must increase from commit to commit (newest first here): {serials:?}{ctx}"
    );
    let gd = format!("--git-dir={}", s.git_dir.display());
    for commit in git(None, &[&gd, "rev-list", "main", "--", path]).lines() {
        let changed = git(
            None,
            &[
                &gd,
                "diff-tree",
                "--root",
                "--no-commit-id",
                "--name-only",
                "-r",
                commit,
            ],
        );
        assert_eq!(
            changed.trim(),
            path,
            "commit {commit} must change only {path}{ctx}"
        );
        let committer = git(None, &[&gd, "log", "-1", "--format=%cn", commit]);
        assert_eq!(committer.trim(), "gitstate", "committer of {commit}{ctx}");
    }
    let stored =
        git_show(&s.git_dir, "main", path).unwrap_or_else(|| panic!("main:{path} missing{ctx}"));
    assert_eq!(
        String::from_utf8_lossy(&stored),
        get_body,
        "main:{path} must be exactly what GET returns{ctx}"
    );
    subjects.len()
}

/// How the Terraform configuration addresses the lock.
#[derive(Clone, Copy, Debug, PartialEq)]
enum LockStyle {
    /// `lock_address = unlock_address = /state/…` with the LOCK and UNLOCK verbs (the default).
    WebDav,
    /// `/lock/…` with `lock_method = "POST"`, `unlock_method = "DELETE"`, for gateways that
    /// refuse WebDAV verbs.
    PostDelete,
}

fn scenario(tf: &Terraform, remote: Remote) {
    scenario_with(tf, remote, LockStyle::WebDav)
}

fn scenario_with(tf: &Terraform, remote: Remote, style: LockStyle) {
    println!(
        "Terraform {} against {remote:?}, locks {style:?}",
        tf.version
    );
    let s = Setup::new(remote);
    let url = s.state_url(STATE);
    let lock_url = match style {
        LockStyle::WebDav => url.clone(),
        LockStyle::PostDelete => format!("{}/lock/default/{STATE}", s.server.base_url()),
    };
    let work = tempfile::Builder::new()
        .prefix("gitstate-tf")
        .tempdir()
        .unwrap();
    let dir = work.path();
    let mut backend = HttpBackend::new(&url);
    if style == LockStyle::PostDelete {
        backend.lock_address = Some(lock_url.clone());
        backend.unlock_address = Some(lock_url.clone());
        backend.extra = vec![
            ("lock_method".into(), "\"POST\"".into()),
            ("unlock_method".into(), "\"DELETE\"".into()),
        ];
    }
    write_main_tf(dir, &backend, 2, "g1");
    let tag = format!("Terraform {} / {remote:?} / {style:?}", tf.version);

    // 1. init, apply, plan.
    let out = tf.init(dir);
    out.expect_code(0, &format!("{tag}: init{}", s.ctx()));
    let out = tf.apply(dir);
    out.expect_code(0, &format!("{tag}: first apply{}", s.ctx()));
    assert!(
        out.stdout
            .contains("Apply complete! Resources: 2 added, 0 changed, 0 destroyed."),
        "{tag}: {}",
        out.stdout
    );

    let (serial1, lineage, body1, resources) = get_state(&url, &s.ctx());
    assert_eq!(
        resources, 2,
        "{tag}: state after apply has 2 resources: {body1}"
    );
    let commits_after_apply = check_history(&s, STATE, serial1, &body1);
    assert_eq!(
        s.commits_on_main(),
        s.base_commits + commits_after_apply,
        "{tag}: only state commits on main{}",
        s.ctx()
    );
    assert_eq!(
        s.lock_refs(),
        Vec::<String>::new(),
        "{tag}: no lock left after apply{}",
        s.ctx()
    );

    let out = tf.plan(dir);
    out.expect_code(
        0,
        &format!("{tag}: plan after apply must show no changes{}", s.ctx()),
    );
    assert!(out.stdout.contains("No changes."), "{tag}: {}", out.stdout);
    let main_commits = s.commits_on_main();
    assert_eq!(
        main_commits,
        s.base_commits + commits_after_apply,
        "{tag}: plan must not commit{}",
        s.ctx()
    );
    assert_eq!(
        s.lock_refs(),
        Vec::<String>::new(),
        "{tag}: no lock left after plan{}",
        s.ctx()
    );

    // A replayed POST of the stored body (Terraform retries 5xx) is a 200 without a new commit.
    let (status, body) = http("POST", &url, Some(&body1), None).unwrap();
    assert_eq!(
        status,
        200,
        "{tag}: replayed POST of the same state: {body}{}",
        s.ctx()
    );
    // (git log -- PATH hides a commit that leaves the file as it was: count every commit on main.)
    assert_eq!(
        s.commits_on_main(),
        main_commits,
        "{tag}: a replayed POST must not commit{}",
        s.ctx()
    );

    // 2. Someone else holds the lock.
    let lock_method = match style {
        LockStyle::WebDav => "LOCK",
        LockStyle::PostDelete => "POST",
    };
    let (status, body) = http(
        lock_method,
        &lock_url,
        Some(&lock_info(OTHER_ID, OTHER_WHO, "OperationTypeApply")),
        None,
    )
    .unwrap();
    assert_eq!(status, 200, "{tag}: direct LOCK: {body}{}", s.ctx());
    let lock_ref = format!("refs/heads/locks/{STATE}");
    assert_eq!(
        s.lock_refs(),
        vec![lock_ref.clone()],
        "{tag}: the lock is a branch{}",
        s.ctx()
    );
    let lock_file = git_show(&s.git_dir, &lock_ref, &format!("{STATE}.lock"))
        .unwrap_or_else(|| panic!("{tag}: {lock_ref}:{STATE}.lock missing{}", s.ctx()));
    let lock_json: serde_json::Value =
        serde_json::from_slice(&lock_file).expect("lock file is JSON");
    assert_eq!(lock_json["ID"], OTHER_ID, "{tag}: lock file {lock_json}");
    assert_eq!(lock_json["Who"], OTHER_WHO, "{tag}: lock file {lock_json}");
    let lock_subject = git(
        None,
        &[
            &format!("--git-dir={}", s.git_dir.display()),
            "log",
            "-1",
            "--format=%s",
            &lock_ref,
        ],
    );
    assert_eq!(
        lock_subject.trim(),
        format!("Lock {STATE}: OperationTypeApply by {OTHER_WHO} ({OTHER_ID})"),
        "{tag}: lock commit message"
    );

    write_main_tf(dir, &backend, 2, "g2");
    let out = tf.apply(dir);
    assert_ne!(
        out.code,
        Some(0),
        "{tag}: apply must fail while another ID holds the lock:\n{}{}",
        out.combined(),
        s.ctx()
    );
    let text = out.combined();
    assert!(
        text.contains("Error acquiring the state lock"),
        "{tag}: lock error expected:\n{text}{}",
        s.ctx()
    );
    // The http client reads the holder's LockInfo from the 423 body: "…already locked: ID=<holder>".
    // (Terraform 1.0 to 1.11 then print their own LockInfo below it, so the holder's Who is not shown.)
    assert!(
        text.contains(&format!("ID={OTHER_ID}")),
        "{tag}: the output names the holder's ID (from the 423 body):\n{text}"
    );
    let (serial_locked, _, body_locked, _) = get_state(&url, &s.ctx());
    assert_eq!(
        (serial_locked, &body_locked),
        (serial1, &body1),
        "{tag}: a refused apply must not change the state"
    );
    assert_eq!(
        s.commits_on_main(),
        main_commits,
        "{tag}: a refused apply must not commit"
    );
    assert_eq!(
        s.lock_refs(),
        vec![lock_ref.clone()],
        "{tag}: the other holder keeps its lock{}",
        s.ctx()
    );

    // 3. force-unlock, then apply works again.
    let out = tf.force_unlock(dir, OTHER_ID);
    out.expect_code(0, &format!("{tag}: force-unlock{}", s.ctx()));
    assert!(
        out.combined().contains("successfully unlocked"),
        "{tag}: {}",
        out.combined()
    );
    assert_eq!(
        s.lock_refs(),
        Vec::<String>::new(),
        "{tag}: force-unlock removes the lock branch{}",
        s.ctx()
    );

    let out = tf.apply(dir);
    out.expect_code(0, &format!("{tag}: apply after force-unlock{}", s.ctx()));
    assert!(
        out.stdout
            .contains("Apply complete! Resources: 2 added, 0 changed, 2 destroyed."),
        "{tag}: {}",
        out.stdout
    );
    let (serial2, lineage2, body2, _) = get_state(&url, &s.ctx());
    assert!(
        serial2 > serial1,
        "{tag}: serial must grow ({serial1} → {serial2})"
    );
    assert_eq!(lineage2, lineage, "{tag}: lineage is kept");
    assert!(
        body2.contains("\"g2\""),
        "{tag}: the new state holds the new triggers"
    );
    let commits_after_second = check_history(&s, STATE, serial2, &body2);
    assert!(
        commits_after_second > commits_after_apply,
        "{tag}: the second apply committed"
    );
    assert_eq!(
        s.commits_on_main(),
        s.base_commits + commits_after_second,
        "{tag}: only state commits on main{}",
        s.ctx()
    );
    assert_eq!(
        s.lock_refs(),
        Vec::<String>::new(),
        "{tag}: no lock left after the second apply{}",
        s.ctx()
    );

    tf.plan(dir)
        .expect_code(0, &format!("{tag}: final plan shows no changes{}", s.ctx()));
    println!("{tag}: ok; history:\n  {}", s.history(STATE).join("\n  "));
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
