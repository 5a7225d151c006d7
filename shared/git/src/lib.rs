//! gitstate's git engine on gix: stores that implement [`gitstate_core::StateStore`] on a local
//! bare repository ([`LocalStore`]) and on remote repositories ([`RemoteStore`]: smart HTTP(S),
//! `git://`, `file://`, ssh), with a shallow per-remote cache and a send-pack client.
//!
//! Porcelain (the stores) lives in `local`, `remote` and `cache`; protocol plumbing (transports,
//! pkt-lines, send-pack, pack writing) in `plumbing`.

/// Implements [`gitstate_core::StateStore`] for a store type whose operations are blocking
/// methods (`snapshot_blocking`, `update_state_blocking`, `create_lock_blocking`,
/// `read_lock_blocking`, `delete_lock_blocking`, `history_blocking`, `read_version_blocking`,
/// `list_states_blocking`, `list_locks_blocking`) run through its `run` (a `spawn_blocking`
/// wrapper): gix is blocking, the port is async. Further port methods (overrides of defaults)
/// can follow in a block.
#[macro_export]
#[doc(hidden)]
macro_rules! state_store_via_blocking {
    ($store:ty, |$this:ident| $serializer:expr) => {
        $crate::state_store_via_blocking!($store, |$this| $serializer, {});
    };
    ($store:ty, |$this:ident| $serializer:expr, { $($extra:tt)* }) => {
        #[async_trait::async_trait]
        impl gitstate_core::StateStore for $store {
            async fn snapshot(
                &self,
                path: &gitstate_core::StatePath,
            ) -> Result<gitstate_core::Snapshot, gitstate_core::StoreError> {
                let path = path.clone();
                self.run(move |store| store.snapshot_blocking(&path)).await
            }

            async fn update_state(
                &self,
                path: &gitstate_core::StatePath,
                base: Option<&gitstate_core::Revision>,
                change: gitstate_core::StateChange,
                message: &str,
            ) -> Result<gitstate_core::Revision, gitstate_core::StoreError> {
                let (path, base, message) = (path.clone(), base.cloned(), message.to_owned());
                self.run(move |store| {
                    store.update_state_blocking(&path, base.as_ref(), &change, &message)
                })
                .await
            }

            async fn create_lock(
                &self,
                path: &gitstate_core::StatePath,
                content: bytes::Bytes,
                message: &str,
            ) -> Result<gitstate_core::LockCreate, gitstate_core::StoreError> {
                let (path, message) = (path.clone(), message.to_owned());
                self.run(move |store| store.create_lock_blocking(&path, &content, &message))
                    .await
            }

            async fn read_lock(
                &self,
                path: &gitstate_core::StatePath,
            ) -> Result<Option<(gitstate_core::Revision, bytes::Bytes)>, gitstate_core::StoreError>
            {
                let path = path.clone();
                self.run(move |store| store.read_lock_blocking(&path)).await
            }

            async fn delete_lock(
                &self,
                path: &gitstate_core::StatePath,
                tip: &gitstate_core::Revision,
            ) -> Result<(), gitstate_core::StoreError> {
                let (path, tip) = (path.clone(), tip.clone());
                self.run(move |store| store.delete_lock_blocking(&path, &tip))
                    .await
            }

            async fn history(
                &self,
                path: &gitstate_core::StatePath,
                limit: usize,
            ) -> Result<Vec<gitstate_core::Version>, gitstate_core::StoreError> {
                let path = path.clone();
                self.run(move |store| store.history_blocking(&path, limit)).await
            }

            async fn read_version(
                &self,
                path: &gitstate_core::StatePath,
                commit: &gitstate_core::Revision,
            ) -> Result<Option<bytes::Bytes>, gitstate_core::StoreError> {
                let (path, commit) = (path.clone(), commit.clone());
                self.run(move |store| store.read_version_blocking(&path, &commit))
                    .await
            }

            async fn list_states(
                &self,
            ) -> Result<Vec<gitstate_core::StateListing>, gitstate_core::StoreError> {
                self.run(move |store| store.list_states_blocking()).await
            }

            async fn list_locks(
                &self,
            ) -> Result<Vec<gitstate_core::HeldLock>, gitstate_core::StoreError> {
                self.run(move |store| store.list_locks_blocking()).await
            }

            fn write_serializer(&self) -> Option<std::sync::Arc<tokio::sync::Mutex<()>>> {
                let $this = self;
                $serializer
            }

            $($extra)*
        }
    };
}

pub mod batch;
pub mod cache;
pub mod history;
pub mod local;
pub mod objects;
mod pending;
pub mod plumbing;
pub mod remote;

pub use local::LocalStore;
pub use plumbing::limits::{
    max_object_bytes, object_limit, set_max_object_bytes, DEFAULT_MAX_ANSWER_BYTES,
};
pub use remote::{RemoteConfig, RemoteStore, DEFAULT_TIMEOUT};

/// Where lock branches live: `refs/heads/locks/{path}`.
pub(crate) const LOCK_REF_PREFIX: &str = "refs/heads/locks/";

/// The locks behind `tips` (lock ref name → tip), read from `repo`, sorted by path. A branch
/// under `locks/` whose name is not a valid state path is not a gitstate lock and is skipped.
pub(crate) fn held_locks(
    repo: &gix::Repository,
    tips: impl IntoIterator<Item = (String, gix::ObjectId)>,
) -> Result<Vec<gitstate_core::HeldLock>, gitstate_core::StoreError> {
    let mut locks = Vec::new();
    for (name, tip) in tips {
        let Some(path) = name
            .strip_prefix(LOCK_REF_PREFIX)
            .and_then(|p| gitstate_core::StatePath::parse(p).ok())
        else {
            continue;
        };
        let content = objects::read_file(repo, tip, &path.lock_file())?.unwrap_or_default();
        locks.push(gitstate_core::HeldLock {
            path: path.as_str().to_owned(),
            tip: tip.to_string(),
            content,
        });
    }
    locks.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(locks)
}
