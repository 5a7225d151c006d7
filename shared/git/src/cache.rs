//! The local cache of one remote: a bare repository under
//! `cache_dir/<hash of the URL>-<pid>-<generation>.git` holding only objects the remote sent
//! (shallow, depth 1) or accepted from us, so that what is missing there is exactly what a push
//! must send. One [`CacheHandle`] per remote per process, shared by all requests; fetches into a
//! generation are serialized.
//!
//! What a request cache holds (DESIGN §9): for each tip it has, the commit and **all its trees**
//! (a reader that finds the tip commit may skip the fetch); blobs only when the server offers no
//! partial fetch (protocol v2 with `filter`), otherwise only the blobs something read, fetched by
//! id (`want <blob>`) when a read finds one missing. Blobs are kept by id, so a later read of
//! another state at the same or a later tip adds only its blob. Nothing a push builds reads a
//! blob it does not write (see `objects::state_commit`). The `shallow` file lists the depth-1
//! boundary, as gix's fetch writes it; tracking refs `refs/cache/…` point at the tips fetched or
//! pushed (the `have`s of the next fetch).
//!
//! gix cannot repack, and every fetch adds a pack: a long-running process would collect packs
//! without end. So a generation that has grown past its budget is retired: new requests get a
//! fresh, empty generation (its first fetch brings the tip tree again, shallow), requests in
//! flight finish on the old one, which is deleted when the last of them lets go. A generation
//! belongs to one process (its pid is in the name), so no process ever deletes a directory
//! another one uses; directories of processes that are gone are removed at start.

use std::cell::Cell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use gitstate_core::StoreError;
use gix::refs::transaction::{Change, LogChange, PreviousValue, RefEdit, RefLog};
use gix::refs::Target;
use gix::remote::Direction;
use gix::ObjectId;

use crate::objects::internal;
use crate::plumbing::fetchpack::{FetchRequest, NotOffered, ShallowUpdate, UploadPack};
use crate::plumbing::transport::{classify, connect, http_options, Endpoint};

thread_local! {
    /// Whether the read running on this thread fetched a pack (a cache miss): set by
    /// [`Cache::fetched_pack`], read by [`Cache::refresh_reading`]. A read runs on one thread.
    static FETCHED: Cell<bool> = const { Cell::new(false) };
}

/// One generation of a remote's cache: a repository and the lock that serializes writes into it.
pub struct Cache {
    repo: gix::ThreadSafeRepository,
    dir: PathBuf,
    /// Held while fetching or recording pushed objects: gix's shallow file and tracking refs
    /// are updated under lock files that would make a concurrent second fetch fail.
    write_lock: Mutex<()>,
    /// Packs received by fetches into this generation.
    packs: AtomicUsize,
    /// Pushes recorded into this generation (each adds a few loose objects).
    recorded: AtomicUsize,
    /// Bytes this generation took on disk, as far as it wrote them: fetched packs, and recorded
    /// objects counted uncompressed in whole 4 KiB blocks (an upper bound of their loose files).
    bytes: AtomicU64,
    /// Set when a newer generation replaced this one: its directory goes when the last user
    /// drops it.
    retired: AtomicBool,
    /// Fetches are shallow (depth 1): the request caches. The history cache fetches whole
    /// histories.
    shallow: bool,
}

impl Drop for Cache {
    fn drop(&mut self) {
        if self.retired.load(Ordering::Acquire) {
            match std::fs::remove_dir_all(&self.dir) {
                Ok(()) => {
                    tracing::info!(cache = %self.dir.display(), "retired cache generation removed")
                }
                Err(e) => {
                    tracing::warn!(cache = %self.dir.display(), error = %e, "could not remove a retired cache generation")
                }
            }
        }
    }
}

/// When a generation is retired (see the module documentation).
#[derive(Debug, Clone, Copy)]
pub struct CacheBudget {
    /// Fetches (each adds a pack) a generation may take.
    pub packs: usize,
    /// Recorded pushes (each adds a few loose objects) a generation may take.
    pub recorded_pushes: usize,
    /// Bytes a generation may take on disk (fetched packs and recorded objects): large states
    /// fill a disk long before the counts above are reached (an encrypted 1 MiB state is a
    /// 3.3 MB blob that zlib barely shrinks; BENCHMARKS "The cache's disk budget").
    pub bytes: u64,
}

impl Default for CacheBudget {
    fn default() -> Self {
        CacheBudget {
            packs: 256,
            recorded_pushes: 16_384,
            bytes: 128 << 20,
        }
    }
}

impl CacheBudget {
    /// The default, with `GITSTATE_CACHE_MAX_PACKS` and `GITSTATE_CACHE_MAX_MIB` (tuning
    /// knobs, also used by tests to make generations short) overriding the pack and byte budgets.
    pub fn from_env() -> CacheBudget {
        fn positive(name: &str) -> Option<u64> {
            std::env::var(name)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .filter(|n| *n > 0)
        }
        let mut budget = CacheBudget::default();
        if let Some(packs) = positive("GITSTATE_CACHE_MAX_PACKS") {
            budget.packs = usize::try_from(packs).unwrap_or(usize::MAX);
        }
        if let Some(mib) = positive("GITSTATE_CACHE_MAX_MIB") {
            budget.bytes = mib.saturating_mul(1 << 20);
        }
        budget
    }

    /// Whether `cache` has taken more than this budget allows.
    fn spent_by(&self, cache: &Cache) -> bool {
        cache.packs.load(Ordering::Relaxed) > self.packs
            || cache.recorded.load(Ordering::Relaxed) > self.recorded_pushes
            || cache.bytes.load(Ordering::Relaxed) > self.bytes
    }
}

/// The process-wide cache of one remote: its current generation, and how to start the next.
pub struct CacheHandle {
    cache_dir: PathBuf,
    name: String,
    current: RwLock<Arc<Cache>>,
    next_generation: AtomicU64,
    budget: CacheBudget,
    /// The full-history cache (history, listings), made on first use; replaced like a
    /// generation when it outgrows the budget.
    history: Mutex<Option<Arc<Cache>>>,
}

impl std::fmt::Debug for CacheHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheHandle")
            .field("cache_dir", &self.cache_dir)
            .field("name", &self.name)
            .finish()
    }
}

