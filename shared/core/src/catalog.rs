//! The `Catalog` port: a derived, rebuildable index of states, locks and their audit trail (git
//! stays the source of truth). Entrypoints record an event after each successful operation; a
//! catalog failure never fails the operation.

use std::fmt;
use std::time::SystemTime;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub use crate::identifiers::ManagedBy;
use crate::links::{Graph, Links, Order, StateRef, Use};
/// What the checker reads of a state for the catalog: the port's events carry it as it is (the
/// same concept on two layers; the types and their rules are `gitstate-statefile`'s).
pub use gitstate_statefile::{ResourceIdentifier, StateFacts};

use crate::listing::ListQuery;

/// What happened to a state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CatalogChange {
    /// A new version was stored.
    Write(StateFacts),
    /// The state was deleted (in this commit; `None` when there was nothing to delete).
    Delete {
        /// The commit that removed the file.
        commit: Option<String>,
    },
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

impl From<&crate::lock::LockInfo> for LockFacts {
    /// What the catalog keeps of a lock taken with `info`.
    fn from(info: &crate::lock::LockInfo) -> LockFacts {
        LockFacts {
            id: info.id.clone(),
            who: info.who.clone(),
            operation: info.operation.clone(),
            created: info.created.clone(),
        }
    }
}

/// One state as the catalog knows it.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct StateEntry {
    /// Repository name.
    pub repository: String,
    /// State path.
    pub path: String,
    /// Latest serial seen.
    pub serial: Option<u64>,
    /// Lineage.
    pub lineage: Option<String>,
    /// Size of the state as POSTed.
    pub size: Option<u64>,
    /// Terraform version that wrote it.
    pub terraform_version: Option<String>,
    /// Resource instances.
    pub resource_count: Option<u64>,
    /// The commit holding this version.
    pub commit: Option<String>,
    /// Last writer.
    pub updated_by: Option<String>,
    /// When (RFC 3339).
    pub updated_at: Option<String>,
    /// Deleted since.
    pub deleted: bool,
    /// The lock holder's ID, `Who`, operation and creation time, when locked.
    pub lock: Option<LockEntry>,
}

/// One page of the catalog's state entries ([`Catalog::states`]).
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct CatalogPage {
    /// The entries, in (repository, path) order.
    pub states: Vec<StateEntry>,
    /// Whether entries follow this page.
    pub more: bool,
}

impl CatalogPage {
    /// The page `query` asks for out of every entry (`sorted` by repository and path): the rule
    /// every catalog's listing follows.
    pub fn of_sorted(sorted: impl IntoIterator<Item = StateEntry>, query: &ListQuery) -> Self {
        let after = query.after.as_deref().map(catalog_key);
        let mut page = CatalogPage::default();
        for entry in sorted {
            let key = (entry.repository.as_str(), entry.path.as_str());
            if !format!("{}/{}", key.0, key.1).starts_with(&query.prefix)
                || after.is_some_and(|after| key <= after)
            {
                continue;
            }
            if page.states.len() < query.limit {
                page.states.push(entry);
            } else {
                page.more = true;
                break;
            }
        }
        page
    }

    /// The cursor of the next page (`{repository}/{path}` of the last entry), when one follows.
    pub fn next(&self) -> Option<String> {
        match self.more {
            true => self
                .states
                .last()
                .map(|e| format!("{}/{}", e.repository, e.path)),
            false => None,
        }
    }
}

/// The (repository, path) a catalog cursor `{repository}/{path}` names (a repository name has
/// no `/`).
pub fn catalog_key(cursor: &str) -> (&str, &str) {
    cursor.split_once('/').unwrap_or((cursor, ""))
}

/// A held lock.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct LockEntry {
    /// `ID`.
    pub id: String,
    /// `Who`.
    pub who: String,
    /// `Operation`.
    pub operation: String,
    /// `Created`.
    pub created: String,
}

/// One audit event.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct AuditEntry {
    /// When (RFC 3339 with nanoseconds).
    pub at: String,
    /// `write`, `delete`, `lock`, `unlock` or `force-unlock`.
    pub action: String,
    /// Who.
    pub who: String,
    /// Serial written, for writes.
    pub serial: Option<u64>,
    /// Lock ID, for locks.
    pub lock_id: Option<String>,
    /// The commit, for writes and deletes that made one.
    pub commit: Option<String>,
}

/// An identifier that more than one state manages (the same resource type and attribute).
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Duplicate {
    /// The identifier.
    pub value: String,
    /// Its resource type.
    pub resource_type: String,
    /// Its attribute.
    pub field: String,
    /// Every resource instance holding it, sorted (two or more states).
    pub managed_by: Vec<ManagedBy>,
}

/// Why the catalog could not record or answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the catalog failed: {0}")]
pub struct CatalogError(pub String);

