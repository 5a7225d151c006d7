//! A write or unlock in progress on a remote ([`RemoteAttempt`]): how it begins (from
//! receive-pack's advertisement, or recalled from what this cache recorded when the write or
//! release can go in one request) and how it ends (through the write queue, or one push).

use std::sync::Arc;

use gitstate_core::Message;
use gitstate_core::{
    BlockingStore, ExpectedLock, Intent, Revision, Snapshot, StateChange, StatePath, StoreError,
    WriteAttempt, WriteBudget,
};
use gix::ObjectId;

use super::{Outgoing, RemoteStore};
use crate::batch::{QueuedWrite, WriteQueue};
use crate::objects::{entry_id, lock_commit, lock_token_at, state_commit};
use crate::push::push_in_one_request;
use gitstate_wire::onepost;
use gitstate_wire::pack::Pack;
use gitstate_wire::sendpack::{ReceivePack, RefUpdate};

/// A write or unlock in progress: what it read (and the files at those tips), and how its
/// compare-and-swap push goes.
pub struct RemoteAttempt {
    store: RemoteStore,
    path: StatePath,
    /// What it may do: [`Intent::Write`] (a write, fresh or from memory) or an unlock
    /// ([`Intent::Unlock`], [`Intent::Release`]); never [`Intent::HeldWrite`], which begins as
    /// a write.
    intent: Intent,
    /// The state tip read (or recalled); `None` when the branch is absent or not read.
    state_tip: Option<ObjectId>,
    /// The entry at `path` on `state_tip`: a write's condition (DESIGN §9.1).
    base_file: Option<ObjectId>,
    lock_tip: Option<ObjectId>,
    snapshot: Snapshot,
    begun: Begun,
    budget: Option<WriteBudget>,
}

/// The lock a holder's UNLOCK expects, as the commit its LOCK wrote.
struct Expected {
    commit: ObjectId,
    content: bytes::Bytes,
    /// The seal its message records.
    token: Option<String>,
}

/// Where an attempt's read came from, which decides how its push goes. (One per request, moved
/// into the push: as large as the `Option<ReceivePack>` it replaces.)
#[allow(clippy::large_enum_variant)]
enum Begun {
    /// receive-pack's advertisement: the push goes over that session (over `git://`, ssh and
    /// `file://` the same connection; over smart HTTP the second request), a write through
    /// the write queue.
    Advertised(ReceivePack),
    /// This process's memory of what it pushed (DESIGN, "A holder's state write in one
    /// request"): the push goes in one request and asserts what was recalled.
    Memory,
}

#[async_trait::async_trait]
impl WriteAttempt for RemoteAttempt {
    fn snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    fn set_budget(&mut self, budget: WriteBudget) {
        self.budget = Some(budget);
    }

    fn begun_from_memory(&self) -> bool {
        matches!(self.begun, Begun::Memory)
    }

    /// Joins this process's write queue for the branch (DESIGN §9.2): the write is pushed in a
    /// batch, as its own commit, once its own conditions (the file and the lock it read are
    /// unchanged) hold on the branch tip.
    async fn update_state(
        self: Box<Self>,
        change: StateChange,
        message: &Message,
    ) -> Result<Revision, StoreError> {
        if !matches!(self.intent, Intent::Write) {
            return Err(StoreError::Internal(
                "a state write in an attempt that did not read the state".into(),
            ));
        }
        let this = *self;
        let session = match this.begun {
            Begun::Advertised(session) => session,
            Begun::Memory => {
                // One request, outside the write queue.
                let (Some(base), Some(lock_tip)) = (this.state_tip, this.lock_tip) else {
                    return Err(StoreError::Stale);
                };
                let store = this.store.clone();
                let path = this.path;
                let message = message.to_owned();
                return store
                    .run(move |store| {
                        store.write_recalled(&path, base, lock_tip, &change, &message)
                    })
                    .await;
            }
        };
        let queue = this.store.write_queue()?;
        let target = this.store.target.unpinned();
        let write = QueuedWrite {
            path: this.path,
            base_file: this.base_file,
            lock_tip: this.lock_tip,
            change,
            message: message.clone(),
            since: this
                .budget
                .map_or_else(std::time::Instant::now, |b| b.since),
            deadline: this.budget.map(|b| b.deadline),
        };
        queue.submit(&target, write, session).await
    }

