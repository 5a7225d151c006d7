//! Every read of a cache starts here: list the remote's tips (the authorization check), then
//! fetch what the cache lacks with the strategy the remote allows, remembered per process
//! ([`FetchMode`]): partial (`partial.rs`; the history cache: `blobless.rs`) or whole trees
//! (`whole.rs`).

use std::cell::Cell;
use std::collections::HashMap;

use gitstate_core::StoreError;
use gix::ObjectId;

use super::mode::{fetch_mode, fetches_partially, set_fetch_mode, FetchMode};
use super::{Cache, FETCHED};
use gitstate_wire::fetchpack::{NotOffered, UploadPack};
use gitstate_wire::sessions;
use gitstate_wire::transport::{closed_before_answer, Endpoint};

use crate::errors::from_wire;
use crate::repeat::{repeated, Step};

impl Cache {
    /// Asks the remote for the current tips of `names` (one ref advertisement: the authorization
    /// check) and fetches those missing from the cache (shallow, unless this is the history
    /// cache). Returns the tips of the refs that exist. A name ending in `*` stands for every
    /// ref it is a prefix of (e.g. `refs/heads/locks/*`).
    pub fn refresh(
        &self,
        endpoint: &Endpoint,
        names: &[&str],
    ) -> Result<HashMap<String, ObjectId>, StoreError> {
        self.refresh_reading(endpoint, names, &|_| Vec::new())
    }

    /// [`Cache::refresh`], and then makes sure the blobs at the paths `files(name)` of each tip
    /// found are in the cache, fetching those missing over the same session, level by level
    /// (a partial cache has the trees of its tips, and only the blobs something read).
    pub fn refresh_reading(
        &self,
        endpoint: &Endpoint,
        names: &[&str],
        files: &dyn Fn(&str) -> Vec<String>,
    ) -> Result<HashMap<String, ObjectId>, StoreError> {
        // Another process sharing the cache directory may hold its `shallow.lock` for the
        // duration of a fetch; gix then fails at once. Wait for it a little, bounded.
        FETCHED.with(|f| f.set(false));
        let mut attempt = 0u32;
        loop {
            // A read changes nothing on the server: its connection broken, it goes again.
            let once = repeated(endpoint.timeout, Step::Fetch, || {
                self.refresh_once(endpoint, names, files)
            })?;
            match once {
                Some(tips) => {
                    let result = if FETCHED.with(Cell::get) {
                        "miss"
                    } else {
                        "hit"
                    };
                    metrics::counter!(gitstate_core::metrics::CACHE_READS, "result" => result)
                        .increment(1);
                    return Ok(tips);
                }
                None if attempt < 100 => {
                    attempt += 1;
                    std::thread::sleep(std::time::Duration::from_millis(
                        10 + u64::from(attempt.min(10)) * 5,
                    ));
                }
                None => {
                    return Err(StoreError::Unavailable(format!(
                        "the cache {} stayed locked by another process",
                        self.dir.display()
                    )))
                }
            }
        }
    }

    /// One attempt of [`Cache::refresh_reading`]; `None` when the cache was locked by another
    /// process.
    ///
    /// A request cache fetches partially (protocol v2 with `filter`: a new tip with its root
    /// tree, then the trees and blobs on the paths read, by id; see `partial.rs`) when the
    /// remote offers it, and the history cache without blobs (`blobless.rs`); otherwise whole
    /// trees through gix's fetch. Which one is decided on the first fetch from a remote in this
    /// process.
    fn refresh_once(
        &self,
        endpoint: &Endpoint,
        names: &[&str],
        files: &dyn Fn(&str) -> Vec<String>,
    ) -> Result<Option<HashMap<String, ObjectId>>, StoreError> {
        let prefixes: Vec<&str> = names
            .iter()
            .map(|n| n.strip_suffix('*').unwrap_or(n))
            .collect();
        if self.shallow && fetches_partially(&endpoint.display) {
            // Over HTTP a session kept from an earlier request needs no new capability
            // advertisement: a warm read is one request (`ls-refs`, with this request's
            // credentials: the authorization check).
            if let Some(mut session) = sessions::take(endpoint) {
                match session.ls_refs(&prefixes) {
                    Ok(listed) => {
                        match self.refresh_partial(session, endpoint, names, listed, files) {
                            // A fetch on another of the session's kept connections, which the
                            // server closed while it was idle (its keep-alive timeout): a read
                            // changes nothing, so it goes again on a new session.
                            Err(e) if matches!(&e, StoreError::Unavailable(text) if closed_before_answer(text)) =>
                            {
                                tracing::info!(error = %e, "a kept connection was closed before the git server answered; reading again on a new session");
                                metrics::counter!(gitstate_wire::metrics::GIT_CONNECTIONS_RENEWED)
                                    .increment(1);
                            }
                            done => return done,
                        }
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "a kept protocol-v2 session failed; opening a new one")
                    }
                }
            }
        }
        if !self.shallow && fetches_partially(&endpoint.display) {
            return self.refresh_blobless(endpoint, names, &prefixes).map(Some);
        }
        if !matches!(
            fetch_mode(&endpoint.display),
            Some(FetchMode::Whole | FetchMode::WholeById)
        ) {
            if let Some(mut session) = partial_session(endpoint)? {
                if !self.shallow {
                    sessions::keep(endpoint, session);
                    return self.refresh_blobless(endpoint, names, &prefixes).map(Some);
                }
                let listed = session.ls_refs(&prefixes).map_err(from_wire)?;
                return self.refresh_partial(session, endpoint, names, listed, files);
            }
        }
        self.refresh_whole(endpoint, names)
    }
}

/// The first contact with `endpoint` in this process: a protocol-v2 session, and the decision how
/// every cache of it fetches. The session when the server offers partial fetch (`filter` and
/// `shallow`); otherwise `None`, and the remote is fetched whole from now on (logged once, with
/// the reason), objects by id still over protocol v2 where the server speaks it.
pub(super) fn partial_session(endpoint: &Endpoint) -> Result<Option<UploadPack>, StoreError> {
    let (mode, why) = match UploadPack::connect(endpoint).map_err(from_wire)? {
        Ok(session) if session.offers("filter") && session.offers("shallow") => {
            set_fetch_mode(&endpoint.display, FetchMode::Treeless, None);
            return Ok(Some(session));
        }
        Ok(session) => {
            let why = if session.offers("shallow") {
                NotOffered::Feature("filter")
            } else {
                NotOffered::Feature("shallow")
            };
            session.finish();
            (FetchMode::WholeById, why)
        }
        Err(why) => (FetchMode::Whole, why),
    };
    set_fetch_mode(
        &endpoint.display,
        mode,
        Some(&why as &dyn std::fmt::Display),
    );
    Ok(None)
}
