//! Where an identifier is managed: the catalog's side of the resource index's vocabulary. The
//! identifier itself and the identifying attributes are the state-file checker's, which reads
//! them ([`gitstate_statefile::identifiers`]); core re-exports them from [`crate::catalog`],
//! whose port names them (the same concept on two layers).

use serde::Serialize;

/// Where an identifier is managed: a resource instance in a state.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct ManagedBy {
    /// Repository name.
    pub repository: String,
    /// State path.
    pub path: String,
    /// Resource address in that state.
    pub address: String,
    /// Resource type.
    pub resource_type: String,
    /// Which identifying attribute holds the value.
    pub field: String,
}
