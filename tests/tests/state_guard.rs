//! The state guard with real Terraform (issue 18, "State safety"): `terraform state push -force`
//! of an older copy is refused by gitstate (409) and leaves the stored state as it was; the same
//! push through an address with `?force=true` goes through. Needs `scripts/install-test-deps.sh`
//! and a built `gitstate` binary (see gitstate_tests docs).

use gitstate_tests::*;

fn serial_of(json: &str) -> u64 {
    serde_json::from_str::<serde_json::Value>(json)
        .expect("a state")
        .get("serial")
        .and_then(serde_json::Value::as_u64)
        .expect("a serial")
}

#[test]
fn an_older_copy_is_refused_and_force_true_lets_it_through() {
    let server_dir = tempfile::tempdir().expect("tempdir");
    let gitstate = Gitstate::start(&[], &[], server_dir.path());
    let url = gitstate.state_url("default", "guard.tfstate");
    let tf = Terraform::installed("1.15.5");

    let work = tempfile::tempdir().expect("tempdir");
    write_main_tf(work.path(), &HttpBackend::new(&url), 1, "g1");
    tf.init(work.path()).expect_code(0, "init");
    tf.apply(work.path()).expect_code(0, "first apply");
    let old = tf.run(work.path(), &["state", "pull"]);
    old.expect_code(0, "state pull");
    std::fs::write(work.path().join("old.tfstate"), &old.stdout).expect("write the old copy");
    write_main_tf(work.path(), &HttpBackend::new(&url), 2, "g2");
    tf.apply(work.path()).expect_code(0, "second apply");
    let (status, current) = http("GET", &url, None, None).expect("get");
    assert_eq!(status, 200);
    let newest = serial_of(&current);
    assert!(newest > serial_of(&old.stdout));

    // Terraform's own check is skipped with -force; gitstate's is not.
    let refused = tf.run(work.path(), &["state", "push", "-force", "old.tfstate"]);
    assert_ne!(refused.code, Some(0), "{}", refused.stderr);
    assert!(
        refused.stderr.contains("409") || refused.stderr.contains("older serial"),
        "Terraform should show the refusal: {}",
        refused.stderr
    );
    let (_, after) = http("GET", &url, None, None).expect("get");
    assert_eq!(
        serial_of(&after),
        newest,
        "the refused push changed the state"
    );

    // A working directory whose backend address forces: the push goes through.
    let forcing = tempfile::tempdir().expect("tempdir");
    write_main_tf(
        forcing.path(),
        &HttpBackend::new(&format!("{url}?force=true")),
        1,
        "g1",
    );
    std::fs::copy(
        work.path().join("old.tfstate"),
        forcing.path().join("old.tfstate"),
    )
    .expect("copy the old state");
    tf.init(forcing.path())
        .expect_code(0, "init with ?force=true");
    tf.run(forcing.path(), &["state", "push", "-force", "old.tfstate"])
        .expect_code(0, "state push -force through ?force=true");
    // Terraform keeps the serial moving (it may renumber what it pushes); what it pushed is the
    // old copy's content.
    let (_, forced) = http("GET", &url, None, None).expect("get");
    assert_eq!(resources_of(&forced), resources_of(&old.stdout));
    assert_ne!(resources_of(&forced), resources_of(&current));
}

fn resources_of(json: &str) -> serde_json::Value {
    serde_json::from_str::<serde_json::Value>(json).expect("a state")["resources"].clone()
}
