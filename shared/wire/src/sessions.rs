//! Protocol-v2 upload-pack sessions kept between requests (HTTP only: every command is a
//! request of its own), so that a warm read sends its command without a new capability
//! advertisement.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use super::fetchpack::UploadPack;
use super::transport::Endpoint;

/// Protocol-v2 sessions over HTTP(S) kept between requests, by remote and credential: a kept
/// session sends its next command without a new capability advertisement. Every command still
/// carries the credential and is authorized by the server. Bounded: a few per remote and
/// credential ([`MAX_KEPT_PER_REMOTE`]), [`MAX_KEPT_SESSIONS`] in all, none older than
/// [`KEPT_SESSION_AGE`].
type KeptSessions =
    HashMap<(String, Option<(String, String)>), Vec<(std::time::Instant, UploadPack)>>;

const MAX_KEPT_SESSIONS: usize = 64;
/// Sessions kept per remote and credential: as many as a busy process's reads of one repository
/// run at once (measured: with 4, a quarter of the reads at 8 processes under 64 writers opened a
/// new session, each a capability advertisement more; docs/BENCHMARKS.md, issue 58).
const MAX_KEPT_PER_REMOTE: usize = 16;
const KEPT_SESSION_AGE: std::time::Duration = std::time::Duration::from_secs(600);

fn kept_sessions() -> &'static Mutex<KeptSessions> {
    static KEPT: OnceLock<Mutex<KeptSessions>> = OnceLock::new();
    KEPT.get_or_init(Default::default)
}

/// A kept session is used again only for the same remote, credential, network policy, limits
/// and timeout: all of these were fixed when its transport was made.
fn session_key(endpoint: &Endpoint) -> (String, Option<(String, String)>) {
    (
        format!(
            "{} {:?} {:?} {:?}",
            endpoint.display, endpoint.network, endpoint.limits, endpoint.timeout
        ),
        endpoint
            .credentials
            .as_ref()
            .map(|c| (c.username.clone(), c.password.clone())),
    )
}

/// A kept session for `endpoint` and its credential, if there is a fresh one.
pub fn take(endpoint: &Endpoint) -> Option<UploadPack> {
    let mut kept = kept_sessions().lock().ok()?;
    let sessions = kept.get_mut(&session_key(endpoint))?;
    while let Some((since, session)) = sessions.pop() {
        if since.elapsed() < KEPT_SESSION_AGE {
            return Some(session);
        }
    }
    None
}

/// Keeps `session` for the next request when it can take more commands without a new
/// handshake (HTTP: every command is a request of its own); otherwise ends it.
pub fn keep(endpoint: &Endpoint, session: UploadPack) {
    if !session.is_stateless() {
        session.finish();
        return;
    }
    let Ok(mut kept) = kept_sessions().lock() else {
        return;
    };
    kept.retain(|_, sessions| {
        sessions.retain(|(since, _)| since.elapsed() < KEPT_SESSION_AGE);
        !sessions.is_empty()
    });
    if kept.values().map(Vec::len).sum::<usize>() >= MAX_KEPT_SESSIONS {
        return; // dropped: the next request of this remote makes a new one
    }
    let sessions = kept.entry(session_key(endpoint)).or_default();
    if sessions.len() < MAX_KEPT_PER_REMOTE {
        sessions.push((std::time::Instant::now(), session));
    }
}
