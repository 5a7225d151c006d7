//! In-memory fakes of the ports ([`StateStore`], [`Sealer`], [`StoreRegistry`]), so that the protocol rules in
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

use crate::path::StatePath;
use crate::seal::{Place, SealError, Sealer};
use crate::store::{
    Credentials, HeldLock, LockCreate, RegistryError, Revision, Snapshot, StateChange,
    StateListing, StateStore, StoreError, StoreRegistry,
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

    /// The next `n` compare-and-swaps (state writes and lock deletions) are lost: just before
    /// each, another writer moves the branch (an unrelated file changes; a lock is taken again
    /// by the same holder), as a concurrent process would.
    pub fn lose_next(&self, n: u32) {
        self.lose.store(n, Ordering::SeqCst);
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

/// A [`StoreRegistry`] of named [`MemoryStore`]s that admits every caller and refuses every
/// ad-hoc address (a deployment without an `allow` list).
#[derive(Debug, Default)]
pub struct MemoryRegistry {
    stores: BTreeMap<String, Arc<MemoryStore>>,
}

impl MemoryRegistry {
    /// A registry of one store per name.
    pub fn with(names: &[&str]) -> Arc<MemoryRegistry> {
        Arc::new(MemoryRegistry {
            stores: names
                .iter()
                .map(|name| ((*name).to_owned(), MemoryStore::named(name)))
                .collect(),
        })
    }

    /// The store named `name`.
    pub fn store(&self, name: &str) -> Option<Arc<MemoryStore>> {
        self.stores.get(name).cloned()
    }
}

impl StoreRegistry for MemoryRegistry {
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
}
