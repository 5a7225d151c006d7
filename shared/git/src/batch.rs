//! Group commit (DESIGN §9.2) and the write queue on the remote (§9.4): the state writes of one
//! process to one remote branch, under one git credential, share a push, and writes of several
//! processes share one through pending refs. Each write stays its own commit; the commits of a
//! batch form a chain pushed with one compare-and-swap of the branch.
//!
//! A write joins the [`WriteQueue`] of its remote, branch and credential. When no batch is being
//! driven, it starts a driver task (with its own receive-pack session, so a lone write costs what
//! it did before). Each round of the driver reads the remote's queue (`pending`), answers this
//! process's published writes, and then either leads (folds the pending writes of every
//! process, oldest first, and its own new writes into one chain, one atomic push) or publishes
//! its new writes for the leader and looks again shortly. A write whose conditions fail is
//! answered on its own; a lost compare-and-swap puts the batch back (with jittered back-off);
//! any other failure answers the whole batch, which the remote then holds entirely or not at
//! all.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use gitstate_core::{BlockingStore, Credentials, Revision, StateChange, StatePath, StoreError};
use gix::ObjectId;
use tokio::sync::oneshot;
use tracing::Instrument;

use crate::objects::{entry_id, file_commit, FileChange};
use crate::pending::{
    self, pending_commit, read_pending, Kind, PendingWrite, Publication, QueueRefs, QUEUE_ROOT,
};
use crate::plumbing::sendpack::{ReceivePack, RefUpdate};
use crate::plumbing::transport::Endpoint;
use crate::remote::{Pushed, RemoteStore};

/// Most writes one push carries.
pub const MAX_BATCH_WRITES: usize = 64;
/// Most state bytes one push carries (a larger single write still goes alone).
pub const MAX_BATCH_BYTES: usize = 8 * 1024 * 1024;
/// First back-off bound after a lost compare-and-swap; doubles per loss in a row.
const BACK_OFF_BASE: Duration = Duration::from_millis(10);
/// Cap of one back-off after a loss (the age-based yield below does the rest).
const BACK_OFF_MAX: Duration = Duration::from_millis(50);
/// Longest wait before any process folds a pending write whose own process does not.
const MAX_TAKEOVER: Duration = Duration::from_secs(10);
/// Longest wait before a follower looks for its answers, however long answers took before.
const MAX_ANSWER_WAIT: Duration = Duration::from_secs(1);
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
    /// The write is in the remote's queue (DESIGN §9.4) as this pending ref.
    published: Option<Published>,
    /// Its part of the queue's timeline (logged with its answer).
    timeline: Timeline,
}

/// Where a write's time in the queue went, logged at debug with its answer (`write answered`):
/// the profile of docs/BENCHMARKS.md ("Where a queued write's time goes") is read from these.
#[derive(Debug, Clone, Copy)]
struct Timeline {
    /// When it joined the queue.
    queued: Instant,
    /// Rounds it was part of, and of those the ones this process led.
    rounds: u32,
    led: u32,
    /// When it was published in the remote's queue (first time).
    published: Option<Instant>,
}

impl Timeline {
    fn new() -> Timeline {
        Timeline {
            queued: Instant::now(),
            rounds: 0,
            led: 0,
            published: None,
        }
    }

    /// Logs the answer of a write with where its time went.
    fn answered(&self, ok: bool) {
        tracing::debug!(
            ok,
            queued_ms = self.queued.elapsed().as_millis() as u64,
            rounds = self.rounds,
            led = self.led,
            published_ms = self
                .published
                .map(|p| p.duration_since(self.queued).as_millis() as u64),
            "write answered"
        );
    }
}

/// A write of this process published as a pending ref of the remote's queue.
#[derive(Debug, Clone)]
pub(crate) struct Published {
    /// The id in `refs/gitstate/queue/<branch>/pending/<id>`.
    pub id: String,
    /// The pending commit the ref was created with.
    pub commit: ObjectId,
}

