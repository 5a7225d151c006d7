//! In-memory fakes of the ports ([`StateStore`], [`Sealer`], [`StoreRegistry`], [`Catalog`]), so that the protocol rules in
//! [`crate::Backend`] and the HTTP layer can be tested without git or a key service.
//!
//! They keep the rules the ports state (every mutation is compare-and-swap; a seal is bound to its
//! place and uses fresh key material) and let a test inject what real adapters do under load or
//! failure: another writer winning the compare-and-swap, a key service outage. They are not
//! adapters: nothing in a deployment uses them (the `fakes` feature is for tests).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use bytes::Bytes;

use crate::catalog::{
    AuditEntry, Catalog, CatalogChange, CatalogError, CatalogEvent, Duplicate, LockEntry,
    LockFacts, ManagedBy, ResourceIdentifier, StateEntry,
};
use crate::path::StatePath;
use crate::seal::{Opener, Place, SealError, Sealer};
use crate::store::{
    Credentials, HeldLock, Intent, LockCreate, RegistryError, Revision, Snapshot, StateChange,
    StateListing, StateStore, StoreError, StoreRegistry, WriteSession,
};

/// One commit the fake store made on its state branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeCommit {
    /// Its id.
    pub id: Revision,
    /// The path it changed.
    pub path: String,
    /// The stored bytes (`None`: the file was deleted).
    pub content: Option<Bytes>,
    /// The commit message.
    pub message: String,
}

#[derive(Debug, Default)]
struct Repository {
    /// Tip of the state branch and the files at it.
    tip: Option<Revision>,
    files: BTreeMap<String, Bytes>,
    /// Every commit on the state branch, oldest first (those of [`MemoryStore::move_branch`]
    /// included).
    commits: Vec<FakeCommit>,
    /// Lock branches: path → (tip, lock file, commit message).
    locks: BTreeMap<String, (Revision, Bytes, String)>,
}

/// A [`StateStore`] in memory: one state branch and its lock branches, with the port's
/// compare-and-swap rules. Ids are `c1`, `c2`, … in the order the store makes them.
#[derive(Debug, Default)]
pub struct MemoryStore {
    name: String,
    repository: Mutex<Repository>,
    next_id: AtomicU64,
    /// Compare-and-swaps that will still be lost to a simulated concurrent writer.
    lose: AtomicU32,
    /// Compare-and-swaps attempted (state and lock deletions).
    attempts: AtomicU32,
    /// The LockInfo the simulated concurrent writer also takes the state's lock with.
    rival_lock: Mutex<Option<Bytes>>,
    /// What this store "remembers" of locks it wrote, per path (tip, LockInfo), for
    /// [`Intent::Release`]: possibly out of date, as a cache is.
    remembered: Mutex<BTreeMap<String, (Revision, Bytes)>>,
    /// What this store "remembers" of the state branch and a lock, per path, for
    /// [`Intent::HeldWrite`]: possibly out of date, as a cache is.
    remembered_writes: Mutex<BTreeMap<String, Snapshot>>,
}

impl MemoryStore {
    /// An empty store whose repository is named `name` (what sealed documents are bound to).
    pub fn named(name: &str) -> Arc<MemoryStore> {
        Arc::new(MemoryStore {
            name: name.to_owned(),
            ..MemoryStore::default()
        })
    }

