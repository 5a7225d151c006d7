//! Which request operation the current work serves: the `operation` label of the request metrics
//! (`GET`, `POST`, … and the workspace API's), carried with a request's future so that what the
//! request costs further down (the git server's requests, in gitstate-git and gitstate-wire) is
//! counted under the same label (docs/METRICS.md). Work that serves no request (the write
//! queue's rounds, which fold the writes of many) names itself.

use std::future::Future;

use metrics::SharedString;

tokio::task_local! {
    static OPERATION: SharedString;
}

/// The label of work that serves no request and was not named.
pub const NO_OPERATION: &str = "other";

/// Runs `work` as serving `operation`: [`current`] answers it inside.
pub async fn serving<F: Future>(operation: impl Into<SharedString>, work: F) -> F::Output {
    OPERATION.scope(operation.into(), work).await
}

/// The operation the current task serves ([`serving`]), or [`NO_OPERATION`].
pub fn current() -> SharedString {
    OPERATION
        .try_with(Clone::clone)
        .unwrap_or_else(|_| SharedString::const_str(NO_OPERATION))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn work_knows_the_operation_it_serves_and_nothing_leaks_out() {
        assert_eq!(&*current(), NO_OPERATION);
        let inside = serving("LOCK", async { current() }).await;
        assert_eq!(&*inside, "LOCK");
        let nested = serving("POST", serving("queue", async { current() })).await;
        assert_eq!(&*nested, "queue");
        assert_eq!(&*current(), NO_OPERATION);
    }
}