impl CacheHandle {
    /// The process-wide cache of `url` under `cache_dir`, created on first use (which also
    /// removes generations left by processes that no longer run).
    ///
    /// A new cache is created outside the process-wide registry's lock (only requests for the
    /// same remote wait for it), and the registry keeps at most [`MAX_IDLE_HANDLES`] remotes no
    /// request uses: pass-through callers can name many repositories, and each cache is a
    /// directory on disk. A dropped handle's directories are removed.
    pub fn for_url(cache_dir: &Path, url: &str) -> Result<Arc<CacheHandle>, StoreError> {
        type Slot = Arc<Mutex<Option<Arc<CacheHandle>>>>;
        static HANDLES: OnceLock<Mutex<HashMap<PathBuf, Slot>>> = OnceLock::new();
        let name = cache_name(url);
        let key = cache_dir.join(&name);
        let slot = {
            let mut handles = HANDLES
                .get_or_init(Default::default)
                .lock()
                .map_err(|_| StoreError::Internal("the cache registry is poisoned".into()))?;
            if !handles.contains_key(&key) && handles.len() >= MAX_IDLE_HANDLES {
                drop_idle_handles(&mut handles);
            }
            handles.entry(key).or_default().clone()
        };
        let mut slot = slot
            .lock()
            .map_err(|_| StoreError::Internal("the cache registry is poisoned".into()))?;
        if let Some(handle) = slot.as_ref() {
            return Ok(handle.clone());
        }
        let handle = Arc::new(CacheHandle::create(cache_dir, name)?);
        *slot = Some(handle.clone());
        Ok(handle)
    }

    fn create(cache_dir: &Path, name: String) -> Result<CacheHandle, StoreError> {
        secure_cache_root(cache_dir)?;
        remove_abandoned_generations(cache_dir, &name);
        let first = Cache::create(&cache_dir.join(generation_dir_name(&name, 0)), true)?;
        Ok(CacheHandle {
            cache_dir: cache_dir.to_owned(),
            name,
            current: RwLock::new(Arc::new(first)),
            next_generation: AtomicU64::new(1),
            budget: CacheBudget::from_env(),
            history: Mutex::new(None),
        })
    }

    /// Marks every generation of this handle retired, so that each is removed from disk when
    /// its last user lets go.
    fn retire_all(&self) {
        if let Ok(current) = self.current.read() {
            current.retired.store(true, Ordering::Release);
        }
        if let Ok(history) = self.history.lock() {
            if let Some(cache) = history.as_ref() {
                cache.retired.store(true, Ordering::Release);
            }
        }
    }

    /// The generation new work should use. A request keeps the one it got until it finishes.
    pub fn current(&self) -> Result<Arc<Cache>, StoreError> {
        self.current
            .read()
            .map(|c| c.clone())
            .map_err(|_| StoreError::Internal("the cache handle is poisoned".into()))
    }

    /// The full-history cache of this remote (not shallow): what history and listings read. It
    /// is made on first use and, like a generation, replaced by an empty one once it has taken
    /// more fetches than the budget allows (the next fetch then brings the history again).
    pub fn history(&self) -> Result<Arc<Cache>, StoreError> {
        let mut slot = self
            .history
            .lock()
            .map_err(|_| StoreError::Internal("the history cache is poisoned".into()))?;
        if let Some(cache) = slot.as_ref() {
            if !self.budget.spent_by(cache) {
                return Ok(cache.clone());
            }
            cache.retired.store(true, Ordering::Release);
        }
        let generation = self.next_generation.fetch_add(1, Ordering::Relaxed);
        let stem = self.name.strip_suffix(".git").unwrap_or(&self.name);
        let dir = self.cache_dir.join(format!(
            "{stem}-{}-history{generation}.git",
            std::process::id()
        ));
        let cache = Arc::new(Cache::create(&dir, false)?);
        *slot = Some(cache.clone());
        Ok(cache)
    }

    /// Starts a new generation when `used` (the one a request just worked with) is still the
    /// current one and has outgrown its budget. Failing to create one keeps the old one.
    pub fn retire_if_spent(&self, used: &Arc<Cache>) {
        if !self.budget.spent_by(used) {
            return;
        }
        let Ok(mut current) = self.current.write() else {
            return;
        };
        if !Arc::ptr_eq(&current, used) {
            return; // another request already replaced it
        }
        let generation = self.next_generation.fetch_add(1, Ordering::Relaxed);
        let dir = self
            .cache_dir
            .join(generation_dir_name(&self.name, generation));
        let started = std::time::Instant::now();
        match Cache::create(&dir, true) {
            Ok(fresh) => {
                used.retired.store(true, Ordering::Release);
                *current = Arc::new(fresh);
                tracing::info!(
                    cache = %dir.display(),
                    packs = used.packs.load(Ordering::Relaxed),
                    recorded_pushes = used.recorded.load(Ordering::Relaxed),
                    bytes = used.bytes.load(Ordering::Relaxed),
                    micros = started.elapsed().as_micros() as u64,
                    "cache generation retired; a fresh one takes over"
                );
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not start a new cache generation; keeping the old one")
            }
        }
    }
}

/// How many remotes' caches no request uses a process keeps (see [`CacheHandle::for_url`]).
pub const MAX_IDLE_HANDLES: usize = 64;

/// Removes from `handles` every remote no request or store holds (only the registry does, and
/// nobody waits for it), retiring its generations so their directories go with it.
fn drop_idle_handles(handles: &mut HashMap<PathBuf, Arc<Mutex<Option<Arc<CacheHandle>>>>>) {
    handles.retain(|_, slot| {
        if Arc::strong_count(slot) > 1 {
            return true; // someone is creating or fetching it right now
        }
        let Ok(guard) = slot.lock() else {
            return true;
        };
        match guard.as_ref() {
            Some(handle) if Arc::strong_count(handle) == 1 => {
                handle.retire_all();
                false
            }
            Some(_) => true,
            None => false,
        }
    });
}

/// Makes the cache root private, since what it holds are plaintext states: created with mode
/// 0700 when missing; an existing one must be a directory (not a symbolic link) owned by this
/// process's user, and is set to 0700. Another local user could otherwise read the states, or
/// prepare the directory (under /tmp, anyone can) to read or plant them.
pub fn secure_cache_root(dir: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let refuse = |why: String| {
        StoreError::Internal(format!(
            "the cache directory {} {why}; choose another with --cache-dir or GITSTATE_CACHE_DIR",
            dir.display()
        ))
    };
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => {}
        Err(e) => return Err(refuse(format!("cannot be created: {e}"))),
    }
    let meta =
        std::fs::symlink_metadata(dir).map_err(|e| refuse(format!("cannot be read: {e}")))?;
    if meta.file_type().is_symlink() || !meta.is_dir() {
        return Err(refuse(
            "is a symbolic link or not a directory, which another user may have put there".into(),
        ));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(refuse(format!(
            "belongs to user id {}, not to this process's user ({me}), so that user could read the states cached there",
            meta.uid()
        )));
    }
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| refuse(format!("cannot be made private (mode 0700): {e}")))?;
    }
    Ok(())
}

/// `<name>-<pid>-<generation>.git` (`name` ends in `.git`).
fn generation_dir_name(name: &str, generation: u64) -> String {
    let stem = name.strip_suffix(".git").unwrap_or(name);
    format!("{stem}-{}-{generation}.git", std::process::id())
}

