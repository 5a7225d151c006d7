//! A LOCK on a remote: the lock branch created by a push whose expected old id is none, only where
//! a state could ever be written at its path (DESIGN §3; the rule: [`PathConflict`]).
//!
//! Warm, over smart HTTP to git's own receive-pack, that is one request: the push of the lock,
//! asserting in the same atomic transaction that the state branch is still at the tip this cache
//! recorded, whose trees on the path (in the cache) admit a state there (tried once more when the
//! cache recorded a newer tip meanwhile, as this process's own writes make it). git itself refuses
//! a lock branch named like a folder of another one, or like a folder of others. Otherwise, and
//! after any push that was not accepted, receive-pack's advertisement decides: the lock branch
//! itself (held), the lock branches above and below the path it lists, the trees on the path at
//! the state tip it lists (from the cache, or fetched as the read of the path that follows a LOCK
//! would fetch them), and then the push over that session.

use std::collections::HashMap;

use gitstate_core::Message;
use gitstate_core::{LockCreate, PathConflict, StatePath, StoreError};
use gix::ObjectId;

use super::{Outgoing, RemoteStore};
use crate::objects::{lock_commit, path_conflict};
use crate::push::{judge, Pushed};
use gitstate_wire::onepost;
use gitstate_wire::sendpack::{ReceivePack, RefUpdate};

/// Advertisements a LOCK reads at most: a push lost to a lock taken meanwhile (on the path, above
/// or below it) is decided on the next one; a lock that keeps coming and going is a
/// [`StoreError::Stale`].
const MAX_ADVERTISEMENTS: usize = 3;

/// One-request pushes a LOCK tries at most. A try is refused when the state branch moved since
/// the tip it asserts; most often, under many writers in one process, this process's own write
/// queue moved it meanwhile, and then the cache has recorded the new tip by the time the refusal
/// comes back: one more try asserts that tip. A try is never repeated on the same tip.
const ONE_REQUEST_TRIES: usize = 2;

impl RemoteStore {
    /// [`gitstate_core::StateStore::create_lock`] on the remote (see the module documentation).
    pub(super) fn create_lock_on_remote(
        &self,
        path: &StatePath,
        content: &[u8],
        message: &Message,
    ) -> Result<LockCreate, StoreError> {
        let lock_ref = path.lock_ref();
        let lock_file = path.lock_file();
        let outgoing = self.build(None, &lock_file, |repo| {
            lock_commit(repo, &lock_file, content, message, &self.target.committer)
        })?;
        let update = RefUpdate {
            name: lock_ref.clone(),
            old: ObjectId::null(gix::hash::Kind::Sha1),
            new: outgoing.commit,
        };
        let mut asserted = None;
        for _ in 0..ONE_REQUEST_TRIES {
            let Some(tip) = self.recorded_tip_admitting(path)? else {
                break;
            };
            if asserted == Some(tip) {
                break; // nothing newer learned since the refused try
            }
            asserted = Some(tip);
            let updates = [
                update.clone(),
                RefUpdate {
                    name: self.target.state_ref.clone(),
                    old: tip,
                    new: tip,
                },
            ];
            if self.pushed_in_one_request(&updates, &outgoing)? {
                return self.lock_created(&lock_ref, &outgoing);
            }
        }
        for _ in 0..MAX_ADVERTISEMENTS {
            let session = crate::repeat::receive_pack(&self.target.endpoint)?;
            if let Some(tip) = session.tip(&lock_ref) {
                drop(session);
                return self.held_at(path, tip);
            }
            if let Some(conflict) = self.unwritable(&session, path)? {
                return Ok(LockCreate::Unwritable(conflict));
            }
            if self.push_one(session, update.clone(), Some(&outgoing))? {
                return self.lock_created(&lock_ref, &outgoing);
            }
            // Lost: the lock was taken meanwhile, or one above or below it (git refuses those
            // with the words of a lost compare-and-swap): the next advertisement says which.
        }
        Err(StoreError::Stale)
    }