    fn repo(&self) -> MutexGuard<'_, Repository> {
        // A test that panicked while holding the lock has failed already; keep the data.
        self.repository
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn new_id(&self) -> Revision {
        format!("c{}", self.next_id.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// Makes the store remember the lock of `path` as `(tip, content)`, whatever the lock is now
    /// (a cache that another process made out of date): an [`Intent::Release`] session begins
    /// from it.
    pub fn remember_lock(&self, path: &str, tip: &str, content: &[u8]) {
        self.remembered
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(
                path.to_owned(),
                (tip.to_owned(), Bytes::copy_from_slice(content)),
            );
    }

    /// Makes the store remember `snapshot` (state tip and file, lock tip and LockInfo) for
    /// `path`, whatever is stored now: an [`Intent::HeldWrite`] session begins from it, and its
    /// write succeeds only if the branch is still at the remembered tip and the lock at the
    /// remembered one.
    pub fn remember_write(&self, path: &str, snapshot: Snapshot) {
        self.remembered_writes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(path.to_owned(), snapshot);
    }

    /// The next `n` compare-and-swaps (state writes and lock deletions) are lost: just before
    /// each, another writer moves the branch (an unrelated file changes; a lock is taken again
    /// by the same holder), as a concurrent process would.
    pub fn lose_next(&self, n: u32) {
        self.lose.store(n, Ordering::SeqCst);
    }

    /// Like [`MemoryStore::lose_next`], and the winner also takes the state's lock with
    /// `lock_info` (another client ran `terraform apply` in between).
    pub fn lose_next_to_a_locker(&self, n: u32, lock_info: &[u8]) {
        *self
            .rival_lock
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) =
            Some(Bytes::copy_from_slice(lock_info));
        self.lose_next(n);
    }

    /// How many compare-and-swaps were attempted.
    pub fn attempts(&self) -> u32 {
        self.attempts.load(Ordering::SeqCst)
    }

    /// Every commit on the state branch, oldest first.
    pub fn commits(&self) -> Vec<FakeCommit> {
        self.repo().commits.clone()
    }

    /// The commits that changed `path`, oldest first.
    pub fn commits_of(&self, path: &str) -> Vec<FakeCommit> {
        self.commits()
            .into_iter()
            .filter(|c| c.path == path)
            .collect()
    }

    /// The stored bytes of `path` at the tip.
    pub fn file(&self, path: &str) -> Option<Bytes> {
        self.repo().files.get(path).cloned()
    }

    /// The lock file of `path`, if its lock branch exists.
    pub fn lock_file(&self, path: &str) -> Option<Bytes> {
        self.repo()
            .locks
            .get(path)
            .map(|(_, content, _)| content.clone())
    }

    /// The commit message of `path`'s lock commit, if its lock branch exists.
    pub fn lock_message(&self, path: &str) -> Option<String> {
        self.repo()
            .locks
            .get(path)
            .map(|(_, _, message)| message.clone())
    }

    /// Writes `path` directly, as a commit made outside gitstate (a planted or hand-edited file).
    pub fn plant(&self, path: &str, content: &[u8]) -> Revision {
        let id = self.new_id();
        let mut repo = self.repo();
        commit(
            &mut repo,
            &id,
            path,
            Some(Bytes::copy_from_slice(content)),
            "planted",
        );
        id
    }

    /// Takes `path`'s lock branch directly with `content` as its lock file.
    pub fn plant_lock(&self, path: &str, content: &[u8]) -> Revision {
        let id = self.new_id();
        self.repo().locks.insert(
            path.to_owned(),
            (
                id.clone(),
                Bytes::copy_from_slice(content),
                "planted".into(),
            ),
        );
        id
    }

    /// Moves the state branch with a commit to an unrelated file, as another writer would.
    pub fn move_branch(&self) -> Revision {
        self.plant("other-writer.tfstate", b"{}")
    }

    /// True when a simulated concurrent writer takes this compare-and-swap.
    fn loses_this_one(&self) -> bool {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        self.lose
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }
}

fn commit(repo: &mut Repository, id: &str, path: &str, content: Option<Bytes>, message: &str) {
    match &content {
        Some(bytes) => repo.files.insert(path.to_owned(), bytes.clone()),
        None => repo.files.remove(path),
    };
    repo.tip = Some(id.to_owned());
    repo.commits.push(FakeCommit {
        id: id.to_owned(),
        path: path.to_owned(),
        content,
        message: message.to_owned(),
    });
}

#[async_trait]
impl StateStore for MemoryStore {
    async fn snapshot(&self, path: &StatePath) -> Result<Snapshot, StoreError> {
        let repo = self.repo();
        let lock = repo.locks.get(path.as_str());
        Ok(Snapshot {
            state_tip: repo.tip.clone(),
            state: repo.files.get(path.as_str()).cloned(),
            lock_tip: lock.map(|(tip, _, _)| tip.clone()),
            lock: lock.map(|(_, content, _)| content.clone()),
        })
    }

