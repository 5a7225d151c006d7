//! The remote store: a repository on a git server (smart HTTP(S), `git://`, `file://`, ssh).
//!
//! Per request (DESIGN §4): one ref listing with the caller's credentials (also the
//! authorization check; protocol v2 `ls-refs` for just the refs the request needs where the
//! server offers partial fetch, DESIGN §9.5), a shallow fetch of only the missing tips into the
//! per-remote cache (commit and trees, then only the blobs read, by id), reads from the cache, and
//! for writes a push of a pack holding just the new objects, with the id that was read as the
//! expected old value of the ref. Never forced.
//!
//! Writes and unlocks ([`StateStore::begin`](gitstate_core::StateStore::begin)) read the tips
//! from receive-pack's advertisement instead, and push over that same session: over smart HTTP
//! that is two requests (advertisement, push) when the tips are already in the cache.
//!
//! Over smart HTTP, a lock is created and a lock this process wrote is released in one request
//! ([`crate::plumbing::onepost`]): the push alone, with the old id it must replace (none for a new
//! lock, the recorded one for a release) checked by the server. Any doubt takes the two-request
//! way.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use gitstate_core::{
    BlockingStore, Credentials, Intent, LockCreate, Revision, Snapshot, StateChange, StatePath,
    StoreError, WriteBudget, WriteSession,
};
use gix::objs::Kind;
use gix::ObjectId;

use crate::batch::{QueuedWrite, WriteQueue};
use crate::cache::{Cache, CacheHandle};
use crate::objects::{entry_id, internal, lock_commit, parse_id, read_file, state_commit};
use crate::plumbing::onepost;
use crate::plumbing::pack::write_pack;
use crate::plumbing::sendpack::{is_retryable, ReceivePack, RefResult, RefUpdate, Report};
use crate::plumbing::transport::Endpoint;

/// Default timeout of one store call (connect, stalls and the whole operation).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// How to reach a remote repository.
#[derive(Clone)]
pub struct RemoteConfig {
    /// Repository URL: `https://…`, `http://…`, `ssh://…`, `git://…` or `file://…`. A user name
    /// and password in the URL are used as credentials when `credentials` is `None`.
    pub url: String,
    /// State branch name (without `refs/heads/`).
    pub git_ref: String,
    /// Basic-auth credentials for HTTP(S).
    pub credentials: Option<Credentials>,
    /// Where per-remote caches live (e.g. `$GITSTATE_CACHE_DIR`, `/tmp/gitstate-cache`).
    pub cache_dir: PathBuf,
    /// Limit for connecting, for any stall, and for a whole store call.
    pub timeout: Duration,
}

impl std::fmt::Debug for RemoteConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteConfig")
            .field("url", &gitstate_core::url::redact_in_text(&self.url))
            .field("git_ref", &self.git_ref)
            .field("credentials", &self.credentials)
            .field("cache_dir", &self.cache_dir)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// A [`StateStore`] on a remote git repository. Cheap to create per request (the cache
/// repository is shared process-wide).
#[derive(Clone, Debug)]
pub struct RemoteStore {
    endpoint: Endpoint,
    state_ref: String,
    handle: Arc<CacheHandle>,
    /// The cache generation this request works with (`None` on the long-lived store: each
    /// operation then takes the current one and keeps it to the end, sessions included).
    pinned: Option<Arc<Cache>>,
    timeout: Duration,
    /// This store has passed a remote check of the history (with its credentials). A pass-through
    /// deployment makes a store per request, so this is "in this request" there.
    history_checked: Arc<std::sync::atomic::AtomicBool>,
}

/// How the server answered a push.
pub(crate) enum Pushed {
    /// Every update was made.
    Accepted,
    /// A compare-and-swap was lost: nothing was made.
    Lost,
    /// The server refused an update for another reason (a hook, a protected ref).
    Refused {
        /// The ref it refused.
        name: String,
        /// Which and why, in a sentence.
        error: StoreError,
    },
}

/// Objects built in memory for one push, and the pack holding them.
struct Outgoing {
    commit: ObjectId,
    objects: Vec<(ObjectId, Kind, Vec<u8>)>,
}

impl RemoteStore {
    /// Sets up the store; touches only the local cache directory (no network).
    pub fn new(config: RemoteConfig) -> Result<Self, StoreError> {
        let endpoint = Endpoint::parse(&config.url, config.credentials, config.timeout)?;
        let handle = CacheHandle::for_url(&config.cache_dir, &endpoint.display)?;
        Ok(RemoteStore {
            endpoint,
            state_ref: format!("refs/heads/{}", config.git_ref),
            handle,
            pinned: None,
            timeout: config.timeout,
            history_checked: Arc::default(),
        })
    }

