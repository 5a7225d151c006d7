//! Issue 55, goal 7: no internals in answers. Every 5xx the real `gitstate serve` can be made to
//! answer is swept: the git server down, answering garbage or too slow for the write's time; a
//! repository whose object is corrupt; stored states that are not JSON, sealed for a key this
//! deployment lacks, or tampered with; a key service and the catalog unreachable; `/_/ready` when
//! not ready; the nested lock ref on the embedded repository. Each answer must be
//! `{"error": one sentence, "request_id": its x-request-id}`, the sentence free of error chains,
//! type and library names, OS errors, the server's paths and the repository's URL, and the
//! server's log must hold a line with that request id and the detailed cause. 4xx answers whose
//! cause is a git server's or a library's words (a refused credential, a body that breaks off)
//! answer gitstate's sentence only.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::Duration;

use gitstate_tests::crypto::AgeKeyPair;
use gitstate_tests::proxy::DelayProxy;
use gitstate_tests::*;
use serde_json::{json, Value};

/// One request of the sweep and what its answer must be.
struct Probe<'a> {
    /// What is being tried (for failure messages).
    what: &'a str,
    method: &'a str,
    url: String,
    body: Option<String>,
    /// The statuses it may answer.
    statuses: &'a [u16],
    /// Text of this machine or deployment the sentence must not hold (paths, the repository's
    /// URL), besides the internals every sentence is checked for.
    hidden: Vec<String>,
    /// What the log line of this request must hold: the detailed cause.
    cause: &'a str,
}

/// Sends `probe` to `server` and checks its answer and the log; returns the sentence.
fn sweep(server: &Gitstate, probe: Probe) -> String {
    let Probe {
        what,
        method,
        url,
        body,
        statuses,
        hidden,
        cause,
    } = probe;
    let (status, headers, bytes) = request_with_headers(
        method,
        &url,
        body.as_deref(),
        &["x-request-id", "retry-after"],
    );
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let log = server.log();
    assert!(
        statuses.contains(&status),
        "{what}: {status} {text}, not one of {statuses:?}\n{log}"
    );
    let answer: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {text}"));
    let keys: Vec<&String> = answer.as_object().expect("an object").keys().collect();
    let sentence = answer["error"].as_str().expect("a sentence").to_owned();
    eprintln!("{what}: {status} {sentence}");
    if let Some(why) = not_one_sentence(&sentence) {
        panic!("{what}: not one sentence, {why}: {sentence:?}");
    }
    for needle in hidden
        .iter()
        .map(String::as_str)
        .chain(["gix", "os error", "::", "Caused by"])
    {
        assert!(
            !sentence.contains(needle),
            "{what}: {needle:?} in {sentence:?}"
        );
    }
    if status < 500 {
        // A LOCK's 409 also carries the sentence as `Info`: Terraform shows a LOCK's 409 body as
        // the holder's LockInfo (DESIGN §2).
        if keys.contains(&&"Info".to_owned()) {
            assert_eq!(answer["Info"], answer["error"], "{what}: {text}");
            assert_eq!(keys.len(), 2, "{what}: {text}");
        } else {
            assert_eq!(keys, ["error"], "{what}: {text}");
        }
        return sentence;
    }
    assert_eq!(keys, ["error", "request_id"], "{what}: {text}");
    let id = headers[0].clone().expect("an x-request-id header");
    assert_eq!(answer["request_id"], id.as_str(), "{what}: {text}");
    if status == 503 {
        assert!(headers[1].is_some(), "{what}: a 503 without Retry-After");
    }
    assert!(
        server.logged(
            &id,
            &format!("answered with an error status={status} error=")
        ),
        "{what}: no error line with the request id {id}\n{log}"
    );
    assert!(
        server.logged(&id, cause),
        "{what}: no log line with the request id {id} and {cause:?}\n{log}"
    );
    sentence
}

/// A server on `repository` (`default=…`) in `cwd`, with `args` and `env` besides.
fn serve(repository: &str, args: &[&str], env: &[(&str, &str)], cwd: &Path) -> Gitstate {
    let mut all = vec!["--repository", repository];
    all.extend_from_slice(args);
    Gitstate::start(&all, env, cwd)
}

