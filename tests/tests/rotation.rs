//! Credentials that rotate (issue 35, README "Credentials that rotate"): `GIT_PASSWORD_FILE` is
//! read again when it changes, so that a sidecar or a CI step refreshing a token (a GitHub App
//! installation token lasts an hour) keeps a long-running `gitstate serve` working.
//!
//! Real Terraform 1.15.5 applies through `gitstate serve` to lighttpd + `git http-backend`, whose
//! htpasswd accepts one token at a time. The token rotates twice while the server runs: once as a
//! Kubernetes secret volume or `mv` replaces a file, once rewritten in place (truncated, then
//! written, with a request in between that sees it empty). Every request answered 2xx, every
//! write landed, and neither token is in the server's log.

use std::fs;
use std::path::Path;

use gitstate_tests::*;

const STATE: &str = "prod.tfstate";
const USER: &str = "installation-bot";
const TOKENS: [&str; 3] = [
    "ghs_first0Token0aaaaaaaa",
    "ghs_second0Token0bbbbbbb",
    "ghs_third0Token0cccccccc",
];

/// Replaces `path` with a file holding `value` (a new file renamed over the old).
fn replace_file(path: &Path, value: &str) {
    let next = path.with_extension("next");
    fs::write(&next, format!("{value}\n")).unwrap();
    fs::rename(&next, path).unwrap();
}

#[test]
fn a_rotated_password_file_keeps_a_running_server_writing() {
    let tf = Terraform::installed("1.15.5");
    let repos = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let secrets = tempfile::tempdir().unwrap();
    let git_dir = bare_repo(repos.path(), "states");
    let mut git_server = GitHttpServer::start(repos.path(), USER, TOKENS[0]);
    let token_file = secrets.path().join("token");
    replace_file(&token_file, TOKENS[0]);
    let server = Gitstate::start(
        &[
            "--repository",
            &format!("default={}", git_server.url("states")),
        ],
        &[
            ("GIT_USERNAME", USER),
            ("GIT_PASSWORD_FILE", token_file.to_str().unwrap()),
        ],
        cwd.path(),
    );
    let url = server.state_url("default", STATE);
    let backend = HttpBackend::new(&url);
    let apply = |generation: &str| {
        write_main_tf(work.path(), &backend, 2, generation);
        tf.apply(work.path()).expect_code(
            0,
            &format!("apply {generation}\n--- gitstate log\n{}", server.log()),
        );
    };
    write_main_tf(work.path(), &backend, 2, "first");
    tf.init(work.path()).expect_code(0, "init");
    apply("first");

    // The token rotates: the git server takes the new one (the old is refused from now on),
    // then the file is replaced, as a secret volume or a refreshing sidecar does.
    git_server.set_password(TOKENS[1]);
    replace_file(&token_file, TOKENS[1]);
    apply("second");

    // Rewritten in place: truncated first. A request that sees the empty file keeps the last
    // token, which the server still accepts.
    fs::File::create(&token_file).unwrap();
    let (status, body) = http("GET", &url, None, None).unwrap();
    assert_eq!(
        status,
        200,
        "a GET while the token file is empty: {body}\n--- gitstate log\n{}",
        server.log()
    );
    git_server.set_password(TOKENS[2]);
    fs::write(&token_file, format!("{}\n", TOKENS[2])).unwrap();
    apply("third");

    // The server really rotated: the first token is refused by the git server itself.
    let old = git_output(
        None,
        &[
            "ls-remote",
            &git_server
                .url("states")
                .replace("://", &format!("://{USER}:{}@", TOKENS[0])),
        ],
    );
    assert!(
        !old.status.success(),
        "the git server still accepts the first token"
    );

    // Three applies, three writes on main.
    let subjects = git_log_subjects(&git_dir, "main", STATE);
    assert_eq!(subjects.len(), 3, "one commit per apply: {subjects:?}");

    // Every answer gitstate gave was a 2xx (its own request counter, by status).
    let (status, metrics) = http(
        "GET",
        &format!("{}/_/metrics", server.base_url()),
        None,
        None,
    )
    .unwrap();
    assert_eq!(status, 200, "{metrics}");
    let statuses: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("gitstate_requests_total{"))
        .filter_map(|l| l.split("status=\"").nth(1))
        .filter_map(|rest| rest.split('"').next())
        .collect();
    assert!(!statuses.is_empty(), "no request counted:\n{metrics}");
    assert!(
        statuses.iter().all(|s| s.starts_with('2')),
        "a request failed during the rotations: {statuses:?}\n{metrics}"
    );

    let log = server.log();
    for token in TOKENS {
        assert!(!log.contains(token), "the log holds a token:\n{log}");
    }
    assert_eq!(
        log.matches("the git credential file changed: the next requests use the new credential")
            .count(),
        2,
        "each rotation is logged once:\n{log}"
    );
    assert!(
        log.contains("reads empty: the last credential is kept"),
        "the empty file is said:\n{log}"
    );
}