    async fn update_state(
        &self,
        path: &StatePath,
        base: Option<&Revision>,
        change: StateChange,
        message: &str,
    ) -> Result<Revision, StoreError> {
        if self.loses_this_one() {
            self.move_branch();
            let rival = self
                .rival_lock
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .clone();
            if let Some(lock_info) = rival {
                self.plant_lock(path.as_str(), &lock_info);
            }
        }
        let id = self.new_id();
        let mut repo = self.repo();
        if repo.tip.as_ref() != base {
            return Err(StoreError::Stale);
        }
        let content = match change {
            StateChange::Write(bytes) => Some(bytes),
            StateChange::Delete => None,
        };
        commit(&mut repo, &id, path.as_str(), content, message);
        Ok(id)
    }

    async fn create_lock(
        &self,
        path: &StatePath,
        content: Bytes,
        message: &str,
    ) -> Result<LockCreate, StoreError> {
        let id = self.new_id();
        let mut repo = self.repo();
        if let Some((tip, held, _)) = repo.locks.get(path.as_str()) {
            return Ok(LockCreate::Held {
                tip: tip.clone(),
                content: held.clone(),
            });
        }
        repo.locks
            .insert(path.as_str().to_owned(), (id, content, message.to_owned()));
        Ok(LockCreate::Created)
    }

    fn repository(&self) -> &str {
        &self.name
    }

    async fn delete_lock(&self, path: &StatePath, tip: &Revision) -> Result<(), StoreError> {
        if self.loses_this_one() {
            // Another request re-took the lock in between (same holder, new commit).
            let id = self.new_id();
            if let Some(entry) = self.repo().locks.get_mut(path.as_str()) {
                entry.0 = id;
            }
        }
        let mut repo = self.repo();
        match repo.locks.get(path.as_str()) {
            Some((current, _, _)) if current == tip => {
                repo.locks.remove(path.as_str());
                Ok(())
            }
            _ => Err(StoreError::Stale),
        }
    }

    async fn list_states(&self) -> Result<Vec<StateListing>, StoreError> {
        Ok(self
            .repo()
            .files
            .iter()
            .map(|(path, bytes)| StateListing {
                path: path.clone(),
                size: bytes.len() as u64,
                last_change: None,
            })
            .collect())
    }

    async fn begin<'a>(
        &'a self,
        path: &StatePath,
        intent: Intent,
    ) -> Result<Box<dyn WriteSession + 'a>, StoreError> {
        let remembered = match intent {
            Intent::Release => self
                .remembered
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .remove(path.as_str())
                .map(|(tip, lock)| Snapshot {
                    lock_tip: Some(tip),
                    lock: Some(lock),
                    ..Snapshot::default()
                }),
            Intent::HeldWrite => self
                .remembered_writes
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .remove(path.as_str()),
            Intent::Write | Intent::Unlock => None,
        };
        match remembered {
            Some(snapshot) => Ok(Box::new(Recalled {
                store: self,
                path: path.clone(),
                snapshot,
            })),
            None => crate::store::begin_with_separate_calls(self, path, intent).await,
        }
    }

    async fn list_locks(&self) -> Result<Vec<HeldLock>, StoreError> {
        Ok(self
            .repo()
            .locks
            .iter()
            .map(|(path, (tip, content, _))| HeldLock {
                path: path.clone(),
                tip: tip.clone(),
                content: content.clone(),
            })
            .collect())
    }
}

/// A session begun from the store's memory ([`MemoryStore::remember_lock`],
/// [`MemoryStore::remember_write`]): a release deletes the remembered lock tip, if it is still
/// the lock's; a write needs the remembered lock tip and state tip both still current.
struct Recalled<'a> {
    store: &'a MemoryStore,
    path: StatePath,
    snapshot: Snapshot,
}

