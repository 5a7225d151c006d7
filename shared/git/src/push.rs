//! Pushing: the objects a push carries, the push itself over an open receive-pack session or in
//! one request, and what the server's report means ([`Pushed`]). Knows the remote's endpoint
//! and the receive-pack session it is given, nothing of stores, attempts or queues: the remote
//! store and the write queue's rounds both push through here.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use gitstate_core::StoreError;
use gix::objs::Kind;
use gix::ObjectId;

use crate::errors::from_wire;
use crate::objects::internal;
use gitstate_wire::onepost;
use gitstate_wire::pack::{write_pack, Delta, Pack};
use gitstate_wire::sendpack::{is_retryable, ReceivePack, RefResult, RefUpdate, Report};
use gitstate_wire::transport::Endpoint;

/// How the server answered a push.
pub enum Pushed {
    /// Every update was made.
    Accepted,
    /// A compare-and-swap was lost: nothing was made.
    Lost,
    /// The server refused an update for another reason (a hook, a protected ref).
    Refused {
        /// The ref it refused.
        name: String,
        /// Which and why, in a sentence.
        error: StoreError,
    },
}

/// The objects a push of `commits` (each with the file it changed) must carry: every object
/// `repo` holds in memory (built for the push), plus each commit's tree and every object on
/// its changed path, in case the cache still holds an object the remote has since dropped;
/// except the blobs `on_remote` that the cache lacks (pending writes' blobs, DESIGN §9.4:
/// the remote holds them, reachable from the pending refs this push deletes).
///
/// Each tree on a changed path, and the file, may travel as a delta against the object at the
/// same path in the commit's parent: the remote has it (the parent is the remote's tip, or a
/// commit of this push). One changed entry in a folder of thousands of states then costs a few
/// dozen bytes, not the folder's whole tree ([`Pack::deltas`]).
pub fn pack_objects(
    mut repo: gix::Repository,
    commits: &[(ObjectId, &str)],
    on_remote: &[ObjectId],
) -> Result<Pack, StoreError> {
    let mut path_ids = Vec::new();
    // (an object on a changed path, the object at its path in the parent commit)
    let mut pairs = Vec::new();
    for (commit, file) in commits {
        path_ids.push(*commit);
        let c = repo
            .find_commit(*commit)
            .map_err(internal("reading the new commit"))?;
        let tree = c.tree().map_err(internal("reading the new tree"))?;
        let parent_tree = c
            .parent_ids()
            .next()
            .and_then(|parent| repo.find_commit(parent).ok()?.tree().ok());
        path_ids.push(tree.id);
        if let Some(parent_tree) = &parent_tree {
            pairs.push((tree.id, parent_tree.id));
        }
        let segments: Vec<&str> = file.split('/').collect();
        for end in 1..=segments.len() {
            let prefix = segments[..end].join("/");
            let Some(entry) = tree
                .lookup_entry_by_path(&prefix)
                .map_err(internal("looking up a path"))?
            else {
                continue;
            };
            path_ids.push(entry.object_id());
            // The write made the parent's trees on the path present; a path the parent lacks
            // has no base.
            if let Some(Ok(Some(old))) = parent_tree
                .as_ref()
                .map(|t| t.lookup_entry_by_path(&prefix))
            {
                pairs.push((entry.object_id(), old.object_id()));
            }
        }
    }
    let memory = repo.objects.take_object_memory().unwrap_or_default();
    let mut objects: Vec<(ObjectId, Kind, Vec<u8>)> = Vec::new();
    let mut seen = HashSet::new();
    for (id, (kind, data)) in memory.iter() {
        if seen.insert(*id) {
            objects.push((*id, *kind, data.clone()));
        }
    }
    for id in path_ids {
        if !seen.insert(id) || (on_remote.contains(&id) && !repo.has_object(id)) {
            continue;
        }
        let object = repo
            .find_object(id)
            .map_err(internal("reading an object for the pack"))?;
        objects.push((id, object.kind, object.data.clone()));
    }
    let deltas = deltas(&repo, &objects, &pairs);
    Ok(Pack { objects, deltas })
}

