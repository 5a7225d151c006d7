//! History, restore and locks as an operator uses them, against a smart-HTTP remote (lighttpd +
//! `git http-backend`) with real Terraform: `gitstate history` agrees with `git log`, `GET
//! ?version=` serves exactly what git holds, `gitstate restore` writes an earlier version back with
//! the next serial (refused while someone holds the lock) and Terraform then plans against the
//! restored resources; `gitstate locks` shows a holder with its age and `gitstate unlock` releases
//! it only when confirmed.

use std::path::Path;

use gitstate_tests::*;
use serde_json::Value;

const GIT_USER: &str = "history-bot";
const GIT_PASS: &str = "h1story-pw";
const STATE: &str = "envs/prod.tfstate";

fn serial_of(bytes: &[u8]) -> u64 {
    serde_json::from_slice::<Value>(bytes).unwrap()["serial"]
        .as_u64()
        .unwrap()
}

/// `git log` of the state on the remote, newest first: (commit, serial of the file there).
fn git_versions(git_dir: &Path) -> Vec<(String, u64)> {
    let log = git(
        None,
        &[
            &format!("--git-dir={}", git_dir.display()),
            "log",
            "--format=%H",
            "main",
            "--",
            STATE,
        ],
    );
    log.lines()
        .map(|commit| {
            let content = git_show(git_dir, commit, STATE).expect("file at the commit");
            (commit.to_owned(), serial_of(&content))
        })
        .collect()
}

/// GET with the commit and serial headers.
fn get(url: &str) -> (u16, Option<String>, Option<String>, Vec<u8>) {
    let (status, mut headers, body) =
        get_with_headers(url, &["x-gitstate-commit", "x-gitstate-serial"]);
    let serial = headers.pop().flatten();
    let commit = headers.pop().flatten();
    (status, commit, serial, body)
}