/// Removes generations of `name` whose process is gone (a crash, or a restart), and the
/// generation-less directory of earlier versions. Directories of live processes stay.
fn remove_abandoned_generations(cache_dir: &Path, name: &str) {
    let stem = name.strip_suffix(".git").unwrap_or(name);
    let Ok(entries) = std::fs::read_dir(cache_dir) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let file_name = entry.file_name();
        let Some(file_name) = file_name.to_str() else {
            continue;
        };
        let abandoned = if file_name == name {
            true
        } else {
            file_name
                .strip_prefix(stem)
                .and_then(|rest| rest.strip_prefix('-'))
                .and_then(|rest| rest.strip_suffix(".git"))
                .and_then(|rest| rest.split_once('-'))
                .and_then(|(pid, _)| pid.parse::<u32>().ok())
                .is_some_and(|pid| pid != std::process::id() && !gitstate_core::process::alive(pid))
        };
        if abandoned {
            let path = entry.path();
            match std::fs::remove_dir_all(&path) {
                Ok(()) => tracing::info!(cache = %path.display(), "removed an abandoned cache"),
                Err(e) => {
                    tracing::warn!(cache = %path.display(), error = %e, "could not remove an abandoned cache")
                }
            }
        }
    }
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache").field("dir", &self.dir).finish()
    }
}

/// Pack index slots of the cache's object database. gix fixes the number when the repository is
/// opened and every fetch adds a pack, so a long-running process needs room for many: a slot
/// costs a few dozen bytes until its pack is used.
const OBJECT_STORE_SLOTS: u16 = 8192;

fn open_options() -> gix::open::Options {
    gix::open::Options::isolated()
        .object_store_slots(gix::odb::store::init::Slots::Given(OBJECT_STORE_SLOTS))
        .config_overrides([
            // Needed by reflog-writing code paths; the cache is never shown to anyone.
            format!("user.name={}", crate::objects::COMMITTER_NAME),
            format!("user.email={}", crate::objects::COMMITTER_EMAIL),
            "core.filesRefLockTimeout=3000".to_string(),
            "core.logAllRefUpdates=false".to_string(),
            // Every object here came from a remote: no pack entry or delta may inflate beyond
            // the deployment's object limit (a zip bomb is refused, not inflated in memory).
            format!(
                "gitoxide.objects.allocLimit={}",
                crate::plumbing::limits::max_object_bytes()
            ),
        ])
}

/// The directory name of the cache of `url` (which must carry no credentials).
pub fn cache_name(url: &str) -> String {
    let id = gix::objs::compute_hash(gix::hash::Kind::Sha1, gix::objs::Kind::Blob, url.as_bytes())
        .map(|id| id.to_string())
        .unwrap_or_else(|_| url.replace(|c: char| !c.is_ascii_alphanumeric(), "_"));
    format!("{}.git", &id[..id.len().min(40)])
}

