//! The partial fetch over protocol v2 (DESIGN §9.5): a tip the cache has never seen comes with
//! its commit and root tree only (depth 1, `filter tree:1`), a tip that moved with the trees
//! that changed (`filter blob:none`, the old tip as `have`, a thin pack whose deltas resolve
//! against the cache: what never was read here is left out); then the trees and the blob on each
//! path a request reads or writes come by id (`filter tree:0`), one level per request, over a
//! kept session. A server that refuses tree filters is fetched with `blob:none` throughout.

use std::collections::HashMap;

use gitstate_core::StoreError;
use gix::objs::tree::EntryKind;
use gix::objs::Kind;
use gix::ObjectId;

use super::mode::{fetch_mode, fetches_ids, fetches_partially, set_fetch_mode, FetchMode};
use super::shallow::{read_shallow, write_shallow};
use super::Cache;
use super::{all_arrived, ref_matches};
use crate::errors::from_wire;
use crate::lookup::{reach, Reach};
use crate::repeat::{repeated, Step};
use gitstate_wire::fetchpack::{FetchRequest, ShallowUpdate, UploadPack};
use gitstate_wire::sessions;
use gitstate_wire::thin::Have;
use gitstate_wire::transport::Endpoint;

impl Cache {
    /// The partial fetch over a protocol-v2 `session`: `ls-refs` for `names` only, the missing
    /// tips (depth 1), then the trees and blobs on the paths `files` names of each.
    pub(super) fn refresh_partial(
        &self,
        mut session: UploadPack,
        endpoint: &Endpoint,
        names: &[&str],
        listed: Vec<(String, ObjectId)>,
        files: &dyn Fn(&str) -> Vec<String>,
    ) -> Result<Option<HashMap<String, ObjectId>>, StoreError> {
        let mut tips = HashMap::new();
        for (name, id) in listed {
            if names.iter().any(|n| ref_matches(n, name.as_bytes().into())) {
                tips.insert(name, id);
            }
        }
        if self
            .fetch_tips(&mut session, endpoint, &tips, &[], Objects::Filtered)?
            .is_none()
        {
            return Ok(None);
        }
        let files: Vec<(ObjectId, String)> = tips
            .iter()
            .flat_map(|(name, tip)| files(name).into_iter().map(|path| (*tip, path)))
            .collect();
        let files: Vec<(ObjectId, &str)> = files.iter().map(|(c, p)| (*c, p.as_str())).collect();
        self.complete(&mut session, endpoint, &files, true)?;
        sessions::keep(endpoint, session);
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
        objects: Objects,
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
                let wanted = Wanted {
                    tips,
                    roots,
                    missing,
                    objects,
                };
                self.fetch_locked(session, endpoint, wanted, lock)?;
            }
        }
        Ok(Some(()))
    }

    /// The fetch of [`Cache::fetch_tips`] with the cache's write lock and `lock` (its
    /// `shallow` file) held: the `missing` objects at depth 1 without blobs, the tracking refs'
    /// tips as `have`s, then the new shallow boundary (none for a root commit).
    fn fetch_locked(
        &self,
        session: &mut UploadPack,
        endpoint: &Endpoint,
        wanted: Wanted<'_>,
        lock: gix::lock::File,
    ) -> Result<(), StoreError> {
        let Wanted {
            tips,
            roots,
            missing,
            objects,
        } = wanted;
        let shallow = read_shallow(&self.dir.join("shallow"))?;
        let repo = self.repo();
        // A moved tip costs only the new trees.
        let haves = self.tracked_tips(&repo, tips);
        // A tip never seen comes with its root tree only; a moved one (or pending commits,
        // whose trees are read whole) with the trees that changed.
        let root_only = haves.is_empty()
            && roots.is_empty()
            && fetch_mode(&endpoint.display) == Some(FetchMode::Treeless);
        let filter = if root_only { "tree:1" } else { "blob:none" };
        // With `have`s, a thin pack: what changed, as deltas against the trees of the old tips
        // (DESIGN §9.5); deltas whose base this cache never read are left out.
        let bases = objects_of(&repo);
        let thin = (!haves.is_empty()).then_some(&bases as Have<'_>);
        let fetch = |session: &mut UploadPack, filter: Option<&str>| {
            let request = FetchRequest {
                wants: missing.clone(),
                haves: haves.clone(),
                shallow: shallow.clone(),
                deepen: Some(1),
                filter: filter.map(str::to_owned),
            };
            session
                .fetch(&request, &self.pack_dir(), thin)
                .map_err(from_wire)
        };
        let fetched = match objects {
            Objects::Whole => fetch(session, None)?,
            Objects::Filtered => filtered(session, endpoint, filter, |session, filter| {
                fetch(session, Some(filter))
            })?,
        };
        if fetched.left_out > 0 {
            // Every commit here has its root tree: one left out of the thin pack comes by id.
            self.fetch_root_trees(session, endpoint, tips.values().chain(roots))?;
        }
        // A fresh handle: it sees the packs just written.
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
        Ok(())
    }

    /// Fetches by id the root trees of `commits` (in the cache) that the cache lacks, over
    /// `session`. The caller holds the cache's write lock.
    fn fetch_root_trees<'a>(
        &self,
        session: &mut UploadPack,
        endpoint: &Endpoint,
        commits: impl Iterator<Item = &'a ObjectId>,
    ) -> Result<(), StoreError> {
        let repo = self.repo();
        let mut wants: Vec<ObjectId> = commits
            .filter_map(|id| repo.find_commit(*id).ok()?.tree_id().ok())
            .map(|tree| tree.detach())
            .filter(|tree| !repo.has_object(tree))
            .collect();
        wants.sort();
        wants.dedup();
        if wants.is_empty() {
            return Ok(());
        }
        self.fetch_level(session, endpoint, wants)
    }

    /// Fetches the tips `tips` (name → id, as receive-pack advertised them) the cache lacks, as
    /// [`Cache::refresh`] would but without listing the refs again: one request on a kept
    /// protocol-v2 session (or on the first one of this process, which also decides how the
    /// remote is fetched). `false` when it cannot (a cache that fetches whole trees, a tip gone
    /// meanwhile, a busy cache): the caller then refreshes.
    pub fn fetch_advertised(
        &self,
        endpoint: &Endpoint,
        tips: &HashMap<String, ObjectId>,
    ) -> Result<bool, StoreError> {
        self.fetch_advertised_as(endpoint, tips, &[], Objects::Filtered)
    }

    /// [`Cache::fetch_advertised`] of lock branches only: a lock commit holds one small file
    /// (its LockInfo), so each comes whole (commit, trees and file) in the one request, where a
    /// filtered fetch would then ask for the trees on the file's path level by level and for the
    /// file (4 requests for `a/b/c.tfstate`'s lock instead of 1). What a lock branch may hold is
    /// bounded as every answer is (`gitstate_wire::limits`).
    pub fn fetch_locks_advertised(
        &self,
        endpoint: &Endpoint,
        tips: &HashMap<String, ObjectId>,
    ) -> Result<bool, StoreError> {
        self.fetch_advertised_as(endpoint, tips, &[], Objects::Whole)
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
        self.fetch_advertised_as(endpoint, tips, roots, Objects::Filtered)
    }

    /// [`Cache::fetch_advertised_and`], with the objects `objects` says.
    fn fetch_advertised_as(
        &self,
        endpoint: &Endpoint,
        tips: &HashMap<String, ObjectId>,
        roots: &[ObjectId],
        objects: Objects,
    ) -> Result<bool, StoreError> {
        // This process's own last push may still be being recorded: wait for it before asking
        // the remote for what it is writing.
        self.wait_until_written();
        let repo = self.repo();
        if tips.values().chain(roots).all(|id| repo.has_object(id)) {
            return Ok(true);
        }
        // The first contact with the remote in this process decides how it is fetched, and
        // the session it opened fetches the advertised tips: no ref listing is needed.
        let first = match fetch_mode(&endpoint.display) {
            None if self.shallow => repeated(endpoint.timeout, Step::Fetch, || {
                super::fetch::partial_session(endpoint)
            })?,
            _ => None,
        };
        // Tips at depth 1 with a filter: a request cache of a remote that offers partial fetch.
        if !self.shallow || !fetches_partially(&endpoint.display) {
            return Ok(false);
        }
        let mut session = match first.or_else(|| sessions::take(endpoint)) {
            Some(session) => session,
            None => match repeated(endpoint.timeout, Step::Fetch, || {
                UploadPack::connect(endpoint).map_err(from_wire)
            })? {
                Ok(session) => session,
                Err(_) => return Ok(false),
            },
        };
        match self.fetch_tips(&mut session, endpoint, tips, roots, objects) {
            Ok(Some(())) => {
                sessions::keep(endpoint, session);
                Ok(true)
            }
            Ok(None) => Ok(false),
            Err(e) => {
                tracing::debug!(error = %e, "fetching advertised tips failed; listing the refs again");
                Ok(false)
            }
        }
    }

    /// Makes sure the file at each `(commit, path)` (commits in the cache), and the trees on
    /// its path, are in the cache, fetching what lacks by id (see [`Cache::ensure_paths`]).
    pub fn ensure_files(
        &self,
        endpoint: &Endpoint,
        files: &[(ObjectId, &str)],
    ) -> Result<(), StoreError> {
        self.ensure_paths(endpoint, files, true)
    }

    /// Makes sure the trees on each `(commit, path)` (commits in the cache) are in the cache,
    /// and with `blobs` the file at the path too: what a partial cache lacks comes by id, one
    /// request per level of the paths. Nothing to do for a cache that fetches whole trees, nor
    /// past a path that ends early (no such entry, or a file where a folder would be).
    pub fn ensure_paths(
        &self,
        endpoint: &Endpoint,
        files: &[(ObjectId, &str)],
        blobs: bool,
    ) -> Result<(), StoreError> {
        if self.lacking(files, blobs)?.is_empty() {
            return Ok(());
        }
        self.with_session(endpoint, |session| {
            self.complete(session, endpoint, files, blobs)
        })
    }

    /// Whether this cache can fetch other processes' pending writes (root commits, whole) by
    /// id from `endpoint` (a request cache of a remote that speaks protocol v2, with or without
    /// partial fetch): the write queue's condition on fetching (DESIGN §9.4).
    pub fn fetches_pending(&self, endpoint: &Endpoint) -> bool {
        self.shallow && fetches_ids(&endpoint.display)
    }

    /// Fetches the objects `ids` (with everything they reference: a commit comes with its
    /// trees and blobs) the cache lacks, by id, over a kept protocol-v2 session or a new one.
    pub fn fetch_by_id(&self, endpoint: &Endpoint, ids: Vec<ObjectId>) -> Result<(), StoreError> {
        let repo = self.repo();
        let ids: Vec<ObjectId> = ids.into_iter().filter(|id| !repo.has_object(id)).collect();
        if ids.is_empty() {
            return Ok(());
        }
        self.wait_until_written();
        self.with_session(endpoint, |session| {
            self.fetch_ids(session, endpoint, ids.clone(), None)
        })
    }

    /// Runs `work` over a kept protocol-v2 session of `endpoint`, or a new one when there is
    /// none or the kept one fails, and keeps the session afterwards.
    pub(super) fn with_session<T>(
        &self,
        endpoint: &Endpoint,
        work: impl Fn(&mut UploadPack) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        if let Some(mut session) = sessions::take(endpoint) {
            match work(&mut session) {
                Ok(done) => {
                    sessions::keep(endpoint, session);
                    return Ok(done);
                }
                Err(e) => {
                    tracing::debug!(error = %e, "a kept protocol-v2 session failed; opening a new one")
                }
            }
        }
        // A fetch changes nothing on the server: its connection broken, it goes again.
        repeated(endpoint.timeout, Step::Fetch, || {
            let mut session = reconnect(endpoint)?;
            let done = work(&mut session)?;
            sessions::keep(endpoint, session);
            Ok(done)
        })
    }

    /// Fetches over `session`, level by level, what the cache lacks on the paths `files`
    /// (see [`Cache::ensure_paths`]).
    fn complete(
        &self,
        session: &mut UploadPack,
        endpoint: &Endpoint,
        files: &[(ObjectId, &str)],
        blobs: bool,
    ) -> Result<(), StoreError> {
        let levels = files
            .iter()
            .map(|(_, path)| path.split('/').count())
            .max()
            .unwrap_or(0);
        // A record of this process's own push still in flight may hold what is wanted.
        self.wait_until_written();
        // Each round brings at least the next level of every path that lacks one.
        for _ in 0..=levels {
            let wants = self.lacking(files, blobs)?;
            if wants.is_empty() {
                return Ok(());
            }
            self.fetch_level(session, endpoint, wants)?;
        }
        match self.lacking(files, blobs)?.first() {
            None => Ok(()),
            Some(id) => Err(StoreError::Remote(format!(
                "{} did not send the object {id} on a path asked for",
                endpoint.display
            ))),
        }
    }

    /// The objects the cache lacks to read `files` (commit, path; the commits in the cache):
    /// the first missing tree on each path, and with `blobs` the file at its end.
    fn lacking(
        &self,
        files: &[(ObjectId, &str)],
        blobs: bool,
    ) -> Result<Vec<ObjectId>, StoreError> {
        let repo = self.repo();
        let mut missing = Vec::new();
        for (commit, path) in files {
            let id = match reach(&repo, *commit, path)? {
                Reach::Lacks(tree) => tree,
                Reach::Found(Some(entry)) if blobs && is_file(entry.kind) => entry.id,
                Reach::Found(_) => continue,
            };
            if !repo.has_object(id) && !missing.contains(&id) {
                missing.push(id);
            }
        }
        Ok(missing)
    }

    /// Fetches the trees or blobs `wants` by id and nothing they reference (`filter tree:0`;
    /// `blob:none` where the remote refuses tree filters), over `session`.
    fn fetch_level(
        &self,
        session: &mut UploadPack,
        endpoint: &Endpoint,
        wants: Vec<ObjectId>,
    ) -> Result<(), StoreError> {
        let filter = match fetch_mode(&endpoint.display) {
            Some(FetchMode::Treeless) => "tree:0",
            _ => "blob:none",
        };
        filtered(session, endpoint, filter, |session, filter| {
            self.fetch_ids(session, endpoint, wants.clone(), Some(filter))
        })
    }

    /// Fetches `blobs` (any objects) by id over `session`, no depth: the server sends them, and
    /// what they reference as far as `filter` lets it (`tree:0`: nothing more). Two requests
    /// may fetch the same object at once: both land it, the same bytes.
    ///
    /// Not under the cache's write lock: objects by id land loose or as a pack of their own,
    /// each atomically, so reads of different paths fetch side by side (a burst of cold writes
    /// in one process waited for each other's round trips). The caller has waited for the cache's writes
    /// ([`Cache::wait_until_written`]: a record of its own push in flight may hold what is wanted) or holds
    /// its write lock.
    fn fetch_ids(
        &self,
        session: &mut UploadPack,
        endpoint: &Endpoint,
        blobs: Vec<ObjectId>,
        filter: Option<&str>,
    ) -> Result<(), StoreError> {
        let repo = self.repo();
        let wants: Vec<ObjectId> = blobs
            .into_iter()
            .filter(|id| !repo.has_object(id))
            .collect();
        if wants.is_empty() {
            return Ok(()); // another request brought them meanwhile
        }
        self.fetch_into_store(
            session,
            &FetchRequest {
                wants: wants.clone(),
                filter: filter.map(str::to_owned),
                ..Default::default()
            },
        )?;
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
}