    /// The same store with `network` enforced on every connection (an ad-hoc repository: its
    /// resolved addresses checked against the policy, no redirects).
    pub fn with_network(mut self, network: gitstate_core::NetworkGuard) -> Self {
        self.endpoint.network = network;
        self
    }

    /// The same store accepting answers of at most `max_bytes` from the remote (see
    /// [`crate::plumbing::limits`]).
    pub fn with_answer_limit(mut self, max_bytes: u64) -> Self {
        self.endpoint.limits.max_bytes = max_bytes;
        self
    }

    /// The remote URL without credentials.
    pub fn url(&self) -> &str {
        &self.endpoint.display
    }

    /// The directory of this remote's current cache generation.
    pub fn cache_dir(&self) -> std::path::PathBuf {
        match &self.pinned {
            Some(cache) => cache.dir().to_owned(),
            None => self
                .handle
                .current()
                .map(|c| c.dir().to_owned())
                .unwrap_or_default(),
        }
    }

    /// The cache generation this operation works with.
    fn cache(&self) -> Result<&Arc<Cache>, StoreError> {
        self.pinned.as_ref().ok_or_else(|| {
            StoreError::Internal("a git operation ran without a cache generation".into())
        })
    }

    /// See [`RemoteStore::cache`]; for the write batches.
    pub(crate) fn pinned_cache(&self) -> Result<&Arc<Cache>, StoreError> {
        self.cache()
    }

    /// The remote.
    pub(crate) fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The state branch's full ref name.
    pub(crate) fn state_ref(&self) -> &str {
        &self.state_ref
    }

    /// The same store, not bound to a cache generation (each operation takes the current one):
    /// what a long-lived task, such as a write batch driver, works with.
    pub(crate) fn unpinned(&self) -> RemoteStore {
        RemoteStore {
            pinned: None,
            ..self.clone()
        }
    }

    /// The file at `tip`, its blob fetched by id first when the (partial) cache lacks it.
    fn read(&self, tip: Option<ObjectId>, file: &str) -> Result<Option<Bytes>, StoreError> {
        match tip {
            Some(tip) => {
                let cache = self.cache()?;
                cache.ensure_files(&self.endpoint, &[(tip, file)])?;
                read_file(&cache.repo(), tip, file)
            }
            None => Ok(None),
        }
    }

    /// Builds objects in memory on top of the cache; returns exactly the objects the cache (and
    /// therefore the remote) lacks, plus every object on the changed path, in case the cache
    /// still holds an object the remote has since dropped.
    fn build(
        &self,
        file: &str,
        make: impl FnOnce(&gix::Repository) -> Result<ObjectId, StoreError>,
    ) -> Result<Outgoing, StoreError> {
        let repo = self.cache()?.repo().with_object_memory();
        let commit = make(&repo)?;
        let objects = self.pack_objects(repo, &[(commit, file)], &[])?;
        Ok(Outgoing { commit, objects })
    }

    /// The objects a push of `commits` (each with the file it changed) must carry: every object
    /// `repo` holds in memory (built for the push), plus each commit's tree and every object on
    /// its changed path, in case the cache still holds an object the remote has since dropped;
    /// except the blobs `on_remote` that the cache lacks (pending writes' blobs, DESIGN §9.4:
    /// the remote holds them, reachable from the pending refs this push deletes).
    pub(crate) fn pack_objects(
        &self,
        mut repo: gix::Repository,
        commits: &[(ObjectId, &str)],
        on_remote: &[ObjectId],
    ) -> Result<Vec<(ObjectId, Kind, Vec<u8>)>, StoreError> {
        let mut path_ids = Vec::new();
        for (commit, file) in commits {
            path_ids.push(*commit);
            let c = repo
                .find_commit(*commit)
                .map_err(internal("reading the new commit"))?;
            let tree = c.tree().map_err(internal("reading the new tree"))?;
            path_ids.push(tree.id);
            let segments: Vec<&str> = file.split('/').collect();
            for end in 1..=segments.len() {
                let prefix = segments[..end].join("/");
                if let Some(entry) = tree
                    .lookup_entry_by_path(&prefix)
                    .map_err(internal("looking up a path"))?
                {
                    path_ids.push(entry.object_id());
                }
            }
        }
        let memory = repo.objects.take_object_memory().unwrap_or_default();
        let mut objects: Vec<(ObjectId, Kind, Vec<u8>)> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (id, (kind, data)) in memory.iter() {
            if seen.insert(*id) {
                objects.push((*id, *kind, data.clone()));
            }
        }
        for id in path_ids {
            if !seen.insert(id) || (on_remote.contains(&id) && !repo.has_object(id)) {
                continue;
            }
            let object = repo
                .find_object(id)
                .map_err(internal("reading an object for the pack"))?;
            objects.push((id, object.kind, object.data.clone()));
        }
        Ok(objects)
    }

