//! `POST` and `DELETE`, and the read-then-write loop they share with a migration: begin an
//! attempt, decide from what it read (the lock, a replay, the state guard), seal, push; read again
//! after a lost compare-and-swap, within the retry policy and the caller's deadline.

use std::time::Instant;

use super::{checks, Backend, BackendError, Caller, Proposal, Written, ANONYMOUS};
use crate::commit::Message;
use crate::lock::LockInfo;
use crate::lock_token::LockToken;
use crate::path::StatePath;
use crate::seal::Place;
use crate::store::{Intent, Revision, StateChange, StateStore, StoreError, WriteBudget};
use crate::text::escape_controls;
use gitstate_statefile::CheckedState;

/// What a write does with what it read.
enum Decision {
    /// Write in the name of `writer`: the lock holder's `Who`, else the caller's name (escaped,
    /// one line); `None` when neither names anyone (the commit is then the committer's, and its
    /// message says "anonymous").
    Write { writer: Option<String> },
    /// The stored state already holds the body: answer without a commit.
    Replay,
}

impl Backend {
    /// `POST` of a body [`Backend::check`]ed: stores it as the state unless another client holds
    /// the lock, and returns the new commit and its writer. A body equal to what is stored is a
    /// success without a commit (`None`), so client retries are safe.
    pub async fn post(
        &self,
        store: &dyn StateStore,
        path: &StatePath,
        state: &CheckedState,
        lock_id: Option<&str>,
        caller: &Caller,
    ) -> Result<Option<Written>, BackendError> {
        let message_serial = state.file.serial;
        // A state version of the workspace API (`sealed_by`) is guarded within its lineage only
        // ([`checks::Guard::WithinLineage`]).
        let guard = match (
            self.state_guard && store.guards_states() && !caller.force,
            caller.sealed_by.is_some(),
        ) {
            (false, _) => checks::Guard::Off,
            (true, false) => checks::Guard::Whole,
            (true, true) => checks::Guard::WithinLineage,
        };
        self.write(
            store,
            path,
            Proposal {
                content: Some(state),
                guard,
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
            guard: checks::Guard::Off,
        };
        self.write(store, path, deletion, lock_id, caller, |who| {
            format!("Delete {path} by {who}")
        })
        .await
    }

    pub(super) async fn write(
        &self,
        store: &dyn StateStore,
        path: &StatePath,
        proposal: Proposal<'_>,
        lock_id: Option<&str>,
        caller: &Caller,
        message: impl Fn(&str) -> String,
    ) -> Result<Option<Written>, BackendError> {
        let Proposal { content, guard } = proposal;
        let started = Instant::now();
        let deadline = self.retry.deadline(started, caller.deadline);
        let _serialized = serialized(store).await;
        let mut attempts = 0;
        // The holder of the lock may begin from the store's memory (one request to the remote,
        // the push confirming the state tip and the lock); whatever that memory alone would
        // answer (423, a replay, the guard's 409, a lost push) is decided again on a fresh read.
        let mut recall = lock_id.is_some() || caller.sealed_by.is_some();
        loop {
            let intent = if recall {
                Intent::HeldWrite
            } else {
                Intent::Write
            };
            // One attempt: the read and the compare-and-swap push share one remote check.
            let attempt = self
                .begin_write(store, path, intent, (&mut attempts, started, deadline))
                .await?;
            let recalled = attempt.begun_from_memory();
            if recalled && attempt.snapshot().lock.is_none() {
                recall = false;
                continue;
            }
            let at = Place::new(store.repository(), path);
            let writer = match self
                .decide(&at, attempt.snapshot(), content, guard, lock_id, caller)
                .await
            {
                Ok(Decision::Write { writer }) => writer,
                // Whatever the store's memory alone would answer (423, a replay, the guard's
                // 409) is decided again on a fresh read.
                Ok(Decision::Replay)
                | Err(
                    BackendError::Locked(_)
                    | BackendError::Conflict(_)
                    | BackendError::NotLocked(_)
                    | BackendError::Unauthenticated(_),
                ) if recalled => {
                    recall = false;
                    continue;
                }
                Ok(Decision::Replay) => return Ok(None),
                Err(e) => return Err(e),
            };
            let change = match (content, &self.sealer) {
                (Some(state), Some(sealer)) => StateChange::Write(sealer.seal(&at, state).await?),
                (Some(state), None) => StateChange::Write(state.body.clone()),
                (None, _) => StateChange::Delete,
            };
            let timing = (&mut attempts, started, deadline);
            let who = writer.as_deref().unwrap_or(ANONYMOUS).to_owned();
            let message = Message::by(message(&who), writer.as_deref().unwrap_or_default());
            // A recalled attempt that lost goes again at once, on a fresh read.
            recall = false;
            if let Some(revision) = self
                .push_attempt(attempt, change, &message, "write", timing)
                .await?
            {
                tracing::info!(%path, %revision, attempt = attempts, recalled, "state written");
                return Ok(Some(Written {
                    commit: revision,
                    who,
                }));
            }
        }
    }

    /// What a write decides from what its attempt read at `at`: refused while another holds
    /// the lock ([`BackendError::Locked`]), a replay when the stored state already holds
    /// `content`, refused by the state guard ([`BackendError::Conflict`]), else written, in the
    /// name of the lock's holder (its `Who`) or the caller.
    async fn decide(
        &self,
        at: &Place,
        snapshot: &crate::store::Snapshot,
        content: Option<&CheckedState>,
        guard: super::checks::Guard,
        lock_id: Option<&str>,
        caller: &Caller,
    ) -> Result<Decision, BackendError> {
        // The writer's name goes into the commit message: escaped, so it stays one line.
        let mut writer =
            (!caller.name.is_empty()).then(|| escape_controls(&caller.name).into_owned());
        let token = caller.token.as_ref();
        if (token.is_some_and(|t| t.expired) && lock_id.is_none())
            || !LockToken::admits(
                token,
                at,
                snapshot.lock.as_deref(),
                snapshot.lock_token.as_deref(),
            )
        {
            return Err(super::locks::expired_token());
        }
        if let Some(sealer) = &caller.sealed_by {
            let Some(lock) = &snapshot.lock else {
                return Err(BackendError::NotLocked(format!(
                    "the state at {} is not locked by this caller: lock its workspace before writing a state version (Terraform does)",
                    at.path
                )));
            };
            if !sealer.holds(at, lock, snapshot.lock_token.as_deref()) {
                return Err(BackendError::Locked(lock.clone()));
            }
        }
        if let Some(lock) = &snapshot.lock {
            let holder = LockInfo::stored(lock);
            if caller.sealed_by.is_none() && !holder.admits(lock_id) {
                return Err(BackendError::Locked(lock.clone()));
            }
            if !holder.who.is_empty() {
                writer = Some(escape_controls(&holder.who).into_owned());
            }
        }
        if self
            .check_stored(at, &snapshot.state, content, guard)
            .await?
        {
            return Ok(Decision::Replay);
        }
        Ok(Decision::Write { writer })
    }

    /// The read of one attempt of a read-then-write loop (a write, a migration): a write attempt
    /// on `path`, begun again (after the retry policy's pause, within the deadline) while the
    /// refs move under the read; [`BackendError::Busy`] when the read itself outlasts the
    /// deadline.
    pub(crate) async fn begin_write<'a>(
        &self,
        store: &'a dyn StateStore,
        path: &StatePath,
        intent: Intent,
        (attempts, started, deadline): (&mut u32, Instant, Instant),
    ) -> Result<Box<dyn crate::store::WriteAttempt + 'a>, BackendError> {
        loop {
            // The read writes nothing, so it may be abandoned when the time runs out: on Lambda
            // the answer must leave before the invocation's deadline, however slow the remote.
            let begun = tokio::time::timeout_at(deadline.into(), store.begin(path, intent.clone()));
            let Ok(begun) = begun.await else {
                return Err(busy_error(
                    "reading the state branch took all of this write's time, before anything was pushed",
                    *attempts + 1,
                    started,
                ));
            };
            match begun {
                Ok(attempt) => return Ok(attempt),
                Err(StoreError::Stale) => self.retry_or_busy(attempts, started, deadline).await?,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The push of one attempt of a read-then-write loop (a write, a migration): refused when
    /// the time ran out, else pushed within the budget. `Ok(None)` when it lost to another
    /// writer: the loop reads again (after the retry policy's pause).
    pub(crate) async fn push_attempt(
        &self,
        mut attempt: Box<dyn crate::store::WriteAttempt + '_>,
        change: StateChange,
        message: &Message,
        what: &str,
        (attempts, started, deadline): (&mut u32, Instant, Instant),
    ) -> Result<Option<Revision>, BackendError> {
        if Instant::now() >= deadline {
            return Err(busy_error(
                &format!("this {what}'s time ran out before it could be pushed"),
                *attempts + 1,
                started,
            ));
        }
        attempt.set_budget(WriteBudget {
            since: started,
            deadline,
        });
        let recalled = attempt.begun_from_memory();
        match attempt.update_state(change, message).await {
            Ok(revision) => Ok(Some(revision)),
            // Begun from the store's memory: nobody else's push is implied, read again at once.
            Err(StoreError::Stale) if recalled => Ok(None),
            Err(StoreError::Stale) => {
                tracing::debug!(
                    attempt = *attempts,
                    "the state, its lock or the branch moved; reading again"
                );
                self.retry_or_busy(attempts, started, deadline).await?;
                Ok(None)
            }
            Err(StoreError::Busy(why)) => Err(busy_error(&why, *attempts + 1, started)),
            Err(e) => Err(e.into()),
        }
    }

    /// After a lost compare-and-swap: waits for the next attempt and counts it, or answers
    /// [`BackendError::Busy`] when the retry policy is spent.
    pub(super) async fn retry_or_busy(
        &self,
        attempts: &mut u32,
        started: Instant,
        deadline: Instant,
    ) -> Result<(), BackendError> {
        if self.retry.back_off(*attempts, deadline).await {
            metrics::counter!(crate::metrics::WRITE_RETRIES).increment(1);
            *attempts += 1;
            Ok(())
        } else {
            Err(busy_error(
                "other writers kept moving the state branch until this write's time ran out",
                *attempts + 1,
                started,
            ))
        }
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
