//! The rules of the Terraform `http` backend protocol (DESIGN §2), independent of HTTP and git:
//! lock checks, idempotent replays, force-unlock, and the contention retry loop for writes.
//!
//! This file holds the [`Backend`], its errors and the reads; `write.rs` the read-then-write loop
//! of `POST` and `DELETE`, `checks.rs` the replay and state-guard checks, `locks.rs` `LOCK` and
//! `UNLOCK`, `migrate.rs` re-sealing what is stored.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rand::Rng;

use crate::lock::LockInfoError;
use crate::path::StatePath;
use crate::seal::{Opener, Place, SealError, Sealer};
use crate::store::{Revision, StateStore, StoreError};
use gitstate_statefile::{CheckedState, StateError};

/// Default largest accepted state, in bytes.
pub const DEFAULT_MAX_STATE_BYTES: usize = 512 * 1024 * 1024;

/// How often and how patiently a write is retried when another write moved the state branch.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Attempts in all (the first one included).
    pub attempts: u32,
    /// How long a write keeps trying in all; past it, the write answers "busy" (503).
    pub budget: Duration,
    /// Upper bound of the first back-off; doubles per attempt up to `max_delay`. Each sleep is a uniformly random fraction of the bound (full jitter), so
    /// contending writers spread out.
    pub base_delay: Duration,
    /// Cap of one back-off.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        // Bounded by time rather than by a count: with several servers on one remote a write
        // lost up to 39 times in a row under bursts, and 40 attempts ended in a 503 (measured,
        // docs/BENCHMARKS.md). Shorter back-offs were tried and made it worse (more collisions).
        RetryPolicy {
            attempts: 400,
            budget: Duration::from_secs(30),
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(400),
        }
    }
}

/// The one back-off of every retry after a lost compare-and-swap (a request's write, a queue's
/// batch): a uniformly random pause up to `base · 2^doublings`, capped at `cap` (full jitter),
/// so that contending writers spread out.
pub fn full_jitter(base: Duration, cap: Duration, doublings: u32) -> Duration {
    let bound = base.saturating_mul(1u32 << doublings.min(16)).min(cap);
    let nanos = bound.as_nanos().min(u64::MAX as u128) as u64;
    Duration::from_nanos(rand::rng().random_range(0..=nanos))
}

impl RetryPolicy {
    /// Sleeps before attempt `attempt + 1`; `false` when the attempts are spent or the pause
    /// would reach `deadline`.
    async fn back_off(&self, attempt: u32, deadline: Instant) -> bool {
        if attempt + 1 >= self.attempts || Instant::now() >= deadline {
            return false;
        }
        let pause = full_jitter(self.base_delay, self.max_delay, attempt);
        if Instant::now() + pause >= deadline {
            return false;
        }
        tokio::time::sleep(pause).await;
        true
    }

    /// The deadline of a write that starts now: its budget, or `limit` when that comes first.
    fn deadline(&self, started: Instant, limit: Option<Instant>) -> Instant {
        let own = started + self.budget;
        limit.map_or(own, |limit| limit.min(own))
    }
}

