//! Interoperability (issue 16): gitstate and real Terraform against smart-HTTP git servers that
//! are not git's own `git http-backend` and implement the protocol themselves:
//!
//! - dulwich 1.2.21 (PyPI; `dulwich.web` as `python -m dulwich.web` runs it, at a repository path:
//!   `tests/servers/dulwich_http_server.py`; upload-pack and receive-pack in Python): its
//!   receive-pack advertisement is issue 16's, `symref=HEAD:…` without a `HEAD` line when HEAD is
//!   unborn, `atomic`, `object-format=sha1`;
//! - JGit 4.11.9 (Debian `libjgit-java`; its `GitServlet` in an embedded Jetty 9): `atomic`, and
//!   `push-options` (the repositories set `receive.pushOptions`);
//! - `tests/servers/replay_advertisement.py` in front of lighttpd + `git http-backend` (basic
//!   auth): issue 16's advertisement byte for byte (and once with `push-options` added).
//!
//! Every repository's HEAD names `refs/heads/master`, a branch that never exists (gitstate writes
//! `main`): an empty repository (unborn HEAD, nothing advertised but `capabilities^{}`), and one
//! whose `main` already has a commit (HEAD pointing to a missing branch). Each case first checks
//! that the server really advertises what the case is about, then drives gitstate either with raw
//! protocol requests (LOCK/POST/GET/UNLOCK) or with real Terraform (1.15.5 and 1.0.3: init, apply,
//! a lock conflict, `force-unlock`, apply again; `terraform_lock_scenario`), and checks the result
//! with plain git (`git log`, `git show`, `git ls-remote` through the server under test, `git fsck`).
//!
//! Needs `scripts/install-test-deps.sh` (dulwich, JGit, Jetty, lighttpd, Terraform) and a built
//! `gitstate` binary.

use std::ops::Deref;
use std::path::{Path, PathBuf};

use gitstate_tests::*;

const STATE: &str = "prod.tfstate";
const GIT_USER: &str = "interop-bot";
const GIT_PASS: &str = "interop-secret";
const HOLDER: &str = "interop-holder";
const HOLDER_WHO: &str = "holder@interop";

/// The smart-HTTP server under test.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Server {
    Dulwich,
    JGit,
    /// The replay proxy: issue 16's receive-pack capabilities, `push-options` added when true.
    Replay {
        push_options: bool,
    },
}

/// What the repository looks like before gitstate writes anything. HEAD → `refs/heads/master`,
/// which never exists, in both.
#[derive(Clone, Copy, Debug, PartialEq)]
enum RepoState {
    /// No ref at all: unborn HEAD, an empty advertisement (`capabilities^{}`).
    EmptyUnbornHead,
    /// `main` has a commit (a README), HEAD points to the missing `master`.
    HeadToMissingBranch,
}

/// A server under test, its repository, and gitstate serving `--repository default=URL` from it.
struct Interop {
    repo: StateRepo,
    kind: Server,
    state: RepoState,
    /// The repository's URL on the server under test (what gitstate is given).
    url: String,
    auth: Option<(&'static str, &'static str)>,
    replay: Option<ReplayAdvertisementServer>,
    _dulwich: Option<DulwichServer>,
    _jgit: Option<JGitServer>,
    _http: Option<GitHttpServer>,
    _cwd: TempDir,
    _repos: TempDir,
}

impl Deref for Interop {
    type Target = StateRepo;
    fn deref(&self) -> &StateRepo {
        &self.repo
    }
}

/// `states.git` in `dir` in `state`, HEAD → `refs/heads/master`. Returns its path and the number
/// of commits on main.
fn make_repo(dir: &Path, state: RepoState) -> (PathBuf, usize) {
    let git_dir = bare_repo(dir, "states");
    let base_commits = match state {
        RepoState::EmptyUnbornHead => 0,
        RepoState::HeadToMissingBranch => {
            seed_commit(&git_dir);
            1
        }
    };
    git(
        Some(&git_dir),
        &["symbolic-ref", "HEAD", "refs/heads/master"],
    );
    // JGit advertises push-options when this is set (git's receive-pack reads another key).
    git(Some(&git_dir), &["config", "receive.pushOptions", "true"]);
    (git_dir, base_commits)
}

