//! Nested state paths (issue 55, goal 6): a LOCK of a path where no state could ever be written
//! (a folder of it is a state or locked; it is a folder of states or has locks under it) is a 409
//! whose one sentence names what is in the way, and writes nothing: no ref moves (checked with
//! git), and the embedded repository gets no object. Against the real `gitstate serve` on the embedded repository, on a remote repository
//! behind lighttpd + `git http-backend`, and through the terraform-backend-git query-style
//! address; and with real Terraform, whose apply stops at its lock.

use std::path::{Path, PathBuf};

use gitstate_tests::{
    bare_repo, git, http, write_main_tf, GitHttpServer, Gitstate, HttpBackend, Terraform,
};

const USER: &str = "terraform";
const PASSWORD: &str = "s3cret-pass";
const STATE: &str = r#"{"version":4,"terraform_version":"1.15.5","serial":1,"lineage":"4f1c","outputs":{},"resources":[]}"#;

fn lock_info(id: &str) -> String {
    format!(
        r#"{{"ID":"{id}","Operation":"OperationTypeApply","Info":"","Who":"alice@ci","Version":"1.15.5","Created":"2026-11-22T10:00:00.000000Z","Path":""}}"#
    )
}

/// How the server under test reaches its repository.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// `gitstate serve` with no repository: `./.gitstate/default.git`.
    Embedded,
    /// `--repository default=<lighttpd + git http-backend>`, basic auth.
    SmartHttp,
    /// The same git server named by each request: `/?type=git&repository=…&ref=main&state=…`.
    Query,
}

/// A running `gitstate serve`, the bare repository it writes to (inspected with git), and how a
/// state's address is spelled.
struct Setup {
    kind: Kind,
    gitstate: Gitstate,
    repo: PathBuf,
    remote: Option<String>,
    _http: Option<GitHttpServer>,
    _dir: tempfile::TempDir,
}

