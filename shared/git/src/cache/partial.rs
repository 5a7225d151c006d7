//! The partial fetch over protocol v2: tips with their commits and trees at depth 1 and no
//! blobs (`filter blob:none`), then the blobs a read needs, by id, over a kept session.

use std::collections::HashMap;

use gitstate_core::StoreError;
use gix::ObjectId;

use super::mode::{fetch_mode, FetchMode};
use super::shallow::{read_shallow, write_shallow};
use super::{all_arrived, ref_matches};
use super::{tracking_ref, Cache};
use crate::plumbing::fetchpack::{FetchRequest, ShallowUpdate, UploadPack};
use crate::plumbing::sessions;
use crate::plumbing::transport::Endpoint;

impl Cache {
    /// The partial fetch over a protocol-v2 `session`: `ls-refs` for `names` only, the missing
    /// tips with their trees (depth 1, no blobs), then the blobs `file` names.
    pub(super) fn refresh_partial(
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
                self.fetch_locked(session, endpoint, tips, roots, missing, lock)?;
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
        tips: &HashMap<String, ObjectId>,
        roots: &[ObjectId],
        missing: Vec<ObjectId>,
        lock: gix::lock::File,
    ) -> Result<(), StoreError> {
        let shallow = read_shallow(&self.dir.join("shallow"))?;
        let repo = self.repo();
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
        // A fresh handle: it sees the pack just written.
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
        let mut session = match sessions::take(endpoint) {
            Some(session) => session,
            None => match UploadPack::connect(endpoint)? {
                Ok(session) => session,
                Err(_) => return Ok(false),
            },
        };
        match self.fetch_tips(&mut session, endpoint, tips, roots) {
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
        if let Some(mut session) = sessions::take(endpoint) {
            match self.fetch_ids(&mut session, endpoint, ids.clone()) {
                Ok(()) => {
                    sessions::keep(endpoint, session);
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
                sessions::keep(endpoint, session);
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
}

/// Whether `id` is a commit in `repo` without parents.
fn is_root(repo: &gix::Repository, id: ObjectId) -> bool {
    repo.find_commit(id)
        .is_ok_and(|commit| commit.parent_ids().next().is_none())
}
