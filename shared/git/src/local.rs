//! The local store: a bare repository on this machine written directly through gix (the embedded
//! default `./.gitstate/default.git`, or any local bare repository path). No network, no git
//! binary. Ref updates are gix ref transactions with an expected previous value: the same
//! compare-and-swap a remote's receive-pack performs, made atomic by git's `.lock` files, so
//! several threads or processes can share the repository.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use gitstate_core::Message;
use gitstate_core::{
    BlockingStore, Intent, LockCreate, LockRead, PathConflict, Revision, Snapshot, StateChange,
    StatePath, StoreError, WriteAttempt,
};
use gix::refs::transaction::{Change, LogChange, PreviousValue, RefEdit, RefLog};
use gix::refs::Target;
use gix::ObjectId;

use crate::objects::{internal, lock_commit, parse_id, path_conflict, read_file, state_commit};

/// How long a ref update waits for another writer's `.lock` file before giving up (as stale).
const REF_LOCK_TIMEOUT_MS: u32 = 3000;

/// A bare repository on local disk.
#[derive(Clone)]
pub struct LocalStore {
    repo: gix::ThreadSafeRepository,
    writes: std::sync::Arc<tokio::sync::Mutex<()>>,
    state_ref: String,
    location: PathBuf,
    committer: crate::objects::Committer,
}

impl std::fmt::Debug for LocalStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalStore")
            .field("location", &self.location)
            .field("state_ref", &self.state_ref)
            .finish()
    }
}

fn options() -> gix::open::Options {
    gix::open::Options::isolated()
        .config_overrides([format!("core.filesRefLockTimeout={REF_LOCK_TIMEOUT_MS}")])
}

/// Maps a failed ref transaction: a moved ref, an existing ref, a vanished ref, or another writer
/// holding the ref's lock file are all "stale" (retry from a fresh read); anything else is a real failure.
fn ref_edit_error(e: gix::Error) -> StoreError {
    use gix::refs::file::transaction::prepare::{MustNotExist, ReferenceOutOfDate};
    if e.downcast_any_ref::<ReferenceOutOfDate>().is_some()
        || e.downcast_any_ref::<MustNotExist>().is_some()
        || e.classify().is_conflict()
        // An expected ref that is gone (e.g. unlocking a lock someone else already removed) is
        // also a lost compare-and-swap, not a failure of the store.
        || e.classify().is_not_found()
        || e.classify().can_retry()
    {
        return StoreError::Stale;
    }
    StoreError::Internal(format!("updating a ref failed: {e:#}"))
}

impl LocalStore {
    /// The same store writing its commits as `committer` (author and committer).
    pub fn with_committer(mut self, committer: crate::objects::Committer) -> Self {
        self.committer = committer;
        self
    }

    /// Opens the bare repository at `path`, creating it (and its parent directories) on first
    /// use, with `refs/heads/{git_ref}` as the state branch.
    pub fn open_or_init(path: &Path, git_ref: &str) -> Result<Self, StoreError> {
        let repo = if path.join("HEAD").exists() {
            gix::ThreadSafeRepository::open_opts(path, options()).map_err(|e| {
                StoreError::Internal(format!(
                    "cannot open the repository {}: {e}",
                    path.display()
                ))
            })?
        } else {
            std::fs::create_dir_all(path).map_err(|e| {
                StoreError::Internal(format!("cannot create {}: {e}", path.display()))
            })?;
            gix::ThreadSafeRepository::init_opts(
                path,
                gix::create::Kind::Bare,
                gix::create::Options::default(),
                options(),
            )
            .map_err(|e| {
                StoreError::Internal(format!(
                    "cannot create the repository {}: {e}",
                    path.display()
                ))
            })?
        };
        let store = LocalStore {
            repo,
            writes: Default::default(),
            state_ref: format!("refs/heads/{git_ref}"),
            location: path.to_owned(),
            committer: Default::default(),
        };
        // HEAD of a new repository points at the state branch, so `git log` shows the states.
        store.point_head_at_state_branch(path)?;
        Ok(store)
    }

    fn point_head_at_state_branch(&self, path: &Path) -> Result<(), StoreError> {
        let head = path.join("HEAD");
        let current = std::fs::read_to_string(&head).unwrap_or_default();
        let wanted = format!("ref: {}\n", self.state_ref);
        if current != wanted && self.tip(&self.state_ref)?.is_none() {
            std::fs::write(&head, wanted).map_err(|e| {
                StoreError::Internal(format!("cannot write {}: {e}", head.display()))
            })?;
        }
        Ok(())
    }

