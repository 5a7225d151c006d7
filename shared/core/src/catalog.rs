//! The `Catalog` port: a derived, rebuildable index of states, locks and their audit trail (git
//! stays the source of truth). Entrypoints record an event after each successful operation; a
//! catalog failure never fails the operation.

use std::fmt;
use std::time::SystemTime;

use async_trait::async_trait;
use serde::Deserialize;

/// What happened to a state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CatalogChange {
    /// A new version was stored.
    Write(StateFacts),
    /// The state was deleted.
    Delete,
    /// A lock was taken (the LockInfo as stored).
    Lock(LockFacts),
    /// A lock was released by its holder, or forced (`force`).
    Unlock {
        /// Released without naming the holder (force-unlock).
        force: bool,
    },
}

/// One event for the catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogEvent {
    /// Repository name (or the ad-hoc URL without credentials).
    pub repository: String,
    /// State path.
    pub path: String,
    /// Who did it: the lock holder's `Who`, or the caller's user name.
    pub who: String,
    /// When the server finished it.
    pub at: SystemTime,
    /// What happened.
    pub change: CatalogChange,
}

/// The readable facts of a state version (plaintext, before sealing).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateFacts {
    /// `serial`.
    pub serial: Option<u64>,
    /// `lineage`.
    pub lineage: Option<String>,
    /// `terraform_version`.
    pub terraform_version: Option<String>,
    /// Number of resource instances (managed and data), when readable.
    pub resource_count: Option<u64>,
    /// Size of the state as POSTed.
    pub size: u64,
}

#[derive(Deserialize)]
struct Header {
    serial: Option<u64>,
    lineage: Option<String>,
    terraform_version: Option<String>,
    resources: Option<Vec<ResourceHeader>>,
}

#[derive(Deserialize)]
struct ResourceHeader {
    #[serde(default)]
    instances: Vec<serde::de::IgnoredAny>,
}

impl StateFacts {
    /// Reads the facts of a Terraform state; an OpenTofu client-encrypted state has only its size
    /// (and serial/lineage, which OpenTofu keeps readable).
    pub fn of(state: &[u8]) -> StateFacts {
        let header: Option<Header> = serde_json::from_slice(state).ok();
        StateFacts {
            serial: header.as_ref().and_then(|h| h.serial),
            lineage: header.as_ref().and_then(|h| h.lineage.clone()),
            terraform_version: header.as_ref().and_then(|h| h.terraform_version.clone()),
            resource_count: header
                .as_ref()
                .and_then(|h| h.resources.as_ref())
                .map(|r| r.iter().map(|r| r.instances.len() as u64).sum()),
            size: state.len() as u64,
        }
    }
}

/// The lock as the catalog keeps it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct LockFacts {
    /// `ID`.
    #[serde(rename = "ID", default)]
    pub id: String,
    /// `Who`.
    #[serde(rename = "Who", default)]
    pub who: String,
    /// `Operation`.
    #[serde(rename = "Operation", default)]
    pub operation: String,
    /// `Created`.
    #[serde(rename = "Created", default)]
    pub created: String,
}

impl LockFacts {
    /// Reads a LockInfo document (missing fields stay empty).
    pub fn of(lock_info: &[u8]) -> LockFacts {
        serde_json::from_slice(lock_info).unwrap_or_default()
    }
}

/// Why the catalog could not record or answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the catalog failed: {0}")]
pub struct CatalogError(pub String);

/// The port. Implementations must make `record` idempotent enough for retries and must never let
/// an older serial overwrite a newer one.
#[async_trait]
pub trait Catalog: Send + Sync + fmt::Debug + 'static {
    /// Records one event.
    async fn record(&self, event: CatalogEvent) -> Result<(), CatalogError>;
}
