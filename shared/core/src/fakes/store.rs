//! The fake [`StateStore`]: one branch of states and lock branches per repository, in memory.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use bytes::Bytes;

use crate::commit::Message;
use crate::listing::{ListQuery, StateListing, StatePage};
use crate::path::{PathConflict, StatePath, TreeEntry};
use crate::store::{
    HeldLock, Intent, LockCreate, Revision, Snapshot, StateChange, StateStore, StoreError,
    WriteAttempt,
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
    /// Other files it removed ([`StateChange::DeleteWith`]).
    pub also_removed: Vec<String>,
    /// The commit message.
    pub message: String,
    /// The author's name (`None`: the committer).
    pub author: Option<String>,
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

    /// The compare-and-swap every write ends with: one commit on `base` changing `path`, made
    /// only while the branch is still at `base` ([`StoreError::Stale`] otherwise).
    fn write_at(
        &self,
        path: &StatePath,
        base: Option<&Revision>,
        change: StateChange,
        message: &Message,
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
        if matches!(change, StateChange::Write(_)) {
            if let Some(conflict) = nesting_in_files(&repo.files, path) {
                return Err(StoreError::Conflict(conflict.to_string()));
            }
        }
        let (content, also) = match change {
            StateChange::Write(bytes) => (Some(bytes), Vec::new()),
            StateChange::Delete => (None, Vec::new()),
            StateChange::DeleteWith(also) => (None, also),
        };
        commit_with(&mut repo, &id, path.as_str(), content, &also, message);
        Ok(id)
    }

    /// Makes the store remember the lock of `path` as `(tip, content)`, whatever the lock is now
    /// (a cache that another process made out of date): an [`Intent::Release`] attempt begins
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
    /// `path`, whatever is stored now: an [`Intent::HeldWrite`] attempt begins from it, and its
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
            &Message::from("planted"),
        );
        id
    }

    /// Takes `path`'s lock branch directly with `content` as its lock file.
    pub fn plant_lock(&self, path: &str, content: &[u8]) -> Revision {
        self.plant_lock_commit(path, content, "planted")
    }

    /// Sets `path`'s lock branch directly to a commit with `content` as its lock file and
    /// `message` as its message, as anyone with push access could (a rewritten lock commit).
    pub fn plant_lock_commit(&self, path: &str, content: &[u8], message: &str) -> Revision {
        let id = self.new_id();
        self.repo().locks.insert(
            path.to_owned(),
            (
                id.clone(),
                Bytes::copy_from_slice(content),
                message.to_owned(),
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

fn commit(repo: &mut Repository, id: &str, path: &str, content: Option<Bytes>, message: &Message) {
    commit_with(repo, id, path, content, &[], message)
}

/// [`commit`], removing the files `also_removed` in the same commit.
fn commit_with(
    repo: &mut Repository,
    id: &str,
    path: &str,
    content: Option<Bytes>,
    also_removed: &[StatePath],
    message: &Message,
) {
    for other in also_removed {
        repo.files.remove(other.as_str());
    }
    match &content {
        Some(bytes) => repo.files.insert(path.to_owned(), bytes.clone()),
        None => repo.files.remove(path),
    };
    repo.tip = Some(id.to_owned());
    repo.commits.push(FakeCommit {
        id: id.to_owned(),
        path: path.to_owned(),
        content,
        also_removed: also_removed.iter().map(|p| p.as_str().to_owned()).collect(),
        message: message.text.clone(),
        author: message.author.as_ref().map(|a| a.name.clone()),
    });
}

/// What keeps a state out of `path` among the state files `files` ([`PathConflict::in_tree`]).
fn nesting_in_files(files: &BTreeMap<String, Bytes>, path: &StatePath) -> Option<PathConflict> {
    let at = |p: &str| -> Result<Option<TreeEntry>, std::convert::Infallible> {
        let inside = format!("{p}/");
        Ok(if files.contains_key(p) {
            Some(TreeEntry::File)
        } else if files
            .range(inside.clone()..)
            .next()
            .is_some_and(|(f, _)| f.starts_with(&inside))
        {
            Some(TreeEntry::Folder)
        } else {
            None
        })
    };
    match PathConflict::in_tree(path, at) {
        Ok(conflict) => conflict,
        Err(never) => match never {},
    }
}

/// The snapshot of `path` in `repo` as it is.
fn snapshot_in(repo: &Repository, path: &StatePath) -> Snapshot {
    let lock = repo.locks.get(path.as_str());
    Snapshot {
        state_tip: repo.tip.clone(),
        state: repo.files.get(path.as_str()).cloned(),
        lock_tip: lock.map(|(tip, _, _)| tip.clone()),
        lock: lock.map(|(_, content, _)| content.clone()),
        lock_token: lock
            .and_then(|(_, _, message)| crate::lock_token::LockToken::recorded(message)),
    }
}

#[async_trait]
impl StateStore for MemoryStore {
    async fn snapshot(&self, path: &StatePath) -> Result<Snapshot, StoreError> {
        Ok(snapshot_in(&self.repo(), path))
    }

    async fn snapshot_beside(
        &self,
        path: &StatePath,
        beside: &[StatePath],
    ) -> Result<(Snapshot, Vec<Option<Bytes>>), StoreError> {
        // One read of the repository: every file at the same tip.
        let repo = self.repo();
        let snapshot = snapshot_in(&repo, path);
        let files = beside
            .iter()
            .map(|other| repo.files.get(other.as_str()).cloned())
            .collect();
        Ok((snapshot, files))
    }

    async fn create_lock(
        &self,
        path: &StatePath,
        content: Bytes,
        message: &Message,
    ) -> Result<LockCreate, StoreError> {
        let id = self.new_id();
        let mut repo = self.repo();
        if let Some((tip, held, _)) = repo.locks.get(path.as_str()) {
            return Ok(LockCreate::Held {
                tip: tip.clone(),
                content: held.clone(),
            });
        }
        let locked = repo.locks.keys().map(String::as_str);
        if let Some(conflict) =
            PathConflict::among_locks(path, locked).or_else(|| nesting_in_files(&repo.files, path))
        {
            return Ok(LockCreate::Unwritable(conflict));
        }
        repo.locks.insert(
            path.as_str().to_owned(),
            (id, content, message.text.clone()),
        );
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

    async fn list_states(&self, query: &ListQuery) -> Result<StatePage, StoreError> {
        let listed: Vec<StateListing> = self
            .repo()
            .files
            .iter()
            .map(|(path, bytes)| StateListing {
                path: path.clone(),
                size: bytes.len() as u64,
                last_change: None,
            })
            .collect();
        Ok(StatePage::of_sorted(listed, query))
    }

    async fn begin<'a>(
        &'a self,
        path: &StatePath,
        intent: Intent,
    ) -> Result<Box<dyn WriteAttempt + 'a>, StoreError> {
        // The fake's lock ids do not follow from what a lock holds: an expected lock begins as
        // any release.
        let remembered = match intent {
            Intent::Release | Intent::ReleaseExpecting(_) => self
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
        let from_memory = remembered.is_some();
        let snapshot = match remembered {
            Some(snapshot) => snapshot,
            None => {
                let repo = self.repo();
                match intent {
                    Intent::Write | Intent::HeldWrite => snapshot_in(&repo, path),
                    // The lock as its branch holds it, without the state.
                    Intent::Unlock | Intent::Release | Intent::ReleaseExpecting(_) => Snapshot {
                        state_tip: None,
                        state: None,
                        ..snapshot_in(&repo, path)
                    },
                }
            }
        };
        Ok(Box::new(MemoryAttempt {
            store: self,
            path: path.clone(),
            snapshot,
            from_memory,
        }))
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

/// A write or unlock begun on the store: from a read, or from the store's memory
/// ([`MemoryStore::remember_lock`], [`MemoryStore::remember_write`]). A write moves the branch
/// only from the tip it began with; one begun from memory also needs the remembered lock tip
/// still current. A release deletes the lock tip it began with, if it is still the lock's.
struct MemoryAttempt<'a> {
    store: &'a MemoryStore,
    path: StatePath,
    snapshot: Snapshot,
    from_memory: bool,
}

#[async_trait]
impl WriteAttempt for MemoryAttempt<'_> {
    fn snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    async fn update_state(
        self: Box<Self>,
        change: StateChange,
        message: &Message,
    ) -> Result<Revision, StoreError> {
        if self.from_memory {
            let lock_now = self
                .store
                .repo()
                .locks
                .get(self.path.as_str())
                .map(|(tip, _, _)| tip.clone());
            if lock_now != self.snapshot.lock_tip {
                return Err(StoreError::Stale);
            }
        }
        self.store.write_at(
            &self.path,
            self.snapshot.state_tip.as_ref(),
            change,
            message,
        )
    }

    async fn delete_lock(self: Box<Self>) -> Result<(), StoreError> {
        match &self.snapshot.lock_tip {
            Some(tip) => self.store.delete_lock(&self.path, tip).await,
            None => Err(StoreError::Stale),
        }
    }

    fn begun_from_memory(&self) -> bool {
        self.from_memory
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
            .write_at(
                &p,
                None,
                StateChange::Write(Bytes::from("1")),
                &crate::Message::from("m"),
            )
            .expect("the first write creates the branch");
        assert_eq!(
            store.write_at(
                &p,
                None,
                StateChange::Write(Bytes::from("2")),
                &crate::Message::from("m")
            ),
            Err(StoreError::Stale),
            "a write from an old base is stale"
        );
        store.lose_next(1);
        assert_eq!(
            store.write_at(
                &p,
                Some(&first),
                StateChange::Write(Bytes::from("2")),
                &crate::Message::from("m")
            ),
            Err(StoreError::Stale),
            "a lost compare-and-swap is stale"
        );
        assert_eq!(store.file("a.tfstate"), Some(Bytes::from("1")));
        let lock = store
            .create_lock(&p, Bytes::from("L"), &crate::Message::from("lock"))
            .await
            .expect("create");
        assert_eq!(lock, LockCreate::Created);
        let Ok(LockCreate::Held { tip, content }) = store
            .create_lock(&p, Bytes::from("M"), &crate::Message::from("lock"))
            .await
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
}
