//! A leading round of the write queue (DESIGN §9.4), and the decision to lead or follow: read
//! the remote's queue and this process's answers, fetch the tip and the pending commits in one
//! request, fold them and this batch's new writes into one chain, each checked against its own
//! conditions, and push it with the queue's ref updates in one atomic push.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use gitstate_core::Message;
use gitstate_core::{Revision, StatePath, StoreError};
use gix::ObjectId;

use super::answers::{delete, read_answers, stale_answers, Answers};
use super::follow::follow;
use super::queued::{busy, Outcome, PublishedWrite, QueuedWrite, MAX_BATCH_WRITES};
use super::round::{queue_refused, refuse_queue, Round};
use super::sweep::still_listed;
use crate::objects::{entry_id, file_commit, Committer, FileChange};
use crate::pending::{self, read_pending, Kind, PendingWrite, QueueRefs, QUEUE_ROOT};
use crate::push::{pack_objects, push_updates, Pushed};
use crate::target::Target;
use gitstate_wire::pack::Pack;
use gitstate_wire::sendpack::{ReceivePack, RefUpdate};

/// A batch as the driver hands it over: each write, with its publication when it has one.
type Batch = [(QueuedWrite, Option<PublishedWrite>)];

/// Per new write of the batch (its index): the commit made for it, or its own failure.
type Results = Vec<(usize, Result<Revision, StoreError>)>;