    /// Where the repository lives.
    /// The compare-and-swap a write ends with: one commit on `base` changing `path`, and the
    /// state branch moved from `base` to it ([`StoreError::Stale`] when it is not at `base`).
    fn write_at(
        &self,
        path: &StatePath,
        base: Option<&Revision>,
        change: &StateChange,
        message: &Message,
    ) -> Result<Revision, StoreError> {
        let repo = self.repo.to_thread_local();
        let base = base.map(|b| parse_id(b)).transpose()?;
        let commit = state_commit(&repo, base, path.as_str(), change, message, &self.committer)?;
        let expected = match base {
            Some(old) => PreviousValue::MustExistAndMatch(Target::Object(old)),
            None => PreviousValue::MustNotExist,
        };
        self.move_ref(&self.state_ref, expected, Some(commit), &message.text)?;
        Ok(commit.to_string())
    }

    pub fn location(&self) -> &Path {
        &self.location
    }

    fn tip(&self, name: &str) -> Result<Option<ObjectId>, StoreError> {
        let repo = self.repo.to_thread_local();
        let reference = repo
            .try_find_reference(name)
            .map_err(internal("reading a ref"))?;
        Ok(reference.and_then(|r| r.target().try_id().map(|id| id.to_owned())))
    }

    fn move_ref(
        &self,
        name: &str,
        expected: PreviousValue,
        new: Option<ObjectId>,
        message: &str,
    ) -> Result<(), StoreError> {
        let repo = self.repo.to_thread_local();
        let name = name
            .try_into()
            .map_err(|e| StoreError::Internal(format!("invalid ref name {name}: {e}")))?;
        let change = match new {
            Some(id) => Change::Update {
                log: LogChange {
                    mode: RefLog::AndReference,
                    force_create_reflog: false,
                    message: message.into(),
                },
                expected,
                new: Target::Object(id),
            },
            None => Change::Delete {
                expected,
                log: RefLog::AndReference,
            },
        };
        let committer = self.committer.signature();
        let mut time_buf = gix::date::parse::TimeBuf::default();
        repo.edit_references_as(
            Some(RefEdit {
                change,
                name,
                deref: false,
            }),
            Some(committer.to_ref(&mut time_buf)),
        )
        .map_err(ref_edit_error)?;
        Ok(())
    }

    /// What keeps a lock off `path` ([`gitstate_core::StateStore::create_lock`]): a lock branch
    /// above or below it, or the state branch's tree.
    fn unwritable(
        &self,
        repo: &gix::Repository,
        path: &StatePath,
    ) -> Result<Option<PathConflict>, StoreError> {
        if let Some(conflict) = self.locks_in_the_way(repo, path)? {
            return Ok(Some(conflict));
        }
        match self.tip(&self.state_ref)? {
            Some(tip) => path_conflict(repo, tip, path),
            None => Ok(None),
        }
    }

    /// The lock branches on a folder of `path` or under it ([`PathConflict::among_locks`]).
    fn locks_in_the_way(
        &self,
        repo: &gix::Repository,
        path: &StatePath,
    ) -> Result<Option<PathConflict>, StoreError> {
        let mut locked = Vec::new();
        for above in path.ancestors() {
            if self
                .tip(&format!("{}{above}", crate::LOCK_REF_PREFIX))?
                .is_some()
            {
                locked.push(above.to_owned());
            }
        }
        let below = format!("{}/", path.lock_ref());
        let platform = repo.references().map_err(internal("listing refs"))?;
        for reference in platform
            .prefixed(below.as_str())
            .map_err(internal("listing refs"))?
        {
            let reference =
                reference.map_err(|e| StoreError::Internal(format!("listing refs: {e}")))?;
            let name = reference.name().as_bstr().to_string();
            if let Some(held) = name.strip_prefix(crate::LOCK_REF_PREFIX) {
                locked.push(held.to_owned());
            }
        }
        Ok(PathConflict::among_locks(
            path,
            locked.iter().map(String::as_str),
        ))
    }
}

