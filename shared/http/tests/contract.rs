//! The HTTP contract (DESIGN §2: methods, status codes, bodies, headers) over the in-memory fakes
//! of the ports: what a Terraform or OpenTofu client sees for each request, and what the
//! repository holds afterwards. The same walk runs end to end against real git servers and real
//! Terraform in `tests/`; here every rule is checked in milliseconds.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use base64::Engine;
use bytes::Bytes;
use gitstate_core::fakes::{MemoryRegistry, MemoryStore};
use gitstate_core::{Backend, RetryPolicy};
use gitstate_http::{router, AppState};
use md5::Digest;
use tower::ServiceExt;

const ADDRESS: &str = "/state/default/team/app.tfstate";

struct Answer {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: Bytes,
}

impl Answer {
    /// The `error` sentence of a JSON error body.
    fn sentence(&self) -> String {
        let json: serde_json::Value =
            serde_json::from_slice(&self.body).expect("an error body is JSON");
        json["error"]
            .as_str()
            .expect("an error body has an \"error\" sentence")
            .to_owned()
    }
}

async fn send(app: &Router, method: &str, uri: &str, body: impl Into<Bytes>) -> Answer {
    let body: Bytes = body.into();
    let mut request = Request::builder().method(method).uri(uri);
    if !body.is_empty() {
        request = request.header("content-type", "application/json");
    }
    let response = app
        .clone()
        .oneshot(request.body(Body::from(body)).expect("a request"))
        .await
        .expect("the router answers");
    let status = response.status();
    let headers = response.headers().clone();
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .expect("a body");
    Answer {
        status,
        headers,
        body,
    }
}

fn app_with(backend: Backend) -> (Router, Arc<MemoryStore>) {
    let registry = MemoryRegistry::with(&["default"]);
    let store = registry.store("default").expect("the default store");
    (router(AppState::new(registry, backend, None)), store)
}

fn state(serial: u64) -> String {
    format!(
        r#"{{"version":4,"terraform_version":"1.11.4","serial":{serial},"lineage":"l-1","outputs":{{}},"resources":[]}}"#
    )
}

fn lock_info(id: &str) -> String {
    format!(
        r#"{{"ID":"{id}","Operation":"OperationTypeApply","Info":"","Who":"{id}@host","Version":"1.11.4","Created":"2026-11-23T10:00:00Z","Path":""}}"#
    )
}

#[tokio::test]
async fn a_terraform_session_gets_the_answers_of_the_contract() {
    let (app, store) = app_with(Backend::default());
    let p = "team/app.tfstate";

    let answer = send(&app, "GET", ADDRESS, "").await;
    assert_eq!(answer.status, StatusCode::NO_CONTENT, "no state yet");
    assert!(answer.body.is_empty());

    assert_eq!(
        send(&app, "LOCK", ADDRESS, lock_info("one")).await.status,
        StatusCode::OK
    );
    assert_eq!(
        send(&app, "LOCK", ADDRESS, lock_info("one")).await.status,
        StatusCode::OK,
        "the same ID locking again (a retry) is 200"
    );
    let other = send(&app, "LOCK", ADDRESS, lock_info("two")).await;
    assert_eq!(other.status, StatusCode::LOCKED);
    assert_eq!(
        other.body,
        Bytes::from(lock_info("one")),
        "423 carries the holder's LockInfo exactly as stored"
    );

    for uri in [ADDRESS.to_owned(), format!("{ADDRESS}?ID=two")] {
        let refused = send(&app, "POST", &uri, state(1)).await;
        assert_eq!(refused.status, StatusCode::LOCKED, "{uri}");
        assert_eq!(refused.body, Bytes::from(lock_info("one")));
    }
    assert!(store.commits_of(p).is_empty());

    let with_id = format!("{ADDRESS}?ID=one");
    assert_eq!(
        send(&app, "POST", &with_id, state(1)).await.status,
        StatusCode::OK
    );
    assert_eq!(
        send(&app, "POST", &with_id, state(1)).await.status,
        StatusCode::OK,
        "a replayed POST is 200"
    );
    assert_eq!(store.commits_of(p).len(), 1, "and makes no second commit");

    let read = send(&app, "GET", ADDRESS, "").await;
    assert_eq!(read.status, StatusCode::OK);
    assert_eq!(read.body, Bytes::from(state(1)));
    let md5 = base64::engine::general_purpose::STANDARD.encode(md5::Md5::digest(&read.body));
    assert_eq!(
        read.headers
            .get("content-md5")
            .and_then(|v| v.to_str().ok()),
        Some(md5.as_str())
    );

    let wrong = send(&app, "UNLOCK", ADDRESS, lock_info("two")).await;
    assert_eq!(wrong.status, StatusCode::LOCKED);
    assert_eq!(wrong.body, Bytes::from(lock_info("one")));
    assert_eq!(
        send(&app, "UNLOCK", ADDRESS, lock_info("one")).await.status,
        StatusCode::OK
    );
    assert_eq!(store.lock_file(p), None);
    assert_eq!(
        send(&app, "UNLOCK", ADDRESS, lock_info("one")).await.status,
        StatusCode::OK,
        "unlocking what is not locked is 200"
    );

    assert_eq!(
        send(&app, "DELETE", ADDRESS, "").await.status,
        StatusCode::OK
    );
    assert_eq!(store.file(p), None);
    assert_eq!(
        send(&app, "GET", ADDRESS, "").await.status,
        StatusCode::NO_CONTENT
    );
}

