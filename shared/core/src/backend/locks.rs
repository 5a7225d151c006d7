//! `LOCK` and `UNLOCK`: the lock branch created atomically, released by its holder or by a
//! force-unlock, each safe to repeat.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use super::{Backend, BackendError};
use crate::commit::Message;
use crate::lock::{LockInfo, TakenOver, Unlock, Unlocked};
use crate::lock_token::LockToken;
use crate::path::StatePath;
use crate::seal::Place;
use crate::store::{ExpectedLock, Intent, LockCreate, StateStore, StoreError};
use crate::text::escape_controls;

impl Backend {
    /// `LOCK`: creates the lock branch. A path where no state could ever be written (a folder of
    /// it is a state or locked; it is a folder of states or of locks) is
    /// [`BackendError::Conflict`] with the [`crate::PathConflict`] sentence, and nothing is
    /// written. The same ID locking again succeeds (retries are safe);
    /// another holder gets [`BackendError::Locked`] with its LockInfo, unless the repository has
    /// a `lock_ttl` ([`StateStore::lock_ttl`]) and that lock has outlived it: then the old lock
    /// branch is deleted by compare-and-swap (only if it is still that lock) and the lock taken,
    /// and the answer says whose lock was taken over. Answers the LockInfo as read (the body
    /// itself is what is stored). With an OIDC `token` (or the workspace API's credential mark)
    /// the lock is sealed with the token's mark (a trailer of its commit, bound to this
    /// repository, path and lock ID), so that the same token may finish the run after it
    /// expires; an expired token takes no lock.
    pub async fn lock(
        &self,
        store: &dyn StateStore,
        path: &StatePath,
        body: Bytes,
        token: Option<&LockToken>,
    ) -> Result<Acquired, BackendError> {
        if token.is_some_and(|t| t.expired) {
            return Err(expired_token());
        }
        let info = LockInfo::parse(&body)?;
        let who = if info.who.is_empty() {
            "unknown"
        } else {
            &info.who
        };
        let message = lock_message(store, path, &info, token);
        let mut took_over = None;
        // A takeover deletes the expired lock, then creates ours: someone else may take the
        // lock in between (they then hold it), or the expired lock may change (it is looked at
        // again). Twice at most: a lock that keeps expiring and coming back is answered 423.
        let mut takeovers = 0;
        loop {
            match store.create_lock(path, body.clone(), &message).await? {
                LockCreate::Created => {
                    metrics::counter!(crate::metrics::LOCK_ACQUISITIONS).increment(1);
                    metrics::gauge!(crate::metrics::LOCKS_HELD).increment(1.0);
                    tracing::info!(%path, lock_id = %escape_controls(&info.id), "lock acquired");
                    return Ok(Acquired { info, took_over });
                }
                LockCreate::Unwritable(conflict) => {
                    tracing::info!(%path, %conflict, "lock refused: no state can be written at this path");
                    return Err(BackendError::Conflict(conflict.to_string()));
                }
                LockCreate::Held { tip, content } => {
                    let held = LockInfo::stored(&content);
                    if held.is_held_by(&info.id) {
                        return Ok(Acquired { info, took_over });
                    }
                    let expired = expired(store, &held).filter(|_| takeovers < 2);
                    let Some(expired) = expired else {
                        record_lock_age(&content, "conflict");
                        return Err(BackendError::Locked(content));
                    };
                    takeovers += 1;
                    match store.delete_lock(path, &tip).await {
                        Ok(()) => {
                            released(&content, "takeover");
                            tracing::warn!(
                                %path,
                                old_lock_id = %escape_controls(&expired.id),
                                old_who = %escape_controls(&expired.who),
                                age_secs = expired.age_secs,
                                new_lock_id = %escape_controls(&info.id),
                                new_who = %escape_controls(who),
                                "a lock older than the repository's lock_ttl was taken over (force-unlocked)"
                            );
                            took_over = Some(expired);
                        }
                        // Released or replaced meanwhile: looked at again.
                        Err(StoreError::Stale) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        }
    }

    /// `UNLOCK` with the body a client sent (Terraform's, OpenTofu's, or empty for a
    /// force-unlock): read here, as a LOCK's body is, then [`Backend::unlock`].
    pub async fn unlock_body(
        &self,
        store: &dyn StateStore,
        path: &StatePath,
        body: &[u8],
        token: Option<&LockToken>,
    ) -> Result<Unlocked, BackendError> {
        let request = Unlock::parse(body)?;
        // The holder's own LockInfo: its lock is what its LOCK wrote, made again here.
        let expected = match &request {
            Unlock::Holder(info) => Some(Arc::new(ExpectedLock {
                content: Bytes::copy_from_slice(body),
                message: lock_message(store, path, info, token),
            })),
            _ => None,
        };
        self.release(store, path, &request, token, expected).await
    }

    /// `UNLOCK`: releases the lock as `request` asks ([`Unlock`]: only while its ID holds it, or
    /// whatever lock is held for a force-unlock). Not locked is a success. Answers what the
    /// release was ([`Unlock::answer`]). A caller with an expired OIDC `token` may only release,
    /// as its holder, the lock it took. [`Unlock::Sealed`] releases the lock only while it is
    /// sealed by `token` (the workspace API's caller; another holder's lock is
    /// [`BackendError::Locked`]), from the store's memory first, as a holder's UNLOCK is.
    pub async fn unlock(
        &self,
        store: &dyn StateStore,
        path: &StatePath,
        request: &Unlock,
        token: Option<&LockToken>,
    ) -> Result<Unlocked, BackendError> {
        self.release(store, path, request, token, None).await
    }

    /// [`Backend::unlock`], beginning from the lock `expected` (the holder's UNLOCK: what its
    /// LOCK wrote) when there is one ([`Intent::ReleaseExpecting`]).
    async fn release(
        &self,
        store: &dyn StateStore,
        path: &StatePath,
        request: &Unlock,
        token: Option<&LockToken>,
        expected: Option<Arc<ExpectedLock>>,
    ) -> Result<Unlocked, BackendError> {
        let expired = token.is_some_and(|t| t.expired);
        let sealed = *request == Unlock::Sealed;
        if expired && request.required_id().is_none() && !sealed {
            return Err(expired_token());
        }
        let mut answer = request.answer();
        let started = Instant::now();
        let deadline = self.retry.deadline(started, None);
        let mut attempts = 0;
        // First from what the store remembers of the lock it wrote (the common case: the holder
        // releases what it took through this deployment), then, after any doubt, from a fresh
        // read.
        let mut intent = expected.map_or(Intent::Release, Intent::ReleaseExpecting);
        loop {
            let attempt = match store.begin(path, intent.clone()).await {
                Ok(attempt) => attempt,
                Err(StoreError::Stale) => {
                    intent = Intent::Unlock;
                    self.retry_or_busy(&mut attempts, started, deadline).await?;
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let recalled = attempt.begun_from_memory();
            let Some(content) = &attempt.snapshot().lock else {
                if recalled {
                    intent = Intent::Unlock;
                    continue;
                }
                if expired {
                    return Err(expired_token());
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
            let at = Place::new(store.repository(), path);
            let recorded = attempt.snapshot().lock_token.as_deref();
            if sealed && !token.is_some_and(|t| t.holds(&at, content, recorded)) {
                if recalled {
                    intent = Intent::Unlock;
                    continue;
                }
                return Err(BackendError::Locked(content.clone()));
            }
            if !LockToken::admits(token, &at, Some(content), recorded) {
                if recalled {
                    intent = Intent::Unlock;
                    continue;
                }
                return Err(expired_token());
            }
            let held = content.clone();
            match attempt.delete_lock().await {
                Ok(()) => {
                    released(&held, "release");
                    // A force-unlock names the lock it removed (the audit of who broke whose).
                    let removed = LockInfo::stored(&held);
                    tracing::info!(
                        %path,
                        force = answer.force,
                        lock_id = %escape_controls(&removed.id),
                        lock_who = %escape_controls(&removed.who),
                        "lock released"
                    );
                    answer.released = true;
                    return Ok(answer);
                }
                Err(StoreError::Stale) => {
                    intent = Intent::Unlock;
                    self.retry_or_busy(&mut attempts, started, deadline).await?
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// The message of the lock commit `info`'s LOCK writes at `path`: its subject, and with an OIDC
/// `token` (or the workspace API's credential mark) the seal that binds the lock to the token
/// ([`LockToken::trailer`]). Made again by the holder's UNLOCK ([`ExpectedLock`]).
fn lock_message(
    store: &dyn StateStore,
    path: &StatePath,
    info: &LockInfo,
    token: Option<&LockToken>,
) -> Message {
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
    let message = match token {
        Some(token) => {
            let at = Place::new(store.repository(), path);
            format!("{message}\n\n{}", token.trailer(&at, &info.id))
        }
        None => message,
    };
    Message::by(message, &info.who)
}

/// A LOCK that succeeded: the LockInfo as read, and the expired lock it took over, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acquired {
    /// The LockInfo as read.
    pub info: LockInfo,
    /// The lock taken over because it had outlived the repository's `lock_ttl`.
    pub took_over: Option<TakenOver>,
}

/// `held` as a lock to take over, when `store` has a `lock_ttl` and `held` has outlived it.
fn expired(store: &dyn StateStore, held: &LockInfo) -> Option<TakenOver> {
    let ttl = store.lock_ttl()?;
    let now = crate::time::now_secs();
    held.expired(ttl.as_secs(), now).then(|| TakenOver {
        id: held.id.clone(),
        who: held.who.clone(),
        age_secs: held.age_secs(now).unwrap_or_default(),
    })
}

/// Records the age of the lock whose LockInfo is `content` ([`LockInfo::age_secs`]: nothing
/// when its `Created` is not an RFC 3339 time, as in a lock written by hand).
/// Counts a lock branch deleted (an UNLOCK's `release`, or a lock_ttl `takeover`): the
/// releases, the locks held, and the lock's age.
fn released(content: &[u8], event: &'static str) {
    record_lock_age(content, event);
    metrics::counter!(crate::metrics::LOCK_RELEASES).increment(1);
    metrics::gauge!(crate::metrics::LOCKS_HELD).decrement(1.0);
}

fn record_lock_age(content: &[u8], event: &'static str) {
    if let Some(age) = LockInfo::stored(content).age_secs(crate::time::now_secs()) {
        metrics::histogram!(crate::metrics::LOCK_AGE_SECONDS, "event" => event).record(age as f64);
    }
}

/// The 401 of an expired OIDC token outside the run whose lock it took.
pub(super) fn expired_token() -> BackendError {
    BackendError::from_expired_token()
}

impl BackendError {
    /// The 401 of an expired OIDC token outside the run whose lock it took (one sentence for
    /// every layer that refuses it).
    pub fn from_expired_token() -> BackendError {
        BackendError::Unauthenticated(
            "the OIDC token has expired: it may only finish the run whose lock it took (POST or DELETE with that lock's ID, and its UNLOCK); send a fresh token".into(),
        )
    }
}
