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

mod answers;
mod follow;
mod lead;
mod queued;
mod round;
mod sweep;
mod timeline;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use gitstate_core::{Revision, StoreError};
use gitstate_url::Credentials;
use gix::ObjectId;
use tokio::sync::oneshot;
use tracing::Instrument;

use crate::target::Target;
use follow::publish;
use gitstate_wire::sendpack::ReceivePack;
use lead::run_round;
use queued::{busy, Outcome};
pub(crate) use queued::{PublishedWrite, QueuedWrite, MAX_BATCH_BYTES, MAX_BATCH_WRITES};
use round::Round;
use timeline::Timeline;

/// First back-off bound after a lost compare-and-swap; doubles per loss in a row.
/// The `operation` label of the git requests the queue's own tasks send (its rounds and
/// sweeps), which serve the writes of many requests (docs/METRICS.md).
const QUEUE_OPERATION: &str = "queue";

const BACK_OFF_BASE: Duration = Duration::from_millis(10);
/// Cap of one back-off after a loss (the age-based yield below does the rest).
const BACK_OFF_MAX: Duration = Duration::from_millis(50);
/// Longest wait before any process folds a pending write whose own process does not.
const MAX_STAND_IN: Duration = Duration::from_secs(10);
/// Longest wait before a follower looks for its answers, however long answers took before.
const MAX_ANSWER_WAIT: Duration = Duration::from_secs(1);
/// First guess of how long a push attempt takes, before one was measured.
const FIRST_ATTEMPT_ESTIMATE: Duration = Duration::from_millis(250);

/// A write of a batch as a round takes it: the write, and its publication when it has one.
type Entry = (QueuedWrite, Option<PublishedWrite>);

/// Where a write's answer goes: its order, its writer, its timeline.
type Reply = (u64, oneshot::Sender<Result<Revision, StoreError>>, Timeline);

/// A write in this process's queue, with where its answer goes.
struct WaitingWrite {
    write: QueuedWrite,
    seq: u64,
    reply: oneshot::Sender<Result<Revision, StoreError>>,
    /// The write is in the remote's queue (DESIGN §9.4) as this pending ref.
    published: Option<PublishedWrite>,
    /// Its part of the queue's timeline (logged with its answer).
    timeline: Timeline,
}