impl Cache {
    /// Creates (or opens, when it exists) the generation directory `dir`.
    fn create(dir: &Path, shallow: bool) -> Result<Cache, StoreError> {
        let repo = if dir.join("HEAD").exists() {
            gix::ThreadSafeRepository::open_opts(dir, open_options())
                .map_err(internal("opening the cache repository"))?
        } else {
            {
                use std::os::unix::fs::DirBuilderExt;
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)
                    .map_err(|e| {
                        StoreError::Internal(format!(
                            "cannot create the cache {}: {e}",
                            dir.display()
                        ))
                    })?;
            }
            gix::ThreadSafeRepository::init_opts(
                dir,
                gix::create::Kind::Bare,
                gix::create::Options::default(),
                open_options(),
            )
            .map_err(internal("creating the cache repository"))?
        };
        Ok(Cache {
            repo,
            dir: dir.to_owned(),
            write_lock: Mutex::new(()),
            packs: AtomicUsize::new(0),
            recorded: AtomicUsize::new(0),
            bytes: AtomicU64::new(0),
            retired: AtomicBool::new(false),
            shallow,
        })
    }

    /// A thread-local handle on the cache repository.
    pub fn repo(&self) -> gix::Repository {
        self.repo.to_thread_local()
    }

    /// Waits until no fetch or record holds the cache (e.g. the objects of this process's last
    /// push, [`Cache::record_pushed_later`]).
    fn settle(&self) {
        drop(
            self.write_lock
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
    }

    /// Where the cache lives.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Asks the remote for the current tips of `names` (one ref advertisement: the authorization
    /// check) and fetches those missing from the cache (shallow, unless this is the history
    /// cache). Returns the tips of the refs that exist. A name ending in `*` stands for every
    /// ref it is a prefix of (e.g. `refs/heads/locks/*`).
    pub fn refresh(
        &self,
        endpoint: &Endpoint,
        names: &[&str],
    ) -> Result<HashMap<String, ObjectId>, StoreError> {
        self.refresh_reading(endpoint, names, &|_| None)
    }

    /// [`Cache::refresh`], and then makes sure the blob at `file(name)` of each tip found is
    /// in the cache, fetching those missing over the same session (a partial cache has the
    /// trees of its tips, and only the blobs something read).
    pub fn refresh_reading(
        &self,
        endpoint: &Endpoint,
        names: &[&str],
        file: &dyn Fn(&str) -> Option<String>,
    ) -> Result<HashMap<String, ObjectId>, StoreError> {
        // Another process sharing the cache directory may hold its `shallow.lock` for the
        // duration of a fetch; gix then fails at once. Wait for it a little, bounded.
        FETCHED.with(|f| f.set(false));
        let mut attempt = 0u32;
        loop {
            match self.refresh_once(endpoint, names, file)? {
                Some(tips) => {
                    let result = if FETCHED.with(Cell::get) {
                        "miss"
                    } else {
                        "hit"
                    };
                    metrics::counter!(gitstate_core::metrics::CACHE_READS, "result" => result)
                        .increment(1);
                    return Ok(tips);
                }
                None if attempt < 100 => {
                    attempt += 1;
                    std::thread::sleep(std::time::Duration::from_millis(
                        10 + u64::from(attempt.min(10)) * 5,
                    ));
                }
                None => {
                    return Err(StoreError::Unavailable(format!(
                        "the cache {} stayed locked by another process",
                        self.dir.display()
                    )))
                }
            }
        }
    }

    /// One attempt of [`Cache::refresh_reading`]; `None` when the cache was locked by another
    /// process.
    ///
    /// A request cache fetches partially (protocol v2, `filter blob:none`, then blobs by id)
    /// when the remote offers it; otherwise, and for the history cache, whole trees through
    /// gix's fetch. Which one is decided on the first fetch from a remote in this process.
    fn refresh_once(
        &self,
        endpoint: &Endpoint,
        names: &[&str],
        file: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<HashMap<String, ObjectId>>, StoreError> {
        let prefixes: Vec<&str> = names
            .iter()
            .map(|n| n.strip_suffix('*').unwrap_or(n))
            .collect();
        if self.shallow && fetch_mode(&endpoint.display) == Some(FetchMode::Partial) {
            // Over HTTP a session kept from an earlier request needs no new capability
            // advertisement: a warm read is one request (`ls-refs`, with this request's
            // credentials: the authorization check).
            if let Some(mut session) = kept_session(endpoint) {
                match session.ls_refs(&prefixes) {
                    Ok(listed) => {
                        return self.refresh_partial(session, endpoint, names, listed, file)
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "a kept protocol-v2 session failed; opening a new one")
                    }
                }
            }
        }
        if self.shallow && fetch_mode(&endpoint.display) != Some(FetchMode::Whole) {
            match UploadPack::connect(endpoint)? {
                Ok(mut session) if session.offers("filter") && session.offers("shallow") => {
                    set_fetch_mode(&endpoint.display, FetchMode::Partial, None);
                    let listed = session.ls_refs(&prefixes)?;
                    return self.refresh_partial(session, endpoint, names, listed, file);
                }
                Ok(session) => {
                    let why = if session.offers("shallow") {
                        NotOffered::Feature("filter")
                    } else {
                        NotOffered::Feature("shallow")
                    };
                    session.finish();
                    set_fetch_mode(&endpoint.display, FetchMode::Whole, Some(&why));
                }
                Err(why) => set_fetch_mode(&endpoint.display, FetchMode::Whole, Some(&why)),
            }
        }
        self.refresh_whole(endpoint, names)
    }

    /// The partial fetch over a protocol-v2 `session`: `ls-refs` for `names` only, the missing
    /// tips with their trees (depth 1, no blobs), then the blobs `file` names.
    fn refresh_partial(
        &self,
        mut session: UploadPack,
        endpoint: &Endpoint,
        names: &[&str],
        listed: Vec<(String, ObjectId)>,
        file: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<HashMap<String, ObjectId>>, StoreError> {
        let mut tips = HashMap::new();
        for (name, id) in listed {
            if names.iter().any(|n| ref_matches(n, name.as_bytes().into())) {
                tips.insert(name, id);
            }
        }
        if self
            .fetch_tips(&mut session, endpoint, &tips, &[])?
            .is_none()
        {
            return Ok(None);
        }
        let blobs = self.missing_blobs(
            tips.iter()
                .filter_map(|(name, tip)| file(name).map(|path| (*tip, path))),
        )?;
        if !blobs.is_empty() {
            self.fetch_ids(&mut session, endpoint, blobs)?;
        }
        keep_session(endpoint, session);
        Ok(Some(tips))
    }

    /// Fetches the commits and trees of `tips` (name → id) and of the root commits `roots`
    /// the cache lacks, at depth 1 without blobs, in one request over `session`, and moves the
    /// tracking refs of `tips`. `None` when another process holds the cache's `shallow.lock`.
    fn fetch_tips(
        &self,
        session: &mut UploadPack,
        endpoint: &Endpoint,
        tips: &HashMap<String, ObjectId>,
        roots: &[ObjectId],
    ) -> Result<Option<()>, StoreError> {
        if !tips
            .values()
            .chain(roots)
            .all(|id| self.repo().has_object(id))
        {
            let _guard = self
                .write_lock
                .lock()
                .map_err(|_| StoreError::Internal("the cache lock is poisoned".into()))?;
            let repo = self.repo();
            let mut missing: Vec<ObjectId> = tips
                .values()
                .chain(roots)
                .filter(|id| !repo.has_object(*id))
                .copied()
                .collect();
            missing.sort();
            missing.dedup();
            if !missing.is_empty() {
                let shallow_file = self.dir.join("shallow");
                let lock = match gix::lock::File::acquire_to_update_resource(
                    &shallow_file,
                    gix::lock::acquire::Fail::Immediately,
                    None,
                    0,
                ) {
                    Ok(lock) => lock,
                    Err(_) if self.dir.join("shallow.lock").exists() => return Ok(None),
                    Err(e) => {
                        return Err(StoreError::Internal(format!(
                            "locking the cache's shallow file: {e}"
                        )))
                    }
                };
                let shallow = read_shallow(&shallow_file)?;
                // The tips this cache had give the server `have`s: a moved tip costs only the
                // new trees.
                let haves: Vec<ObjectId> = tips
                    .keys()
                    .filter_map(|n| repo.find_reference(tracking_ref(n).as_str()).ok())
                    .filter_map(|r| r.target().try_id().map(ToOwned::to_owned))
                    .filter(|id| repo.has_object(id))
                    .collect();
                let fetched = session.fetch(
                    &FetchRequest {
                        wants: missing.clone(),
                        haves,
                        shallow: shallow.clone(),
                        deepen: Some(1),
                        filter: Some("blob:none".into()),
                    },
                    &self.pack_dir(),
                )?;
                let repo = self.repo();
                // A root commit has nothing beyond it: the server's `shallow` for it (depth 1
                // marks every wanted commit) would only grow the file and every later request.
                let boundary: Vec<ShallowUpdate> = fetched
                    .shallow
                    .iter()
                    .filter(|update| match update {
                        ShallowUpdate::Shallow(id) if roots.contains(id) => !is_root(&repo, *id),
                        _ => true,
                    })
                    .copied()
                    .collect();
                write_shallow(lock, shallow, &boundary)?;
                self.fetched_pack("tips", fetched.pack.as_deref());
                all_arrived(&repo, endpoint, tips)?;
                if let Some(root) = roots.iter().find(|id| !repo.has_object(*id)) {
                    return Err(StoreError::Remote(format!(
                        "{} did not send the object {root} asked for",
                        endpoint.display
                    )));
                }
                self.move_tracking_refs(&repo, tips);
            }
        }
        Ok(Some(()))
    }

    /// Fetches the tips `tips` (name → id, as receive-pack advertised them) the cache lacks, as
    /// [`Cache::refresh`] would but without listing the refs again: one request on a kept
    /// protocol-v2 session. `false` when it cannot (a cache that fetches whole trees, a tip
    /// gone meanwhile, a busy cache): the caller then refreshes.
    pub fn fetch_advertised(
        &self,
        endpoint: &Endpoint,
        tips: &HashMap<String, ObjectId>,
    ) -> Result<bool, StoreError> {
        self.fetch_advertised_and(endpoint, tips, &[])
    }

    /// [`Cache::fetch_advertised`], and in the same request the root commits `roots` with their
    /// trees but not their blobs (the pending writes a leader folds by their blobs' ids, DESIGN
    /// §9.4).
    pub fn fetch_advertised_and(
        &self,
        endpoint: &Endpoint,
        tips: &HashMap<String, ObjectId>,
        roots: &[ObjectId],
    ) -> Result<bool, StoreError> {
        // This process's own last push may still be being recorded: wait for it before asking
        // the remote for what it is writing.
        self.settle();
        let repo = self.repo();
        if tips.values().chain(roots).all(|id| repo.has_object(id)) {
            return Ok(true);
        }
        if !self.fetches_by_id(endpoint) {
            return Ok(false);
        }
        let mut session = match kept_session(endpoint) {
            Some(session) => session,
            None => match UploadPack::connect(endpoint)? {
                Ok(session) => session,
                Err(_) => return Ok(false),
            },
        };
        match self.fetch_tips(&mut session, endpoint, tips, roots) {
            Ok(Some(())) => {
                keep_session(endpoint, session);
                Ok(true)
            }
            Ok(None) => Ok(false),
            Err(e) => {
                tracing::debug!(error = %e, "fetching advertised tips failed; listing the refs again");
                Ok(false)
            }
        }
    }

    /// Makes sure the blob at each `(commit, path)` (commits in the cache) is in the cache,
    /// fetching the missing ones by id in one protocol-v2 request. Nothing to do for a cache
    /// that fetches whole trees, nor for a path that holds no file.
    pub fn ensure_files(
        &self,
        endpoint: &Endpoint,
        files: &[(ObjectId, &str)],
    ) -> Result<(), StoreError> {
        let blobs = self.missing_blobs(files.iter().map(|(c, p)| (*c, p.to_string())))?;
        self.fetch_by_id(endpoint, blobs)
    }

    /// Whether this cache fetches objects by id from `endpoint` (a request cache of a remote
    /// that offers partial fetch, DESIGN §9.5).
    pub fn fetches_by_id(&self, endpoint: &Endpoint) -> bool {
        self.shallow && fetch_mode(&endpoint.display) == Some(FetchMode::Partial)
    }

    /// Fetches the objects `ids` (with everything they reference: a commit comes with its
    /// trees and blobs) the cache lacks, by id, over a kept protocol-v2 session or a new one.
    pub fn fetch_by_id(&self, endpoint: &Endpoint, ids: Vec<ObjectId>) -> Result<(), StoreError> {
        let repo = self.repo();
        let ids: Vec<ObjectId> = ids.into_iter().filter(|id| !repo.has_object(id)).collect();
        if ids.is_empty() {
            return Ok(());
        }
        if let Some(mut session) = kept_session(endpoint) {
            match self.fetch_ids(&mut session, endpoint, ids.clone()) {
                Ok(()) => {
                    keep_session(endpoint, session);
                    return Ok(());
                }
                Err(e) => {
                    tracing::debug!(error = %e, "a kept protocol-v2 session failed; opening a new one")
                }
            }
        }
        match UploadPack::connect(endpoint)? {
            Ok(mut session) => {
                self.fetch_ids(&mut session, endpoint, ids)?;
                keep_session(endpoint, session);
                Ok(())
            }
            Err(why) => Err(StoreError::Remote(format!(
                "the cache of {} lacks {} object(s) it needs and cannot fetch them by id: {why}",
                endpoint.display,
                ids.len()
            ))),
        }
    }

    /// The blobs at `files` (commit, path) the cache lacks; the commits and their trees must
    /// be in the cache.
    fn missing_blobs(
        &self,
        files: impl Iterator<Item = (ObjectId, String)>,
    ) -> Result<Vec<ObjectId>, StoreError> {
        let repo = self.repo();
        let mut missing = Vec::new();
        for (commit, path) in files {
            let Some(id) = crate::objects::file_id(&repo, commit, &path)? else {
                continue;
            };
            if !repo.has_object(id) && !missing.contains(&id) {
                missing.push(id);
            }
        }
        Ok(missing)
    }

    /// Fetches `blobs` (any objects) by id over `session` (no filter, no depth: the server sends
    /// just them, with what they reference).
    fn fetch_ids(
        &self,
        session: &mut UploadPack,
        endpoint: &Endpoint,
        blobs: Vec<ObjectId>,
    ) -> Result<(), StoreError> {
        let _guard = self
            .write_lock
            .lock()
            .map_err(|_| StoreError::Internal("the cache lock is poisoned".into()))?;
        let repo = self.repo();
        let wants: Vec<ObjectId> = blobs
            .into_iter()
            .filter(|id| !repo.has_object(id))
            .collect();
        if wants.is_empty() {
            return Ok(()); // another request brought them meanwhile
        }
        let fetched = session.fetch(
            &FetchRequest {
                wants: wants.clone(),
                ..Default::default()
            },
            &self.pack_dir(),
        )?;
        self.fetched_pack("blobs", fetched.pack.as_deref());
        let repo = self.repo();
        for id in &wants {
            if !repo.has_object(id) {
                return Err(StoreError::Remote(format!(
                    "{} did not send the object {id} asked for",
                    endpoint.display
                )));
            }
        }
        Ok(())
    }

    /// Counts a pack fetched into this cache (`pack`: the file written, when the pack held
    /// objects), for the cache's budget and the metrics; marks this thread's read as a miss.
    fn fetched_pack(&self, kind: &'static str, pack: Option<&Path>) {
        self.packs.fetch_add(1, Ordering::Relaxed);
        FETCHED.with(|f| f.set(true));
        let bytes = pack
            .and_then(|p| std::fs::metadata(p).ok())
            .map_or(0, |m| m.len());
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        metrics::counter!(gitstate_core::metrics::GIT_FETCHES, "kind" => kind).increment(1);
        metrics::counter!(gitstate_core::metrics::GIT_FETCHED_BYTES, "kind" => kind)
            .increment(bytes);
    }

    /// Where fetched packs go.
    fn pack_dir(&self) -> PathBuf {
        self.dir.join("objects").join("pack")
    }

    /// Points the tracking ref of each of `tips` at its tip (best effort: a missing tracking ref
    /// only costs a larger fetch later).
    fn move_tracking_refs(&self, repo: &gix::Repository, tips: &HashMap<String, ObjectId>) {
        for (name, id) in tips {
            let Ok(tracking) = tracking_ref(name).try_into() else {
                continue;
            };
            let edit = RefEdit {
                change: Change::Update {
                    log: LogChange {
                        mode: RefLog::AndReference,
                        force_create_reflog: false,
                        message: "fetched".into(),
                    },
                    expected: PreviousValue::Any,
                    new: Target::Object(*id),
                },
                name: tracking,
                deref: false,
            };
            if let Err(e) = repo.edit_reference(edit) {
                tracing::debug!(error = %e, "could not move a cache tracking ref");
            }
        }
    }

    /// Today's fetch through gix: shallow (depth 1, whole trees) for a request cache, the whole
    /// history for the history cache.
    fn refresh_whole(
        &self,
        endpoint: &Endpoint,
        names: &[&str],
    ) -> Result<Option<HashMap<String, ObjectId>>, StoreError> {
        let repo = self.repo();
        let transport = connect(endpoint, gix::protocol::transport::Protocol::V1)?;
        let is_http = matches!(
            endpoint.url.scheme,
            gix::url::Scheme::Http | gix::url::Scheme::Https
        );
        // Tracking refs in the cache give the server `have`s, so a moved tip costs only the new
        // objects, not the whole tree again.
        let specs: Vec<String> = names
            .iter()
            .map(|n| format!("+{n}:{}", tracking_ref(n)))
            .collect();
        let remote = repo
            .remote_at(endpoint.url.clone())
            .map_err(internal("setting up the remote"))?
            .with_fetch_tags(gix::remote::fetch::Tags::None)
            .with_refspecs(specs.iter().map(String::as_str), Direction::Fetch)
            .map_err(internal("setting up the refspecs"))?;
        let mut connection = remote
            .to_connection_with_transport(transport)
            .with_credentials(|_| Ok(None));
        if is_http {
            connection = connection.with_transport_options(Box::new(http_options(endpoint)));
        }
        crate::plumbing::fetchpack::round_trip("upload-pack", "advertisement");
        let prepare = connection
            .prepare_fetch(
                gix::progress::Discard,
                gix::remote::ref_map::Options::default(),
            )
            .map_err(|e| classify(endpoint, "listing the refs of", &e))?;
        let mut tips = HashMap::new();
        for r in &prepare.ref_map().remote_refs {
            let (name, id, _) = r.unpack();
            if let Some(id) = id {
                if names.iter().any(|n| ref_matches(n, name)) {
                    tips.insert(name.to_string(), id.to_owned());
                }
            }
        }
        if tips.values().all(|id| repo.has_object(id)) {
            // Everything is here: skip the fetch round trip.
            return Ok(Some(tips));
        }
        let _guard = self
            .write_lock
            .lock()
            .map_err(|_| StoreError::Internal("the cache lock is poisoned".into()))?;
        if tips.values().all(|id| self.repo().has_object(id)) {
            // Another request's fetch brought them while this one waited for the lock.
            return Ok(Some(tips));
        }
        let prepare = if self.shallow {
            let depth = std::num::NonZeroU32::MIN;
            prepare.with_shallow(gix::remote::fetch::Shallow::DepthAtRemote(depth))
        } else {
            prepare
        };
        crate::plumbing::fetchpack::round_trip("upload-pack", "fetch");
        let received = prepare.receive(gix::progress::Discard, &AtomicBool::new(false));
        let received = match received {
            Ok(received) => received,
            Err(e) if is_local_lock_busy(&e) => return Ok(None),
            Err(e) => return Err(classify(endpoint, "fetching from", &e)),
        };
        let pack = match &received.status {
            gix::remote::fetch::Status::Change {
                write_pack_bundle, ..
            } => write_pack_bundle.data_path.as_deref(),
            gix::remote::fetch::Status::NoPackReceived { .. } => None,
        };
        self.fetched_pack("whole", pack);
        all_arrived(&self.repo(), endpoint, &tips)?;
        Ok(Some(tips))
    }

    /// [`Cache::tracked`] once a record of this process's own push still in flight is done
    /// (a write from the record must build on what it pushed last).
    pub fn tracked_settled(&self, name: &str) -> Option<ObjectId> {
        self.settle();
        self.tracked(name)
    }

    /// The id this cache last recorded for the remote ref `name` (a fetch or a push of this
    /// process moved its tracking ref), when that commit is here too.
    pub fn tracked(&self, name: &str) -> Option<ObjectId> {
        let repo = self.repo();
        let id = repo
            .find_reference(tracking_ref(name).as_str())
            .ok()?
            .target()
            .try_id()
            .map(ToOwned::to_owned)?;
        repo.has_object(id).then_some(id)
    }

    /// [`Cache::record_pushed`] on a thread of its own, so that the request that pushed is
    /// answered without waiting for the cache's copy (compressing and hashing a large state
    /// again). The thread holds the cache's write lock from before this returns until the record
    /// is complete, so whatever finds the objects missing meanwhile waits for them where it
    /// would fetch them (every fetch takes that lock and checks again). Errors are logged: the
    /// remote has the push, and a cache that lacks it fetches it.
    pub fn record_pushed_later(
        self: &Arc<Self>,
        objects: Vec<(ObjectId, gix::objs::Kind, Vec<u8>)>,
        name: String,
        tip: ObjectId,
    ) {
        let cache = self.clone();
        let (locked, wait) = std::sync::mpsc::channel::<()>();
        let spawned = std::thread::Builder::new()
            .name("gitstate-record".into())
            .spawn(move || {
                let _guard = cache
                    .write_lock
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                let _ = locked.send(());
                if let Err(e) = cache.record_locked(&objects, &name, Some(tip)) {
                    tracing::warn!(error = %e, "could not record pushed objects in the cache");
                }
            });
        match spawned {
            // Returns once the thread holds the lock (or has ended).
            Ok(_) => {
                let _ = wait.recv();
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not start recording pushed objects in the cache")
            }
        }
    }

    /// Records objects the remote has just accepted from us, so that the next request finds the
    /// new tip here without fetching it, and moves the tracking ref of `name` to `tip`.
    pub fn record_pushed(
        &self,
        objects: &[(ObjectId, gix::objs::Kind, Vec<u8>)],
        name: &str,
        tip: Option<ObjectId>,
    ) -> Result<(), StoreError> {
        let _guard = self
            .write_lock
            .lock()
            .map_err(|_| StoreError::Internal("the cache lock is poisoned".into()))?;
        self.record_locked(objects, name, tip)
    }

    /// [`Cache::record_pushed`] with the write lock held.
    fn record_locked(
        &self,
        objects: &[(ObjectId, gix::objs::Kind, Vec<u8>)],
        name: &str,
        tip: Option<ObjectId>,
    ) -> Result<(), StoreError> {
        self.recorded.fetch_add(1, Ordering::Relaxed);
        let repo = self.repo();
        let written = write_objects(&repo, objects)?;
        self.bytes.fetch_add(written, Ordering::Relaxed);
        let change = match tip {
            Some(id) => Change::Update {
                log: LogChange {
                    mode: RefLog::AndReference,
                    force_create_reflog: false,
                    message: "pushed".into(),
                },
                expected: PreviousValue::Any,
                new: Target::Object(id),
            },
            None => Change::Delete {
                expected: PreviousValue::Any,
                log: RefLog::AndReference,
            },
        };
        let edit = RefEdit {
            change,
            name: tracking_ref(name)
                .try_into()
                .map_err(internal("naming a tracking ref"))?,
            deref: false,
        };
        // Best effort: a missing tracking ref only costs a larger fetch later.
        if let Err(e) = repo.edit_reference(edit) {
            tracing::debug!(error = %e, "could not move a cache tracking ref");
        }
        Ok(())
    }
}

impl Cache {
    /// Adds pushed `objects` that no ref of the cache names (e.g. the pending commits of the
    /// remote's write queue, DESIGN §9.4).
    pub fn record_objects(
        &self,
        objects: &[(ObjectId, gix::objs::Kind, Vec<u8>)],
    ) -> Result<(), StoreError> {
        let _guard = self
            .write_lock
            .lock()
            .map_err(|_| StoreError::Internal("the cache lock is poisoned".into()))?;
        let written = write_objects(&self.repo(), objects)?;
        self.bytes.fetch_add(written, Ordering::Relaxed);
        Ok(())
    }
}

/// Writes `objects` the cache lacks; returns what they may take on disk (their sizes rounded up
/// to whole 4 KiB blocks: loose objects are compressed, but a small one still takes a block).
/// Concurrent readers take "the tip commit is here" to mean "its whole tree is here" (that is how
/// a fetch is skipped), so no object may appear before those it references.
fn write_objects(
    repo: &gix::Repository,
    objects: &[(ObjectId, gix::objs::Kind, Vec<u8>)],
) -> Result<u64, StoreError> {
    use gix::prelude::Write;
    const BLOCK: u64 = 4096;
    let mut bytes = 0u64;
    for (id, kind, data) in in_dependency_order(objects) {
        if !repo.has_object(id) {
            bytes += (data.len() as u64).div_ceil(BLOCK) * BLOCK;
            // Hashed again although the id is known: gix's `write_buf_with_known_id` measured
            // 4-5 ms slower per LOCK (three small objects; BENCHMARKS, 2026-11-25 evening) than
            // the ~1 ms of SHA-1 it saves on a 1 MiB state, which is spent after the answer.
            repo.objects
                .write_buf(kind, data)
                .map_err(internal("recording pushed objects"))?;
        }
    }
    Ok(bytes)
}

/// `objects` ordered so that each comes after every object of the set it references: blobs, then
/// trees children-first, then commits parents-first (a batch pushes a chain of commits).
fn in_dependency_order(
    objects: &[(ObjectId, gix::objs::Kind, Vec<u8>)],
) -> Vec<(ObjectId, gix::objs::Kind, &[u8])> {
    use gix::objs::Kind;
    let trees: HashMap<ObjectId, &[u8]> = objects
        .iter()
        .filter(|(_, kind, _)| *kind == Kind::Tree)
        .map(|(id, _, data)| (*id, data.as_slice()))
        .collect();
    let mut ordered: Vec<(ObjectId, Kind, &[u8])> = objects
        .iter()
        .filter(|(_, kind, _)| *kind == Kind::Blob)
        .map(|(id, kind, data)| (*id, *kind, data.as_slice()))
        .collect();
    let mut placed = std::collections::HashSet::new();
    fn place<'a>(
        id: ObjectId,
        trees: &HashMap<ObjectId, &'a [u8]>,
        placed: &mut std::collections::HashSet<ObjectId>,
        ordered: &mut Vec<(ObjectId, gix::objs::Kind, &'a [u8])>,
    ) {
        let Some(data) = trees.get(&id) else { return };
        if !placed.insert(id) {
            return;
        }
        for entry in gix::objs::TreeRefIter::from_bytes(data, gix::hash::Kind::Sha1).flatten() {
            if entry.mode.is_tree() {
                place(entry.oid.to_owned(), trees, placed, ordered);
            }
        }
        ordered.push((id, gix::objs::Kind::Tree, data));
    }
    for id in trees.keys() {
        place(*id, &trees, &mut placed, &mut ordered);
    }
    let commits: HashMap<ObjectId, &[u8]> = objects
        .iter()
        .filter(|(_, kind, _)| *kind == Kind::Commit)
        .map(|(id, _, data)| (*id, data.as_slice()))
        .collect();
    fn place_commit<'a>(
        id: ObjectId,
        commits: &HashMap<ObjectId, &'a [u8]>,
        placed: &mut std::collections::HashSet<ObjectId>,
        ordered: &mut Vec<(ObjectId, gix::objs::Kind, &'a [u8])>,
    ) {
        let Some(data) = commits.get(&id) else { return };
        if !placed.insert(id) {
            return;
        }
        if let Ok(commit) = gix::objs::CommitRef::from_bytes(data, gix::hash::Kind::Sha1) {
            for parent in commit.parents() {
                place_commit(parent, commits, placed, ordered);
            }
        }
        ordered.push((id, gix::objs::Kind::Commit, data));
    }
    let mut commit_ids: Vec<ObjectId> = commits.keys().copied().collect();
    commit_ids.sort();
    for id in commit_ids {
        place_commit(id, &commits, &mut placed, &mut ordered);
    }
    ordered.extend(
        objects
            .iter()
            .filter(|(_, kind, _)| !matches!(kind, Kind::Blob | Kind::Tree | Kind::Commit))
            .map(|(id, kind, data)| (*id, *kind, data.as_slice())),
    );
    ordered
}

/// How the request caches of a remote fetch: decided on the first fetch from it in this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FetchMode {
    /// Protocol v2 with `filter`: commits and trees first, blobs by id when read.
    Partial,
    /// Whole trees through gix's fetch (protocol v0/v1, or v2 without `filter`).
    Whole,
}

