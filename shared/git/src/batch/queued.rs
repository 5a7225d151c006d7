//! One write in the write queue (DESIGN §9.2, §9.4): what it changes and what it read, its
//! publication in the remote's queue, what became of it in a round, and the answer of a write
//! whose time ran out. Shared by the queue's driver and its rounds.

use std::time::Instant;

use gitstate_core::{Revision, StateChange, StatePath, StoreError};
use gix::ObjectId;

/// Most writes one push carries.
pub const MAX_BATCH_WRITES: usize = 64;
/// Most state bytes one push carries (a larger single write still goes alone).
pub const MAX_BATCH_BYTES: usize = 8 * 1024 * 1024;
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
    pub message: gitstate_core::Message,
    /// When the request started writing: the queue is served in this order.
    pub since: Instant,
    /// Past it, the write is not put into a push any more (answered [`StoreError::Busy`]).
    pub deadline: Option<Instant>,
}

impl QueuedWrite {
    pub(crate) fn size(&self) -> usize {
        match &self.change {
            StateChange::Write(bytes) => bytes.len(),
            StateChange::Delete | StateChange::DeleteWith(_) => 0,
        }
    }
}

/// A write of this process published as a pending ref of the remote's queue.
#[derive(Debug, Clone)]
pub(crate) struct PublishedWrite {
    /// The id in `refs/gitstate/queue/<branch>/pending/<id>`.
    pub id: String,
    /// The pending commit the ref was created with.
    pub commit: ObjectId,
}

/// The answer of a write whose deadline passed before its turn.
pub(crate) fn busy(write: &QueuedWrite) -> StoreError {
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
    Queued(PublishedWrite),
}
