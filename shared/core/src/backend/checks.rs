//! What a write must not do to the state it replaces: make a commit for a replay (the stored
//! state already holds the body), or replace another lineage or a newer serial (the state
//! guard, DESIGN §4).

use bytes::Bytes;

use super::{Backend, BackendError};
use crate::seal::{Place, SealError};
use crate::statefile::StateFile;

impl Backend {
    /// The checks a write's read must pass before it is written, on one opening of the stored
    /// state: `Ok(true)` when it is a replay (the stored state already holds `content`: no
    /// commit), `Ok(false)` when it may be written, the guard's [`BackendError::Conflict`] when
    /// it must not replace what is stored (`guard`: the incoming body's summary, when the state
    /// guard applies).
    pub(super) async fn check_stored(
        &self,
        at: &Place,
        stored: &Option<Bytes>,
        content: &Option<Bytes>,
        guard: &Option<StateFile>,
    ) -> Result<bool, BackendError> {
        let (Some(stored), Some(body)) = (stored, content) else {
            return Ok(stored == content);
        };
        let Some(incoming) = guard else {
            return self.is_replay(at, stored, body).await;
        };
        // The guard reads the stored state: opened once, and the replay decided on it too.
        let opened = self.open_for_checks(at, stored).await?;
        if let Opened::Plain(plain) = &opened {
            if plain == body || crate::seal::same_json(plain, body) {
                return Ok(true);
            }
        }
        self.check_guard(at, &opened, body, incoming)?;
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
            Err(e @ SealError::Unavailable(_)) => Err(e.into()),
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
                Err(e @ SealError::Unavailable(_)) => return Err(e.into()),
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

    /// The state guard: `incoming` (the summary of `body`) may replace the state stored at `at`
    /// only when it continues it: the same lineage, and a higher serial (or the same serial with
    /// the same content, a replay). A stored state that cannot be read (no serial or lineage, or
    /// not openable here) does not guard anything: the write replaces it as before.
    fn check_guard(
        &self,
        at: &Place,
        stored: &Opened,
        body: &Bytes,
        incoming: &StateFile,
    ) -> Result<(), BackendError> {
        let (Opened::Plain(stored) | Opened::Legacy(stored)) = stored else {
            return Ok(());
        };
        let Ok(current) = crate::statefile::read(stored) else {
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
            (Some(was), Some(now)) if now == was && !crate::seal::same_json(stored, body) => {
                Err(BackendError::Conflict(format!(
                    "{} is at serial {was} already, with other content than this write of the same serial: nothing was written{force}",
                    at.path
                )))
            }
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
