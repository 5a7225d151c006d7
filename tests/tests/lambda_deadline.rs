//! The Lambda function derives a write's time from the invocation's real deadline (DESIGN §9.3):
//! when the git server is too slow for the time left, the write is answered 503 with
//! `Retry-After` before the function would be stopped, and nothing is written.
//!
//! The function is the real bootstrap (scripts/test.sh: `gitstate-lambda` in the dev
//! profile; scripts/check-shipped.sh: `scripts/build-lambda.sh x86_64`, as `sam build` makes it),
//! started as Lambda starts it: `AWS_LAMBDA_RUNTIME_API` names the Runtime API, served here
//! on loopback with the documented contract (`GET …/invocation/next` answers an event with
//! `Lambda-Runtime-Deadline-Ms`, `POST …/invocation/{id}/response` takes the answer). `cargo
//! lambda watch` cannot be used for this: its `--timeout` only bounds how long its own invoke
//! waits, and the function sees no short deadline from it.
//!
//! The git server is lighttpd + `git http-backend` behind a proxy that holds every request
//! 1 s; the invocation has 5 s, of which the function keeps 3 s for its answer. Reading the
//! state branch alone takes two requests, so the write's 2 s are gone before its push: 503.
//! Were the deadline ignored, the write would go on past the invocation's end (on Lambda: a
//! timeout, the client gets no sentence). The same write through a faster remote, with the same
//! 5 s, is written.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::routing::{get, post};
use axum::Router;
use base64::Engine;
use gitstate_tests::proxy::DelayProxy;
use gitstate_tests::*;

const USER: &str = "deadline-user";
const PASSWORD: &str = "deadline-pass-1";

/// The invocation's time, as the function's Timeout would give it.
const INVOCATION: Duration = Duration::from_secs(5);

/// The bootstrap: `$GITSTATE_LAMBDA_BIN` (scripts/test.sh and scripts/check-shipped.sh set it),
/// else cargo-lambda's output.
fn bootstrap() -> PathBuf {
    let path = match std::env::var_os("GITSTATE_LAMBDA_BIN") {
        Some(path) => PathBuf::from(path),
        None => {
            PathBuf::from(std::env::var_os("CARGO_TARGET_DIR").unwrap_or_else(|| "target".into()))
                .join("lambda/gitstate-lambda/bootstrap")
        }
    };
    assert!(
        path.is_file(),
        "no Lambda bootstrap at {} (build it with `scripts/build-lambda.sh x86_64`, or set \
         GITSTATE_LAMBDA_BIN as scripts/test.sh does)",
        path.display()
    );
    path
}

/// What the Runtime API saw: the event handed out, and the function's answer with its time.
#[derive(Default)]
struct Runtime {
    event: Option<(serde_json::Value, SystemTime)>,
    answer: Option<(serde_json::Value, Instant)>,
}

type Shared = Arc<Mutex<Runtime>>;

async fn next(State(runtime): State<Shared>) -> (StatusCode, HeaderMap, String) {
    let event = runtime.lock().unwrap().event.take();
    let Some((event, deadline)) = event else {
        // One invocation only: later polls wait (the function long-polls, as on Lambda).
        tokio::time::sleep(Duration::from_secs(60)).await;
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            HeaderMap::new(),
            String::new(),
        );
    };
    let mut headers = HeaderMap::new();
    let deadline_ms = deadline.duration_since(UNIX_EPOCH).unwrap().as_millis();
    for (name, value) in [
        (
            "lambda-runtime-aws-request-id",
            "deadline-request".to_owned(),
        ),
        ("lambda-runtime-deadline-ms", deadline_ms.to_string()),
        (
            "lambda-runtime-invoked-function-arn",
            "arn:aws:lambda:us-east-1:000000000000:function:gitstate".to_owned(),
        ),
    ] {
        headers.insert(name, HeaderValue::from_str(&value).unwrap());
    }
    (StatusCode::OK, headers, event.to_string())
}

async fn response(
    State(runtime): State<Shared>,
    UrlPath(_id): UrlPath<String>,
    body: axum::body::Bytes,
) -> StatusCode {
    let answer = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
    runtime.lock().unwrap().answer = Some((answer, Instant::now()));
    StatusCode::ACCEPTED
}

/// A Function URL event: `POST /state/default/{state}` with the caller's basic auth.
fn post_event(state: &str, body: &[u8]) -> serde_json::Value {
    let b64 = base64::engine::general_purpose::STANDARD;
    let path = format!("/state/default/{state}");
    let auth = format!("Basic {}", b64.encode(format!("{USER}:{PASSWORD}")));
    serde_json::json!({
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": "",
        "headers": {
            "host": "example.lambda-url.us-east-1.on.aws",
            "content-type": "application/json",
            "authorization": auth,
            "user-agent": "Terraform/1.15.5",
        },
        "requestContext": {
            "accountId": "anonymous", "apiId": "example",
            "domainName": "example.lambda-url.us-east-1.on.aws", "domainPrefix": "example",
            "requestId": "deadline-request", "routeKey": "$default", "stage": "$default",
            "time": "24/Nov/2026:00:00:00 +0000", "timeEpoch": 0,
            "http": {"method": "POST", "path": path, "protocol": "HTTP/1.1",
                     "sourceIp": "127.0.0.1", "userAgent": "Terraform/1.15.5"},
        },
        "body": b64.encode(body),
        "isBase64Encoded": true,
    })
}

