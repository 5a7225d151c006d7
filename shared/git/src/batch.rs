//! Group commit (DESIGN §9.2): the state writes of one process to one remote branch, under one
//! git credential, share a push. Each write stays its own commit; the commits of a batch form a
//! chain pushed with one compare-and-swap of the branch.
//!
//! A write joins the [`WriteQueue`] of its remote, branch and credential. When no batch is being
//! driven, it starts a driver task (with its own receive-pack session, so a lone write costs what
//! it did before); the driver takes the waiting writes oldest first, checks each one's own
//! conditions (§9.1: the file and the lock branch it read are unchanged), builds the chain and
//! pushes it. A write whose conditions fail is answered on its own; a lost compare-and-swap
//! puts the batch back (with jittered back-off); any other failure answers the whole batch,
//! which the remote then holds entirely or not at all.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use gitstate_core::{Credentials, Revision, StateChange, StatePath, StoreError};
use gix::ObjectId;
use tokio::sync::oneshot;
use tracing::Instrument;

use crate::objects::{entry_id, state_commit};
use crate::plumbing::sendpack::{ReceivePack, RefUpdate};
use crate::remote::RemoteStore;

/// Most writes one push carries.
pub const MAX_BATCH_WRITES: usize = 64;
/// Most state bytes one push carries (a larger single write still goes alone).
pub const MAX_BATCH_BYTES: usize = 8 * 1024 * 1024;
/// First back-off bound after a lost compare-and-swap; doubles per loss in a row.
const BACK_OFF_BASE: Duration = Duration::from_millis(10);
/// Cap of one back-off after a loss (the age-based yield below does the rest).
const BACK_OFF_MAX: Duration = Duration::from_millis(50);
/// First guess of how long a push attempt takes, before one was measured.
const FIRST_ATTEMPT_ESTIMATE: Duration = Duration::from_millis(250);

/// One state write waiting for a push: what it changes and what it read.
#[derive(Debug)]
pub(crate) struct QueuedWrite {
    /// The state file.
    pub path: StatePath,
    /// The entry at `path` on the tip the write read (`None`: absent).
    pub base_file: Option<ObjectId>,
    /// The lock branch tip the write read (`None`: unlocked).
    pub lock_tip: Option<ObjectId>,
    /// The change and the commit message.
    pub change: StateChange,
    /// See [`QueuedWrite::change`].
    pub message: String,
    /// When the request started writing: the queue is served in this order.
    pub since: Instant,
    /// Past it, the write is not put into a push any more (answered [`StoreError::Busy`]).
    pub deadline: Option<Instant>,
}

impl QueuedWrite {
    fn size(&self) -> usize {
        match &self.change {
            StateChange::Write(bytes) => bytes.len(),
            StateChange::Delete => 0,
        }
    }
}

struct Waiting {
    write: QueuedWrite,
    seq: u64,
    reply: oneshot::Sender<Result<Revision, StoreError>>,
}

#[derive(Default)]
struct Queue {
    waiting: Vec<Waiting>,
    /// A driver task is running.
    driving: bool,
    next_seq: u64,
    /// The receive-pack session of the write that started the driver (used for its first push).
    session: Option<ReceivePack>,
    /// The last attempt lost, or built on a tip another process had pushed: other processes
    /// write to this branch now.
    contended: bool,
    /// The tip this process pushed last.
    own_tip: Option<ObjectId>,
    /// How long a push attempt takes here (moving average).
    estimate: Option<Duration>,
}

/// Writes taken for one push, and the session to push over (when one is at hand).
type Batch = (Vec<Waiting>, Option<ReceivePack>);

/// The queue of one remote branch and credential in this process.
pub(crate) struct WriteQueue {
    queue: Mutex<Queue>,
}

/// The queues of this process: per remote and branch, one per credential.
type Registry = Mutex<HashMap<(String, String), Vec<(Option<Credentials>, Weak<WriteQueue>)>>>;