/// A protocol-level failure. The HTTP layer gives each variant one status code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// Malformed input (400).
    #[error("{0}")]
    BadRequest(String),
    /// The caller's credential does not admit this (401): an expired OIDC token outside the
    /// lock it took.
    #[error("{0}")]
    Unauthenticated(String),
    /// The state is locked by someone else (423); the body is the holder's LockInfo as stored.
    #[error("the state is locked by another client")]
    Locked(Bytes),
    /// The body is over the configured maximum (413).
    #[error("the state is {} bytes, over the configured maximum of {max} bytes{}", size.map_or_else(|| "more than that".to_owned(), |s| s.to_string()), advice.as_deref().map(|a| format!("; {a}")).unwrap_or_default())]
    TooLarge {
        /// Size received (`None`: more than the maximum, not read to its end).
        size: Option<u64>,
        /// Configured maximum.
        max: usize,
        /// What to do instead, when the deployment says.
        advice: Option<String>,
    },
    /// The write would replace the stored state with another state's (a different lineage) or
    /// an older one (a lower serial, or the same serial with other content): the state guard
    /// refuses it (409); the sentence names both values and how to force it.
    #[error("{0}")]
    Conflict(String),
    /// A write under the caller's own lock ([`Caller::sealed_by`]) while no lock is held (409):
    /// the sentence says what to lock first.
    #[error("{0}")]
    NotLocked(String),
    /// What was asked for does not exist (404), e.g. a version that is not in the history.
    #[error("{0}")]
    NotFound(String),
    /// The write's time ran out (its retry budget, or the request's deadline) before it could be
    /// made; nothing was written (503 with `Retry-After`).
    #[error("the repository is busy ({why}), and nothing was written after {attempts} attempt(s) in {:.1} s; Terraform retries this 503 by itself (retry_max of the http backend), or run the command again", *waited_ms as f64 / 1000.0)]
    Busy {
        /// What ran out.
        why: String,
        /// Attempts made (reads of the branch).
        attempts: u32,
        /// Milliseconds since the request started writing.
        waited_ms: u64,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Sealing or opening the stored state failed.
    #[error(transparent)]
    Seal(#[from] SealError),
}

impl From<LockInfoError> for BackendError {
    fn from(e: LockInfoError) -> Self {
        BackendError::BadRequest(e.to_string())
    }
}

impl From<StateError> for BackendError {
    fn from(e: StateError) -> Self {
        BackendError::BadRequest(e.to_string())
    }
}

/// The protocol service. Cheap to clone; holds only policy.
#[derive(Debug, Clone)]
pub struct Backend {
    /// Contention retries for writes.
    pub retry: RetryPolicy,
    /// Largest state accepted.
    pub max_state_bytes: usize,
    /// Encryption at rest; `None` stores states exactly as POSTed.
    pub sealer: Option<Arc<dyn Sealer>>,
    /// A format read but never written (terraform-backend-git's legacy aes, with the configured
    /// passphrase): tried first on every stored file read; what it opens is plaintext to the
    /// rest of the protocol, so the next write seals it with `sealer` (or stores it plain).
    pub legacy: Option<Arc<dyn Opener>>,
    /// What to do instead when a state is over `max_state_bytes` (ends the 413 sentence), e.g.
    /// the Lambda deployment points to the standalone server.
    pub size_advice: Option<String>,
    /// The state guard: a POST may not replace the stored state with another lineage or an
    /// older serial (409), unless the request says `force` or the repository opts out
    /// ([`StateStore::guards_states`]).
    pub state_guard: bool,
}

impl Default for Backend {
    fn default() -> Self {
        Backend {
            retry: RetryPolicy::default(),
            max_state_bytes: DEFAULT_MAX_STATE_BYTES,
            sealer: None,
            legacy: None,
            size_advice: None,
            state_guard: true,
        }
    }
}

/// What a write proposes: the new state as its one check read it (`None`: delete it), and
/// which of the state guard's rules apply to it.
struct Proposal<'a> {
    content: Option<&'a CheckedState>,
    guard: checks::Guard,
}

/// A write that made a commit: the commit, and the writer its message names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The new commit.
    pub commit: Revision,
    /// Who the commit message names: the lock holder's `Who`, else the caller.
    pub who: String,
}

/// Who asked, for commit messages when no lock names the writer.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    /// A name for commit messages: the basic-auth user, or empty.
    pub name: String,
    /// When the request must be answered by (on Lambda: the invocation's deadline minus a
    /// margin); a write gives up at the earlier of this and its retry budget (DESIGN §9.3).
    pub deadline: Option<std::time::Instant>,
    /// `?force=true`: this write skips the state guard (`terraform state push -force` through
    /// a forcing address).
    pub force: bool,
    /// The caller's OIDC token (its mark), when it presented one: a lock it takes is sealed with
    /// it; once expired, it is admitted only under that lock ([`crate::LockToken`]).
    pub token: Option<crate::lock_token::LockToken>,
    /// The workspace API's state version: the write goes only under the lock this credential
    /// sealed ([`crate::LockToken::holds`], DESIGN §10), whatever its ID, and begins from the
    /// store's memory as a write naming its lock ID does. Not locked is
    /// [`BackendError::NotLocked`]; another holder's lock, [`BackendError::Locked`]. The state
    /// guard applies within the stored state's lineage only (`backend/checks.rs`, `Guard`).
    pub sealed_by: Option<crate::lock_token::LockToken>,
}

/// How messages name a writer without a name (the commit is then the committer's).
const ANONYMOUS: &str = "anonymous";

impl Caller {
    fn display(&self) -> &str {
        if self.name.is_empty() {
            ANONYMOUS
        } else {
            &self.name
        }
    }
}