fn fetch_modes() -> &'static Mutex<HashMap<String, FetchMode>> {
    static MODES: OnceLock<Mutex<HashMap<String, FetchMode>>> = OnceLock::new();
    MODES.get_or_init(Default::default)
}

/// The fetch mode found for the remote `url`, if any request found it yet.
fn fetch_mode(url: &str) -> Option<FetchMode> {
    fetch_modes()
        .lock()
        .ok()
        .and_then(|modes| modes.get(url).copied())
}

/// Records the fetch mode of `url`; the first time it is [`FetchMode::Whole`], says why at info
/// (once per remote and process).
fn set_fetch_mode(url: &str, mode: FetchMode, why: Option<&NotOffered>) {
    let Ok(mut modes) = fetch_modes().lock() else {
        return;
    };
    if modes.insert(url.to_owned(), mode) != Some(mode) && mode == FetchMode::Whole {
        let why = why.map(ToString::to_string).unwrap_or_default();
        tracing::info!(remote = %url, reason = %why, "the git server offers no partial fetch (protocol v2 with filter): cold reads fetch whole trees");
    }
}

/// The commits of the cache's `shallow` file (none when there is no file).
fn read_shallow(path: &Path) -> Result<Vec<ObjectId>, StoreError> {
    let text = match std::fs::read(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(StoreError::Internal(format!(
                "reading the cache's shallow file: {e}"
            )))
        }
    };
    text.split(|b| *b == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| {
            ObjectId::from_hex(line).map_err(|e| {
                StoreError::Internal(format!("the cache's shallow file is corrupt: {e}"))
            })
        })
        .collect()
}

