//! One round of the write queue (DESIGN §9.4): read the remote's queue, answer this
//! process's published writes, then lead (fold every process's pending writes and this batch's
//! new ones into one chain, one atomic push) or follow (publish the new writes for the leader).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use gitstate_core::{Revision, StatePath, StoreError};
use gix::ObjectId;

use super::answers::{delete, read_answers, stale_answers, Answers};
use super::write::{busy, Outcome, Published, QueuedWrite, MAX_BATCH_WRITES};
use crate::objects::{entry_id, file_commit, FileChange};
use crate::pending::{
    self, pending_commit, read_pending, Kind, PendingWrite, Publication, QueueRefs, QUEUE_ROOT,
};
use crate::plumbing::sendpack::{ReceivePack, RefUpdate};
use crate::plumbing::transport::Endpoint;
use crate::push::{pack_objects, push_updates, Pushed};
use crate::target::Target;

/// What one round (one push attempt) did.
pub(crate) struct Round {
    /// Per write of the batch.
    pub(super) outcomes: Vec<Outcome>,
    /// The branch tip the round built on.
    pub(super) base: Option<ObjectId>,
    /// The tip pushed (`None`: the branch was not moved).
    pub(super) tip: Option<ObjectId>,
    /// The push lost a compare-and-swap: nothing was written.
    pub(super) lost: bool,
    /// The remote keeps a queue of pending refs (DESIGN §9.4).
    pub(super) queue: bool,
    /// Pending writes of other processes folded into the branch.
    pub(super) folded: usize,
    /// Commits the push added to the branch (0: it did not move).
    pub(super) commits: usize,
    /// This process tried to move the branch (it led, DESIGN §9.4).
    pub(super) led: bool,
    /// This process's writes are the oldest in the remote's queue: it leads the next round.
    pub(super) leads_next: bool,
    /// Time spent fetching (pending writes, a tip pushed by another process) and pushing.
    pub(super) fetching: Duration,
    pub(super) pushing: Duration,
    /// Deletes of answers read, to push once the writers are answered.
    pub(super) cleanup: Option<(ReceivePack, Vec<RefUpdate>)>,
}

/// A pending write read in this round, and who it belongs to.
struct Foreign {
    id: String,
    advertised: ObjectId,
    /// `Err`: malformed (rejected, never folded).
    write: Result<PendingWrite, String>,
    /// The batch entry it belongs to, when it is this process's own.
    own: Option<usize>,
}

/// What the round decided for one pending write.
enum Fold {
    Folded(ObjectId),
    Rejected,
}

