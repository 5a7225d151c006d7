//! The record of what this process pushed: the objects the remote accepted go into the cache
//! (in dependency order, so a reader never finds a commit before its trees) and the tracking
//! ref moves, so that the next request needs no fetch.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use gitstate_core::StoreError;
use gix::refs::transaction::{Change, LogChange, PreviousValue, RefEdit, RefLog};
use gix::refs::Target;
use gix::ObjectId;

use super::{tracking_ref, Cache};
use crate::objects::internal;

impl Cache {
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
pub(super) fn write_objects(
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
            // 4-5 ms slower per LOCK (three small objects; 2026-11-25, in docs/BENCHMARKS.md's
            // git history) than the ~1 ms of SHA-1 it saves on a 1 MiB state, which is spent
            // after the answer.
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