/// The deltas worth sending for `pairs` (an object of the pack, its base): a base in the pack or
/// the cache, of the same kind, and a delta of less than half the object.
fn deltas(
    repo: &gix::Repository,
    objects: &[(ObjectId, Kind, Vec<u8>)],
    pairs: &[(ObjectId, ObjectId)],
) -> HashMap<ObjectId, Delta> {
    /// Smaller objects go whole: a delta would save next to nothing.
    const MIN_DELTA_BYTES: usize = 512;
    let in_pack: HashMap<ObjectId, (Kind, &[u8])> = objects
        .iter()
        .map(|(id, kind, data)| (*id, (*kind, data.as_slice())))
        .collect();
    let mut deltas = HashMap::new();
    for (id, base) in pairs {
        let Some((kind, data)) = in_pack.get(id) else {
            continue;
        };
        if id == base || data.len() < MIN_DELTA_BYTES || deltas.contains_key(id) {
            continue;
        }
        let base_data: Option<Cow<'_, [u8]>> = match in_pack.get(base) {
            Some((base_kind, base_data)) => {
                (base_kind == kind).then_some(Cow::Borrowed(*base_data))
            }
            None => repo
                .find_object(*base)
                .ok()
                .filter(|o| o.kind == *kind)
                .map(|o| Cow::Owned(o.data.clone())),
        };
        let Some(base_data) = base_data else { continue };
        let delta = gitstate_wire::delta::encode(&base_data, data);
        if delta.len() < data.len() / 2 {
            deltas.insert(
                *id,
                Delta {
                    base: *base,
                    data: delta,
                },
            );
        }
    }
    deltas
}

/// Pushes `updates` (atomically where the server offers it) with `pack` (none when every update
/// is a delete), thin unless the server says `no-thin`, and returns the server's report.
pub fn push_report(
    session: ReceivePack,
    updates: &[RefUpdate],
    pack: &Pack,
) -> Result<Report, StoreError> {
    let bytes = write_pack(pack, !session.offers("no-thin")).map_err(StoreError::Internal)?;
    session.push(updates, &bytes).map_err(from_wire)
}

/// Pushes `updates` (see [`push_report`]) and judges the report. A push of
/// several updates is sent only where the server offers `atomic`: then it is all or nothing.
pub fn push_updates(
    endpoint: &Endpoint,
    session: ReceivePack,
    updates: &[RefUpdate],
    pack: &Pack,
) -> Result<Pushed, StoreError> {
    let report = push_report(session, updates, pack)?;
    judge(endpoint, updates, report)
}

/// Pushes `updates` in one request (see [`onepost`]), thin where the server takes thin packs,
/// no pack when every update is a delete: `Ok(true)` when the server made every update,
/// `Ok(false)` when it could not be tried, brought no report or was not taken (the caller then
/// decides again the usual way); an error only when the pack cannot be written. The one
/// single-request push of a held write and of a release.
pub fn push_in_one_request(
    endpoint: &Endpoint,
    updates: &[RefUpdate],
    pack: &Pack,
) -> Result<bool, StoreError> {
    let bytes = if updates.iter().all(|u| u.new.is_null()) {
        Vec::new()
    } else {
        write_pack(pack, onepost::takes_thin_packs(endpoint)).map_err(StoreError::Internal)?
    };
    Ok(match onepost::push(endpoint, updates, &bytes) {
        Some(report) => matches!(judge(endpoint, updates, report), Ok(Pushed::Accepted)),
        None => false,
    })
}

/// What the server's `report` to a push of `updates` means.
pub fn judge(
    endpoint: &Endpoint,
    updates: &[RefUpdate],
    report: Report,
) -> Result<Pushed, StoreError> {
    let remote = |what: String| StoreError::Remote(endpoint.scrub(&what));
    let rejected: Vec<(&str, String)> = updates
        .iter()
        .filter_map(|u| match report.result(&u.name) {
            RefResult::Ok => None,
            RefResult::Rejected(reason) => Some((u.name.as_str(), reason)),
        })
        .collect();
    let lost = !rejected.is_empty() && rejected.iter().all(|(_, r)| is_retryable(r));
    if let Err(e) = &report.unpack {
        // A refused ref also makes some servers report the unpack as failed; the ref's
        // reason is the better explanation then.
        if lost {
            return Ok(Pushed::Lost);
        }
        return Err(remote(format!(
            "{} could not unpack the pushed objects: {e} {}",
            endpoint.display,
            report.messages.trim()
        )));
    }
    if lost {
        tracing::debug!(refused = ?rejected, detail = %report.messages.trim(), "push lost a compare-and-swap");
        return Ok(Pushed::Lost);
    }
    match rejected.iter().find(|(_, r)| !is_retryable(r)) {
        None => Ok(Pushed::Accepted),
        Some((name, reason)) => Ok(Pushed::Refused {
            name: (*name).to_owned(),
            error: remote(format!(
                "{} refused the update of {name}: {reason} {}",
                endpoint.display,
                report.messages.trim()
            )),
        }),
    }
}