/// A TCP port nothing listens on.
fn closed_port() -> u16 {
    free_port()
}

/// A "git server" that answers every request 200 with `body` as an upload-pack advertisement,
/// and closes; its port.
fn answering(body: &str) -> u16 {
    let answer = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/x-git-upload-pack-advertisement\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut stream = stream;
            let mut request = [0u8; 4096];
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = stream.read(&mut request);
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    port
}

fn state(serial: u64) -> String {
    json!({"version": 4, "serial": serial, "lineage": "l", "terraform_version": "1.9.0", "outputs": {}, "resources": []})
        .to_string()
}

#[test]
fn the_git_server_down_failing_or_slow_answers_a_sentence_and_a_request_id() {
    let cwd = tempfile::tempdir().expect("tempdir");

    // Nothing listens: 503 (and `/_/ready` is not ready).
    let port = closed_port();
    let url = format!("http://127.0.0.1:{port}/git/states.git");
    let server = serve(&format!("default={url}"), &[], &[], cwd.path());
    let hidden = vec![url.clone(), format!("127.0.0.1:{port}")];
    let sentence = sweep(
        &server,
        Probe {
            what: "GET with the git server down",
            method: "GET",
            url: server.state_url("default", "prod.tfstate"),
            body: None,
            statuses: &[503],
            hidden: hidden.clone(),
            cause: "Connection refused",
        },
    );
    assert!(
        sentence.contains("git server") && sentence.contains("retry"),
        "{sentence}"
    );
    let sentence = sweep(
        &server,
        Probe {
            what: "/_/ready with the git server down",
            method: "GET",
            url: format!("{}/_/ready", server.base_url()),
            body: None,
            statuses: &[503],
            hidden: hidden.clone(),
            cause: "repository default",
        },
    );
    assert!(
        sentence.starts_with("gitstate is not ready, because the repository default"),
        "{sentence}"
    );
    drop(server);

    // A server that answers what no git server would (a broken proxy, a web page): 502.
    let port = answering("zzzz fatal: /srv/git/states.git is corrupt\n");
    let url = format!("http://127.0.0.1:{port}/git/states.git");
    let server = serve(&format!("default={url}"), &[], &[], cwd.path());
    let sentence = sweep(
        &server,
        Probe {
            what: "GET from a server answering garbage",
            method: "GET",
            url: server.state_url("default", "prod.tfstate"),
            body: None,
            statuses: &[502],
            hidden: vec![
                url.clone(),
                "/srv/git".into(),
                "zzzz".into(),
                "corrupt".into(),
            ],
            cause: &format!("127.0.0.1:{port}"),
        },
    );
    assert!(sentence.contains("git server"), "{sentence}");
    assert!(sentence.contains("log under request id"), "{sentence}");
    drop(server);

    // A git server too far away for the write's time (1 s budget, 3 s per request): 503.
    let repos = tempfile::tempdir().expect("tempdir");
    bare_repo(repos.path(), "states");
    let daemon = GitDaemon::start(repos.path());
    let proxy = DelayProxy::start(daemon.port(), Duration::from_secs(3));
    let url = format!("git://127.0.0.1:{}/states.git", proxy.port());
    let server = serve(
        &format!("default={url}"),
        &["--write-budget-seconds", "1"],
        &[],
        cwd.path(),
    );
    let sentence = sweep(
        &server,
        Probe {
            what: "POST past the write's time",
            method: "POST",
            url: server.state_url("default", "prod.tfstate"),
            body: Some(state(1)),
            statuses: &[503],
            hidden: vec![url],
            cause: "nothing was written",
        },
    );
    assert!(sentence.contains("nothing was written"), "{sentence}");
}

