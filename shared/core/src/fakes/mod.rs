//! In-memory fakes of the ports ([`StateStore`], [`Sealer`], [`StoreRegistry`], [`Catalog`]), so that the protocol rules in
//! [`crate::Backend`] and the HTTP layer can be tested without git or a key service.
//!
//! They keep the rules the ports state (every mutation is compare-and-swap; a seal is bound to its
//! place and uses fresh key material) and let a test inject what real adapters do under load or
//! failure: another writer winning the compare-and-swap, a key service outage. They are not
//! adapters: nothing in a deployment uses them (the `fakes` feature is for tests).

mod catalog;
mod registry;
mod seal;
mod store;

pub use catalog::MemoryCatalog;
pub use registry::{fake_mark, MemoryRegistry};
pub use seal::{MemoryOpener, MemorySealer, FAKE_SEAL_PREFIX};
pub use store::{FakeCommit, MemoryStore};
