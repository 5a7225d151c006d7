//! gitstate's core: what a state path is, what a lock is, and the rules of the Terraform `http`
//! backend protocol (lock checks, idempotent replays, contention retries), written against the
//! [`StateStore`] port. This crate knows neither HTTP nor git: the HTTP layer maps its results to
//! status codes, the git engine implements the port. It never parses a state body itself: the
//! checker below it (`gitstate-statefile`) reads it once, and core decides on the
//! `CheckedState` it gives.

pub mod backend;
pub mod blocking;
pub mod catalog;
pub mod commit;
#[cfg(any(test, feature = "fakes"))]
pub mod fakes;
pub mod history;
pub mod identifiers;
pub mod links;
pub mod listing;
pub mod lock;
pub mod lock_token;
pub mod metrics;
pub mod named_store;
pub mod operation;
pub mod path;
pub mod process;
pub mod scope;
pub mod seal;
pub mod store;
pub mod text;
pub mod time;
pub mod workspace;

pub use backend::{Acquired, Backend, BackendError, RetryPolicy, Written};
pub use blocking::BlockingStore;
pub use catalog::{
    AuditEntry, Catalog, CatalogChange, CatalogError, CatalogEvent, CatalogPage, Duplicate,
    LockEntry, LockFacts, ManagedBy, ResourceIdentifier, StateEntry, StateFacts,
};
pub use commit::{Author, Message};
pub use listing::{ListQuery, StateListing, StatePage, Version};
pub use lock::{LockInfo, TakenOver, Unlock, Unlocked};
pub use lock_token::{LockToken, Mark};
pub use named_store::NamedStore;
pub use path::{BranchName, PathConflict, PathError, RefError, StatePath, TreeEntry};
pub use scope::{Rights, Scope};
pub use seal::{Opener, Place, SealError, Sealer};
pub use store::{
    Authenticated, ExpectedLock, HeldLock, Intent, LockCreate, LockRead, RegistryError, Revision,
    Snapshot, StateChange, StateStore, StoreError, StoreRegistry, WriteAttempt, WriteBudget,
};
