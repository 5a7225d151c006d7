//! The names of the metrics the wire protocol records (docs/METRICS.md lists them with their
//! types and labels; the rest of gitstate's are in gitstate-core's `metrics`), and their
//! descriptions for an exporter. Labels take values from fixed sets only (a service, a step).

use metrics::{describe_counter, Unit};

/// Requests to a git server, by `service` (upload-pack, receive-pack) and `step`
/// (advertisement, ls-refs, fetch, push).
pub const GIT_ROUND_TRIPS: &str = "gitstate_git_round_trips_total";
/// Pushes sent (one receive-pack request each).
pub const GIT_PUSHES: &str = "gitstate_git_pushes_total";
/// Bytes of the packs pushed.
pub const GIT_PUSHED_BYTES: &str = "gitstate_git_pushed_bytes_total";
/// Requests sent again on a new connection because a kept one was closed before the git server
/// answered (its idle timeout, a frozen Lambda container).
pub const GIT_CONNECTIONS_RENEWED: &str = "gitstate_git_connections_renewed_total";

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
}