#[async_trait]
impl WriteSession for Recalled<'_> {
    fn snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    async fn update_state(
        self: Box<Self>,
        change: StateChange,
        message: &str,
    ) -> Result<Revision, StoreError> {
        let lock_now = self
            .store
            .repo()
            .locks
            .get(self.path.as_str())
            .map(|(tip, _, _)| tip.clone());
        if lock_now != self.snapshot.lock_tip {
            return Err(StoreError::Stale);
        }
        // The lock still holds: the write is the default session's, from the remembered tip.
        let this = *self;
        let session = crate::store::SeparateCalls {
            store: this.store,
            path: this.path,
            snapshot: this.snapshot,
        };
        Box::new(session).update_state(change, message).await
    }

    async fn delete_lock(self: Box<Self>) -> Result<(), StoreError> {
        let tip = self.snapshot.lock_tip.clone().unwrap_or_default();
        self.store.delete_lock(&self.path, &tip).await
    }

    fn recalled(&self) -> bool {
        true
    }
}

/// The prefix of every document [`MemorySealer`] seals; anything else it reads is plaintext.
pub const FAKE_SEAL_PREFIX: &str = "fake-sealed ";

/// A [`Sealer`] that keeps the port's rules without cryptography: a sealed document is
/// `fake-sealed {place} {nonce} {state}`, bound to its place (opened elsewhere: `Misplaced`),
/// with a fresh nonce per seal (standing for a fresh data key). Plaintext reads as it is unless
/// `enforced`. It can be made to fail like an unreachable key service.
#[derive(Debug, Default)]
pub struct MemorySealer {
    enforced: bool,
    nonce: AtomicU64,
    outage: std::sync::atomic::AtomicBool,
    seals: AtomicU32,
}

impl MemorySealer {
    /// A sealer that also serves plaintext written before sealing was configured.
    pub fn new() -> Arc<MemorySealer> {
        Arc::new(MemorySealer::default())
    }

    /// A sealer that serves only what it sealed.
    pub fn enforced() -> Arc<MemorySealer> {
        Arc::new(MemorySealer {
            enforced: true,
            ..MemorySealer::default()
        })
    }

    /// Makes every call fail as when the key service cannot be reached (`true`), or work again.
    pub fn set_outage(&self, outage: bool) {
        self.outage.store(outage, Ordering::SeqCst);
    }

    /// How many documents it sealed.
    pub fn seals(&self) -> u32 {
        self.seals.load(Ordering::SeqCst)
    }

    fn available(&self) -> Result<(), SealError> {
        if self.outage.load(Ordering::SeqCst) {
            Err(SealError::Unavailable(
                "the fake key service is unreachable".into(),
            ))
        } else {
            Ok(())
        }
    }
}

#[async_trait]
impl Sealer for MemorySealer {
    async fn seal(&self, at: &Place, plain: Bytes) -> Result<Bytes, SealError> {
        self.available()?;
        let text = std::str::from_utf8(&plain)
            .map_err(|_| SealError::BadInput("the state is not UTF-8".into()))?;
        self.seals.fetch_add(1, Ordering::SeqCst);
        let nonce = self.nonce.fetch_add(1, Ordering::SeqCst);
        Ok(Bytes::from(format!(
            "{FAKE_SEAL_PREFIX}{at} {nonce} {text}"
        )))
    }

    async fn open(&self, at: &Place, stored: Bytes) -> Result<Bytes, SealError> {
        let Some(rest) = stored.strip_prefix(FAKE_SEAL_PREFIX.as_bytes()) else {
            if self.enforced {
                return Err(SealError::NotSealedHere(format!(
                    "the stored state at {at} was not sealed by this server"
                )));
            }
            return Ok(stored);
        };
        self.available()?;
        let mut parts = rest.splitn(3, |b| *b == b' ');
        let (Some(place), Some(_nonce), Some(state)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(SealError::Tampered(format!(
                "the sealed document at {at} is cut short"
            )));
        };
        if place != at.to_string().as_bytes() {
            return Err(SealError::Misplaced(format!(
                "the state at {at} was sealed for {}",
                String::from_utf8_lossy(place)
            )));
        }
        Ok(Bytes::copy_from_slice(state))
    }
}