/// The objects of `repo`, as the bases of a thin pack's deltas.
fn objects_of(repo: &gix::Repository) -> impl Fn(&gix::oid) -> Option<(Kind, Vec<u8>)> + '_ {
    |id| {
        let object = repo.find_object(id).ok()?;
        Some((object.kind, object.data.clone()))
    }
}

/// Whether an entry of this kind is a file (a blob).
fn is_file(kind: EntryKind) -> bool {
    matches!(kind, EntryKind::Blob | EntryKind::BlobExecutable)
}

/// A new protocol-v2 session with `endpoint` (after an error ended the last one).
fn reconnect(endpoint: &Endpoint) -> Result<UploadPack, StoreError> {
    UploadPack::connect(endpoint)
        .map_err(from_wire)?
        .map_err(|why| {
            StoreError::Remote(format!(
                "{} cannot be fetched from by id: {why}",
                endpoint.display
            ))
        })
}

/// What a fetch of advertised tips brings of each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Objects {
    /// The commit and the trees the cache's fetch mode says, no file: the state branch, whose
    /// tree holds every state.
    Filtered,
    /// The commit with all it holds: a lock branch's, one small file.
    Whole,
}

/// The objects one fetch of advertised tips asks for.
struct Wanted<'a> {
    /// The advertised tips (name → id), whose tracking refs the fetch moves.
    tips: &'a HashMap<String, ObjectId>,
    /// Root commits wanted with their trees (the pending writes a leader folds).
    roots: &'a [ObjectId],
    /// The ids of `tips` and `roots` the cache lacks.
    missing: Vec<ObjectId>,
    /// What comes of each.
    objects: Objects,
}

