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
use crate::repeat::{receive_pack, Repeats, Step};
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
///
/// When the connection broke before the report came, the push may have been made or not: the
/// next advertisement tells ([`outcome`]). Made: accepted. Not made, the refs where they were:
/// pushed again on that advertisement's session, within the repeats allowed
/// ([`Repeats::again`]). Refs moved by someone else: lost, as a compare-and-swap lost (the
/// caller decides again on a fresh read; a write already on the branch is then a replay).
pub fn push_updates(
    endpoint: &Endpoint,
    session: ReceivePack,
    updates: &[RefUpdate],
    pack: &Pack,
) -> Result<Pushed, StoreError> {
    let mut repeats = Repeats::new(endpoint.timeout);
    let mut session = session;
    loop {
        let broke = match push_report(session, updates, pack) {
            Err(StoreError::Unavailable(why)) => why,
            report => return judge(endpoint, updates, report?),
        };
        let next = receive_pack(endpoint)?;
        match outcome(&next, updates) {
            Outcome::Made => {
                tracing::info!(error = %broke, "the connection broke before the push result came; the refs show the push was made");
                return Ok(Pushed::Accepted);
            }
            Outcome::Moved => return Ok(Pushed::Lost),
            Outcome::NotMade if repeats.again(Step::Push, &broke) => session = next,
            Outcome::NotMade => return Err(StoreError::Unavailable(broke)),
        }
    }
}

/// What the remote's refs, `advertised` after a push of `updates` whose result never came, say
/// of it.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// Made: a ref is at the new id this push gave it (an id no other push gives: a new
    /// commit, or the very lock commit of a retry of the same LOCK, DESIGN §3), or every ref is
    /// where the push was to put it.
    Made,
    /// Not made: every ref is where it was.
    NotMade,
    /// Not made, and someone else moved a ref meanwhile.
    Moved,
}

fn outcome(advertised: &ReceivePack, updates: &[RefUpdate]) -> Outcome {
    outcome_of(|name| advertised.tip(name), updates)
}

/// [`outcome`] with the refs' tips given by `tip`.
fn outcome_of(tip: impl Fn(&str) -> Option<ObjectId>, updates: &[RefUpdate]) -> Outcome {
    let at = |u: &RefUpdate, id: ObjectId| tip(&u.name) == (!id.is_null()).then_some(id);
    let moved_to_its_new_id = updates
        .iter()
        .any(|u| !u.new.is_null() && u.new != u.old && at(u, u.new));
    if moved_to_its_new_id || updates.iter().all(|u| at(u, u.new)) {
        Outcome::Made
    } else if updates.iter().all(|u| at(u, u.old)) {
        Outcome::NotMade
    } else {
        Outcome::Moved
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> ObjectId {
        ObjectId::from_bytes_or_panic(&[n; 20])
    }

    fn null() -> ObjectId {
        ObjectId::null(gix::hash::Kind::Sha1)
    }

    fn update(name: &str, old: ObjectId, new: ObjectId) -> RefUpdate {
        RefUpdate {
            name: name.into(),
            old,
            new,
        }
    }

    fn tips<'a>(refs: &'a [(&'a str, ObjectId)]) -> impl Fn(&str) -> Option<ObjectId> + 'a {
        move |name| refs.iter().find(|(n, _)| *n == name).map(|(_, id)| *id)
    }

    #[test]
    fn the_refs_after_a_broken_push_tell_whether_it_was_made() {
        let write = [
            update("refs/heads/main", id(1), id(2)),
            update("refs/heads/pending/a", id(7), null()),
        ];
        // Made, even when someone deleted the other ref since.
        assert_eq!(
            outcome_of(tips(&[("refs/heads/main", id(2))]), &write),
            Outcome::Made
        );
        assert_eq!(
            outcome_of(
                tips(&[("refs/heads/main", id(1)), ("refs/heads/pending/a", id(7))]),
                &write
            ),
            Outcome::NotMade
        );
        // Someone else's commit on the branch: not this push's.
        assert_eq!(
            outcome_of(
                tips(&[("refs/heads/main", id(3)), ("refs/heads/pending/a", id(7))]),
                &write
            ),
            Outcome::Moved
        );

        // A lock taken (created) and released (deleted).
        let take = [update("refs/heads/locks/a", null(), id(5))];
        assert_eq!(
            outcome_of(tips(&[("refs/heads/locks/a", id(5))]), &take),
            Outcome::Made
        );
        assert_eq!(outcome_of(tips(&[]), &take), Outcome::NotMade);
        assert_eq!(
            outcome_of(tips(&[("refs/heads/locks/a", id(6))]), &take),
            Outcome::Moved
        );
        let release = [update("refs/heads/locks/a", id(5), null())];
        assert_eq!(outcome_of(tips(&[]), &release), Outcome::Made);
        assert_eq!(
            outcome_of(tips(&[("refs/heads/locks/a", id(5))]), &release),
            Outcome::NotMade
        );

        // A ref only asserted unchanged (old = new) proves nothing made.
        let asserted = [
            update("refs/heads/main", id(1), id(2)),
            update("refs/heads/locks/a", id(5), id(5)),
        ];
        assert_eq!(
            outcome_of(
                tips(&[("refs/heads/main", id(1)), ("refs/heads/locks/a", id(5))]),
                &asserted
            ),
            Outcome::NotMade
        );
    }
}