/// An [`Opener`] without cryptography, standing for terraform-backend-git's legacy aes: a file
/// in its format is the byte 0xff, then `fake-aes {key} {state}` (binary: not JSON, not UTF-8);
/// it opens under its key only.
#[derive(Debug)]
pub struct MemoryOpener {
    key: String,
}

impl MemoryOpener {
    /// An opener of files sealed under `key`.
    pub fn new(key: &str) -> Arc<MemoryOpener> {
        Arc::new(MemoryOpener {
            key: key.to_owned(),
        })
    }

    /// `state` in the fake legacy format under `key`.
    pub fn seal(key: &str, state: &[u8]) -> Vec<u8> {
        let mut out = vec![0xff];
        out.extend_from_slice(format!("fake-aes {key} ").as_bytes());
        out.extend_from_slice(state);
        out
    }
}

impl Opener for MemoryOpener {
    fn format(&self) -> &str {
        "fake legacy aes"
    }

    fn key_source(&self) -> &str {
        "the configured fake passphrase"
    }

    fn open(&self, stored: &[u8]) -> Option<Bytes> {
        let prefix = MemoryOpener::seal(&self.key, b"");
        stored
            .strip_prefix(prefix.as_slice())
            .map(Bytes::copy_from_slice)
    }
}

/// A [`StoreRegistry`] of named [`MemoryStore`]s that admits every caller and refuses every
/// ad-hoc address (a deployment without an `allow` list).
#[derive(Debug, Default)]
pub struct MemoryRegistry {
    stores: BTreeMap<String, Arc<MemoryStore>>,
    /// Team mode: only callers with this password are admitted (anonymous ones get 401).
    token: Option<String>,
    /// Pass-through mode: what spans repositories is refused to everyone.
    passthrough: bool,
}

impl MemoryRegistry {
    /// A registry of one store per name that admits every caller (server mode).
    pub fn with(names: &[&str]) -> Arc<MemoryRegistry> {
        Arc::new(MemoryRegistry::of(names))
    }

    /// [`MemoryRegistry::with`] in team mode: only the password `token` is admitted.
    pub fn team(names: &[&str], token: &str) -> Arc<MemoryRegistry> {
        Arc::new(MemoryRegistry {
            token: Some(token.to_owned()),
            ..MemoryRegistry::of(names)
        })
    }

    /// [`MemoryRegistry::with`] in pass-through mode: nothing that spans repositories is
    /// served.
    pub fn passthrough(names: &[&str]) -> Arc<MemoryRegistry> {
        Arc::new(MemoryRegistry {
            passthrough: true,
            ..MemoryRegistry::of(names)
        })
    }

    fn of(names: &[&str]) -> MemoryRegistry {
        MemoryRegistry {
            stores: names
                .iter()
                .map(|name| ((*name).to_owned(), MemoryStore::named(name)))
                .collect(),
            token: None,
            passthrough: false,
        }
    }

    /// The store named `name`.
    pub fn store(&self, name: &str) -> Option<Arc<MemoryStore>> {
        self.stores.get(name).cloned()
    }
}

#[async_trait]
impl StoreRegistry for MemoryRegistry {
    async fn authenticate(&self, caller: Option<&Credentials>) -> Result<(), RegistryError> {
        match (&self.token, caller) {
            (None, _) => Ok(()),
            (Some(token), Some(c)) if c.password == *token => Ok(()),
            (Some(_), _) => Err(RegistryError::Unauthenticated("send the team token".into())),
        }
    }

    fn named(
        &self,
        name: &str,
        _caller: Option<&Credentials>,
    ) -> Result<Arc<dyn StateStore>, RegistryError> {
        match self.stores.get(name) {
            Some(store) => Ok(store.clone()),
            None => Err(RegistryError::UnknownRepository(name.to_owned())),
        }
    }

    fn adhoc(
        &self,
        _url: &str,
        _git_ref: &str,
        _caller: Option<&Credentials>,
    ) -> Result<Arc<dyn StateStore>, RegistryError> {
        Err(RegistryError::NotAllowed(
            "this deployment allows no ad-hoc repository addresses".into(),
        ))
    }

    fn names(&self) -> Vec<String> {
        self.stores.keys().cloned().collect()
    }

