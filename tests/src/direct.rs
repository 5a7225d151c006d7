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
