//! Hostile input, table-driven, through the real server on a smart-HTTP remote (lighttpd + git
//! http-backend with basic auth). Every case is sent byte for byte over a raw TCP connection (an
//! HTTP client library would normalise paths or refuse to send the bytes), and must get the
//! documented 4xx with a one-sentence JSON error, leave `git ls-remote` of the remote exactly as it
//! was, and leave the server answering.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use gitstate_tests::*;

const USER: &str = "hostile-bot";
const PASSWORD: &str = "hostile-secret";
const MAX: usize = 65_536;
const STATE: &str = r#"{"version":4,"terraform_version":"1.15.5","serial":1,"lineage":"hostile","outputs":{},"resources":[]}"#;

/// One request as raw bytes: method, target, extra header lines, body.
struct Case {
    name: String,
    method: &'static str,
    target: String,
    headers: Vec<String>,
    body: Vec<u8>,
    status: u16,
    /// A fragment the error sentence must contain (empty: any JSON error).
    says: &'static str,
}

fn case(
    name: &str,
    method: &'static str,
    target: &str,
    body: &[u8],
    status: u16,
    says: &'static str,
) -> Case {
    Case {
        name: name.to_owned(),
        method,
        target: target.to_owned(),
        headers: Vec::new(),
        body: body.to_vec(),
        status,
        says,
    }
}

/// Sends `case` over a fresh connection; returns (status, body). The status is 0 when the server
/// closed the connection without an answer.
fn send(port: u16, c: &Case) -> (u16, Vec<u8>) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut request = format!(
        "{} {} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n",
        c.method, c.target
    )
    .into_bytes();
    for h in &c.headers {
        request.extend_from_slice(h.as_bytes());
        request.extend_from_slice(b"\r\n");
    }
    if !c
        .headers
        .iter()
        .any(|h| h.to_ascii_lowercase().starts_with("transfer-encoding"))
    {
        request.extend_from_slice(format!("Content-Length: {}\r\n", c.body.len()).as_bytes());
    }
    request.extend_from_slice(b"\r\n");
    request.extend_from_slice(&c.body);
    // The server may answer (and close) before reading a large body: ignore write errors.
    let _ = stream.write_all(&request);
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let text = String::from_utf8_lossy(&response);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let (head, body) = match text.split_once("\r\n\r\n") {
        Some((h, b)) => (h.to_ascii_lowercase(), b.as_bytes().to_vec()),
        None => (String::new(), Vec::new()),
    };
    let body = if head.contains("transfer-encoding: chunked") {
        dechunk(&body)
    } else {
        body
    };
    (status, body)
}

fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(line_end) = body.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&body[..line_end]).trim(), 16)
            .unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = line_end + 2;
        out.extend_from_slice(&body[start..(start + size).min(body.len())]);
        body = &body[(start + size + 2).min(body.len())..];
    }
    out
}

