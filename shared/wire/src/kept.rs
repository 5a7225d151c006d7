//! HTTP clients kept between sessions, so that requests to a remote reuse a connection.
//!
//! gix's reqwest backend ([`http::reqwest::Remote`]) is a thread that owns a reqwest client and
//! its connection pool. A transport made with `http::connect` builds a new one per session, so
//! every session paid two thread starts, a client, and a new TCP connection (and, over HTTPS, a
//! TLS handshake: two more round trips to the remote). A [`Kept`] backend takes a client from a
//! small pool instead and gives it back when the session is done with it.
//!
//! A client goes back only when it is ready for the next request: the last answer it gave was
//! read to its end (what a session leaves unread is read and dropped, up to
//! [`MAX_DRAIN_BYTES`]), and no request failed on it. Clients are pooled per repository URL and
//! per client settings (timeouts, the network guard, redirects, trusted roots): a client follows
//! git's "initial redirect" rule once, on its first request, and keeps the address it was
//! redirected to, which belongs to that repository only. Credentials are not part of a client:
//! each request carries its own.
//!
//! A kept connection may have been closed by the server while it was idle (its keep-alive
//! timeout, or a Lambda container frozen between invocations): a request sent on it gets no
//! answer at all ([`closed_before_answer`]). A `GET` (the advertisement of every session) is
//! then sent again, once, on a new client: it changes nothing on the server. A `POST` cannot be
//! replayed here (its body is streamed by the session); its failure is a 503, "closed before it
//! answered", which Terraform retries.

use std::collections::VecDeque;
use std::io::{BufRead, Read};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use gix::protocol::transport::client::blocking_io::http::{
    self, reqwest::Remote, GetResponse, Http, PostBodyDataKind, PostResponse,
};

/// Most idle clients kept in the process (each is two parked threads and at most a few idle
/// connections).
pub const MAX_IDLE_CLIENTS: usize = 16;
/// Most idle clients kept for one repository and settings.
const MAX_IDLE_PER_KEY: usize = 4;
/// A client idle longer is dropped (servers close idle connections sooner or later anyway).
const MAX_IDLE: Duration = Duration::from_secs(60);
/// Most bytes of an answer the session left unread that are read to make its client reusable.
pub const MAX_DRAIN_BYTES: u64 = 64 * 1024;

/// An idle client with what it is for and since when it waits.
struct Idle {
    key: String,
    remote: Remote,
    since: Instant,
}

fn idle() -> MutexGuard<'static, VecDeque<Idle>> {
    static IDLE: OnceLock<Mutex<VecDeque<Idle>>> = OnceLock::new();
    IDLE.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A kept client for `key`, or a new one.
fn take(key: &str) -> Remote {
    let mut idle = idle();
    idle.retain(|c| c.since.elapsed() < MAX_IDLE);
    // The most recently used first: its connection is the likeliest to be still open.
    match idle.iter().rposition(|c| c.key == key) {
        Some(at) => idle.remove(at).map(|c| c.remote).unwrap_or_default(),
        None => {
            tracing::debug!(
                idle = idle.len(),
                "no idle HTTP client for this repository: a new one"
            );
            Remote::default()
        }
    }
}

/// Keeps `remote` for the next session of `key` (dropping the oldest idle clients over the caps).
fn give_back(key: String, remote: Remote) {
    let mut idle = idle();
    idle.retain(|c| c.since.elapsed() < MAX_IDLE);
    let same = idle.iter().filter(|c| c.key == key).count();
    if same >= MAX_IDLE_PER_KEY {
        if let Some(at) = idle.iter().position(|c| c.key == key) {
            idle.remove(at);
        }
    }
    while idle.len() >= MAX_IDLE_CLIENTS {
        idle.pop_front();
    }
    idle.push_back(Idle {
        key,
        remote,
        since: Instant::now(),
    });
}

/// What a [`Kept`] backend and the answers it gave share.
struct Slot {
    key: String,
    remote: Option<Remote>,
    /// Counts requests: an answer of an earlier request has nothing to say any more.
    request: u64,
    /// The last request's answer is still held by the transport.
    answer_held: bool,
    /// The last request's answer was read to its end (true before any request).
    answer_done: bool,
    /// A request failed on this client: it is not kept.
    failed: bool,
    /// The [`Kept`] backend was dropped.
    released: bool,
}

impl Slot {
    /// Gives the client back once nobody uses it and it is ready for another request.
    fn give_back_when_ready(&mut self) {
        if self.released && !self.answer_held && self.answer_done && !self.failed {
            if let Some(remote) = self.remote.take() {
                // A client that followed a redirect keeps its target for every later request:
                // gix decides per session whether credentials may go there, so it is not kept.
                if remote.redirected_base_url().is_none() {
                    give_back(std::mem::take(&mut self.key), remote);
                }
            }
        }
    }
}

