//! gitstate's git engine on gix: stores that implement [`gitstate_core::StateStore`] on a local
//! bare repository ([`LocalStore`]) and on remote repositories ([`RemoteStore`]: smart HTTP(S),
//! `git://`, `file://`, ssh), with a shallow per-remote cache and a send-pack client.
//!
//! Porcelain: the stores (`local`, `remote`), the per-remote cache (`cache`), the write path
//! across writes and processes (`batch`: group commit; `pending`: the queue's refs on the remote),
//! history (`history`), paged listings (`listing`) and object reading/writing (`objects`). The
//! wire protocol under them (transports, pkt-lines, send-pack, fetch, pack writing, kept HTTP
//! clients) is gitstate-wire's, which knows no states or locks; its errors become
//! [`gitstate_core::StoreError`]s here (`errors::from_wire`).
//!
//! It never decides a protocol rule (whether a write may go, who holds a lock, what is a replay:
//! gitstate-core's `Backend`), and never moves a ref without the old id it expects: no force-push,
//! only compare-and-swap.

pub mod batch;
pub mod cache;
mod errors;
pub mod history;
mod listing;
pub mod local;
mod lookup;
pub mod objects;
mod pending;
mod push;
pub mod remote;
mod repeat;
pub mod signing;
mod target;

pub use gitstate_wire::limits::{
    max_object_bytes, object_limit, set_max_object_bytes, DEFAULT_MAX_ANSWER_BYTES,
};
pub use local::LocalStore;
pub use objects::Committer;
pub use remote::{RemoteConfig, RemoteStore, DEFAULT_TIMEOUT};
pub use signing::Signer;

pub(crate) use gitstate_core::lock::LOCK_REF_PREFIX;

// The wire's object limit before one is set is the core's default largest state, said twice
// because gitstate-wire knows no core: held equal here.
const _: () = assert!(
    gitstate_wire::limits::DEFAULT_MAX_STATE_BYTES
        == gitstate_core::backend::DEFAULT_MAX_STATE_BYTES as u64
);

/// The locks behind `tips` (lock ref name → tip), read from `repo`, sorted by path. A branch
/// under `locks/` whose name is not a valid state path is not a gitstate lock and is skipped.
pub(crate) fn held_locks(
    repo: &gix::Repository,
    tips: impl IntoIterator<Item = (String, gix::ObjectId)>,
) -> Result<Vec<gitstate_core::HeldLock>, gitstate_core::StoreError> {
    let mut locks = Vec::new();
    for (name, tip) in tips {
        let Some(path) = name
            .strip_prefix(LOCK_REF_PREFIX)
            .and_then(|p| gitstate_core::StatePath::parse(p).ok())
        else {
            continue;
        };
        let content = objects::read_file(repo, tip, &path.lock_file())?.unwrap_or_default();
        locks.push(gitstate_core::HeldLock {
            path: path.as_str().to_owned(),
            tip: tip.to_string(),
            content,
        });
    }
    locks.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(locks)
}