impl BlockingStore for LocalStore {
    fn snapshot_blocking(&self, path: &StatePath) -> Result<Snapshot, StoreError> {
        let repo = self.repo.to_thread_local();
        let state_tip = self.tip(&self.state_ref)?;
        // gitstate's own files (workspace records) have no lock branch, and git refuses the
        // name theirs would have.
        let lock_tip = match path.is_gitstate_file() {
            true => None,
            false => self.tip(&path.lock_ref())?,
        };
        let state = match state_tip {
            Some(tip) => read_file(&repo, tip, path.as_str())?,
            None => None,
        };
        let lock = match lock_tip {
            Some(tip) => Some(read_file(&repo, tip, &path.lock_file())?.unwrap_or_default()),
            None => None,
        };
        Ok(Snapshot {
            state_tip: state_tip.map(|id| id.to_string()),
            state,
            lock_tip: lock_tip.map(|id| id.to_string()),
            lock,
            lock_token: lock_tip.and_then(|tip| crate::objects::lock_token_at(&repo, tip)),
        })
    }

    /// A local repository's reads cost no request: what it "remembers" is its current tip.
    fn recalled_state_blocking(&self, path: &StatePath) -> Result<Option<Bytes>, StoreError> {
        match self.tip(&self.state_ref)? {
            Some(tip) => read_file(&self.repo.to_thread_local(), tip, path.as_str()),
            None => Ok(None),
        }
    }

    /// Whether the current tip holds a file at `path` (see
    /// [`LocalStore::recalled_state_blocking`]).
    fn recalled_exists_blocking(&self, path: &StatePath) -> Result<Option<bool>, StoreError> {
        let entry = match self.tip(&self.state_ref)? {
            Some(tip) => crate::lookup::entry_at(&self.repo.to_thread_local(), tip, path.as_str())?,
            None => None,
        };
        Ok(Some(entry.is_some_and(|e| e.is_file())))
    }

    fn create_lock_blocking(
        &self,
        path: &StatePath,
        content: &[u8],
        message: &Message,
    ) -> Result<LockCreate, StoreError> {
        let repo = self.repo.to_thread_local();
        let lock_ref = path.lock_ref();
        let held = |tip: ObjectId| -> Result<LockCreate, StoreError> {
            Ok(LockCreate::Held {
                tip: tip.to_string(),
                content: read_file(&repo, tip, &path.lock_file())?.unwrap_or_default(),
            })
        };
        if let Some(tip) = self.tip(&lock_ref)? {
            return held(tip);
        }
        if let Some(conflict) = self.unwritable(&repo, path)? {
            return Ok(LockCreate::Unwritable(conflict));
        }
        let commit = lock_commit(&repo, &path.lock_file(), content, message, &self.committer)?;
        match self.move_ref(
            &lock_ref,
            PreviousValue::MustNotExist,
            Some(commit),
            &message.text,
        ) {
            Ok(()) => Ok(LockCreate::Created),
            Err(StoreError::Stale) => match self.tip(&lock_ref)? {
                Some(tip) => held(tip),
                // Released between our attempt and this read: report it as held by nobody
                // known; the client retries its LOCK.
                None => Err(StoreError::Stale),
            },
            // A lock branch above or below taken since the check: git's refs cannot hold both.
            Err(e) => match self.locks_in_the_way(&repo, path)? {
                Some(conflict) => Ok(LockCreate::Unwritable(conflict)),
                None => Err(e),
            },
        }
    }

    async fn run<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(LocalStore) -> Result<T, StoreError> + Send + 'static,
    {
        let store = self.clone();
        tokio::task::spawn_blocking(move || work(store))
            .await
            .map_err(|e| StoreError::Internal(format!("a git task failed: {e}")))?
    }
    fn read_lock_blocking(&self, path: &StatePath) -> Result<Option<LockRead>, StoreError> {
        let repo = self.repo.to_thread_local();
        match self.tip(&path.lock_ref())? {
            Some(tip) => Ok(Some(LockRead {
                tip: tip.to_string(),
                content: read_file(&repo, tip, &path.lock_file())?.unwrap_or_default(),
                token: crate::objects::lock_token_at(&repo, tip),
            })),
            None => Ok(None),
        }
    }