    fn admit_operator(&self, _caller: Option<&Credentials>) -> Result<(), RegistryError> {
        if self.passthrough {
            return Err(RegistryError::NotAllowed("spans repositories".into()));
        }
        Ok(())
    }
}

/// A [`Catalog`] in memory with the port's rules: an older serial never overwrites a newer one,
/// a delete drops the state's identifiers from the index. It can be made to fail, as an
/// unreachable table would.
#[derive(Debug, Default)]
pub struct MemoryCatalog {
    inner: Mutex<CatalogData>,
    outage: std::sync::atomic::AtomicBool,
}

#[derive(Debug, Default)]
struct CatalogData {
    /// Every recorded event, in the order `record` was called.
    events: Vec<CatalogEvent>,
    entries: BTreeMap<(String, String), StateEntry>,
    index: BTreeMap<(String, String), Vec<ResourceIdentifier>>,
}

impl MemoryCatalog {
    /// An empty catalog.
    pub fn new() -> Arc<MemoryCatalog> {
        Arc::new(MemoryCatalog::default())
    }

    /// Makes every call fail (`true`), or work again.
    pub fn set_outage(&self, outage: bool) {
        self.outage.store(outage, Ordering::SeqCst);
    }

    /// Every event recorded, in the order it arrived.
    pub fn events(&self) -> Vec<CatalogEvent> {
        self.data().events.clone()
    }

    fn data(&self) -> MutexGuard<'_, CatalogData> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn available(&self) -> Result<MutexGuard<'_, CatalogData>, CatalogError> {
        if self.outage.load(Ordering::SeqCst) {
            return Err(CatalogError("the fake catalog table is unreachable".into()));
        }
        Ok(self.data())
    }
}

fn lock_entry(facts: &LockFacts) -> LockEntry {
    LockEntry {
        id: facts.id.clone(),
        who: facts.who.clone(),
        operation: facts.operation.clone(),
        created: facts.created.clone(),
    }
}

impl CatalogData {
    fn apply(&mut self, event: &CatalogEvent) {
        let key = (event.repository.clone(), event.path.clone());
        let entry = self
            .entries
            .entry(key.clone())
            .or_insert_with(|| StateEntry {
                repository: event.repository.clone(),
                path: event.path.clone(),
                ..StateEntry::default()
            });
        match &event.change {
            CatalogChange::Write(facts) => {
                if entry.serial.is_some() && facts.serial < entry.serial && !entry.deleted {
                    return;
                }
                entry.serial = facts.serial;
                entry.lineage = facts.lineage.clone();
                entry.size = Some(facts.size);
                entry.terraform_version = facts.terraform_version.clone();
                entry.resource_count = facts.resource_count;
                if facts.commit.is_some() {
                    entry.commit = facts.commit.clone();
                }
                entry.updated_by = Some(event.who.clone());
                entry.deleted = false;
                self.index.insert(key, facts.identifiers.clone());
            }
            CatalogChange::Delete { commit } => {
                entry.deleted = true;
                entry.commit = commit.clone();
                entry.updated_by = Some(event.who.clone());
                self.index.remove(&key);
            }
            CatalogChange::Lock(facts) => entry.lock = Some(lock_entry(facts)),
            CatalogChange::Unlock { .. } => entry.lock = None,
        }
    }

    fn managed_by(&self) -> Vec<(ResourceIdentifier, ManagedBy)> {
        let mut all = Vec::new();
        for ((repository, path), identifiers) in &self.index {
            for id in identifiers {
                all.push((
                    id.clone(),
                    ManagedBy {
                        repository: repository.clone(),
                        path: path.clone(),
                        address: id.address.clone(),
                        resource_type: id.resource_type.clone(),
                        field: id.field.clone(),
                    },
                ));
            }
        }
        all
    }
}

#[async_trait]
impl Catalog for MemoryCatalog {
    async fn record(&self, event: CatalogEvent) -> Result<(), CatalogError> {
        let mut data = self.available()?;
        data.apply(&event);
        data.events.push(event);
        Ok(())
    }