fn lock(slot: &Mutex<Slot>) -> MutexGuard<'_, Slot> {
    slot.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// An [`Http`] backend on a kept client of gix's reqwest backend.
pub struct Kept {
    slot: Arc<Mutex<Slot>>,
    /// The settings a new client is made with, when a kept one's connection turns out closed.
    options: http::Options,
}

impl Kept {
    /// A backend for the repository at `base_url` with client settings `options` (whose
    /// `backend` builds the client); the same `base_url` and `settings` get the same clients.
    pub fn new(base_url: &str, settings: &str, options: &http::Options) -> Result<Kept, String> {
        let key = format!("{base_url}\n{settings}");
        let mut remote = take(&key);
        remote.configure(options).map_err(|e| e.to_string())?;
        Ok(Kept {
            slot: Arc::new(Mutex::new(Slot {
                key,
                remote: Some(remote),
                request: 0,
                answer_held: false,
                answer_done: true,
                failed: false,
                released: false,
            })),
            options: options.clone(),
        })
    }

    /// Puts a new client (and so a new connection) in place of the current one.
    fn renew(&mut self) -> gix::error::Result {
        let mut remote = Remote::default();
        remote.configure(&self.options)?;
        let mut slot = lock(&self.slot);
        slot.remote = Some(remote);
        slot.failed = false;
        Ok(())
    }

    fn request<T>(
        &mut self,
        send: impl FnOnce(&mut Remote) -> gix::error::Result<T>,
    ) -> gix::error::Result<(T, u64)> {
        let mut slot = lock(&self.slot);
        slot.request += 1;
        slot.answer_held = false;
        slot.answer_done = false;
        let Some(remote) = slot.remote.as_mut() else {
            return Err(gix::error::Error::from_error(std::io::Error::other(
                "the HTTP client was already given back",
            )));
        };
        match send(remote) {
            Ok(sent) => {
                slot.answer_held = true;
                Ok((sent, slot.request))
            }
            Err(e) => {
                slot.failed = true;
                Err(e)
            }
        }
    }

    fn heard(&self, inner: <Remote as Http>::Headers) -> Heard {
        Heard {
            inner,
            slot: self.slot.clone(),
            line: Vec::new(),
        }
    }

    fn answer(&self, inner: <Remote as Http>::ResponseBody, request: u64) -> Answer {
        Answer {
            inner,
            slot: self.slot.clone(),
            request,
            done: false,
        }
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        let mut slot = lock(&self.slot);
        slot.released = true;
        slot.give_back_when_ready();
    }
}

impl Http for Kept {
    type Headers = Heard;
    type ResponseBody = Answer;
    type PostBody = <Remote as Http>::PostBody;

    fn get(
        &mut self,
        url: &str,
        base_url: &str,
        headers: impl IntoIterator<Item = impl AsRef<str>>,
    ) -> gix::error::Result<GetResponse<Self::Headers, Self::ResponseBody>> {
        let headers: Vec<String> = headers.into_iter().map(|h| h.as_ref().to_owned()).collect();
        let (mut response, mut request) =
            self.request(|remote| remote.get(url, base_url, &headers))?;
        // Waiting for the answer's first bytes is what the session does next anyway; a
        // connection closed before any answer shows here, and a GET is safe to send again.
        if let Err(e) = response.headers.fill_buf() {
            if !closed_before_answer(&e) {
                return Err(gix::error::Error::from_error(e));
            }
            tracing::info!(
                error = %e,
                "a kept connection was closed before the git server answered; sending the request again on a new connection"
            );
            metrics::counter!(crate::metrics::GIT_CONNECTIONS_RENEWED).increment(1);
            self.renew()?;
            (response, request) = self.request(|remote| remote.get(url, base_url, &headers))?;
        }
        Ok(GetResponse {
            headers: self.heard(response.headers),
            body: self.answer(response.body, request),
        })
    }

    fn post(
        &mut self,
        url: &str,
        base_url: &str,
        headers: impl IntoIterator<Item = impl AsRef<str>>,
        body: PostBodyDataKind,
    ) -> gix::error::Result<PostResponse<Self::Headers, Self::ResponseBody, Self::PostBody>> {
        let (response, request) =
            self.request(|remote| remote.post(url, base_url, headers, body))?;
        Ok(PostResponse {
            post_body: response.post_body,
            headers: self.heard(response.headers),
            body: self.answer(response.body, request),
        })
    }

    fn configure(&mut self, config: &dyn std::any::Any) -> gix::error::Result {
        match lock(&self.slot).remote.as_mut() {
            Some(remote) => remote.configure(config),
            None => Ok(()),
        }
    }

    fn redirected_base_url(&self) -> Option<String> {
        lock(&self.slot)
            .remote
            .as_ref()
            .and_then(|remote| remote.redirected_base_url())
    }
}

