//! gitstate's git wire protocol client, one job: talk git's protocols to a server. Opening
//! transports (http through kept clients, ssh, git://) behind the network guard, pkt-lines, the
//! send-pack client (and a push in one HTTP request), the protocol-v2 fetch client (`ls-refs`,
//! partial and shallow `fetch`), kept upload-pack sessions, pack writing, deltas and thin packs,
//! and the limits on what a remote may send.
//!
//! It never knows what it carries: no state files, locks, queues or commits of gitstate's own
//! (those are gitstate-git's, above it). Cargo holds this: it depends on `gitstate-url` (URLs,
//! [`NetworkGuard`](gitstate_url::NetworkGuard), credentials) and never on `gitstate-core`. Its
//! errors are [`WireError`]s, which gitstate-git maps to the stores' errors.

pub mod delta;
pub mod error;
pub mod fetchpack;
pub mod kept;
pub mod limits;
pub mod metrics;
pub mod onepost;
pub mod pack;
pub mod pktline;
pub mod sendpack;
pub mod sessions;
pub mod ssh;
pub mod thin;
pub mod transport;

pub use error::WireError;