impl Backend {
    /// `GET`: the state bytes, or `None` when there is no state. A caller with an expired OIDC
    /// `token` reads only while the lock it took is held (Terraform reads the state back before
    /// its first write).
    pub async fn get(
        &self,
        store: &dyn StateStore,
        path: &StatePath,
        token: Option<&crate::lock_token::LockToken>,
    ) -> Result<Option<Bytes>, BackendError> {
        let at = Place::new(store.repository(), path);
        // Only an expired token's read depends on the lock: any other reads the state alone.
        let state = match token {
            Some(token) if token.expired => {
                let snapshot = store.snapshot(path).await?;
                if !crate::lock_token::LockToken::admits(
                    Some(token),
                    &at,
                    snapshot.lock.as_deref(),
                    snapshot.lock_token.as_deref(),
                ) {
                    return Err(BackendError::from_expired_token());
                }
                snapshot.state
            }
            _ => store.current_state(path).await?,
        };
        match state {
            Some(stored) => Ok(Some(self.open_stored(&at, stored).await?)),
            None => Ok(None),
        }
    }

    /// The state held in `stored` at `at`: opened by the sealer when there is one, and never a
    /// file that is still sealed (a sops document without a key here, a binary file), which is
    /// refused with the keys it needs ([`crate::seal::refuse_sealed`]).
    ///
    /// With a legacy [`Opener`] (terraform-backend-git's aes passphrase), a file it opens is
    /// plaintext from here on; a file it does not open goes on unchanged, and is served only
    /// when it is JSON (terraform-backend-git passed such files through as well).
    pub async fn open_stored(&self, at: &Place, stored: Bytes) -> Result<Bytes, BackendError> {
        let (stored, _) = self.open_legacy(stored).await;
        let state = match &self.sealer {
            Some(sealer) => sealer.open(at, stored).await?,
            None => stored,
        };
        self.refuse_sealed(at, &state)?;
        Ok(state)
    }

    /// [`crate::seal::refuse_sealed`], with the sentence naming the legacy passphrase when one
    /// is configured and did not open the file.
    pub(crate) fn refuse_sealed(&self, at: &Place, state: &[u8]) -> Result<(), SealError> {
        crate::seal::refuse_sealed(at, state).map_err(|refused| match &self.legacy {
            Some(opener) if !crate::seal::is_sops_document(state) => SealError::NoKey {
                sentence: format!(
                    "the stored file at {at} is not JSON ({} bytes) and does not open as {} with {}, so it is not served as a state; it needs the passphrase it was written with",
                    state.len(),
                    opener.format(),
                    opener.key_source()
                ),
                why: None,
            },
            _ => refused,
        })
    }

    /// `stored` opened by the legacy [`Opener`] when there is one and it opens it (`true`), else
    /// `stored` as it is (`false`). Large files are decrypted off the async workers.
    pub(crate) async fn open_legacy(&self, stored: Bytes) -> (Bytes, bool) {
        const INLINE: usize = 1 << 20;
        let Some(opener) = &self.legacy else {
            return (stored, false);
        };
        let opened = if stored.len() <= INLINE {
            opener.open(&stored)
        } else {
            let (opener, input) = (opener.clone(), stored.clone());
            tokio::task::spawn_blocking(move || opener.open(&input))
                .await
                .ok()
                .flatten()
        };
        match opened {
            Some(plain) => (plain, true),
            None => (stored, false),
        }
    }

    /// The one rule on a state body's size: at most `max_state_bytes`, else 413.
    pub fn check_size(&self, size: u64) -> Result<(), BackendError> {
        if size > self.max_state_bytes as u64 {
            return Err(self.too_large(Some(size)));
        }
        Ok(())
    }

    /// The 413 of a state body of `size` bytes (`None`: it went on past the maximum, which is
    /// as far as an entrypoint reads).
    pub fn too_large(&self, size: Option<u64>) -> BackendError {
        BackendError::TooLarge {
            size,
            max: self.max_state_bytes,
            advice: self.size_advice.clone(),
        }
    }

    /// The one check of a state body to be written: the size rule, then what the body is
    /// ([`gitstate_statefile::check`], with the catalog's facts when `catalog`). The result
    /// travels with the body: [`Backend::post`] parses nothing again.
    pub fn check(&self, body: Bytes, catalog: bool) -> Result<CheckedState, BackendError> {
        self.check_size(body.len() as u64)?;
        Ok(gitstate_statefile::check(body, catalog)?)
    }
}

mod checks;
mod locks;
mod migrate;
mod write;

pub use locks::Acquired;
pub use migrate::{Migration, StoredForm};
pub(crate) use write::serialized;

#[cfg(test)]
mod tests;
