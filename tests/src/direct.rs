//! Direct HTTP requests to the backend (LOCK/UNLOCK/GET/POST) and LockInfo bodies.

use std::fs;
use std::process::Command;
use std::time::Duration;

/// Sends `METHOD url` (any method, LOCK and UNLOCK included) with an optional body and optional
/// basic-auth pair; returns (status, body). Err only when no HTTP answer came.
pub fn http(
    method: &str,
    url: &str,
    body: Option<&str>,
    auth: Option<(&str, &str)>,
) -> Result<(u16, String), String> {
    let client = reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(120))
        .build()
        .map_err(|e| e.to_string())?;
    let method = reqwest::Method::from_bytes(method.as_bytes()).map_err(|e| e.to_string())?;
    let mut req = client.request(method, url);
    if let Some((user, password)) = auth {
        req = req.basic_auth(user, Some(password));
    }
    if let Some(body) = body {
        req = req
            .header("Content-Type", "application/json")
            .body(body.to_string());
    }
    let resp = req.send().map_err(|e| format!("{url}: {e}"))?;
    let status = resp.status().as_u16();
    let text = resp.text().map_err(|e| e.to_string())?;
    Ok((status, text))
}

/// Why `text` is not one sentence, if it is not: a line break or control character, an error
/// chain (`: `, which joins one), a second sentence (`. `), a Rust path (`::`), a URL, an OS
/// error, a type name (a word with a capital inside, such as `NotADirectory`; the names of
/// OpenTofu, GitHub, GitLab and DynamoDB aside) or a library's name.
/// The rule of DESIGN §2 for a 5xx sentence (`gitstate-http`'s unit tests and
/// `tests/tests/error_bodies.rs` hold every error answer to it).
pub fn not_one_sentence(text: &str) -> Option<String> {
    const NAMES: [&str; 4] = ["OpenTofu", "GitHub", "GitLab", "DynamoDB"];
    const LIBRARIES: [&str; 9] = [
        "gix", "reqwest", "hyper", "tokio", "serde", "axum", "rustls", "aws_sdk", "smithy",
    ];
    if text.trim().is_empty() {
        return Some("it is empty".into());
    }
    if let Some(c) = text.chars().find(|c| c.is_control()) {
        return Some(format!("it holds the control character {c:?}"));
    }
    for marker in [": ", ". ", "::", "://", "os error", "Caused by", "panicked"] {
        if text.contains(marker) {
            return Some(format!("it holds {marker:?}"));
        }
    }
    for word in text.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
        let inner_capital = word
            .as_bytes()
            .windows(2)
            .any(|w| w[0].is_ascii_lowercase() && w[1].is_ascii_uppercase());
        if inner_capital && !NAMES.contains(&word) {
            return Some(format!("it holds the type name {word:?}"));
        }
        if LIBRARIES.iter().any(|l| word.starts_with(l)) {
            return Some(format!("it names the library {word:?}"));
        }
    }
    None
}

/// The `request_id` of an error answer's JSON body (a 5xx carries one; `""` when there is none).
pub fn request_id_of(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["request_id"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// `GET url`: the status, the value of each header in `names` (`None` where absent), the body.
pub fn get_with_headers(url: &str, names: &[&str]) -> (u16, Vec<Option<String>>, Vec<u8>) {
    request_with_headers("GET", url, None, names)
}

/// `METHOD url` with an optional JSON body: the status, the value of each header in `names`
/// (`None` where absent), the body.
pub fn request_with_headers(
    method: &str,
    url: &str,
    body: Option<&str>,
    names: &[&str],
) -> (u16, Vec<Option<String>>, Vec<u8>) {
    authed_request_with_headers(method, url, body, None, names)
}

/// [`request_with_headers`] with basic auth `(user, password)`.
pub fn authed_request_with_headers(
    method: &str,
    url: &str,
    body: Option<&str>,
    auth: Option<(&str, &str)>,
    names: &[&str],
) -> (u16, Vec<Option<String>>, Vec<u8>) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
    let mut request = reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap()
        .request(method, url);
    if let Some((user, password)) = auth {
        request = request.basic_auth(user, Some(password));
    }
    if let Some(body) = body {
        request = request
            .header("Content-Type", "application/json")
            .body(body.to_string());
    }
    let response = request.send().unwrap_or_else(|e| panic!("{url}: {e}"));
    let headers = names
        .iter()
        .map(|name| {
            response
                .headers()
                .get(*name)
                .map(|v| v.to_str().unwrap_or_default().to_owned())
        })
        .collect();
    let status = response.status().as_u16();
    (status, headers, response.bytes().unwrap().to_vec())
}

/// The `Who` Terraform puts in its LockInfo on this machine: `user@hostname`.
pub fn terraform_who() -> String {
    let user = Command::new("id")
        .arg("-un")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let host = fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    format!("{user}@{host}")
}

/// A Terraform LockInfo JSON document with `ID` = `id` and `Who` = `who`.
pub fn lock_info(id: &str, who: &str, operation: &str) -> String {
    serde_json::json!({
        "ID": id,
        "Operation": operation,
        "Info": "",
        "Who": who,
        "Version": "1.0.3",
        "Created": "2024-01-01T00:00:00.000000000Z",
        "Path": ""
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The check itself: what it lets through and what it stops.
    #[test]
    fn the_one_sentence_check_stops_chains_and_names() {
        for good in [
            "the git server failed to answer this request; the reason is in gitstate's log under request id 5f0e-1",
            "the stored state at default/a.tfstate was sealed for default/b.tfstate (KMS encryption context of arn:aws:kms:eu-west-1:1:key/k), so it is not served",
        ] {
            assert_eq!(not_one_sentence(good), None, "{good}");
        }
        for bad in [
            "a: b",
            "one. Two",
            "a\nb",
            "gix_ref failed",
            "NotADirectory",
            "std::io::Error",
            "see https://x",
            "No such file (os error 2)",
            "",
        ] {
            assert!(not_one_sentence(bad).is_some(), "{bad}");
        }
    }
}