impl Interop {
    fn new(server: Server, state: RepoState) -> Interop {
        let cwd = tempfile::Builder::new()
            .prefix("gitstate-cwd")
            .tempdir()
            .unwrap();
        let repos = tempfile::Builder::new()
            .prefix("gitstate-repos")
            .tempdir()
            .unwrap();
        let (git_dir, base_commits) = make_repo(repos.path(), state);
        let mut logs = Vec::new();
        let (mut dulwich, mut jgit, mut http, mut replay) = (None, None, None, None);
        let (url, auth, plain_git_url) = match server {
            Server::Dulwich => {
                let d = DulwichServer::start(&git_dir, "states");
                let url = d.url();
                logs.push(("dulwich log".to_string(), d.log_path()));
                dulwich = Some(d);
                (url.clone(), None, url)
            }
            Server::JGit => {
                let j = JGitServer::start(repos.path());
                let url = j.url("states");
                logs.push(("JGit log".to_string(), j.log_path()));
                jgit = Some(j);
                (url.clone(), None, url)
            }
            Server::Replay { push_options } => {
                let backend = GitHttpServer::start(repos.path(), GIT_USER, GIT_PASS);
                let caps = if push_options {
                    ISSUE_16_RECEIVE_CAPS.replace(" symref=", " push-options symref=")
                } else {
                    ISSUE_16_RECEIVE_CAPS.to_string()
                };
                let r = ReplayAdvertisementServer::start(&backend, &caps);
                let url = r.url("states");
                let plain = url.replace("http://", &format!("http://{GIT_USER}:{GIT_PASS}@"));
                logs.push(("replay_advertisement.py log".to_string(), r.log_path()));
                replay = Some(r);
                http = Some(backend);
                (url, Some((GIT_USER, GIT_PASS)), plain)
            }
        };
        let env: Vec<(&str, &str)> = match auth {
            Some((user, password)) => vec![("GIT_USERNAME", user), ("GIT_PASSWORD", password)],
            None => Vec::new(),
        };
        let gitstate = Gitstate::start(
            &["--repository", &format!("default={url}")],
            &env,
            cwd.path(),
        );
        Interop {
            repo: StateRepo {
                server: gitstate,
                git_dir,
                remote_url: Some(plain_git_url),
                base_commits,
                logs,
            },
            kind: server,
            state,
            url,
            auth,
            replay,
            _dulwich: dulwich,
            _jgit: jgit,
            _http: http,
            _cwd: cwd,
            _repos: repos,
        }
    }

    fn tag(&self) -> String {
        format!("{:?} / {:?}", self.kind, self.state)
    }

