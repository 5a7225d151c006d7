//! Stores whose work blocks a thread (git object databases, pipes to a git server): they
//! implement [`BlockingStore`], one plain method per [`StateStore`] operation, and the generic
//! adapter below makes each of them a `StateStore` by running those methods through the store's
//! own [`BlockingStore::run`] (off the async threads; a remote store adds its cache and its
//! timeout there). The rules of every operation are those of the port: see [`StateStore`].

use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

use crate::commit::Message;
use crate::store::LockRead;
use crate::{
    HeldLock, Intent, ListQuery, LockCreate, Revision, Snapshot, StatePage, StatePath, StateStore,
    StoreError, Version, WriteAttempt,
};

/// A [`StateStore`] written as blocking calls. Each `*_blocking` method has the contract of the
/// `StateStore` method of the same name.
pub trait BlockingStore: Clone + Send + Sync + 'static {
    /// Runs `work` on a clone of this store where it may block, and returns its result.
    fn run<T, F>(&self, work: F) -> impl Future<Output = Result<T, StoreError>> + Send
    where
        T: Send + 'static,
        F: FnOnce(Self) -> Result<T, StoreError> + Send + 'static;

    /// See [`StateStore::snapshot`].
    fn snapshot_blocking(&self, path: &StatePath) -> Result<Snapshot, StoreError>;

    /// See [`StateStore::current_state`] (the default: the snapshot's state).
    fn current_state_blocking(&self, path: &StatePath) -> Result<Option<Bytes>, StoreError> {
        Ok(self.snapshot_blocking(path)?.state)
    }

    /// See [`StateStore::snapshot_beside`]; the default reads each file of `beside` at the tip
    /// the snapshot of `path` saw ([`BlockingStore::read_version_blocking`]).
    fn snapshot_beside_blocking(
        &self,
        path: &StatePath,
        beside: &[StatePath],
    ) -> Result<(Snapshot, Vec<Option<Bytes>>), StoreError> {
        let snapshot = self.snapshot_blocking(path)?;
        let files = match &snapshot.state_tip {
            Some(tip) => beside
                .iter()
                .map(|other| self.read_version_blocking(other, tip))
                .collect::<Result<_, _>>()?,
            None => vec![None; beside.len()],
        };
        Ok((snapshot, files))
    }

    /// See [`StateStore::create_lock`].
    fn create_lock_blocking(
        &self,
        path: &StatePath,
        content: &[u8],
        message: &Message,
    ) -> Result<LockCreate, StoreError>;

    /// See [`StateStore::read_lock`].
    fn read_lock_blocking(&self, path: &StatePath) -> Result<Option<LockRead>, StoreError>;

    /// See [`StateStore::delete_lock`].
    fn delete_lock_blocking(&self, path: &StatePath, tip: &Revision) -> Result<(), StoreError>;

    /// See [`StateStore::history`].
    fn history_blocking(&self, path: &StatePath, limit: usize) -> Result<Vec<Version>, StoreError>;

    /// See [`StateStore::read_version`].
    fn read_version_blocking(
        &self,
        path: &StatePath,
        commit: &Revision,
    ) -> Result<Option<Bytes>, StoreError>;

    /// See [`StateStore::list_states`].
    fn list_states_blocking(&self, query: &ListQuery) -> Result<StatePage, StoreError>;

    /// See [`StateStore::list_paths`]; the default takes them from
    /// [`BlockingStore::list_states_blocking`].
    fn list_paths_blocking(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        let query = ListQuery {
            prefix: prefix.to_owned(),
            after: None,
            limit: usize::MAX,
        };
        let page = self.list_states_blocking(&query)?;
        Ok(page.states.into_iter().map(|s| s.path).collect())
    }

    /// See [`StateStore::list_locks`].
    fn list_locks_blocking(&self) -> Result<Vec<HeldLock>, StoreError>;

    /// See [`StateStore::check`].
    fn check_blocking(&self) -> Result<(), StoreError>;

    /// See [`StateStore::write_serializer`].
    fn write_serializer(&self) -> Option<Arc<tokio::sync::Mutex<()>>> {
        None
    }

    /// See [`StateStore::recalled_state`] (the default remembers nothing).
    fn recalled_state_blocking(&self, _path: &StatePath) -> Result<Option<Bytes>, StoreError> {
        Ok(None)
    }

    /// See [`StateStore::recalled_exists`] (the default cannot tell).
    fn recalled_exists_blocking(&self, _path: &StatePath) -> Result<Option<bool>, StoreError> {
        Ok(None)
    }

    /// See [`StateStore::begin`]: the attempt it returns may block in its own work, and runs it
    /// through [`BlockingStore::run`] itself.
    fn begin_blocking(
        &self,
        path: &StatePath,
        intent: Intent,
    ) -> Result<Box<dyn WriteAttempt>, StoreError>;
}