    async fn delete_lock(self: Box<Self>) -> Result<(), StoreError> {
        let this = *self;
        if matches!(this.intent, Intent::Write) {
            return Err(StoreError::Internal(
                "a lock release in a state write".into(),
            ));
        }
        let Some(old) = this.lock_tip else {
            return Err(StoreError::Stale);
        };
        let store = this.store.clone();
        store
            .run(move |store| match this.begun {
                Begun::Advertised(session) => store.push_lock_delete(session, &this.path, old),
                Begun::Memory => store.release_recalled(&this.path, old),
            })
            .await
    }
}

impl RemoteStore {
    /// Opens a receive-pack session, takes the tips `intent` needs from its advertisement (the
    /// fresh remote check), fetches those the cache lacks and reads the files.
    pub(super) fn begin_attempt(
        &self,
        path: &StatePath,
        intent: Intent,
    ) -> Result<RemoteAttempt, StoreError> {
        let lock_ref = path.lock_ref();
        // The lock the holder's UNLOCK expects, as its commit (when commits are predictable).
        let expected = match &intent {
            Intent::ReleaseExpecting(expected) => self.expected_lock(path, expected)?,
            _ => None,
        };
        let recalled = match &intent {
            Intent::Release | Intent::ReleaseExpecting(_) => {
                self.recall_lock(path, expected.as_ref().map(|e| e.commit))?
            }
            Intent::HeldWrite => self.recall_write(path)?,
            Intent::Write | Intent::Unlock => None,
        };
        if let Some(attempt) = recalled {
            return Ok(attempt);
        }
        // A fresh read: a held write reads as any write, a release as any unlock.
        let writes = matches!(intent, Intent::Write | Intent::HeldWrite);
        let intent = if writes {
            Intent::Write
        } else {
            Intent::Unlock
        };
        let receive_pack = crate::repeat::receive_pack(&self.target.endpoint)?;
        let state_tip = if writes {
            receive_pack.tip(&self.target.state_ref)
        } else {
            None
        };
        let lock_tip = receive_pack.tip(&lock_ref);
        // The advertised lock is the one expected: what it holds is known, nothing to fetch.
        // (Only as advertised: a delete whose expected old id the server does not have is made
        // without comparing, by git's receive-pack, so an id that was only made is never pushed
        // as the old one.)
        if let Some(expected) = expected.filter(|lock| Some(lock.commit) == lock_tip) {
            return Ok(self.expected_attempt(path, expected, receive_pack));
        }
        let (state_tip, lock_tip) = self.fetch_tips(path, intent.clone(), state_tip, lock_tip)?;
        // Both blobs in one request when the (partial) cache lacks them.
        let lock_file = path.lock_file();
        let files: Vec<(ObjectId, &str)> = [(state_tip, path.as_str()), (lock_tip, &lock_file)]
            .into_iter()
            .filter_map(|(tip, file)| tip.map(|tip| (tip, file)))
            .collect();
        self.cache()?.ensure_files(&self.target.endpoint, &files)?;
        let snapshot = self.snapshot_at(path, state_tip, lock_tip)?;
        let base_file = match state_tip {
            Some(tip) => entry_id(&self.cache()?.repo(), tip, path.as_str())?,
            None => None,
        };
        Ok(RemoteAttempt {
            store: self.clone(),
            path: path.clone(),
            intent,
            state_tip,
            base_file,
            lock_tip,
            snapshot,
            begun: Begun::Advertised(receive_pack),
            budget: None,
        })
    }

