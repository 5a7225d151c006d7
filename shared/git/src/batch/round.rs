//! What one round of the write queue did ([`Round`]), and the remotes whose queue refs were
//! refused (this process then writes to them without the queue). A round leads (`lead.rs`) or
//! follows (`follow.rs`), DESIGN §9.4.

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use gix::ObjectId;

use super::queued::{Outcome, PublishedWrite, QueuedWrite};
use gitstate_core::StoreError;
use gitstate_wire::sendpack::{ReceivePack, RefUpdate};
use gitstate_wire::transport::Endpoint;

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
    /// Deletes of answers read when the round had nothing else to push: they wait for this
    /// process's next push (`sweep.rs`).
    pub(super) cleanup: Option<(ReceivePack, Vec<RefUpdate>)>,
}

impl Round {
    /// A round that wrote nothing yet: every write goes again unless told otherwise.
    pub(super) fn new(
        batch: &[(QueuedWrite, Option<PublishedWrite>)],
        queue: bool,
        led: bool,
    ) -> Round {
        Round {
            outcomes: batch.iter().map(|_| Outcome::Again).collect(),
            base: None,
            tip: None,
            lost: false,
            queue,
            folded: 0,
            commits: 0,
            led,
            leads_next: false,
            fetching: Duration::ZERO,
            pushing: Duration::ZERO,
            cleanup: None,
        }
    }

    /// A round that leaves the pushing to another process.
    pub(super) fn waiting(batch: &[(QueuedWrite, Option<PublishedWrite>)]) -> Round {
        Round::new(batch, true, false)
    }

    /// A round that wrote nothing because the branch moved under it.
    pub(super) fn lost(batch: &[(QueuedWrite, Option<PublishedWrite>)], queue: bool) -> Round {
        Round {
            lost: true,
            ..Round::new(batch, queue, true)
        }
    }
}

/// Remotes that refused the queue's refs (a hook, a protected namespace): this process writes
/// to them without the queue, as before it (DESIGN §9.4).
fn refused_queues() -> &'static Mutex<std::collections::HashSet<String>> {
    static REFUSED: OnceLock<Mutex<std::collections::HashSet<String>>> = OnceLock::new();
    REFUSED.get_or_init(Default::default)
}

pub(super) fn queue_refused(endpoint: &Endpoint) -> bool {
    refused_queues()
        .lock()
        .map(|r| r.contains(&endpoint.display))
        .unwrap_or(true)
}

/// Stops using the queue of `endpoint` in this process; logged once.
pub(super) fn refuse_queue(endpoint: &Endpoint, why: &StoreError) {
    if let Ok(mut refused) = refused_queues().lock() {
        if refused.insert(endpoint.display.clone()) {
            tracing::warn!(remote = %endpoint.display, error = %why, "the remote refused the write queue's refs (refs/gitstate/queue/…); writes to it go without the queue");
        }
    }
}
