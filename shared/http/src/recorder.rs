//! Telling the catalog about changes, off the requests' path and in order: each change goes to
//! one of a few lanes chosen by its state, and a lane records its changes one after the other in
//! the order they were answered. So a lock and the force-unlock that follows it reach the
//! catalog in that order, while different states are recorded side by side.

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use gitstate_core::{Catalog, CatalogChange, CatalogEvent};
use tokio::sync::{mpsc, Notify};
use tracing::Instrument;

/// Lanes recording side by side.
const LANES: usize = 8;
/// Changes one lane holds before new ones are dropped (and counted as failures).
const LANE_CAPACITY: usize = 4096;

/// A change to record: the event without its change, which is computed by the lane (reading a
/// large state's facts is CPU work, done on a blocking thread).
struct Job {
    repository: String,
    path: String,
    who: String,
    at: SystemTime,
    change: Box<dyn FnOnce() -> CatalogChange + Send>,
    span: tracing::Span,
}

/// The catalog's recorder: lanes started on first use (inside the runtime).
pub struct Recorder {
    catalog: Arc<dyn Catalog>,
    lanes: OnceLock<Vec<mpsc::Sender<Job>>>,
    /// Changes queued and not yet recorded, and a signal when that reaches zero.
    pending: Arc<(AtomicUsize, Notify)>,
}

/// Catalog updates that failed (or were dropped) since the process started.
static FAILURES: AtomicU64 = AtomicU64::new(0);

fn failed(error: &dyn std::fmt::Display) {
    let failures = FAILURES.fetch_add(1, Ordering::Relaxed) + 1;
    tracing::warn!(error = %error, failures, "the catalog was not updated; the next write or `gitstate catalog rebuild` repairs it");
}

impl Recorder {
    /// A recorder for `catalog`.
    pub fn new(catalog: Arc<dyn Catalog>) -> Recorder {
        Recorder {
            catalog,
            lanes: OnceLock::new(),
            pending: Arc::new((AtomicUsize::new(0), Notify::new())),
        }
    }

    fn lanes(&self) -> &[mpsc::Sender<Job>] {
        self.lanes.get_or_init(|| {
            (0..LANES)
                .map(|_| {
                    let (sender, mut receiver) = mpsc::channel::<Job>(LANE_CAPACITY);
                    let catalog = self.catalog.clone();
                    let pending = self.pending.clone();
                    tokio::spawn(async move {
                        while let Some(job) = receiver.recv().await {
                            let span = job.span.clone();
                            record(catalog.as_ref(), job).instrument(span).await;
                            if pending.0.fetch_sub(1, Ordering::AcqRel) == 1 {
                                pending.1.notify_waiters();
                            }
                        }
                    });
                    sender
                })
                .collect()
        })
    }

    /// Queues a change of `repository`/`path` by `who` (empty: anonymous), answered now;
    /// `change` is evaluated by the lane. Never waits: a full lane drops the change (counted,
    /// logged; the next write repairs the entry).
    pub fn tell(
        &self,
        repository: String,
        path: String,
        who: String,
        change: impl FnOnce() -> CatalogChange + Send + 'static,
    ) {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (&repository, &path).hash(&mut hasher);
        let lanes = self.lanes();
        let lane = &lanes[(hasher.finish() % lanes.len() as u64) as usize];
        let job = Job {
            repository,
            path,
            who,
            at: SystemTime::now(),
            change: Box::new(change),
            span: tracing::Span::current(),
        };
        self.pending.0.fetch_add(1, Ordering::AcqRel);
        if let Err(e) = lane.try_send(job) {
            self.pending.0.fetch_sub(1, Ordering::AcqRel);
            let _guard = e.into_inner().span.entered();
            failed(&"the catalog's queue is full");
        }
    }

    /// Waits until every queued change is recorded, at most `limit`. Lambda freezes a function
    /// between invocations, so its entrypoint flushes before answering: background work would
    /// otherwise wait for the next invocation, or be lost with the container.
    pub async fn flush(&self, limit: std::time::Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let drained = self.pending.1.notified();
            if self.pending.0.load(Ordering::Acquire) == 0 {
                return;
            }
            if tokio::time::timeout_at(deadline, drained).await.is_err() {
                tracing::warn!(
                    pending = self.pending.0.load(Ordering::Acquire),
                    "the catalog did not finish recording in time; the next write repairs it"
                );
                return;
            }
        }
    }
}

async fn record(catalog: &dyn Catalog, job: Job) {
    let change = match tokio::task::spawn_blocking(job.change).await {
        Ok(change) => change,
        Err(e) => return failed(&format!("reading the facts for the catalog failed: {e}")),
    };
    let event = CatalogEvent {
        repository: job.repository,
        path: job.path,
        who: if job.who.is_empty() {
            "anonymous".into()
        } else {
            job.who
        },
        at: job.at,
        change,
    };
    if let Err(e) = catalog.record(event).await {
        failed(&e);
    }
}
