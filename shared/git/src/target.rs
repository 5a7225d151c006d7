//! The place a store reads and writes: a remote's endpoint, its state branch, and the cache
//! generation an operation works with, and how blocking git work runs there (on a blocking
//! thread, bounded by the store's timeout, on one generation from start to end). The remote
//! store and the write queue's rounds both work through a [`Target`]; it knows nothing of
//! either.

use std::sync::Arc;
use std::time::Duration;

use gitstate_core::StoreError;

use crate::cache::{Cache, CacheHandle};
use gitstate_wire::transport::Endpoint;

/// A remote's state branch and its cache.
#[derive(Clone, Debug)]
pub struct Target {
    pub(crate) endpoint: Endpoint,
    /// The state branch's full ref name.
    pub(crate) state_ref: String,
    pub(crate) handle: Arc<CacheHandle>,
    /// The cache generation this operation works with (`None` on a long-lived target: each
    /// operation then takes the current one and keeps it to the end, sessions included).
    pub(crate) pinned: Option<Arc<Cache>>,
    /// Limit for connecting, for any stall, and for a whole operation.
    pub(crate) timeout: Duration,
    /// Who writes this repository's commits.
    pub(crate) committer: crate::objects::Committer,
}

impl Target {
    /// The remote.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The state branch's full ref name.
    pub fn state_ref(&self) -> &str {
        &self.state_ref
    }

    /// The cache generation this operation works with (see [`Target::run`]).
    pub fn cache(&self) -> Result<&Arc<Cache>, StoreError> {
        self.pinned.as_ref().ok_or_else(|| {
            StoreError::Internal("a git operation ran without a cache generation".into())
        })
    }

    /// The same target, not bound to a cache generation (each operation takes the current
    /// one): what a long-lived task, such as a write batch driver, works with.
    pub fn unpinned(&self) -> Target {
        Target {
            pinned: None,
            ..self.clone()
        }
    }

    /// Runs blocking git `work` on a cache generation (the pinned one, or the current one),
    /// bounded by the timeout; retires the generation afterwards when it has outgrown its
    /// budget.
    pub async fn run<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(Target) -> Result<T, StoreError> + Send + 'static,
    {
        let cache = match &self.pinned {
            Some(cache) => cache.clone(),
            None => self.handle.current()?,
        };
        let target = Target {
            pinned: Some(cache.clone()),
            ..self.clone()
        };
        // The git requests the work sends count under the operation the caller serves.
        let operation = gitstate_core::operation::current();
        let task = tokio::task::spawn_blocking(move || {
            gitstate_wire::metrics::serving(operation, || work(target))
        });
        match tokio::time::timeout(self.timeout, task).await {
            Ok(joined) => {
                let result =
                    joined.map_err(|e| StoreError::Internal(format!("a git task failed: {e}")))?;
                self.handle.retire_if_spent(&cache);
                result
            }
            // The blocking task finishes on its own (every answer it reads must come within the
            // timeout, see gitstate_wire::limits; ssh's pipes have a watchdog,
            // gitstate_wire::ssh); a push still in flight is atomic on the server, so the remote
            // is either unchanged or fully updated.
            Err(_) => Err(StoreError::Unavailable(format!(
                "{} did not answer within {} s",
                self.endpoint.display,
                self.timeout.as_secs_f32()
            ))),
        }
    }
}
