//! The DynamoDB catalog (moto) as a platform team uses it: real Terraform applies, then
//! `gitstate catalog states` shows the state with its serial, resources and lock holder;
//! `gitstate catalog audit` lists lock, unlock and force-unlock in order; DynamoDB going away
//! never fails a state write, and the next write after it is back repairs the entry.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use gitstate_tests::crypto::MotoServer;
use gitstate_tests::*;
use serde_json::Value;

const TABLE: &str = "gitstate-catalog";

fn catalog(moto: &MotoServer, args: &[&str]) -> (bool, String, String) {
    let mut cmd = Command::new(gitstate_bin());
    cmd.arg("catalog")
        .args(args)
        .args(["--catalog-table", TABLE]);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("GITSTATE_") {
            cmd.env_remove(&key);
        }
    }
    let out = cmd
        .envs(moto.aws_env())
        .output()
        .expect("run gitstate catalog");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json(moto: &MotoServer, args: &[&str]) -> Value {
    let (ok, out, err) = catalog(moto, &[args, &["--json"]].concat());
    assert!(ok, "gitstate catalog {args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// Polls `check` for up to 10 s (catalog updates run after the answer).
fn eventually(what: &str, mut check: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match check() {
            Ok(()) => return,
            Err(e) if Instant::now() > deadline => panic!("{what}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

fn state_entry<'a>(states: &'a Value, path: &str) -> Option<&'a Value> {
    states.as_array()?.iter().find(|s| s["path"] == path)
}

fn serial_in_git(cwd: &Path, path: &str) -> u64 {
    let bytes = git_show(&cwd.join(".gitstate/default.git"), "main", path).expect("state in git");
    serde_json::from_slice::<Value>(&bytes).unwrap()["serial"]
        .as_u64()
        .unwrap()
}

#[test]
fn catalog_follows_terraform_locks_and_survives_an_outage() {
    let mut moto = MotoServer::start();
    let (ok, out, err) = catalog(&moto, &["create-table"]);
    assert!(ok && out.contains("table created"), "{out}{err}");
    let (ok, out, _) = catalog(&moto, &["create-table"]);
    assert!(ok && out.contains("exists"), "{out}");

    let cwd = tempfile::tempdir().unwrap();
    let mut env: Vec<(String, String)> = moto.aws_env();
    env.push(("GITSTATE_CATALOG_TABLE".into(), TABLE.into()));
    let env_refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let server = Gitstate::start(&[], &env_refs, cwd.path());

    // real terraform: init, apply (3 resources), plan clean
    let tf = Terraform::installed("1.15.5");
    let work = tempfile::tempdir().unwrap();
    write_main_tf(
        work.path(),
        &HttpBackend::new(&server.state_url("default", "prod.tfstate")),
        3,
        "g1",
    );
    tf.init(work.path()).expect_code(0, "init");
    tf.apply(work.path()).expect_code(0, "apply");
    tf.plan(work.path()).expect_code(0, "plan");
    let serial = serial_in_git(cwd.path(), "prod.tfstate");
    eventually("the catalog shows the applied state", || {
        let states = json(&moto, &["states"]);
        let s = state_entry(&states, "prod.tfstate").ok_or("no entry")?;
        (s["repository"] == "default"
            && s["serial"] == serial
            && s["resource_count"] == 3
            && s["terraform_version"] == "1.15.5"
            && s["lock"].is_null()
            && !s["lineage"].as_str().unwrap_or_default().is_empty())
        .then_some(())
        .ok_or(format!("{s}"))
    });
    let (_, table, _) = catalog(&moto, &["states"]);
    assert!(
        table.starts_with("REPOSITORY") && table.contains("prod.tfstate"),
        "{table}"
    );

    // locks: a holder shows in `states`, and the trail lists lock, unlock, lock, force-unlock
    let url = server.state_url("default", "prod.tfstate");
    let alice = lock_info("lock-alice", "alice@ci", "OperationTypeApply");
    let bob = lock_info("lock-bob", "bob@laptop", "OperationTypePlan");
    assert_eq!(http("LOCK", &url, Some(&alice), None).unwrap().0, 200);
    eventually("the lock holder shows", || {
        let states = json(&moto, &["states"]);
        let s = state_entry(&states, "prod.tfstate").ok_or("no entry")?;
        (s["lock"]["who"] == "alice@ci" && s["lock"]["id"] == "lock-alice")
            .then_some(())
            .ok_or(format!("{s}"))
    });
    assert_eq!(http("UNLOCK", &url, Some(&alice), None).unwrap().0, 200);
    assert_eq!(http("LOCK", &url, Some(&bob), None).unwrap().0, 200);
    assert_eq!(http("UNLOCK", &url, Some(""), None).unwrap().0, 200); // terraform force-unlock
    eventually("the audit trail in order", || {
        let trail = json(&moto, &["audit", "default", "prod.tfstate"]);
        let actions: Vec<String> = trail
            .as_array()
            .ok_or("not a list")?
            .iter()
            .map(|e| e["action"].as_str().unwrap_or_default().to_owned())
            .collect();
        let tail: Vec<&str> = actions
            .iter()
            .rev()
            .take(4)
            .rev()
            .map(String::as_str)
            .collect();
        (tail == ["lock", "unlock", "lock", "force-unlock"]
            && actions.contains(&"write".to_owned()))
        .then_some(())
        .ok_or(format!("{actions:?}"))
    });
    let trail = json(&moto, &["audit", "default", "prod.tfstate"]);
    let events = trail.as_array().unwrap();
    let last4 = &events[events.len() - 4..];
    assert_eq!(
        (&last4[0]["who"], &last4[0]["lock_id"]),
        (&Value::from("alice@ci"), &Value::from("lock-alice"))
    );
    assert_eq!(last4[1]["who"], "alice@ci");
    assert_eq!(
        (&last4[2]["who"], &last4[2]["lock_id"]),
        (&Value::from("bob@laptop"), &Value::from("lock-bob"))
    );
    // Terraform's own apply took and released a lock too, as the user running it
    assert!(
        events
            .iter()
            .any(|e| e["action"] == "lock" && e["who"] == terraform_who()),
        "{trail}"
    );
    eventually("no lock after force-unlock", || {
        let states = json(&moto, &["states"]);
        let s = state_entry(&states, "prod.tfstate").ok_or("no entry")?;
        s["lock"].is_null().then_some(()).ok_or(format!("{s}"))
    });

    // DynamoDB goes away: writes still succeed and land in git
    moto.stop();
    write_main_tf(work.path(), &HttpBackend::new(&url), 4, "g2");
    tf.apply(work.path())
        .expect_code(0, "apply while DynamoDB is down");
    let during = serial_in_git(cwd.path(), "prod.tfstate");
    assert!(during > serial);
    eventually("the failure is logged", || {
        server
            .log()
            .contains("the catalog was not updated")
            .then_some(())
            .ok_or(server.log())
    });

    // a fresh DynamoDB (empty): the next write repairs the entry
    moto.restart();
    let (ok, _, err) = catalog(&moto, &["create-table"]);
    assert!(ok, "{err}");
    write_main_tf(work.path(), &HttpBackend::new(&url), 5, "g3");
    tf.apply(work.path())
        .expect_code(0, "apply after DynamoDB is back");
    let after = serial_in_git(cwd.path(), "prod.tfstate");
    eventually("the entry is repaired by the next write", || {
        let states = json(&moto, &["states"]);
        let s = state_entry(&states, "prod.tfstate").ok_or("no entry")?;
        (s["serial"] == after && s["resource_count"] == 5)
            .then_some(())
            .ok_or(format!("{s}"))
    });
}
