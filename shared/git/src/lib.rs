//! gitstate's git engine on gix: stores that implement [`gitstate_core::StateStore`] on a local
//! bare repository ([`LocalStore`]) and on remotes.

pub mod local;
pub mod objects;

pub use local::LocalStore;