#[derive(Default)]
struct Queue {
    waiting: Vec<Waiting>,
    /// A driver task is running.
    driving: bool,
    next_seq: u64,
    /// The freshest receive-pack session at hand: that of the newest write that joined the
    /// queue, used by the next round instead of asking for an advertisement of its own.
    session: Option<ReceivePack>,
    /// When this process's last push (of any round) was answered: a session asked for before
    /// then may not show it, and is not used.
    last_push: Option<Instant>,
    /// The last attempt lost, or built on a tip another process had pushed: other processes
    /// write to this branch now.
    contended: bool,
    /// The tip this process pushed last.
    own_tip: Option<ObjectId>,
    /// How long a push attempt takes here (moving average).
    estimate: Option<Duration>,
    /// The last round used the remote's queue (DESIGN §9.4), which orders the writes of all
    /// processes: no courtesy wait.
    queued: bool,
    /// How long a published write of this process waits for its answer (moving average): a
    /// follower looks for answers when they are due rather than many times before.
    answer_delay: Option<Duration>,
}

/// Writes taken for one push, and the session to push over (when one is at hand).
type Batch = (Vec<Waiting>, Option<ReceivePack>);

/// Counts a write in [`gitstate_core::metrics::WRITES_WAITING`] while its request waits for its
/// answer (or until the request goes away).
struct WaitingGauge;

impl WaitingGauge {
    fn enter() -> WaitingGauge {
        metrics::gauge!(gitstate_core::metrics::WRITES_WAITING).increment(1.0);
        WaitingGauge
    }
}

impl Drop for WaitingGauge {
    fn drop(&mut self) {
        metrics::gauge!(gitstate_core::metrics::WRITES_WAITING).decrement(1.0);
    }
}

/// The queue of one remote branch and credential in this process.
pub(crate) struct WriteQueue {
    queue: Mutex<Queue>,
    /// Wakes a driver that waits for another process's push when a new write arrives (it is
    /// published at once rather than after the pause).
    arrived: tokio::sync::Notify,
}

/// The queues of this process: per remote and branch, one per credential, with when each was
/// last used.
type Registry =
    Mutex<HashMap<(String, String), Vec<(Option<Credentials>, Arc<WriteQueue>, Instant)>>>;

/// A queue nobody used for this long is dropped, and with it what it learned of the branch
/// (contention, the time a push takes), which the next writes would need again.
const QUEUE_KEPT: Duration = Duration::from_secs(120);

impl WriteQueue {
    /// The queue of `remote` (the cache's name), `state_ref` and `credentials`, made on first
    /// use and dropped [`QUEUE_KEPT`] after its last.
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
        // Queues idle for long go, and with them remotes left without any: the registry holds
        // only what is in use (pass-through callers can name many remotes).
        queues.retain(|_, slot| {
            slot.retain(|(_, queue, used)| {
                Arc::strong_count(queue) > 1 || used.elapsed() < QUEUE_KEPT
            });
            !slot.is_empty()
        });
        let slot = queues
            .entry((remote.to_owned(), state_ref.to_owned()))
            .or_default();
        if let Some((_, queue, used)) = slot
            .iter_mut()
            .find(|(owner, _, _)| owner.as_ref() == credentials)
        {
            *used = Instant::now();
            return Ok(queue.clone());
        }
        let queue = Arc::new(WriteQueue {
            queue: Mutex::new(Queue::default()),
            arrived: tokio::sync::Notify::new(),
        });
        slot.push((credentials.cloned(), queue.clone(), Instant::now()));
        Ok(queue)
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Queue>, StoreError> {
        self.queue
            .lock()
            .map_err(|_| StoreError::Internal("the write queue is poisoned".into()))
    }

