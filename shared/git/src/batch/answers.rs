//! Step 1 of a round (DESIGN §9.4): what the listing of the remote's queue says of this
//! batch's published writes, and which answers nobody will read any more.

use std::collections::HashMap;
use std::time::Instant;

use gitstate_core::StoreError;
use gix::ObjectId;

use super::queued::{Outcome, PublishedWrite, QueuedWrite, MAX_BATCH_WRITES};
use crate::pending::{self, Kind, QueueRefs};
use gitstate_wire::sendpack::RefUpdate;

/// What the listing of the remote's queue says of this batch's published writes.
pub(super) struct Answers<'a> {
    /// Per write of the batch: its answer, when the listing gives one.
    pub(super) outcomes: Vec<Option<Outcome>>,
    /// The ref updates that go with this round's push: deletes of the answers read and of the
    /// writes withdrawn.
    pub(super) updates: Vec<RefUpdate>,
    /// Writes past their deadline, withdrawn from the queue in this round's push.
    pub(super) withdrawn: Vec<usize>,
    /// This batch's writes still pending: id → index in the batch.
    pub(super) own: HashMap<&'a str, usize>,
}

/// Step 1 of a round (DESIGN §9.4): `done` → the write's commit, `rejected` → `Stale`, still
/// pending → kept (or withdrawn past its deadline), gone without an answer → an error.
pub(super) fn read_answers<'a>(
    batch: &'a [(QueuedWrite, Option<PublishedWrite>)],
    listing: &pending::Listing,
    refs: &QueueRefs,
) -> Answers<'a> {
    let mut answers = Answers {
        outcomes: batch.iter().map(|_| None).collect(),
        updates: Vec::new(),
        withdrawn: Vec::new(),
        own: HashMap::new(),
    };
    let now = Instant::now();
    for (i, (write, published)) in batch.iter().enumerate() {
        let Some(p) = published else { continue };
        if let Some(commit) = listing.done.get(&p.id) {
            pending::crash_point("queue.answered");
            answers.outcomes[i] = Some(Outcome::Answer(Ok(commit.to_string())));
            answers
                .updates
                .push(delete(refs.name(Kind::Done, &p.id), *commit));
        } else if let Some(commit) = listing.rejected.get(&p.id) {
            answers.outcomes[i] = Some(Outcome::Answer(Err(StoreError::Stale)));
            answers
                .updates
                .push(delete(refs.name(Kind::Rejected, &p.id), *commit));
        } else if listing.pending.get(&p.id) == Some(&p.commit) {
            if write.deadline.is_some_and(|d| d <= now) {
                answers.withdrawn.push(i);
                answers
                    .updates
                    .push(delete(refs.name(Kind::Pending, &p.id), p.commit));
            } else {
                answers.own.insert(p.id.as_str(), i);
            }
        } else {
            answers.outcomes[i] = Some(Outcome::Answer(Err(StoreError::Remote(format!(
                "the write of {} left the remote's write queue ({}) without an answer",
                write.path,
                refs.name(Kind::Pending, &p.id)
            )))));
        }
    }
    answers
}

/// The deletes of answers nobody will read any more (their writer has read them, or is gone:
/// older than [`pending::ANSWER_KEPT`]), but those `updates` already delete; at most
/// [`MAX_BATCH_WRITES`] in one push.
pub(super) fn stale_answers(
    listing: &pending::Listing,
    refs: &QueueRefs,
    updates: &[RefUpdate],
) -> Vec<RefUpdate> {
    let answered: std::collections::HashSet<&str> =
        updates.iter().map(|u| u.name.as_str()).collect();
    let mut stale = Vec::new();
    for (kind, map) in [
        (Kind::Done, &listing.done),
        (Kind::Rejected, &listing.rejected),
    ] {
        for (id, commit) in map {
            let name = refs.name(kind, id);
            if !answered.contains(name.as_str()) && pending::older_than(id, pending::ANSWER_KEPT) {
                stale.push(delete(name, *commit));
            }
        }
    }
    stale.truncate(MAX_BATCH_WRITES);
    stale
}

/// The deletion of `name`, compare-and-swapped on `old`.
pub(super) fn delete(name: String, old: ObjectId) -> RefUpdate {
    RefUpdate {
        name,
        old,
        new: ObjectId::null(gix::hash::Kind::Sha1),
    }
}
