//! The web page at `/_/ui` in a real browser: Debian's Chromium, headless, loads it after real
//! Terraform applies, takes a screenshot (kept at `$CARGO_TARGET_DIR/ui-screenshots/`), and the
//! rendered DOM shows the states with their serial, last writer and lock holder; a state's page
//! shows its versions and which resources changed, and never a resource's values.

use gitstate_tests::browser::{browse, screenshot, text_of};
use gitstate_tests::*;

/// A generation value that ends up in the resources' `triggers`: the page must never show it.
const SECRET_GENERATION: &str = "trigger-value-5ecret";

#[test]
fn the_web_page_in_a_real_browser_shows_states_and_the_lock_holder() {
    let cwd = tempfile::tempdir().unwrap();
    let server = Gitstate::start(&[], &[], cwd.path());
    let tf = Terraform::installed("1.15.5");
    let mut works = Vec::new();
    for (path, count) in [("envs/prod.tfstate", 2), ("envs/staging.tfstate", 3)] {
        let work = tempfile::tempdir().unwrap();
        let backend = HttpBackend::new(&server.state_url("default", path));
        write_main_tf(work.path(), &backend, count, "g1");
        tf.init(work.path()).expect_code(0, "init");
        tf.apply(work.path()).expect_code(0, "apply");
        works.push((work, backend, count));
    }
    // prod again: one resource more, and new trigger values
    let (prod, backend, _) = &works[0];
    write_main_tf(prod.path(), backend, 3, SECRET_GENERATION);
    tf.apply(prod.path()).expect_code(0, "second apply");
    // someone holds staging's lock
    let holder = lock_info("ui-lock-42", "carol@ci-runner", "OperationTypeApply");
    let staging = server.state_url("default", "envs/staging.tfstate");
    assert_eq!(http("LOCK", &staging, Some(&holder), None).unwrap().0, 200);
    // A workspace's state (DESIGN §10.2) is named by its workspace too.
    let workspace = server.state_url("default", "workspaces/app-prod.tfstate");
    let body = small_state("workspaces/app-prod.tfstate");
    assert_eq!(http("POST", &workspace, Some(&body), None).unwrap().0, 200);

    let index = format!("{}/_/ui", server.base_url());
    let shot = screenshot(&index, "index.png");
    eprintln!("screenshot of /_/ui: {}", shot.display());
    let text = text_of(&browse(&index, "--dump-dom"));
    let who = terraform_who();
    for expected in [
        "envs/prod.tfstate",
        "envs/staging.tfstate",
        "locked by carol@ci-runner",
        "ui-lock-42",
        who.as_str(),
    ] {
        assert!(
            text.contains(expected),
            "{expected:?} not on the page: {text}"
        );
    }
    // Each row shows the serial git holds.
    for path in ["envs/prod.tfstate", "envs/staging.tfstate"] {
        let bytes = git_show(&cwd.path().join(".gitstate/default.git"), "main", path).unwrap();
        let serial = serde_json::from_slice::<serde_json::Value>(&bytes).unwrap()["serial"]
            .as_u64()
            .unwrap();
        let row = text.split(path).nth(1).unwrap_or_default();
        let after_workspace = row.trim_start().strip_prefix('-').unwrap_or_default();
        assert!(
            after_workspace
                .trim_start()
                .starts_with(&serial.to_string()),
            "{path}: no workspace, then serial {serial} expected first in its row: {row}"
        );
    }
    let row = text
        .split("workspaces/app-prod.tfstate")
        .nth(1)
        .unwrap_or_default();
    assert!(
        row.trim_start().starts_with("app-prod"),
        "the workspace's name first in its row: {row}"
    );
    assert_eq!(
        text.matches("locked by").count(),
        1,
        "only staging is locked: {text}"
    );

    // The state's page: versions, and what changed from the first to the second apply.
    let page = format!("{}/_/ui/default/envs/prod.tfstate", server.base_url());
    screenshot(&page, "state.png");
    let dom = browse(&page, "--dump-dom");
    let text = text_of(&dom);
    assert!(text.contains("Changes from serial"), "{text}");
    assert!(text.contains("null_resource.r2 added"), "{text}");
    assert!(text.contains("null_resource.r0 changed"), "{text}");
    assert!(
        !dom.contains(SECRET_GENERATION),
        "a resource value is on the page: {text}"
    );
    let versions = git_log_subjects(
        &cwd.path().join(".gitstate/default.git"),
        "main",
        "envs/prod.tfstate",
    );
    assert_eq!(
        text.matches("with the previous").count(),
        versions.len() - 1,
        "{text}"
    );
}