fn deep_json(depth: usize) -> Vec<u8> {
    let mut s = String::from(r#"{"version":4,"x":"#);
    s.push_str(&"[".repeat(depth));
    s.push_str(&"]".repeat(depth));
    s.push('}');
    s.into_bytes()
}

fn lock(id: &str) -> String {
    lock_info(id, "mallory@example", "OperationTypeApply")
}

#[test]
fn hostile_input_gets_a_4xx_and_changes_nothing() {
    let repos = tempfile::tempdir().unwrap();
    let repo = bare_repo(repos.path(), "states");
    let git_server = GitHttpServer::start(repos.path(), USER, PASSWORD);
    let spec = format!("default={}", git_server.url("states"));
    // The query-style address may name this git server, with the server's git credential (a
    // pattern naming the host literally); loopback stays refused for every other URL.
    let allow_git_server = format!("http://127.0.0.1:{}/git/*", git_server.port());
    let cwd = tempfile::tempdir().unwrap();
    let server = Gitstate::start(
        &[
            "--repository",
            &spec,
            "--max-state-bytes",
            &MAX.to_string(),
            "--allow",
            "*",
            "--allow-with-credential",
            &allow_git_server,
        ],
        &[("GIT_USERNAME", USER), ("GIT_PASSWORD", PASSWORD)],
        cwd.path(),
    );
    let port = server.port();
    let p = "/state/default/hostile.tfstate";
    // A state and a lock held by "holder", so the lock rules have something to defend.
    let (status, body) = http(
        "POST",
        &server.state_url("default", "hostile.tfstate"),
        Some(STATE),
        None,
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    let (status, body) = http(
        "LOCK",
        &server.state_url("default", "hostile.tfstate"),
        Some(&lock("holder")),
        None,
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    let remote = git_server.url_with_credentials("states");
    let before = ls_remote(&remote);
    assert_eq!(before.len(), 3, "HEAD, main and the lock: {before:?}");

    let big_header = format!("X-Filler: {}", "a".repeat(1 << 20));
    let many_headers: Vec<String> = (0..200).map(|i| format!("X-H{i}: v")).collect();
    let mut cases = vec![
        // --- bodies that are not a state
        case("empty body", "POST", p, b"", 400, "not a JSON object"),
        case("null", "POST", p, b"null", 400, "not a JSON object"),
        case("number", "POST", p, b"42", 400, "not a JSON object"),
        case("string", "POST", p, b"\"state\"", 400, "not a JSON object"),
        case("array", "POST", p, b"[]", 400, "not a JSON object"),
        case(
            "empty object",
            "POST",
            p,
            b"{}",
            400,
            "not a Terraform state",
        ),
        case(
            "version as string",
            "POST",
            p,
            br#"{"version":"4"}"#,
            400,
            "not a Terraform state",
        ),
        case(
            "truncated",
            "POST",
            p,
            br#"{"version":4,"serial""#,
            400,
            "not valid JSON",
        ),
        case(
            "nested 10,000 deep",
            "POST",
            p,
            &deep_json(10_000),
            400,
            "not valid JSON",
        ),
        case(
            "invalid UTF-8",
            "POST",
            p,
            b"{\"version\":4,\"x\":\"\xff\xfe\"}",
            400,
            "not valid JSON",
        ),
        case(
            "trailing garbage",
            "POST",
            p,
            br#"{"version":4} trailing"#,
            400,
            "not valid JSON",
        ),
        case(
            "two documents",
            "POST",
            p,
            br#"{"version":4}{"version":4}"#,
            400,
            "not valid JSON",
        ),
        case(
            "byte order mark",
            "POST",
            p,
            b"\xEF\xBB\xBF{\"version\":4}",
            400,
            "not a JSON object",
        ),
        case(
            "number out of range",
            "POST",
            p,
            br#"{"version":4,"serial":1e999}"#,
            400,
            "not valid JSON",
        ),
        case(
            "over the maximum",
            "POST",
            p,
            format!(r#"{{"version":4,"pad":"{}"}}"#, "x".repeat(MAX)).as_bytes(),
            413,
            "maximum",
        ),
        // --- the lock is held by "holder"
        case(
            "POST without the lock ID",
            "POST",
            p,
            STATE.replace("\"serial\":1", "\"serial\":2").as_bytes(),
            423,
            "",
        ),
        case(
            "POST with another ID",
            "POST",
            &format!("{p}?ID=mallory"),
            STATE.replace("\"serial\":1", "\"serial\":2").as_bytes(),
            423,
            "",
        ),
        case(
            "DELETE with another ID",
            "DELETE",
            &format!("{p}?ID=mallory"),
            b"",
            423,
            "",
        ),
        case(
            "LOCK by someone else",
            "LOCK",
            p,
            lock("mallory").as_bytes(),
            423,
            "",
        ),
        case(
            "UNLOCK by someone else",
            "UNLOCK",
            p,
            lock("mallory").as_bytes(),
            423,
            "",
        ),
        // --- LockInfo that is not one
        case(
            "LockInfo without ID",
            "LOCK",
            p,
            br#"{"Operation":"OperationTypeApply","Who":"m"}"#,
            400,
            "\"ID\"",
        ),
        case(
            "LockInfo ID as number",
            "LOCK",
            p,
            br#"{"ID":7}"#,
            400,
            "LockInfo",
        ),
        case("LockInfo ID null", "LOCK", p, br#"{"ID":null}"#, 400, ""),
        case(
            "LockInfo Who as object",
            "LOCK",
            p,
            br#"{"ID":"x","Who":{}}"#,
            400,
            "LockInfo",
        ),
        case("LockInfo as array", "LOCK", p, b"[]", 400, "LockInfo"),
        case("LockInfo empty", "LOCK", p, b"", 400, ""),
        case("LockInfo not JSON", "LOCK", p, b"lock me", 400, "LockInfo"),
        case(
            "LockInfo invalid UTF-8",
            "LOCK",
            p,
            b"{\"ID\":\"\xff\"}",
            400,
            "",
        ),
        case(
            "UNLOCK ID as number",
            "UNLOCK",
            p,
            br#"{"ID":7}"#,
            400,
            "LockInfo",
        ),
        // --- paths
        case("dot-dot", "GET", "/state/default/a/../../b", b"", 400, ".."),
        case(
            "encoded dot-dot",
            "GET",
            "/state/default/%2e%2e/etc/passwd",
            b"",
            400,
            "..",
        ),
        case(
            "absolute path",
            "GET",
            "/state/default/%2Fetc%2Fpasswd",
            b"",
            400,
            "empty segment",
        ),
        case(
            "double slash",
            "GET",
            "/state/default//x",
            b"",
            400,
            "empty segment",
        ),
        case("backslash", "GET", "/state/default/a%5Cb", b"", 400, "'\\'"),
        case(
            "raw backslash",
            "LOCK",
            "/state/default/a\\b",
            b"",
            400,
            "'\\'",
        ),
        case("NUL", "GET", "/state/default/a%00b", b"", 400, "U+0000"),
        case(
            "control character",
            "GET",
            "/state/default/a%01b",
            b"",
            400,
            "U+0001",
        ),
        case("DEL", "GET", "/state/default/a%7Fb", b"", 400, "U+007F"),
        case(
            ".lock suffix",
            "POST",
            "/state/default/x.lock",
            STATE.as_bytes(),
            400,
            ".lock",
        ),
        case(
            ".lock segment",
            "GET",
            "/state/default/a.lock/b",
            b"",
            400,
            ".lock",
        ),
        case(
            "@{ in a name",
            "GET",
            "/state/default/a@%7Bb",
            b"",
            400,
            "'@'",
        ),
        case(
            "dot-dot inside a name",
            "GET",
            "/state/default/a..b",
            b"",
            400,
            "..",
        ),
        case(
            "hidden segment",
            "GET",
            "/state/default/.git/config",
            b"",
            400,
            "starts with '.'",
        ),
        case(
            "non-ASCII",
            "GET",
            "/state/default/caf%C3%A9",
            b"",
            400,
            "'é'",
        ),
        case(
            "invalid percent-UTF-8",
            "GET",
            "/state/default/%ff",
            b"",
            400,
            "UTF-8",
        ),
        case(
            "overlong path",
            "GET",
            &format!("/state/default/{}", "a".repeat(513)),
            b"",
            400,
            "512",
        ),
        case(
            "unknown repository",
            "GET",
            "/state/nosuch/x.tfstate",
            b"",
            404,
            "nosuch",
        ),
        // --- methods and headers
        case("unknown method", "BREW", p, b"", 405, "BREW"),
        case("PATCH", "PATCH", p, b"", 405, "PATCH"),
        case("OPTIONS", "OPTIONS", p, b"", 405, "OPTIONS"),
        // --- query-style addresses to internal targets (allow = "*")
        case(
            "file URL",
            "GET",
            "/?type=git&repository=file%3A%2F%2F%2Fetc&state=x",
            b"",
            403,
            "",
        ),
        case(
            "loopback",
            "GET",
            "/?type=git&repository=http%3A%2F%2F127.0.0.1%3A9%2Fr.git&state=x",
            b"",
            403,
            "",
        ),
        case(
            "short loopback",
            "GET",
            "/?type=git&repository=http%3A%2F%2F127.1%2Fr.git&state=x",
            b"",
            403,
            "",
        ),
        case(
            "decimal loopback",
            "GET",
            "/?type=git&repository=http%3A%2F%2F2130706433%2Fr.git&state=x",
            b"",
            403,
            "",
        ),
        case(
            "hex loopback",
            "GET",
            "/?type=git&repository=http%3A%2F%2F0x7f000001%2Fr.git&state=x",
            b"",
            403,
            "",
        ),
        case(
            "localhost",
            "GET",
            "/?type=git&repository=http%3A%2F%2Flocalhost%2Fr.git&state=x",
            b"",
            403,
            "",
        ),
        case(
            "instance metadata",
            "GET",
            "/?type=git&repository=http%3A%2F%2F169.254.169.254%2Flatest&state=x",
            b"",
            403,
            "",
        ),
        case(
            "private network",
            "GET",
            "/?type=git&repository=https%3A%2F%2F10.0.0.8%2Fr.git&state=x",
            b"",
            403,
            "",
        ),
        case(
            "IPv6 loopback",
            "GET",
            "/?type=git&repository=http%3A%2F%2F%5B%3A%3A1%5D%2Fr.git&state=x",
            b"",
            403,
            "",
        ),
        case(
            "IPv4-mapped IPv6",
            "GET",
            "/?type=git&repository=http%3A%2F%2F%5B%3A%3Affff%3A127.0.0.1%5D%2Fr.git&state=x",
            b"",
            403,
            "",
        ),
        case(
            "unspecified address",
            "GET",
            "/?type=git&repository=http%3A%2F%2F0.0.0.0%2Fr.git&state=x",
            b"",
            403,
            "",
        ),
        case(
            "ext transport",
            "GET",
            "/?type=git&repository=ext%3A%3Ash%20-c%20id&state=x",
            b"",
            403,
            "",
        ),
        case(
            "query-style traversal",
            "GET",
            "/?type=git&repository=https%3A%2F%2Fgit.example.com%2Fr.git&state=..%2Fx",
            b"",
            400,
            "..",
        ),
    ];
    // Bodies that are not a JSON object (issue 16: an empty POST once committed an empty file),
    // from the lock holder itself (the request that would otherwise be written) and on a state
    // nobody locked, with POST and PUT, on the path-style and the query-style address.
    let query = |state: &str| {
        format!(
            "/?type=git&repository={}&ref=main&state={state}",
            git_server
                .url("states")
                .replace(':', "%3A")
                .replace('/', "%2F")
        )
    };
    let q = query("hostile.tfstate");
    let not_objects: [(&str, &[u8]); 5] = [
        ("empty body", b""),
        ("null", b"null"),
        ("number", b"42"),
        ("string", b"\"state\""),
        ("array", b"[]"),
    ];
    for (what, body) in not_objects {
        for method in ["POST", "PUT"] {
            for (style, target) in [
                ("by the holder", format!("{p}?ID=holder")),
                ("query-style, by the holder", format!("{q}&ID=holder")),
                (
                    "on an unlocked state",
                    "/state/default/unlocked.tfstate".to_owned(),
                ),
                (
                    "query-style, on an unlocked state",
                    query("unlocked.tfstate"),
                ),
            ] {
                cases.push(case(
                    &format!("{what}: {method} {style}"),
                    method,
                    &target,
                    body,
                    400,
                    "not a JSON object",
                ));
            }
        }
        cases.push(case(
            &format!("{what}: PUT without the lock ID"),
            "PUT",
            p,
            body,
            400,
            "not a JSON object",
        ));
    }
    let mut header_case = case("1 MiB header", "GET", p, b"", 431, "");
    header_case.headers.push(big_header);
    cases.push(header_case);
    let mut many = case("200 headers", "GET", p, b"", 431, "");
    many.headers = many_headers;
    cases.push(many);
    let mut md5 = case(
        "Content-MD5 mismatch",
        "POST",
        p,
        STATE.as_bytes(),
        400,
        "Content-MD5",
    );
    md5.headers
        .push("Content-MD5: AAAAAAAAAAAAAAAAAAAAAA==".into());
    cases.push(md5);
    let mut chunked = case(
        "chunked body over the maximum",
        "POST",
        p,
        b"",
        413,
        "maximum",
    );
    chunked.headers.push("Transfer-Encoding: chunked".into());
    let mut chunks = Vec::new();
    for _ in 0..(MAX / 4096 + 2) {
        chunks.extend_from_slice(format!("{:x}\r\n", 4096).as_bytes());
        chunks.extend_from_slice(&[b'x'; 4096]);
        chunks.extend_from_slice(b"\r\n");
    }
    chunks.extend_from_slice(b"0\r\n\r\n");
    chunked.body = chunks;
    cases.push(chunked);

    assert!(cases.len() >= 110, "{} cases", cases.len());
    let mut failures = Vec::new();
    for c in &cases {
        let (status, body) = send(port, c);
        let text = String::from_utf8_lossy(&body).into_owned();
        if status != c.status {
            failures.push(format!(
                "{}: {} {} → {status} (expected {}): {text}",
                c.name,
                c.method,
                c.target.chars().take(80).collect::<String>(),
                c.status
            ));
            continue;
        }
        // 431 comes from the HTTP layer before the router: no JSON to check there.
        if status != 431 && status != 423 {
            match serde_json::from_str::<serde_json::Value>(&text) {
                Ok(v) => {
                    let sentence = v["error"].as_str().unwrap_or_default();
                    if sentence.is_empty() || sentence.contains('\n') || !sentence.contains(c.says)
                    {
                        failures.push(format!(
                            "{}: error {sentence:?} should be one sentence mentioning {:?}",
                            c.name, c.says
                        ));
                    }
                }
                Err(_) => {
                    failures.push(format!("{}: {status} without a JSON error: {text}", c.name))
                }
            }
        }
        if status == 423 {
            // the holder's LockInfo, as stored
            if !text.contains("\"holder\"") {
                failures.push(format!(
                    "{}: 423 without the holder's LockInfo: {text}",
                    c.name
                ));
            }
        }
        let now = ls_remote(&remote);
        if now != before {
            failures.push(format!(
                "{}: the remote changed: {before:?} → {now:?}",
                c.name
            ));
        }
        let (health, _) = http(
            "GET",
            &format!("{}/_/health", server.base_url()),
            None,
            None,
        )
        .unwrap();
        if health != 200 {
            failures.push(format!(
                "{}: the server stopped answering ({health})",
                c.name
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n"),
        server.log()
    );
    // still serving the real state and still locked by the holder
    let (status, body) = http(
        "GET",
        &server.state_url("default", "hostile.tfstate"),
        None,
        None,
    )
    .unwrap();
    assert_eq!((status, body.as_str()), (200, STATE));
    // the query-style address reaches that same state (so its cases above were refused for
    // their bodies, not for their address)
    let (status, body) = http("GET", &format!("{}{q}", server.base_url()), None, None).unwrap();
    assert_eq!(
        (status, body.as_str()),
        (200, STATE),
        "GET on the query-style address"
    );
    assert_eq!(git_log_subjects(&repo, "main", "hostile.tfstate").len(), 1);
    assert_eq!(
        git_show(&repo, "main", "unlocked.tfstate"),
        None,
        "nothing was written for the unlocked state"
    );
}
