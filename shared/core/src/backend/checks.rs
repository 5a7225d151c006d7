//! What a write must not do to the state it replaces: make a commit for a replay (the stored
//! state already holds the body), or replace another lineage or a newer serial (the state
//! guard, DESIGN §4).

use bytes::Bytes;

use super::{Backend, BackendError};
use crate::seal::{Place, SealError};
use gitstate_statefile::{CheckedState, StateFile};

/// Which of the state guard's rules a write must pass (DESIGN §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Guard {
    /// None: `?force=true`, a repository without the guard, a delete.
    Off,
    /// All: the same lineage, and a higher serial (or a replay).
    Whole,
    /// Within the stored state's lineage only: a state of another lineage replaces it. The
    /// workspace API's state versions: Terraform's and OpenTofu's `state push` check the lineage
    /// themselves and let another one through only with `-force`, and their `cloud` clients send
    /// `force: false` even then, so the API cannot tell a forced push (DECISIONS "Workspaces").
    WithinLineage,
}

impl Backend {
    /// The checks a write's read must pass before it is written, on one opening of the stored
    /// state: `Ok(true)` when it is a replay (the stored state already holds `content`: no
    /// commit), `Ok(false)` when it may be written, the guard's [`BackendError::Conflict`] when
    /// it must not replace what is stored (`guard`: the state guard's rules that apply).
    pub(super) async fn check_stored(
        &self,
        at: &Place,
        stored: &Option<Bytes>,
        content: Option<&CheckedState>,
        guard: Guard,
    ) -> Result<bool, BackendError> {
        let (Some(stored), Some(incoming)) = (stored, content) else {
            return Ok(stored.is_none() && content.is_none());
        };
        let body = &incoming.body;
        if guard == Guard::Off {
            return self.is_replay(at, stored, body).await;
        }
        // The guard reads the stored state: opened once, read once, and the replay decided on
        // it too.
        let (plain, legacy) = match self.open_for_checks(at, stored).await? {
            Opened::Plain(plain) => (plain, false),
            Opened::Legacy(plain) => (plain, true),
            Opened::Unreadable => return Ok(false),
        };
        let current = gitstate_statefile::read(&plain).ok();
        // Equal JSON values have equal serials: only states of one serial are compared value by
        // value (a retry with other formatting), never every write.
        let same = plain == *body
            || (current
                .as_ref()
                .is_none_or(|c| c.serial == incoming.file.serial)
                && gitstate_statefile::same_json(&plain, body));
        // A legacy file is never a replay: the write stores it in today's format.
        if same && !legacy {
            return Ok(true);
        }
        self.check_guard(at, current.as_ref(), same, incoming, guard)?;
        Ok(false)
    }

    /// Whether `stored` already holds `content` (no guard to apply): the same bytes, or (when
    /// sealing) a document the sealer opens to the same state, which it may tell from a digest
    /// without opening it. A replay must not make a commit.
    async fn is_replay(
        &self,
        at: &Place,
        stored: &Bytes,
        content: &Bytes,
    ) -> Result<bool, BackendError> {
        let Some(sealer) = &self.sealer else {
            return Ok(stored == content);
        };
        // Asked even for equal bytes: a sealer that enforces sealing does not count plaintext
        // (or a document it did not seal) as holding anything, so the write replaces it.
        match sealer.holds(at, stored.clone(), content).await {
            Ok(held) => Ok(held),
            Err(e @ SealError::Unavailable { .. }) => Err(e.into()),
            Err(e) => {
                unreadable(at, &e);
                Ok(false)
            }
        }
    }

    /// The stored state opened for the checks: terraform-backend-git's legacy format first,
    /// then the sealer. A key service that cannot be reached is an error; a document that
    /// cannot be opened here is [`Opened::Unreadable`] (it guards nothing, and is replaced).
    async fn open_for_checks(&self, at: &Place, stored: &Bytes) -> Result<Opened, BackendError> {
        let (plain, legacy) = self.open_legacy(stored.clone()).await;
        let plain = match &self.sealer {
            Some(sealer) => match sealer.open(at, plain).await {
                Ok(opened) => opened,
                Err(e @ SealError::Unavailable { .. }) => return Err(e.into()),
                Err(e) => {
                    unreadable(at, &e);
                    return Ok(Opened::Unreadable);
                }
            },
            None => plain,
        };
        // A legacy file is never a replay: the write stores it in today's format.
        Ok(if legacy {
            Opened::Legacy(plain)
        } else {
            Opened::Plain(plain)
        })
    }

    /// The state guard: `incoming` may replace the state stored at `at` (`current`, as read;
    /// `same`: it holds the same JSON value) only when it continues it: the same lineage, and a
    /// higher serial (or the same serial with the same content, a replay). A stored state that
    /// cannot be read (no serial or lineage, or not openable here) does not guard anything: the
    /// write replaces it as before. With [`Guard::WithinLineage`], a state of another lineage
    /// replaces it too (its serials are not comparable).
    fn check_guard(
        &self,
        at: &Place,
        current: Option<&StateFile>,
        same: bool,
        incoming: &CheckedState,
        guard: Guard,
    ) -> Result<(), BackendError> {
        let incoming = &incoming.file;
        let Some(current) = current else {
            return Ok(());
        };
        let force = "; if this is intended (terraform state push -force), send it to the address with ?force=true";
        if let (Some(was), Some(now)) = (&current.lineage, &incoming.lineage) {
            if was != now && guard == Guard::WithinLineage {
                tracing::info!(path = %at.path, was = %was, now = %now, "a state of another lineage replaces the stored one (workspace API)");
                return Ok(());
            }
            if was != now {
                return Err(BackendError::Conflict(format!(
                    "{} holds the state of lineage {was}, and this write is of lineage {now}: it is another state, and nothing was written{force}",
                    at.path
                )));
            }
        }
        match (current.serial, incoming.serial) {
            (Some(was), Some(now)) if now < was => Err(BackendError::Conflict(format!(
                "{} is at serial {was}, and this write has the older serial {now}: nothing was written{force}",
                at.path
            ))),
            (Some(was), Some(now)) if now == was && !same => Err(BackendError::Conflict(format!(
                "{} is at serial {was} already, with other content than this write of the same serial: nothing was written{force}",
                at.path
            ))),
            _ => Ok(()),
        }
    }
}

/// The stored state as the checks read it, opened once per attempt.
enum Opened {
    /// Opened (or plaintext the sealer serves).
    Plain(Bytes),
    /// Opened from terraform-backend-git's legacy format.
    Legacy(Bytes),
    /// Not openable here (tampered, or no current key opens it).
    Unreadable,
}

/// Logs a stored state that cannot be opened: a full new state replaces it, sealed under a fresh
/// data key.
fn unreadable(at: &Place, e: &SealError) {
    tracing::warn!(path = %at.path, repository = %at.repository, error = %e, "the stored state cannot be opened; it will be replaced");
}