/// One round (blocking): the tips and queue refs from `session` (or a fresh one); answers of
/// this process's published writes; then the chain, oldest first: pending writes of every
/// process (folded or rejected, DESIGN §9.4), then this batch's own new writes, each checked
/// against its own conditions; one push, atomic where the remote keeps a queue.
pub(super) fn push_batch(
    store: &Target,
    session: Option<ReceivePack>,
    batch: &[(QueuedWrite, Option<Published>)],
    takeover: Duration,
    contended: bool,
) -> Result<Round, StoreError> {
    let session = match session {
        Some(session) => session,
        None => ReceivePack::connect(store.endpoint())?,
    };
    let state_ref = store.state_ref().to_owned();
    let cache = store.cache()?;
    let refs = QueueRefs::new(&state_ref);
    let queue = session.offers("atomic")
        && session.offers("delete-refs")
        && cache.fetches_by_id(store.endpoint())
        && !queue_refused(store.endpoint());
    // This process's published writes learn their answer here even when it stopped using
    // the queue meanwhile.
    let listing = if queue || batch.iter().any(|(_, p)| p.is_some()) {
        refs.classify(session.refs_under(refs.prefix()))
    } else {
        Default::default()
    };
    let zero = ObjectId::null(gix::hash::Kind::Sha1);
    if queue {
        metrics::histogram!(gitstate_core::metrics::QUEUE_PENDING)
            .record(listing.pending.len() as f64);
    }
    if !listing.pending.is_empty() {
        pending::crash_point("queue.listed");
    }
    let Answers {
        mut outcomes,
        mut updates,
        withdrawn,
        own,
    } = read_answers(batch, &listing, &refs);

    let local = batch.iter().filter(|(_, p)| p.is_none()).count();
    if queue && !leads(&listing, &own, takeover, contended) {
        // Another process's write is older: it pushes, folding this batch's writes, which
        // are published for it here (DESIGN §9.4).
        let listing_empty = listing.pending.is_empty();
        return follow(
            store,
            session,
            batch,
            updates,
            &withdrawn,
            outcomes,
            listing_empty,
        );
    }

    // Pending writes to fold, oldest first: this process's own and (room permitting) others'.
    let mut room = MAX_BATCH_WRITES.saturating_sub(local + own.len());
    let mut chosen: Vec<(String, ObjectId, Option<usize>)> = Vec::new();
    for (id, commit) in &listing.pending {
        if let Some(&i) = own.get(id.as_str()) {
            chosen.push((id.clone(), *commit, Some(i)));
        } else if !withdrawn_id(batch, &withdrawn, id) && room > 0 {
            room -= 1;
            chosen.push((id.clone(), *commit, None));
        }
    }
    let fetch_started = Instant::now();
    let mut tip = session.tip(&state_ref);
    fetch_for_fold(store, tip, &mut chosen)?;
    let repo = cache.repo().with_object_memory();
    let pending: Vec<Foreign> = chosen
        .into_iter()
        .map(|(id, advertised, own)| Foreign {
            write: read_pending(&repo, &id, advertised),
            id,
            advertised,
            own,
        })
        .collect();

    if tip.is_some_and(|t| !repo.has_object(t)) {
        // Another process wrote: fetch (shallow). A newer tip than advertised is fine:
        // receive-pack compares with the ref's value when it updates it.
        tip = cache
            .refresh(store.endpoint(), &[&state_ref])?
            .get(&state_ref)
            .copied();
        if tip.is_some_and(|t| !repo.has_object(t)) || (queue && tip != session.tip(&state_ref)) {
            // The branch moved since the advertisement, and with it the queue: its listing
            // may name writes already folded.
            return Ok(Round::lost(batch, queue));
        }
    }
    let fetching = fetch_started.elapsed();
    if !pending.is_empty() {
        pending::crash_point("queue.fetched");
    }
    let mut chain = tip;
    let mut commits: Vec<(ObjectId, String)> = Vec::new();
    // One write onto the chain (when its conditions hold), recorded for the pack.
    let mut add = |conditions: &Conditions<'_>, change: FileChange<'_>, message: &str| {
        let made = extend(&repo, &session, &mut chain, conditions, change, message)?;
        if let Ok(commit) = &made {
            commits.push((*commit, conditions.path.as_str().to_owned()));
        }
        Ok::<_, StoreError>(made)
    };
    let mut folds: Vec<Fold> = Vec::with_capacity(pending.len());
    // The blobs of the folded writes: on the remote, maybe not in the cache.
    let mut on_remote: Vec<ObjectId> = Vec::new();
    for foreign in &pending {
        let fold = match &foreign.write {
            Err(why) => {
                tracing::warn!(id = %foreign.id, %why, "a malformed pending write is rejected");
                Fold::Rejected
            }
            Ok(write) if pending::expired(write) => {
                tracing::info!(path = %write.path, id = %foreign.id, "a pending write expired before anyone folded it");
                Fold::Rejected
            }
            Ok(write) => {
                let change = match write.blob {
                    Some(blob) => {
                        on_remote.push(blob);
                        FileChange::Blob(blob)
                    }
                    None => FileChange::Remove,
                };
                let conditions = Conditions {
                    path: &write.path,
                    base_file: write.base_file,
                    lock_tip: write.lock_tip,
                };
                match add(&conditions, change, &write.message)? {
                    Ok(commit) => Fold::Folded(commit),
                    Err(_) => Fold::Rejected,
                }
            }
        };
        let name = refs.name(Kind::Pending, &foreign.id);
        updates.push(delete(name, foreign.advertised));
        if foreign.own.is_none() {
            let (kind, target) = match fold {
                Fold::Folded(commit) => (Kind::Done, commit),
                Fold::Rejected => (Kind::Rejected, foreign.advertised),
            };
            updates.push(RefUpdate {
                name: refs.name(kind, &foreign.id),
                old: zero,
                new: target,
            });
        }
        folds.push(fold);
    }
    let mut results: Vec<(usize, Result<Revision, StoreError>)> = Vec::new();
    for (i, (write, published)) in batch.iter().enumerate() {
        if published.is_some() {
            continue;
        }
        let conditions = Conditions {
            path: &write.path,
            base_file: write.base_file,
            lock_tip: write.lock_tip,
        };
        let made = add(&conditions, (&write.change).into(), &write.message)?;
        results.push((i, made.map(|commit| commit.to_string())));
    }
    if queue {
        let stale = stale_answers(&listing, &refs, &updates);
        updates.extend(stale);
    }

    let new_tip = chain.filter(|_| !commits.is_empty());
    if new_tip.is_some() {
        updates.insert(
            0,
            RefUpdate {
                name: state_ref.clone(),
                old: tip.unwrap_or(zero),
                new: chain.unwrap_or(zero),
            },
        );
    }
    let mut round = Round {
        outcomes: Vec::new(),
        base: tip,
        tip: new_tip,
        lost: false,
        queue,
        folded: 0,
        commits: if new_tip.is_some() { commits.len() } else { 0 },
        led: true,
        leads_next: false,
        fetching,
        pushing: Duration::ZERO,
        cleanup: None,
    };
    let objects = if updates.is_empty() {
        Vec::new()
    } else {
        let paths: Vec<(ObjectId, &str)> = commits.iter().map(|(c, p)| (*c, p.as_str())).collect();
        let objects = pack_objects(repo, &paths, &on_remote)?;
        let queue_refs = updates.len() > usize::from(new_tip.is_some());
        let push_started = Instant::now();
        let pushed = push_updates(store.endpoint(), session, &updates, &objects)?;
        round.pushing = push_started.elapsed();
        match pushed {
            Pushed::Accepted => {}
            Pushed::Lost => round.lost = true,
            Pushed::Refused { name, error } if queue_refs && name.starts_with(QUEUE_ROOT) => {
                // E.g. a hook that allows only branches: write as before, one push per batch.
                refuse_queue(store.endpoint(), &error);
                round.lost = true;
                round.queue = false;
            }
            Pushed::Refused { error, .. } => return Err(error),
        }
        objects
    };
    if !round.lost && !pending.is_empty() {
        pending::crash_point("queue.pushed");
    }
    if !round.lost {
        if let Some(new_tip) = new_tip {
            // After the answers: the writers need not wait for the cache's copy.
            cache.record_pushed_later(objects, state_ref.clone(), new_tip);
        }
    }
    // The answers.
    for (i, result) in results {
        // After a lost push, a write that was made or found stale goes again (on the new tip);
        // a conflict of paths is its own answer.
        outcomes[i] = Some(match result {
            Ok(_) | Err(StoreError::Stale) if round.lost => Outcome::Again,
            result => Outcome::Answer(result),
        });
    }
    for (foreign, fold) in pending.iter().zip(&folds) {
        match foreign.own {
            Some(i) if !round.lost => {
                outcomes[i] = Some(Outcome::Answer(match fold {
                    Fold::Folded(commit) => Ok(commit.to_string()),
                    Fold::Rejected => Err(StoreError::Stale),
                }));
            }
            Some(i) => outcomes[i] = Some(Outcome::Again),
            None if !round.lost && matches!(fold, Fold::Folded(_)) => round.folded += 1,
            None => {}
        }
    }
    for i in withdrawn {
        outcomes[i] = Some(if round.lost {
            Outcome::Again
        } else {
            Outcome::Answer(Err(busy(&batch[i].0)))
        });
    }
    round.outcomes = outcomes
        .into_iter()
        .map(|o| o.unwrap_or(Outcome::Again))
        .collect();
    Ok(round)
}