    /// Makes sure the tips a session read from receive-pack's advertisement are in the cache:
    /// fetched as advertised (one request on a kept protocol-v2 session), else read fresh over
    /// upload-pack. Returns the tips to build on (newer ones when the refs moved in between);
    /// [`StoreError::Stale`] when they still cannot be had.
    fn fetch_tips(
        &self,
        path: &StatePath,
        intent: Intent,
        mut state_tip: Option<ObjectId>,
        mut lock_tip: Option<ObjectId>,
    ) -> Result<(Option<ObjectId>, Option<ObjectId>), StoreError> {
        let lock_ref = path.lock_ref();
        let present = |repo: &gix::Repository, tips: [Option<ObjectId>; 2]| {
            tips.into_iter().flatten().all(|id| repo.has_object(id))
        };
        let cache = self.cache()?;
        let repo = cache.repo();
        if present(&repo, [state_tip, lock_tip]) {
            return Ok((state_tip, lock_tip));
        }
        let state_lacks = state_tip.filter(|tip| !repo.has_object(tip));
        // Written by another process: fetch the advertised tips, so that the push builds on
        // exactly what was advertised. A lock commit holds one small file: when only the lock
        // branch lacks (an unlock, a write before the state branch exists, or a write where this
        // cache holds the state's tip, as after its own GET), it comes whole, in one request.
        let lock = lock_tip.map(|tip| (lock_ref.clone(), tip));
        match state_lacks {
            Some(tip) => {
                let both = lock
                    .into_iter()
                    .chain([(self.target.state_ref.clone(), tip)])
                    .collect();
                cache.fetch_advertised(&self.target.endpoint, &both)?;
            }
            None => {
                let lock_only = lock.into_iter().collect();
                cache.fetch_locks_advertised(&self.target.endpoint, &lock_only)?;
            }
        }
        // A fresh handle: it sees the packs just fetched.
        if present(&cache.repo(), [state_tip, lock_tip]) {
            return Ok((state_tip, lock_tip));
        }
        // The cache cannot fetch by id (or that fetch failed): fetch over upload-pack
        // (shallow), keeping the session open for the push.
        let names: Vec<&str> = if matches!(intent, Intent::Write) {
            vec![&self.target.state_ref, &lock_ref]
        } else {
            vec![&lock_ref]
        };
        let file = |name: &str| {
            if name == self.target.state_ref {
                vec![path.as_str().to_owned()]
            } else {
                vec![path.lock_file()]
            }
        };
        let fresh = self
            .cache()?
            .refresh_reading(&self.target.endpoint, &names, &file)?;
        // upload-pack's advertisement came after receive-pack's: when another writer moved the
        // refs in between, work from the newer tips. receive-pack compares the expected old id
        // with the ref's value when it updates it, not with what it advertised, so this push
        // can still win where it would otherwise be sure to lose.
        if matches!(intent, Intent::Write) {
            state_tip = fresh.get(&self.target.state_ref).copied();
        }
        lock_tip = fresh.get(&lock_ref).copied();
        if !present(&self.cache()?.repo(), [state_tip, lock_tip]) {
            return Err(StoreError::Stale);
        }
        Ok((state_tip, lock_tip))
    }

    /// A release attempt from the lock this cache recorded for `path` (its own push, or the
    /// last fetch), when a delete can go in one request; `None` otherwise, and when the holder
    /// expects another lock commit (`expected`): the one recalled was released since.
    fn recall_lock(
        &self,
        path: &StatePath,
        expected: Option<ObjectId>,
    ) -> Result<Option<RemoteAttempt>, StoreError> {
        if !onepost::possible(&self.target.endpoint) {
            return Ok(None);
        }
        let lock_ref = path.lock_ref();
        let Some(tip) = self.cache()?.tracked(&lock_ref) else {
            return Ok(None);
        };
        if expected.is_some_and(|expected| expected != tip) {
            return Ok(None);
        }
        let Some(lock) = self.read(Some(tip), &path.lock_file())? else {
            return Ok(None);
        };
        Ok(Some(RemoteAttempt {
            store: self.clone(),
            path: path.clone(),
            intent: Intent::Unlock,
            state_tip: None,
            base_file: None,
            lock_tip: Some(tip),
            snapshot: Snapshot {
                lock_tip: Some(tip.to_string()),
                lock: Some(lock),
                lock_token: lock_token_at(&self.cache()?.repo(), tip),
                ..Snapshot::default()
            },
            begun: Begun::Memory,
            budget: None,
        }))
    }

    /// The commit the lock `expected` would be, had this store's LOCK written it at `path`
    /// ([`lock_commit`]: it follows from the path, the content, the message and the committer);
    /// `None` when this store signs its commits (a signature is not predictable).
    fn expected_lock(
        &self,
        path: &StatePath,
        expected: &ExpectedLock,
    ) -> Result<Option<Expected>, StoreError> {
        if !self.target.committer.writes_predictable_commits() {
            return Ok(None);
        }
        // Made in memory only: nothing is written to the cache.
        let repo = self.cache()?.repo().with_object_memory();
        let commit = lock_commit(
            &repo,
            &path.lock_file(),
            &expected.content,
            &expected.message,
            &self.target.committer,
        )?;
        Ok(Some(Expected {
            commit,
            content: expected.content.clone(),
            token: gitstate_core::LockToken::recorded(&expected.message.text),
        }))
    }

    /// An unlock attempt that read the lock `expected` from `receive_pack`'s advertisement.
    fn expected_attempt(
        &self,
        path: &StatePath,
        expected: Expected,
        receive_pack: ReceivePack,
    ) -> RemoteAttempt {
        RemoteAttempt {
            store: self.clone(),
            path: path.clone(),
            intent: Intent::Unlock,
            state_tip: None,
            base_file: None,
            lock_tip: Some(expected.commit),
            snapshot: Snapshot {
                lock_tip: Some(expected.commit.to_string()),
                lock: Some(expected.content),
                lock_token: expected.token,
                ..Snapshot::default()
            },
            begun: Begun::Advertised(receive_pack),
            budget: None,
        }
    }