#[derive(Default)]
struct Queue {
    waiting: Vec<WaitingWrite>,
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
    /// The last round lost a compare-and-swap, waited for another process's push, or folded
    /// other processes' writes: others write at the same time as this process. Only then does
    /// a write that finds nothing pending publish first (DESIGN §9.4); a tip another process
    /// pushed earlier (`contended`) is no race.
    raced: bool,
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
type Batch = (Vec<WaitingWrite>, Option<ReceivePack>);

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
    /// Deletes of answers read, waiting for this process's next push.
    unswept: sweep::Unswept,
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
            unswept: Default::default(),
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
        store: &Target,
        write: QueuedWrite,
        session: ReceivePack,
    ) -> Result<Revision, StoreError> {
        let (reply, answer) = oneshot::channel();
        let _waiting = WaitingGauge::enter();
        let start_driver = {
            let mut queue = self.lock()?;
            let seq = queue.next_seq;
            queue.next_seq += 1;
            queue.waiting.push(WaitingWrite {
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
            // Its git requests serve the writes of many requests: counted as the queue's.
            tokio::spawn(
                gitstate_core::operation::serving(QUEUE_OPERATION, async move {
                    queue.drive(store).await
                })
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
    fn put_back(&self, writes: Vec<WaitingWrite>) -> Result<(), StoreError> {
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

    /// Drives batches until nothing waits: per round, the courtesy pause, the next batch, the
    /// round itself, what it teaches (contention, timings), the answers, then the deletes it
    /// leaves for a later push and the publications, and the pause before the next.
    async fn drive(self: Arc<Self>, store: Target) {
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
            let started = Instant::now();
            let own_tip = self.lock().ok().and_then(|q| q.own_tip);
            let Some((writes, replies, mut round)) = self.round(&store, batch, session).await
            else {
                continue;
            };
            self.learn(
                &round,
                writes.len(),
                started,
                own_tip,
                courtesy,
                &mut losses,
            );
            let cleanup = round.cleanup.take();
            let outcomes = std::mem::take(&mut round.outcomes);
            let (mut back, unpublished) = self.settle(writes, replies, outcomes, &round);
            // The deletes of answers read go with this process's next push, or alone soon.
            if let Some((session, updates)) = cleanup {
                if self.unswept.keep(session, updates) {
                    let (queue, store) = (self.clone(), store.clone());
                    tokio::spawn(gitstate_core::operation::serving(
                        QUEUE_OPERATION,
                        async move {
                            sweep::sweep_later(&queue.unswept, &store, || queue.pushed()).await
                        },
                    ));
                }
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

    /// One round of `batch` on a blocking thread (see [`run_round`]). `None` when it failed
    /// as a whole (timeout, transport, task failure): the remote holds all of it or none of
    /// it, and every writer of the batch is answered with the error.
    async fn round(
        &self,
        store: &Target,
        batch: Vec<WaitingWrite>,
        session: Option<ReceivePack>,
    ) -> Option<(Vec<Entry>, Vec<Reply>, Round)> {
        let (writes, replies): (Vec<Entry>, Vec<Reply>) = batch
            .into_iter()
            .map(|w| ((w.write, w.published), (w.seq, w.reply, w.timeline)))
            .unzip();
        let count = writes.len();
        let stand_in = self.stand_in();
        let raced = self.lock().map(|q| q.raced).unwrap_or(true);
        let swept = self.unswept.take();
        let outcome = store
            .run(move |store| {
                let round = run_round(&store, session, &writes, stand_in, raced, swept);
                Ok((writes, round))
            })
            .await;
        self.pushed();
        match outcome {
            Ok((writes, Ok(round))) => Some((writes, replies, round)),
            Err(e) | Ok((_, Err(e))) => {
                tracing::warn!(writes = count, error = %e, "batch push failed; every write of it is answered with the error");
                for (_, reply, timeline) in replies {
                    timeline.answered(false);
                    let _ = reply.send(Err(e.clone()));
                }
                None
            }
        }
    }

    /// What a round teaches the queue: whether others write to the branch, how long an attempt
    /// takes, the losses in a row; logged at debug (`round`), counted in the metrics.
    fn learn(
        &self,
        round: &Round,
        count: usize,
        started: Instant,
        own_tip: Option<ObjectId>,
        courtesy: Duration,
        losses: &mut u32,
    ) {
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
            *losses += 1;
            self.observe(true, None, started.elapsed());
            tracing::debug!(
                writes = count,
                losses = *losses,
                "batch push lost a compare-and-swap"
            );
        } else {
            *losses = 0;
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
            queue.raced = !round.led || round.lost || round.folded > 0;
        }
    }

    /// Answers the writes the round answered; returns those that go again (published or not)
    /// and, apart, those to publish now (the round lost, and the remote keeps a queue).
    fn settle(
        &self,
        writes: Vec<Entry>,
        replies: Vec<Reply>,
        outcomes: Vec<Outcome>,
        round: &Round,
    ) -> (Vec<WaitingWrite>, Vec<WaitingWrite>) {
        let mut back = Vec::new();
        let mut unpublished = Vec::new();
        for (((write, published), (seq, reply, mut timeline)), outcome) in
            writes.into_iter().zip(replies).zip(outcomes)
        {
            timeline.rounds += 1;
            timeline.led += u32::from(round.led);
            let waiting = WaitingWrite {
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
                Outcome::Queued(published) => back.push(WaitingWrite {
                    published: Some(published),
                    timeline: Timeline {
                        published: timeline.published.or(Some(Instant::now())),
                        ..timeline
                    },
                    ..waiting
                }),
            }
        }
        (back, unpublished)
    }

    /// Publishes `writes` in the remote's queue; returns them, published where the server took
    /// them (the others stay this process's own and are retried as they are).
    async fn publish_all(&self, store: &Target, writes: Vec<WaitingWrite>) -> Vec<WaitingWrite> {
        if writes.is_empty() {
            return writes;
        }
        let (queued, rest): (Vec<(QueuedWrite, Option<PublishedWrite>)>, Vec<_>) = writes
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
                |(((write, _), (seq, reply, timeline)), published)| WaitingWrite {
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
    /// within half an attempt's time; standing in too early makes processes race for the
    /// branch again, as they did through a slow remote, where a follower's own attempts are
    /// few and its estimate the first guess).
    fn stand_in(&self) -> Duration {
        let (estimate, answer_delay) = self
            .lock()
            .map(|q| (q.estimate, q.answer_delay))
            .unwrap_or_default();
        estimate
            .unwrap_or(FIRST_ATTEMPT_ESTIMATE)
            .saturating_mul(4)
            .max(answer_delay.unwrap_or_default().saturating_mul(2))
            .clamp(Duration::from_secs(2), MAX_STAND_IN)
    }

    /// How long to wait before looking for the answers of this process's published writes
    /// (the earliest published at `first_published`): until three quarters of the usual wait for
    /// an answer have passed since then, and at least a quarter to half an attempt's time
    /// (jittered) and a quarter of the usual wait (up to 250 ms). Each look is a request to the
    /// git server: looking before an answer can be there only loads it.
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
        // Once due, looks again no sooner than a quarter of the usual wait: answers come with a
        // leader's push, a few per usual wait, not with every look.
        let again = answer_delay.unwrap_or_default() / 4;
        pause.max(due).max(again.min(MAX_ANSWER_WAIT / 4))
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

/// The pause after a batch's `losses`-th lost push in a row: core's one back-off, up to
/// `BACK_OFF_BASE · 2^(losses-1)`, capped at `BACK_OFF_MAX`.
fn back_off(losses: u32) -> Duration {
    gitstate_core::backend::full_jitter(BACK_OFF_BASE, BACK_OFF_MAX, losses.saturating_sub(1))
}
