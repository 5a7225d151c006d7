//! gitstate's git engine on gix: stores that implement [`gitstate_core::StateStore`] on a local
//! bare repository ([`LocalStore`]) and on remote repositories ([`RemoteStore`]: smart HTTP(S),
//! `git://`, `file://`, ssh), with a shallow per-remote cache and a send-pack client.
//!
//! Porcelain (the stores) lives in `local`, `remote` and `cache`; protocol plumbing (transports,
//! pkt-lines, send-pack, pack writing) in `plumbing`.

pub mod cache;
pub mod local;
pub mod objects;
pub mod plumbing;
pub mod remote;

pub use local::LocalStore;
pub use remote::{RemoteConfig, RemoteStore, DEFAULT_TIMEOUT};