    /// No write of this process waits or is being pushed on the branch, and no attempt lost to
    /// (or built on) another process's push: a write may go on its own, outside a batch.
    pub(crate) fn quiet(&self) -> bool {
        self.lock()
            .is_ok_and(|queue| !queue.driving && queue.waiting.is_empty() && !queue.contended)
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
        let _waiting = WaitingGauge::enter();
        let start_driver = {
            let mut queue = self.lock()?;
            let seq = queue.next_seq;
            queue.next_seq += 1;
            queue.waiting.push(Waiting {
                write,
                seq,
                reply,
                published: None,
                timeline: Timeline::new(),
            });
            if queue.driving {
                // Fresher than the one kept (if any): the next round uses it.
                if queue
                    .last_push
                    .is_none_or(|pushed| session.asked() > pushed)
                {
                    queue.session = Some(session);
                }
                self.arrived.notify_one();
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
            // A published write past its deadline goes into the next round, which withdraws
            // it from the remote's queue (or finds it folded meanwhile).
            if waiting.published.is_none() && waiting.write.deadline.is_some_and(|d| d <= now) {
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
        let last_push = queue.last_push;
        let session = queue
            .session
            .take()
            .filter(|s| last_push.is_none_or(|pushed| s.asked() > pushed));
        Ok(Some((kept, session)))
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
    /// first. Nothing waits when this process writes alone, nor while the remote's queue
    /// orders the writes (DESIGN §9.4).
    fn courtesy(&self) -> Result<Duration, StoreError> {
        use rand::Rng;
        let queue = self.lock()?;
        if !queue.contended || queue.queued {
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
            let courtesy = match self.courtesy() {
                Ok(pause) => pause,
                Err(e) => {
                    tracing::error!(error = %e, "the write queue failed");
                    return;
                }
            };
            if !courtesy.is_zero() {
                tokio::time::sleep(courtesy).await;
            }
            let (batch, session) = match self.next_batch() {
                Ok(Some(next)) => next,
                Ok(None) => return,
                Err(e) => {
                    tracing::error!(error = %e, "the write queue failed");
                    return;
                }
            };
            let (writes, replies): (Vec<(QueuedWrite, Option<Published>)>, Vec<_>) = batch
                .into_iter()
                .map(|w| ((w.write, w.published), (w.seq, w.reply, w.timeline)))
                .unzip();
            let count = writes.len();
            let started = Instant::now();
            let own_tip = self.lock().ok().and_then(|q| q.own_tip);
            let takeover = self.takeover();
            let contended = self.lock().map(|q| q.contended).unwrap_or(true);
            let outcome = store
                .run(move |store| {
                    let round = push_batch(&store, session, &writes, takeover, contended);
                    Ok((writes, round))
                })
                .await;
            self.pushed();
            let (writes, round) = match outcome {
                Ok((writes, Ok(round))) => (writes, round),
                Err(e) | Ok((_, Err(e))) => {
                    // The round failed as a whole (timeout, transport, task failure): the remote
                    // holds all of it or none of it; the writers get the error.
                    tracing::warn!(writes = count, error = %e, "batch push failed; every write of it is answered with the error");
                    for (_, reply, timeline) in replies {
                        timeline.answered(false);
                        let _ = reply.send(Err(e.clone()));
                    }
                    continue;
                }
            };
            tracing::debug!(
                writes = count,
                led = round.led,
                lost = round.lost,
                folded = round.folded,
                courtesy_ms = courtesy.as_millis() as u64,
                fetch_ms = round.fetching.as_millis() as u64,
                push_ms = round.pushing.as_millis() as u64,
                round_ms = started.elapsed().as_millis() as u64,
                "round"
            );
            if !round.led {
                tracing::debug!(writes = count, "batch waits for another process's push");
            } else if round.lost {
                metrics::counter!(gitstate_core::metrics::GIT_CAS_LOSSES).increment(1);
                losses += 1;
                self.observe(true, None, started.elapsed());
                tracing::debug!(writes = count, losses, "batch push lost a compare-and-swap");
            } else {
                losses = 0;
                let others_pushed = own_tip.is_some() && round.base != own_tip;
                self.observe(
                    others_pushed || round.folded > 0,
                    round.tip,
                    started.elapsed(),
                );
                if round.tip.is_some() {
                    metrics::histogram!(gitstate_core::metrics::BATCH_COMMITS)
                        .record(round.commits as f64);
                    metrics::counter!(gitstate_core::metrics::FOLDED_WRITES)
                        .increment(round.folded as u64);
                    tracing::info!(
                        writes = count,
                        folded = round.folded,
                        micros = started.elapsed().as_micros() as u64,
                        "batch pushed"
                    );
                }
            }
            if let Ok(mut queue) = self.lock() {
                queue.queued = round.queue;
            }
            let cleanup = round.cleanup;
            let mut back = Vec::new();
            let mut unpublished = Vec::new();
            for (((write, published), (seq, reply, mut timeline)), outcome) in
                writes.into_iter().zip(replies).zip(round.outcomes)
            {
                timeline.rounds += 1;
                timeline.led += u32::from(round.led);
                let waiting = Waiting {
                    write,
                    seq,
                    reply,
                    published,
                    timeline,
                };
                match outcome {
                    Outcome::Answer(result) => {
                        if let (Some(_), Some(published), Ok(_)) =
                            (&waiting.published, waiting.timeline.published, &result)
                        {
                            self.observe_answer(published.elapsed());
                        }
                        waiting.timeline.answered(result.is_ok());
                        let _ = waiting.reply.send(result);
                    }
                    Outcome::Again if waiting.published.is_none() && round.lost && round.queue => {
                        unpublished.push(waiting)
                    }
                    Outcome::Again => back.push(waiting),
                    Outcome::Queued(published) => back.push(Waiting {
                        published: Some(published),
                        timeline: Timeline {
                            published: timeline.published.or(Some(Instant::now())),
                            ..timeline
                        },
                        ..waiting
                    }),
                }
            }
            if let Some((session, updates)) = cleanup {
                clean_up(&store, session, updates).await;
                self.pushed();
            }
            // Lost: the writes go into the remote's queue, where whichever process wins the
            // branch next folds them (DESIGN §9.4).
            if !unpublished.is_empty() {
                back.extend(self.publish_all(&store, unpublished).await);
                self.pushed();
            }
            let waiting_on_others = !back.is_empty() && back.iter().all(|w| w.published.is_some());
            let first_published = back.iter().filter_map(|w| w.timeline.published).min();
            if let Err(e) = self.put_back(back) {
                tracing::error!(error = %e, "the write queue failed");
                return;
            }
            if round.leads_next {
                // Straight on: this process pushes next.
            } else if waiting_on_others {
                // Another process is folding them now; look again when their answer is due, or
                // at once when a new write arrives (it is published without waiting).
                tokio::select! {
                    _ = tokio::time::sleep(self.poll_pause(first_published)) => {}
                    _ = self.arrived.notified() => {}
                }
            } else if round.lost {
                tokio::time::sleep(back_off(losses)).await;
            }
        }
    }

    /// Publishes `writes` in the remote's queue; returns them, published where the server took
    /// them (the others stay this process's own and are retried as they are).
    async fn publish_all(&self, store: &RemoteStore, writes: Vec<Waiting>) -> Vec<Waiting> {
        if writes.is_empty() {
            return writes;
        }
        let (queued, rest): (Vec<(QueuedWrite, Option<Published>)>, Vec<_>) = writes
            .into_iter()
            .map(|w| ((w.write, None), (w.seq, w.reply, w.timeline)))
            .unzip();
        let outcome = store
            .run(move |store| {
                let published = publish(&store, &queued);
                Ok((queued, published))
            })
            .await;
        let (queued, published) = match outcome {
            Ok((queued, Ok(published))) => (queued, published),
            Ok((queued, Err(e))) => {
                tracing::warn!(error = %e, "could not publish writes in the remote's queue; they are retried as they are");
                let none = queued.iter().map(|_| None).collect();
                (queued, none)
            }
            Err(e) => {
                // The task failed and the writes with it: answer them.
                for (_, reply, timeline) in rest {
                    timeline.answered(false);
                    let _ = reply.send(Err(e.clone()));
                }
                return Vec::new();
            }
        };
        queued
            .into_iter()
            .zip(rest)
            .zip(published)
            .map(
                |(((write, _), (seq, reply, timeline)), published)| Waiting {
                    timeline: Timeline {
                        published: timeline
                            .published
                            .or(published.as_ref().map(|_| Instant::now())),
                        ..timeline
                    },
                    write,
                    seq,
                    reply,
                    published,
                },
            )
            .collect()
    }

    /// How long the oldest pending write of the remote may wait before this process pushes
    /// in place of its (slow or gone) process: four attempts' time and twice the usual wait of
    /// a published write for its answer, at least two seconds (its own process looks again
    /// within half an attempt's time; a takeover too early makes processes race for the
    /// branch again, as they did through a slow remote, where a follower's own attempts are
    /// few and its estimate the first guess).
    fn takeover(&self) -> Duration {
        let (estimate, answer_delay) = self
            .lock()
            .map(|q| (q.estimate, q.answer_delay))
            .unwrap_or_default();
        estimate
            .unwrap_or(FIRST_ATTEMPT_ESTIMATE)
            .saturating_mul(4)
            .max(answer_delay.unwrap_or_default().saturating_mul(2))
            .clamp(Duration::from_secs(2), MAX_TAKEOVER)
    }

    /// How long to wait before looking for the answers of this process's published writes
    /// (the earliest published at `first_published`): until three quarters of the usual wait for
    /// an answer have passed since then, and at least a quarter to half an attempt's time
    /// (jittered). Each look is a request to the git server: looking before an answer can be
    /// there only loads it.
    fn poll_pause(&self, first_published: Option<Instant>) -> Duration {
        use rand::Rng;
        let (estimate, answer_delay) = self
            .lock()
            .map(|q| (q.estimate, q.answer_delay))
            .unwrap_or_default();
        let estimate = estimate.unwrap_or(FIRST_ATTEMPT_ESTIMATE);
        let nanos = estimate.as_nanos().min(u64::MAX as u128) as u64;
        let pause = Duration::from_nanos(rand::rng().random_range(nanos / 4..=nanos / 2));
        let due = match (first_published, answer_delay) {
            (Some(published), Some(delay)) => (delay.saturating_mul(3) / 4)
                .saturating_sub(published.elapsed())
                .min(MAX_ANSWER_WAIT),
            _ => Duration::ZERO,
        };
        pause.max(due)
    }

    /// Notes that a push of this process was answered (or may have been applied): sessions
    /// asked for before now are not used any more.
    fn pushed(&self) {
        if let Ok(mut queue) = self.lock() {
            queue.last_push = Some(Instant::now());
        }
    }

    /// Records how long a published write waited for its answer.
    fn observe_answer(&self, took: Duration) {
        if let Ok(mut queue) = self.lock() {
            queue.answer_delay = Some(match queue.answer_delay {
                Some(delay) => (delay.saturating_mul(3) + took) / 4,
                None => took,
            });
        }
    }
}

/// Pushes the deletes of answers this process has read (best effort: an answer left behind is
/// deleted by a leader once it is two minutes old).
async fn clean_up(store: &RemoteStore, session: ReceivePack, updates: Vec<RefUpdate>) {
    let outcome = store
        .run(move |store| store.push_updates(session, &updates, &[]))
        .await;
    if let Err(e) = outcome {
        tracing::debug!(error = %e, "the answers read could not be deleted now; a leader deletes them later");
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

/// What became of one write in a round.
pub(crate) enum Outcome {
    /// Answer the writer.
    Answer(Result<Revision, StoreError>),
    /// Back into the queue (with its publication, when it has one).
    Again,
    /// Back into the queue, now published in the remote's queue.
    Queued(Published),
}

/// What one round (one push attempt) did.
pub(crate) struct Round {
    /// Per write of the batch.
    outcomes: Vec<Outcome>,
    /// The branch tip the round built on.
    base: Option<ObjectId>,
    /// The tip pushed (`None`: the branch was not moved).
    tip: Option<ObjectId>,
    /// The push lost a compare-and-swap: nothing was written.
    lost: bool,
    /// The remote keeps a queue of pending refs (DESIGN §9.4).
    queue: bool,
    /// Pending writes of other processes folded into the branch.
    folded: usize,
    /// Commits the push added to the branch (0: it did not move).
    commits: usize,
    /// This process tried to move the branch (it led, DESIGN §9.4).
    led: bool,
    /// This process's writes are the oldest in the remote's queue: it leads the next round.
    leads_next: bool,
    /// Time spent fetching (pending writes, a tip pushed by another process) and pushing.
    fetching: Duration,
    pushing: Duration,
    /// Deletes of answers read, to push once the writers are answered.
    cleanup: Option<(ReceivePack, Vec<RefUpdate>)>,
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
fn push_batch(
    store: &RemoteStore,
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
    let cache = store.pinned_cache()?;
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
    let delete = |name: String, old: ObjectId| RefUpdate {
        name,
        old,
        new: zero,
    };
    if queue {
        metrics::histogram!(gitstate_core::metrics::QUEUE_PENDING)
            .record(listing.pending.len() as f64);
    }
    if !listing.pending.is_empty() {
        pending::crash_point("queue.listed");
    }
    let mut outcomes: Vec<Option<Outcome>> = batch.iter().map(|_| None).collect();
    // Updates besides the branch, all in the one (atomic) push.
    let mut updates: Vec<RefUpdate> = Vec::new();
    let mut withdrawn: Vec<usize> = Vec::new();
    let mut own: HashMap<&str, usize> = HashMap::new();
    let now = Instant::now();
    for (i, (write, published)) in batch.iter().enumerate() {
        let Some(p) = published else { continue };
        if let Some(commit) = listing.done.get(&p.id) {
            pending::crash_point("queue.answered");
            outcomes[i] = Some(Outcome::Answer(Ok(commit.to_string())));
            updates.push(delete(refs.name(Kind::Done, &p.id), *commit));
        } else if let Some(commit) = listing.rejected.get(&p.id) {
            outcomes[i] = Some(Outcome::Answer(Err(StoreError::Stale)));
            updates.push(delete(refs.name(Kind::Rejected, &p.id), *commit));
        } else if listing.pending.get(&p.id) == Some(&p.commit) {
            if write.deadline.is_some_and(|d| d <= now) {
                withdrawn.push(i);
                updates.push(delete(refs.name(Kind::Pending, &p.id), p.commit));
            } else {
                own.insert(p.id.as_str(), i);
            }
        } else {
            outcomes[i] = Some(Outcome::Answer(Err(StoreError::Remote(format!(
                "the write of {} left the remote's write queue ({}) without an answer",
                write.path,
                refs.name(Kind::Pending, &p.id)
            )))));
        }
    }

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
    // One request brings what the round lacks: the tip another process pushed, and the
    // pending commits with their trees. Their blobs stay on the remote: the chain names them
    // by id.
    let mut tip = session.tip(&state_ref);
    let lacking: HashMap<String, ObjectId> = tip
        .filter(|t| !cache.repo().has_object(t))
        .map(|t| (state_ref.clone(), t))
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
            // Others' writes wait for another leader; this process's own are in its cache.
            tracing::warn!(error = %e, "could not fetch the pending writes of other processes");
            chosen.retain(|(_, _, own)| own.is_some());
        }
    }
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
        // Answers nobody will read any more (their writer has read them, or is gone).
        let answered: std::collections::HashSet<String> =
            updates.iter().map(|u| u.name.clone()).collect();
        let mut stale = Vec::new();
        for (kind, map) in [
            (Kind::Done, &listing.done),
            (Kind::Rejected, &listing.rejected),
        ] {
            for (id, commit) in map {
                let name = refs.name(kind, id);
                if !answered.contains(name.as_str())
                    && pending::older_than(id, pending::ANSWER_KEPT)
                {
                    stale.push(delete(name, *commit));
                }
            }
        }
        updates.extend(stale.into_iter().take(MAX_BATCH_WRITES));
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
        let objects = store.pack_objects(repo, &paths, &on_remote)?;
        let queue_refs = updates.len() > usize::from(new_tip.is_some());
        let push_started = Instant::now();
        let pushed = store.push_updates(session, &updates, &objects)?;
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
    store: &RemoteStore,
    session: ReceivePack,
    batch: &[(QueuedWrite, Option<Published>)],
    mut updates: Vec<RefUpdate>,
    withdrawn: &[usize],
    mut outcomes: Vec<Option<Outcome>>,
    listing_empty: bool,
) -> Result<Round, StoreError> {
    let repo = store.pinned_cache()?.repo().with_object_memory();
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
    let objects = store.pack_objects(repo, &[], &[])?;
    if !updates.is_empty() {
        let push_started = Instant::now();
        let pushed = store.push_updates(session, &updates, &objects)?;
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
        store.pinned_cache()?.record_objects(&objects)?;
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
fn publish(
    store: &RemoteStore,
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