#[test]
fn history_restore_and_locks_with_real_terraform() {
    let repos = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let git_dir = bare_repo(repos.path(), "states");
    let http_server = GitHttpServer::start(repos.path(), GIT_USER, GIT_PASS);
    let repository = format!("default={}", http_server.url("states"));
    let credentials = [("GIT_USERNAME", GIT_USER), ("GIT_PASSWORD", GIT_PASS)];
    let server = Gitstate::start(&["--repository", &repository], &credentials, cwd.path());
    let cli = |args: &[&str]| {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--repository", &repository]);
        gitstate_run(cwd.path(), &all, &credentials)
    };

    // Two applies: 2 resources, then 4.
    let tf = Terraform::installed("1.15.5");
    let work = tempfile::tempdir().unwrap();
    let backend = HttpBackend::new(&server.state_url("default", STATE));
    write_main_tf(work.path(), &backend, 2, "g1");
    tf.init(work.path()).expect_code(0, "init");
    tf.apply(work.path()).expect_code(0, "apply 1");
    write_main_tf(work.path(), &backend, 4, "g2");
    tf.apply(work.path()).expect_code(0, "apply 2");
    let versions = git_versions(&git_dir);
    assert!(versions.len() >= 2, "{versions:?}");
    let (first_commit, first_serial) = versions.last().unwrap().clone();
    let (_, current_serial) = versions[0].clone();

    // `gitstate history` lists exactly git's versions with the serials in the files.
    let out = cli(&["history", "default", STATE, "--json"]);
    out.expect_code(0, "history --json");
    let listed: Value = serde_json::from_str(&out.stdout).unwrap();
    let listed: Vec<(String, u64)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["commit"].as_str().unwrap().to_owned(),
                v["serial"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(listed, versions);
    let table = cli(&["history", "default", STATE]);
    table.expect_code(0, "history");
    assert!(table.stdout.starts_with("SERIAL"), "{}", table.stdout);
    assert!(
        table.stdout.contains(&first_commit[..12]) && table.stdout.contains(&terraform_who()),
        "{}",
        table.stdout
    );
    // The same over HTTP.
    let (status, body) = http(
        "GET",
        &format!("{}/_/history/default/{STATE}", server.base_url()),
        None,
        None,
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    let over_http: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(over_http.as_array().unwrap().len(), versions.len());
    assert_eq!(over_http[0]["who"], terraform_who());

    // GET ?version= by serial and by commit prefix: byte for byte what git holds.
    let in_git = git_show(&git_dir, &first_commit, STATE).unwrap();
    let url = server.state_url("default", STATE);
    for spec in [first_serial.to_string(), first_commit[..10].to_owned()] {
        let (status, commit, serial, body) = get(&format!("{url}?version={spec}"));
        assert_eq!(status, 200, "?version={spec}");
        assert_eq!(body, in_git, "?version={spec}");
        assert_eq!(commit.as_deref(), Some(first_commit.as_str()));
        assert_eq!(serial, Some(first_serial.to_string()));
    }
    for (spec, code) in [("99999", 404), ("not-a-version", 400), ("abc", 400)] {
        let (status, body) = http("GET", &format!("{url}?version={spec}"), None, None).unwrap();
        assert_eq!(status, code, "?version={spec}: {body}");
        assert!(serde_json::from_str::<Value>(&body).unwrap()["error"].is_string());
    }
    let (status, _) = http("POST", &format!("{url}?version=1"), Some("{}"), None).unwrap();
    assert_eq!(status, 400, "?version= on a write");

    // A held lock refuses the restore and nothing is written.
    let tip_before = git(
        None,
        &[
            &format!("--git-dir={}", git_dir.display()),
            "rev-parse",
            "main",
        ],
    );
    let holder = lock_info("ci-lock-7", "ci@runner", "OperationTypeApply");
    assert_eq!(http("LOCK", &url, Some(&holder), None).unwrap().0, 200);
    let first = first_serial.to_string();
    let refused = cli(&["restore", "default", STATE, "--version", &first]);
    assert_ne!(refused.code, Some(0), "restore under a lock");
    assert!(
        refused.stderr.contains("locked by ci@runner") && refused.stderr.contains("ci-lock-7"),
        "{}",
        refused.stderr
    );
    let tip_after = git(
        None,
        &[
            &format!("--git-dir={}", git_dir.display()),
            "rev-parse",
            "main",
        ],
    );
    assert_eq!(tip_before, tip_after, "a refused restore writes nothing");

    // `gitstate locks` shows the holder and its age; `unlock` wants a confirmation.
    let locks = cli(&["locks"]);
    locks.expect_code(0, "locks");
    assert!(
        locks.stdout.contains(STATE)
            && locks.stdout.contains("ci@runner")
            && locks.stdout.contains("ci-lock-7"),
        "{}",
        locks.stdout
    );
    let locks_json: Value = serde_json::from_str(&cli(&["locks", "--json"]).stdout).unwrap();
    assert_eq!(locks_json[0]["repository"], "default");
    assert!(
        locks_json[0]["age_seconds"].as_i64().unwrap() > 86_400,
        "created in 2024"
    );
    let (status, body) = http(
        "GET",
        &format!("{}/_/locks/default", server.base_url()),
        None,
        None,
    )
    .unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()[0]["who"],
        "ci@runner"
    );
    let unconfirmed = cli(&["unlock", "default", STATE]);
    assert_ne!(unconfirmed.code, Some(0));
    assert!(
        unconfirmed.stderr.contains("--yes"),
        "{}",
        unconfirmed.stderr
    );
    assert_eq!(
        refs_under(&git_dir, "refs/heads/locks/").len(),
        1,
        "still locked"
    );
    cli(&["unlock", "default", STATE, "--yes"]).expect_code(0, "unlock --yes");
    assert!(refs_under(&git_dir, "refs/heads/locks/").is_empty());
    let again = cli(&["unlock", "default", STATE, "--yes"]);
    again.expect_code(0, "unlock of an unlocked state");
    assert!(again.stdout.contains("not locked"), "{}", again.stdout);

    // The restore: version 1's content with the next serial, one new commit.
    let restored = cli(&["restore", "default", STATE, "--version", &first]);
    restored.expect_code(0, "restore");
    assert!(restored.stdout.contains("restored"), "{}", restored.stdout);
    let now = git_versions(&git_dir);
    assert_eq!(now.len(), versions.len() + 1);
    assert_eq!(now[0].1, current_serial + 1);
    let restored_bytes = git_show(&git_dir, "main", STATE).unwrap();
    let mut expected: Value = serde_json::from_slice(&in_git).unwrap();
    expected["serial"] = Value::from(current_serial + 1);
    assert_eq!(
        serde_json::from_slice::<Value>(&restored_bytes).unwrap(),
        expected
    );
    let subject = git_log_subjects(&git_dir, "main", STATE);
    assert!(
        subject[0].starts_with(&format!("Update {STATE} (serial {})", current_serial + 1)),
        "{subject:?}"
    );

    // Terraform sees the restored resources: two of them, and the first configuration plans clean.
    let list = tf.run(work.path(), &["state", "list"]);
    list.expect_code(0, "state list");
    let mut resources: Vec<&str> = list.stdout.lines().collect();
    resources.sort();
    assert_eq!(resources, ["null_resource.r0", "null_resource.r1"]);
    tf.plan(work.path()).expect_code(
        2,
        "the 4-resource configuration differs from the restored state",
    );
    write_main_tf(work.path(), &backend, 2, "g1");
    tf.plan(work.path())
        .expect_code(0, "the restored state matches the first configuration");

    // The repository listing shows the state with its serial, last writer and no lock.
    let (status, body) = http(
        "GET",
        &format!("{}/_/states/default", server.base_url()),
        None,
        None,
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    let states: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(states[0]["path"], STATE);
    assert_eq!(states[0]["serial"], current_serial + 1);
    assert_eq!(states[0]["size"], restored_bytes.len());
    assert!(states[0]["lock"].is_null());
    git(
        None,
        &[
            &format!("--git-dir={}", git_dir.display()),
            "fsck",
            "--strict",
        ],
    );
}