/// Starts the function (the bootstrap, its own Runtime API), hands it one `POST` of `state` whose
/// invocation has `invocation` left, and returns its answer, when it came (from the start of the
/// invocation), and the function's log.
fn invoke(
    dir: &std::path::Path,
    remote: &str,
    state: &[u8],
    invocation: Duration,
) -> (serde_json::Value, Duration, String) {
    let runtime: Shared = Arc::default();
    let tokio = tokio::runtime::Runtime::new().expect("tokio");
    let listener = tokio
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind the Runtime API");
    let api = listener.local_addr().expect("address");
    let app = Router::new()
        .route("/2018-06-01/runtime/invocation/next", get(next))
        .route(
            "/2018-06-01/runtime/invocation/{id}/response",
            post(response),
        )
        .with_state(runtime.clone());
    tokio.spawn(async move { axum::serve(listener, app).await });

    let mut function = std::process::Command::new(bootstrap());
    function
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("AWS_LAMBDA_RUNTIME_API", api.to_string())
        .env("AWS_LAMBDA_FUNCTION_NAME", "gitstate")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "1")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "1024")
        .env("GITSTATE_REPOSITORY", format!("default={remote}"))
        .env("GITSTATE_AUTH_MODE", "passthrough")
        .env("GITSTATE_CACHE_DIR", dir.join("cache"))
        .env("RUST_LOG", "info");
    let log_path = dir.join(format!("function-{}.log", invocation.as_secs()));
    // The invocation starts now.
    let started = Instant::now();
    runtime.lock().unwrap().event = Some((
        post_event("app.tfstate", state),
        SystemTime::now() + invocation,
    ));
    let mut child = ChildGuard::spawn(function, &log_path, "the bootstrap");
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    loop {
        if let Some((answer, at)) = runtime.lock().unwrap().answer.take() {
            child.kill();
            return (answer, at.duration_since(started), log());
        }
        assert!(
            child.exited().is_none(),
            "the function exited before answering; its log:\n{}",
            log()
        );
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no answer in 60 s; its log:\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The body of a Function URL answer, decoded.
fn body_of(response: &serde_json::Value) -> String {
    let body = response["body"].as_str().unwrap_or_default();
    if response["isBase64Encoded"] == true {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(body)
            .expect("base64 body");
        String::from_utf8(bytes).expect("utf-8 body")
    } else {
        body.to_owned()
    }
}

#[test]
fn a_write_that_cannot_finish_before_the_invocation_deadline_is_a_503_and_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repos = dir.path().join("repos");
    std::fs::create_dir_all(&repos).expect("repos");
    let repo = bare_repo(&repos, "states");
    push_root_commit(&repo, "main", &[("README.md", b"states\n")], "Start");
    let before = git(Some(&repo), &["rev-parse", "main"]);
    let server = GitHttpServer::start(&repos, USER, PASSWORD);
    let proxy = DelayProxy::start(server.port(), Duration::from_secs(1));
    let slow_url = server.url_through("states", proxy.port());
    assert_ne!(
        slow_url,
        server.url("states"),
        "the URL goes through the proxy"
    );
    let state = br#"{"version":4,"terraform_version":"1.15.5","serial":1,"lineage":"deadline","outputs":{},"resources":[]}"#;

    let (response, took, log) = invoke(dir.path(), &slow_url, state, INVOCATION);
    assert_eq!(response["statusCode"], 503, "{response}\n{log}");
    assert!(
        took < INVOCATION,
        "answered after {took:?}, past the invocation's {INVOCATION:?}; its log:\n{log}"
    );
    let headers = &response["headers"];
    let retry_after = headers
        .get("retry-after")
        .and_then(|v| v.as_str())
        .unwrap_or_default();
    assert!(
        retry_after.parse::<u64>().is_ok_and(|s| s >= 1),
        "Retry-After: {response}"
    );
    let body = body_of(&response);
    assert!(
        body.contains("retry"),
        "the sentence says Terraform may retry: {body}"
    );
    assert!(
        !body.contains(PASSWORD) && !log.contains(PASSWORD),
        "no credential: {body}"
    );
    // Nothing was written: the branch did not move and no state file exists.
    assert_eq!(git(Some(&repo), &["rev-parse", "main"]), before);
    assert_eq!(git_show(&repo, "main", "app.tfstate"), None);

    // The same write with the same 5 s, through a remote five times faster: written. (The 503
    // above came from the deadline, not from the proxy.)
    let faster = DelayProxy::start(server.port(), Duration::from_millis(200));
    let faster_url = server.url_through("states", faster.port());
    let (response, took, log) = invoke(dir.path(), &faster_url, state, INVOCATION);
    assert_eq!(response["statusCode"], 200, "{response}\n{log}");
    assert!(took < INVOCATION, "{took:?}");
    assert_eq!(
        git_show(&repo, "main", "app.tfstate").as_deref(),
        Some(&state[..])
    );
}