    /// The state tip this cache recorded, when a LOCK of `path` can go in one request asserting
    /// it: git's receive-pack offering `atomic` over smart HTTP, the lock not last seen held, the
    /// trees on the path at that tip in the cache, and no [`PathConflict`] in them. `None`
    /// otherwise (a conflict there is decided on a fresh read, never on the cache).
    fn recorded_tip_admitting(&self, path: &StatePath) -> Result<Option<ObjectId>, StoreError> {
        if !onepost::asserts_unchanged_refs(&self.target.endpoint) {
            return Ok(None);
        }
        let cache = self.cache()?;
        if cache.tracked(&path.lock_ref()).is_some() {
            return Ok(None);
        }
        let Some(tip) = cache.tracked_when_written(&self.target.state_ref) else {
            return Ok(None);
        };
        // A tree the cache lacks is an error here: then the advertisement's way fetches it.
        Ok(matches!(path_conflict(&cache.repo(), tip, path), Ok(None)).then_some(tip))
    }

    /// Pushes `updates` with the lock commit in one request; whether the server took them all.
    fn pushed_in_one_request(
        &self,
        updates: &[RefUpdate],
        outgoing: &Outgoing,
    ) -> Result<bool, StoreError> {
        let endpoint = &self.target.endpoint;
        let bytes =
            gitstate_wire::pack::write_pack(&outgoing.pack, onepost::takes_thin_packs(endpoint))
                .map_err(StoreError::Internal)?;
        Ok(match onepost::push(endpoint, updates, &bytes) {
            Some(report) => matches!(judge(endpoint, updates, report), Ok(Pushed::Accepted)),
            None => false,
        })
    }

    /// What keeps a lock off `path`, as `session` advertised the refs: a lock branch above or
    /// below it, else what the state branch's tree holds on the path at the advertised tip.
    fn unwritable(
        &self,
        session: &ReceivePack,
        path: &StatePath,
    ) -> Result<Option<PathConflict>, StoreError> {
        let ancestors: Vec<(&str, String)> = path
            .ancestors()
            .map(|above| (above, format!("{}{above}", crate::LOCK_REF_PREFIX)))
            .collect();
        let below = format!("{}/", path.lock_ref());
        let locked = ancestors
            .iter()
            .filter(|(_, name)| session.tip(name).is_some())
            .map(|(above, _)| *above)
            .chain(
                session
                    .refs_under(&below)
                    .filter_map(|(name, _)| name.strip_prefix(crate::LOCK_REF_PREFIX)),
            );
        if let Some(conflict) = PathConflict::among_locks(path, locked) {
            return Ok(Some(conflict));
        }
        match session.tip(&self.target.state_ref) {
            Some(advertised) => match self.trees_on_path(path, advertised)? {
                Some(tip) => path_conflict(&self.cache()?.repo(), tip, path),
                None => Ok(None),
            },
            None => Ok(None),
        }
    }

    /// Makes the state tip `advertised` and the trees on `path` at it present in the cache,
    /// fetching what lacks as a read of the path would. Returns the tip they are at: a newer one
    /// when the cache had to list the refs again (another writer moved the branch in between),
    /// `None` when the branch is gone.
    fn trees_on_path(
        &self,
        path: &StatePath,
        advertised: ObjectId,
    ) -> Result<Option<ObjectId>, StoreError> {
        let cache = self.cache()?;
        let endpoint = &self.target.endpoint;
        let state_ref = &self.target.state_ref;
        let mut tip = Some(advertised);
        if !cache.repo().has_object(advertised) {
            let advertised = HashMap::from([(state_ref.clone(), advertised)]);
            if !cache.fetch_advertised(endpoint, &advertised)? {
                tip = cache
                    .refresh(endpoint, &[state_ref])?
                    .get(state_ref)
                    .copied();
            }
        }
        if let Some(tip) = tip {
            cache.ensure_paths(endpoint, &[(tip, path.as_str())], false)?;
        }
        Ok(tip)
    }

    /// The lock held on `path` at `tip` (advertised): its commit and lock file fetched by id
    /// where the cache lacks them, else read fresh.
    fn held_at(&self, path: &StatePath, tip: ObjectId) -> Result<LockCreate, StoreError> {
        let advertised = HashMap::from([(path.lock_ref(), tip)]);
        if !self
            .cache()?
            .fetch_locks_advertised(&self.target.endpoint, &advertised)?
        {
            return self.held(path);
        }
        Ok(LockCreate::Held {
            tip: tip.to_string(),
            content: self.read(Some(tip), &path.lock_file())?.unwrap_or_default(),
        })
    }

    /// Records the lock this process created (its push accepted).
    fn lock_created(&self, lock_ref: &str, outgoing: &Outgoing) -> Result<LockCreate, StoreError> {
        self.cache()?
            .record_pushed(&outgoing.pack.objects, lock_ref, Some(outgoing.commit))?;
        Ok(LockCreate::Created)
    }
}
