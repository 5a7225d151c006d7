//! The rules of the Terraform `http` backend protocol (DESIGN §2), independent of HTTP and git:
//! lock checks, idempotent replays, force-unlock, and the contention retry loop for writes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rand::Rng;

use crate::lock::{LockInfo, LockInfoError, Unlock, Unlocked};
use crate::path::StatePath;
use crate::seal::{Opener, Place, SealError, Sealer};
use crate::statefile::{StateError, StateFile};
use crate::store::{
    Intent, LockCreate, Revision, StateChange, StateStore, StoreError, WriteBudget,
};
use crate::text::escape_controls;

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

impl RetryPolicy {
    /// Sleeps before attempt `attempt + 1`; `false` when the attempts are spent or the pause
    /// would reach `deadline`.
    async fn back_off(&self, attempt: u32, deadline: Instant) -> bool {
        if attempt + 1 >= self.attempts || Instant::now() >= deadline {
            return false;
        }
        let bound = self
            .base_delay
            .saturating_mul(1u32 << attempt.min(16))
            .min(self.max_delay);
        let nanos = bound.as_nanos().min(u64::MAX as u128) as u64;
        let pause = Duration::from_nanos(rand::rng().random_range(0..=nanos));
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
    /// The state is locked by someone else (423); the body is the holder's LockInfo as stored.
    #[error("the state is locked by another client")]
    Locked(Bytes),
    /// The body is over the configured maximum (413).
    #[error("the state is {size} bytes, over the configured maximum of {max} bytes{}", advice.as_deref().map(|a| format!("; {a}")).unwrap_or_default())]
    TooLarge {
        /// Size received.
        size: usize,
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
    /// What was asked for does not exist (404), e.g. a version that is not in the history.
    #[error("{0}")]
    NotFound(String),
    /// The write's time ran out (its retry budget, or the request's deadline) before it could be
    /// made; nothing was written (503 with `Retry-After`).
    #[error("the repository is busy: {why}; nothing was written (after {attempts} attempt(s) in {:.1} s), and Terraform retries this 503 by itself (retry_max of the http backend), or run the command again", *waited_ms as f64 / 1000.0)]
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

/// What a write proposes: the new state (`None`: delete it), with the header the state guard
/// checks it by (`None`: the guard does not apply).
struct Proposal {
    content: Option<Bytes>,
    guard: Option<StateFile>,
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
}

impl Caller {
    fn display(&self) -> &str {
        if self.name.is_empty() {
            "anonymous"
        } else {
            &self.name
        }
    }
}

impl Backend {
    /// `GET`: the state bytes, or `None` when there is no state.
    pub async fn get(
        &self,
        store: &dyn StateStore,
        path: &StatePath,
    ) -> Result<Option<Bytes>, BackendError> {
        match store.snapshot(path).await?.state {
            Some(stored) => {
                let at = Place::new(store.repository(), path);
                Ok(Some(self.open_stored(&at, stored).await?))
            }
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
            Some(opener) if !crate::seal::is_sops_document(state) => SealError::NoKey(format!(
                "the stored file at {at} is not JSON ({} bytes) and does not open as {} with {}, so it is not served as a state; it needs the passphrase it was written with",
                state.len(),
                opener.format(),
                opener.key_source()
            )),
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

    /// Whether `stored` already holds `content`: the same bytes, or (when sealing) a document
    /// the sealer opens to the same state. A replay must not make a commit.
    async fn holds(
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

    /// `POST`: stores `body` as the state unless another client holds the lock, and returns the
    /// new commit and its writer. A body equal to what is stored is a success without a commit
    /// (`None`), so client retries are safe.
    pub async fn post(
        &self,
        store: &dyn StateStore,
        path: &StatePath,
        body: Bytes,
        lock_id: Option<&str>,
        caller: &Caller,
    ) -> Result<Option<Written>, BackendError> {
        if body.len() > self.max_state_bytes {
            return Err(BackendError::TooLarge {
                size: body.len(),
                max: self.max_state_bytes,
                advice: self.size_advice.clone(),
            });
        }
        let file = crate::statefile::read(&body)?;
        let message_serial = file.serial;
        let guarded = (self.state_guard && store.guards_states() && !caller.force).then_some(file);
        self.write(
            store,
            path,
            Proposal {
                content: Some(body),
                guard: guarded,
            },
            lock_id,
            caller,
            move |who| match message_serial {
                Some(serial) => format!("Update {path} (serial {serial}) by {who}"),
                None => format!("Update {path} by {who}"),
            },
        )
        .await
    }

    /// `DELETE`: removes the state file in a commit (returned with its writer); same lock rules
    /// as `POST`.
    /// Deleting a state that does not exist succeeds without a commit.
    pub async fn delete(
        &self,
        store: &dyn StateStore,
        path: &StatePath,
        lock_id: Option<&str>,
        caller: &Caller,
    ) -> Result<Option<Written>, BackendError> {
        let deletion = Proposal {
            content: None,
            guard: None,
        };
        self.write(store, path, deletion, lock_id, caller, |who| {
            format!("Delete {path} by {who}")
        })
        .await
    }

    async fn write(
        &self,
        store: &dyn StateStore,
        path: &StatePath,
        proposal: Proposal,
        lock_id: Option<&str>,
        caller: &Caller,
        message: impl Fn(&str) -> String,
    ) -> Result<Option<Written>, BackendError> {
        let Proposal { content, guard } = proposal;
        let started = Instant::now();
        let deadline = self.retry.deadline(started, caller.deadline);
        let _serialized = serialized(store).await;
        let mut attempt = 0;
        // The holder of the lock may begin from the store's memory (one request to the remote,
        // the push confirming the state tip and the lock); whatever that memory alone would
        // answer (423, a replay, the guard's 409, a lost push) is decided again on a fresh read.
        let mut recall = lock_id.is_some();
        loop {
            let intent = if recall {
                Intent::HeldWrite
            } else {
                Intent::Write
            };
            // One session: the read and the compare-and-swap push share one remote check.
            let session = self
                .begin_write(store, path, intent, (&mut attempt, started, deadline))
                .await?;
            let recalled = session.recalled();
            let snapshot = session.snapshot();
            // The writer's name goes into the commit message: escaped, so it stays one line.
            let mut who = escape_controls(caller.display()).into_owned();
            match &snapshot.lock {
                Some(lock) => {
                    let holder = LockInfo::stored(lock);
                    if holder.admits(lock_id) {
                        if !holder.who.is_empty() {
                            who = escape_controls(&holder.who).into_owned();
                        }
                    } else if recalled {
                        recall = false;
                        continue;
                    } else {
                        return Err(BackendError::Locked(lock.clone()));
                    }
                }
                None if recalled => {
                    recall = false;
                    continue;
                }
                None => {}
            }
            let at = Place::new(store.repository(), path);
            if self.holds(&at, &snapshot.state, &content).await? {
                if recalled {
                    recall = false;
                    continue;
                }
                return Ok(None);
            }
            if let (Some(incoming), Some(stored), Some(body)) = (&guard, &snapshot.state, &content)
            {
                match self.check_guard(&at, stored, body, incoming).await {
                    Err(BackendError::Conflict(_)) if recalled => {
                        recall = false;
                        continue;
                    }
                    checked => checked?,
                }
            }
            let change = match (&content, &self.sealer) {
                (Some(bytes), Some(sealer)) => {
                    StateChange::Write(sealer.seal(&at, bytes.clone()).await?)
                }
                (Some(bytes), None) => StateChange::Write(bytes.clone()),
                (None, _) => StateChange::Delete,
            };
            let timing = (&mut attempt, started, deadline);
            let message = message(&who);
            // A recalled session that lost goes again at once, on a fresh read.
            recall = false;
            if let Some(revision) = self
                .push_attempt(session, change, &message, "write", timing)
                .await?
            {
                tracing::info!(%path, %revision, attempt, recalled, "state written");
                return Ok(Some(Written {
                    commit: revision,
                    who,
                }));
            }
        }
    }

    /// The read of one attempt of a read-then-write loop (a write, a migration): a write session
    /// on `path`, begun again (after the retry policy's pause, within the deadline) while the
    /// refs move under the read; [`BackendError::Busy`] when the read itself outlasts the
    /// deadline.
    pub(crate) async fn begin_write<'a>(
        &self,
        store: &'a dyn StateStore,
        path: &StatePath,
        intent: Intent,
        (attempt, started, deadline): (&mut u32, Instant, Instant),
    ) -> Result<Box<dyn crate::store::WriteSession + 'a>, BackendError> {
        loop {
            // The read writes nothing, so it may be abandoned when the time runs out: on Lambda
            // the answer must leave before the invocation's deadline, however slow the remote.
            let begun = tokio::time::timeout_at(deadline.into(), store.begin(path, intent));
            let Ok(begun) = begun.await else {
                return Err(busy_error(
                    "reading the state branch took all of this write's time, before anything was pushed",
                    *attempt + 1,
                    started,
                ));
            };
            match begun {
                Ok(session) => return Ok(session),
                Err(StoreError::Stale) => self.retry_or_busy(attempt, started, deadline).await?,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The push of one attempt of a read-then-write loop (a write, a migration): refused when
    /// the time ran out, else pushed within the budget. `Ok(None)` when it lost to another
    /// writer: the loop reads again (after the retry policy's pause).
    pub(crate) async fn push_attempt(
        &self,
        mut session: Box<dyn crate::store::WriteSession + '_>,
        change: StateChange,
        message: &str,
        what: &str,
        (attempt, started, deadline): (&mut u32, Instant, Instant),
    ) -> Result<Option<Revision>, BackendError> {
        if Instant::now() >= deadline {
            return Err(busy_error(
                &format!("this {what}'s time ran out before it could be pushed"),
                *attempt + 1,
                started,
            ));
        }
        session.set_budget(WriteBudget {
            since: started,
            deadline,
        });
        let recalled = session.recalled();
        match session.update_state(change, message).await {
            Ok(revision) => Ok(Some(revision)),
            // Begun from the store's memory: nobody else's push is implied, read again at once.
            Err(StoreError::Stale) if recalled => Ok(None),
            Err(StoreError::Stale) => {
                tracing::debug!(
                    attempt = *attempt,
                    "the state, its lock or the branch moved; reading again"
                );
                self.retry_or_busy(attempt, started, deadline).await?;
                Ok(None)
            }
            Err(StoreError::Busy(why)) => Err(busy_error(&why, *attempt + 1, started)),
            Err(e) => Err(e.into()),
        }
    }

    /// The state guard: `incoming` (the summary of `body`) may replace the state stored at `at`
    /// only when it continues it: the same lineage, and a higher serial (or the same serial with
    /// the same content, a replay). A stored state that cannot be read (no serial or lineage, or
    /// not openable here) does not guard anything: the write replaces it as before.
    async fn check_guard(
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

    /// After a lost compare-and-swap: waits for the next attempt and counts it, or answers
    /// [`BackendError::Busy`] when the retry policy is spent.
    async fn retry_or_busy(
        &self,
        attempt: &mut u32,
        started: Instant,
        deadline: Instant,
    ) -> Result<(), BackendError> {
        if self.retry.back_off(*attempt, deadline).await {
            metrics::counter!(crate::metrics::WRITE_RETRIES).increment(1);
            *attempt += 1;
            Ok(())
        } else {
            Err(busy_error(
                "other writers kept moving the state branch until this write's time ran out",
                *attempt + 1,
                started,
            ))
        }
    }

    /// `LOCK`: creates the lock branch. The same ID locking again succeeds (retries are safe);
    /// another holder gets [`BackendError::Locked`] with its LockInfo. Answers the LockInfo as
    /// read (the body itself is what is stored).
    pub async fn lock(
        &self,
        store: &dyn StateStore,
        path: &StatePath,
        body: Bytes,
    ) -> Result<LockInfo, BackendError> {
        let info = LockInfo::parse(&body)?;
        let who = if info.who.is_empty() {
            "unknown"
        } else {
            &info.who
        };
        // Every caller-chosen field is escaped: the subject stays one line, no trailer can be added.
        let message = format!(
            "Lock {path}: {} by {} ({})",
            escape_controls(&info.operation),
            escape_controls(who),
            escape_controls(&info.id)
        );
        match store.create_lock(path, body, &message).await? {
            LockCreate::Created => {
                metrics::counter!(crate::metrics::LOCK_ACQUISITIONS).increment(1);
                metrics::gauge!(crate::metrics::LOCKS_HELD).increment(1.0);
                tracing::info!(%path, lock_id = %escape_controls(&info.id), "lock acquired");
                Ok(info)
            }
            LockCreate::Held { content, .. } => {
                if LockInfo::stored(&content).is_held_by(&info.id) {
                    Ok(info)
                } else {
                    record_lock_age(&content, "conflict");
                    Err(BackendError::Locked(content))
                }
            }
        }
    }

    /// `UNLOCK`: releases the lock as `request` asks ([`Unlock`]: only while its ID holds it, or
    /// whatever lock is held for a force-unlock). Not locked is a success. Answers what the
    /// release was ([`Unlock::answer`]).
    pub async fn unlock(
        &self,
        store: &dyn StateStore,
        path: &StatePath,
        request: &Unlock,
    ) -> Result<Unlocked, BackendError> {
        let answer = request.answer();
        let started = Instant::now();
        let deadline = self.retry.deadline(started, None);
        let mut attempt = 0;
        // First from what the store remembers of the lock it wrote (the common case: the holder
        // releases what it took through this deployment), then, after any doubt, from a fresh
        // read.
        let mut intent = Intent::Release;
        loop {
            let session = match store.begin(path, intent).await {
                Ok(session) => session,
                Err(StoreError::Stale) => {
                    intent = Intent::Unlock;
                    self.retry_or_busy(&mut attempt, started, deadline).await?;
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let recalled = session.recalled();
            let Some(content) = &session.snapshot().lock else {
                if recalled {
                    intent = Intent::Unlock;
                    continue;
                }
                return Ok(answer);
            };
            if let Some(id) = request.required_id() {
                if !LockInfo::stored(content).is_held_by(id) {
                    if recalled {
                        intent = Intent::Unlock;
                        continue;
                    }
                    return Err(BackendError::Locked(content.clone()));
                }
            }
            let held = content.clone();
            match session.delete_lock().await {
                Ok(()) => {
                    record_lock_age(&held, "release");
                    metrics::counter!(crate::metrics::LOCK_RELEASES).increment(1);
                    metrics::gauge!(crate::metrics::LOCKS_HELD).decrement(1.0);
                    tracing::info!(%path, force = answer.force, "lock released");
                    return Ok(answer);
                }
                Err(StoreError::Stale) => {
                    intent = Intent::Unlock;
                    self.retry_or_busy(&mut attempt, started, deadline).await?
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// Records the age of the lock whose LockInfo is `content` (nothing when its `Created` is not
/// an RFC 3339 time, as in a lock written by hand).
fn record_lock_age(content: &[u8], event: &'static str) {
    let created = crate::time::parse_rfc3339(&LockInfo::stored(content).created);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64);
    if let (Some(created), Ok(now)) = (created, now) {
        metrics::histogram!(crate::metrics::LOCK_AGE_SECONDS, "event" => event)
            .record((now - created).max(0) as f64);
    }
}

/// The store's write serializer held for one write (a local repository's; `None` for the
/// others: DESIGN §9.2).
pub(crate) async fn serialized(store: &dyn StateStore) -> Option<tokio::sync::OwnedMutexGuard<()>> {
    match store.write_serializer() {
        Some(mutex) => Some(mutex.lock_owned().await),
        None => None,
    }
}

/// The 503 of a write whose time ran out (nothing was written).
fn busy_error(why: &str, attempts: u32, started: Instant) -> BackendError {
    BackendError::Busy {
        why: why.to_owned(),
        attempts,
        waited_ms: started.elapsed().as_millis().min(u64::MAX as u128) as u64,
    }
}

mod migrate;
pub use migrate::{Migration, StoredForm};

#[cfg(test)]
mod tests;
