//! The names of the metrics the wire protocol records (docs/METRICS.md lists them with their
//! types and labels; the rest of gitstate's are in gitstate-core's `metrics`), and their
//! descriptions for an exporter. Labels take values from fixed sets only (a service, a step, the
//! request operation the work serves).

use std::cell::RefCell;

use metrics::{describe_counter, SharedString, Unit};

/// Requests to a git server, by `service` (upload-pack, receive-pack), `step`
/// (advertisement, ls-refs, fetch, push) and `operation` (the request operation the work serves,
/// [`serving`]).
pub const GIT_ROUND_TRIPS: &str = "gitstate_git_round_trips_total";
/// Pushes sent (one receive-pack request each).
pub const GIT_PUSHES: &str = "gitstate_git_pushes_total";
/// Bytes of the packs pushed.
pub const GIT_PUSHED_BYTES: &str = "gitstate_git_pushed_bytes_total";
/// Requests sent again on a new connection because a kept one was closed before the git server
/// answered (its idle timeout, a frozen Lambda container).
pub const GIT_CONNECTIONS_RENEWED: &str = "gitstate_git_connections_renewed_total";
/// Steps repeated because the connection to the git server broke during them, by `step` (refs,
/// fetch, push): steps that are safe to repeat (reading refs, a fetch) or whose outcome the next
/// advertisement told (a push that was not made).
pub const GIT_STEPS_REPEATED: &str = "gitstate_git_steps_repeated_total";

/// Describes these metrics to the installed recorder (beside gitstate-core's `describe`).
pub fn describe() {
    describe_counter!(
        GIT_ROUND_TRIPS,
        "Requests to a git server, by service and step"
    );
    describe_counter!(GIT_PUSHES, "Pushes sent to a git server");
    describe_counter!(GIT_PUSHED_BYTES, Unit::Bytes, "Bytes of the packs pushed");
    describe_counter!(
        GIT_CONNECTIONS_RENEWED,
        "Requests sent again on a new connection: a kept one was closed before the git server answered"
    );
    describe_counter!(
        GIT_STEPS_REPEATED,
        "Steps repeated because the connection to the git server broke during them, by step"
    );
}

thread_local! {
    static OPERATION: RefCell<Option<SharedString>> = const { RefCell::new(None) };
}

/// Runs `work` on this thread as serving `operation` (a label from a fixed set: the request
/// metrics' operations, or what names work that serves no request): the requests it sends to a
/// git server are counted under it. Restored afterwards, so a pooled thread carries nothing on.
pub fn serving<T>(operation: SharedString, work: impl FnOnce() -> T) -> T {
    struct Restore(Option<SharedString>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            OPERATION.with(|current| *current.borrow_mut() = previous);
        }
    }
    let previous = OPERATION.with(|current| current.borrow_mut().replace(operation));
    let _restore = Restore(previous);
    work()
}

/// The operation the work on this thread serves ([`serving`]), or `other`.
pub fn operation() -> SharedString {
    OPERATION
        .with(|current| current.borrow().clone())
        .unwrap_or_else(|| SharedString::const_str("other"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_serves_an_operation_only_while_its_work_runs() {
        assert_eq!(&*operation(), "other");
        let inside = serving("GET".into(), || {
            let nested = serving("queue".into(), operation);
            (operation(), nested)
        });
        assert_eq!((&*inside.0, &*inside.1), ("GET", "queue"));
        assert_eq!(&*operation(), "other");
        // Restored when the work panics too.
        let _ = std::panic::catch_unwind(|| serving("POST".into(), || panic!("work failed")));
        assert_eq!(&*operation(), "other");
    }
}