/// A pending write of the remote's queue as this round listed and read it: another process's,
/// or this process's own published one (`own`).
struct ListedWrite {
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

/// One round (blocking; it may push nothing): the tips and queue refs from `session` (or a fresh one); answers of
/// this process's published writes; then, when this process leads, the chain, oldest first:
/// pending writes of every process (folded or rejected, DESIGN §9.4), then this batch's own
/// new writes; one push, atomic where the remote keeps a queue. Otherwise it follows.
pub(super) fn run_round(
    store: &Target,
    session: Option<ReceivePack>,
    batch: &Batch,
    stand_in: Duration,
    raced: bool,
    swept: Vec<RefUpdate>,
) -> Result<Round, StoreError> {
    let session = match session {
        Some(session) => session,
        None => crate::repeat::receive_pack(store.endpoint())?,
    };
    let refs = QueueRefs::new(store.state_ref());
    let queue = session.offers("atomic")
        && session.offers("delete-refs")
        && store.cache()?.fetches_pending(store.endpoint())
        && !queue_refused(store.endpoint());
    // This process's published writes learn their answer here even when it stopped using
    // the queue meanwhile.
    let listing = if queue || batch.iter().any(|(_, p)| p.is_some()) {
        refs.classify(session.refs_under(refs.prefix()))
    } else {
        Default::default()
    };
    if queue {
        metrics::histogram!(gitstate_core::metrics::QUEUE_PENDING)
            .record(listing.pending.len() as f64);
    }
    if !listing.pending.is_empty() {
        pending::crash_point("queue.listed");
    }
    let mut answers = read_answers(batch, &listing, &refs);
    if queue {
        // Answers read in earlier rounds go with this one's push (`sweep.rs`).
        let swept = still_listed(swept, &listing, &refs);
        if !swept.is_empty() {
            tracing::debug!(
                deletes = swept.len(),
                "answers read earlier join this round's ref updates"
            );
        }
        answers.updates.extend(swept);
    }
    if queue && !leads(&listing, &answers.own, stand_in, raced) {
        // Another process's write is older: it pushes, folding this batch's writes, which
        // are published for it here (DESIGN §9.4).
        let Answers {
            outcomes,
            updates,
            withdrawn,
            ..
        } = answers;
        let empty = listing.pending.is_empty();
        return follow(store, session, batch, updates, &withdrawn, outcomes, empty);
    }
    lead(store, session, batch, &listing, answers, queue)
}

/// A leading round, from the queue's `listing` and what it said of this batch (`answers`).
fn lead(
    store: &Target,
    session: ReceivePack,
    batch: &Batch,
    listing: &pending::Listing,
    answers: Answers<'_>,
    queue: bool,
) -> Result<Round, StoreError> {
    let Answers {
        outcomes,
        mut updates,
        withdrawn,
        own,
    } = answers;
    let refs = QueueRefs::new(store.state_ref());
    let chosen = choose(batch, listing, &own, &withdrawn);
    let fetch_started = Instant::now();
    let Some(Loaded { tip, repo, pending }) = load(store, &session, batch, chosen, queue)? else {
        return Ok(Round::lost(batch, queue));
    };
    let fetching = fetch_started.elapsed();
    if !pending.is_empty() {
        pending::crash_point("queue.fetched");
    }
    let mut chain = Chain::new(&repo, &session, &store.committer, tip);
    let folds = chain.fold(&pending, &refs, &mut updates)?;
    let results = chain.add_own(batch)?;
    if queue {
        let stale = stale_answers(listing, &refs, &updates);
        updates.extend(stale);
    }
    let (new_tip, commits, on_remote) = chain.finish();
    if let Some(new_tip) = new_tip {
        updates.insert(0, move_branch(store, tip, new_tip));
    }
    let mut round = Round {
        base: tip,
        tip: new_tip,
        commits: if new_tip.is_some() { commits.len() } else { 0 },
        fetching,
        ..Round::new(batch, queue, true)
    };
    let objects = if updates.is_empty() {
        Pack::default()
    } else {
        let paths: Vec<(ObjectId, &str)> = commits.iter().map(|(c, p)| (*c, p.as_str())).collect();
        let objects = pack_objects(repo, &paths, &on_remote)?;
        push(
            store,
            session,
            &mut round,
            &updates,
            &objects,
            new_tip.is_some(),
        )?;
        objects
    };
    if !round.lost && !pending.is_empty() {
        pending::crash_point("queue.pushed");
    }
    if let Some(new_tip) = new_tip.filter(|_| !round.lost) {
        // After the answers: the writers need not wait for the cache's copy.
        let cache = store.cache()?;
        cache.record_pushed_later(objects.objects, store.state_ref().to_owned(), new_tip);
    }
    answer(
        &mut round, batch, outcomes, results, &pending, &folds, &withdrawn,
    );
    Ok(round)
}

/// The pending writes to fold, oldest first: this process's own, and others' while the batch
/// has room; never one this round withdraws.
fn choose(
    batch: &Batch,
    listing: &pending::Listing,
    own: &HashMap<&str, usize>,
    withdrawn: &[usize],
) -> Vec<(String, ObjectId, Option<usize>)> {
    let local = batch.iter().filter(|(_, p)| p.is_none()).count();
    let mut room = MAX_BATCH_WRITES.saturating_sub(local + own.len());
    let mut chosen = Vec::new();
    for (id, commit) in &listing.pending {
        if let Some(&i) = own.get(id.as_str()) {
            chosen.push((id.clone(), *commit, Some(i)));
        } else if !withdrawn_id(batch, withdrawn, id) && room > 0 {
            room -= 1;
            chosen.push((id.clone(), *commit, None));
        }
    }
    chosen
}

/// What a leading round builds on: the branch tip, the cache (objects built in memory), and
/// the pending writes read.
struct Loaded {
    tip: Option<ObjectId>,
    repo: gix::Repository,
    pending: Vec<ListedWrite>,
}

/// Fetches what the round lacks (the tip another process pushed, the `chosen` pending commits)
/// and reads the pending writes. `None` when the branch moved since the advertisement (and with
/// it the queue: its listing may name writes already folded).
fn load(
    store: &Target,
    session: &ReceivePack,
    batch: &Batch,
    mut chosen: Vec<(String, ObjectId, Option<usize>)>,
    queue: bool,
) -> Result<Option<Loaded>, StoreError> {
    let state_ref = store.state_ref();
    let advertised = session.tip(state_ref);
    fetch_for_fold(store, advertised, &mut chosen)?;
    let cache = store.cache()?;
    let repo = cache.repo().with_object_memory();
    let pending = chosen
        .into_iter()
        .map(|(id, advertised, own)| ListedWrite {
            write: read_pending(&repo, &id, advertised),
            id,
            advertised,
            own,
        })
        .collect();
    let mut tip = advertised;
    if tip.is_some_and(|t| !repo.has_object(t)) {
        // Another process wrote: fetch (shallow). A newer tip than advertised is fine:
        // receive-pack compares with the ref's value when it updates it.
        tip = cache
            .refresh(store.endpoint(), &[state_ref])?
            .get(state_ref)
            .copied();
        if tip.is_some_and(|t| !repo.has_object(t)) || (queue && tip != advertised) {
            return Ok(None);
        }
    }
    let Some(tip) = tip else {
        return Ok(Some(Loaded { tip, repo, pending }));
    };
    // The chain edits the tip's trees on every path it writes: a partial cache may lack some.
    let files: Vec<(ObjectId, &str)> = pending
        .iter()
        .filter_map(|f: &ListedWrite| f.write.as_ref().ok())
        .map(|write| write.path.as_str())
        .chain(batch.iter().map(|(write, _)| write.path.as_str()))
        .map(|path| (tip, path))
        .collect();
    cache.ensure_paths(store.endpoint(), &files, false)?;
    // A fresh handle: it sees what that fetched.
    let repo = cache.repo().with_object_memory();
    Ok(Some(Loaded {
        tip: Some(tip),
        repo,
        pending,
    }))
}

/// The chain a leading round builds on the tip: one commit per write whose conditions hold.
struct Chain<'r> {
    repo: &'r gix::Repository,
    session: &'r ReceivePack,
    /// Who writes the commits (the repository's committer, for every process's writes).
    committer: &'r Committer,
    tip: Option<ObjectId>,
    /// The commits made, with the file each changed (for the pack).
    commits: Vec<(ObjectId, String)>,
    /// The blobs of the folded writes: on the remote, maybe not in the cache.
    on_remote: Vec<ObjectId>,
}