/// The adapter: every blocking store is a [`StateStore`].
#[async_trait]
impl<S: BlockingStore> StateStore for S {
    async fn snapshot(&self, path: &StatePath) -> Result<Snapshot, StoreError> {
        let path = path.clone();
        self.run(move |store| store.snapshot_blocking(&path)).await
    }

    async fn current_state(&self, path: &StatePath) -> Result<Option<Bytes>, StoreError> {
        let path = path.clone();
        self.run(move |store| store.current_state_blocking(&path))
            .await
    }

    async fn snapshot_beside(
        &self,
        path: &StatePath,
        beside: &[StatePath],
    ) -> Result<(Snapshot, Vec<Option<Bytes>>), StoreError> {
        let (path, beside) = (path.clone(), beside.to_vec());
        self.run(move |store| store.snapshot_beside_blocking(&path, &beside))
            .await
    }

    async fn create_lock(
        &self,
        path: &StatePath,
        content: Bytes,
        message: &Message,
    ) -> Result<LockCreate, StoreError> {
        let (path, message) = (path.clone(), message.to_owned());
        self.run(move |store| store.create_lock_blocking(&path, &content, &message))
            .await
    }

    async fn read_lock(&self, path: &StatePath) -> Result<Option<LockRead>, StoreError> {
        let path = path.clone();
        self.run(move |store| store.read_lock_blocking(&path)).await
    }

    async fn recalled_state(&self, path: &StatePath) -> Result<Option<Bytes>, StoreError> {
        let path = path.clone();
        self.run(move |store| store.recalled_state_blocking(&path))
            .await
    }

    async fn recalled_exists(&self, path: &StatePath) -> Result<Option<bool>, StoreError> {
        let path = path.clone();
        self.run(move |store| store.recalled_exists_blocking(&path))
            .await
    }

    fn write_serializer(&self) -> Option<Arc<tokio::sync::Mutex<()>>> {
        BlockingStore::write_serializer(self)
    }

    async fn check(&self) -> Result<(), StoreError> {
        self.run(move |store| store.check_blocking()).await
    }

    async fn delete_lock(&self, path: &StatePath, tip: &Revision) -> Result<(), StoreError> {
        let (path, tip) = (path.clone(), tip.clone());
        self.run(move |store| store.delete_lock_blocking(&path, &tip))
            .await
    }

    async fn history(&self, path: &StatePath, limit: usize) -> Result<Vec<Version>, StoreError> {
        let path = path.clone();
        self.run(move |store| store.history_blocking(&path, limit))
            .await
    }

    async fn read_version(
        &self,
        path: &StatePath,
        commit: &Revision,
    ) -> Result<Option<Bytes>, StoreError> {
        let (path, commit) = (path.clone(), commit.clone());
        self.run(move |store| store.read_version_blocking(&path, &commit))
            .await
    }

    async fn list_states(&self, query: &ListQuery) -> Result<StatePage, StoreError> {
        let query = query.clone();
        self.run(move |store| store.list_states_blocking(&query))
            .await
    }

    async fn list_paths(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        let prefix = prefix.to_owned();
        self.run(move |store| store.list_paths_blocking(&prefix))
            .await
    }

    async fn list_locks(&self) -> Result<Vec<HeldLock>, StoreError> {
        self.run(move |store| store.list_locks_blocking()).await
    }

    async fn begin<'a>(
        &'a self,
        path: &StatePath,
        intent: Intent,
    ) -> Result<Box<dyn WriteAttempt + 'a>, StoreError> {
        let path = path.clone();
        let attempt = self
            .run(move |store| store.begin_blocking(&path, intent))
            .await?;
        Ok(attempt)
    }
}