/// Step 3 of a leading round (DESIGN §9.4): one request brings what the round lacks, the tip
/// `advertised` when another process pushed it and the `chosen` pending commits with their
/// trees (their blobs stay on the remote: the chain names them by id). When that cannot be
/// done, the pending commits come by id; when they cannot be fetched, only this process's own
/// stay chosen (the others wait for another leader).
fn fetch_for_fold(
    store: &Target,
    advertised: Option<ObjectId>,
    chosen: &mut Vec<(String, ObjectId, Option<usize>)>,
) -> Result<(), StoreError> {
    let cache = store.cache()?;
    let lacking: HashMap<String, ObjectId> = advertised
        .filter(|t| !cache.repo().has_object(t))
        .map(|t| (store.state_ref().to_owned(), t))
        .into_iter()
        .collect();
    let roots: Vec<ObjectId> = chosen.iter().map(|(_, c, _)| *c).collect();
    let together = cache
        .fetch_advertised_and(store.endpoint(), &lacking, &roots)
        .unwrap_or_else(|e| {
            tracing::debug!(error = %e, "the tip and the pending writes could not be fetched in one request");
            false
        });
    if !together && !roots.is_empty() {
        if let Err(e) = cache.fetch_by_id(store.endpoint(), roots) {
            tracing::warn!(error = %e, "could not fetch the pending writes of other processes");
            chosen.retain(|(_, _, own)| own.is_some());
        }
    }
    Ok(())
}

