//! The `StateStore` port: the few compare-and-swap primitives the protocol needs from a repository.
//! The git engine implements it for a local bare repository and for remotes; tests can implement it
//! for anything. All ids are hex object ids of commits.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use gitstate_url::Credentials;

use crate::commit::Message;
use crate::listing::{ListQuery, StatePage, Version};
use crate::path::StatePath;
use crate::scope::Scope;

/// A commit id (hex) as the store reported it.
pub type Revision = String;

/// What a request read: the state branch tip and the file at the path, the lock branch tip and its
/// lock file. `None` means absent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Tip of the state branch (`None`: the branch does not exist yet).
    pub state_tip: Option<Revision>,
    /// Content of `{path}` at `state_tip`.
    pub state: Option<Bytes>,
    /// Tip of `refs/heads/locks/{path}`.
    pub lock_tip: Option<Revision>,
    /// Content of `{path}.lock` at `lock_tip`.
    pub lock: Option<Bytes>,
    /// The seal the lock commit at `lock_tip` records, as written: verified, never trusted
    /// ([`crate::LockToken`]).
    pub lock_token: Option<String>,
}

/// A lock branch as read: its tip, its lock file, and the token its commit records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockRead {
    /// Tip of `refs/heads/locks/{path}`.
    pub tip: Revision,
    /// Content of `{path}.lock` at `tip`.
    pub content: Bytes,
    /// The seal the lock commit records, as written ([`crate::LockToken`]).
    pub token: Option<String>,
}

/// A change to one state file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateChange {
    /// Add or replace the file with these bytes.
    Write(Bytes),
    /// Remove the file.
    Delete,
    /// Remove the file and, in the same commit, these files of gitstate's own (paths under
    /// `.gitstate/`: a deleted workspace's record). Only the file's own conditions are checked
    /// (its content and its lock, as read); a listed file that is absent is no error.
    DeleteWith(Vec<crate::path::StatePath>),
}

/// Result of trying to create a lock branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockCreate {
    /// The branch did not exist and now holds our lock commit.
    Created,
    /// The branch exists: its tip and its lock file (empty when the commit holds no lock file).
    Held {
        /// Tip of the existing lock branch.
        tip: Revision,
        /// Its `{path}.lock` content.
        content: Bytes,
    },
    /// No state could ever be written at the path, so no lock was taken and nothing written:
    /// a folder of it is a state file or is locked, or it is a folder of states or of locks.
    Unwritable(crate::path::PathConflict),
}

/// Why a store operation failed. The HTTP layer maps each kind to one status code and one
/// sentence of its own: the text a variant carries is its cause, for the server's log (it may hold
/// the git server's words and a library's error chain), except where a variant says it is a
/// sentence a caller may read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// Compare-and-swap lost: the ref is no longer at the id that was read. Retry from a snapshot.
    #[error("the branch moved since it was read")]
    Stale,
    /// The git server wants credentials, or other ones.
    #[error("the git server asked for credentials: {0}")]
    Unauthorized(String),
    /// The git server refused the caller.
    #[error("the git server refused access: {0}")]
    Forbidden(String),
    /// The deployment's policy refused the repository's address when connecting (e.g. its name
    /// resolved to an internal address). Not worth retrying. The text, the address and the
    /// rule it broke, is a sentence a caller may read.
    #[error("the repository's address is refused: {0}")]
    Refused(String),
    /// Could not reach the git server, or it timed out. Worth retrying.
    #[error("the git server could not be reached: {0}")]
    Unavailable(String),
    /// The git server answered, with an error.
    #[error("the git server answered with an error: {0}")]
    Remote(String),
    /// The change conflicts with what is in the repository (e.g. the path is a directory there).
    /// The text is one sentence a caller may read (no cause chain).
    #[error("{0}")]
    Conflict(String),
    /// A bug or a broken local cache.
    #[error("internal error in the state store: {0}")]
    Internal(String),
    /// The write's deadline passed before it could be pushed; nothing was written. Worth
    /// retrying. The text is one sentence a caller may read: what ran out (the answer adds that
    /// it is worth retrying).
    #[error("{0}")]
    Busy(String),
}

