//! A push in one HTTP request: receive-pack's `POST` without the advertisement `GET` before it.
//!
//! Smart HTTP is stateless: `POST <repo>/git-receive-pack` carries the commands and the pack
//! whether or not a `GET info/refs` came first (git's own client always sends one, to learn the
//! refs and the capabilities). Where gitstate already knows the old id of the ref it updates (a
//! lock it creates must not exist; a lock it releases is the one it wrote) and this process has
//! read the server's capabilities before ([`super::sendpack::known_offers`]), that `GET` tells it
//! nothing: the server compares the old id either way, so a wrong guess is a refused update,
//! never a lost one.
//!
//! Same client settings as every other request to the remote ([`super::transport::http_options`]:
//! timeouts, the network guard's resolver, the trusted roots), the same credentials, and redirects
//! are not followed. Whatever is not a push report (an HTTP error, a redirect, a page that is not
//! receive-pack's answer, a dropped connection) comes back as `None`, and the caller takes the
//! usual way, advertisement first, whose errors say what went wrong.

use std::io::{BufRead, Read, Write};

use base64::Engine as _;
use gix::protocol::transport::client::blocking_io::http::{self, Http, PostBodyDataKind};

use super::pktline::{self, Packet};
use super::sendpack::{known_offers, push_request, read_report, RefUpdate, Report};
use super::transport::{http_options, kept_client, Endpoint};

/// The content type of receive-pack's answer.
const RESULT_TYPE: &str = "application/x-git-receive-pack-result";

/// The most of an answer read: a push report, with the server's messages.
const MAX_ANSWER_BYTES: u64 = 1024 * 1024;

/// Whether [`push`] can be tried at all: an HTTP(S) remote whose capabilities this process knows.
pub fn possible(endpoint: &Endpoint) -> bool {
    known_offers(endpoint).is_some()
}

/// Whether `endpoint`'s receive-pack, as this process last read it, takes a thin pack (it did
/// not advertise `no-thin`).
pub fn takes_thin_packs(endpoint: &Endpoint) -> bool {
    known_offers(endpoint).is_some_and(|offers| !offers.iter().any(|c| c == "no-thin"))
}

/// Whether a [`push`] to `endpoint` may also assert a ref unchanged (old id = new id), checked in
/// the same atomic transaction ([`super::sendpack::asserts_unchanged_refs`]).
pub fn asserts_unchanged_refs(endpoint: &Endpoint) -> bool {
    super::sendpack::asserts_unchanged_refs(endpoint)
}

/// Sends `updates` (with `pack` unless every update is a delete) in one `POST` and returns the
/// server's report, or `None` when there was no report to read (see the module documentation).
pub fn push(endpoint: &Endpoint, updates: &[RefUpdate], pack: &[u8]) -> Option<Report> {
    let offers = known_offers(endpoint)?;
    let (request, side_band) = match push_request(endpoint, &offers, updates, pack) {
        Ok(built) => built,
        Err(e) => {
            tracing::debug!(error = %e, "no push in one request");
            return None;
        }
    };
    match send(endpoint, &request) {
        Ok(answer) => {
            let mut packets = match pktline::split(&answer) {
                Ok(packets) => packets.into_iter(),
                Err(e) => {
                    tracing::debug!(error = %e, "the answer to a push in one request is no report");
                    return None;
                }
            };
            let next_line = || {
                Ok(match packets.next() {
                    Some(Packet::Data(data)) => Some(data.to_vec()),
                    _ => None,
                })
            };
            match read_report(endpoint, side_band, next_line) {
                Ok(report) => Some(report),
                Err(e) => {
                    tracing::debug!(error = %e, "the answer to a push in one request is no report");
                    None
                }
            }
        }
        Err(why) => {
            tracing::debug!(error = %endpoint.scrub(&why), "a push in one request had no answer");
            None
        }
    }
}

/// `POST`s `request` to the remote's receive-pack and returns the answer's body.
fn send(endpoint: &Endpoint, request: &[u8]) -> Result<Vec<u8>, String> {
    let mut options = http_options(endpoint);
    options.follow_redirects = http::options::FollowRedirects::None;
    let mut client = kept_client(endpoint, &options)?;
    let base = endpoint.url.to_bstring().to_string();
    let url = format!("{}/git-receive-pack", base.trim_end_matches('/'));
    let mut headers = vec![
        concat!("User-Agent: git/gitstate-", env!("CARGO_PKG_VERSION")).to_owned(),
        "Content-Type: application/x-git-receive-pack-request".to_owned(),
        format!("Accept: {RESULT_TYPE}"),
    ];
    if let Some(c) = &endpoint.credentials {
        let pair = format!("{}:{}", c.username, c.password);
        headers.push(format!(
            "Authorization: Basic {}",
            base64::engine::general_purpose::STANDARD.encode(pair)
        ));
    }
    let response = client
        .post(
            &url,
            &base,
            &headers,
            PostBodyDataKind::BoundedAndFitsIntoMemory,
        )
        .map_err(|e| e.to_string())?;
    let mut upload = response.post_body;
    upload
        .write_all(request)
        .and_then(|_| upload.flush())
        .map_err(|e| e.to_string())?;
    drop(upload);
    let mut result_type = false;
    for line in response.headers.lines() {
        let line = line.map_err(|e| e.to_string())?;
        if let Some((name, value)) = line.split_once(':') {
            if name.trim().eq_ignore_ascii_case("content-type") && value.trim() == RESULT_TYPE {
                result_type = true;
            }
        }
    }
    if !result_type {
        return Err("the answer is not receive-pack's".into());
    }
    let mut answer = Vec::new();
    response
        .body
        .take(MAX_ANSWER_BYTES)
        .read_to_end(&mut answer)
        .map_err(|e| e.to_string())?;
    Ok(answer)
}
