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
//! ([`gitstate_wire::onepost`]): the push alone, with the old id it must replace (none for a new
//! lock, the recorded one for a release) checked by the server; a new lock also asserts the state
//! branch at the tip whose trees admit it (`lock.rs`). Any doubt takes the two-request way.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use gitstate_core::Message;
use gitstate_core::{
    BlockingStore, Intent, LockCreate, LockRead, Revision, Snapshot, StatePath, StoreError,
    WriteAttempt,
};
use gitstate_url::Credentials;
use gix::ObjectId;

use crate::cache::{Cache, CacheHandle};
use crate::errors::from_wire;
use crate::objects::{parse_id, read_file};
use crate::push::{pack_objects, push_updates, Pushed};
use crate::target::Target;
use gitstate_wire::pack::Pack;
use gitstate_wire::sendpack::{ReceivePack, RefUpdate};
use gitstate_wire::transport::Endpoint;

mod attempt;
mod lock;

pub use attempt::RemoteAttempt;

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
            .field("url", &gitstate_url::redact_in_text(&self.url))
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
    /// The remote's state branch and the cache generation this request works with.
    target: Target,
    /// This store has passed a remote check of the history (with its credentials). A pass-through
    /// deployment makes a store per request, so this is "in this request" there.
    history_checked: Arc<std::sync::atomic::AtomicBool>,
}

/// Objects built in memory for one push, and the pack holding them.
struct Outgoing {
    commit: ObjectId,
    pack: Pack,
}

impl RemoteStore {
    /// Sets up the store; touches only the local cache directory (no network).
    pub fn new(config: RemoteConfig) -> Result<Self, StoreError> {
        let endpoint =
            Endpoint::parse(&config.url, config.credentials, config.timeout).map_err(from_wire)?;
        let handle = CacheHandle::for_url(&config.cache_dir, &endpoint.display)?;
        Ok(RemoteStore {
            target: Target {
                endpoint,
                state_ref: format!("refs/heads/{}", config.git_ref),
                handle,
                pinned: None,
                timeout: config.timeout,
                committer: Default::default(),
            },
            history_checked: Arc::default(),
        })
    }

    /// The same store writing its commits as `committer` (author and committer).
    pub fn with_committer(mut self, committer: crate::objects::Committer) -> Self {
        self.target.committer = committer;
        self
    }

    /// The same store with `network` enforced on every connection (an ad-hoc repository: its
    /// resolved addresses checked against the policy, no redirects).
    pub fn with_network(mut self, network: gitstate_url::NetworkGuard) -> Self {
        self.target.endpoint.network = network;
        self
    }

    /// The same store accepting answers of at most `max_bytes` from the remote (see
    /// [`gitstate_wire::limits`]).
    pub fn with_answer_limit(mut self, max_bytes: u64) -> Self {
        self.target.endpoint.limits.max_bytes = max_bytes;
        self
    }

    /// The remote URL without credentials.
    pub fn url(&self) -> &str {
        &self.target.endpoint.display
    }

    /// The directory of this remote's current cache generation.
    pub fn cache_dir(&self) -> std::path::PathBuf {
        match &self.target.pinned {
            Some(cache) => cache.dir().to_owned(),
            None => self
                .target
                .handle
                .current()
                .map(|c| c.dir().to_owned())
                .unwrap_or_default(),
        }
    }

    /// The cache generation this operation works with.
    fn cache(&self) -> Result<&Arc<Cache>, StoreError> {
        self.target.cache()
    }

    /// The file at `tip`, its blob fetched by id first when the (partial) cache lacks it.
    fn read(&self, tip: Option<ObjectId>, file: &str) -> Result<Option<Bytes>, StoreError> {
        match tip {
            Some(tip) => {
                let cache = self.cache()?;
                cache.ensure_files(&self.target.endpoint, &[(tip, file)])?;
                read_file(&cache.repo(), tip, file)
            }
            None => Ok(None),
        }
    }

    /// The state and lock of `path` at the tips `state_tip` and `lock_tip` (in the cache).
    fn snapshot_at(
        &self,
        path: &StatePath,
        state_tip: Option<ObjectId>,
        lock_tip: Option<ObjectId>,
    ) -> Result<Snapshot, StoreError> {
        Ok(Snapshot {
            state_tip: state_tip.map(|id| id.to_string()),
            state: self.read(state_tip, path.as_str())?,
            lock_tip: lock_tip.map(|id| id.to_string()),
            lock: match lock_tip {
                Some(_) => Some(self.read(lock_tip, &path.lock_file())?.unwrap_or_default()),
                None => None,
            },
            lock_token: match lock_tip {
                Some(tip) => crate::objects::lock_token_at(&self.cache()?.repo(), tip),
                None => None,
            },
        })
    }