    /// Checks that the server advertises what this case is about; `written`: gitstate has
    /// written `main` (so it is advertised, and HEAD still is not).
    fn check_advertisements(&self, written: bool) {
        let tag = self.tag();
        let receive = advertisement(&self.url, "git-receive-pack", self.auth);
        let refs = advertised_refs(&receive);
        let text = String::from_utf8_lossy(&receive).replace('\0', "\\0");
        assert!(
            !refs.is_empty(),
            "{tag}: receive-pack advertised no line at all: {text}"
        );
        let names: Vec<&str> = refs.iter().map(|r| r.2.as_str()).collect();
        assert!(
            !names.contains(&"HEAD"),
            "{tag}: HEAD is unborn, no HEAD line expected: {text}"
        );
        let has_main = written || self.state == RepoState::HeadToMissingBranch;
        if has_main {
            assert!(
                names.contains(&"refs/heads/main"),
                "{tag}: refs/heads/main advertised: {text}"
            );
        } else {
            assert_eq!(
                (refs[0].1.as_str(), names.as_slice()),
                (
                    "0000000000000000000000000000000000000000",
                    &["capabilities^{}"][..]
                ),
                "{tag}: an empty repository advertises only capabilities^{{}}: {text}"
            );
        }
        let caps: Vec<&str> = refs[0].3.split_whitespace().collect();
        let expected: &[&str] = match self.kind {
            Server::Dulwich => &[
                "atomic",
                "object-format=sha1",
                "symref=HEAD:refs/heads/master",
            ],
            Server::JGit => &["atomic", "push-options"],
            Server::Replay { push_options } => {
                assert_eq!(
                    refs[0].3.trim(),
                    if push_options {
                        ISSUE_16_RECEIVE_CAPS.replace(" symref=", " push-options symref=")
                    } else {
                        ISSUE_16_RECEIVE_CAPS.to_string()
                    },
                    "{tag}: the replayed capabilities: {text}"
                );
                &[
                    "atomic",
                    "object-format=sha1",
                    "symref=HEAD:refs/heads/master",
                ]
            }
        };
        for cap in expected {
            assert!(
                caps.contains(cap),
                "{tag}: the server under test advertises {cap}: {text}"
            );
        }
        if self.kind
            == (Server::Replay {
                push_options: false,
            })
            && !has_main
        {
            // Issue 16's advertisement, byte for byte.
            let issue = format!(
                "001f# service=git-receive-pack\n0000{}0000",
                "00b60000000000000000000000000000000000000000 capabilities^{}\0 report-status delete-refs quiet atomic ofs-delta side-band-64k no-done object-format=sha1 symref=HEAD:refs/heads/master\n"
            );
            assert_eq!(text, issue.replace('\0', "\\0"), "{tag}: issue 16's bytes");
        }
        let upload = advertisement(&self.url, "git-upload-pack", self.auth);
        let upload_text = String::from_utf8_lossy(&upload).replace('\0', "\\0");
        assert!(
            !advertised_refs(&upload).iter().any(|r| r.2 == "HEAD"),
            "{tag}: no HEAD line in the upload-pack advertisement either: {upload_text}"
        );
    }

    /// What every case checks at the end: the server under test's advertisements still have no
    /// HEAD line and do have `main`, the repository is whole, the replay proxy was really used,
    /// and gitstate never panicked.
    fn check_end(&self) {
        let tag = self.tag();
        self.check_advertisements(true);
        let fsck = git_output(
            None,
            &[
                &format!("--git-dir={}", self.git_dir.display()),
                "fsck",
                "--no-progress",
            ],
        );
        assert!(
            fsck.status.success(),
            "{tag}: git fsck: {}{}",
            String::from_utf8_lossy(&fsck.stderr),
            self.ctx()
        );
        if let Some(replay) = &self.replay {
            for service in ["git-receive-pack", "git-upload-pack"] {
                assert!(
                    replay.replayed(service) > 0,
                    "{tag}: gitstate never read a replayed {service} advertisement{}",
                    self.ctx()
                );
            }
        }
        let log = self.server.log();
        assert!(
            !log.contains("panicked") && !log.contains("unreachable"),
            "{tag}: gitstate panicked:{}",
            self.ctx()
        );
    }
}

fn status_of(method: &str, url: &str, body: Option<&str>, ctx: &str) -> (u16, String) {
    http(method, url, body, None).unwrap_or_else(|e| panic!("{method} {url}: {e}{ctx}"))
}

fn tfstate(serial: u64) -> String {
    format!(
        r#"{{"version":4,"terraform_version":"1.15.5","serial":{serial},"lineage":"interop-lineage","outputs":{{"n":{{"value":{serial},"type":"number"}}}},"resources":[]}}"#
    )
}