    /// Pushes one ref update; `Ok(true)` when accepted, `Ok(false)` when the server refused it
    /// as a lost compare-and-swap.
    fn push_one(
        &self,
        session: ReceivePack,
        update: RefUpdate,
        outgoing: Option<&Outgoing>,
    ) -> Result<bool, StoreError> {
        let objects = outgoing.map_or(&[][..], |o| &o.objects[..]);
        match self.push_updates(session, std::slice::from_ref(&update), objects)? {
            Pushed::Accepted => Ok(true),
            Pushed::Lost => Ok(false),
            Pushed::Refused { error, .. } => Err(error),
        }
    }

    /// Pushes `updates` (atomically where the server offers it) with a pack of `objects`
    /// (none when every update is a delete) and returns the server's report.
    pub(crate) fn push_report(
        &self,
        session: ReceivePack,
        updates: &[RefUpdate],
        objects: &[(ObjectId, Kind, Vec<u8>)],
    ) -> Result<Report, StoreError> {
        let pack = write_pack(objects).map_err(StoreError::Internal)?;
        session.push(updates, &pack)
    }

    /// Pushes `updates` (see [`RemoteStore::push_report`]) and judges the report. A push of
    /// several updates is sent only where the server offers `atomic`: then it is all or nothing.
    pub(crate) fn push_updates(
        &self,
        session: ReceivePack,
        updates: &[RefUpdate],
        objects: &[(ObjectId, Kind, Vec<u8>)],
    ) -> Result<Pushed, StoreError> {
        let report = self.push_report(session, updates, objects)?;
        self.judge(updates, report)
    }

    /// Pushes `update` in one request (see [`onepost`]): `None` when that could not be tried or
    /// brought no report, and the caller goes the usual way.
    fn push_in_one_request(
        &self,
        update: &RefUpdate,
        objects: &[(ObjectId, Kind, Vec<u8>)],
    ) -> Option<Result<Pushed, StoreError>> {
        let pack = if update.new.is_null() {
            Vec::new()
        } else {
            write_pack(objects).ok()?
        };
        let report = onepost::push(&self.endpoint, std::slice::from_ref(update), &pack)?;
        Some(self.judge(std::slice::from_ref(update), report))
    }

    /// What the server's `report` to a push of `updates` means.
    fn judge(&self, updates: &[RefUpdate], report: Report) -> Result<Pushed, StoreError> {
        let remote = |what: String| StoreError::Remote(self.endpoint.scrub(&what));
        let rejected: Vec<(&str, String)> = updates
            .iter()
            .filter_map(|u| match report.result(&u.name) {
                RefResult::Ok => None,
                RefResult::Rejected(reason) => Some((u.name.as_str(), reason)),
            })
            .collect();
        let lost = !rejected.is_empty() && rejected.iter().all(|(_, r)| is_retryable(r));
        if let Err(e) = &report.unpack {
            // A refused ref also makes some servers report the unpack as failed; the ref's
            // reason is the better explanation then.
            if lost {
                return Ok(Pushed::Lost);
            }
            return Err(remote(format!(
                "{} could not unpack the pushed objects: {e} {}",
                self.endpoint.display,
                report.messages.trim()
            )));
        }
        if lost {
            tracing::debug!(refused = ?rejected, detail = %report.messages.trim(), "push lost a compare-and-swap");
            return Ok(Pushed::Lost);
        }
        match rejected.iter().find(|(_, r)| !is_retryable(r)) {
            None => Ok(Pushed::Accepted),
            Some((name, reason)) => Ok(Pushed::Refused {
                name: (*name).to_owned(),
                error: remote(format!(
                    "{} refused the update of {name}: {reason} {}",
                    self.endpoint.display,
                    report.messages.trim()
                )),
            }),
        }
    }