/// The port the protocol layer writes against.
///
/// Every mutation is compare-and-swap; none of them may force. An implementation must leave the
/// repository either unchanged or fully updated when it returns an error.
#[async_trait]
pub trait StateStore: Send + Sync + 'static {
    /// Reads the current tips of the state branch and of `path`'s lock branch (for a remote: one
    /// fresh ref advertisement, which is also the authorization check), makes the objects
    /// available, and returns both files.
    async fn snapshot(&self, path: &StatePath) -> Result<Snapshot, StoreError>;

    /// The file at `path` at the current tip of the state branch, read as
    /// [`StateStore::snapshot`] reads it (for a remote: one fresh ref listing, the authorization
    /// check) but without `path`'s lock branch: a read that does not decide on the lock (a GET
    /// whose caller's token has not expired) needs neither its tip nor its file, which a
    /// process that did not take the lock would fetch. The default is the snapshot's state.
    async fn current_state(&self, path: &StatePath) -> Result<Option<Bytes>, StoreError> {
        Ok(self.snapshot(path).await?.state)
    }

    /// [`StateStore::snapshot`] of `path`, and the files at `beside` (in order; `None` where
    /// there is none) at the same state tip, read with it: for a remote, fetched in the same
    /// requests as `path`'s file, with no second look at the tips. No default: a default from
    /// separate snapshots could mix two tips, which this promises never to do.
    async fn snapshot_beside(
        &self,
        path: &StatePath,
        beside: &[StatePath],
    ) -> Result<(Snapshot, Vec<Option<Bytes>>), StoreError>;

    /// Creates `refs/heads/locks/{path}` with a commit holding `{path}.lock` = `content`, only if
    /// the branch does not exist. When it does, reports its tip and lock file instead.
    ///
    /// A path where no state could ever be written is [`LockCreate::Unwritable`], and nothing is
    /// written ([`crate::PathConflict`], DESIGN §3): a folder of the path is a state file at the
    /// state branch's tip ([`crate::PathConflict::in_tree`]) or has a lock branch, or the path is
    /// a folder there or has lock branches under it ([`crate::PathConflict::among_locks`]). The
    /// tree is read at the tip as the store reads it for this call (for a remote: its fresh
    /// check); a state written at a folder of the path afterwards is still refused by
    /// [`WriteAttempt::update_state`]. A lock branch that git refuses to create because of another
    /// one (a ref named like a folder of it, or a folder of refs named like it) is that answer
    /// too, never an error nor [`StoreError::Stale`].
    async fn create_lock(
        &self,
        path: &StatePath,
        content: Bytes,
        message: &Message,
    ) -> Result<LockCreate, StoreError>;

    /// The file at `path` at the tip of the state branch this store last saw (its last read or
    /// its own push), without asking the remote and without fetching: `None` when it remembers
    /// none (the default: a store without such a memory). A store whose reads cost no request
    /// (a local repository) answers from its current tip. It may be stale, so it decides
    /// nothing: a caller uses it only for content that is named by its digest (a workspace's
    /// state version) and reads fresh otherwise.
    async fn recalled_state(&self, path: &StatePath) -> Result<Option<Bytes>, StoreError> {
        let _ = path;
        Ok(None)
    }

    /// Whether the tip of the state branch this store last saw holds a file at `path`, when its
    /// memory holds the trees to tell (no request, no fetch); `None` when it cannot tell (the
    /// default). As [`StateStore::recalled_state`], it may be stale and decides nothing that a
    /// fresh read or a push does not confirm.
    async fn recalled_exists(&self, path: &StatePath) -> Result<Option<bool>, StoreError> {
        let _ = path;
        Ok(None)
    }

    /// Reads only the lock branch: its tip, lock file and token, or `None` when unlocked. The
    /// default takes a full snapshot; stores override it to skip reading the state.
    async fn read_lock(&self, path: &StatePath) -> Result<Option<LockRead>, StoreError> {
        let snapshot = self.snapshot(path).await?;
        Ok(snapshot.lock_tip.map(|tip| LockRead {
            tip,
            content: snapshot.lock.unwrap_or_default(),
            token: snapshot.lock_token,
        }))
    }

    /// The repository's name as the deployment knows it (the configured name, or the address of
    /// an ad-hoc repository without credentials): sealed documents are bound to it (see
    /// [`crate::seal::Place`]). The registry names every store it hands out ([`crate::NamedStore`]);
    /// a bare store answers `""`.
    fn repository(&self) -> &str {
        ""
    }

    /// Whether the state guard applies to this repository ([`crate::Backend::state_guard`]);
    /// a repository configured with `state_guard = false` answers `false`.
    fn guards_states(&self) -> bool {
        true
    }

    /// How old another holder's lock may get before a LOCK takes it over (the repository's
    /// `lock_ttl`, [`crate::lock::LockInfo::expired`]); `None`, the default: never.
    fn lock_ttl(&self) -> Option<std::time::Duration> {
        None
    }

    /// Where this repository keeps the state of each workspace (the repository's
    /// `workspace_path`, DESIGN §10); by default `workspaces/{name}.tfstate`.
    fn workspace_path(&self) -> crate::workspace::WorkspacePath {
        crate::workspace::WorkspacePath::default()
    }

    /// Readiness (`/_/ready`): whether the repository answers with this store's credential. A
    /// remote store asks for one receive-pack advertisement (the check every write starts with;
    /// nothing is fetched or pushed); a local one reads its branch. The default has nothing to
    /// check.
    async fn check(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// A lock that serializes this process's state writes to the repository. Requests in one
    /// process then never race each other for the state branch (no wasted pushes, no starved
    /// writer); compare-and-swap retries only resolve contention with other processes.
    /// `None`: writes are not serialized.
    fn write_serializer(&self) -> Option<Arc<tokio::sync::Mutex<()>>> {
        None
    }

    /// Deletes the lock branch if it is still at `tip`; [`StoreError::Stale`] otherwise (also when
    /// it is gone).
    async fn delete_lock(&self, path: &StatePath, tip: &Revision) -> Result<(), StoreError>;

    /// The versions of `path` on the state branch, newest first, at most `limit`: the commits
    /// whose tree holds a different file at `path` than their first parent's (a deletion
    /// included). A remote store fetches the branch's full history for this (not shallow), after
    /// a fresh remote check with the caller's credentials.
    async fn history(&self, path: &StatePath, limit: usize) -> Result<Vec<Version>, StoreError> {
        let _ = (path, limit);
        Err(StoreError::Internal("this store keeps no history".into()))
    }

    /// The file at `path` in `commit`, a commit of the state branch's history (`None`: the
    /// commit holds no file there, or is not in that history).
    async fn read_version(
        &self,
        path: &StatePath,
        commit: &Revision,
    ) -> Result<Option<Bytes>, StoreError> {
        let _ = (path, commit);
        Err(StoreError::Internal("this store keeps no history".into()))
    }

    /// The files on the state branch at its tip that `query` asks for, with the last commit
    /// that changed each, in path order (the rule: [`StatePage::of_sorted`]).
    async fn list_states(&self, query: &ListQuery) -> Result<StatePage, StoreError> {
        let _ = query;
        Err(StoreError::Internal(
            "this store cannot list its states".into(),
        ))
    }

    /// The paths of the files on the state branch at its tip that start with `prefix`, in path
    /// order, without what else a listing says (a workspace list needs the names only). The
    /// default takes them from [`StateStore::list_states`]; a store that can, reads the tree
    /// alone.
    async fn list_paths(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        let query = ListQuery {
            prefix: prefix.to_owned(),
            after: None,
            limit: usize::MAX,
        };
        let page = self.list_states(&query).await?;
        Ok(page.states.into_iter().map(|s| s.path).collect())
    }

    /// Every held lock (every `refs/heads/locks/…` branch), sorted by path.
    async fn list_locks(&self) -> Result<Vec<HeldLock>, StoreError> {
        Err(StoreError::Internal(
            "this store cannot list its locks".into(),
        ))
    }

    /// Starts a read-then-compare-and-swap, the one way a state is written: reads what `intent`
    /// needs (as [`StateStore::snapshot`] or [`StateStore::read_lock`] do) and returns a
    /// [`WriteAttempt`] that performs at most one ref update with the ids it read as the
    /// expected old values. A remote store reads the tips from the receive-pack advertisement and
    /// pushes over that same session: one fresh remote check (with the caller's credentials, who
    /// must be allowed to write) serves both the read and the write. May return
    /// [`StoreError::Stale`] when the refs moved while being read; the caller retries.
    async fn begin<'a>(
        &'a self,
        path: &StatePath,
        intent: Intent,
    ) -> Result<Box<dyn WriteAttempt + 'a>, StoreError>;
}

