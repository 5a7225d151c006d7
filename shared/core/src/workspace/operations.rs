//! Each operation of the workspace API (DESIGN §10) on a workspace and its lock, written against
//! [`Backend`] and the [`StateStore`] port: read, create, tag, delete, lock, unlock and
//! force-unlock (its state versions: `versions.rs`).
//!
//! "The same caller" is proved without a table: a lock taken through the API is sealed by the
//! caller's credential (its [`crate::Mark`] under the deployment's run key, the trailer of the
//! lock commit, as an OIDC token's lock is: [`LockToken`]), and only a caller presenting that
//! credential again writes a state version or releases it. An http client still writes under any
//! lock by naming its ID, as the http protocol has it.

use bytes::Bytes;

use super::{Record, WorkspaceId, WorkspaceName};
use crate::backend::{Backend, BackendError};
use crate::commit::Message;
use crate::lock::{LockInfo, Unlock};
use crate::lock_token::LockToken;
use crate::path::StatePath;
use crate::scope::{Admitted, Refusal, Scope, Use};
use crate::seal::Place;
use crate::store::{Intent, StateChange, StateStore, StoreError};
use crate::text::escape_controls;

/// The caller as the workspace API sees it.
#[derive(Debug, Clone)]
pub struct Holder {
    /// Its name, for a lock's `Who` and commit messages.
    pub name: String,
    /// Its credential's mark (and, for an OIDC token, whether it has expired): the seal of the
    /// locks it takes.
    pub token: LockToken,
}

/// Why a workspace operation was refused. The HTTP layer gives each variant one status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkspaceError {
    /// No such workspace, or one this credential may not use: the same sentence for both, as
    /// HCP Terraform answers 404 for both (404).
    #[error("{0}")]
    NotFound(String),
    /// The name breaks the API's rule (422).
    #[error(transparent)]
    Name(#[from] super::NameError),
    /// A tag breaks the rule (422).
    #[error(transparent)]
    Tag(#[from] super::TagError),
    /// A workspace of that name exists already (422).
    #[error("{0}")]
    Taken(String),
    /// The credential may use the workspace, but not for this (403).
    #[error("{0}")]
    Forbidden(String),
    /// Someone else holds the workspace's lock (409): the sentence, and the holder's LockInfo
    /// as stored.
    #[error("{sentence}")]
    Locked {
        /// Who holds it, since when, and what to do.
        sentence: String,
        /// The holder's LockInfo as stored.
        holder: Bytes,
    },
    /// The operation needs a lock that is not held (409).
    #[error("{0}")]
    NotLocked(String),
    /// A delete without force of a workspace that has a state (409, as the API's safe delete).
    #[error("{0}")]
    HasState(String),
    /// No state could ever be written at the workspace's path (409, [`crate::PathConflict`]).
    #[error("{0}")]
    Unwritable(String),
    /// What the protocol answered.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

impl From<StoreError> for WorkspaceError {
    fn from(e: StoreError) -> Self {
        WorkspaceError::Backend(e.into())
    }
}

/// A workspace as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    /// Its id.
    pub id: WorkspaceId,
    /// The state path it maps to.
    pub path: StatePath,
    /// Its record, when it has one (a workspace with a state needs none, but gets one when it is
    /// tagged).
    pub record: Option<Record>,
    /// Whether a state is stored at its path.
    pub has_state: bool,
    /// The lock held on its path (LockInfo as stored), whoever took it.
    pub lock: Option<Bytes>,
    /// The lock is sealed by the caller's credential: it took the lock through the API.
    pub locked_by_caller: bool,
}

impl Workspace {
    /// The workspace's name.
    pub fn name(&self) -> &WorkspaceName {
        &self.id.name
    }
}

/// Whether a credential of `scope` may `used` the workspace `name` of `repository`, mapped to
/// `path`, and how: a workspace outside its paths is answered as one that does not exist (404,
/// the same sentence, so a narrow token learns nothing of other workspaces), one it may only read
/// is refused anything else (403).
pub fn admit(
    scope: &Scope,
    repository: &str,
    name: &WorkspaceName,
    path: &StatePath,
    used: Use,
) -> Result<Admitted, WorkspaceError> {
    if scope.admit_in(Use::Read, Some(repository), path).is_err() {
        return Err(not_found(repository, name));
    }
    scope
        .admit_in(used, Some(repository), path)
        .map_err(|Refusal(sentence)| WorkspaceError::Forbidden(sentence))
}

/// The one 404 sentence of a workspace.
fn not_found(repository: &str, name: &WorkspaceName) -> WorkspaceError {
    WorkspaceError::NotFound(format!(
        "the workspace {name} does not exist in the organization {repository}, or this credential may not use it"
    ))
}

/// What the `Info` of a lock taken through the API says.
const API_LOCK_OPERATION: &str = "OperationTypeWorkspaceLock";

/// The workspace operations of one repository.
pub struct Workspaces<'a> {
    pub(super) backend: &'a Backend,
    pub(super) store: &'a dyn StateStore,
}