/// Writes `current` with `updates` applied as the new `shallow` file under `lock` (removing the
/// file when nothing is left), as git and gix do.
fn write_shallow(
    mut lock: gix::lock::File,
    mut current: Vec<ObjectId>,
    updates: &[ShallowUpdate],
) -> Result<(), StoreError> {
    use std::io::Write;
    if updates.is_empty() {
        return Ok(()); // dropping the lock leaves the file as it was
    }
    for update in updates {
        match update {
            ShallowUpdate::Shallow(id) => current.push(*id),
            ShallowUpdate::Unshallow(id) => current.retain(|c| c != id),
        }
    }
    current.sort();
    current.dedup();
    let failed = |e: &dyn std::fmt::Display| {
        StoreError::Internal(format!("writing the cache's shallow file: {e}"))
    };
    if current.is_empty() {
        match std::fs::remove_file(lock.resource_path()) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(failed(&e)),
        }
        return Ok(());
    }
    let mut text = Vec::with_capacity(current.len() * 41);
    for id in &current {
        text.extend_from_slice(id.to_hex().to_string().as_bytes());
        text.push(b'\n');
    }
    lock.with_mut(|file| file.write_all(&text))
        .map_err(|e| failed(&e))?;
    lock.commit().map_err(|e| failed(&e.error))?;
    Ok(())
}

