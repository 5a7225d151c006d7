//! The deletes of answers this process has read (DESIGN §9.4, step 1): nobody waits for them,
//! so they go with this process's next push (a publication or a leading round) instead of a
//! push of their own, one receive-pack request less per answered batch. When no push comes
//! within [`SWEEP_AFTER`], they are pushed alone; what that misses (the process was frozen or
//! stopped), a leader deletes once the answer is two minutes old.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use gix::ObjectId;

use crate::pending::{Kind, Listing, QueueRefs};
use crate::push::push_updates;
use crate::target::Target;
use gitstate_wire::pack::Pack;
use gitstate_wire::sendpack::{ReceivePack, RefUpdate};

/// How long read answers wait for a push of this process to go with before they are pushed
/// alone.
pub(super) const SWEEP_AFTER: Duration = Duration::from_secs(1);

/// Answers read and not deleted yet, with the session of the round that read them (to push
/// them alone over).
#[derive(Default)]
pub(super) struct Unswept(Mutex<Option<(ReceivePack, Vec<RefUpdate>)>>);

impl Unswept {
    /// Keeps `updates` for a later push; `true` when nothing was kept before (the caller then
    /// arms a sweep, see [`sweep_later`]).
    pub(super) fn keep(&self, session: ReceivePack, updates: Vec<RefUpdate>) -> bool {
        let Ok(mut kept) = self.0.lock() else {
            return false;
        };
        match kept.as_mut() {
            Some((_, earlier)) => {
                earlier.extend(updates);
                false
            }
            None => {
                *kept = Some((session, updates));
                true
            }
        }
    }

    /// The deletes kept, for the round about to push (the session is not needed: the round
    /// has its own).
    pub(super) fn take(&self) -> Vec<RefUpdate> {
        self.take_all()
            .map(|(_, updates)| updates)
            .unwrap_or_default()
    }

    fn take_all(&self) -> Option<(ReceivePack, Vec<RefUpdate>)> {
        self.0.lock().ok().and_then(|mut kept| kept.take())
    }
}

/// Pushes what `unswept` still holds after [`SWEEP_AFTER`] (no round took it meanwhile);
/// `pushed` is told when it did push.
pub(super) async fn sweep_later(unswept: &Unswept, store: &Target, pushed: impl FnOnce()) {
    tokio::time::sleep(SWEEP_AFTER).await;
    if let Some((session, updates)) = unswept.take_all() {
        clean_up(store, session, updates).await;
        pushed();
    }
}

/// Pushes the deletes of answers this process has read (best effort: an answer left behind is
/// deleted by a leader once it is two minutes old).
async fn clean_up(store: &Target, session: ReceivePack, updates: Vec<RefUpdate>) {
    let outcome = store
        .run(move |store| push_updates(store.endpoint(), session, &updates, &Pack::default()))
        .await;
    if let Err(e) = outcome {
        tracing::debug!(error = %e, "the answers read could not be deleted now; a leader deletes them later");
    }
}

/// Of the deletes `kept` from earlier rounds, those whose answer `listing` still shows as it
/// was (another process may have deleted one since, and a delete of a ref that is gone would
/// fail the whole atomic push).
pub(super) fn still_listed(
    kept: Vec<RefUpdate>,
    listing: &Listing,
    refs: &QueueRefs,
) -> Vec<RefUpdate> {
    if kept.is_empty() {
        return kept;
    }
    let listed: HashSet<(String, ObjectId)> = [
        (Kind::Done, &listing.done),
        (Kind::Rejected, &listing.rejected),
    ]
    .into_iter()
    .flat_map(|(kind, answers)| answers.iter().map(move |(id, c)| (refs.name(kind, id), *c)))
    .collect();
    kept.into_iter()
        .filter(|u| listed.contains(&(u.name.clone(), u.old)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::answers::delete;

    fn id(hex: char) -> ObjectId {
        ObjectId::from_hex(hex.to_string().repeat(40).as_bytes()).unwrap()
    }

    #[test]
    fn only_answers_still_listed_as_they_were_are_deleted() {
        let refs = QueueRefs::new("refs/heads/main");
        let mut listing = Listing::default();
        listing.done.insert("1-a".into(), id('a'));
        listing.rejected.insert("2-b".into(), id('b'));
        listing.done.insert("3-c".into(), id('c'));
        let kept = vec![
            delete(refs.name(Kind::Done, "1-a"), id('a')),
            // Deleted by another process since it was read.
            delete(refs.name(Kind::Done, "9-z"), id('e')),
            delete(refs.name(Kind::Rejected, "2-b"), id('b')),
            // Listed, but not as it was read.
            delete(refs.name(Kind::Done, "3-c"), id('d')),
            // A rejected answer is not a done one.
            delete(refs.name(Kind::Rejected, "3-c"), id('c')),
        ];
        let names: Vec<String> = still_listed(kept, &listing, &refs)
            .into_iter()
            .map(|u| u.name)
            .collect();
        assert_eq!(
            names,
            [
                refs.name(Kind::Done, "1-a"),
                refs.name(Kind::Rejected, "2-b")
            ]
        );
    }
}