    /// Pushes a one-file commit on `base` over `session`, expecting the state branch at `base`.
    fn push_state(
        &self,
        session: ReceivePack,
        path: &StatePath,
        base: Option<ObjectId>,
        change: &StateChange,
        message: &str,
    ) -> Result<Revision, StoreError> {
        let outgoing = self.build(path.as_str(), |repo| {
            state_commit(repo, base, path.as_str(), change, message)
        })?;
        let null = ObjectId::null(gix::hash::Kind::Sha1);
        let update = RefUpdate {
            name: self.state_ref.clone(),
            old: base.unwrap_or(null),
            new: outgoing.commit,
        };
        if !self.push_one(session, update, Some(&outgoing))? {
            return Err(StoreError::Stale);
        }
        self.cache()?
            .record_pushed(&outgoing.objects, &self.state_ref, Some(outgoing.commit))?;
        Ok(outgoing.commit.to_string())
    }

    /// Deletes the lock branch over `session`, expecting it at `old`.
    fn push_lock_delete(
        &self,
        session: ReceivePack,
        path: &StatePath,
        old: ObjectId,
    ) -> Result<(), StoreError> {
        let lock_ref = path.lock_ref();
        let update = RefUpdate {
            name: lock_ref.clone(),
            old,
            new: ObjectId::null(gix::hash::Kind::Sha1),
        };
        if !self.push_one(session, update, None)? {
            return Err(StoreError::Stale);
        }
        self.cache()?.record_pushed(&[], &lock_ref, None)?;
        Ok(())
    }

    /// The lock that beat us, read fresh from the remote.
    fn held(&self, path: &StatePath) -> Result<LockCreate, StoreError> {
        match self.read_lock_blocking(path)? {
            Some((tip, content)) => Ok(LockCreate::Held { tip, content }),
            // Released meanwhile: the caller retries from a fresh read.
            None => Err(StoreError::Stale),
        }
    }
}

impl RemoteStore {
    /// Refreshes the history cache (a fresh remote check with this store's credentials, then a
    /// fetch of the state branch's missing history) and returns it with the branch tip.
    fn history_cache(&self) -> Result<(Arc<Cache>, Option<ObjectId>), StoreError> {
        let cache = self.handle.history()?;
        let tips = cache.refresh(&self.endpoint, &[&self.state_ref])?;
        self.history_checked
            .store(true, std::sync::atomic::Ordering::Release);
        let tip = tips.get(&self.state_ref).copied();
        Ok((cache, tip))
    }
}

/// A write or unlock in progress: what receive-pack advertised (and the files at those tips),
/// and the open session the compare-and-swap push goes over. Over `git://`, ssh and `file://`
/// that is the same connection; over smart HTTP the push is the second request.
pub struct RemoteSession {
    store: RemoteStore,
    path: StatePath,
    intent: Intent,
    /// The entry at `path` on `state_tip`: a write's condition (DESIGN §9.1).
    base_file: Option<ObjectId>,
    lock_tip: Option<ObjectId>,
    snapshot: Snapshot,
    /// The advertisement read; `None` for a release begun from the cache ([`Intent::Release`]),
    /// whose delete goes in one request.
    receive_pack: Option<ReceivePack>,
    budget: Option<WriteBudget>,
}

impl RemoteSession {
    /// The state tip the session read (or recalled).
    fn state_tip(&self) -> Option<ObjectId> {
        self.snapshot
            .state_tip
            .as_deref()
            .and_then(|tip| ObjectId::from_hex(tip.as_bytes()).ok())
    }
}

#[async_trait::async_trait]
impl WriteSession for RemoteSession {
    fn snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    fn set_budget(&mut self, budget: WriteBudget) {
        self.budget = Some(budget);
    }

    fn recalled(&self) -> bool {
        self.receive_pack.is_none()
    }

    /// Joins this process's write queue for the branch (DESIGN §9.2): the write is pushed in a
    /// batch, as its own commit, once its own conditions (the file and the lock it read are
    /// unchanged) hold on the branch tip.
    async fn update_state(
        self: Box<Self>,
        change: StateChange,
        message: &str,
    ) -> Result<Revision, StoreError> {
        if !matches!(self.intent, Intent::Write | Intent::HeldWrite) {
            return Err(StoreError::Internal(
                "a state write in a session that did not read the state".into(),
            ));
        }
        let this = *self;
        if this.receive_pack.is_none() {
            // Begun from the cache (Intent::HeldWrite): one request, outside the write queue.
            let (Some(base), Some(lock_tip)) = (this.state_tip(), this.lock_tip) else {
                return Err(StoreError::Stale);
            };
            let store = this.store.clone();
            let path = this.path;
            let message = message.to_owned();
            return store
                .run(move |store| store.write_recalled(&path, base, lock_tip, &change, &message))
                .await;
        }
        let store = this.store.unpinned();
        let queue = store.write_queue()?;
        let write = QueuedWrite {
            path: this.path,
            base_file: this.base_file,
            lock_tip: this.lock_tip,
            change,
            message: message.to_owned(),
            since: this
                .budget
                .map_or_else(std::time::Instant::now, |b| b.since),
            deadline: this.budget.map(|b| b.deadline),
        };
        let Some(session) = this.receive_pack else {
            return Err(StoreError::Internal(
                "a state write in a session without an advertisement".into(),
            ));
        };
        queue.submit(&store, write, session).await
    }