/// A state body gitstate accepts for `path` (its own lineage, serial 1, no resources).
fn small_state(path: &str) -> String {
    serde_json::json!({
        "version": 4,
        "terraform_version": "1.15.5",
        "serial": 1,
        "lineage": format!("lineage-{path}"),
        "outputs": {},
        "resources": []
    })
    .to_string()
}

/// `GET url`: status, `X-Total-Count`, the `rel="next"` target of `Link`, and the body.
fn listing_page(url: &str) -> (u16, Option<usize>, Option<String>, serde_json::Value) {
    let (status, headers, body) = get_with_headers(url, &["x-total-count", "link"]);
    let total = headers[0].as_ref().map(|t| t.parse().unwrap());
    let next = headers[1].as_ref().map(|link| {
        assert!(link.ends_with("; rel=\"next\""), "{link}");
        link.trim_start_matches('<')
            .split('>')
            .next()
            .unwrap()
            .to_owned()
    });
    (
        status,
        total,
        next,
        serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
    )
}

/// The paths of a `/_/states` page.
fn paths_of(rows: &serde_json::Value) -> Vec<String> {
    rows.as_array()
        .unwrap()
        .iter()
        .map(|r| r["path"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_states_come_page_by_page_with_their_count_in_the_api_and_the_web_page() {
    let cwd = tempfile::tempdir().unwrap();
    let server = Gitstate::start(&[], &[], cwd.path());
    let mut all: Vec<String> = (0..3)
        .map(|i| format!("apps/a{i}.tfstate"))
        .chain((0..4).map(|i| format!("envs/e{i}.tfstate")))
        .collect();
    for path in &all {
        let url = server.state_url("default", path);
        let (status, body) = http("POST", &url, Some(&small_state(path)), None).unwrap();
        assert_eq!(status, 200, "{path}: {body}");
    }
    all.sort();
    let base = server.base_url();

    // The API: three at a time, each page counting all seven, the Link header leading on.
    let mut url = format!("{base}/_/states/default?limit=3");
    let mut listed = Vec::new();
    let mut pages = 0;
    loop {
        let (status, total, next, rows) = listing_page(&url);
        assert_eq!(status, 200, "{url}");
        assert_eq!(total, Some(7), "{url}");
        assert!(rows.as_array().unwrap().len() <= 3);
        listed.extend(paths_of(&rows));
        pages += 1;
        match next {
            Some(next) => url = format!("{base}{next}"),
            None => break,
        }
    }
    assert_eq!(
        listed, all,
        "the pages, one after another, list every state once"
    );
    assert_eq!(pages, 3);
    // A prefix: that folder's states and their count.
    let (status, total, next, rows) =
        listing_page(&format!("{base}/_/states/default?prefix=apps/"));
    assert_eq!((status, total, next), (200, Some(3), None));
    assert_eq!(paths_of(&rows), all[..3]);
    // A bad limit is a 400 that says why.
    let (status, body) = http(
        "GET",
        &format!("{base}/_/states/default?limit=0"),
        None,
        None,
    )
    .unwrap();
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("limit must be a number from 1 to"), "{body}");

    // The web page: the count, the first page, and a link to the next one.
    let first = format!("{base}/_/ui?repo=default&limit=3");
    screenshot(&first, "index-paged.png");
    let dom = browse(&first, "--dump-dom");
    let text = text_of(&dom);
    assert!(text.contains("7 states"), "{text}");
    for path in &all[..3] {
        assert!(
            text.contains(path.as_str()),
            "{path} not on the first page: {text}"
        );
    }
    assert!(!text.contains(all[3].as_str()), "{text}");
    let next = dom
        .split("\">Next page")
        .next()
        .and_then(|before| before.rsplit("href=\"").next())
        .expect("a link to the next page")
        .replace("&amp;", "&");
    let text = text_of(&browse(&format!("{base}{next}"), "--dump-dom"));
    for path in &all[3..6] {
        assert!(
            text.contains(path.as_str()),
            "{path} not on the second page: {text}"
        );
    }
    assert!(!text.contains(all[0].as_str()), "{text}");
    assert!(text.contains("First page"), "{text}");
    // Filtered by folder: its count.
    let text = text_of(&browse(
        &format!("{base}/_/ui?repo=default&prefix=envs/"),
        "--dump-dom",
    ));
    assert!(text.contains("4 states under envs/"), "{text}");
}