    async fn rebuild_entry(
        &self,
        event: CatalogEvent,
        lock: Option<LockFacts>,
    ) -> Result<(), CatalogError> {
        let mut data = self.available()?;
        let key = (event.repository.clone(), event.path.clone());
        data.entries.remove(&key);
        data.apply(&event);
        if let Some(entry) = data.entries.get_mut(&key) {
            entry.lock = lock.as_ref().map(lock_entry);
        }
        Ok(())
    }

    async fn forget_missing(
        &self,
        repository: &str,
        present: &std::collections::BTreeSet<String>,
    ) -> Result<usize, CatalogError> {
        let mut data = self.available()?;
        let gone: Vec<_> = data
            .entries
            .iter()
            .filter(|((repo, path), entry)| {
                repo == repository && !entry.deleted && !present.contains(path)
            })
            .map(|(key, _)| key.clone())
            .collect();
        for key in &gone {
            data.index.remove(key);
            if let Some(entry) = data.entries.get_mut(key) {
                entry.deleted = true;
            }
        }
        Ok(gone.len())
    }

    async fn rebuild_duplicates(&self) -> Result<usize, CatalogError> {
        drop(self.available()?);
        Ok(self.duplicates().await?.len())
    }

    async fn states(&self) -> Result<Vec<StateEntry>, CatalogError> {
        Ok(self.available()?.entries.values().cloned().collect())
    }

    async fn audit(&self, repository: &str, path: &str) -> Result<Vec<AuditEntry>, CatalogError> {
        let data = self.available()?;
        Ok(data
            .events
            .iter()
            .filter(|e| e.repository == repository && e.path == path)
            .map(|e| {
                let (action, serial, lock_id, commit) = match &e.change {
                    CatalogChange::Write(f) => ("write", f.serial, None, f.commit.clone()),
                    CatalogChange::Delete { commit } => ("delete", None, None, commit.clone()),
                    CatalogChange::Lock(f) => ("lock", None, Some(f.id.clone()), None),
                    CatalogChange::Unlock { force: true } => ("force-unlock", None, None, None),
                    CatalogChange::Unlock { force: false } => ("unlock", None, None, None),
                };
                AuditEntry {
                    at: crate::time::format_rfc3339(
                        e.at.duration_since(std::time::UNIX_EPOCH)
                            .map_or(0, |d| d.as_secs() as i64),
                    ),
                    action: action.into(),
                    who: e.who.clone(),
                    serial,
                    lock_id,
                    commit,
                }
            })
            .collect())
    }

    async fn find(&self, value: &str) -> Result<Vec<ManagedBy>, CatalogError> {
        let mut found: Vec<ManagedBy> = self
            .available()?
            .managed_by()
            .into_iter()
            .filter(|(id, _)| id.value == value)
            .map(|(_, by)| by)
            .collect();
        found.sort();
        Ok(found)
    }