/// A held lock: a branch `refs/heads/locks/{path}` and its LockInfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldLock {
    /// The state path the lock is for.
    pub path: String,
    /// Tip of the lock branch.
    pub tip: Revision,
    /// The `{path}.lock` content (the LockInfo as the holder sent it).
    pub content: Bytes,
}

/// The lock a holder's UNLOCK expects to release: what its LOCK wrote, the LockInfo as sent
/// (Terraform sends the same bytes to unlock) and the lock commit's message (its seal included),
/// both made again from the UNLOCK by the rules that made them ([`Intent::ReleaseExpecting`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedLock {
    /// The `{path}.lock` content.
    pub content: Bytes,
    /// The lock commit's message and author.
    pub message: Message,
}

/// What a [`StateStore::begin`] attempt is for; it decides what is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Intent {
    /// A state write (`POST`, `DELETE`): reads the state branch and the lock branch.
    Write,
    /// An unlock: reads only the lock branch (the snapshot's state fields stay `None`).
    Unlock,
    /// An unlock that may begin from the store's memory of the lock it wrote itself instead of a
    /// fresh read, leaving the delete's compare-and-swap to confirm it (an attempt begun so says
    /// so: [`WriteAttempt::begun_from_memory`]). A store without such a memory reads as for
    /// [`Intent::Unlock`].
    Release,
    /// [`Intent::Release`] by the holder's own UNLOCK, which says what its lock holds
    /// ([`ExpectedLock`]). A store whose lock commits follow from what they hold need not fetch a
    /// lock whose id, as the remote shows it, is the commit that lock would be. A store without
    /// it reads as for [`Intent::Release`].
    ReleaseExpecting(Arc<ExpectedLock>),
    /// A state write by a request that names a lock ID: may begin from the store's memory of
    /// the state branch and of the lock (a lock this process took or last read) instead of a
    /// fresh read, leaving the compare-and-swap to confirm both (the push updates the branch
    /// from the remembered tip and asserts the lock branch is still at the remembered one). An
    /// attempt begun so says so ([`WriteAttempt::begun_from_memory`]): what it read must not decide
    /// anything that the push does not confirm. A store without such a memory reads as for
    /// [`Intent::Write`].
    HeldWrite,
}