/// Whether this process pushes the next chain (DESIGN §9.4): the oldest pending write on the
/// remote is its own, or has waited longer than `takeover` (its process is slow or gone). With
/// nothing pending, a process that writes alone goes at once; while others write to the branch
/// (`contended`), it publishes first, and the oldest write's process leads.
fn leads(
    listing: &pending::Listing,
    own: &HashMap<&str, usize>,
    takeover: Duration,
    contended: bool,
) -> bool {
    let Some((oldest_id, _)) = listing.pending.first_key_value() else {
        tracing::debug!(contended, "nothing pending");
        return !contended;
    };
    if own.contains_key(oldest_id.as_str()) {
        tracing::debug!("leads: the oldest pending write is this process's");
        return true;
    }
    if pending::older_than(oldest_id, takeover) {
        tracing::debug!(
            takeover_ms = takeover.as_millis() as u64,
            "leads: the oldest pending write waited too long"
        );
        return true;
    }
    // This process's new writes are younger than any published one (they were not published
    // yet): they join the queue behind them.
    false
}

/// A round of a process that does not lead: publishes the batch's new writes, withdraws those
/// past their deadline and deletes the answers it read, in one push over `session` (none when
/// there is nothing to change).
fn follow(
    store: &Target,
    session: ReceivePack,
    batch: &[(QueuedWrite, Option<Published>)],
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
            let publication = publication(&repo, write)?;
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
        // Only answers read are to be deleted: the writers need not wait for that. It is
        // pushed once they are answered (a clean-up nobody waits for; what it misses, a
        // leader deletes once the answer is two minutes old).
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
        store.cache()?.record_objects(&objects)?;
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
fn publication(repo: &gix::Repository, write: &QueuedWrite) -> Result<Published, StoreError> {
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
    )?;
    Ok(Published { id, commit })
}

/// Whether `id` is the publication of one of the `withdrawn` entries of `batch`.
fn withdrawn_id(batch: &[(QueuedWrite, Option<Published>)], withdrawn: &[usize], id: &str) -> bool {
    withdrawn
        .iter()
        .any(|&i| batch[i].1.as_ref().is_some_and(|p| p.id == id))
}

