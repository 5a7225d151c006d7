//! The local cache of one remote: a bare repository under `cache_dir/<hash of the URL>` holding
//! only objects the remote sent (shallow, depth 1) or accepted from us, so that what is missing
//! there is exactly what a push must send. One [`Cache`] per directory per process, shared by all
//! requests; fetches into it are serialized.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock};

use gitstate_core::StoreError;
use gix::refs::transaction::{Change, LogChange, PreviousValue, RefEdit, RefLog};
use gix::refs::Target;
use gix::remote::Direction;
use gix::ObjectId;

use crate::objects::internal;
use crate::plumbing::transport::{classify, connect, http_options, Endpoint};

/// A cache repository and the lock that serializes writes into it.
pub struct Cache {
    repo: gix::ThreadSafeRepository,
    dir: PathBuf,
    /// Held while fetching or recording pushed objects: gix's shallow file and tracking refs
    /// are updated under lock files that would make a concurrent second fetch fail.
    write_lock: Mutex<()>,
    /// Serializes this process's state writes to the remote (see
    /// `StateStore::write_serializer`).
    state_writes: Arc<tokio::sync::Mutex<()>>,
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
    /// The process-wide cache for `url` under `cache_dir`, created on first use.
    pub fn for_url(cache_dir: &Path, url: &str) -> Result<Arc<Cache>, StoreError> {
        static CACHES: OnceLock<Mutex<HashMap<PathBuf, Arc<Cache>>>> = OnceLock::new();
        let dir = cache_dir.join(cache_name(url));
        let mut caches = CACHES
            .get_or_init(Default::default)
            .lock()
            .map_err(|_| StoreError::Internal("the cache registry is poisoned".into()))?;
        if let Some(cache) = caches.get(&dir) {
            return Ok(cache.clone());
        }
        if needs_reset(&dir) {
            // Every fetch adds a pack and gix cannot repack: start over once per process when
            // the cache has grown a long tail. It only ever holds copies of remote data.
            tracing::info!(cache = %dir.display(), "recreating a cache that grew too many packs");
            std::fs::remove_dir_all(&dir).map_err(|e| {
                StoreError::Internal(format!("cannot reset the cache {}: {e}", dir.display()))
            })?;
        }
        let repo = if dir.join("HEAD").exists() {
            gix::ThreadSafeRepository::open_opts(&dir, open_options())
                .map_err(internal("opening the cache repository"))?
        } else {
            std::fs::create_dir_all(&dir).map_err(|e| {
                StoreError::Internal(format!("cannot create the cache {}: {e}", dir.display()))
            })?;
            gix::ThreadSafeRepository::init_opts(
                &dir,
                gix::create::Kind::Bare,
                gix::create::Options::default(),
                open_options(),
            )
            .map_err(internal("creating the cache repository"))?
        };
        let cache = Arc::new(Cache {
            repo,
            dir: dir.clone(),
            write_lock: Mutex::new(()),
            state_writes: Default::default(),
        });
        caches.insert(dir, cache.clone());
        Ok(cache)
    }

    /// A thread-local handle on the cache repository.
    pub fn repo(&self) -> gix::Repository {
        self.repo.to_thread_local()
    }

    /// The lock serializing this process's state writes to this remote.
    pub fn state_writes(&self) -> Arc<tokio::sync::Mutex<()>> {
        self.state_writes.clone()
    }

    /// Where the cache lives.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Asks the remote for the current tips of `names` (one ref advertisement: the authorization
    /// check) and fetches those missing from the cache, shallow. Returns the tips of the refs
    /// that exist.
    pub fn refresh(
        &self,
        endpoint: &Endpoint,
        names: &[&str],
    ) -> Result<HashMap<String, ObjectId>, StoreError> {
        // Another process sharing the cache directory may hold its `shallow.lock` for the
        // duration of a fetch; gix then fails at once. Wait for it a little, bounded.
        let mut attempt = 0u32;
        loop {
            match self.refresh_once(endpoint, names)? {
                Some(tips) => return Ok(tips),
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

    /// One attempt of [`Cache::refresh`]; `None` when the cache was locked by another process.
    fn refresh_once(
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
            connection =
                connection.with_transport_options(Box::new(http_options(endpoint.timeout)));
        }
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
                if names.iter().any(|n| name == n.as_bytes()) {
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
        let depth = std::num::NonZeroU32::MIN;
        let received = prepare
            .with_shallow(gix::remote::fetch::Shallow::DepthAtRemote(depth))
            .receive(gix::progress::Discard, &AtomicBool::new(false));
        if let Err(e) = received {
            if is_local_lock_busy(&e) {
                return Ok(None);
            }
            return Err(classify(endpoint, "fetching from", &e));
        }
        let repo = self.repo();
        for (name, id) in &tips {
            if !repo.has_object(id) {
                return Err(StoreError::Remote(format!(
                    "{} advertised {name} at {id} but did not send it",
                    endpoint.display
                )));
            }
        }
        Ok(Some(tips))
    }

    /// Records objects the remote has just accepted from us, so that the next request finds the
    /// new tip here without fetching it, and moves the tracking ref of `name` to `tip`.
    pub fn record_pushed(
        &self,
        objects: &[(ObjectId, gix::objs::Kind, Vec<u8>)],
        name: &str,
        tip: Option<ObjectId>,
    ) -> Result<(), StoreError> {
        use gix::prelude::Write;
        let _guard = self
            .write_lock
            .lock()
            .map_err(|_| StoreError::Internal("the cache lock is poisoned".into()))?;
        let repo = self.repo();
        // Concurrent readers take "the tip commit is here" to mean "its whole tree is here"
        // (that is how a fetch is skipped), so no object may appear before those it references.
        for (id, kind, data) in in_dependency_order(objects) {
            if !repo.has_object(id) {
                repo.objects
                    .write_buf(kind, data)
                    .map_err(internal("recording pushed objects"))?;
            }
        }
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

/// `objects` ordered so that each comes after every object of the set it references: blobs, then
/// trees children-first, then commits (a commit's parent is never in the same push).
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
    ordered.extend(
        objects
            .iter()
            .filter(|(_, kind, _)| !matches!(kind, Kind::Blob | Kind::Tree))
            .map(|(id, kind, data)| (*id, *kind, data.as_slice())),
    );
    ordered
}

/// Packs a cache may collect before it is recreated (at the next process start).
const MAX_PACKS: usize = 256;

fn needs_reset(dir: &Path) -> bool {
    let packs = std::fs::read_dir(dir.join("objects/pack"))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.path().extension().is_some_and(|x| x == "pack"))
                .count()
        })
        .unwrap_or(0);
    packs > MAX_PACKS
}

/// True when `error` is a lock file of the cache held by someone else (e.g. `shallow.lock`).
fn is_local_lock_busy(error: &gix::Error) -> bool {
    error.iter_errors().any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::AlreadyExists)
    })
}

/// Where the cache keeps its copy of the remote ref `name`.
fn tracking_ref(name: &str) -> String {
    format!("refs/cache/{}", name.strip_prefix("refs/").unwrap_or(name))
}