/// When a write request started and until when it may wait for its turn (DESIGN §9.3). A store
/// that queues writes serves the oldest first and does not push a write whose deadline has
/// passed (it answers [`StoreError::Busy`] instead).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteBudget {
    /// When the request started writing (its first attempt).
    pub since: std::time::Instant,
    /// Past this instant the write is not made any more.
    pub deadline: std::time::Instant,
}

/// One read followed by at most one compare-and-swap ref update whose expected old value is what
/// was read. Dropping it without a write changes nothing.
///
/// A store may relax "expected old value" to the write's own conditions (DESIGN §9.1: the file
/// and the lock branch it read are unchanged), so that writes to other files in between do not
/// make it stale.
#[async_trait]
pub trait WriteAttempt: Send {
    /// What was read when the attempt began.
    fn snapshot(&self) -> &Snapshot;

    /// The request's [`WriteBudget`], before [`WriteAttempt::update_state`]. The default
    /// ignores it (the protocol layer checks the deadline itself before writing).
    fn set_budget(&mut self, budget: WriteBudget) {
        let _ = budget;
    }

    /// Builds one commit on top of the state tip that was read (none: the branch did not exist)
    /// whose only change is `change` to the path, and moves the state branch from that tip to
    /// it. Returns the new commit id, or [`StoreError::Stale`] when the branch moved (a store
    /// may relax this to the write's own conditions, see above). A write of a file where the
    /// tip holds a folder, or under a file, is [`StoreError::Conflict`] with the
    /// [`crate::PathConflict`] sentence, and writes nothing.
    async fn update_state(
        self: Box<Self>,
        change: StateChange,
        message: &Message,
    ) -> Result<Revision, StoreError>;

    /// [`StateStore::delete_lock`] of the lock tip that was read ([`StoreError::Stale`] when no
    /// lock was read).
    async fn delete_lock(self: Box<Self>) -> Result<(), StoreError>;

    /// True when the snapshot is the store's memory of what it wrote ([`Intent::Release`],
    /// [`Intent::HeldWrite`]), not a fresh read: an answer that would rest on it not matching
    /// the request (another holder, no lock, a state the guard refuses, a replay) must be
    /// decided again on a fresh read, and so must a lost push. The default is a fresh read.
    fn begun_from_memory(&self) -> bool {
        false
    }
}