    /// Builds objects in memory on top of the cache; returns exactly the objects the cache (and
    /// therefore the remote) lacks, plus every object on the changed path, in case the cache
    /// still holds an object the remote has since dropped.
    fn build(
        &self,
        base: Option<ObjectId>,
        file: &str,
        make: impl FnOnce(&gix::Repository) -> Result<ObjectId, StoreError>,
    ) -> Result<Outgoing, StoreError> {
        if let Some(base) = base {
            // The commit edits the trees on the path: a partial cache may lack some.
            self.cache()?
                .ensure_paths(&self.target.endpoint, &[(base, file)], false)?;
        }
        let repo = self.cache()?.repo().with_object_memory();
        let commit = make(&repo)?;
        let pack = pack_objects(repo, &[(commit, file)], &[])?;
        Ok(Outgoing { commit, pack })
    }

    /// Pushes one ref update; `Ok(true)` when accepted, `Ok(false)` when the server refused it
    /// as a lost compare-and-swap.
    fn push_one(
        &self,
        session: ReceivePack,
        update: RefUpdate,
        outgoing: Option<&Outgoing>,
    ) -> Result<bool, StoreError> {
        let empty = Pack::default();
        let pack = outgoing.map_or(&empty, |o| &o.pack);
        match push_updates(
            &self.target.endpoint,
            session,
            std::slice::from_ref(&update),
            pack,
        )? {
            Pushed::Accepted => Ok(true),
            Pushed::Lost => Ok(false),
            Pushed::Refused { error, .. } => Err(error),
        }
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
            Some(LockRead { tip, content, .. }) => Ok(LockCreate::Held { tip, content }),
            // Released meanwhile: the caller retries from a fresh read.
            None => Err(StoreError::Stale),
        }
    }
}

impl RemoteStore {
    /// The blobs a history or a listing page reads out of the history `cache`, fetched by id
    /// where it lacks them (it is fetched without blobs, DESIGN §9.5).
    fn blobs_of<'a>(
        &'a self,
        cache: &'a Cache,
    ) -> impl Fn(Vec<ObjectId>) -> Result<gix::Repository, StoreError> + 'a {
        move |ids| {
            cache.fetch_by_id(&self.target.endpoint, ids)?;
            Ok(cache.repo())
        }
    }

    /// Refreshes the history cache (a fresh remote check with this store's credentials, then a
    /// fetch of the state branch's missing history) and returns it with the branch tip.
    fn history_cache(&self) -> Result<(Arc<Cache>, Option<ObjectId>), StoreError> {
        let cache = self.target.handle.history()?;
        let tips = cache.refresh(&self.target.endpoint, &[&self.target.state_ref])?;
        self.history_checked
            .store(true, std::sync::atomic::Ordering::Release);
        let tip = tips.get(&self.target.state_ref).copied();
        Ok((cache, tip))
    }
}

// No per-process write serializer (the default): concurrent writes share pushes through the
// write queue.
impl BlockingStore for RemoteStore {
    /// Runs blocking git work on a cache generation, bounded by the store timeout (see
    /// [`Target::run`]).
    async fn run<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(RemoteStore) -> Result<T, StoreError> + Send + 'static,
    {
        let history_checked = self.history_checked.clone();
        self.target
            .run(move |target| {
                work(RemoteStore {
                    target,
                    history_checked,
                })
            })
            .await
    }

    fn snapshot_blocking(&self, path: &StatePath) -> Result<Snapshot, StoreError> {
        Ok(self.snapshot_beside_blocking(path, &[])?.0)
    }

    fn current_state_blocking(&self, path: &StatePath) -> Result<Option<Bytes>, StoreError> {
        // The state's blob comes over the same session as the tip; the lock branch is not read.
        let file = path.as_str().to_owned();
        let tips = self.cache()?.refresh_reading(
            &self.target.endpoint,
            &[&self.target.state_ref],
            &|_| vec![file.clone()],
        )?;
        self.read(tips.get(&self.target.state_ref).copied(), path.as_str())
    }

    fn snapshot_beside_blocking(
        &self,
        path: &StatePath,
        beside: &[StatePath],
    ) -> Result<(Snapshot, Vec<Option<Bytes>>), StoreError> {
        let lock_ref = path.lock_ref();
        let lock_file = path.lock_file();
        // The state, lock and `beside` blobs come over the same session as the tips.
        let files = |name: &str| {
            if name == self.target.state_ref {
                std::iter::once(path)
                    .chain(beside)
                    .map(|p| p.as_str().to_owned())
                    .collect()
            } else if name == lock_ref {
                vec![lock_file.clone()]
            } else {
                Vec::new()
            }
        };
        let tips = self.cache()?.refresh_reading(
            &self.target.endpoint,
            &[&self.target.state_ref, &lock_ref],
            &files,
        )?;
        let state_tip = tips.get(&self.target.state_ref).copied();
        let lock_tip = tips.get(&lock_ref).copied();
        let snapshot = self.snapshot_at(path, state_tip, lock_tip)?;
        let files = beside
            .iter()
            .map(|other| self.read(state_tip, other.as_str()))
            .collect::<Result<_, _>>()?;
        Ok((snapshot, files))
    }