#[tokio::test]
async fn force_unlock_and_the_lock_alias_for_gateways() {
    let (app, store) = app_with(Backend::default());
    let alias = "/lock/default/team/app.tfstate";
    assert_eq!(
        send(&app, "POST", alias, lock_info("one")).await.status,
        StatusCode::OK,
        "POST on /lock/ is LOCK"
    );
    assert!(store.lock_file("team/app.tfstate").is_some());
    assert_eq!(
        send(&app, "POST", alias, lock_info("two")).await.status,
        StatusCode::LOCKED
    );
    assert_eq!(
        send(&app, "UNLOCK", ADDRESS, "").await.status,
        StatusCode::OK,
        "terraform force-unlock: an empty body"
    );
    assert_eq!(store.lock_file("team/app.tfstate"), None);
    send(&app, "LOCK", ADDRESS, lock_info("one")).await;
    assert_eq!(
        send(&app, "DELETE", alias, r#"{"ID":"whatever"}"#)
            .await
            .status,
        StatusCode::OK,
        "OpenTofu force-unlock (only an ID), through DELETE on /lock/"
    );
    assert_eq!(store.lock_file("team/app.tfstate"), None);
}

#[tokio::test]
async fn bad_requests_get_honest_codes_and_one_sentence_and_write_nothing() {
    let (app, store) = app_with(Backend {
        max_state_bytes: 64,
        ..Backend::default()
    });
    let cases = [
        (
            "POST",
            ADDRESS.to_owned(),
            "not json".to_owned(),
            StatusCode::BAD_REQUEST,
        ),
        (
            "POST",
            ADDRESS.to_owned(),
            r#"{"a":1}"#.to_owned(),
            StatusCode::BAD_REQUEST,
        ),
        (
            "LOCK",
            ADDRESS.to_owned(),
            r#"{"Who":"x"}"#.to_owned(),
            StatusCode::BAD_REQUEST,
        ),
        (
            "POST",
            "/state/default/a/../b.tfstate".to_owned(),
            state(1),
            StatusCode::BAD_REQUEST,
        ),
        (
            "POST",
            "/state/nosuch/app.tfstate".to_owned(),
            state(1),
            StatusCode::NOT_FOUND,
        ),
        (
            "POST",
            ADDRESS.to_owned(),
            format!("{{\"version\":4,\"pad\":\"{}\"}}", "x".repeat(100)),
            StatusCode::PAYLOAD_TOO_LARGE,
        ),
    ];
    for (method, uri, body, status) in cases {
        let answer = send(&app, method, &uri, body).await;
        assert_eq!(answer.status, status, "{method} {uri}");
        let sentence = answer.sentence();
        assert!(
            !sentence.is_empty() && !sentence.contains('\n'),
            "{sentence:?}"
        );
    }
    assert!(store.commits().is_empty());
    assert_eq!(store.lock_file("team/app.tfstate"), None);
}

#[tokio::test]
async fn a_write_that_keeps_losing_is_a_503_with_retry_after_and_writes_nothing() {
    let (app, store) = app_with(Backend {
        retry: RetryPolicy {
            budget: Duration::from_millis(50),
            base_delay: Duration::from_micros(100),
            max_delay: Duration::from_millis(1),
            ..RetryPolicy::default()
        },
        ..Backend::default()
    });
    store.lose_next(u32::MAX);
    let answer = send(&app, "POST", ADDRESS, state(1)).await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(answer.headers.contains_key("retry-after"));
    assert!(
        answer.sentence().contains("nothing was written"),
        "{}",
        answer.sentence()
    );
    assert!(store.commits_of("team/app.tfstate").is_empty());
}

#[tokio::test]
async fn every_answered_change_reaches_the_catalog_in_order_and_its_outage_fails_nothing() {
    use gitstate_core::fakes::MemoryCatalog;
    use gitstate_core::CatalogChange;

    let registry = MemoryRegistry::with(&["default"]);
    let catalog = MemoryCatalog::new();
    let state_of_app = AppState::new(registry, Backend::default(), Some(catalog.clone()));
    let app = router(state_of_app.clone());

    send(&app, "LOCK", ADDRESS, lock_info("one")).await;
    send(&app, "POST", &format!("{ADDRESS}?ID=one"), state(1)).await;
    send(&app, "POST", &format!("{ADDRESS}?ID=one"), state(2)).await;
    send(&app, "UNLOCK", ADDRESS, lock_info("one")).await;
    send(&app, "LOCK", ADDRESS, lock_info("two")).await;
    send(&app, "UNLOCK", ADDRESS, "").await;
    state_of_app.flush_catalog(Duration::from_secs(5)).await;

    let seen: Vec<String> = catalog
        .events()
        .iter()
        .map(|e| match &e.change {
            CatalogChange::Write(f) => format!("write {:?} by {}", f.serial, e.who),
            CatalogChange::Delete { .. } => "delete".into(),
            CatalogChange::Lock(f) => format!("lock {}", f.id),
            CatalogChange::Unlock { force } => format!("unlock force={force}"),
        })
        .collect();
    assert_eq!(
        seen,
        [
            "lock one",
            "write Some(1) by one@host",
            "write Some(2) by one@host",
            "unlock force=false",
            "lock two",
            "unlock force=true",
        ]
    );
    assert!(catalog
        .events()
        .iter()
        .all(|e| e.repository == "default" && e.path == "team/app.tfstate"));

    catalog.set_outage(true);
    assert_eq!(
        send(&app, "POST", ADDRESS, state(3)).await.status,
        StatusCode::OK,
        "a catalog that cannot record never fails the request"
    );
    state_of_app.flush_catalog(Duration::from_secs(5)).await;
    catalog.set_outage(false);
    let read = send(&app, "GET", ADDRESS, "").await;
    assert_eq!(read.body, Bytes::from(state(3)));
}

#[tokio::test]
async fn the_state_guard_answers_409_and_force_true_overrides_it() {
    let (app, store) = app_with(Backend::default());
    let other_lineage = state(9).replace("l-1", "l-2");
    assert_eq!(
        send(&app, "POST", ADDRESS, state(5)).await.status,
        StatusCode::OK
    );
    for body in [state(4), other_lineage.clone()] {
        let refused = send(&app, "POST", ADDRESS, body).await;
        assert_eq!(refused.status, StatusCode::CONFLICT);
        assert!(
            refused.sentence().contains("?force=true"),
            "{}",
            refused.sentence()
        );
    }
    assert_eq!(store.commits_of("team/app.tfstate").len(), 1);
    let bad = send(&app, "POST", &format!("{ADDRESS}?force=yes"), state(4)).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST, "{}", bad.sentence());
    assert_eq!(
        send(
            &app,
            "POST",
            &format!("{ADDRESS}?force=true"),
            other_lineage.clone()
        )
        .await
        .status,
        StatusCode::OK
    );
    assert_eq!(
        store.file("team/app.tfstate"),
        Some(Bytes::from(other_lineage))
    );
}