#[test]
fn a_repository_gitstate_cannot_read_answers_a_sentence_and_a_request_id() {
    let cwd = tempfile::tempdir().expect("tempdir");
    let data = cwd.path().join(".gitstate");
    let server = Gitstate::start(&[], &[], cwd.path());
    let url = server.state_url("default", "prod.tfstate");
    let (status, text) = http("POST", &url, Some(&state(1)), None).expect("POST");
    assert_eq!(status, 200, "{text}");

    // A nested lock ref: `prod/net` while `prod` is locked (409 once refused as such, never
    // gix's chain).
    let prod = server.state_url("default", "prod");
    let (status, text) = http(
        "LOCK",
        &prod,
        Some(&lock_info("a", "me", "OperationTypeApply")),
        None,
    )
    .expect("LOCK");
    assert_eq!(status, 200, "{text}");
    sweep(
        &server,
        Probe {
            what: "LOCK prod/net while prod is locked",
            method: "LOCK",
            url: server.state_url("default", "prod/net"),
            body: Some(lock_info("b", "me", "OperationTypeApply")),
            statuses: &[409, 500, 503],
            hidden: vec![
                data.display().to_string(),
                ".gitstate".into(),
                "NotADirectory".into(),
                "File exists".into(),
            ],
            cause: "prod/net",
        },
    );
    drop(server);

    // The stored state's object is corrupt on disk: 500, the bytes never served.
    let git_dir = data.join("default.git");
    let blob = git(Some(&git_dir), &["rev-parse", "main:prod.tfstate"]);
    let blob = blob.trim();
    let object = git_dir.join("objects").join(&blob[..2]).join(&blob[2..]);
    assert!(
        object.is_file(),
        "{} is not a loose object",
        object.display()
    );
    std::fs::write(&object, b"this is no zlib stream").expect("corrupt the object");
    let server = Gitstate::start(&[], &[], cwd.path());
    let sentence = sweep(
        &server,
        Probe {
            what: "GET of a corrupt object",
            method: "GET",
            url: server.state_url("default", "prod.tfstate"),
            body: None,
            statuses: &[500],
            hidden: vec![
                data.display().to_string(),
                ".gitstate".into(),
                blob.to_owned(),
                "zlib".into(),
            ],
            cause: "Could not read loose object",
        },
    );
    assert!(
        sentence.contains("operator") && sentence.contains("request id"),
        "{sentence}"
    );
}

#[test]
fn a_stored_state_this_deployment_cannot_open_answers_a_sentence_and_a_request_id() {
    let dir = tempfile::tempdir().expect("tempdir");
    let own = AgeKeyPair::generate();
    let stranger = AgeKeyPair::generate();
    let key_file = own.write_key_file(dir.path(), "own");
    let seal = |recipient: &str, state: &Value| {
        use gitstate_sops::{AgeKey, EncryptOptions, MasterKey};
        let recipient = AgeKey::recipient(recipient).expect("a recipient");
        gitstate_sops::encrypt(
            state.to_string().as_bytes(),
            &[&recipient as &dyn MasterKey],
            &EncryptOptions::default(),
        )
        .expect("sealed")
    };
    let theirs = seal(
        &stranger.recipient,
        &serde_json::from_str(&state(1)).unwrap(),
    );
    let mut tampered: Value = serde_json::from_slice(&seal(
        &own.recipient,
        &serde_json::from_str(&state(1)).unwrap(),
    ))
    .unwrap();
    tampered["lineage"] = tampered["terraform_version"].clone();
    let tampered = serde_json::to_vec(&tampered).unwrap();
    let repository = bare_repo(dir.path(), "states");
    push_root_commit(
        &repository,
        "main",
        &[
            ("binary.tfstate", &[0x9c, 0x01, 0xfe, 0x7b, 0x00, 0x42][..]),
            ("theirs.tfstate", &theirs),
            ("tampered.tfstate", &tampered),
        ],
        "states gitstate did not write",
    );
    let server = serve(
        &format!("default={}", repository.display()),
        &[],
        &[
            ("SOPS_AGE_RECIPIENTS", &own.recipient),
            ("SOPS_AGE_KEY_FILE", key_file.to_str().unwrap()),
        ],
        dir.path(),
    );
    let hidden = || vec![dir.path().display().to_string(), own.identity.clone()];
    let probe = |what, path: &str, cause| Probe {
        what,
        method: "GET",
        url: server.state_url("default", path),
        body: None,
        statuses: &[500],
        hidden: hidden(),
        cause,
    };
    let sentence = sweep(&server, probe("not JSON", "binary.tfstate", "not JSON"));
    assert!(
        sentence.contains("TF_BACKEND_HTTP_ENCRYPTION_PASSPHRASE"),
        "the setting it needs: {sentence}"
    );
    let sentence = sweep(
        &server,
        probe(
            "sealed for another key",
            "theirs.tfstate",
            &stranger.recipient,
        ),
    );
    assert!(
        sentence.contains(&stranger.recipient) && sentence.contains(&own.recipient),
        "the keys it needs and has: {sentence}"
    );
    let sentence = sweep(
        &server,
        probe(
            "tampered with",
            "tampered.tfstate",
            "could not decrypt the value",
        ),
    );
    assert!(sentence.contains("integrity check"), "{sentence}");
}