    fn recalled_state_blocking(&self, path: &StatePath) -> Result<Option<Bytes>, StoreError> {
        let cache = self.cache()?;
        let Some(tip) = cache.tracked(&self.target.state_ref) else {
            return Ok(None);
        };
        let repo = cache.repo();
        // Only what is here: a tree or blob this partial cache lacks is not fetched for a memory.
        match crate::lookup::reach(&repo, tip, path.as_str())? {
            crate::lookup::Reach::Found(Some(entry))
                if entry.is_file() && repo.has_object(entry.id) =>
            {
                read_file(&repo, tip, path.as_str())
            }
            _ => Ok(None),
        }
    }

    fn recalled_exists_blocking(&self, path: &StatePath) -> Result<Option<bool>, StoreError> {
        let cache = self.cache()?;
        let Some(tip) = cache.tracked(&self.target.state_ref) else {
            return Ok(None);
        };
        // A tree on the path that this partial cache lacks: it cannot tell.
        Ok(
            match crate::lookup::reach(&cache.repo(), tip, path.as_str())? {
                crate::lookup::Reach::Found(entry) => Some(entry.is_some_and(|e| e.is_file())),
                crate::lookup::Reach::Lacks(_) => None,
            },
        )
    }

    fn create_lock_blocking(
        &self,
        path: &StatePath,
        content: &[u8],
        message: &Message,
    ) -> Result<LockCreate, StoreError> {
        self.create_lock_on_remote(path, content, message)
    }

    fn read_lock_blocking(&self, path: &StatePath) -> Result<Option<LockRead>, StoreError> {
        let lock_ref = path.lock_ref();
        let lock_file = path.lock_file();
        let tips = self
            .cache()?
            .refresh_reading(&self.target.endpoint, &[&lock_ref], &|_| {
                vec![lock_file.clone()]
            })?;
        match tips.get(&lock_ref) {
            Some(tip) => Ok(Some(LockRead {
                tip: tip.to_string(),
                content: self
                    .read(Some(*tip), &path.lock_file())?
                    .unwrap_or_default(),
                token: crate::objects::lock_token_at(&self.cache()?.repo(), *tip),
            })),
            None => Ok(None),
        }
    }

    fn delete_lock_blocking(&self, path: &StatePath, tip: &Revision) -> Result<(), StoreError> {
        let lock_ref = path.lock_ref();
        let old = parse_id(tip)?;
        let session = crate::repeat::receive_pack(&self.target.endpoint)?;
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
            (cache, Some(tip)) => crate::history::versions(
                &cache.repo(),
                tip,
                path.as_str(),
                limit,
                &self.blobs_of(&cache),
            ),
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
        let cache = match self.target.handle.history()? {
            cache if checked && cache.repo().has_object(commit) => cache,
            _ => self.history_cache()?.0,
        };
        // The history cache holds no blob nobody read (DESIGN §9.5).
        if cache.repo().has_object(commit) {
            cache.ensure_files(&self.target.endpoint, &[(commit, path.as_str())])?;
        }
        crate::history::read_at(&cache.repo(), commit, path.as_str())
    }

    fn list_states_blocking(
        &self,
        query: &gitstate_core::ListQuery,
    ) -> Result<gitstate_core::StatePage, StoreError> {
        match self.history_cache()? {
            (cache, Some(tip)) => {
                crate::listing::page(&cache.repo(), tip, query, &self.blobs_of(&cache))
            }
            (_, None) => Ok(gitstate_core::StatePage::default()),
        }
    }

    fn list_paths_blocking(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        match self.history_cache()? {
            (cache, Some(tip)) => crate::listing::paths(&cache.repo(), tip, prefix),
            (_, None) => Ok(Vec::new()),
        }
    }

    fn list_locks_blocking(&self) -> Result<Vec<gitstate_core::HeldLock>, StoreError> {
        let pattern = format!("{}*", crate::LOCK_REF_PREFIX);
        let lock_file = |name: &str| {
            name.strip_prefix(crate::LOCK_REF_PREFIX)
                .and_then(|p| StatePath::parse(p).ok())
                .map(|p| p.lock_file())
                .into_iter()
                .collect()
        };
        let tips = self
            .cache()?
            .refresh_reading(&self.target.endpoint, &[&pattern], &lock_file)?;
        crate::held_locks(&self.cache()?.repo(), tips)
    }

    fn begin_blocking(
        &self,
        path: &StatePath,
        intent: Intent,
    ) -> Result<Box<dyn WriteAttempt>, StoreError> {
        Ok(Box::new(self.begin_attempt(path, intent)?))
    }

    fn check_blocking(&self) -> Result<(), StoreError> {
        ReceivePack::connect(&self.target.endpoint)
            .map(|_| ())
            .map_err(from_wire)
    }
}
