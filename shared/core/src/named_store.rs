//! [`NamedStore`]: a store with the name its repository has in this deployment, and the
//! repository's settings the protocol asks the store for (the state guard, `lock_ttl`,
//! `workspace_path`); every other call goes to the store it wraps.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

use crate::commit::Message;
use crate::listing::{ListQuery, StatePage, Version};
use crate::path::StatePath;
use crate::store::{
    HeldLock, Intent, LockCreate, LockRead, Revision, Snapshot, StateStore, StoreError,
    WriteAttempt,
};

/// A store with the name its repository has in this deployment ([`StateStore::repository`]);
/// every other call goes to the store it wraps.
pub struct NamedStore {
    name: String,
    inner: Arc<dyn StateStore>,
    guards_states: bool,
    lock_ttl: Option<std::time::Duration>,
    workspace_path: crate::workspace::WorkspacePath,
}

impl NamedStore {
    /// `inner`, named `name`.
    pub fn new(name: impl Into<String>, inner: Arc<dyn StateStore>) -> NamedStore {
        NamedStore {
            name: name.into(),
            inner,
            guards_states: true,
            lock_ttl: None,
            workspace_path: crate::workspace::WorkspacePath::default(),
        }
    }

    /// The same store, whose workspaces live at `pattern` (see [`StateStore::workspace_path`]).
    pub fn with_workspace_path(mut self, pattern: crate::workspace::WorkspacePath) -> NamedStore {
        self.workspace_path = pattern;
        self
    }

    /// The same store, with the state guard on or off for it (see
    /// [`StateStore::guards_states`]).
    pub fn with_state_guard(mut self, on: bool) -> NamedStore {
        self.guards_states = on;
        self
    }

    /// The same store, whose locks a LOCK takes over once older than `ttl` (see
    /// [`StateStore::lock_ttl`]; `None`: never).
    pub fn with_lock_ttl(mut self, ttl: Option<std::time::Duration>) -> NamedStore {
        self.lock_ttl = ttl;
        self
    }
}

#[async_trait]
impl StateStore for NamedStore {
    async fn snapshot(&self, path: &StatePath) -> Result<Snapshot, StoreError> {
        self.inner.snapshot(path).await
    }

    async fn current_state(&self, path: &StatePath) -> Result<Option<Bytes>, StoreError> {
        self.inner.current_state(path).await
    }

    async fn snapshot_beside(
        &self,
        path: &StatePath,
        beside: &[StatePath],
    ) -> Result<(Snapshot, Vec<Option<Bytes>>), StoreError> {
        self.inner.snapshot_beside(path, beside).await
    }

    async fn create_lock(
        &self,
        path: &StatePath,
        content: Bytes,
        message: &Message,
    ) -> Result<LockCreate, StoreError> {
        self.inner.create_lock(path, content, message).await
    }

    async fn read_lock(&self, path: &StatePath) -> Result<Option<LockRead>, StoreError> {
        self.inner.read_lock(path).await
    }

    async fn recalled_state(&self, path: &StatePath) -> Result<Option<Bytes>, StoreError> {
        self.inner.recalled_state(path).await
    }

    async fn recalled_exists(&self, path: &StatePath) -> Result<Option<bool>, StoreError> {
        self.inner.recalled_exists(path).await
    }

    fn repository(&self) -> &str {
        &self.name
    }

    fn guards_states(&self) -> bool {
        self.guards_states
    }

    fn lock_ttl(&self) -> Option<std::time::Duration> {
        self.lock_ttl
    }

    fn workspace_path(&self) -> crate::workspace::WorkspacePath {
        self.workspace_path.clone()
    }

    async fn check(&self) -> Result<(), StoreError> {
        self.inner.check().await
    }

    fn write_serializer(&self) -> Option<Arc<tokio::sync::Mutex<()>>> {
        self.inner.write_serializer()
    }

    async fn delete_lock(&self, path: &StatePath, tip: &Revision) -> Result<(), StoreError> {
        self.inner.delete_lock(path, tip).await
    }

    async fn history(&self, path: &StatePath, limit: usize) -> Result<Vec<Version>, StoreError> {
        self.inner.history(path, limit).await
    }

    async fn read_version(
        &self,
        path: &StatePath,
        commit: &Revision,
    ) -> Result<Option<Bytes>, StoreError> {
        self.inner.read_version(path, commit).await
    }

    async fn list_states(&self, query: &ListQuery) -> Result<StatePage, StoreError> {
        self.inner.list_states(query).await
    }

    async fn list_paths(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        self.inner.list_paths(prefix).await
    }

    async fn list_locks(&self) -> Result<Vec<HeldLock>, StoreError> {
        self.inner.list_locks().await
    }

    async fn begin<'a>(
        &'a self,
        path: &StatePath,
        intent: Intent,
    ) -> Result<Box<dyn WriteAttempt + 'a>, StoreError> {
        self.inner.begin(path, intent).await
    }
}