#[test]
fn a_key_service_or_the_catalog_unreachable_answers_a_sentence_and_a_request_id() {
    let cwd = tempfile::tempdir().expect("tempdir");
    let aws = format!("http://127.0.0.1:{}", closed_port());
    let arn = "arn:aws:kms:us-east-1:111122223333:key/00000000-0000-0000-0000-000000000000";
    let env = [
        ("AWS_ENDPOINT_URL", aws.as_str()),
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
        ("SOPS_KMS_ARN", arn),
    ];
    let server = Gitstate::start(&["--catalog-table", "gitstate-catalog"], &env, cwd.path());
    let hidden = vec![aws.clone(), cwd.path().display().to_string()];
    let sentence = sweep(
        &server,
        Probe {
            what: "POST with KMS unreachable",
            method: "POST",
            url: server.state_url("default", "prod.tfstate"),
            body: Some(state(1)),
            statuses: &[503],
            hidden: hidden.clone(),
            cause: "could not reach KMS",
        },
    );
    assert!(
        sentence.contains(arn) && sentence.contains("retry"),
        "{sentence}"
    );
    let sentence = sweep(
        &server,
        Probe {
            what: "the catalog unreachable",
            method: "GET",
            url: format!("{}/_/catalog/find?identifier=i-0123", server.base_url()),
            body: None,
            statuses: &[503],
            hidden,
            cause: "the catalog failed",
        },
    );
    assert!(sentence.contains("catalog"), "{sentence}");
}

#[test]
fn a_4xx_whose_cause_is_not_gitstates_answers_gitstates_sentence_only() {
    let repos = tempfile::tempdir().expect("tempdir");
    bare_repo(repos.path(), "states");
    let git_server = GitHttpServer::start(repos.path(), "deploy", "right-password");
    let url = git_server.url("states");
    let cwd = tempfile::tempdir().expect("tempdir");
    let server = serve(
        &format!("default={url}"),
        &[],
        &[
            ("GIT_USERNAME", "deploy"),
            ("GIT_PASSWORD", "wrong-password"),
        ],
        cwd.path(),
    );
    let sentence = sweep(
        &server,
        Probe {
            what: "the git server refusing the credential",
            method: "GET",
            url: server.state_url("default", "prod.tfstate"),
            body: None,
            statuses: &[401],
            hidden: vec![url.clone(), "wrong-password".into()],
            cause: "",
        },
    );
    assert!(sentence.contains("credentials"), "{sentence}");

    // A chunked body that breaks off in a malformed chunk: 400, hyper's words in the log only.
    let mut stream = TcpStream::connect(("127.0.0.1", server.port())).expect("connect");
    stream
        .write_all(
            b"LOCK /state/default/prod.tfstate HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nzz-not-a-size\r\n\r\n",
        )
        .expect("send");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    let json: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {answer}"));
    let sentence = json["error"].as_str().expect("a sentence");
    assert_eq!(not_one_sentence(sentence), None, "{sentence}");
    assert!(
        sentence.contains("could not be read to its end"),
        "{sentence}"
    );
    assert!(
        server.log().contains("reading the request body failed"),
        "{}",
        server.log()
    );
}