impl<'a> Workspaces<'a> {
    /// The workspaces of `store`, under `backend`'s rules.
    pub fn on(backend: &'a Backend, store: &'a dyn StateStore) -> Workspaces<'a> {
        Workspaces { backend, store }
    }

    /// The state path of the workspace `name` ([`StateStore::workspace_path`]).
    pub fn path(&self, name: &WorkspaceName) -> Result<StatePath, WorkspaceError> {
        self.store
            .workspace_path()
            .path_of(name)
            .map_err(|e| WorkspaceError::Backend(BackendError::BadRequest(e.to_string())))
    }

    pub(super) fn place(&self, path: &StatePath) -> Place {
        Place::new(self.store.repository(), path)
    }

    pub(super) fn id(&self, name: &WorkspaceName) -> WorkspaceId {
        WorkspaceId::new(self.store.repository(), name)
    }

    /// The workspace `name` as `holder` sees it (whether its lock is the caller's); 404 when it
    /// has neither a state nor a record.
    pub async fn read(
        &self,
        name: &WorkspaceName,
        holder: Option<&Holder>,
    ) -> Result<Workspace, WorkspaceError> {
        let path = self.path(name)?;
        // The record holds the tags: read at the tip the state's is read at, in the same
        // requests to a remote.
        let (snapshot, beside) = self
            .store
            .snapshot_beside(&path, &[record_path(name)?])
            .await?;
        let record = beside
            .first()
            .and_then(Option::as_deref)
            .map(Record::stored);
        let has_state = snapshot.state.is_some();
        if !has_state && record.is_none() {
            return Err(not_found(self.store.repository(), name));
        }
        let locked_by_caller = match (&snapshot.lock, holder) {
            (Some(lock), Some(holder)) => {
                holder
                    .token
                    .holds(&self.place(&path), lock, snapshot.lock_token.as_deref())
            }
            _ => false,
        };
        Ok(Workspace {
            id: self.id(name),
            path,
            record,
            has_state,
            lock: snapshot.lock,
            locked_by_caller,
        })
    }

    /// The workspace `name` as the store remembers it (no request to a remote): `Some` when its
    /// memory holds a state at the workspace's path ([`StateStore::recalled_exists`]) or its
    /// record. A lock decides whether it is held on its own fresh check, so the lock is not
    /// recalled (`None`).
    async fn recalled(&self, name: &WorkspaceName) -> Result<Option<Workspace>, WorkspaceError> {
        let path = self.path(name)?;
        let has_state = self.store.recalled_exists(&path).await? == Some(true);
        let record = self.recalled_record(name).await?.flatten();
        if !has_state && record.is_none() {
            return Ok(None);
        }
        Ok(Some(Workspace {
            id: self.id(name),
            path,
            record,
            has_state,
            lock: None,
            locked_by_caller: false,
        }))
    }

    /// The record of `name` as the store remembers it at the state branch's tip it last saw:
    /// `Some(None)` when it knows there is none, `None` when it cannot tell (no request).
    async fn recalled_record(
        &self,
        name: &WorkspaceName,
    ) -> Result<Option<Option<Record>>, WorkspaceError> {
        let record_path = record_path(name)?;
        Ok(match self.store.recalled_exists(&record_path).await? {
            Some(false) => Some(None),
            Some(true) => self
                .store
                .recalled_state(&record_path)
                .await?
                .map(|record| Some(Record::stored(&record))),
            None => None,
        })
    }

    /// The record of `name`, when it has one.
    pub(super) async fn record(
        &self,
        name: &WorkspaceName,
    ) -> Result<Option<Record>, WorkspaceError> {
        let record_path = record_path(name)?;
        let stored = self.store.current_state(&record_path).await?;
        Ok(stored.as_deref().map(Record::stored))
    }

    /// Creates the workspace `name` with `tags` (checked, sorted) for `who`: its record, one
    /// commit through compare-and-swap. A workspace that exists (a state or a record) is
    /// [`WorkspaceError::Taken`].
    pub async fn create(
        &self,
        name: &WorkspaceName,
        tags: Vec<String>,
        who: &str,
    ) -> Result<Workspace, WorkspaceError> {
        let path = self.path(name)?;
        let taken = || {
            WorkspaceError::Taken(format!(
                "a workspace named {name} exists already in the organization {}",
                self.store.repository()
            ))
        };
        let snapshot = self.store.snapshot(&path).await?;
        if snapshot.state.is_some() {
            return Err(taken());
        }
        let mut record = Record::new(name.as_str());
        record.tags = tags;
        let who = escape_controls(who).into_owned();
        let message = Message::by(format!("Create workspace {name} ({path}) by {who}"), &who);
        let record = self
            .write_record(name, |stored| match stored {
                Some(_) => Err(taken()),
                None => Ok(RecordWrite::Changed(record.clone(), message.clone())),
            })
            .await?;
        tracing::info!(workspace = %name, %path, "workspace created");
        Ok(Workspace {
            id: self.id(name),
            path,
            record: Some(record),
            has_state: false,
            lock: snapshot.lock,
            locked_by_caller: false,
        })
    }

    /// Adds `add` to the tags of the workspace `name` and removes `remove` (both checked) for
    /// `who`: its record, one commit through compare-and-swap (a workspace that has only a state
    /// gets a record). Tags that change nothing write nothing.
    pub async fn tag(
        &self,
        name: &WorkspaceName,
        add: &[String],
        remove: &[String],
        who: &str,
    ) -> Result<Workspace, WorkspaceError> {
        let mut workspace = self.read(name, None).await?;
        let who = escape_controls(who).into_owned();
        let path = &workspace.path;
        let record = self
            .write_record(name, |stored| {
                let mut record = stored.map_or_else(|| Record::new(name.as_str()), Record::stored);
                if record.name.is_empty() {
                    record.name = name.as_str().to_owned();
                }
                let tags = super::tags::changed(&record.tags, add, remove);
                if stored.is_some() && tags == record.tags {
                    return Ok(RecordWrite::Unchanged(record));
                }
                record.tags = tags;
                let shown = match record.tags.is_empty() {
                    true => "no tags".to_owned(),
                    false => record.tags.join(", "),
                };
                let text = format!("Tag workspace {name} ({path}): {shown} by {who}");
                Ok(RecordWrite::Changed(record, Message::by(text, &who)))
            })
            .await?;
        workspace.record = Some(record);
        Ok(workspace)
    }

    /// Writes the record of `name` as `decide` says from the record stored (its bytes, `None`
    /// when there is none): one commit through compare-and-swap and the write queue, decided
    /// again on each fresh read. Returns the record written, or the one kept.
    async fn write_record(
        &self,
        name: &WorkspaceName,
        decide: impl Fn(Option<&[u8]>) -> Result<RecordWrite, WorkspaceError>,
    ) -> Result<Record, WorkspaceError> {
        let record_path = record_path(name)?;
        let started = std::time::Instant::now();
        let deadline = started + self.backend.retry.budget;
        let mut attempts = 0;
        let _serialized = crate::backend::serialized(self.store).await;
        loop {
            let timing = (&mut attempts, started, deadline);
            let attempt = self
                .backend
                .begin_write(self.store, &record_path, Intent::Write, timing)
                .await?;
            let (record, message) = match decide(attempt.snapshot().state.as_deref())? {
                RecordWrite::Unchanged(record) => return Ok(record),
                RecordWrite::Changed(record, message) => (record, message),
            };
            let timing = (&mut attempts, started, deadline);
            let change = StateChange::Write(record.to_bytes());
            let pushed = self
                .backend
                .push_attempt(attempt, change, &message, "workspace record", timing)
                .await?;
            if let Some(revision) = pushed {
                tracing::info!(workspace = %name, %revision, "workspace record written");
                return Ok(record);
            }
        }
    }

    /// Deletes the workspace `name` for `who`: its state and its record in one commit through
    /// compare-and-swap ([`StateChange::DeleteWith`]; the history stays in git). A locked
    /// workspace is [`WorkspaceError::Locked`]; one whose state manages resources, unless `force`,
    /// [`WorkspaceError::HasState`] (the API's safe delete, as HCP Terraform's: an emptied state,
    /// after `terraform destroy`, is deleted). Returns the commit.
    pub async fn delete(
        &self,
        name: &WorkspaceName,
        force: bool,
        who: &str,
    ) -> Result<String, WorkspaceError> {
        let path = self.path(name)?;
        let record_path = record_path(name)?;
        let who = escape_controls(who).into_owned();
        let message = Message::by(format!("Delete workspace {name} ({path}) by {who}"), &who);
        let started = std::time::Instant::now();
        let deadline = started + self.backend.retry.budget;
        let mut attempts = 0;
        let _serialized = crate::backend::serialized(self.store).await;
        loop {
            let has_record = self.record(name).await?.is_some();
            let timing = (&mut attempts, started, deadline);
            let attempt = self
                .backend
                .begin_write(self.store, &path, Intent::Write, timing)
                .await?;
            let snapshot = attempt.snapshot();
            if snapshot.state.is_none() && !has_record {
                return Err(not_found(self.store.repository(), name));
            }
            if let Some(lock) = &snapshot.lock {
                return Err(self.held_by(name, lock, "and cannot be deleted while locked"));
            }
            if let (Some(stored), false) = (&snapshot.state, force) {
                // The API's safe delete: refused while the state manages resources (a state that
                // cannot be read counts as managing some).
                let state = self
                    .backend
                    .open_stored(&self.place(&path), stored.clone())
                    .await?;
                let resources = gitstate_statefile::catalog_facts(&state)
                    .resource_count
                    .unwrap_or(1);
                if resources > 0 {
                    return Err(WorkspaceError::HasState(format!(
                        "the workspace {name} manages {resources} resource(s), so it is not deleted without force: run `terraform destroy` first, or `terraform workspace delete -force {name}` (the state's history stays in git)"
                    )));
                }
            }
            let timing = (&mut attempts, started, deadline);
            let change = StateChange::DeleteWith(vec![record_path.clone()]);
            let pushed = self
                .backend
                .push_attempt(attempt, change, &message, "workspace delete", timing)
                .await?;
            if let Some(revision) = pushed {
                tracing::info!(workspace = %name, %path, %revision, "workspace deleted");
                return Ok(revision);
            }
        }
    }

    /// Locks the workspace `name` for `holder`: the lock branch of its path, with a LockInfo
    /// saying it was taken through the workspace API, sealed by the holder's credential. Held by
    /// anyone (an http LOCK, another caller, this caller already) is [`WorkspaceError::Locked`].
    /// Whether the workspace exists is taken from the store's memory when it holds its state or
    /// record, before the lock or from what the lock's own request read (the lock is then the
    /// only request to a remote), else read fresh after the lock; a lock taken on a workspace
    /// that turns out not to exist is released, and the answer is the 404.
    pub async fn lock(
        &self,
        name: &WorkspaceName,
        holder: &Holder,
        reason: &str,
    ) -> Result<Workspace, WorkspaceError> {
        let path = self.path(name)?;
        let recalled = self.recalled(name).await?;
        let who = if holder.name.is_empty() {
            "workspace API"
        } else {
            &holder.name
        };
        let reason = if reason.is_empty() {
            "no reason given"
        } else {
            reason
        };
        let info = serde_json::json!({
            "ID": random_lock_id(),
            "Operation": API_LOCK_OPERATION,
            "Info": format!(
                "locked through the workspace API (organization {}, workspace {name}): {reason}",
                self.store.repository()
            ),
            "Who": who,
            "Version": "",
            "Created": crate::time::now_rfc3339(),
            "Path": "",
        });
        let body = Bytes::from(info.to_string());
        match self
            .backend
            .lock(self.store, &path, body.clone(), Some(&holder.token))
            .await
        {
            Ok(_) => {}
            Err(BackendError::Locked(held)) => return Err(self.locked(name, &held)),
            Err(BackendError::Conflict(sentence)) => {
                return Err(WorkspaceError::Unwritable(sentence))
            }
            Err(e) => return Err(e.into()),
        }
        // The lock's own request left what it read in the store's memory (a cold process: the
        // trees on the path); only a workspace it cannot tell of is read fresh, and a lock
        // taken on no workspace is released at once.
        let workspace = match recalled {
            Some(workspace) => workspace,
            None => match self.recalled(name).await? {
                Some(workspace) => workspace,
                None => match self.read(name, Some(holder)).await {
                    Ok(workspace) => workspace,
                    Err(e) => {
                        let release = self
                            .backend
                            .unlock(self.store, &path, &Unlock::Sealed, Some(&holder.token))
                            .await;
                        if let Err(release) = release {
                            tracing::warn!(%path, error = %release, "a lock taken on no workspace could not be released");
                        }
                        return Err(e);
                    }
                },
            },
        };
        Ok(Workspace {
            lock: Some(body),
            locked_by_caller: true,
            ..workspace
        })
    }

    /// Releases the lock `holder` took on the workspace `name` ([`Unlock::Sealed`]: as a
    /// holder's UNLOCK, from the store's memory of the lock, one request to a remote). Not
    /// locked is [`WorkspaceError::NotLocked`]; held by anyone else (an http LOCK, another
    /// caller), is [`WorkspaceError::Locked`]: that lock needs a force-unlock. The workspace
    /// answered names the workspace and its released lock only (`record` and `has_state` are
    /// not read again: `None` and `false`).
    pub async fn unlock(
        &self,
        name: &WorkspaceName,
        holder: &Holder,
    ) -> Result<Workspace, WorkspaceError> {
        let path = self.path(name)?;
        match self
            .backend
            .unlock(self.store, &path, &Unlock::Sealed, Some(&holder.token))
            .await
        {
            // The caller's own lock is proof enough that the workspace is there: it is answered
            // unlocked, its record and state not read again.
            Ok(unlocked) if unlocked.released => Ok(Workspace {
                id: self.id(name),
                path,
                record: None,
                has_state: false,
                lock: None,
                locked_by_caller: false,
            }),
            // Nothing was held: a workspace that does not exist is a 404 before that.
            Ok(_) => {
                self.read(name, Some(holder)).await?;
                Err(not_locked(name))
            }
            Err(BackendError::Locked(held)) => Err(self.locked(name, &held)),
            Err(e) => Err(e.into()),
        }
    }

    /// Removes whatever lock is held on the workspace `name` (`terraform force-unlock`), an
    /// http LOCK included, as the http force-unlock does (logged, and recorded as a force-unlock
    /// by the caller); not locked is [`WorkspaceError::NotLocked`].
    pub async fn force_unlock(
        &self,
        name: &WorkspaceName,
        token: Option<&LockToken>,
    ) -> Result<Workspace, WorkspaceError> {
        let mut workspace = self.read(name, None).await?;
        if workspace.lock.take().is_none() {
            return Err(not_locked(name));
        }
        self.backend
            .unlock(self.store, &workspace.path, &Unlock::Force, token)
            .await?;
        tracing::info!(workspace = %name, path = %workspace.path, "workspace force-unlocked");
        Ok(workspace)
    }

    /// The refusal of an operation on `name` while `held` holds its lock.
    pub(super) fn locked(&self, name: &WorkspaceName, held: &Bytes) -> WorkspaceError {
        self.held_by(name, held, "not by this caller")
    }

    /// The refusal of an operation on `name` while `held` holds its lock, saying `why` after the
    /// holder.
    fn held_by(&self, name: &WorkspaceName, held: &Bytes, why: &str) -> WorkspaceError {
        let info = LockInfo::stored(held);
        let who = if info.who.is_empty() {
            "an unknown holder".to_owned()
        } else {
            escape_controls(&info.who).into_owned()
        };
        let since = if info.created.is_empty() {
            String::new()
        } else {
            format!(" since {}", escape_controls(&info.created))
        };
        WorkspaceError::Locked {
            sentence: format!(
                "the workspace {name} is locked by User {who} (lock ID {}{since}), {why}; wait for it, or remove it with `terraform force-unlock`",
                escape_controls(&info.id)
            ),
            holder: held.clone(),
        }
    }
}

/// What a record write decides on the record it read.
enum RecordWrite {
    /// Nothing to write: the record as it is.
    Unchanged(Record),
    /// This record, with this commit message.
    Changed(Record, Message),
}

/// The path of the record of `name` (a name always has one).
fn record_path(name: &WorkspaceName) -> Result<StatePath, WorkspaceError> {
    name.record_path()
        .map_err(|e| WorkspaceError::Backend(BackendError::BadRequest(e.to_string())))
}

/// The refusal of an unlock of `name` while nothing holds it.
fn not_locked(name: &WorkspaceName) -> WorkspaceError {
    WorkspaceError::NotLocked(format!("the workspace {name} is not locked"))
}

/// A fresh lock ID in the form of Terraform's (a random UUID, version 4).
fn random_lock_id() -> String {
    let mut bytes: [u8; 16] = rand::random();
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}
