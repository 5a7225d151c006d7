//! The history cache's fetch from a remote fetched partially (protocol v2 with `filter`, decided
//! on the first contact in `fetch.rs`): the whole first-parent history of the tips, commits and
//! trees only (`filter blob:none`, no depth, the tips the cache had as `have`s). A listing page,
//! a history and a read of an old version then fetch the blobs they read by id
//! ([`Cache::fetch_by_id`], [`Cache::ensure_files`]), so the cache never holds a state nobody
//! read (DESIGN §9.5).

use std::collections::HashMap;

use gitstate_core::StoreError;
use gix::ObjectId;

use super::{all_arrived, ref_matches, Cache};
use gitstate_wire::fetchpack::{FetchRequest, UploadPack};
use gitstate_wire::transport::Endpoint;

use crate::errors::from_wire;

impl Cache {
    /// Lists `names` (prefixes `prefixes`) and fetches the tips the history cache lacks without
    /// their blobs, over a kept protocol-v2 session or a new one (the remote fetches partially:
    /// `fetch.rs` decided it).
    pub(super) fn refresh_blobless(
        &self,
        endpoint: &Endpoint,
        names: &[&str],
        prefixes: &[&str],
    ) -> Result<HashMap<String, ObjectId>, StoreError> {
        self.with_session(endpoint, |session| {
            self.fetch_blobless(session, endpoint, names, prefixes)
        })
    }

    /// `ls-refs` for `prefixes` over `session`, then one fetch of the tips of `names` the cache
    /// lacks: every commit and tree the cache's tracking refs do not reach, no blob.
    fn fetch_blobless(
        &self,
        session: &mut UploadPack,
        endpoint: &Endpoint,
        names: &[&str],
        prefixes: &[&str],
    ) -> Result<HashMap<String, ObjectId>, StoreError> {
        let tips: HashMap<String, ObjectId> = session
            .ls_refs(prefixes)
            .map_err(from_wire)?
            .into_iter()
            .filter(|(name, _)| names.iter().any(|n| ref_matches(n, name.as_bytes().into())))
            .collect();
        let repo = self.repo();
        let mut wants: Vec<ObjectId> = tips
            .values()
            .filter(|id| !repo.has_object(*id))
            .copied()
            .collect();
        if wants.is_empty() {
            return Ok(tips);
        }
        wants.sort();
        wants.dedup();
        let _guard = self
            .write_lock
            .lock()
            .map_err(|_| StoreError::Internal("the cache lock is poisoned".into()))?;
        let haves = self.tracked_tips(&repo, &tips);
        let fetched = session
            .fetch(
                &FetchRequest {
                    wants,
                    haves,
                    filter: Some("blob:none".into()),
                    ..Default::default()
                },
                &self.pack_dir(),
                // Not thin: every tree of the history must arrive, and a delta whose base the
                // server misjudged would leave one out.
                None,
            )
            .map_err(from_wire)?;
        self.fetched_pack("history", fetched.pack.as_deref());
        // A fresh handle: it sees the pack just written.
        let repo = self.repo();
        all_arrived(&repo, endpoint, &tips)?;
        self.move_tracking_refs(&repo, &tips);
        Ok(tips)
    }
}
