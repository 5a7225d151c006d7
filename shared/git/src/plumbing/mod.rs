//! Protocol plumbing under the stores: opening transports, pkt-lines, the send-pack client and pack
//! writing. Nothing here knows about state files or locks.

pub mod limits;
pub mod pack;
pub mod pktline;
pub mod sendpack;
pub mod ssh;
pub mod transport;