    async fn delete_lock(self: Box<Self>) -> Result<(), StoreError> {
        let this = *self;
        if this.intent == Intent::HeldWrite {
            return Err(StoreError::Internal(
                "a lock release in a held write".into(),
            ));
        }
        let Some(old) = this.lock_tip else {
            return Err(StoreError::Stale);
        };
        let store = this.store.clone();
        store
            .run(move |store| match this.receive_pack {
                Some(session) => store.push_lock_delete(session, &this.path, old),
                None => store.release_recalled(&this.path, old),
            })
            .await
    }
}

impl RemoteStore {
    /// Opens a receive-pack session, takes the tips `intent` needs from its advertisement (the
    /// fresh remote check), fetches those the cache lacks and reads the files.
    fn begin_session(&self, path: &StatePath, intent: Intent) -> Result<RemoteSession, StoreError> {
        let lock_ref = path.lock_ref();
        if intent == Intent::Release {
            if let Some(session) = self.recall_lock(path)? {
                return Ok(session);
            }
        }
        if intent == Intent::HeldWrite {
            if let Some(session) = self.recall_write(path)? {
                return Ok(session);
            }
        }
        // Not recalled: a fresh read, as for any write.
        let intent = match intent {
            Intent::HeldWrite => Intent::Write,
            other => other,
        };
        let names: Vec<&str> = match intent {
            Intent::Write | Intent::HeldWrite => vec![&self.state_ref, &lock_ref],
            Intent::Unlock | Intent::Release => vec![&lock_ref],
        };
        let receive_pack = ReceivePack::connect(&self.endpoint)?;
        let mut state_tip = match intent {
            Intent::Write | Intent::HeldWrite => receive_pack.tip(&self.state_ref),
            Intent::Unlock | Intent::Release => None,
        };
        let mut lock_tip = receive_pack.tip(&lock_ref);
        let present = |repo: &gix::Repository, tips: [Option<ObjectId>; 2]| {
            tips.into_iter().flatten().all(|id| repo.has_object(id))
        };
        if !present(&self.cache()?.repo(), [state_tip, lock_tip]) {
            // Written by another process: fetch the advertised tips (one request on a kept
            // protocol-v2 session), so that the push builds on exactly what was advertised.
            let advertised: std::collections::HashMap<String, ObjectId> = [
                (self.state_ref.clone(), state_tip),
                (lock_ref.clone(), lock_tip),
            ]
            .into_iter()
            .filter_map(|(name, tip)| tip.map(|tip| (name, tip)))
            .collect();
            self.cache()?
                .fetch_advertised(&self.endpoint, &advertised)?;
        }
        if !present(&self.cache()?.repo(), [state_tip, lock_tip]) {
            // The cache is new, or cannot fetch by id: fetch over upload-pack (shallow),
            // keeping the session open for the push.
            let file = |name: &str| {
                if name == self.state_ref {
                    Some(path.as_str().to_owned())
                } else {
                    Some(path.lock_file())
                }
            };
            let fresh = self
                .cache()?
                .refresh_reading(&self.endpoint, &names, &file)?;
            // upload-pack's advertisement came after receive-pack's: when another writer moved
            // the refs in between, work from the newer tips. receive-pack compares the expected
            // old id with the ref's value when it updates it, not with what it advertised, so
            // this push can still win where it would otherwise be sure to lose.
            if intent == Intent::Write {
                state_tip = fresh.get(&self.state_ref).copied();
            }
            lock_tip = fresh.get(&lock_ref).copied();
            if !present(&self.cache()?.repo(), [state_tip, lock_tip]) {
                return Err(StoreError::Stale);
            }
        }
        // Both blobs in one request when the (partial) cache lacks them.
        let lock_file = path.lock_file();
        let files: Vec<(ObjectId, &str)> = [(state_tip, path.as_str()), (lock_tip, &lock_file)]
            .into_iter()
            .filter_map(|(tip, file)| tip.map(|tip| (tip, file)))
            .collect();
        self.cache()?.ensure_files(&self.endpoint, &files)?;
        let snapshot = Snapshot {
            state_tip: state_tip.map(|id| id.to_string()),
            state: self.read(state_tip, path.as_str())?,
            lock_tip: lock_tip.map(|id| id.to_string()),
            lock: match lock_tip {
                Some(_) => Some(self.read(lock_tip, &path.lock_file())?.unwrap_or_default()),
                None => None,
            },
        };
        let base_file = match state_tip {
            Some(tip) => entry_id(&self.cache()?.repo(), tip, path.as_str())?,
            None => None,
        };
        Ok(RemoteSession {
            store: self.clone(),
            path: path.clone(),
            intent,
            base_file,
            lock_tip,
            snapshot,
            receive_pack: Some(receive_pack),
            budget: None,
        })
    }