    async fn duplicates(&self) -> Result<Vec<Duplicate>, CatalogError> {
        let mut groups: BTreeMap<(String, String, String), Vec<ManagedBy>> = BTreeMap::new();
        for (id, by) in self.available()?.managed_by() {
            groups
                .entry((id.value, id.resource_type, id.field))
                .or_default()
                .push(by);
        }
        Ok(groups
            .into_iter()
            .filter_map(|((value, resource_type, field), mut managed_by)| {
                managed_by.sort();
                let states: std::collections::BTreeSet<_> = managed_by
                    .iter()
                    .map(|m| (m.repository.clone(), m.path.clone()))
                    .collect();
                (states.len() > 1).then_some(Duplicate {
                    value,
                    resource_type,
                    field,
                    managed_by,
                })
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(p: &str) -> StatePath {
        StatePath::parse(p).expect("a valid path")
    }

    #[tokio::test]
    async fn the_store_keeps_the_compare_and_swap_rules() {
        let store = MemoryStore::named("repo");
        let p = path("a.tfstate");
        let first = store
            .update_state(&p, None, StateChange::Write(Bytes::from("1")), "m")
            .await
            .expect("the first write creates the branch");
        assert_eq!(
            store
                .update_state(&p, None, StateChange::Write(Bytes::from("2")), "m")
                .await,
            Err(StoreError::Stale),
            "a write from an old base is stale"
        );
        store.lose_next(1);
        assert_eq!(
            store
                .update_state(&p, Some(&first), StateChange::Write(Bytes::from("2")), "m")
                .await,
            Err(StoreError::Stale),
            "a lost compare-and-swap is stale"
        );
        assert_eq!(store.file("a.tfstate"), Some(Bytes::from("1")));
        let lock = store
            .create_lock(&p, Bytes::from("L"), "lock")
            .await
            .expect("create");
        assert_eq!(lock, LockCreate::Created);
        let Ok(LockCreate::Held { tip, content }) =
            store.create_lock(&p, Bytes::from("M"), "lock").await
        else {
            panic!("a second lock must report the holder");
        };
        assert_eq!(content, Bytes::from("L"));
        assert_eq!(
            store.delete_lock(&p, &"nope".to_string()).await,
            Err(StoreError::Stale)
        );
        store.delete_lock(&p, &tip).await.expect("delete at tip");
        assert_eq!(store.lock_file("a.tfstate"), None);
    }

    #[tokio::test]
    async fn the_sealer_binds_documents_to_their_place_and_never_reuses_a_nonce() {
        let sealer = MemorySealer::new();
        let here = Place::new("repo", &path("a.tfstate"));
        let there = Place::new("repo", &path("b.tfstate"));
        let one = sealer.seal(&here, Bytes::from("{}")).await.expect("seal");
        let two = sealer.seal(&here, Bytes::from("{}")).await.expect("seal");
        assert_ne!(one, two, "every seal uses fresh key material");
        assert_eq!(sealer.open(&here, one.clone()).await, Ok(Bytes::from("{}")));
        assert!(matches!(
            sealer.open(&there, one).await,
            Err(SealError::Misplaced(_))
        ));
        assert_eq!(
            sealer.open(&here, Bytes::from("{\"plain\":1}")).await,
            Ok(Bytes::from("{\"plain\":1}"))
        );
        assert!(matches!(
            MemorySealer::enforced()
                .open(&here, Bytes::from("{}"))
                .await,
            Err(SealError::NotSealedHere(_))
        ));
        sealer.set_outage(true);
        assert!(matches!(
            sealer.seal(&here, Bytes::from("{}")).await,
            Err(SealError::Unavailable(_))
        ));
    }

    #[tokio::test]
    async fn the_catalog_keeps_the_newest_serial_and_indexes_only_live_states() {
        let catalog = MemoryCatalog::new();
        let id = |value: &str| ResourceIdentifier {
            value: value.into(),
            resource_type: "aws_s3_bucket".into(),
            field: "id".into(),
            address: "aws_s3_bucket.b".into(),
        };
        let write = |path: &str, serial: u64, ids: Vec<ResourceIdentifier>| CatalogEvent {
            repository: "r".into(),
            path: path.into(),
            who: "alice".into(),
            at: std::time::SystemTime::now(),
            change: CatalogChange::Write(crate::catalog::StateFacts {
                serial: Some(serial),
                identifiers: ids,
                ..Default::default()
            }),
        };
        catalog
            .record(write("a", 5, vec![id("logs")]))
            .await
            .expect("record");
        catalog.record(write("a", 4, vec![])).await.expect("record");
        assert_eq!(catalog.states().await.expect("states")[0].serial, Some(5));
        catalog
            .record(write("b", 1, vec![id("logs")]))
            .await
            .expect("record");
        assert_eq!(catalog.find("logs").await.expect("find").len(), 2);
        assert_eq!(catalog.duplicates().await.expect("dups").len(), 1);
        catalog
            .record(CatalogEvent {
                change: CatalogChange::Delete { commit: None },
                ..write("b", 0, vec![])
            })
            .await
            .expect("record");
        assert_eq!(catalog.find("logs").await.expect("find").len(), 1);
        assert_eq!(catalog.audit("r", "a").await.expect("audit").len(), 2);
        catalog.set_outage(true);
        assert!(catalog.states().await.is_err());
    }
}