/// Protocol-v2 sessions over HTTP(S) kept between requests, by remote and credential: a kept
/// session sends its next command without a new capability advertisement. Every command still
/// carries the credential and is authorized by the server. Bounded: a few per remote and
/// credential, [`MAX_KEPT_SESSIONS`] in all, none older than [`KEPT_SESSION_AGE`].
type KeptSessions =
    HashMap<(String, Option<(String, String)>), Vec<(std::time::Instant, UploadPack)>>;

const MAX_KEPT_SESSIONS: usize = 16;
const KEPT_SESSION_AGE: std::time::Duration = std::time::Duration::from_secs(600);

fn kept_sessions() -> &'static Mutex<KeptSessions> {
    static KEPT: OnceLock<Mutex<KeptSessions>> = OnceLock::new();
    KEPT.get_or_init(Default::default)
}

/// A kept session is used again only for the same remote, credential, network policy, limits
/// and timeout: all of these were fixed when its transport was made.
fn session_key(endpoint: &Endpoint) -> (String, Option<(String, String)>) {
    (
        format!(
            "{} {:?} {:?} {:?}",
            endpoint.display, endpoint.network, endpoint.limits, endpoint.timeout
        ),
        endpoint
            .credentials
            .as_ref()
            .map(|c| (c.username.clone(), c.password.clone())),
    )
}

