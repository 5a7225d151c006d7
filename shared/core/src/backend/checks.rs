//! What a write must not do to the state it replaces: make a commit for a replay (the stored
//! state already holds the body), or replace another lineage or a newer serial (the state
//! guard, DESIGN §4).

use bytes::Bytes;

use super::{Backend, BackendError};
use crate::seal::{Place, SealError};
use crate::statefile::StateFile;

impl Backend {
    /// Whether `stored` already holds `content`: the same bytes, or (when sealing) a document
    /// the sealer opens to the same state. A replay must not make a commit.
    pub(super) async fn is_replay(
        &self,
        at: &Place,
        stored: &Option<Bytes>,
        content: &Option<Bytes>,
    ) -> Result<bool, BackendError> {
        let (Some(stored), Some(content), Some(sealer)) = (stored, content, &self.sealer) else {
            return Ok(stored == content);
        };
        // Asked even for equal bytes: a sealer that enforces sealing does not count plaintext
        // (or a document it did not seal) as holding anything, so the write replaces it.
        match sealer.holds(at, stored.clone(), content).await {
            Ok(held) => Ok(held),
            Err(e @ SealError::Unavailable(_)) => Err(e.into()),
            Err(e) => {
                // Unreadable (tampered, or no current key opens it): a full new state replaces it,
                // sealed under a fresh data key.
                tracing::warn!(path = %at.path, repository = %at.repository, error = %e, "the stored state cannot be opened; it will be replaced");
                Ok(false)
            }
        }
    }

    /// The state guard: `incoming` (the summary of `body`) may replace the state stored at `at`
    /// only when it continues it: the same lineage, and a higher serial (or the same serial with
    /// the same content, a replay). A stored state that cannot be read (no serial or lineage, or
    /// not openable here) does not guard anything: the write replaces it as before.
    pub(super) async fn check_guard(
        &self,
        at: &Place,
        stored: &Bytes,
        body: &Bytes,
        incoming: &StateFile,
    ) -> Result<(), BackendError> {
        let (stored, _) = self.open_legacy(stored.clone()).await;
        let stored = match &self.sealer {
            Some(sealer) => match sealer.open(at, stored).await {
                Ok(opened) => opened,
                Err(e @ SealError::Unavailable(_)) => return Err(e.into()),
                Err(_) => return Ok(()),
            },
            None => stored,
        };
        let Ok(current) = crate::statefile::read(&stored) else {
            return Ok(());
        };
        let force = "; if this is intended (terraform state push -force), send it to the address with ?force=true";
        if let (Some(was), Some(now)) = (&current.lineage, &incoming.lineage) {
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
            (Some(was), Some(now)) if now == was && !crate::seal::same_json(&stored, body) => {
                Err(BackendError::Conflict(format!(
                    "{} is at serial {was} already, with other content than this write of the same serial: nothing was written{force}",
                    at.path
                )))
            }
            _ => Ok(()),
        }
    }
}