/// LOCK / POST / GET / UNLOCK straight through `gitstate serve --repository default=URL`.
fn raw_protocol(server: Server, state: RepoState) {
    let s = Interop::new(server, state);
    let tag = s.tag();
    s.check_advertisements(false);
    let url = s.state_url(STATE);
    let lock_ref = format!("refs/heads/locks/{STATE}");

    let (status, body) = status_of("GET", &url, None, &s.ctx());
    assert_eq!(
        status,
        204,
        "{tag}: GET before any write: {body}{}",
        s.ctx()
    );

    let holder = lock_info(HOLDER, HOLDER_WHO, "OperationTypeApply");
    let (status, body) = status_of("LOCK", &url, Some(&holder), &s.ctx());
    assert_eq!(status, 200, "{tag}: LOCK: {body}{}", s.ctx());
    assert_eq!(
        s.lock_refs(),
        vec![lock_ref.clone()],
        "{tag}: the lock is a branch{}",
        s.ctx()
    );
    let (status, body) = status_of("LOCK", &url, Some(&holder), &s.ctx());
    assert_eq!(
        status,
        200,
        "{tag}: LOCK again by the holder: {body}{}",
        s.ctx()
    );
    let other = lock_info("someone-else", "other@interop", "OperationTypeApply");
    let (status, body) = status_of("LOCK", &url, Some(&other), &s.ctx());
    assert_eq!(status, 423, "{tag}: LOCK by another ID: {body}{}", s.ctx());
    assert!(body.contains(HOLDER), "{tag}: 423 names the holder: {body}");

    let (status, body) = status_of("POST", &url, Some(&tfstate(1)), &s.ctx());
    assert_eq!(
        status,
        423,
        "{tag}: POST without the lock ID: {body}{}",
        s.ctx()
    );
    let write_url = format!("{url}?ID={HOLDER}");
    let (status, body) = status_of("POST", &write_url, Some(&tfstate(1)), &s.ctx());
    assert_eq!(status, 200, "{tag}: POST serial 1: {body}{}", s.ctx());
    let (status, body) = status_of("GET", &url, None, &s.ctx());
    assert_eq!(
        (status, body.as_str()),
        (200, tfstate(1).as_str()),
        "{tag}: GET serves what was POSTed{}",
        s.ctx()
    );
    let commits = s.commits_on_main();
    let (status, body) = status_of("POST", &write_url, Some(&tfstate(1)), &s.ctx());
    assert_eq!(status, 200, "{tag}: replayed POST: {body}{}", s.ctx());
    assert_eq!(
        s.commits_on_main(),
        commits,
        "{tag}: a replayed POST commits nothing"
    );
    let (status, body) = status_of("POST", &write_url, Some(&tfstate(2)), &s.ctx());
    assert_eq!(status, 200, "{tag}: POST serial 2: {body}{}", s.ctx());
    let (status, body) = status_of("GET", &url, None, &s.ctx());
    assert_eq!(
        (status, body.as_str()),
        (200, tfstate(2).as_str()),
        "{tag}: GET serves serial 2{}",
        s.ctx()
    );

    let (status, body) = status_of("UNLOCK", &url, Some(&holder), &s.ctx());
    assert_eq!(status, 200, "{tag}: UNLOCK: {body}{}", s.ctx());
    assert_eq!(
        s.lock_refs(),
        Vec::<String>::new(),
        "{tag}: no lock left{}",
        s.ctx()
    );

    // What plain git sees.
    assert_eq!(
        s.history(STATE),
        vec![
            format!("Update {STATE} (serial 2) by {HOLDER_WHO}"),
            format!("Update {STATE} (serial 1) by {HOLDER_WHO}"),
        ],
        "{tag}: git log -- {STATE}{}",
        s.ctx()
    );
    assert_eq!(
        s.commits_on_main(),
        s.base_commits + 2,
        "{tag}: two commits on main (after the seed){}",
        s.ctx()
    );
    assert_eq!(
        git_show(&s.git_dir, "main", STATE).map(|b| String::from_utf8_lossy(&b).into_owned()),
        Some(tfstate(2)),
        "{tag}: main:{STATE} is what was POSTed last"
    );
    let tip = git(
        None,
        &[
            &format!("--git-dir={}", s.git_dir.display()),
            "rev-parse",
            "main",
        ],
    );
    let remote = ls_remote(s.remote_url.as_deref().unwrap());
    assert!(
        remote.contains(&(tip.trim().to_string(), "refs/heads/main".to_string())),
        "{tag}: git ls-remote through the server under test shows main at {tip}: {remote:?}"
    );
    if state == RepoState::HeadToMissingBranch {
        let subjects = git_log_subjects(&s.git_dir, "main", "README.md");
        assert_eq!(
            subjects,
            vec!["Initial commit"],
            "{tag}: the seed commit is kept"
        );
    }
    s.check_end();
}