/// A kept session for `endpoint` and its credential, if there is a fresh one.
fn kept_session(endpoint: &Endpoint) -> Option<UploadPack> {
    let mut kept = kept_sessions().lock().ok()?;
    let sessions = kept.get_mut(&session_key(endpoint))?;
    while let Some((since, session)) = sessions.pop() {
        if since.elapsed() < KEPT_SESSION_AGE {
            return Some(session);
        }
    }
    None
}

/// Keeps `session` for the next request when it can take more commands without a new
/// handshake (HTTP: every command is a request of its own); otherwise ends it.
fn keep_session(endpoint: &Endpoint, session: UploadPack) {
    if !session.is_stateless() {
        session.finish();
        return;
    }
    let Ok(mut kept) = kept_sessions().lock() else {
        return;
    };
    kept.retain(|_, sessions| {
        sessions.retain(|(since, _)| since.elapsed() < KEPT_SESSION_AGE);
        !sessions.is_empty()
    });
    if kept.values().map(Vec::len).sum::<usize>() >= MAX_KEPT_SESSIONS {
        return; // dropped: the next request of this remote makes a new one
    }
    let sessions = kept.entry(session_key(endpoint)).or_default();
    if sessions.len() < 4 {
        sessions.push((std::time::Instant::now(), session));
    }
}

/// Checks that a fetch brought every tip the remote advertised.
fn all_arrived(
    repo: &gix::Repository,
    endpoint: &Endpoint,
    tips: &HashMap<String, ObjectId>,
) -> Result<(), StoreError> {
    match tips.iter().find(|(_, id)| !repo.has_object(*id)) {
        Some((name, id)) => Err(StoreError::Remote(format!(
            "{} advertised {name} at {id} but did not send it",
            endpoint.display
        ))),
        None => Ok(()),
    }
}

/// Whether `id` is a commit in `repo` without parents.
fn is_root(repo: &gix::Repository, id: ObjectId) -> bool {
    repo.find_commit(id)
        .is_ok_and(|commit| commit.parent_ids().next().is_none())
}

/// True when `error` is a lock file of the cache held by someone else (e.g. `shallow.lock`).
fn is_local_lock_busy(error: &gix::Error) -> bool {
    error.iter_errors().any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::AlreadyExists)
    })
}

/// Whether the advertised ref `name` is `pattern` (or starts with it, for a pattern ending
/// in `*`).
fn ref_matches(pattern: &str, name: &gix::bstr::BStr) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix.as_bytes()),
        None => name == pattern.as_bytes(),
    }
}

/// Where the cache keeps its copy of the remote ref `name`.
fn tracking_ref(name: &str) -> String {
    format!("refs/cache/{}", name.strip_prefix("refs/").unwrap_or(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(dir: &Path) -> usize {
        std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
    }

    #[test]
    fn idle_remotes_are_dropped_with_their_directories() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("cache");
        let held: Vec<Arc<CacheHandle>> = (0..3)
            .map(|i| CacheHandle::for_url(&dir, &format!("https://held.example/{i}.git")).unwrap())
            .collect();
        for i in 0..MAX_IDLE_HANDLES * 3 {
            CacheHandle::for_url(&dir, &format!("https://idle.example/{i}.git")).unwrap();
        }
        let kept = entries(&dir);
        assert!(
            kept <= MAX_IDLE_HANDLES + held.len(),
            "{kept} cache directories for {} idle and {} held remotes",
            MAX_IDLE_HANDLES * 3,
            held.len()
        );
        for (i, handle) in held.iter().enumerate() {
            let again =
                CacheHandle::for_url(&dir, &format!("https://held.example/{i}.git")).unwrap();
            assert!(Arc::ptr_eq(handle, &again), "a remote in use was dropped");
            assert!(handle.current().unwrap().dir().join("HEAD").exists());
        }
    }
}
