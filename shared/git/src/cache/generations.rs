//! The process-wide cache of a remote ([`CacheHandle`]): its current generation, the budget
//! that retires one ([`CacheBudget`]), the registry of remotes a process keeps, and the private
//! cache root (see the module documentation of `cache`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use gitstate_core::StoreError;

use super::{cache_name, Cache};

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
        remove_abandoned_generations_in_background(cache_dir, &name);
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

/// [`remove_abandoned_generations`] on a thread of its own, so that no request waits for it: a
/// restarted server may find gigabytes left by its predecessor, and a directory's removal costs
/// milliseconds on some file systems (an `rmdir` on ext4 mounted with `discard` takes 2–4 ms).
/// A new Lambda container's /tmp is empty, so there the thread finds nothing. The directories
/// it removes belong to dead processes, which no request of this one reads.
fn remove_abandoned_generations_in_background(cache_dir: &Path, name: &str) {
    let (cache_dir, name) = (cache_dir.to_owned(), name.to_owned());
    let spawned = std::thread::Builder::new()
        .name("gitstate-cache-sweep".into())
        .spawn(move || remove_abandoned_generations(&cache_dir, &name));
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "could not start removing abandoned caches");
    }
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
                // Another process starting on the same cache directory removed it first.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(cache = %path.display(), error = %e, "could not remove an abandoned cache")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(dir: &Path) -> usize {
        std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
    }

    #[test]
    fn caches_left_by_dead_processes_are_removed_and_others_kept() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("cache");
        let url = "https://sweep.example/states.git";
        let name = cache_name(url);
        let stem = name.strip_suffix(".git").unwrap();
        let mut finished = std::process::Command::new("true").spawn().unwrap();
        let dead = finished.id();
        finished.wait().unwrap();
        let left = [
            format!("{stem}-{dead}-0.git"),
            format!("{stem}-{dead}-7.git"),
            name.clone(),
        ];
        let kept = [
            format!("{stem}-1-0.git"),
            format!(
                "{}-{dead}-0.git",
                cache_name("https://other.example/x.git").trim_end_matches(".git")
            ),
        ];
        for d in left.iter().chain(&kept) {
            std::fs::create_dir_all(dir.join(d).join("objects")).unwrap();
        }
        let handle = CacheHandle::for_url(&dir, url).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while left.iter().any(|d| dir.join(d).exists()) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        for d in &left {
            assert!(
                !dir.join(d).exists(),
                "{d} was left by a dead process and is still there"
            );
        }
        for d in &kept {
            assert!(
                dir.join(d).exists(),
                "{d} belongs to a live process or another remote"
            );
        }
        assert!(handle.current().unwrap().dir().join("HEAD").exists());
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
