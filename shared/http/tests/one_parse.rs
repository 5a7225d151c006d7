//! A POST parses its body once (issue 49): the check, the state guard, the seal, the push and
//! the catalog's facts all take what that one pass read. The count is the process's count of
//! state bodies parsed (`gitstate_statefile::parses`), so this binary holds this one
//! test and nothing else parses while it runs.

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use gitstate_core::fakes::{MemoryCatalog, MemoryRegistry, MemorySealer};
use gitstate_core::{Backend, CatalogChange};
use gitstate_http::{router, AppState};
use gitstate_statefile::parses;
use tower::ServiceExt;

const ADDRESS: &str = "/state/default/team/app.tfstate";

async fn post(app: &Router, body: String) -> StatusCode {
    let request = Request::builder()
        .method("POST")
        .uri(ADDRESS)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .expect("a request");
    let response = app.clone().oneshot(request).await.expect("an answer");
    response.status()
}

/// A state with a managed instance (an identifier), a string another state may hold (a use),
/// and a remote state it reads.
fn state(serial: u64) -> String {
    format!(
        r#"{{"version":4,"terraform_version":"1.15.5","serial":{serial},"lineage":"l-1","outputs":{{"o":{{"value":"vpc-9","type":"string"}}}},
        "resources":[{{"mode":"managed","type":"aws_instance","name":"web","provider":"provider[\"registry.terraform.io/hashicorp/aws\"]",
          "instances":[{{"schema_version":1,"attributes":{{"id":"i-{serial}","subnet_id":"subnet-1"}}}}]}},
          {{"mode":"data","type":"terraform_remote_state","name":"net","provider":"provider[\"terraform.io/builtin/terraform\"]",
          "instances":[{{"schema_version":0,"attributes":{{"backend":"http","config":{{"value":{{"address":"https://h/state/default/net.tfstate"}},"type":["object",{{"address":"string"}}]}}}}}}]}}]}}"#
    )
}

#[tokio::test]
async fn a_post_parses_its_body_once_and_the_catalog_gets_that_reading() {
    let catalog = MemoryCatalog::new();
    let backend = Backend {
        sealer: Some(MemorySealer::new()),
        ..Backend::default()
    };
    let app_state = AppState::new(
        MemoryRegistry::with(&["default"]),
        backend,
        Some(catalog.clone()),
    );
    let app = router(app_state.clone());

    // Each POST answered 200 and recorded; how many bodies it parsed.
    let parsed_by = |body: String| {
        let (app, app_state) = (app.clone(), app_state.clone());
        async move {
            let before = parses();
            assert_eq!(post(&app, body).await, StatusCode::OK);
            app_state.flush_catalog(Duration::from_secs(5)).await;
            parses() - before
        }
    };
    assert_eq!(
        parsed_by(state(1)).await,
        1,
        "the first write (nothing stored) parses its body once: checked, sealed, recorded"
    );
    assert_eq!(
        parsed_by(state(2)).await,
        2,
        "a write over a state parses its body once, and the stored state once (the guard)"
    );
    assert_eq!(
        parsed_by(state(2)).await,
        2,
        "a client's retry (the same bytes) is a replay decided on that one reading too"
    );

    let events = catalog.events();
    let Some(CatalogChange::Write(facts)) = events.iter().rev().nth(1).map(|e| &e.change) else {
        panic!("the catalog got the write: {events:?}");
    };
    assert_eq!(facts.serial, Some(2));
    assert_eq!(facts.resource_count, Some(2));
    let identifiers: Vec<(&str, &str)> = facts
        .identifiers
        .iter()
        .map(|i| (i.value.as_str(), i.address.as_str()))
        .collect();
    assert_eq!(identifiers, [("i-2", "aws_instance.web")]);
    let uses: Vec<(&str, &str, &str)> = facts
        .uses
        .iter()
        .map(|u| (u.value.as_str(), u.address.as_str(), u.attribute.as_str()))
        .collect();
    assert!(
        uses.contains(&("subnet-1", "aws_instance.web", "subnet_id")),
        "{uses:?}"
    );
    assert!(uses.contains(&("vpc-9", "output.o", "")), "{uses:?}");
    assert!(
        !uses.iter().any(|u| u.0 == "i-2"),
        "a managed instance's own id is not a use"
    );
    let reads: Vec<&str> = facts.reads.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(reads, ["net.tfstate"]);
    assert!(facts.commit.is_some());
}
