//! Protocol plumbing under the stores: opening transports, pkt-lines, the send-pack client,
//! the protocol-v2 fetch client (`ls-refs`, partial `fetch`) and pack writing. Nothing here knows
//! about state files or locks.

pub mod delta;
pub mod fetchpack;
pub mod kept;
pub mod limits;
pub mod onepost;
pub mod pack;
pub mod pktline;
pub mod sendpack;
pub mod sessions;
pub mod ssh;
pub mod thin;
pub mod transport;