/// The port. Implementations must make `record` idempotent enough for retries and must never let
/// an older serial overwrite a newer one.
#[async_trait]
pub trait Catalog: Send + Sync + fmt::Debug + 'static {
    /// Records one event: the audit trail, the state entry and (for writes and deletes) the
    /// resource index.
    async fn record(&self, event: CatalogEvent) -> Result<(), CatalogError>;

    /// Rebuild: sets the entry of a state from what git holds now (unconditionally, with its
    /// lock or none) and its resource index, without an audit event and without updating the
    /// duplicate report (see [`Catalog::rebuild_duplicates`]). `event.change` must be a write.
    async fn rebuild_entry(
        &self,
        event: CatalogEvent,
        lock: Option<LockFacts>,
    ) -> Result<(), CatalogError>;

    /// Rebuild: marks as deleted (and drops from the index) every state of `repository` the
    /// catalog knows that is not in `present`.
    async fn forget_missing(
        &self,
        repository: &str,
        present: &std::collections::BTreeSet<String>,
    ) -> Result<usize, CatalogError>;

    /// Rebuild, last step: recomputes which identifiers more than one state holds from the
    /// whole index (the entries rebuilt before skip that check). Returns how many there are.
    async fn rebuild_duplicates(&self) -> Result<usize, CatalogError>;

    /// One page of the state entries, in (repository, path) order: those whose
    /// `{repository}/{path}` starts with `query.prefix`, after the entry `query.after` names
    /// (`{repository}/{path}`), at most `query.limit` (the rule: [`CatalogPage::of_sorted`]).
    async fn states(&self, query: &ListQuery) -> Result<CatalogPage, CatalogError>;

    /// One state's audit trail, oldest first.
    async fn audit(&self, repository: &str, path: &str) -> Result<Vec<AuditEntry>, CatalogError>;

    /// Which resource instances hold the identifier `value` (any type and attribute).
    async fn find(&self, value: &str) -> Result<Vec<ManagedBy>, CatalogError>;

    /// Identifiers (same type, attribute and value) managed by more than one state.
    async fn duplicates(&self) -> Result<Vec<Duplicate>, CatalogError>;

    /// Brings the links of `consumer` in line with the `uses` and `reads` of its current
    /// version (the rules: [`crate::links`]), every use looked up anew; returns how many it
    /// has. `record` does this itself for a write it takes (a delete drops them; an adapter may
    /// reuse what it looked up lately); a rebuild calls it for every state once every index
    /// entry is rebuilt, so that a provider walked later is found.
    async fn sync_links(
        &self,
        consumer: &StateRef,
        uses: &[Use],
        reads: &[StateRef],
    ) -> Result<usize, CatalogError>;

    /// What `state` uses of other states and what uses it, each link marked `dangling` where
    /// the provider no longer manages the identifier.
    async fn links(&self, state: &StateRef) -> Result<Links, CatalogError>;

    /// The states of `repository` (not deleted) and the links among them (links to other
    /// repositories left out).
    async fn graph(&self, repository: &str) -> Result<Graph, CatalogError>;

    /// The states of `repository` in an order for applies, and the circles
    /// ([`crate::links::order`]; links to other repositories do not order it).
    async fn order(&self, repository: &str) -> Result<Order, CatalogError> {
        Ok(self.graph(repository).await?.order())
    }
}

#[cfg(test)]
mod page_tests {
    use super::*;

    fn entry(repository: &str, path: &str) -> StateEntry {
        StateEntry {
            repository: repository.into(),
            path: path.into(),
            ..Default::default()
        }
    }

    fn keys(page: &CatalogPage) -> Vec<String> {
        page.states
            .iter()
            .map(|e| format!("{}/{}", e.repository, e.path))
            .collect()
    }

    #[test]
    fn catalog_pages_follow_repository_then_path() {
        // (repository, path) order: `team` before `team-a`, although "team/" sorts after
        // "team-a" as text.
        let all = [
            entry("team", "a.tfstate"),
            entry("team", "b/c.tfstate"),
            entry("team-a", "a.tfstate"),
            entry("zeta", "x.tfstate"),
        ];
        let mut query = ListQuery {
            prefix: String::new(),
            after: None,
            limit: 3,
        };
        let first = CatalogPage::of_sorted(all.clone(), &query);
        assert_eq!(
            keys(&first),
            ["team/a.tfstate", "team/b/c.tfstate", "team-a/a.tfstate"]
        );
        assert_eq!(first.next().as_deref(), Some("team-a/a.tfstate"));
        query.after = first.next();
        let second = CatalogPage::of_sorted(all.clone(), &query);
        assert_eq!(
            (keys(&second), second.more),
            (vec!["zeta/x.tfstate".to_owned()], false)
        );
        let folder = ListQuery {
            prefix: "team/b/".into(),
            ..ListQuery::all()
        };
        assert_eq!(
            keys(&CatalogPage::of_sorted(all, &folder)),
            ["team/b/c.tfstate"]
        );
    }
}