    /// This process's write queue for the state branch, under this store's credential.
    fn write_queue(&self) -> Result<Arc<WriteQueue>, StoreError> {
        WriteQueue::of(
            &format!("{:p}", Arc::as_ptr(&self.target.handle)),
            &self.target.state_ref,
            self.target.endpoint.credentials.as_ref(),
        )
    }

    /// A write attempt from what this cache recorded of the state branch and of `path`'s lock
    /// (its own pushes, or the last fetch), when the write can go in one request: a smart-HTTP
    /// remote running git's receive-pack (which takes an update whose old and new ids are the
    /// same as "this ref must still be here", checked in the same atomic transaction) that
    /// offers `atomic`, and no other write of this process on the branch, nor contention with
    /// another process. `None` otherwise.
    fn recall_write(&self, path: &StatePath) -> Result<Option<RemoteAttempt>, StoreError> {
        if !onepost::asserts_unchanged_refs(&self.target.endpoint) || !self.write_queue()?.quiet() {
            return Ok(None);
        }
        let cache = self.cache()?;
        let (Some(state_tip), Some(lock_tip)) = (
            cache.tracked_when_written(&self.target.state_ref),
            cache.tracked(&path.lock_ref()),
        ) else {
            return Ok(None);
        };
        let Some(lock) = self.read(Some(lock_tip), &path.lock_file())? else {
            return Ok(None);
        };
        let state = self.read(Some(state_tip), path.as_str())?;
        let base_file = entry_id(&cache.repo(), state_tip, path.as_str())?;
        Ok(Some(RemoteAttempt {
            store: self.clone(),
            path: path.clone(),
            intent: Intent::Write,
            state_tip: Some(state_tip),
            base_file,
            lock_tip: Some(lock_tip),
            snapshot: Snapshot {
                state_tip: Some(state_tip.to_string()),
                state,
                lock_tip: Some(lock_tip.to_string()),
                lock: Some(lock),
                lock_token: lock_token_at(&cache.repo(), lock_tip),
            },
            begun: Begun::Memory,
            budget: None,
        }))
    }

    /// Pushes `change` on top of `base` (the recalled state tip) in one request, with the lock
    /// branch asserted at `lock_tip` in the same atomic push. Anything but an accepted push is
    /// [`StoreError::Stale`]: the caller decides again on a fresh read (which also reports a
    /// refusal the usual way).
    fn write_recalled(
        &self,
        path: &StatePath,
        base: ObjectId,
        lock_tip: ObjectId,
        change: &StateChange,
        message: &Message,
    ) -> Result<Revision, StoreError> {
        let Outgoing { commit, pack } = self.build(Some(base), path.as_str(), |repo| {
            state_commit(
                repo,
                Some(base),
                path.as_str(),
                change,
                message,
                &self.target.committer,
            )
        })?;
        let updates = [
            RefUpdate {
                name: self.target.state_ref.clone(),
                old: base,
                new: commit,
            },
            RefUpdate {
                name: path.lock_ref(),
                old: lock_tip,
                new: lock_tip,
            },
        ];
        if !push_in_one_request(&self.target.endpoint, &updates, &pack)? {
            return Err(StoreError::Stale);
        }
        metrics::histogram!(gitstate_core::metrics::BATCH_COMMITS).record(1.0);
        // After the answer: the writer need not wait for the cache's copy.
        self.cache()?
            .record_pushed_later(pack.objects, self.target.state_ref.clone(), commit);
        Ok(commit.to_string())
    }

    /// Deletes the lock branch expected at `old` (the recalled lock) in one request. When the
    /// server did not take it, the cache forgets that lock and the caller begins again from a
    /// fresh read ([`StoreError::Stale`]).
    fn release_recalled(&self, path: &StatePath, old: ObjectId) -> Result<(), StoreError> {
        let lock_ref = path.lock_ref();
        let update = RefUpdate {
            name: lock_ref.clone(),
            old,
            new: ObjectId::null(gix::hash::Kind::Sha1),
        };
        // Nothing to pack for a delete: only a failure to push answers `false` here.
        let accepted = push_in_one_request(
            &self.target.endpoint,
            std::slice::from_ref(&update),
            &Pack::default(),
        )
        .unwrap_or(false);
        self.cache()?.record_pushed(&[], &lock_ref, None)?;
        if accepted {
            Ok(())
        } else {
            Err(StoreError::Stale)
        }
    }
}
