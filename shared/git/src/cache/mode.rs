//! How the request caches of a remote fetch ([`FetchMode`]), found on the first fetch from it
//! and remembered for the life of the process.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// How the request caches of a remote fetch: decided on the first fetch from it in this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FetchMode {
    /// Protocol v2 with `filter`, tree filters allowed: a new tip comes with its root tree
    /// only (`filter tree:1`), and the trees and blob on a read's path by id (`filter tree:0`).
    Treeless,
    /// Protocol v2 with `filter`, but the server refuses tree filters (some forges allow only
    /// `blob:none`): a new tip comes with all its trees, blobs by id when read.
    Blobless,
    /// Whole trees through gix's fetch; protocol v2 without `filter` (git's default): an
    /// object named by id comes whole over a protocol-v2 session (the pending writes a leader
    /// folds, DESIGN §9.4).
    WholeById,
    /// Whole trees through gix's fetch, and nothing by id (protocol v0/v1).
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

/// Whether the request caches of `url` fetch partially (objects by id; [`FetchMode::Treeless`]
/// or [`FetchMode::Blobless`]).
pub(super) fn fetches_partially(url: &str) -> bool {
    matches!(
        fetch_mode(url),
        Some(FetchMode::Treeless | FetchMode::Blobless)
    )
}

/// Whether the request caches of `url` can fetch an object by id (every mode but
/// [`FetchMode::Whole`]): with a filter ([`fetches_partially`]) or whole.
pub(super) fn fetches_ids(url: &str) -> bool {
    matches!(
        fetch_mode(url),
        Some(FetchMode::Treeless | FetchMode::Blobless | FetchMode::WholeById)
    )
}

/// Records the fetch mode of `url`; the first time it is [`FetchMode::Whole`] or
/// [`FetchMode::Blobless`], says why at info (once per remote and process). A remote found to
/// refuse tree filters stays [`FetchMode::Blobless`].
pub(super) fn set_fetch_mode(url: &str, mode: FetchMode, why: Option<&dyn std::fmt::Display>) {
    let Ok(mut modes) = fetch_modes().lock() else {
        return;
    };
    let before = modes.get(url).copied();
    if before == Some(FetchMode::Blobless) && mode == FetchMode::Treeless {
        return;
    }
    modes.insert(url.to_owned(), mode);
    if before == Some(mode) {
        return;
    }
    let why = why.map(ToString::to_string).unwrap_or_default();
    match mode {
        FetchMode::Whole | FetchMode::WholeById => {
            tracing::info!(remote = %url, reason = %why, "the git server offers no partial fetch (protocol v2 with filter): cold reads fetch whole trees")
        }
        FetchMode::Blobless => {
            tracing::info!(remote = %url, reason = %why, "the git server refuses the tree filter: cold reads fetch every tree of the tip (filter blob:none)")
        }
        FetchMode::Treeless => {}
    }
}