impl<'r> Chain<'r> {
    fn new(
        repo: &'r gix::Repository,
        session: &'r ReceivePack,
        committer: &'r Committer,
        tip: Option<ObjectId>,
    ) -> Self {
        Chain {
            repo,
            session,
            committer,
            tip,
            commits: Vec::new(),
            on_remote: Vec::new(),
        }
    }

    /// One write onto the chain when its conditions hold (see [`extend`]).
    fn add(
        &mut self,
        conditions: &Conditions<'_>,
        change: FileChange<'_>,
        message: &Message,
    ) -> Result<Result<ObjectId, StoreError>, StoreError> {
        let made = extend(
            self.repo,
            self.session,
            &mut self.tip,
            conditions,
            (change, message, self.committer),
        )?;
        if let Ok(commit) = &made {
            self.commits
                .push((*commit, conditions.path.as_str().to_owned()));
        }
        Ok(made)
    }

    /// Folds each pending write (or rejects it: malformed, expired, or its conditions do not
    /// hold) and adds the queue's ref updates for it: its pending ref deleted and, for another
    /// process's, its answer (`done/` the commit, `rejected/`).
    fn fold(
        &mut self,
        pending: &[ListedWrite],
        refs: &QueueRefs,
        updates: &mut Vec<RefUpdate>,
    ) -> Result<Vec<Fold>, StoreError> {
        let mut folds = Vec::with_capacity(pending.len());
        for foreign in pending {
            let fold = match &foreign.write {
                Err(why) => {
                    tracing::warn!(id = %foreign.id, %why, "a malformed pending write is rejected");
                    Fold::Rejected
                }
                Ok(write) if pending::expired(write) => {
                    tracing::info!(path = %write.path, id = %foreign.id, "a pending write expired before anyone folded it");
                    Fold::Rejected
                }
                Ok(write) => self.fold_one(write)?,
            };
            updates.push(delete(
                refs.name(Kind::Pending, &foreign.id),
                foreign.advertised,
            ));
            if foreign.own.is_none() {
                let (kind, target) = match fold {
                    Fold::Folded(commit) => (Kind::Done, commit),
                    Fold::Rejected => (Kind::Rejected, foreign.advertised),
                };
                updates.push(RefUpdate {
                    name: refs.name(kind, &foreign.id),
                    old: ObjectId::null(gix::hash::Kind::Sha1),
                    new: target,
                });
            }
            folds.push(fold);
        }
        Ok(folds)
    }

    /// One well-formed pending write onto the chain, by its blob's id.
    fn fold_one(&mut self, write: &PendingWrite) -> Result<Fold, StoreError> {
        let change = match write.blob {
            Some(blob) => {
                self.on_remote.push(blob);
                FileChange::Blob(blob)
            }
            None if write.also_remove.is_empty() => FileChange::Remove,
            None => FileChange::RemoveWith(&write.also_remove),
        };
        let conditions = Conditions {
            path: &write.path,
            base_file: write.base_file,
            lock_tip: write.lock_tip,
        };
        Ok(match self.add(&conditions, change, &write.message)? {
            Ok(commit) => Fold::Folded(commit),
            Err(_) => Fold::Rejected,
        })
    }

    /// This batch's new writes onto the chain; per write, its commit or its own failure.
    fn add_own(&mut self, batch: &Batch) -> Result<Results, StoreError> {
        let mut results = Vec::new();
        for (i, (write, published)) in batch.iter().enumerate() {
            if published.is_some() {
                continue;
            }
            let conditions = Conditions {
                path: &write.path,
                base_file: write.base_file,
                lock_tip: write.lock_tip,
            };
            let made = self.add(&conditions, (&write.change).into(), &write.message)?;
            results.push((i, made.map(|commit| commit.to_string())));
        }
        Ok(results)
    }

    /// The new tip (`None` when no write made a commit), the commits, and the folded blobs.
    fn finish(self) -> (Option<ObjectId>, Vec<(ObjectId, String)>, Vec<ObjectId>) {
        let new_tip = self.tip.filter(|_| !self.commits.is_empty());
        (new_tip, self.commits, self.on_remote)
    }
}

/// The update of the state branch from `tip` to `new_tip`.
fn move_branch(store: &Target, tip: Option<ObjectId>, new_tip: ObjectId) -> RefUpdate {
    RefUpdate {
        name: store.state_ref().to_owned(),
        old: tip.unwrap_or(ObjectId::null(gix::hash::Kind::Sha1)),
        new: new_tip,
    }
}

