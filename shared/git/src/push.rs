//! Pushing: the objects a push carries, the push itself over an open receive-pack session or in
//! one request, and what the server's report means ([`Pushed`]). Knows the remote's endpoint,
//! nothing of stores, sessions or queues: the remote store and the write queue's rounds both
//! push through here.

use gitstate_core::StoreError;
use gix::objs::Kind;
use gix::ObjectId;

use crate::objects::internal;
use crate::plumbing::onepost;
use crate::plumbing::pack::write_pack;
use crate::plumbing::sendpack::{is_retryable, ReceivePack, RefResult, RefUpdate, Report};
use crate::plumbing::transport::Endpoint;

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
pub fn pack_objects(
    mut repo: gix::Repository,
    commits: &[(ObjectId, &str)],
    on_remote: &[ObjectId],
) -> Result<Vec<(ObjectId, Kind, Vec<u8>)>, StoreError> {
    let mut path_ids = Vec::new();
    for (commit, file) in commits {
        path_ids.push(*commit);
        let c = repo
            .find_commit(*commit)
            .map_err(internal("reading the new commit"))?;
        let tree = c.tree().map_err(internal("reading the new tree"))?;
        path_ids.push(tree.id);
        let segments: Vec<&str> = file.split('/').collect();
        for end in 1..=segments.len() {
            let prefix = segments[..end].join("/");
            if let Some(entry) = tree
                .lookup_entry_by_path(&prefix)
                .map_err(internal("looking up a path"))?
            {
                path_ids.push(entry.object_id());
            }
        }
    }
    let memory = repo.objects.take_object_memory().unwrap_or_default();
    let mut objects: Vec<(ObjectId, Kind, Vec<u8>)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
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
    Ok(objects)
}

/// Pushes `updates` (atomically where the server offers it) with a pack of `objects`
/// (none when every update is a delete) and returns the server's report.
pub fn push_report(
    session: ReceivePack,
    updates: &[RefUpdate],
    objects: &[(ObjectId, Kind, Vec<u8>)],
) -> Result<Report, StoreError> {
    let pack = write_pack(objects).map_err(StoreError::Internal)?;
    session.push(updates, &pack)
}

/// Pushes `updates` (see [`push_report`]) and judges the report. A push of
/// several updates is sent only where the server offers `atomic`: then it is all or nothing.
pub fn push_updates(
    endpoint: &Endpoint,
    session: ReceivePack,
    updates: &[RefUpdate],
    objects: &[(ObjectId, Kind, Vec<u8>)],
) -> Result<Pushed, StoreError> {
    let report = push_report(session, updates, objects)?;
    judge(endpoint, updates, report)
}

/// Pushes `update` in one request (see [`onepost`]): `None` when that could not be tried or
/// brought no report, and the caller goes the usual way.
pub fn push_in_one_request(
    endpoint: &Endpoint,
    update: &RefUpdate,
    objects: &[(ObjectId, Kind, Vec<u8>)],
) -> Option<Result<Pushed, StoreError>> {
    let pack = if update.new.is_null() {
        Vec::new()
    } else {
        write_pack(objects).ok()?
    };
    let report = onepost::push(endpoint, std::slice::from_ref(update), &pack)?;
    Some(judge(endpoint, std::slice::from_ref(update), report))
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