    fn delete_lock_blocking(&self, path: &StatePath, tip: &Revision) -> Result<(), StoreError> {
        let old = parse_id(tip)?;
        self.move_ref(
            &path.lock_ref(),
            PreviousValue::MustExistAndMatch(Target::Object(old)),
            None,
            "unlock",
        )
    }
    /// Reads what `intent` needs now (a local read costs no request, so there is no memory to
    /// begin from): the state and the lock for a write, the lock alone for an unlock.
    fn begin_blocking(
        &self,
        path: &StatePath,
        intent: Intent,
    ) -> Result<Box<dyn WriteAttempt>, StoreError> {
        let snapshot = match intent {
            Intent::Write | Intent::HeldWrite => self.snapshot_blocking(path)?,
            Intent::Unlock | Intent::Release | Intent::ReleaseExpecting(_) => {
                match self.read_lock_blocking(path)? {
                    Some(held) => Snapshot {
                        lock_tip: Some(held.tip),
                        lock: Some(held.content),
                        lock_token: held.token,
                        ..Snapshot::default()
                    },
                    None => Snapshot::default(),
                }
            }
        };
        Ok(Box::new(LocalAttempt {
            store: self.clone(),
            path: path.clone(),
            snapshot,
        }))
    }

    fn history_blocking(
        &self,
        path: &StatePath,
        limit: usize,
    ) -> Result<Vec<gitstate_core::Version>, StoreError> {
        match self.tip(&self.state_ref)? {
            Some(tip) => {
                let repo = self.repo.to_thread_local();
                let held = crate::history::held(&repo);
                crate::history::versions(&repo, tip, path.as_str(), limit, &held)
            }
            None => Ok(Vec::new()),
        }
    }

    fn read_version_blocking(
        &self,
        path: &StatePath,
        commit: &Revision,
    ) -> Result<Option<Bytes>, StoreError> {
        crate::history::read_at(
            &self.repo.to_thread_local(),
            parse_id(commit)?,
            path.as_str(),
        )
    }

    fn list_states_blocking(
        &self,
        query: &gitstate_core::ListQuery,
    ) -> Result<gitstate_core::StatePage, StoreError> {
        match self.tip(&self.state_ref)? {
            Some(tip) => {
                let repo = self.repo.to_thread_local();
                let held = crate::history::held(&repo);
                crate::listing::page(&repo, tip, query, &held)
            }
            None => Ok(gitstate_core::StatePage::default()),
        }
    }

    fn list_paths_blocking(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        match self.tip(&self.state_ref)? {
            Some(tip) => crate::listing::paths(&self.repo.to_thread_local(), tip, prefix),
            None => Ok(Vec::new()),
        }
    }

    fn list_locks_blocking(&self) -> Result<Vec<gitstate_core::HeldLock>, StoreError> {
        let repo = self.repo.to_thread_local();
        let platform = repo.references().map_err(internal("listing refs"))?;
        let mut tips = Vec::new();
        for reference in platform
            .prefixed(crate::LOCK_REF_PREFIX)
            .map_err(internal("listing refs"))?
        {
            let reference =
                reference.map_err(|e| StoreError::Internal(format!("listing refs: {e}")))?;
            let name = reference.name().as_bstr().to_string();
            if let Some(id) = reference.target().try_id() {
                tips.push((name, id.to_owned()));
            }
        }
        crate::held_locks(&repo, tips)
    }

    fn write_serializer(&self) -> Option<std::sync::Arc<tokio::sync::Mutex<()>>> {
        Some(self.writes.clone())
    }

    fn check_blocking(&self) -> Result<(), StoreError> {
        self.tip(&self.state_ref).map(|_| ())
    }
}

/// A write or unlock on the local repository: what was read, and the one ref update that
/// expects it.
struct LocalAttempt {
    store: LocalStore,
    path: StatePath,
    snapshot: Snapshot,
}

#[async_trait::async_trait]
impl WriteAttempt for LocalAttempt {
    fn snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    async fn update_state(
        self: Box<Self>,
        change: StateChange,
        message: &Message,
    ) -> Result<Revision, StoreError> {
        let (path, base, message) = (self.path, self.snapshot.state_tip, message.to_owned());
        self.store
            .run(move |store| store.write_at(&path, base.as_ref(), &change, &message))
            .await
    }

    async fn delete_lock(self: Box<Self>) -> Result<(), StoreError> {
        let Some(tip) = self.snapshot.lock_tip else {
            return Err(StoreError::Stale);
        };
        let path = self.path;
        self.store
            .run(move |store| store.delete_lock_blocking(&path, &tip))
            .await
    }
}