/// Real Terraform: init, apply, plan, a lock conflict, force-unlock, apply again.
fn terraform(server: Server, state: RepoState, tf: &Terraform) {
    let s = Interop::new(server, state);
    s.check_advertisements(false);
    terraform_lock_scenario(tf, &s, &s.tag(), LockStyle::WebDav);
    s.check_end();
}

// ---------------------------------------------------------------- raw protocol

#[test]
fn raw_protocol_dulwich_empty_repository_unborn_head() {
    raw_protocol(Server::Dulwich, RepoState::EmptyUnbornHead);
}

#[test]
fn raw_protocol_dulwich_head_to_missing_branch() {
    raw_protocol(Server::Dulwich, RepoState::HeadToMissingBranch);
}

#[test]
fn raw_protocol_jgit_empty_repository_unborn_head() {
    raw_protocol(Server::JGit, RepoState::EmptyUnbornHead);
}

#[test]
fn raw_protocol_jgit_head_to_missing_branch() {
    raw_protocol(Server::JGit, RepoState::HeadToMissingBranch);
}

/// Issue 16's "done when": its advertisement, replayed by a tiny test server, gets a working
/// LOCK/POST/GET/UNLOCK.
#[test]
fn raw_protocol_replayed_issue_16_advertisement_empty_repository() {
    raw_protocol(
        Server::Replay {
            push_options: false,
        },
        RepoState::EmptyUnbornHead,
    );
}

#[test]
fn raw_protocol_replayed_issue_16_advertisement_head_to_missing_branch() {
    raw_protocol(
        Server::Replay {
            push_options: false,
        },
        RepoState::HeadToMissingBranch,
    );
}

// ---------------------------------------------------------------- real Terraform

#[test]
fn tf_1_15_5_dulwich_empty_repository_unborn_head() {
    terraform(
        Server::Dulwich,
        RepoState::EmptyUnbornHead,
        &Terraform::installed("1.15.5"),
    );
}

#[test]
fn tf_1_0_3_dulwich_head_to_missing_branch() {
    terraform(
        Server::Dulwich,
        RepoState::HeadToMissingBranch,
        &Terraform::installed("1.0.3"),
    );
}

#[test]
fn tf_1_15_5_jgit_empty_repository_unborn_head() {
    terraform(
        Server::JGit,
        RepoState::EmptyUnbornHead,
        &Terraform::installed("1.15.5"),
    );
}

#[test]
fn tf_1_0_3_jgit_head_to_missing_branch() {
    terraform(
        Server::JGit,
        RepoState::HeadToMissingBranch,
        &Terraform::installed("1.0.3"),
    );
}

#[test]
fn tf_1_15_5_replayed_advertisement_with_push_options_empty_repository() {
    terraform(
        Server::Replay { push_options: true },
        RepoState::EmptyUnbornHead,
        &Terraform::installed("1.15.5"),
    );
}

#[test]
fn tf_1_0_3_replayed_advertisement_with_push_options_head_to_missing_branch() {
    terraform(
        Server::Replay { push_options: true },
        RepoState::HeadToMissingBranch,
        &Terraform::installed("1.0.3"),
    );
}
