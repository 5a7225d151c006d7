//! A round of a process that does not lead (DESIGN §9.4): it publishes its new writes as
//! pending refs for the leader, withdraws those past their deadline and deletes the answers it
//! read, in one push (answers alone wait for the next push, `sweep.rs`).

use std::time::{Duration, Instant};

use gitstate_core::StoreError;
use gix::ObjectId;

use super::queued::{busy, Outcome, PublishedWrite, QueuedWrite};
use super::round::{refuse_queue, Round};
use crate::pending::{self, pending_commit, Kind, Publication, QueueRefs, QUEUE_ROOT};
use crate::push::{pack_objects, push_updates, Pushed};
use crate::target::Target;
use gitstate_wire::sendpack::{ReceivePack, RefUpdate};

/// A round of a process that does not lead: publishes the batch's new writes, withdraws those
/// past their deadline and deletes the answers it read, in one push over `session` (none when
/// there is nothing to change).
pub(super) fn follow(
    store: &Target,
    session: ReceivePack,
    batch: &[(QueuedWrite, Option<PublishedWrite>)],
    mut updates: Vec<RefUpdate>,
    withdrawn: &[usize],
    mut outcomes: Vec<Option<Outcome>>,
    listing_empty: bool,
) -> Result<Round, StoreError> {
    let repo = store.cache()?.repo().with_object_memory();
    let refs = QueueRefs::new(store.state_ref());
    let mut publications = Vec::new();
    for (i, (write, published)) in batch.iter().enumerate() {
        if published.is_none() {
            let publication = publication(&repo, write, &store.committer)?;
            updates.push(RefUpdate {
                name: refs.name(Kind::Pending, &publication.id),
                old: ObjectId::null(gix::hash::Kind::Sha1),
                new: publication.commit,
            });
            publications.push((i, publication));
        }
    }
    let mut round = Round::waiting(batch);
    // Nothing older was pending: this batch's writes are (most likely) the oldest now, and
    // this process leads the next round.
    round.leads_next = !publications.is_empty() && listing_empty;
    if publications.is_empty() && withdrawn.is_empty() && !updates.is_empty() {
        // Only answers read are to be deleted: nobody waits for that. The deletes go with this
        // process's next push, or alone within a second (`sweep.rs`).
        round.cleanup = Some((session, updates));
        round.outcomes = outcomes
            .into_iter()
            .map(|o| o.unwrap_or(Outcome::Again))
            .collect();
        return Ok(round);
    }
    let objects = pack_objects(repo, &[], &[])?;
    if !updates.is_empty() {
        let push_started = Instant::now();
        let pushed = push_updates(store.endpoint(), session, &updates, &objects)?;
        round.pushing = push_started.elapsed();
        match pushed {
            Pushed::Accepted => {}
            Pushed::Lost => {
                // A withdrawn write was folded meanwhile (or an answer was deleted): all of it
                // goes again, but for the answers read (what the advertisement said holds).
                let mut lost = Round::lost(batch, true);
                for (slot, outcome) in lost.outcomes.iter_mut().zip(outcomes) {
                    if let Some(answer @ Outcome::Answer(_)) = outcome {
                        *slot = answer;
                    }
                }
                return Ok(lost);
            }
            Pushed::Refused { name, error } if name.starts_with(QUEUE_ROOT) => {
                refuse_queue(store.endpoint(), &error);
                return Ok(Round::lost(batch, false));
            }
            Pushed::Refused { error, .. } => return Err(error),
        }
    }
    if !publications.is_empty() {
        pending::crash_point("queue.published");
        store.cache()?.record_objects(&objects.objects)?;
    }
    for (i, publication) in publications {
        outcomes[i] = Some(Outcome::Queued(publication));
    }
    for &i in withdrawn {
        outcomes[i] = Some(Outcome::Answer(Err(busy(&batch[i].0))));
    }
    round.outcomes = outcomes
        .into_iter()
        .map(|o| o.unwrap_or(Outcome::Again))
        .collect();
    Ok(round)
}

/// Builds the pending commit of `write` in `repo` (in memory) under a new id.
fn publication(
    repo: &gix::Repository,
    write: &QueuedWrite,
    committer: &crate::objects::Committer,
) -> Result<PublishedWrite, StoreError> {
    let id = pending::new_id();
    let remaining = write.deadline.map_or(Duration::from_secs(30), |d| {
        d.saturating_duration_since(Instant::now())
    });
    let commit = pending_commit(
        repo,
        &Publication {
            id: &id,
            path: &write.path,
            base_file: write.base_file,
            lock_tip: write.lock_tip,
            change: &write.change,
            message: &write.message,
            deadline: std::time::SystemTime::now() + remaining,
        },
        committer,
    )?;
    Ok(PublishedWrite { id, commit })
}

/// Publishes `batch` (this process's new writes) as pending refs of the remote's queue
/// (DESIGN §9.4) over a new session: a [`follow`] round. Per write, its publication, or `None`
/// when the server did not take it (it stays this process's own).
pub(super) fn publish(
    store: &Target,
    batch: &[(QueuedWrite, Option<PublishedWrite>)],
) -> Result<Vec<Option<PublishedWrite>>, StoreError> {
    let session = crate::repeat::receive_pack(store.endpoint())?;
    let none = batch.iter().map(|_| None).collect();
    let round = follow(store, session, batch, Vec::new(), &[], none, false)?;
    Ok(round
        .outcomes
        .into_iter()
        .map(|outcome| match outcome {
            Outcome::Queued(published) => Some(published),
            _ => None,
        })
        .collect())
}
