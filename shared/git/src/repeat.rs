//! Repeating a step whose connection to the git server broke, inside the request's budget: a
//! step that changes nothing on the server (reading the refs, a fetch) is simply run again; a
//! push is repeated only when the next advertisement shows it was not made (`push.rs`). A link
//! that drops a connection now and then then costs a repeated step, not a failed request
//! (DESIGN §4).
//!
//! Bounded twice: at most [`MAX_REPEATS`] repeats of one step, and none once half of the
//! remote's timeout has passed since the step first began (a step that stalled to its limit has
//! spent the request's budget; the store's timeout answers it).

use std::time::{Duration, Instant};

use gitstate_core::StoreError;
use gitstate_wire::sendpack::ReceivePack;
use gitstate_wire::transport::Endpoint;

use crate::errors::from_wire;

/// The most times one step is repeated after its connection broke.
pub(crate) const MAX_REPEATS: u32 = 2;

/// The steps repeated, as the `step` label of [`gitstate_wire::metrics::GIT_STEPS_REPEATED`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum Step {
    /// Reading the refs (a receive-pack advertisement).
    Refs,
    /// Reading the refs and fetching what the cache lacks (upload-pack).
    Fetch,
    /// A push the next advertisement showed was not made.
    Push,
}

impl Step {
    fn label(self) -> &'static str {
        match self {
            Step::Refs => "refs",
            Step::Fetch => "fetch",
            Step::Push => "push",
        }
    }
}

/// The repeats left to a step begun at `began` against a remote with `timeout`.
pub(crate) struct Repeats {
    began: Instant,
    timeout: Duration,
    done: u32,
}

impl Repeats {
    /// A step begins now.
    pub(crate) fn new(timeout: Duration) -> Repeats {
        Repeats {
            began: Instant::now(),
            timeout,
            done: 0,
        }
    }

    /// Whether `step`, whose connection broke with `why`, may go again; when it may, logs it,
    /// counts it and pauses a little first (the one back-off, `full_jitter`).
    pub(crate) fn again(&mut self, step: Step, why: &str) -> bool {
        if self.done >= MAX_REPEATS || self.began.elapsed() >= self.timeout / 2 {
            return false;
        }
        self.done += 1;
        tracing::info!(
            error = %why,
            step = step.label(),
            repeat = self.done,
            "the connection to the git server broke during a step that is safe to repeat; repeating it"
        );
        metrics::counter!(gitstate_wire::metrics::GIT_STEPS_REPEATED, "step" => step.label())
            .increment(1);
        std::thread::sleep(gitstate_core::backend::full_jitter(
            Duration::from_millis(20),
            Duration::from_millis(200),
            self.done,
        ));
        true
    }
}

/// Runs `step`, which changes nothing on the server, again while it fails with
/// [`StoreError::Unavailable`] and [`Repeats::again`] allows.
pub(crate) fn repeated<T>(
    timeout: Duration,
    step: Step,
    mut work: impl FnMut() -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    let mut repeats = Repeats::new(timeout);
    loop {
        match work() {
            Err(StoreError::Unavailable(why)) if repeats.again(step, &why) => {}
            done => return done,
        }
    }
}

/// A receive-pack session: the remote's refs, read again when the connection broke
/// ([`repeated`]).
pub(crate) fn receive_pack(endpoint: &Endpoint) -> Result<ReceivePack, StoreError> {
    repeated(endpoint.timeout, Step::Refs, || {
        ReceivePack::connect(endpoint).map_err(from_wire)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_is_repeated_after_a_broken_connection_only_and_at_most_twice() {
        let timeout = Duration::from_secs(10);
        let mut tries = 0;
        let done: Result<u32, StoreError> = repeated(timeout, Step::Fetch, || {
            tries += 1;
            if tries < 3 {
                Err(StoreError::Unavailable("reset".into()))
            } else {
                Ok(tries)
            }
        });
        assert_eq!(done.unwrap(), 3, "two repeats, then the answer");

        let mut tries = 0;
        let failed: Result<(), StoreError> = repeated(timeout, Step::Fetch, || {
            tries += 1;
            Err(StoreError::Unavailable("reset".into()))
        });
        assert!(matches!(failed, Err(StoreError::Unavailable(_))));
        assert_eq!(tries, 1 + MAX_REPEATS);

        // What the server said is its answer, not a broken connection: never repeated.
        let mut tries = 0;
        let refused: Result<(), StoreError> = repeated(timeout, Step::Refs, || {
            tries += 1;
            Err(StoreError::Forbidden("no".into()))
        });
        assert!(matches!(refused, Err(StoreError::Forbidden(_))));
        assert_eq!(tries, 1);
    }

    #[test]
    fn no_repeat_once_half_the_timeout_has_passed() {
        let mut tries = 0;
        let stalled: Result<(), StoreError> =
            repeated(Duration::from_millis(40), Step::Fetch, || {
                tries += 1;
                std::thread::sleep(Duration::from_millis(25));
                Err(StoreError::Unavailable("stalled".into()))
            });
        assert!(matches!(stalled, Err(StoreError::Unavailable(_))));
        assert_eq!(tries, 1);
    }
}