impl WriteQueue {
    /// The queue of `remote` (the cache's name), `state_ref` and `credentials`, made on first
    /// use and dropped when no write holds it.
    pub(crate) fn of(
        remote: &str,
        state_ref: &str,
        credentials: Option<&Credentials>,
    ) -> Result<Arc<WriteQueue>, StoreError> {
        static QUEUES: OnceLock<Registry> = OnceLock::new();
        let mut queues = QUEUES
            .get_or_init(Default::default)
            .lock()
            .map_err(|_| StoreError::Internal("the write queue registry is poisoned".into()))?;
        // Queues no write holds any more go, and with them remotes left without any: the
        // registry holds only what is in use (pass-through callers can name many remotes).
        queues.retain(|_, slot| {
            slot.retain(|(_, queue)| queue.strong_count() > 0);
            !slot.is_empty()
        });
        let slot = queues
            .entry((remote.to_owned(), state_ref.to_owned()))
            .or_default();
        if let Some(queue) = slot
            .iter()
            .find(|(owner, _)| owner.as_ref() == credentials)
            .and_then(|(_, queue)| queue.upgrade())
        {
            return Ok(queue);
        }
        let queue = Arc::new(WriteQueue {
            queue: Mutex::new(Queue::default()),
        });
        slot.push((credentials.cloned(), Arc::downgrade(&queue)));
        Ok(queue)
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Queue>, StoreError> {
        self.queue
            .lock()
            .map_err(|_| StoreError::Internal("the write queue is poisoned".into()))
    }

    /// Queues `write` and waits until a push carrying it was answered. `session` is the
    /// write's own receive-pack session: used for the first push when no batch is being
    /// driven, dropped otherwise.
    pub(crate) async fn submit(
        self: &Arc<Self>,
        store: &RemoteStore,
        write: QueuedWrite,
        session: ReceivePack,
    ) -> Result<Revision, StoreError> {
        let (reply, answer) = oneshot::channel();
        let start_driver = {
            let mut queue = self.lock()?;
            let seq = queue.next_seq;
            queue.next_seq += 1;
            queue.waiting.push(Waiting { write, seq, reply });
            if queue.driving {
                false
            } else {
                queue.driving = true;
                queue.session = Some(session);
                true
            }
        };
        if start_driver {
            // A task of its own: a request that goes away (the client hung up) must not stop
            // the batch the other writers wait for.
            let (queue, store) = (self.clone(), store.clone());
            tokio::spawn(
                async move { queue.drive(store).await }
                    .instrument(tracing::info_span!("write_batch")),
            );
        }
        answer
            .await
            .map_err(|_| StoreError::Internal("the write queue stopped without answering".into()))?
    }

    /// Takes the next batch: oldest first, at most [`MAX_BATCH_WRITES`] and
    /// [`MAX_BATCH_BYTES`]. Writes past their deadline are answered busy, writes whose request
    /// is gone are dropped. `None` (and the driver stops) when nothing waits.
    fn next_batch(&self) -> Result<Option<Batch>, StoreError> {
        let mut queue = self.lock()?;
        let now = Instant::now();
        let mut kept = Vec::new();
        for waiting in std::mem::take(&mut queue.waiting) {
            if waiting.reply.is_closed() {
                continue;
            }
            if waiting.write.deadline.is_some_and(|d| d <= now) {
                tracing::info!(path = %waiting.write.path, waited_ms = waiting.write.since.elapsed().as_millis() as u64, "write gave up: its deadline passed before its turn");
                let _ = waiting.reply.send(Err(busy(&waiting.write)));
                continue;
            }
            kept.push(waiting);
        }
        if kept.is_empty() {
            queue.driving = false;
            queue.session = None;
            return Ok(None);
        }
        kept.sort_by_key(|w| (w.write.since, w.seq));
        let mut bytes = 0usize;
        let mut take = 0usize;
        for waiting in &kept {
            let size = waiting.write.size();
            if take > 0 && (take == MAX_BATCH_WRITES || bytes + size > MAX_BATCH_BYTES) {
                break;
            }
            take += 1;
            bytes += size;
        }
        let rest = kept.split_off(take);
        queue.waiting = rest;
        Ok(Some((kept, queue.session.take())))
    }

    /// Puts writes of a batch back (after a lost compare-and-swap), keeping their order.
    fn put_back(&self, writes: Vec<Waiting>) -> Result<(), StoreError> {
        let mut queue = self.lock()?;
        queue.waiting.extend(writes);
        Ok(())
    }

    /// Fairness across processes (DESIGN §9.3): while other processes write to the branch, a
    /// batch whose oldest write is young waits a random part of two attempts' time less that
    /// write's age before it tries. Old writes go at once; the process that just pushed (its
    /// waiting writes arrived after its push) lets the others, whose writes waited longer, go
    /// first. Nothing waits when this process writes alone.
    fn courtesy(&self) -> Result<Duration, StoreError> {
        use rand::Rng;
        let queue = self.lock()?;
        if !queue.contended {
            return Ok(Duration::ZERO);
        }
        let Some(oldest) = queue.waiting.iter().map(|w| w.write.since).min() else {
            return Ok(Duration::ZERO);
        };
        let estimate = queue.estimate.unwrap_or(FIRST_ATTEMPT_ESTIMATE);
        let window = estimate.saturating_mul(2).saturating_sub(oldest.elapsed());
        let nanos = window.as_nanos().min(u64::MAX as u128) as u64;
        Ok(Duration::from_nanos(rand::rng().random_range(0..=nanos)))
    }

    /// Records what an attempt saw: whether others write to the branch, and its duration.
    fn observe(&self, contended: bool, own_tip: Option<ObjectId>, took: Duration) {
        if let Ok(mut queue) = self.lock() {
            queue.contended = contended;
            if own_tip.is_some() {
                queue.own_tip = own_tip;
            }
            queue.estimate = Some(match queue.estimate {
                Some(estimate) => (estimate.saturating_mul(3) + took) / 4,
                None => took,
            });
        }
    }

    /// Drives batches until nothing waits.
    async fn drive(self: Arc<Self>, store: RemoteStore) {
        let mut losses = 0u32;
        loop {
            match self.courtesy() {
                Ok(pause) if !pause.is_zero() => tokio::time::sleep(pause).await,
                Ok(_) => {}
                Err(e) => {
                    tracing::error!(error = %e, "the write queue failed");
                    return;
                }
            }
            let (batch, session) = match self.next_batch() {
                Ok(Some(next)) => next,
                Ok(None) => return,
                Err(e) => {
                    tracing::error!(error = %e, "the write queue failed");
                    return;
                }
            };
            let (writes, replies): (Vec<QueuedWrite>, Vec<_>) = batch
                .into_iter()
                .map(|w| (w.write, (w.seq, w.reply)))
                .unzip();
            let count = writes.len();
            let started = Instant::now();
            let own_tip = self.lock().ok().and_then(|q| q.own_tip);
            let outcome = store
                .run(move |store| {
                    let results = push_batch(&store, session, &writes);
                    Ok((writes, results))
                })
                .await;
            match outcome {
                Err(e) => {
                    // The store call failed as a whole (timeout, task failure).
                    for (_, reply) in replies {
                        let _ = reply.send(Err(e.clone()));
                    }
                }
                Ok((_, Err(e))) => {
                    tracing::warn!(writes = count, error = %e, "batch push failed; every write of it is answered with the error");
                    for (_, reply) in replies {
                        let _ = reply.send(Err(e.clone()));
                    }
                }
                Ok((_, Ok(Attempt::Pushed { results, base, tip }))) => {
                    losses = 0;
                    let others_pushed = own_tip.is_some() && base != own_tip;
                    self.observe(others_pushed, tip, started.elapsed());
                    tracing::info!(
                        writes = count,
                        committed = results.iter().filter(|r| r.is_ok()).count(),
                        micros = started.elapsed().as_micros() as u64,
                        "batch pushed"
                    );
                    for ((_, reply), result) in replies.into_iter().zip(results) {
                        let _ = reply.send(result);
                    }
                }
                Ok((writes, Ok(Attempt::Lost(failed)))) => {
                    metrics::counter!(gitstate_core::metrics::GIT_CAS_LOSSES).increment(1);
                    losses += 1;
                    self.observe(true, None, started.elapsed());
                    tracing::debug!(writes = count, losses, "batch push lost a compare-and-swap");
                    let mut back = Vec::new();
                    for ((write, (seq, reply)), failure) in
                        writes.into_iter().zip(replies).zip(failed)
                    {
                        match failure {
                            Some(e) => {
                                let _ = reply.send(Err(e));
                            }
                            None => back.push(Waiting { write, seq, reply }),
                        }
                    }
                    if let Err(e) = self.put_back(back) {
                        tracing::error!(error = %e, "the write queue failed");
                        return;
                    }
                    tokio::time::sleep(back_off(losses)).await;
                }
            }
        }
    }
}

/// A uniformly random pause up to `BACK_OFF_BASE · 2^(losses-1)`, capped (full jitter).
fn back_off(losses: u32) -> Duration {
    use rand::Rng;
    let bound = BACK_OFF_BASE
        .saturating_mul(1u32 << losses.saturating_sub(1).min(16))
        .min(BACK_OFF_MAX);
    let nanos = bound.as_nanos().min(u64::MAX as u128) as u64;
    Duration::from_nanos(rand::rng().random_range(0..=nanos))
}

fn busy(write: &QueuedWrite) -> StoreError {
    StoreError::Busy(format!(
        "the write of {} waited {:.1} s for its turn to be pushed and its time ran out",
        write.path,
        write.since.elapsed().as_secs_f32()
    ))
}

/// What one push attempt did.
pub(crate) enum Attempt {
    /// The push was accepted (or nothing was left to push): per write, its commit or why it was
    /// not made; the tip it was built on, and the new tip (`None`: nothing was pushed).
    Pushed {
        /// Per write.
        results: Vec<Result<Revision, StoreError>>,
        /// The branch tip the batch was built on.
        base: Option<ObjectId>,
        /// The tip pushed.
        tip: Option<ObjectId>,
    },
    /// The branch moved: nothing was written. Per write, `Some(error)` when it failed on its
    /// own (answered now), `None` when it goes back into the queue.
    Lost(Vec<Option<StoreError>>),
}

/// One push attempt of `writes` (blocking): the tips from `session` (or a fresh one), the
/// conditions of each write, the chain, one compare-and-swap.
fn push_batch(
    store: &RemoteStore,
    session: Option<ReceivePack>,
    writes: &[QueuedWrite],
) -> Result<Attempt, StoreError> {
    let session = match session {
        Some(session) => session,
        None => ReceivePack::connect(store.endpoint())?,
    };
    let state_ref = store.state_ref().to_owned();
    let cache = store.pinned_cache()?;
    let mut tip = session.tip(&state_ref);
    if tip.is_some_and(|t| !cache.repo().has_object(t)) {
        // Another process wrote: fetch (shallow). A newer tip than advertised is fine:
        // receive-pack compares with the ref's value when it updates it.
        tip = cache
            .refresh(store.endpoint(), &[&state_ref])?
            .get(&state_ref)
            .copied();
        if tip.is_some_and(|t| !cache.repo().has_object(t)) {
            return Ok(Attempt::Lost(writes.iter().map(|_| None).collect()));
        }
    }
    let repo = cache.repo().with_object_memory();
    let mut chain = tip;
    let mut results: Vec<Result<Revision, StoreError>> = Vec::with_capacity(writes.len());
    let mut commits: Vec<(ObjectId, &str)> = Vec::new();
    for write in writes {
        let lock_now = session.tip(&write.path.lock_ref());
        if lock_now != write.lock_tip {
            tracing::debug!(path = %write.path, "the lock changed since the write read it");
            results.push(Err(StoreError::Stale));
            continue;
        }
        let file_now = match chain {
            Some(commit) => entry_id(&repo, commit, write.path.as_str())?,
            None => None,
        };
        if file_now != write.base_file {
            tracing::debug!(path = %write.path, "the state changed since the write read it");
            results.push(Err(StoreError::Stale));
            continue;
        }
        match state_commit(
            &repo,
            chain,
            write.path.as_str(),
            &write.change,
            &write.message,
        ) {
            Ok(commit) => {
                chain = Some(commit);
                commits.push((commit, write.path.as_str()));
                results.push(Ok(commit.to_string()));
            }
            Err(e @ StoreError::Conflict(_)) => results.push(Err(e)),
            Err(e) => return Err(e),
        }
    }
    let Some(new_tip) = chain.filter(|_| !commits.is_empty()) else {
        return Ok(Attempt::Pushed {
            results,
            base: tip,
            tip: None,
        });
    };
    let objects = store.pack_objects(repo, &commits)?;
    let update = RefUpdate {
        name: state_ref.clone(),
        old: tip.unwrap_or_else(|| ObjectId::null(gix::hash::Kind::Sha1)),
        new: new_tip,
    };
    if !store.push_objects(session, update, &objects)? {
        return Ok(Attempt::Lost(
            results
                .into_iter()
                .map(|r| match r {
                    Ok(_) | Err(StoreError::Stale) => None,
                    Err(e) => Some(e),
                })
                .collect(),
        ));
    }
    cache.record_pushed(&objects, &state_ref, Some(new_tip))?;
    Ok(Attempt::Pushed {
        results,
        base: tip,
        tip: Some(new_tip),
    })
}
