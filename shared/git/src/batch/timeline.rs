//! Where a queued write's time went ([`Timeline`]), logged at debug with its answer: the
//! profile in docs/BENCHMARKS.md is read from these events.

use std::time::Instant;

/// Where a write's time in the queue went, logged at debug with its answer (`write answered`):
/// the profiles of docs/BENCHMARKS.md ("Where the time goes", "What bounds them") are read
/// from these.
#[derive(Debug, Clone, Copy)]
pub(super) struct Timeline {
    /// When it joined the queue.
    pub(super) queued: Instant,
    /// Rounds it was part of, and of those the ones this process led.
    pub(super) rounds: u32,
    pub(super) led: u32,
    /// When it was published in the remote's queue (first time).
    pub(super) published: Option<Instant>,
}

impl Timeline {
    pub(super) fn new() -> Timeline {
        Timeline {
            queued: Instant::now(),
            rounds: 0,
            led: 0,
            published: None,
        }
    }

    /// Logs the answer of a write with where its time went.
    pub(super) fn answered(&self, ok: bool) {
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