    /// A release session from the lock this cache recorded for `path` (its own push, or the
    /// last fetch), when a delete can go in one request; `None` otherwise.
    fn recall_lock(&self, path: &StatePath) -> Result<Option<RemoteSession>, StoreError> {
        if !onepost::possible(&self.endpoint) {
            return Ok(None);
        }
        let lock_ref = path.lock_ref();
        let Some(tip) = self.cache()?.tracked(&lock_ref) else {
            return Ok(None);
        };
        let Some(lock) = self.read(Some(tip), &path.lock_file())? else {
            return Ok(None);
        };
        Ok(Some(RemoteSession {
            store: self.clone(),
            path: path.clone(),
            intent: Intent::Release,
            base_file: None,
            lock_tip: Some(tip),
            snapshot: Snapshot {
                lock_tip: Some(tip.to_string()),
                lock: Some(lock),
                ..Snapshot::default()
            },
            receive_pack: None,
            budget: None,
        }))
    }

    /// This process's write queue for the state branch, under this store's credential.
    fn write_queue(&self) -> Result<Arc<WriteQueue>, StoreError> {
        WriteQueue::of(
            &format!("{:p}", Arc::as_ptr(&self.handle)),
            &self.state_ref,
            self.endpoint.credentials.as_ref(),
        )
    }