/// What a write read: the file and the lock branch it was made for.
struct Conditions<'a> {
    path: &'a StatePath,
    base_file: Option<ObjectId>,
    lock_tip: Option<ObjectId>,
}

/// Adds the commit of one write to `chain` when its conditions hold on it (DESIGN §9.1): the
/// lock branch as advertised, and the file on the chain, are what the write read. The inner
/// `Err` is the write's own failure (`Stale`, or a `Conflict` of paths); the outer one fails
/// the round.
fn extend(
    repo: &gix::Repository,
    session: &ReceivePack,
    chain: &mut Option<ObjectId>,
    write: &Conditions<'_>,
    change: FileChange<'_>,
    message: &str,
) -> Result<Result<ObjectId, StoreError>, StoreError> {
    if session.tip(&write.path.lock_ref()) != write.lock_tip {
        tracing::debug!(path = %write.path, "the lock changed since the write read it");
        return Ok(Err(StoreError::Stale));
    }
    let file_now = match *chain {
        Some(commit) => entry_id(repo, commit, write.path.as_str())?,
        None => None,
    };
    if file_now != write.base_file {
        tracing::debug!(path = %write.path, "the state changed since the write read it");
        return Ok(Err(StoreError::Stale));
    }
    match file_commit(repo, *chain, write.path.as_str(), change, message) {
        Ok(commit) => {
            *chain = Some(commit);
            Ok(Ok(commit))
        }
        Err(e @ StoreError::Conflict(_)) => Ok(Err(e)),
        Err(e) => Err(e),
    }
}

impl Round {
    /// A round that leaves the pushing to another process.
    fn waiting(batch: &[(QueuedWrite, Option<Published>)]) -> Round {
        Round {
            outcomes: batch.iter().map(|_| Outcome::Again).collect(),
            base: None,
            tip: None,
            lost: false,
            queue: true,
            folded: 0,
            commits: 0,
            led: false,
            leads_next: false,
            fetching: Duration::ZERO,
            pushing: Duration::ZERO,
            cleanup: None,
        }
    }

    /// A round that wrote nothing because the branch moved under it.
    fn lost(batch: &[(QueuedWrite, Option<Published>)], queue: bool) -> Round {
        Round {
            outcomes: batch.iter().map(|_| Outcome::Again).collect(),
            base: None,
            tip: None,
            lost: true,
            queue,
            folded: 0,
            commits: 0,
            led: true,
            leads_next: false,
            fetching: Duration::ZERO,
            pushing: Duration::ZERO,
            cleanup: None,
        }
    }
}

/// Publishes `batch` (this process's new writes) as pending refs of the remote's queue
/// (DESIGN §9.4) over a new session: a [`follow`] round. Per write, its publication, or `None`
/// when the server did not take it (it stays this process's own).
pub(super) fn publish(
    store: &Target,
    batch: &[(QueuedWrite, Option<Published>)],
) -> Result<Vec<Option<Published>>, StoreError> {
    let session = ReceivePack::connect(store.endpoint())?;
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

/// Remotes that refused the queue's refs (a hook, a protected namespace): this process writes
/// to them without the queue, as before it (DESIGN §9.4).
fn refused_queues() -> &'static Mutex<std::collections::HashSet<String>> {
    static REFUSED: OnceLock<Mutex<std::collections::HashSet<String>>> = OnceLock::new();
    REFUSED.get_or_init(Default::default)
}

fn queue_refused(endpoint: &Endpoint) -> bool {
    refused_queues()
        .lock()
        .map(|r| r.contains(&endpoint.display))
        .unwrap_or(true)
}

/// Stops using the queue of `endpoint` in this process; logged once.
fn refuse_queue(endpoint: &Endpoint, why: &StoreError) {
    if let Ok(mut refused) = refused_queues().lock() {
        if refused.insert(endpoint.display.clone()) {
            tracing::warn!(remote = %endpoint.display, error = %why, "the remote refused the write queue's refs (refs/gitstate/queue/…); writes to it go without the queue");
        }
    }
}
