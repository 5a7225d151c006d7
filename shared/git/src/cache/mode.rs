//! How the request caches of a remote fetch ([`FetchMode`]), found on the first fetch from it
//! and remembered for the life of the process.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use crate::plumbing::fetchpack::NotOffered;

/// How the request caches of a remote fetch: decided on the first fetch from it in this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FetchMode {
    /// Protocol v2 with `filter`: commits and trees first, blobs by id when read.
    Partial,
    /// Whole trees through gix's fetch (protocol v0/v1, or v2 without `filter`).
    Whole,
}

fn fetch_modes() -> &'static Mutex<HashMap<String, FetchMode>> {
    static MODES: OnceLock<Mutex<HashMap<String, FetchMode>>> = OnceLock::new();
    MODES.get_or_init(Default::default)
}

/// The fetch mode found for the remote `url`, if any request found it yet.
pub(super) fn fetch_mode(url: &str) -> Option<FetchMode> {
    fetch_modes()
        .lock()
        .ok()
        .and_then(|modes| modes.get(url).copied())
}

/// Records the fetch mode of `url`; the first time it is [`FetchMode::Whole`], says why at info
/// (once per remote and process).
pub(super) fn set_fetch_mode(url: &str, mode: FetchMode, why: Option<&NotOffered>) {
    let Ok(mut modes) = fetch_modes().lock() else {
        return;
    };
    if modes.insert(url.to_owned(), mode) != Some(mode) && mode == FetchMode::Whole {
        let why = why.map(ToString::to_string).unwrap_or_default();
        tracing::info!(remote = %url, reason = %why, "the git server offers no partial fetch (protocol v2 with filter): cold reads fetch whole trees");
    }
}