    /// A write session from what this cache recorded of the state branch and of `path`'s lock
    /// (its own pushes, or the last fetch), when the write can go in one request: a smart-HTTP
    /// remote running git's receive-pack (which takes an update whose old and new ids are the
    /// same as "this ref must still be here", checked in the same atomic transaction) that
    /// offers `atomic`, and no other write of this process on the branch, nor contention with
    /// another process. `None` otherwise.
    fn recall_write(&self, path: &StatePath) -> Result<Option<RemoteSession>, StoreError> {
        if !onepost::asserts_unchanged_refs(&self.endpoint) || !self.write_queue()?.quiet() {
            return Ok(None);
        }
        let cache = self.cache()?;
        let (Some(state_tip), Some(lock_tip)) = (
            cache.tracked_settled(&self.state_ref),
            cache.tracked(&path.lock_ref()),
        ) else {
            return Ok(None);
        };
        let Some(lock) = self.read(Some(lock_tip), &path.lock_file())? else {
            return Ok(None);
        };
        let state = self.read(Some(state_tip), path.as_str())?;
        let base_file = entry_id(&cache.repo(), state_tip, path.as_str())?;
        Ok(Some(RemoteSession {
            store: self.clone(),
            path: path.clone(),
            intent: Intent::HeldWrite,
            base_file,
            lock_tip: Some(lock_tip),
            snapshot: Snapshot {
                state_tip: Some(state_tip.to_string()),
                state,
                lock_tip: Some(lock_tip.to_string()),
                lock: Some(lock),
            },
            receive_pack: None,
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
        message: &str,
    ) -> Result<Revision, StoreError> {
        let Outgoing { commit, objects } = self.build(path.as_str(), |repo| {
            state_commit(repo, Some(base), path.as_str(), change, message)
        })?;
        let updates = [
            RefUpdate {
                name: self.state_ref.clone(),
                old: base,
                new: commit,
            },
            RefUpdate {
                name: path.lock_ref(),
                old: lock_tip,
                new: lock_tip,
            },
        ];
        let pack = write_pack(&objects).map_err(StoreError::Internal)?;
        let accepted = match onepost::push(&self.endpoint, &updates, &pack) {
            Some(report) => matches!(self.judge(&updates, report), Ok(Pushed::Accepted)),
            None => false,
        };
        if !accepted {
            return Err(StoreError::Stale);
        }
        metrics::histogram!(gitstate_core::metrics::BATCH_COMMITS).record(1.0);
        // After the answer: the writer need not wait for the cache's copy.
        self.cache()?
            .record_pushed_later(objects, self.state_ref.clone(), commit);
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
        let accepted = matches!(
            self.push_in_one_request(&update, &[]),
            Some(Ok(Pushed::Accepted))
        );
        self.cache()?.record_pushed(&[], &lock_ref, None)?;
        if accepted {
            Ok(())
        } else {
            Err(StoreError::Stale)
        }
    }
}

// No per-process write serializer (the default): concurrent writes share pushes through the
// write queue.
impl BlockingStore for RemoteStore {
    const OWN_WRITE_SESSIONS: bool = true;

    /// Runs blocking git work on a cache generation, bounded by the store timeout.
    async fn run<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(RemoteStore) -> Result<T, StoreError> + Send + 'static,
    {
        let mut store = self.clone();
        let cache = match &self.pinned {
            Some(cache) => cache.clone(),
            None => self.handle.current()?,
        };
        store.pinned = Some(cache.clone());
        let task = tokio::task::spawn_blocking(move || work(store));
        match tokio::time::timeout(self.timeout, task).await {
            Ok(joined) => {
                let result =
                    joined.map_err(|e| StoreError::Internal(format!("a git task failed: {e}")))?;
                self.handle.retire_if_spent(&cache);
                result
            }
            // The blocking task finishes on its own (every answer it reads must come within the
            // timeout, see plumbing::limits; ssh's pipes have a watchdog, plumbing::ssh); a push
            // still in flight is atomic on the server, so the remote is either unchanged or
            // fully updated.
            Err(_) => Err(StoreError::Unavailable(format!(
                "{} did not answer within {} s",
                self.endpoint.display,
                self.timeout.as_secs_f32()
            ))),
        }
    }

    fn snapshot_blocking(&self, path: &StatePath) -> Result<Snapshot, StoreError> {
        let lock_ref = path.lock_ref();
        let lock_file = path.lock_file();
        // The state and lock blobs come over the same session as the tips.
        let file = |name: &str| {
            if name == self.state_ref {
                Some(path.as_str().to_owned())
            } else if name == lock_ref {
                Some(lock_file.clone())
            } else {
                None
            }
        };
        let tips =
            self.cache()?
                .refresh_reading(&self.endpoint, &[&self.state_ref, &lock_ref], &file)?;
        let state_tip = tips.get(&self.state_ref).copied();
        let lock_tip = tips.get(&lock_ref).copied();
        Ok(Snapshot {
            state_tip: state_tip.map(|id| id.to_string()),
            state: self.read(state_tip, path.as_str())?,
            lock_tip: lock_tip.map(|id| id.to_string()),
            lock: match lock_tip {
                Some(_) => Some(self.read(lock_tip, &path.lock_file())?.unwrap_or_default()),
                None => None,
            },
        })
    }

    fn update_state_blocking(
        &self,
        path: &StatePath,
        base: Option<&Revision>,
        change: &StateChange,
        message: &str,
    ) -> Result<Revision, StoreError> {
        let base = base.map(|b| parse_id(b)).transpose()?;
        if let Some(base) = base {
            if !self.cache()?.repo().has_object(base) {
                // Read by another process or before the cache was recreated: fetch it now.
                let tips = self.cache()?.refresh(&self.endpoint, &[&self.state_ref])?;
                if tips.get(&self.state_ref) != Some(&base) {
                    return Err(StoreError::Stale);
                }
            }
        }
        let session = ReceivePack::connect(&self.endpoint)?;
        if session.tip(&self.state_ref) != base {
            // Moved already: do not upload a pack the server would refuse.
            return Err(StoreError::Stale);
        }
        self.push_state(session, path, base, change, message)
    }

    fn create_lock_blocking(
        &self,
        path: &StatePath,
        content: &[u8],
        message: &str,
    ) -> Result<LockCreate, StoreError> {
        let lock_ref = path.lock_ref();
        let lock_file = path.lock_file();
        let outgoing = self.build(&lock_file, |repo| {
            lock_commit(repo, &lock_file, content, message)
        })?;
        let update = RefUpdate {
            name: lock_ref.clone(),
            old: ObjectId::null(gix::hash::Kind::Sha1),
            new: outgoing.commit,
        };
        let created = || -> Result<LockCreate, StoreError> {
            self.cache()?
                .record_pushed(&outgoing.objects, &lock_ref, Some(outgoing.commit))?;
            Ok(LockCreate::Created)
        };
        // The lock must not exist, which the push itself checks: no advertisement needed. Not
        // when the cache last saw the state locked: a held lock (Terraform polling with
        // -lock-timeout) is then found without pushing anything.
        if onepost::possible(&self.endpoint) && self.cache()?.tracked(&lock_ref).is_none() {
            match self.push_in_one_request(&update, &outgoing.objects) {
                Some(Ok(Pushed::Accepted)) => return created(),
                Some(Ok(Pushed::Lost)) => return self.held(path),
                _ => {}
            }
        }
        let session = ReceivePack::connect(&self.endpoint)?;
        if session.tip(&lock_ref).is_some() {
            drop(session);
            return self.held(path);
        }
        if self.push_one(session, update, Some(&outgoing))? {
            created()
        } else {
            self.held(path)
        }
    }

    fn read_lock_blocking(
        &self,
        path: &StatePath,
    ) -> Result<Option<(Revision, Bytes)>, StoreError> {
        let lock_ref = path.lock_ref();
        let lock_file = path.lock_file();
        let tips = self
            .cache()?
            .refresh_reading(&self.endpoint, &[&lock_ref], &|_| Some(lock_file.clone()))?;
        match tips.get(&lock_ref) {
            Some(tip) => Ok(Some((
                tip.to_string(),
                self.read(Some(*tip), &path.lock_file())?
                    .unwrap_or_default(),
            ))),
            None => Ok(None),
        }
    }

    fn delete_lock_blocking(&self, path: &StatePath, tip: &Revision) -> Result<(), StoreError> {
        let lock_ref = path.lock_ref();
        let old = parse_id(tip)?;
        let session = ReceivePack::connect(&self.endpoint)?;
        if session.tip(&lock_ref) != Some(old) {
            return Err(StoreError::Stale);
        }
        self.push_lock_delete(session, path, old)
    }

    fn history_blocking(
        &self,
        path: &StatePath,
        limit: usize,
    ) -> Result<Vec<gitstate_core::Version>, StoreError> {
        match self.history_cache()? {
            (cache, Some(tip)) => {
                crate::history::versions(&cache.repo(), tip, path.as_str(), limit)
            }
            (_, None) => Ok(Vec::new()),
        }
    }

    fn read_version_blocking(
        &self,
        path: &StatePath,
        commit: &Revision,
    ) -> Result<Option<Bytes>, StoreError> {
        let commit = parse_id(commit)?;
        // A commit never changes: once this store has checked the remote (the history that
        // named the commit, in the same request), a commit the history cache holds is read
        // without asking again. Otherwise: check and fetch first.
        let checked = self
            .history_checked
            .load(std::sync::atomic::Ordering::Acquire);
        let cache = match self.handle.history()? {
            cache if checked && cache.repo().has_object(commit) => cache,
            _ => self.history_cache()?.0,
        };
        crate::history::read_at(&cache.repo(), commit, path.as_str())
    }

    fn list_states_blocking(&self) -> Result<Vec<gitstate_core::StateListing>, StoreError> {
        match self.history_cache()? {
            (cache, Some(tip)) => crate::history::listing(&cache.repo(), tip),
            (_, None) => Ok(Vec::new()),
        }
    }

    fn list_locks_blocking(&self) -> Result<Vec<gitstate_core::HeldLock>, StoreError> {
        let pattern = format!("{}*", crate::LOCK_REF_PREFIX);
        let lock_file = |name: &str| {
            name.strip_prefix(crate::LOCK_REF_PREFIX)
                .and_then(|p| StatePath::parse(p).ok())
                .map(|p| p.lock_file())
        };
        let tips = self
            .cache()?
            .refresh_reading(&self.endpoint, &[&pattern], &lock_file)?;
        crate::held_locks(&self.cache()?.repo(), tips)
    }

    fn begin_blocking(
        &self,
        path: &StatePath,
        intent: Intent,
    ) -> Result<Box<dyn WriteSession>, StoreError> {
        Ok(Box::new(self.begin_session(path, intent)?))
    }

    fn check_blocking(&self) -> Result<(), StoreError> {
        ReceivePack::connect(&self.endpoint).map(|_| ())
    }
}
