//! The names of gitstate's metrics, in one place but for the wire protocol's own
//! (gitstate-wire's `metrics`: round trips, pushes, renewed connections), which knows no core
//! (docs/METRICS.md lists them all with their types and labels). Every crate records through the `metrics` facade, which does nothing until a
//! runtime installs an exporter (`gitstate serve` and `gitstate wrap`: Prometheus at
//! `/_/metrics`).
//!
//! Labels take values from small fixed sets only (an operation, a status code, a step): never a
//! state path, a repository URL or anything a caller chose, which would be unbounded and may be
//! secret.

/// Requests on a state address, by `operation` (GET, POST, DELETE, LOCK, UNLOCK) and `status`.
pub const REQUESTS: &str = "gitstate_requests_total";
/// Seconds from a state request's arrival to its answer, by `operation` and `status`.
pub const REQUEST_SECONDS: &str = "gitstate_request_duration_seconds";

/// Locks this process created and has not released.
pub const LOCKS_HELD: &str = "gitstate_locks_held";
/// Lock branches created (a LOCK that acquired; a replay by the holder is not counted).
pub const LOCK_ACQUISITIONS: &str = "gitstate_lock_acquisitions_total";
/// Lock branches deleted (UNLOCK, force-unlock included).
pub const LOCK_RELEASES: &str = "gitstate_lock_releases_total";
/// Requests answered 423 (another holder), by `operation`.
pub const LOCK_CONFLICTS: &str = "gitstate_lock_conflicts_total";
/// Age in seconds (from its `Created`) of a lock that refused a LOCK, or that an UNLOCK
/// released, by `event` (`conflict`, `release`, `takeover`: taken over under `lock_ttl`): a lock
/// left behind shows as old conflicts.
pub const LOCK_AGE_SECONDS: &str = "gitstate_lock_age_seconds";
/// Writes read again and retried because the branch moved under them (a lost compare-and-swap
/// seen by the protocol layer).
pub const WRITE_RETRIES: &str = "gitstate_write_retries_total";

/// Packs fetched, by `kind` (tips: commits and trees; blobs: files by id; whole: gix's fetch).
pub const GIT_FETCHES: &str = "gitstate_git_fetches_total";
/// Bytes of the packs fetched, by `kind`.
pub const GIT_FETCHED_BYTES: &str = "gitstate_git_fetched_bytes_total";
/// Batched pushes that lost a compare-and-swap on the state branch (and were retried).
pub const GIT_CAS_LOSSES: &str = "gitstate_git_cas_losses_total";

/// State writes of this process waiting for the push that carries them (group commit, DESIGN
/// §9.2): the depth of its write queues.
pub const WRITES_WAITING: &str = "gitstate_writes_waiting";
/// Commits one push added to a state branch: this process's writes and the pending writes of
/// other processes it folded (one push, many writes, when writers queue up).
pub const BATCH_COMMITS: &str = "gitstate_batch_commits";
/// Writes waiting in the remote's queue (pending refs, DESIGN §9.4) when a round read it.
pub const QUEUE_PENDING: &str = "gitstate_queue_pending_writes";
/// Pending writes of other processes this process folded into the state branch.
pub const FOLDED_WRITES: &str = "gitstate_folded_writes_total";

/// Reads of a remote through the cache, by `result`: `hit` (the advertised tips and files were
/// all in the cache, nothing fetched) or `miss` (something was fetched).
pub const CACHE_READS: &str = "gitstate_cache_reads_total";

/// Seal and open calls of the sealer, by `operation` (seal, open) and `result` (ok, error).
pub const SEAL_CALLS: &str = "gitstate_seal_calls_total";
/// Seconds a seal or open took, by `operation`.
pub const SEAL_SECONDS: &str = "gitstate_seal_duration_seconds";
/// AWS KMS requests, by `call` (Encrypt, Decrypt) and `result` (ok, error).
pub const KMS_REQUESTS: &str = "gitstate_kms_requests_total";
/// Seconds an AWS KMS request took, by `call`.
pub const KMS_SECONDS: &str = "gitstate_kms_request_duration_seconds";

/// Password checks of team users, by `result`: `admitted` and `refused` (a bcrypt hash ran),
/// `busy` (too many were under way: answered 503 without a hash). A flood of named junk shows
/// here; junk that no configured user could match never hashes and is not counted.
pub const PASSWORD_CHECKS: &str = "gitstate_password_checks_total";

/// Registers the description of every series with the installed recorder (the `# HELP` lines).
pub fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(
        REQUESTS,
        "Requests on a state address, by operation and status"
    );
    describe_histogram!(
        REQUEST_SECONDS,
        Unit::Seconds,
        "Seconds from a state request's arrival to its answer, by operation and status"
    );
    describe_gauge!(
        LOCKS_HELD,
        "Locks this process created and has not released"
    );
    describe_counter!(LOCK_ACQUISITIONS, "Lock branches created");
    describe_histogram!(
        LOCK_AGE_SECONDS,
        Unit::Seconds,
        "Age of a lock (from its Created) that refused a LOCK or was released, by event"
    );
    describe_counter!(
        LOCK_RELEASES,
        "Lock branches deleted (force-unlock included)"
    );
    describe_counter!(
        LOCK_CONFLICTS,
        "Requests answered 423 because another holder has the lock, by operation"
    );
    describe_counter!(
        WRITE_RETRIES,
        "Writes retried because the state branch moved under them"
    );
    describe_counter!(GIT_FETCHES, "Packs fetched from a git server, by kind");
    describe_counter!(
        GIT_FETCHED_BYTES,
        Unit::Bytes,
        "Bytes of the packs fetched, by kind"
    );
    describe_counter!(
        GIT_CAS_LOSSES,
        "Batched pushes that lost a compare-and-swap on the state branch"
    );
    describe_gauge!(
        WRITES_WAITING,
        "State writes of this process waiting for the push that carries them"
    );
    describe_histogram!(
        BATCH_COMMITS,
        "Commits one push added to a state branch (own writes and folded ones)"
    );
    describe_histogram!(
        QUEUE_PENDING,
        "Writes waiting in the remote's queue (pending refs) when a round read it"
    );
    describe_counter!(
        FOLDED_WRITES,
        "Pending writes of other processes folded into the state branch"
    );
    describe_counter!(
        CACHE_READS,
        "Reads of a remote through the cache: hit (nothing fetched) or miss"
    );
    describe_counter!(
        SEAL_CALLS,
        "Seal and open calls of the sealer, by operation and result"
    );
    describe_histogram!(
        SEAL_SECONDS,
        Unit::Seconds,
        "Seconds a seal or open took, by operation"
    );
    describe_counter!(KMS_REQUESTS, "AWS KMS requests, by call and result");
    describe_histogram!(
        KMS_SECONDS,
        Unit::Seconds,
        "Seconds an AWS KMS request took, by call"
    );
    describe_counter!(
        PASSWORD_CHECKS,
        "Password hashes of team users, by result (admitted, refused; busy: refused without one)"
    );
}