/// Whether `error` says the connection was closed before the server answered anything (hyper's
/// "connection closed before message completed"): the request may not even have reached it.
pub fn closed_before_answer(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(hyper) = e.downcast_ref::<hyper::Error>() {
            return hyper.is_incomplete_message();
        }
        // io::Error's `source` skips the error it wraps: look at that one too.
        next = match e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => e.source(),
        };
    }
    false
}

/// The headers of an answer, one `name:value` line each. A redirect (a `Location` header) is
/// not followed by a kept client (git follows only a session's first request), so the session
/// fails and its client is not kept: the next session starts on a new client, which follows it.
pub struct Heard {
    inner: <Remote as Http>::Headers,
    slot: Arc<Mutex<Slot>>,
    /// The start of the line being read (enough to tell its name).
    line: Vec<u8>,
}

impl Heard {
    fn heard(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            if byte == b'\n' {
                if self.line.len() >= 9 && self.line[..9].eq_ignore_ascii_case(b"location:") {
                    lock(&self.slot).failed = true;
                }
                self.line.clear();
            } else if self.line.len() < 16 {
                self.line.push(byte);
            }
        }
    }
}

impl Read for Heard {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(out)?;
        self.heard(&out[..n]);
        Ok(n)
    }
}

impl BufRead for Heard {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        self.inner.fill_buf()
    }

    fn consume(&mut self, amt: usize) {
        if let Ok(buf) = self.inner.fill_buf() {
            let seen = buf[..amt.min(buf.len())].to_vec();
            self.heard(&seen);
        }
        self.inner.consume(amt)
    }
}

/// The body of an answer; knows whether it was read to its end.
pub struct Answer {
    inner: <Remote as Http>::ResponseBody,
    slot: Arc<Mutex<Slot>>,
    request: u64,
    done: bool,
}

impl Read for Answer {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(out)?;
        if n == 0 && !out.is_empty() {
            self.done = true;
        }
        Ok(n)
    }
}

impl BufRead for Answer {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        let buf = self.inner.fill_buf()?;
        if buf.is_empty() {
            self.done = true;
        }
        Ok(buf)
    }

    fn consume(&mut self, amt: usize) {
        self.inner.consume(amt)
    }
}

impl Drop for Answer {
    fn drop(&mut self) {
        if !self.done {
            // What the session did not read (usually nothing but the end of the stream).
            let mut rest = (&mut self.inner).take(MAX_DRAIN_BYTES + 1);
            self.done = matches!(std::io::copy(&mut rest, &mut std::io::sink()), Ok(n) if n <= MAX_DRAIN_BYTES);
        }
        let mut slot = lock(&self.slot);
        if slot.request == self.request {
            slot.answer_held = false;
            slot.answer_done = self.done;
            slot.give_back_when_ready();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pool is the process's: these tests take turns.
    fn serial() -> MutexGuard<'static, ()> {
        static SERIAL: Mutex<()> = Mutex::new(());
        SERIAL
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn idle_for(key: &str) -> usize {
        idle().iter().filter(|c| c.key == key).count()
    }

    #[test]
    fn idle_clients_are_capped_per_key_and_in_all() {
        let _turn = serial();
        let key = "http://kept.test/a.git\nsettings";
        for _ in 0..6 {
            give_back(key.to_owned(), Remote::default());
        }
        assert!(idle_for(key) <= MAX_IDLE_PER_KEY);
        for i in 0..MAX_IDLE_CLIENTS + 4 {
            give_back(
                format!("http://kept.test/{i}.git\nsettings"),
                Remote::default(),
            );
        }
        assert!(idle().len() <= MAX_IDLE_CLIENTS);
        // A kept client is taken once; its key has one fewer afterwards.
        let last = format!("http://kept.test/{}.git\nsettings", MAX_IDLE_CLIENTS + 3);
        assert_eq!(idle_for(&last), 1);
        drop(take(&last));
        assert_eq!(idle_for(&last), 0);
    }

    #[test]
    fn a_client_is_kept_only_when_released_with_its_answer_read_and_no_failure() {
        let _turn = serial();
        let settle = |answer_held: bool, answer_done: bool, failed: bool, released: bool| {
            let key = format!(
                "http://kept.test/settle-{answer_held}{answer_done}{failed}{released}.git\ns"
            );
            let mut slot = Slot {
                key: key.clone(),
                remote: Some(Remote::default()),
                request: 1,
                answer_held,
                answer_done,
                failed,
                released,
            };
            slot.give_back_when_ready();
            idle_for(&key) == 1
        };
        assert!(settle(false, true, false, true));
        assert!(!settle(true, false, false, true), "an answer still held");
        assert!(!settle(false, false, false, true), "an answer left unread");
        assert!(!settle(false, true, true, true), "a failed request");
        assert!(!settle(false, true, false, false), "still in use");
    }
}