/// Pushes a leading round's `updates` with `objects` and records in `round` how it went: a
/// lost compare-and-swap, or a remote that refuses the queue's refs (this process then writes
/// without the queue, one push per batch, DESIGN §9.4).
fn push(
    store: &Target,
    session: ReceivePack,
    round: &mut Round,
    updates: &[RefUpdate],
    objects: &Pack,
    moves_branch: bool,
) -> Result<(), StoreError> {
    let queue_refs = updates.len() > usize::from(moves_branch);
    let push_started = Instant::now();
    let pushed = push_updates(store.endpoint(), session, updates, objects)?;
    round.pushing = push_started.elapsed();
    match pushed {
        Pushed::Accepted => {}
        Pushed::Lost => round.lost = true,
        Pushed::Refused { name, error } if queue_refs && name.starts_with(QUEUE_ROOT) => {
            // E.g. a hook that allows only branches.
            refuse_queue(store.endpoint(), &error);
            round.lost = true;
            round.queue = false;
        }
        Pushed::Refused { error, .. } => return Err(error),
    }
    Ok(())
}

/// Each write's outcome after the push: its commit or its own failure; after a lost push, a
/// write that was made or found stale goes again (on the new tip), a conflict of paths is its
/// own answer; this process's folded pending writes are answered, withdrawn ones are 503s.
fn answer(
    round: &mut Round,
    batch: &Batch,
    mut outcomes: Vec<Option<Outcome>>,
    results: Results,
    pending: &[ListedWrite],
    folds: &[Fold],
    withdrawn: &[usize],
) {
    let lost = round.lost;
    for (i, result) in results {
        outcomes[i] = Some(match result {
            Ok(_) | Err(StoreError::Stale) if lost => Outcome::Again,
            result => Outcome::Answer(result),
        });
    }
    for (foreign, fold) in pending.iter().zip(folds) {
        match foreign.own {
            Some(i) if !lost => {
                outcomes[i] = Some(Outcome::Answer(match fold {
                    Fold::Folded(commit) => Ok(commit.to_string()),
                    Fold::Rejected => Err(StoreError::Stale),
                }));
            }
            Some(i) => outcomes[i] = Some(Outcome::Again),
            None if !lost && matches!(fold, Fold::Folded(_)) => round.folded += 1,
            None => {}
        }
    }
    for &i in withdrawn {
        outcomes[i] = Some(if lost {
            Outcome::Again
        } else {
            Outcome::Answer(Err(busy(&batch[i].0)))
        });
    }
    round.outcomes = outcomes
        .into_iter()
        .map(|o| o.unwrap_or(Outcome::Again))
        .collect();
}

/// Step 3 of a leading round (DESIGN §9.4): one request brings what the round lacks, the tip
/// `advertised` when another process pushed it and the `chosen` pending commits with their
/// trees (their blobs stay on the remote: the chain names them by id). When that cannot be
/// done (a server without partial fetch), the pending commits come whole by id, and the tip
/// with the read in [`load`]; when they cannot be fetched, only this process's own stay
/// chosen (the others wait for another leader).
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
/// remote is its own, or has waited longer than `stand_in` (its process is slow or gone). With
/// nothing pending, a process goes at once, unless its last round found others writing at the
/// same time (`raced`: it lost, followed, or folded others' writes): then it publishes first,
/// and the oldest write's process leads.
fn leads(
    listing: &pending::Listing,
    own: &HashMap<&str, usize>,
    stand_in: Duration,
    raced: bool,
) -> bool {
    let Some((oldest_id, _)) = listing.pending.first_key_value() else {
        tracing::debug!(raced, "nothing pending");
        return !raced;
    };
    if own.contains_key(oldest_id.as_str()) {
        tracing::debug!("leads: the oldest pending write is this process's");
        return true;
    }
    if pending::older_than(oldest_id, stand_in) {
        tracing::debug!(
            stand_in_ms = stand_in.as_millis() as u64,
            "leads: the oldest pending write waited too long"
        );
        return true;
    }
    // This process's new writes are younger than any published one (they were not published
    // yet): they join the queue behind them.
    false
}

/// Whether `id` is the publication of one of the `withdrawn` entries of `batch`.
fn withdrawn_id(
    batch: &[(QueuedWrite, Option<PublishedWrite>)],
    withdrawn: &[usize],
    id: &str,
) -> bool {
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
    (change, message, committer): (FileChange<'_>, &Message, &Committer),
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
    match file_commit(
        repo,
        *chain,
        write.path.as_str(),
        change,
        message,
        committer,
    ) {
        Ok(commit) => {
            *chain = Some(commit);
            Ok(Ok(commit))
        }
        Err(e @ StoreError::Conflict(_)) => Ok(Err(e)),
        Err(e) => Err(e),
    }
}
