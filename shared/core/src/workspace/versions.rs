//! A workspace's state versions (DESIGN §10.6): the current one, a version by its digest (from
//! the store's memory when it holds that very state), and a new one, which only the caller
//! holding the workspace's lock may write. "The same caller" is a lock sealed by the caller's
//! credential (`rules.rs`, [`crate::LockToken::holds`]).

use bytes::Bytes;
use sha2::{Digest, Sha256};

use super::operations::{Holder, WorkspaceError, Workspaces};
use super::WorkspaceName;
use crate::backend::{BackendError, Caller, Written};
use crate::lock_token::LockToken;
use gitstate_statefile::CheckedState;

/// The current state of a workspace, opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Current {
    /// The state as Terraform reads it.
    pub state: Bytes,
    /// What names this version: the first 32 hex digits of the state's SHA-256.
    pub digest: String,
    /// Its `serial` (0 when it has none).
    pub serial: u64,
    /// Its `lineage` (empty when it has none).
    pub lineage: String,
}

impl Current {
    /// The current state `state` (opened), its digest and header read.
    pub fn of(state: Bytes) -> Current {
        let digest = digest_of(&state);
        let file = gitstate_statefile::read(&state).ok();
        Current {
            serial: file.as_ref().and_then(|f| f.serial).unwrap_or(0),
            lineage: file.and_then(|f| f.lineage).unwrap_or_default(),
            digest,
            state,
        }
    }
}

/// What names a state's version: the first 32 hex digits of its SHA-256.
pub(crate) fn digest_of(state: &[u8]) -> String {
    Sha256::digest(state)
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Workspaces<'_> {
    /// The current state of the workspace `name`, opened; 404 when it has none.
    pub async fn current(
        &self,
        name: &WorkspaceName,
        token: Option<&LockToken>,
    ) -> Result<Current, WorkspaceError> {
        self.current_if_any(name, token).await?.ok_or_else(|| {
            WorkspaceError::NotFound(format!(
                "the workspace {name} has no state yet, or this credential may not use it"
            ))
        })
    }

    /// The current state of the workspace `name` for its outputs: `None` while a workspace that
    /// exists has no state (no outputs, as `terraform output` finds none in an empty state:
    /// OpenTofu's `output` fails on a 404 here); 404 for a workspace that does not exist.
    pub async fn current_for_outputs(
        &self,
        name: &WorkspaceName,
        token: Option<&LockToken>,
    ) -> Result<Option<Current>, WorkspaceError> {
        match self.current_if_any(name, token).await? {
            Some(current) => Ok(Some(current)),
            None => self.read(name, None).await.map(|_| None),
        }
    }

    /// The current state of the workspace `name`, opened, when it has one.
    async fn current_if_any(
        &self,
        name: &WorkspaceName,
        token: Option<&LockToken>,
    ) -> Result<Option<Current>, WorkspaceError> {
        let path = self.path(name)?;
        Ok(self
            .backend
            .get(self.store, &path, token)
            .await?
            .map(Current::of))
    }

    /// The state version `digest` of the workspace `name`, while it is the current one (`None`
    /// once it is not; 404 while the workspace has no state). The state the store remembers is served when it is that version (no request
    /// to a remote: Terraform downloads right after reading the current version), else the
    /// current state read fresh. An expired token always reads fresh (its lock decides).
    pub async fn version(
        &self,
        name: &WorkspaceName,
        digest: &str,
        token: Option<&LockToken>,
    ) -> Result<Option<Current>, WorkspaceError> {
        if !token.is_some_and(|t| t.expired) {
            let path = self.path(name)?;
            if let Some(stored) = self.store.recalled_state(&path).await? {
                let state = self.backend.open_stored(&self.place(&path), stored).await?;
                if digest_of(&state) == digest {
                    return Ok(Some(Current::of(state)));
                }
            }
        }
        let current = self.current(name, token).await?;
        Ok((current.digest == digest).then_some(current))
    }

    /// A new state version of the workspace `name`: written as `caller`'s POST under the lock
    /// `holder` took through the API (so the state check, the guard, sealing and
    /// compare-and-swap apply), begun from the store's memory as a holder's POST is
    /// ([`Caller::sealed_by`]: one request to a remote). Not locked is
    /// [`WorkspaceError::NotLocked`]; a lock of anyone else, [`WorkspaceError::Locked`]. A body
    /// equal to the stored state writes nothing (`None`).
    pub async fn write_state(
        &self,
        name: &WorkspaceName,
        state: &CheckedState,
        holder: &Holder,
        caller: &Caller,
    ) -> Result<Option<Written>, WorkspaceError> {
        let path = self.path(name)?;
        let caller = Caller {
            sealed_by: Some(holder.token.clone()),
            ..caller.clone()
        };
        match self
            .backend
            .post(self.store, &path, state, None, &caller)
            .await
        {
            Ok(written) => Ok(written),
            Err(BackendError::Locked(held)) => Err(self.locked(name, &held)),
            Err(BackendError::NotLocked(_)) => Err(WorkspaceError::NotLocked(format!(
                "the workspace {name} must be locked by this caller to create a state version; lock it first (Terraform does)"
            ))),
            Err(e) => Err(e.into()),
        }
    }
}
