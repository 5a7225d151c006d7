//! The history cache's fetch from a remote that offers partial fetch (protocol v2 with `filter`):
//! the whole first-parent history of the tips, commits and trees only (`filter blob:none`, no
//! depth, the tips the cache had as `have`s). A listing page, a history and a read of an old
//! version then fetch the blobs they read by id ([`Cache::fetch_by_id`], [`Cache::ensure_files`]),
//! so the cache never holds a state nobody read (DESIGN §9.5).

use std::collections::HashMap;

use gitstate_core::StoreError;
use gix::ObjectId;

use super::mode::{set_fetch_mode, FetchMode};
use super::{all_arrived, ref_matches, Cache};
use crate::plumbing::fetchpack::{FetchRequest, UploadPack};
use crate::plumbing::sessions;
use crate::plumbing::transport::Endpoint;

impl Cache {
    /// Lists `names` (prefixes `prefixes`) and fetches the tips the history cache lacks without
    /// their blobs. `None` when the remote offers no `filter` (recorded: every cache of it then
    /// fetches whole trees), so the caller fetches whole.
    pub(super) fn refresh_blobless(
        &self,
        endpoint: &Endpoint,
        names: &[&str],
        prefixes: &[&str],
    ) -> Result<Option<HashMap<String, ObjectId>>, StoreError> {
        // A kept session (a request cache's) saves the capability advertisement; it may have
        // been closed by the server meanwhile.
        if let Some(mut session) = sessions::take(endpoint) {
            match self.fetch_blobless(&mut session, endpoint, names, prefixes) {
                Ok(tips) => {
                    sessions::keep(endpoint, session);
                    return Ok(Some(tips));
                }
                Err(e) => {
                    tracing::debug!(error = %e, "a kept protocol-v2 session failed; opening a new one")
                }
            }
        }
        let mut session = match UploadPack::connect(endpoint)? {
            Ok(session) if session.offers("filter") => session,
            Ok(session) => {
                session.finish();
                let why = "the server's protocol-v2 fetch offers no filter";
                set_fetch_mode(&endpoint.display, FetchMode::Whole, Some(&why));
                return Ok(None);
            }
            Err(why) => {
                set_fetch_mode(&endpoint.display, FetchMode::Whole, Some(&why));
                return Ok(None);
            }
        };
        let tips = self.fetch_blobless(&mut session, endpoint, names, prefixes)?;
        sessions::keep(endpoint, session);
        Ok(Some(tips))
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
            .ls_refs(prefixes)?
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
        let fetched = session.fetch(
            &FetchRequest {
                wants,
                haves,
                filter: Some("blob:none".into()),
                ..Default::default()
            },
            &self.pack_dir(),
        )?;
        self.fetched_pack("history", fetched.pack.as_deref());
        // A fresh handle: it sees the pack just written.
        let repo = self.repo();
        all_arrived(&repo, endpoint, &tips)?;
        self.move_tracking_refs(&repo, &tips);
        Ok(tips)
    }
}
