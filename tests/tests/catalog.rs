//! The DynamoDB catalog (moto) as a platform team uses it: real Terraform applies, then
//! `gitstate catalog states` shows the state with its serial, resources and lock holder;
//! `gitstate catalog audit` lists lock, unlock and force-unlock in order; DynamoDB going away
//! never fails a state write, and the next write after it is back repairs the entry.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use gitstate_tests::browser::{browse, screenshot, text_of};
use gitstate_tests::crypto::MotoServer;
use gitstate_tests::*;
use serde_json::Value;

const TABLE: &str = "gitstate-catalog";

fn catalog(moto: &MotoServer, args: &[&str]) -> (bool, String, String) {
    let mut cmd = Command::new(gitstate_bin());
    cmd.arg("catalog")
        .args(args)
        .args(["--catalog-table", TABLE]);
    without_gitstate_env(&mut cmd);
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

/// `gitstate serve` on the embedded default in a new directory, recording in the moto catalog.
fn serve_with_catalog(moto: &MotoServer) -> (tempfile::TempDir, Gitstate) {
    serve_with_catalog_and(moto, &[])
}

/// [`serve_with_catalog`] with more variables (e.g. the KMS key of the resource index).
fn serve_with_catalog_and(
    moto: &MotoServer,
    more: &[(&str, &str)],
) -> (tempfile::TempDir, Gitstate) {
    let cwd = tempfile::tempdir().unwrap();
    let mut env: Vec<(String, String)> = moto.aws_env();
    env.push(("GITSTATE_CATALOG_TABLE".into(), TABLE.into()));
    env.extend(more.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let env_refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let server = Gitstate::start(&[], &env_refs, cwd.path());
    (cwd, server)
}

/// The catalog's table on `moto`, and [`serve_with_catalog`] with a KMS key that makes the
/// resource index key (the index keeps keyed hashes under it, issue 15); returns that key too.
fn serve_with_index(moto: &MotoServer) -> (String, tempfile::TempDir, Gitstate) {
    let (ok, _, err) = catalog(moto, &["create-table"]);
    assert!(ok, "{err}");
    let index_kms = moto.create_kms_key();
    let (cwd, server) = serve_with_catalog_and(moto, &[("GITSTATE_CATALOG_KMS_ARN", &index_kms)]);
    (index_kms, cwd, server)
}

#[test]
fn catalog_follows_terraform_locks_and_survives_an_outage() {
    let mut moto = MotoServer::start();
    let (ok, out, err) = catalog(&moto, &["create-table"]);
    assert!(ok && out.contains("table created"), "{out}{err}");
    let (ok, out, _) = catalog(&moto, &["create-table"]);
    assert!(ok && out.contains("exists"), "{out}");

    let (cwd, server) = serve_with_catalog(&moto);

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

/// A state's JSON as Terraform pulls it.
fn pull(tf: &Terraform, work: &Path) -> Value {
    let out = tf.run(work, &["state", "pull"]);
    out.expect_code(0, "state pull");
    serde_json::from_str(&out.stdout).unwrap()
}

/// The `id` of `null_resource.{name}` in a pulled state.
fn resource_id(state: &Value, name: &str) -> String {
    state["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap()["instances"][0]["attributes"]["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn last_commit(cwd: &Path, path: &str) -> String {
    git(
        None,
        &[
            &format!("--git-dir={}", cwd.join(".gitstate/default.git").display()),
            "log",
            "-1",
            "--format=%H",
            "main",
            "--",
            path,
        ],
    )
    .trim()
    .to_owned()
}

/// The catalog's answers with the times of day left out (a rebuild dates an entry by its commit).
fn comparable_states(states: &Value) -> Value {
    let mut states = states.clone();
    for state in states.as_array_mut().unwrap() {
        state.as_object_mut().unwrap().remove("updated_at");
    }
    states
}

#[test]
fn resource_index_names_shared_identifiers_and_rebuild_reproduces_it() {
    let mut moto = MotoServer::start();
    let (_, cwd, server) = serve_with_index(&moto);
    let tf = Terraform::installed("1.15.5");

    // Three states, two null_resources each, applied by real Terraform.
    let paths = ["net/a.tfstate", "net/b.tfstate", "app/c.tfstate"];
    let works: Vec<tempfile::TempDir> =
        paths.iter().map(|_| tempfile::tempdir().unwrap()).collect();
    for (path, work) in paths.iter().zip(&works) {
        let backend = HttpBackend::new(&server.state_url("default", path));
        write_main_tf(work.path(), &backend, 2, path);
        tf.init(work.path()).expect_code(0, "init");
        tf.apply(work.path()).expect_code(0, "apply");
    }
    // The null provider's ids come from Go's math/rand, seeded alike in every provider process,
    // so two states can hold the same id by chance. Every id is set explicitly instead
    // (`terraform state push` of a crafted state): each state's r1 gets its own, and every r0
    // gets one shared id, one real object managed by three states.
    let shared = "i-shared-0001".to_owned();
    let unique = "i-unique-net-a-r1".to_owned();
    for (path, work) in paths.iter().zip(&works) {
        let mut state = pull(&tf, work.path());
        for resource in state["resources"].as_array_mut().unwrap() {
            let id = match resource["name"].as_str().unwrap() {
                "r0" => shared.clone(),
                name => format!(
                    "i-unique-{}-{name}",
                    path.trim_end_matches(".tfstate").replace('/', "-")
                ),
            };
            resource["instances"][0]["attributes"]["id"] = Value::from(id);
        }
        state["serial"] = Value::from(state["serial"].as_u64().unwrap() + 1);
        let file = work.path().join("crafted.tfstate");
        std::fs::write(&file, serde_json::to_vec_pretty(&state).unwrap()).unwrap();
        tf.run(work.path(), &["state", "push", "crafted.tfstate"])
            .expect_code(0, "state push");
    }
    assert_eq!(resource_id(&pull(&tf, works[0].path()), "r1"), unique);

    let expected_duplicates = serde_json::json!([{
        "value": shared,
        "resource_type": "null_resource",
        "field": "id",
        "managed_by": [
            {"repository": "default", "path": "app/c.tfstate", "address": "null_resource.r0", "resource_type": "null_resource", "field": "id"},
            {"repository": "default", "path": "net/a.tfstate", "address": "null_resource.r0", "resource_type": "null_resource", "field": "id"},
            {"repository": "default", "path": "net/b.tfstate", "address": "null_resource.r0", "resource_type": "null_resource", "field": "id"},
        ],
    }]);
    eventually(
        "the duplicate report names exactly the three states",
        || {
            let found = json(&moto, &["duplicates"]);
            (found == expected_duplicates).then_some(()).ok_or(format!(
                "{found}\n--- find: {}\n--- gitstate log\n{}",
                json(&moto, &["find", &shared]),
                server.log()
            ))
        },
    );
    let (ok, table, _) = catalog(&moto, &["duplicates"]);
    assert!(
        ok && table.starts_with("IDENTIFIER") && table.lines().count() == 4,
        "{table}"
    );
    // "which state manages this?"
    assert_eq!(
        json(&moto, &["find", &shared]),
        expected_duplicates[0]["managed_by"]
    );
    let one = json(&moto, &["find", &unique]);
    assert_eq!(one.as_array().unwrap().len(), 1, "{one}");
    assert_eq!(
        (&one[0]["path"], &one[0]["address"]),
        (
            &Value::from("net/a.tfstate"),
            &Value::from("null_resource.r1")
        )
    );
    let (ok, none, _) = catalog(&moto, &["find", "no-such-id"]);
    assert!(ok && none.contains("no state manages no-such-id"), "{none}");

    // Each entry names the commit git holds, and the same answers come over HTTP.
    let states = json(&moto, &["states"]);
    for path in paths {
        let entry = state_entry(&states, path).unwrap();
        assert_eq!(entry["commit"], last_commit(cwd.path(), path), "{entry}");
        assert_eq!(entry["updated_by"], terraform_who(), "{entry}");
    }
    let trail = json(&moto, &["audit", "default", "net/b.tfstate"]);
    let writes: Vec<&Value> = trail
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "write")
        .collect();
    assert_eq!(
        writes.last().unwrap()["commit"],
        last_commit(cwd.path(), "net/b.tfstate")
    );
    let over_http = |path: &str| {
        let (status, body) =
            http("GET", &format!("{}{path}", server.base_url()), None, None).unwrap();
        assert_eq!(status, 200, "{path}: {body}");
        serde_json::from_str::<Value>(&body).unwrap()
    };
    assert_eq!(over_http("/_/catalog/duplicates"), expected_duplicates);
    assert_eq!(
        over_http(&format!("/_/catalog/find?identifier={shared}")),
        expected_duplicates[0]["managed_by"]
    );
    assert_eq!(over_http("/_/catalog/states"), states);

    // A page at a time, in repository and path order: the command says how to go on, and the
    // pages put together are the whole listing; a prefix; over HTTP the `Link` leads on.
    let keys: Vec<String> = states
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            format!(
                "{}/{}",
                e["repository"].as_str().unwrap(),
                e["path"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(keys.len(), paths.len());
    let (ok, out, err) = catalog(&moto, &["states", "--json", "--limit", "1"]);
    assert!(ok, "{err}");
    let first: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(first, Value::from(vec![states[0].clone()]));
    assert!(
        err.contains(&format!("more states follow: add --after {}", keys[0])),
        "{err}"
    );
    let rest = json(&moto, &["states", "--after", &keys[0]]);
    assert_eq!(rest, Value::from(states.as_array().unwrap()[1..].to_vec()));
    let net = json(&moto, &["states", "--prefix", "default/net/"]);
    let net_paths: Vec<&str> = net
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(net_paths, ["net/a.tfstate", "net/b.tfstate"]);
    let (status, headers, body) = get_with_headers(
        &format!("{}/_/catalog/states?limit=2", server.base_url()),
        &["link"],
    );
    assert_eq!(status, 200);
    let page: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(page, Value::from(states.as_array().unwrap()[..2].to_vec()));
    let next = headers[0].clone().expect("a Link to the next page");
    let next = next
        .trim_start_matches('<')
        .split('>')
        .next()
        .unwrap()
        .to_owned();
    assert_eq!(
        over_http(&next),
        Value::from(states.as_array().unwrap()[2..].to_vec())
    );
    assert_eq!(over_http("/_/catalog/audit/default/net/b.tfstate"), trail);

    // Rebuild on an empty table gives the same answers. The fresh emulator has no KMS key
    // either: the rebuild is given a new one to make the table's index key with.
    moto.restart();
    let (ok, _, err) = catalog(&moto, &["create-table"]);
    assert!(ok, "{err}");
    assert_eq!(json(&moto, &["states"]), serde_json::json!([]));
    let index_kms = moto.create_kms_key();
    let mut rebuild = std::process::Command::new(gitstate_bin());
    rebuild
        .args(["catalog", "rebuild", "--catalog-table", TABLE])
        .current_dir(cwd.path())
        .envs(moto.aws_env())
        .env("GITSTATE_CATALOG_KMS_ARN", &index_kms);
    let out = rebuild.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("default: 3 states, 6 identifiers indexed, 0 marked deleted"),
        "{stdout}"
    );
    // Progress on standard error, plain lines off a terminal (no escape codes).
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("rebuild default: 3/3 "), "{stderr}");
    assert!(
        !stderr.contains('\x1b') && !stdout.contains('\x1b'),
        "{stderr}"
    );
    assert_eq!(
        comparable_states(&json(&moto, &["states"])),
        comparable_states(&states)
    );
    assert_eq!(json(&moto, &["duplicates"]), expected_duplicates);
    assert_eq!(json(&moto, &["find", &unique]), one);

    // A state removed from git outside gitstate: the next rebuild marks it deleted and drops it
    // from the index.
    let clone = tempfile::tempdir().unwrap();
    let bare = cwd.path().join(".gitstate/default.git");
    git(
        None,
        &[
            "clone",
            "-q",
            bare.to_str().unwrap(),
            clone.path().to_str().unwrap(),
        ],
    );
    git(Some(clone.path()), &["rm", "-q", "app/c.tfstate"]);
    git(
        Some(clone.path()),
        &[
            "-c",
            "user.name=ops",
            "-c",
            "user.email=ops@x",
            "commit",
            "-q",
            "-m",
            "Retire c",
        ],
    );
    git(Some(clone.path()), &["push", "-q", "origin", "HEAD:main"]);
    let out = rebuild.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("default: 2 states, 4 identifiers indexed, 1 marked deleted"),
        "{stdout}"
    );
    let states = json(&moto, &["states"]);
    assert_eq!(
        state_entry(&states, "app/c.tfstate").unwrap()["deleted"],
        true
    );
    let managed = json(&moto, &["find", &shared]);
    assert_eq!(managed.as_array().unwrap().len(), 2, "{managed}");
    let remaining = json(&moto, &["duplicates"]);
    assert_eq!(remaining[0]["managed_by"], managed, "{remaining}");
    assert_eq!(remaining.as_array().unwrap().len(), 1, "{remaining}");
}

/// Issue 15: the catalog stores no value the state's encryption would have sealed. After a real
/// Terraform apply (states sealed with a KMS key, which also makes the index key), no item of
/// the DynamoDB table holds an identifier in clear, not even a `random_string`-like id that *is*
/// the secret; `gitstate catalog find` and `/_/catalog/find` still find the state by hashing the
/// question; a rebuild writes the same hashes. Without any KMS key, nothing is indexed and
/// `find` says why.
#[test]
fn the_resource_index_holds_no_identifier_in_clear() {
    let moto = MotoServer::start();
    let (ok, _, err) = catalog(&moto, &["create-table"]);
    assert!(ok, "{err}");
    let arn = moto.create_kms_key();
    // the states' own KMS key: the catalog makes its index key with it too (no catalog ARN given)
    let (cwd, server) = serve_with_catalog_and(&moto, &[("SOPS_KMS_ARN", &arn)]);
    let tf = Terraform::installed("1.15.5");
    let work = tempfile::tempdir().unwrap();
    write_main_tf(
        work.path(),
        &HttpBackend::new(&server.state_url("default", "app.tfstate")),
        2,
        "g1",
    );
    tf.init(work.path()).expect_code(0, "init");
    tf.apply(work.path()).expect_code(0, "apply");
    // r0 keeps the id the provider gave it; r1 gets one that is a secret (random_string's id
    // is its result)
    let secret = "random-string-secret-Zq8fW2xK";
    let mut state = pull(&tf, work.path());
    let applied = resource_id(&state, "r0");
    for resource in state["resources"].as_array_mut().unwrap() {
        if resource["name"] == "r1" {
            resource["instances"][0]["attributes"]["id"] = Value::from(secret);
        }
    }
    state["serial"] = Value::from(state["serial"].as_u64().unwrap() + 1);
    let file = work.path().join("crafted.tfstate");
    std::fs::write(&file, serde_json::to_vec_pretty(&state).unwrap()).unwrap();
    tf.run(work.path(), &["state", "push", "crafted.tfstate"])
        .expect_code(0, "state push");
    let stored = git_show(
        &cwd.path().join(".gitstate/default.git"),
        "main",
        "app.tfstate",
    )
    .unwrap();
    assert!(
        !String::from_utf8_lossy(&stored).contains(secret),
        "the state itself is sealed"
    );

    let expected = serde_json::json!([{"repository": "default", "path": "app.tfstate", "address": "null_resource.r1", "resource_type": "null_resource", "field": "id"}]);
    eventually("find answers by hashing the question", || {
        let found = json(&moto, &["find", secret]);
        (found == expected)
            .then_some(())
            .ok_or(format!("{found}\n{}", server.log()))
    });
    assert_eq!(
        json(&moto, &["find", &applied])[0]["address"],
        "null_resource.r0"
    );
    let (status, body) = http(
        "GET",
        &format!("{}/_/catalog/find?identifier={secret}", server.base_url()),
        None,
        None,
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap(), expected);

    // Nothing in the table holds either identifier in clear.
    let items = moto.dynamodb_items(TABLE);
    let index: Vec<&Value> = items
        .iter()
        .filter(|i| {
            let pk = i["pk"]["S"].as_str().unwrap_or_default();
            pk.starts_with("ID#") || pk.starts_with("RES#")
        })
        .collect();
    for item in &items {
        let text = item.to_string();
        for clear in [secret, applied.as_str()] {
            assert!(!text.contains(clear), "{clear} is stored in clear: {text}");
        }
    }
    assert_eq!(
        index.len(),
        4,
        "two identifiers, each by state and by value: {items:?}"
    );
    let key_item = items
        .iter()
        .find(|i| i["pk"]["S"] == "CONFIG" && i["sk"]["S"] == "index-key")
        .expect("the index key is kept in the table");
    assert_eq!(key_item["kms_arn"]["S"], arn.as_str());

    // A rebuild (same table, same key) writes the same hashes.
    let hashes = |items: &[Value]| -> std::collections::BTreeSet<(String, String, String)> {
        items
            .iter()
            .filter(|i| i["value_hmac"]["S"].is_string())
            .map(|i| {
                let s = |k: &str| i[k]["S"].as_str().unwrap_or_default().to_owned();
                (s("pk"), s("sk"), s("value_hmac"))
            })
            .collect()
    };
    let before = hashes(&items);
    // A rebuild by an operator without the states' key stops at the first sealed state, saying
    // why, and changes nothing (it used to index the sealed document as an empty state, which
    // emptied the index).
    let out = std::process::Command::new(gitstate_bin())
        .args(["catalog", "rebuild", "--catalog-table", TABLE])
        .current_dir(cwd.path())
        .envs(moto.aws_env())
        .env_remove("SOPS_KMS_ARN")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a rebuild without the key succeeded");
    assert!(
        err.contains("app.tfstate") && err.contains("encrypted"),
        "{err}"
    );
    assert_eq!(hashes(&moto.dynamodb_items(TABLE)), before);
    assert_eq!(json(&moto, &["find", secret]), expected);
    let out = std::process::Command::new(gitstate_bin())
        .args(["catalog", "rebuild", "--catalog-table", TABLE])
        .current_dir(cwd.path())
        .envs(moto.aws_env())
        // the operator's configuration is the server's: the states are sealed with this key
        .env("SOPS_KMS_ARN", &arn)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(hashes(&moto.dynamodb_items(TABLE)), before);
    assert_eq!(json(&moto, &["find", secret]), expected);

    // Without any KMS key there is no index key: nothing is indexed, and find says why.
    let bare_table = "gitstate-catalog-without-key";
    let run = |args: &[&str]| {
        let mut cmd = Command::new(gitstate_bin());
        cmd.arg("catalog")
            .args(args)
            .args(["--catalog-table", bare_table]);
        without_gitstate_env(&mut cmd);
        cmd.envs(moto.aws_env()).output().unwrap()
    };
    assert!(run(&["create-table"]).status.success());
    let cwd2 = tempfile::tempdir().unwrap();
    let mut env = moto.aws_env();
    env.push(("GITSTATE_CATALOG_TABLE".into(), bare_table.into()));
    let env_refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let plain_server = Gitstate::start(&[], &env_refs, cwd2.path());
    let body = serde_json::json!({"version": 4, "serial": 1, "lineage": "l", "resources": [{"mode": "managed", "type": "random_string", "name": "pw", "provider": "provider[\"registry.terraform.io/hashicorp/random\"]", "instances": [{"attributes": {"id": secret, "result": secret}}]}]});
    let (status, text) = http(
        "POST",
        &plain_server.state_url("default", "plain.tfstate"),
        Some(&body.to_string()),
        None,
    )
    .unwrap();
    assert_eq!(status, 200, "{text}");
    eventually("the state entry is recorded", || {
        let out = run(&["states", "--json"]);
        let states: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        state_entry(&states, "plain.tfstate")
            .map(|_| ())
            .ok_or(String::from_utf8_lossy(&out.stderr).into_owned())
    });
    let items = moto.dynamodb_items(bare_table);
    for item in &items {
        assert!(!item.to_string().contains(secret), "{item}");
    }
    let out = run(&["find", secret]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("the resource index is off"), "{stderr}");
}

/// Each UNLOCK form a client sends is answered, leaves the lock branch and is written in the
/// audit trail as what it is, from the one definition in `gitstate_core::lock`: a force-unlock
/// (terraform's empty body; OpenTofu's LockInfo with only `ID`, as OpenTofu marshals it with a
/// zero `Created`) releases any lock; any other LockInfo is the holder's own UNLOCK, which
/// releases only the lock its `ID` holds (`ID` + `Version` included, which the audit trail once
/// called a force-unlock) and is refused with the holder's LockInfo otherwise.
#[test]
fn each_unlock_form_is_answered_and_audited_as_what_it_is() {
    let moto = MotoServer::start();
    let (ok, out, err) = catalog(&moto, &["create-table"]);
    assert!(ok, "{out}{err}");
    let (cwd, server) = serve_with_catalog(&moto);
    let git_dir = cwd.path().join(".gitstate/default.git");
    let url = server.state_url("default", "forms.tfstate");
    let locked = || !refs_under(&git_dir, "refs/heads/locks/").is_empty();
    let holder = |id: &str| lock_info(id, "holder@ci", "OperationTypeApply");
    let opentofu_force = |id: &str| {
        serde_json::json!({"ID": id, "Operation": "", "Info": "", "Who": "", "Version": "",
            "Created": "0001-01-01T00:00:00Z", "Path": ""})
        .to_string()
    };
    // (the lock's ID, the UNLOCK body, its status, the audit action it adds)
    let forms: Vec<(&str, String, u16, Option<&str>)> = vec![
        ("f-empty", String::new(), 200, Some("force-unlock")),
        ("f-id", r#"{"ID":"f-id"}"#.into(), 200, Some("force-unlock")),
        (
            "f-other-id",
            r#"{"ID":"nobody"}"#.into(),
            200,
            Some("force-unlock"),
        ),
        (
            "f-tofu",
            opentofu_force("f-tofu"),
            200,
            Some("force-unlock"),
        ),
        (
            "f-version",
            r#"{"ID":"f-version","Version":"1"}"#.into(),
            200,
            Some("unlock"),
        ),
        ("f-holder", holder("f-holder"), 200, Some("unlock")),
        ("f-another", holder("someone-else"), 423, None),
    ];
    let mut expected = Vec::new();
    for (id, body, status, action) in &forms {
        assert_eq!(http("LOCK", &url, Some(&holder(id)), None).unwrap().0, 200);
        expected.push(("lock".to_owned(), id.to_string()));
        let (got, answer) = http("UNLOCK", &url, Some(body), None).unwrap();
        assert_eq!(got, *status, "UNLOCK {body:?}: {answer}");
        assert_eq!(locked(), *status != 200, "UNLOCK {body:?}: the lock branch");
        match action {
            Some(action) => expected.push((action.to_string(), String::new())),
            None => {
                // Refused with the holder's LockInfo; the holder then releases its lock.
                let info: Value = serde_json::from_str(&answer).unwrap();
                assert_eq!(info["ID"], *id, "{answer}");
                assert_eq!(
                    http("UNLOCK", &url, Some(&holder(id)), None).unwrap().0,
                    200
                );
                assert!(!locked());
                expected.push(("unlock".to_owned(), String::new()));
            }
        }
    }
    eventually("the audit trail names each release as it was", || {
        let trail = json(&moto, &["audit", "default", "forms.tfstate"]);
        let actions: Vec<(String, String)> = trail
            .as_array()
            .ok_or("not a list")?
            .iter()
            .map(|e| {
                let action = e["action"].as_str().unwrap_or_default().to_owned();
                let id = if action == "lock" {
                    e["lock_id"].as_str().unwrap_or_default().to_owned()
                } else {
                    String::new()
                };
                (action, id)
            })
            .collect();
        (actions == expected)
            .then_some(())
            .ok_or(format!("{actions:?} != {expected:?}"))
    });
    // The holder's own release names the holder.
    let trail = json(&moto, &["audit", "default", "forms.tfstate"]);
    let holder_release = &trail.as_array().unwrap()[11];
    assert_eq!(
        (&holder_release["action"], &holder_release["who"]),
        (&Value::from("unlock"), &Value::from("holder@ci")),
        "{trail}"
    );
}

/// `gitstate catalog rebuild` of the repositories under `cwd`, with the index key made by
/// `index_kms`; its standard output (it must succeed).
fn rebuild(moto: &MotoServer, cwd: &Path, index_kms: &str) -> String {
    let out = Command::new(gitstate_bin())
        .args(["catalog", "rebuild", "--catalog-table", TABLE])
        .current_dir(cwd)
        .envs(moto.aws_env())
        .env("GITSTATE_CATALOG_KMS_ARN", index_kms)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A v3 state as Terraform 0.11 wrote it (terraform-backend-git repositories still hold such
/// states): attributes in a flat map, a root module and a child module.
fn v3_state(serial: u64, tag: &str) -> String {
    serde_json::to_string_pretty(&serde_json::json!({
        "version": 3,
        "terraform_version": "0.11.14",
        "serial": serial,
        "lineage": "5e3c8d1e-legacy",
        "modules": [
            {"path": ["root"], "outputs": {"vpc_id": {"sensitive": false, "type": "string", "value": "vpc-0legacy01"}},
             "resources": {"aws_vpc.main": {"type": "aws_vpc", "depends_on": [], "provider": "provider.aws",
                "primary": {"id": "vpc-0legacy01", "attributes": {
                    "id": "vpc-0legacy01", "arn": "arn:aws:ec2:eu-west-1:111122223333:vpc/vpc-0legacy01",
                    "cidr_block": "10.0.0.0/16", "tags.%": "2", "tags.Name": tag,
                    "tags.kubernetes.io/cluster/prod": "shared"},
                    "meta": {}, "tainted": false}, "deposed": []}},
             "depends_on": []},
            {"path": ["root", "web"], "outputs": {},
             "resources": {"aws_instance.web.0": {"type": "aws_instance", "depends_on": [], "provider": "provider.aws",
                "primary": {"id": "i-0legacyweb0", "attributes": {
                    "id": "i-0legacyweb0", "subnet_id": "subnet-1",
                    "vpc_security_group_ids.#": "1", "vpc_security_group_ids.2481325435": "sg-1"},
                    "meta": {}, "tainted": false}, "deposed": []}},
             "depends_on": []}
        ]
    }))
    .unwrap()
}

/// Issue 36: a v3 state a terraform-backend-git repository holds is indexed as a v4 one is
/// (`catalog rebuild`, then `find` names its resources by their Terraform 0.12 addresses), and
/// the state's page shows what its next version changed.
#[test]
fn a_legacy_v3_state_is_indexed_and_its_changes_shown() {
    let moto = MotoServer::start();
    let (index_kms, cwd, server) = serve_with_index(&moto);
    // The first version lands as terraform-backend-git left it: a commit pushed with git.
    let clone = tempfile::tempdir().unwrap();
    let bare = cwd.path().join(".gitstate/default.git");
    let (bare, clone_dir) = (bare.to_str().unwrap(), clone.path().to_str().unwrap());
    git(None, &["clone", "-q", bare, clone_dir]);
    std::fs::create_dir_all(clone.path().join("legacy")).unwrap();
    std::fs::write(clone.path().join("legacy/net.tfstate"), v3_state(7, "main")).unwrap();
    git(Some(clone.path()), &["add", "legacy/net.tfstate"]);
    let commit = ["-c", "user.name=tbg", "-c", "user.email=tbg@x"];
    git(
        Some(clone.path()),
        &[&commit[..], &["commit", "-q", "-m", "Terraform 0.11"]].concat(),
    );
    git(Some(clone.path()), &["push", "-q", "origin", "HEAD:main"]);

    let stdout = rebuild(&moto, cwd.path(), &index_kms);
    assert!(
        stdout.contains("default: 1 states, 3 identifiers indexed"),
        "{stdout}"
    );
    let vpc = json(&moto, &["find", "vpc-0legacy01"]);
    assert_eq!(vpc[0]["path"], "legacy/net.tfstate", "{vpc}");
    assert_eq!(vpc[0]["address"], "aws_vpc.main", "{vpc}");
    let arn = json(
        &moto,
        &[
            "find",
            "arn:aws:ec2:eu-west-1:111122223333:vpc/vpc-0legacy01",
        ],
    );
    assert_eq!(arn[0]["address"], "aws_vpc.main", "{arn}");
    let web = json(&moto, &["find", "i-0legacyweb0"]);
    assert_eq!(web[0]["address"], "module.web.aws_instance.web[0]", "{web}");
    let states = json(&moto, &["states"]);
    assert_eq!(
        state_entry(&states, "legacy/net.tfstate").unwrap()["resource_count"],
        2,
        "{states}"
    );

    // The next version, POSTed as Terraform 0.11 would: one tag changed.
    let url = server.state_url("default", "legacy/net.tfstate");
    let (status, body) = http("POST", &url, Some(&v3_state(8, "renamed")), None).unwrap();
    assert_eq!(status, 200, "{body}");
    let page = format!("{}/_/ui/default/legacy/net.tfstate", server.base_url());
    let (status, html) = http("GET", &page, None, None).unwrap();
    assert_eq!(status, 200, "{html}");
    assert!(
        html.contains("2 resource instances in the newer version"),
        "{html}"
    );
    assert!(html.contains("<code>aws_vpc.main</code> changed"), "{html}");
    assert!(
        !html.contains("module.web.aws_instance.web[0]"),
        "only the vpc changed: {html}"
    );
    assert!(!html.contains("renamed"), "a value is on the page: {html}");
}

/// `terraform { backend "http" }` for `address`, then `body`, as `dir/main.tf`.
fn write_config(dir: &Path, address: &str, body: &str) {
    let config = format!("{}\n{body}\n", HttpBackend::new(address).hcl());
    std::fs::write(dir.join("main.tf"), config).unwrap();
}

/// A `terraform_remote_state` data source `net` reading the state at `address`.
fn remote_state(address: &str) -> String {
    format!("data \"terraform_remote_state\" \"net\" {{\n  backend = \"http\"\n  config = {{\n    address = {address:?}\n  }}\n}}\n")
}

/// Issue 36, goal 5: links across states follow real Terraform applies. `network` manages the
/// id, `app` copies it literally, `db` reads it through `terraform_remote_state`; `links` and
/// `order` say so (also over HTTP), `app` reading it too makes its link declared, and once
/// `network` is destroyed its users' links dangle.
#[test]
fn links_across_states_follow_terraform_applies() {
    let moto = MotoServer::start();
    let (index_kms, cwd, server) = serve_with_index(&moto);
    let tf = Terraform::installed("1.15.5");
    let url = |path: &str| server.state_url("default", path);
    let [network, app, db] = [(); 3].map(|_| tempfile::tempdir().unwrap());
    write_config(
        network.path(),
        &url("network.tfstate"),
        "resource \"terraform_data\" \"vpc\" {\n  input = \"10.0.0.0/16\"\n}\noutput \"vpc_id\" {\n  value = terraform_data.vpc.id\n}",
    );
    tf.init(network.path()).expect_code(0, "init network");
    tf.apply(network.path()).expect_code(0, "apply network");
    let vpc_id = resource_id(&pull(&tf, network.path()), "vpc");
    write_config(
        app.path(),
        &url("app.tfstate"),
        &format!("resource \"terraform_data\" \"app\" {{\n  input = {{ vpc = {vpc_id:?} }}\n}}"),
    );
    write_config(
        db.path(),
        &url("db.tfstate"),
        &format!(
            "{}resource \"terraform_data\" \"db\" {{\n  input = data.terraform_remote_state.net.outputs.vpc_id\n}}",
            remote_state(&url("network.tfstate"))
        ),
    );
    for (dir, what) in [(&app, "app"), (&db, "db")] {
        tf.init(dir.path()).expect_code(0, &format!("init {what}"));
        tf.apply(dir.path())
            .expect_code(0, &format!("apply {what}"));
    }

    let users = |links: &Value| -> Vec<(String, String, String)> {
        let mut found: Vec<(String, String, String)> = links["used_by"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                let dangling = if e["dangling"] == true {
                    " dangling"
                } else {
                    ""
                };
                (
                    e["path"].as_str().unwrap_or_default().to_owned(),
                    e["address"].as_str().unwrap_or_default().to_owned(),
                    format!("{}{dangling}", e["kind"].as_str().unwrap_or_default()),
                )
            })
            .collect();
        found.dedup();
        found
    };
    eventually("network's users are linked", || {
        let links = json(&moto, &["links", "default", "network.tfstate"]);
        let found = users(&links);
        let expected = [
            ("app.tfstate", "terraform_data.app", "literal"),
            ("db.tfstate", "data.terraform_remote_state.net", "declared"),
            ("db.tfstate", "terraform_data.db", "declared"),
        ];
        let expected: Vec<(String, String, String)> = expected
            .iter()
            .map(|(p, a, k)| (p.to_string(), a.to_string(), k.to_string()))
            .collect();
        (found == expected)
            .then_some(())
            .ok_or(format!("{links:#}"))
    });
    let links = json(&moto, &["links", "default", "network.tfstate"]);
    let literal = &links["used_by"][0];
    assert_eq!(
        literal["here"]["address"], "terraform_data.vpc",
        "{links:#}"
    );
    assert_eq!(literal["here"]["attribute"], "id", "{links:#}");
    assert!(
        literal["attribute"]
            .as_str()
            .unwrap_or_default()
            .starts_with("input"),
        "{links:#}"
    );
    let app_links = json(&moto, &["links", "default", "app.tfstate"]);
    assert_eq!(
        app_links["uses"][0]["path"], "network.tfstate",
        "{app_links:#}"
    );
    assert_eq!(app_links["uses"][0]["kind"], "literal", "{app_links:#}");
    let order = json(&moto, &["order", "default"]);
    assert_eq!(order["order"][0], "network.tfstate", "{order:#}");
    assert_eq!(order["cycles"], serde_json::json!([]), "{order:#}");
    // The same over HTTP.
    for (path, cli) in [
        ("/_/catalog/links/default/network.tfstate", links.clone()),
        ("/_/catalog/order/default", order.clone()),
    ] {
        let (status, body) =
            http("GET", &format!("{}{path}", server.base_url()), None, None).unwrap();
        assert_eq!(status, 200, "{body}");
        assert_eq!(serde_json::from_str::<Value>(&body).unwrap(), cli, "{path}");
    }
    // `catalog rebuild` makes the same links again, once every index entry is rebuilt.
    let stdout = rebuild(&moto, cwd.path(), &index_kms);
    assert!(stdout.contains("5 link(s) across states"), "{stdout}");
    assert_eq!(json(&moto, &["links", "default", "network.tfstate"]), links);
    let (ok, table, _) = catalog(&moto, &["links", "default", "network.tfstate"]);
    assert!(
        ok && table.contains("used by") && table.contains("literal"),
        "{table}"
    );

    // The web page: the graph (SVG drawn by the server), literal links in the warning colour;
    // a box opens the state's page, which lists its links both ways.
    let graph_url = format!("{}/_/ui/graph?repo=default", server.base_url());
    let shot = screenshot(&graph_url, "graph.png");
    eprintln!("screenshot of the dependency graph: {}", shot.display());
    let dom = browse(&graph_url, "--dump-dom");
    assert_eq!(dom.matches("class=\"link literal\"").count(), 1, "{dom}");
    assert_eq!(dom.matches("class=\"link declared\"").count(), 1, "{dom}");
    assert!(!dom.contains("<script"), "{dom}");
    let app_page = "/_/ui/default/app.tfstate";
    assert!(dom.contains(&format!("href=\"{app_page}\"")), "{dom}");
    let text = text_of(&browse(
        &format!("{}{app_page}", server.base_url()),
        "--dump-dom",
    ));
    for expected in [
        "Links across states",
        "Uses",
        "default/network.tfstate",
        "terraform_data.vpc",
        "literal",
    ] {
        assert!(
            text.contains(expected),
            "{expected:?} not on app's page: {text}"
        );
    }
    assert!(!text.contains(&vpc_id), "a value is on the page: {text}");

    // `app` reads the network's state too: its link is declared now.
    write_config(
        app.path(),
        &url("app.tfstate"),
        &format!(
            "{}resource \"terraform_data\" \"app\" {{\n  input = {{ vpc = data.terraform_remote_state.net.outputs.vpc_id }}\n}}",
            remote_state(&url("network.tfstate"))
        ),
    );
    tf.apply(app.path())
        .expect_code(0, "apply app reading the network's state");
    eventually("app's link is declared", || {
        let links = json(&moto, &["links", "default", "app.tfstate"]);
        let kinds: BTreeSet<&str> = links["uses"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["kind"].as_str())
            .collect();
        (kinds == BTreeSet::from(["declared"]))
            .then_some(())
            .ok_or(format!("{links:#}"))
    });

    // The network goes: every use of its vpc dangles.
    tf.run(
        network.path(),
        &["destroy", "-auto-approve", "-input=false"],
    )
    .expect_code(0, "destroy network");
    eventually("the network's users dangle", || {
        let links = json(&moto, &["links", "default", "network.tfstate"]);
        let entries = links["used_by"].as_array().cloned().unwrap_or_default();
        let all_dangle = !entries.is_empty() && entries.iter().all(|e| e["dangling"] == true);
        all_dangle.then_some(()).ok_or(format!("{links:#}"))
    });
}

/// The workspace API's writes are recorded as the http protocol's are (issue 56): a workspace's
/// lock, state version and unlock show in `gitstate catalog states` and its audit trail, under
/// the workspace's state path.
#[test]
fn the_workspace_api_is_recorded_in_the_catalog() {
    let moto = MotoServer::start();
    let (ok, _, err) = catalog(&moto, &["create-table"]);
    assert!(ok, "{err}");
    let (cwd, server) = serve_with_catalog(&moto);
    let api = |method: &str, path: &str, body: Option<&str>, expected: u16| -> Value {
        let (status, answer) = http(
            method,
            &format!("{}/api/v2{path}", server.base_url()),
            body,
            Some(("ci", "workspace-caller-token")),
        )
        .unwrap();
        assert_eq!(status, expected, "{method} {path}: {answer}");
        serde_json::from_str(&answer).unwrap_or(Value::Null)
    };
    let create = r#"{"data":{"type":"workspaces","attributes":{"name":"app"}}}"#;
    let id = api(
        "POST",
        "/organizations/default/workspaces",
        Some(create),
        201,
    )["data"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let state = serde_json::json!({
        "version": 4, "terraform_version": "1.15.5", "serial": 1, "lineage": "catalog-ws",
        "outputs": {}, "resources": [{
            "mode": "managed", "type": "null_resource", "name": "r",
            "provider": "provider[\"registry.terraform.io/hashicorp/null\"]",
            "instances": [{"schema_version": 0, "attributes": {"id": "1"}}]
        }]
    });
    use base64::Engine;
    let version = serde_json::json!({"data": {"type": "state-versions", "attributes": {
        "serial": 1,
        "state": base64::engine::general_purpose::STANDARD.encode(state.to_string()),
    }}});
    api(
        "POST",
        &format!("/workspaces/{id}/actions/lock"),
        Some("{}"),
        200,
    );
    eventually("the API's lock shows", || {
        let states = json(&moto, &["states"]);
        let s = state_entry(&states, "workspaces/app.tfstate").ok_or("no entry")?;
        (s["lock"]["who"] == "ci")
            .then_some(())
            .ok_or(format!("{s}"))
    });
    api(
        "POST",
        &format!("/workspaces/{id}/state-versions"),
        Some(&version.to_string()),
        201,
    );
    api(
        "POST",
        &format!("/workspaces/{id}/actions/unlock"),
        Some("{}"),
        200,
    );
    assert_eq!(serial_in_git(cwd.path(), "workspaces/app.tfstate"), 1);
    eventually("the state version and the unlock show", || {
        let states = json(&moto, &["states"]);
        let s = state_entry(&states, "workspaces/app.tfstate").ok_or("no entry")?;
        let trail = json(&moto, &["audit", "default", "workspaces/app.tfstate"]);
        let actions: Vec<&str> = trail
            .as_array()
            .ok_or("not a list")?
            .iter()
            .filter_map(|e| e["action"].as_str())
            .collect();
        (s["serial"] == 1
            && s["resource_count"] == 1
            && s["lock"].is_null()
            && actions == ["lock", "write", "unlock"])
        .then_some(())
        .ok_or(format!("{s} {actions:?}"))
    });
}