/// Why a repository could not be opened for a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// No repository of that name is configured.
    #[error("no repository named '{0}' is configured")]
    UnknownRepository(String),
    /// The deployment itself (not the git server) did not accept the caller's credentials
    /// (401); the sentence says what to send.
    #[error("{0}")]
    Unauthenticated(String),
    /// An ad-hoc repository URL that the deployment does not allow.
    #[error("{0}")]
    NotAllowed(String),
    /// The ad-hoc address is malformed.
    #[error("{0}")]
    BadAddress(String),
    /// The store could not be set up (e.g. the cache directory is unusable).
    #[error("{0}")]
    Store(#[from] StoreError),
    /// The caller could not be checked now (too many password checks under way): nothing was
    /// checked or opened; worth retrying in a moment (503).
    #[error("{0}")]
    Busy(String),
}

/// Who a checked caller is, and what its credential lets it do.
#[derive(Debug, Clone, Default)]
pub struct Authenticated {
    /// What the credential may do (the full scope unless it is limited).
    pub scope: Scope,
    /// The caller's name when the credential names it (an OIDC rule's `name`); otherwise the
    /// basic-auth user name is the caller's name.
    pub name: Option<String>,
    /// An OIDC token's mark, and whether it has expired (then it is admitted only to finish the
    /// run whose lock it took: [`crate::LockToken`]).
    pub token: Option<crate::LockToken>,
    /// The mark of the credential presented (of any kind: a team token, a user's password, an
    /// OIDC token, whatever a server-mode caller sent) under the deployment's run key: a lock
    /// this caller takes through the workspace API is sealed with it, so that only the same
    /// credential writes under it (DESIGN §10). `None`: no credential was presented.
    pub holder: Option<crate::Mark>,
}

impl Authenticated {
    /// A caller the credential does not name, with `scope`.
    pub fn scoped(scope: Scope) -> Authenticated {
        Authenticated {
            scope,
            ..Authenticated::default()
        }
    }

    /// Whether the credential is an expired OIDC token (admitted only under its own lock).
    pub fn expired(&self) -> bool {
        self.token.as_ref().is_some_and(|t| t.expired)
    }
}

/// Maps repository names (and allowed ad-hoc URLs) to stores, per request so that a store can use
/// the caller's credentials.
#[async_trait]
pub trait StoreRegistry: Send + Sync + 'static {
    /// Checks `caller`'s credentials where the deployment checks them itself (team mode), before
    /// a request opens anything. The HTTP layer awaits it first; slow checks (bcrypt) run off the
    /// async worker threads here. `named` and `adhoc` check again (cheaply, from memory), so a
    /// caller that skips this is still refused. Returns what the credential may do (its
    /// [`Scope`]; the full one unless a scoped token was presented), which the HTTP layer applies
    /// to each operation, and the caller's name when the credential names it.
    async fn authenticate(
        &self,
        caller: Option<&Credentials>,
    ) -> Result<Authenticated, RegistryError> {
        let _ = caller;
        Ok(Authenticated::default())
    }

    /// The configured repository `name`.
    fn named(
        &self,
        name: &str,
        caller: Option<&Credentials>,
    ) -> Result<Arc<dyn StateStore>, RegistryError>;

    /// An ad-hoc repository (terraform-backend-git style address), if the `allow` list permits it.
    fn adhoc(
        &self,
        url: &str,
        git_ref: &str,
        caller: Option<&Credentials>,
    ) -> Result<Arc<dyn StateStore>, RegistryError>;

    /// The configured repository names, sorted.
    fn names(&self) -> Vec<String> {
        Vec::new()
    }

    /// Readiness (`/_/ready`): each configured repository, by name, checked with the
    /// deployment's own credential ([`StateStore::check`]). In pass-through mode the deployment
    /// has none: a repository that answers by asking for credentials is ready. The default has
    /// nothing to check.
    async fn check_repositories(&self) -> Vec<(String, Result<(), StoreError>)> {
        Vec::new()
    }

    /// The credentials of the team caller a verified client certificate is (mTLS, `auth
    /// { certificate { … } }`), from its subject's `TYPE=value` attributes; the entrypoint gives
    /// them to a request that carries none of its own. The default maps none.
    fn certificate_caller(&self, subject: &[(String, String)]) -> Option<Credentials> {
        let _ = subject;
        None
    }

    /// Whether `caller` may read what spans every repository (the catalog, the list of
    /// repositories). A deployment whose git server decides per repository who may read
    /// (pass-through credentials) answers [`RegistryError::NotAllowed`].
    fn admit_operator(&self, caller: Option<&Credentials>) -> Result<(), RegistryError> {
        let _ = caller;
        Ok(())
    }
}