/// Runs `fetch` over `session` with `filter`. When that is a tree filter the server refuses,
/// records that `endpoint` is fetched with `blob:none` from now on (logged once) and runs `fetch`
/// again with `blob:none` on a new session (the refusal ended the old one).
fn filtered<T>(
    session: &mut UploadPack,
    endpoint: &Endpoint,
    filter: &str,
    fetch: impl Fn(&mut UploadPack, &str) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    match fetch(session, filter) {
        Err(e) if filter.starts_with("tree:") && refuses_tree_filter(&e) => {
            set_fetch_mode(&endpoint.display, FetchMode::Blobless, Some(&e));
            *session = reconnect(endpoint)?;
            fetch(session, "blob:none")
        }
        fetched => fetched,
    }
}

/// Whether the server refused a fetch for its tree filter (git's upload-pack answers
/// `ERR filter 'tree' not supported` when `uploadpackfilter.tree.allow` is off, or the depth
/// is above `uploadpackfilter.tree.maxDepth`).
fn refuses_tree_filter(error: &StoreError) -> bool {
    let text = error.to_string();
    text.contains("filter 'tree'")
}

/// Whether `id` is a commit in `repo` without parents.
fn is_root(repo: &gix::Repository, id: ObjectId) -> bool {
    repo.find_commit(id)
        .is_ok_and(|commit| commit.parent_ids().next().is_none())
}
