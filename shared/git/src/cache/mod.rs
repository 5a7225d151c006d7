//! The local cache of one remote: a bare repository under
//! `cache_dir/<hash of the URL>-<pid>-<generation>.git` holding only objects the remote sent
//! (shallow, depth 1) or accepted from us, so that what is missing there is exactly what a push
//! must send. One [`CacheHandle`] per remote per process, shared by all requests; fetches into a
//! generation are serialized.
//!
//! What a request cache holds (DESIGN §9.5): for each tip it has, the commit and its root tree;
//! every other tree and blob only where something read, wrote or pushed it. Over protocol v2
//! with `filter` a new tip comes with its root tree only, a moved one with the trees that
//! changed, and the trees and blob on a path by id (`partial.rs`), so every use of a path makes
//! its trees present first ([`Cache::ensure_paths`]). Without partial fetch the tip comes with
//! its whole tree (`whole.rs`). Objects are kept by id, so a later read of another state at the
//! same or a later tip adds only what is new on its path. Nothing a push builds reads a tree or
//! blob off the path it writes (see `objects::state_commit`). The `shallow` file lists the
//! depth-1 boundary, as gix's fetch writes it; tracking refs `refs/cache/…` point at the tips
//! fetched or pushed (the `have`s of the next fetch).
//!
//! gix cannot repack, and every fetch of a tip adds a pack (a small fetch by id lands loose,
//! `loose.rs`): a long-running process would collect packs and objects without end. So a
//! generation that has grown past its budget is retired: new requests get a
//! fresh, empty generation (its first fetch brings the tip again, shallow), requests in
//! flight finish on the old one, which is deleted when the last of them lets go. A generation
//! belongs to one process (its pid is in the name), so no process ever deletes a directory
//! another one uses; directories of processes that are gone are removed at start.
//!
//! Code map: this file holds a generation ([`Cache`]) and its tracking refs;
//! `generations.rs` the process-wide handle of a remote, the budget that retires a generation
//! and the cache root's permissions; `fetch.rs` the entry of every read (which of the two
//! strategies a remote gets, remembered per process); `partial.rs` the protocol-v2 partial
//! fetch (tips with their root trees, the paths by id); `loose.rs` how a fetch by id lands;
//! `whole.rs` the fetch of whole trees through gix;
//! `shallow.rs` the depth-1 boundary file; `pushed.rs` the record of what this process pushed.
//! The pool of kept upload-pack sessions is `gitstate_wire::sessions`.

use std::cell::Cell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use gitstate_core::StoreError;
use gix::refs::transaction::{Change, LogChange, PreviousValue, RefEdit, RefLog};
use gix::refs::Target;
use gix::ObjectId;

use crate::objects::internal;
use gitstate_wire::transport::Endpoint;

mod blobless;
mod fetch;
mod generations;
mod loose;
mod mode;
mod partial;
mod pushed;
mod shallow;
mod whole;

pub use generations::{secure_cache_root, CacheBudget, CacheHandle, MAX_IDLE_HANDLES};

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
    /// Pushes recorded, and fetches by id written loose, into this generation (each adds a few
    /// loose objects).
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
                gitstate_wire::limits::max_object_bytes()
            ),
        ])
}

/// Lays out an empty bare repository at `dir` (mode 0700): what gix needs to open one, and no
/// more. gix's own `init` also writes hook samples, a description and an exclude file, and
/// probes the file system with scratch files, on the cold start of every Lambda container.
/// `HEAD` comes last: a directory without it is not taken for a repository.
fn init_bare(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true).mode(0o700);
    for sub in ["objects/info", "objects/pack", "refs/heads", "refs/tags"] {
        builder.create(dir.join(sub))?;
    }
    std::fs::write(
        dir.join("config"),
        "[core]\n\trepositoryformatversion = 0\n\tbare = true\n",
    )?;
    std::fs::write(dir.join("HEAD"), "ref: refs/heads/main\n")
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
    pub(super) fn create(dir: &Path, shallow: bool) -> Result<Cache, StoreError> {
        let repo = if dir.join("HEAD").exists() {
            gix::ThreadSafeRepository::open_opts(dir, open_options())
                .map_err(internal("opening the cache repository"))?
        } else {
            init_bare(dir).map_err(|e| {
                StoreError::Internal(format!("cannot create the cache {}: {e}", dir.display()))
            })?;
            gix::ThreadSafeRepository::open_opts(dir, open_options())
                .map_err(internal("opening the new cache repository"))?
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
    pub(super) fn wait_until_written(&self) {
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

    /// [`Cache::tracked`] once a record of this process's own push still in flight is done
    /// (a write from the record must build on what it pushed last).
    pub fn tracked_when_written(&self, name: &str) -> Option<ObjectId> {
        self.wait_until_written();
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
}

/// Where the cache keeps its copy of the remote ref `name`.
pub(super) fn tracking_ref(name: &str) -> String {
    format!("refs/cache/{}", name.strip_prefix("refs/").unwrap_or(name))
}

impl Cache {
    /// Counts a pack fetched into this cache (`pack`: the file written, when the pack held
    /// objects), for the cache's budget and the metrics; marks this thread's read as a miss.
    pub(super) fn fetched_pack(&self, kind: &'static str, pack: Option<&Path>) {
        let bytes = pack
            .and_then(|p| std::fs::metadata(p).ok())
            .map_or(0, |m| m.len());
        self.fetched(kind, bytes, true);
    }

    /// Counts a fetch of `bytes` into this cache, as a pack or as loose objects (which count
    /// with the recorded pushes), for the cache's budget and the metrics; marks this thread's
    /// read as a miss.
    pub(super) fn fetched(&self, kind: &'static str, bytes: u64, pack: bool) {
        if pack {
            self.packs.fetch_add(1, Ordering::Relaxed);
        } else {
            self.recorded.fetch_add(1, Ordering::Relaxed);
        }
        FETCHED.with(|f| f.set(true));
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        metrics::counter!(gitstate_core::metrics::GIT_FETCHES, "kind" => kind).increment(1);
        metrics::counter!(gitstate_core::metrics::GIT_FETCHED_BYTES, "kind" => kind)
            .increment(bytes);
    }

    /// Where fetched packs go.
    pub(super) fn pack_dir(&self) -> PathBuf {
        self.dir.join("objects").join("pack")
    }

    /// The tips this cache last fetched of the refs `tips` names (their tracking refs, where the
    /// cache holds the commit): a fetch's `have`s, so a moved tip costs only what is new.
    pub(super) fn tracked_tips(
        &self,
        repo: &gix::Repository,
        tips: &HashMap<String, ObjectId>,
    ) -> Vec<ObjectId> {
        tips.keys()
            .filter_map(|n| repo.find_reference(tracking_ref(n).as_str()).ok())
            .filter_map(|r| r.target().try_id().map(ToOwned::to_owned))
            .filter(|id| repo.has_object(id))
            .collect()
    }

    /// Points the tracking ref of each of `tips` at its tip (best effort: a missing tracking ref
    /// only costs a larger fetch later).
    pub(super) fn move_tracking_refs(
        &self,
        repo: &gix::Repository,
        tips: &HashMap<String, ObjectId>,
    ) {
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
}

/// Checks that a fetch brought every tip the remote advertised.
pub(super) fn all_arrived(
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

/// Whether the advertised ref `name` is `pattern` (or starts with it, for a pattern ending
/// in `*`).
pub(super) fn ref_matches(pattern: &str, name: &gix::bstr::BStr) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix.as_bytes()),
        None => name == pattern.as_bytes(),
    }
}