impl Setup {
    fn start(kind: Kind) -> Setup {
        let dir = tempfile::tempdir().expect("tempdir");
        let repos = dir.path().join("repos");
        std::fs::create_dir_all(&repos).expect("repos dir");
        let (repo, server) = match kind {
            Kind::Embedded => (dir.path().join(".gitstate/default.git"), None),
            Kind::SmartHttp | Kind::Query => (
                bare_repo(&repos, "states"),
                Some(GitHttpServer::start(&repos, USER, PASSWORD)),
            ),
        };
        let remote = server.as_ref().map(|s| s.url("states"));
        let mut args: Vec<String> = Vec::new();
        match (kind, &server, &remote) {
            (Kind::SmartHttp, _, Some(remote)) => {
                args = vec!["--repository".into(), format!("default={remote}")];
            }
            (Kind::Query, Some(server), _) => {
                // A pattern naming the loopback git server literally (internal addresses are
                // refused otherwise), with the deployment's git credential.
                args = vec![
                    "--allow-with-credential".into(),
                    format!("http://127.0.0.1:{}/git/*", server.port()),
                ];
            }
            _ => {}
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let gitstate = Gitstate::start(
            &args,
            &[("GIT_USERNAME", USER), ("GIT_PASSWORD", PASSWORD)],
            dir.path(),
        );
        Setup {
            kind,
            gitstate,
            repo,
            remote,
            _http: server,
            _dir: dir,
        }
    }

    /// The address of the state `path`.
    fn address(&self, path: &str) -> String {
        match (self.kind, &self.remote) {
            (Kind::Query, Some(remote)) => {
                let query: String = form_urlencoded::Serializer::new(String::new())
                    .append_pair("type", "git")
                    .append_pair("repository", remote)
                    .append_pair("ref", "main")
                    .append_pair("state", path)
                    .finish();
                format!("{}/?{query}", self.gitstate.base_url())
            }
            _ => self.gitstate.state_url("default", path),
        }
    }

    fn send(&self, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
        http(method, &self.address(path), body, None).expect("a request")
    }

    /// Every ref of the repository with its id, as git lists them.
    fn refs(&self) -> String {
        git(
            Some(&self.repo),
            &["for-each-ref", "--format=%(refname) %(objectname)"],
        )
    }

    /// Every object of the repository (a commit written and then left behind counts too).
    fn objects(&self) -> usize {
        count_objects(&self.repo)
    }
}

fn count_objects(repo: &Path) -> usize {
    git(
        Some(repo),
        &["cat-file", "--batch-all-objects", "--batch-check"],
    )
    .lines()
    .count()
}

/// The error sentence of a JSON error body.
fn sentence(body: &str) -> String {
    let value: serde_json::Value = serde_json::from_str(body).expect("a JSON error body");
    value["error"]
        .as_str()
        .expect("an error sentence")
        .to_owned()
}

/// The three cases of the issue and their mirror images, then paths beside them.
fn locks_where_no_state_could_be_written(kind: Kind) {
    let s = Setup::start(kind);
    // States `app`, `other/x`, `a/b`; locks on `prod` and `net/vpc`.
    for path in ["app", "other/x", "a/b"] {
        let (status, body) = s.send("POST", path, Some(STATE));
        assert_eq!(status, 200, "{path}: {body}");
    }
    for path in ["prod", "net/vpc"] {
        let (status, body) = s.send("LOCK", path, Some(&lock_info("held")));
        assert_eq!(status, 200, "{path}: {body}");
    }
    let (refs, objects) = (s.refs(), s.objects());

    let cases = [
        // The issue's three cases.
        (
            "prod/net",
            "the state path prod/net cannot be created because prod is locked",
        ),
        (
            "other",
            "the state path other is a directory of other states in the repository",
        ),
        (
            "other/x/y",
            "the state path other/x/y cannot be created because other/x is a state file in the repository",
        ),
        // Their mirror images.
        (
            "net",
            "the state path net cannot be created because net/vpc is locked",
        ),
        (
            "a",
            "the state path a is a directory of other states in the repository",
        ),
        // Deeper: the outermost state file.
        (
            "app/x/y",
            "the state path app/x/y cannot be created because app is a state file in the repository",
        ),
    ];
    // Twice: the second time the cache holds what the first one read.
    for round in 0..2 {
        for (path, expected) in cases {
            let (status, body) = s.send("LOCK", path, Some(&lock_info("new")));
            assert_eq!(
                status,
                409,
                "{kind:?} LOCK {path} (round {round}): {body}\n{}",
                s.gitstate.log()
            );
            let said = sentence(&body);
            assert!(said.starts_with(expected), "{kind:?} {path}: {said}");
            let info: serde_json::Value = serde_json::from_str(&body).expect("JSON");
            assert_eq!(
                info["Info"],
                said.as_str(),
                "shown by Terraform as the LockInfo's Info"
            );
            assert_eq!(said.matches(". ").count(), 0, "one sentence: {said}");
            assert_eq!(s.refs(), refs, "{kind:?} LOCK {path}: no ref written");
        }
    }
    // The embedded repository gets no object either. (A remote may keep the lock commit of a
    // one-request push that git refused, unreachable, as after any refused push.)
    if let Kind::Embedded = kind {
        assert_eq!(s.objects(), objects, "no object written");
    }
    // Nothing else there answers a 5xx either.
    for (path, _) in cases {
        for method in ["GET", "UNLOCK"] {
            let body = (method == "UNLOCK").then(|| lock_info("new"));
            let (status, answer) = s.send(method, path, body.as_deref());
            assert!(status < 500, "{kind:?} {method} {path}: {status} {answer}");
        }
    }

    // Paths beside them lock, and the states and locks there are as they were.
    for path in ["prod-a", "other/y", "net-b", "a-b", "app.d/x"] {
        let (status, body) = s.send("LOCK", path, Some(&lock_info("beside")));
        assert_eq!(status, 200, "{kind:?} LOCK {path}: {body}");
        let (status, body) = s.send("UNLOCK", path, Some(&lock_info("beside")));
        assert_eq!(status, 200, "{kind:?} UNLOCK {path}: {body}");
    }
    assert_eq!(s.refs(), refs, "{kind:?}: the locks beside were released");
}

#[test]
fn nested_locks_are_a_conflict_on_the_embedded_repository() {
    locks_where_no_state_could_be_written(Kind::Embedded);
}

#[test]
fn nested_locks_are_a_conflict_on_a_remote_repository() {
    locks_where_no_state_could_be_written(Kind::SmartHttp);
}

#[test]
fn nested_locks_are_a_conflict_through_the_query_style_address() {
    locks_where_no_state_could_be_written(Kind::Query);
}

/// `terraform apply` of a state nested under another state stops at its lock, before it applies
/// anything: the lock is refused (409), Terraform shows the sentence, no state or lock is written,
/// and the server's log says it too.
#[test]
fn terraform_apply_under_a_state_stops_at_its_lock_and_writes_nothing() {
    let tf = Terraform::installed("1.15.5");
    let s = Setup::start(Kind::Embedded);
    let (status, body) = s.send("POST", "prod", Some(STATE));
    assert_eq!(status, 200, "{body}");
    let (refs, objects) = (s.refs(), s.objects());

    let work = tempfile::tempdir().expect("tempdir");
    write_main_tf(
        work.path(),
        &HttpBackend::new(&s.address("prod/net")),
        1,
        "one",
    );
    tf.init(work.path()).expect_code(0, "init");
    let apply = tf.apply(work.path());
    assert!(!apply.success(), "{}", apply.combined());
    let output = apply.combined();
    assert!(
        output.contains("Error acquiring the state lock"),
        "{output}"
    );
    // Terraform shows the 409's body as the LockInfo of a holder: the sentence is its `Info`.
    assert!(
        output.contains(
            "Info:      the state path prod/net cannot be created because prod is a state file in the repository"
        ),
        "{output}"
    );
    assert!(!output.contains("Apply complete"), "{output}");
    assert_eq!(s.refs(), refs, "no lock or state written");
    assert_eq!(s.objects(), objects, "no object written");
    let log = s.gitstate.log();
    assert!(
        log.contains("the state path prod/net cannot be created because prod is a state file"),
        "{log}"
    );
}
